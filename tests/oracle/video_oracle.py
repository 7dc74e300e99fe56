#!/usr/bin/env python3
"""Reference oracle for qvl's video input: frame sampling, preprocessing of given frames, decoding of the corpus.

Writes tests/fixtures/video.safetensors (byte-reproducibly) with

  sample.params   F64 [N, 6]  per case: total frames, native fps (0: unknown, metadata.fps=None),
                              requested fps (0: fps=None), num_frames (0: None), min_frames, max_frames
  sample.offsets  I64 [N + 1] case i's indices are sample.indices[offsets[i]:offsets[i+1]]
  sample.indices  I64 [sum]   Qwen3VLVideoProcessor.sample_frames(metadata, num_frames=, fps=) with the
                              processor's min_frames/max_frames (and fps when requested fps is 0) set per case

  pre.lut               F32 [3, 256]  the processor's fused rescale+normalize of u8 value u in channel c
  pre.<case>.frames     U8  [T, H, W, 3]  input frames (deterministic, see make_frames)
  pre.<case>.size       I64 [2]       size = {shortest_edge, longest_edge} given to the processor
  pre.<case>.grid       I64 [3]       video_grid_thw
  pre.<case>.codes      U8  [rows, 1536]  pixel_values_videos = pre.lut[c][codes] exactly (c = column // 512);
                                      the oracle checks that, so the float rows are stored losslessly in a quarter
                                      of the bytes

  dec.<clip>.info       F64 [2]       total frames and fps as qvl_video_load reports them (PyAV's stream.frames,
                                      or the decoded frame count where PyAV reports 0 or more than decode;
                                      stream.average_rate)
  dec.<clip>.indices    I64 [n]       sample_frames with the default parameters (fps 2, min 4, max 768)
  dec.<clip>.rgb        U8  [n, H, W, 3]  PyAV frame.to_ndarray(format="rgb24") of each sampled frame; for a
                                      clip with alpha: to_ndarray(format="rgba") through transformers'
                                      video_utils.convert_to_rgb (float32 blend over white), rounded half to even

  tim.clips             U8  [*]     the clips of the timing cases, file names joined by "\n" (tim.params column 0
                                      indexes them)
  tim.params            F64 [N, 5]  per timing case: clip, requested fps (0: None), num_frames (0: None),
                                      temporal_patch_size, metadata.fps (the container's average_rate)
  tim.offsets           I64 [N + 1] case i's frame indices are tim.indices[offsets[i]:offsets[i+1]]
  tim.indices           I64 [sum]   metadata.frames_indices as the video processor sampled them
  tim.ts_offsets        I64 [N + 1] case i's timestamps are tim.ts[ts_offsets[i]:ts_offsets[i+1]]
  tim.ts                F64 [sum]   the seconds of each temporal patch, as Qwen3VLProcessor computed them
  tim.prompt_offsets    I64 [N + 1]
  tim.prompt            U8  [sum]   the "<t seconds>" strings Qwen3VLProcessor put into the prompt, concatenated

Frames given as arrays are processed with do_sample_frames=False, cap_pixels_per_frame=False, return_tensors="pt".

Timing runs the whole Qwen3VLProcessor.__call__ (text + video, do_sample_frames=True, video_metadata from the clip)
and records what its own replace_video_token passed to and got from _calculate_timestamps, and the prompt text it
built. The processor needs a tokenizer only to map its special tokens to ids, and no Qwen tokenizer is available
offline, so a word-level tokenizer that knows just those tokens is built in memory (make_processor); the
timestamps and the "<t seconds>" strings do not depend on it.

Usage:  .venv/bin/python tests/oracle/video_oracle.py [--out tests/fixtures/video.safetensors]
        .venv/bin/python tests/oracle/video_oracle.py --write-clip-2997   (re-creates tests/data/video/video_2997.mp4)
"""
from __future__ import annotations

import argparse
import json
import os
import fractions
import platform
import re
import sys

import av
import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.video_utils import VideoMetadata, convert_to_rgb

import safetensors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import save_deterministic  # noqa: E402  (sorted header, byte-reproducible)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# pixel formats of the corpus that carry alpha (qvl: AV_PIX_FMT_FLAG_ALPHA)
ALPHA_FORMATS = {"rgba", "bgra", "argb", "abgr", "yuva420p", "yuva444p", "ya8", "pal8"}
CLIPS = ["video_testsrc_30.mp4", "video_testsrc_30.webm", "video_25fps.mkv", "video_3frames.mp4", "video_alpha.mov",
         "video_editlist.mp4", "video_2997.mp4"]


def die(msg: str) -> None:
    print(f"video_oracle: error: {msg}", file=sys.stderr)
    sys.exit(1)


# --------------------------------------------------------------------------------------------------------------------
# (a) frame sampling


def sample(total: int, video_fps: float, fps: float, num_frames: int, min_frames: int, max_frames: int) -> np.ndarray:
    proc = Qwen3VLVideoProcessor()
    proc.min_frames, proc.max_frames = min_frames, max_frames
    if fps == 0 and num_frames == 0:
        proc.fps = None  # the fps=None, num_frames=None branch
    meta = VideoMetadata(total_num_frames=total, fps=video_fps if video_fps > 0 else None)
    if num_frames > 0:
        idx = proc.sample_frames(meta, num_frames=num_frames, fps=None)
    else:
        idx = proc.sample_frames(meta, fps=fps if fps > 0 else None)
    return np.asarray(idx, dtype=np.int64)


def sampling_cases() -> list[tuple]:
    cases = []
    totals = [1, 3, 4, 7, 30, 90, 300, 7200, 10001]
    for total in totals:
        for vfps in [24, 25, 29.97, 30, 60]:
            for fps in [2, 1, 0.5, 4]:
                cases.append((total, vfps, fps, 0, 4, 768))
        for nf in [5, 16]:
            cases.append((total, 30, 0, nf, 4, 768))
        cases.append((total, 0, 2, 0, 4, 768))      # native fps unknown: 24 assumed
        cases.append((total, 30, 2, 0, 4, 8))       # max_frames 8
        cases.append((total, 30, 0.5, 0, 1, 768))   # min_frames 1
        cases.append((total, 30, 2, 0, 10, 768))    # min_frames 10 (> total for short clips)
        cases.append((total, 30, 0, 0, 4, 768))     # fps=None, num_frames=None: every frame within [min, max]
        cases.append((total, 30, 0, 0, 4, 8))
    cases += [(30000 * 1001 // 1000, 30000 / 1001, 2, 0, 4, 768), (59, 29.97, 3, 0, 4, 768), (1, 30, 0, 1, 4, 768)]
    return cases


# --------------------------------------------------------------------------------------------------------------------
# (b) preprocessing of frames given as arrays


def make_frames(t: int, h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients plus a little hashed noise, different in every frame."""
    f, y, x, c = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    v = (x * 3 + y * 5 + f * 17 + c * 60 + seed * 7) % 256
    noise = ((x * 73856093) ^ (y * 19349663) ^ (f * 83492791) ^ (c * 2654435761) ^ seed) % 23
    return ((v + noise) % 256).astype(np.uint8)


PRE_CASES = [
    # name, T, H, W, (shortest_edge, longest_edge), seed
    ("t5_96x136", 5, 96, 136, (4096, 25165824), 1),     # odd T, json limits
    ("t7_70x50", 7, 70, 50, (4096, 25165824), 2),       # odd T, sides rounded down and up
    ("t4_64x48", 4, 64, 48, (4096, 25165824), 3),       # even T
    ("t2_32x40_min", 2, 32, 40, (4096, 25165824), 4),   # t̄·h̄·w̄ < min_pixels: scaled up
    ("t3_100x90_max", 3, 100, 90, (4096, 16384), 5),    # t̄·h̄·w̄ > max_pixels: scaled down
    ("t2_20x48_small", 2, 20, 48, (4096, 25165824), 6),  # a side below 32: scaled up to 32 first
]


def rescale_lut(proc: Qwen3VLVideoProcessor) -> torch.Tensor:
    ramp = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 1, 256).expand(1, 1, 3, 1, 256).contiguous()
    out = proc.rescale_and_normalize(ramp, True, proc.rescale_factor, True, proc.image_mean, proc.image_std)
    return out.reshape(3, 256).to(torch.float32).contiguous()


def preprocess_case(frames: np.ndarray, size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    proc = Qwen3VLVideoProcessor(size={"shortest_edge": size[0], "longest_edge": size[1]})
    out = proc(videos=[frames], do_sample_frames=False, cap_pixels_per_frame=False, return_tensors="pt")
    return out["pixel_values_videos"], out["video_grid_thw"]


def encode_codes(pv: torch.Tensor, lut: torch.Tensor, name: str) -> torch.Tensor:
    """Inverse of lut per column channel; fails unless lut[c][codes] reproduces pv bit for bit."""
    cols = pv.shape[1]
    chan = torch.arange(cols) // (cols // 3)
    codes = torch.empty(pv.shape, dtype=torch.uint8)
    for c in range(3):
        sel = pv[:, chan == c]
        # lut is increasing: nearest entry by searchsorted on the sorted table
        pos = torch.searchsorted(lut[c].contiguous(), sel.contiguous()).clamp(0, 255)
        codes[:, chan == c] = pos.to(torch.uint8)
        if not torch.equal(lut[c][pos], sel):
            die(f"{name}: pixel values of channel {c} are not all in the rescale table")
    return codes


# --------------------------------------------------------------------------------------------------------------------
# (c) decoding of the corpus with PyAV, as transformers' read_video_pyav does


def decode_clip(path: str) -> tuple[float, float, np.ndarray, np.ndarray]:
    with av.open(path) as c:
        s = c.streams.video[0]
        total = s.frames
        fps = float(s.average_rate) if s.average_rate else 24.0
        decoded = sum(1 for _ in c.decode(video=0))
        # as qvl does: no count in the header (webm, mkv) -> count by decoding; a header count above the frames
        # the stream decodes to (an mp4 edit list) -> sample over the decoded frames. (read_video_pyav would sample
        # with the header's count and silently return fewer frames.)
        if total == 0 or decoded < total:
            total = decoded
    idx = sample(total, fps, 2, 0, 4, 768)
    frames = []
    with av.open(path) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i > idx[-1]:
                break
            for _ in range(int((idx == i).sum())):
                if f.format.name in ALPHA_FORMATS:
                    rgba = torch.from_numpy(f.to_ndarray(format="rgba")).permute(2, 0, 1).unsqueeze(0)
                    blended = convert_to_rgb(rgba)  # float32 when any alpha < 255
                    rgb = blended.float().round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()
                else:
                    rgb = f.to_ndarray(format="rgb24")
                frames.append(rgb)
    return float(total), fps, idx, np.stack(frames)


# --------------------------------------------------------------------------------------------------------------------
# (d) prompt timestamps: the real Qwen3VLProcessor on the decoded clips

# requested fps (0: None), num_frames (0: None), temporal_patch_size. With fps=None and num_frames set,
# sample_frames takes num_frames as given (5 and 7: odd counts, padded by repeating the last index).
TIMING_SETTINGS = [(2, 0, 2), (3, 0, 2), (4, 0, 2), (0, 5, 2), (0, 7, 2), (1, 0, 1), (0, 7, 3)]
SPECIAL_TOKENS = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]


def make_processor(temporal_patch: int) -> Qwen3VLProcessor:
    vocab = {"[UNK]": 0, **{t: i + 1 for i, t in enumerate(SPECIAL_TOKENS)}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", additional_special_tokens=SPECIAL_TOKENS)
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                            video_processor=Qwen3VLVideoProcessor(temporal_patch_size=temporal_patch))


def decode_all(path: str, total: int) -> np.ndarray:
    """Every frame as rgb24 (the pixels do not enter the timing; the clip's own frames keep the call realistic)."""
    with av.open(path) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    if len(frames) < total:
        die(f"{path}: {len(frames)} frames decoded, {total} expected")
    return np.stack(frames[:total])


def timing_case(frames: np.ndarray, total: int, src_fps: float, fps: float, num_frames: int, tp: int, name: str):
    proc = make_processor(tp)
    calls, placeholders = [], []
    calc, replace = proc._calculate_timestamps, proc.replace_video_token

    def calc_rec(indices, video_fps, merge_size=2):
        before = [int(i) for i in indices]  # _calculate_timestamps extends a list argument in place
        out = calc(indices, video_fps, merge_size)
        calls.append((before, video_fps, merge_size, list(out)))
        return out

    def replace_rec(video_inputs, video_idx, **kwargs):
        placeholders.append(replace(video_inputs, video_idx, **kwargs))
        return placeholders[-1]

    proc._calculate_timestamps, proc.replace_video_token = calc_rec, replace_rec
    meta = VideoMetadata(total_num_frames=total, fps=src_fps)
    out = proc(text=["<|video_pad|>"], videos=[frames],
               videos_kwargs=dict(video_metadata=[meta], do_sample_frames=True, cap_pixels_per_frame=False,
                                  fps=fps if fps > 0 else None, num_frames=num_frames if num_frames > 0 else None))
    if len(calls) != 1 or len(placeholders) != 1:
        die(f"{name}: expected one timestamp computation, got {len(calls)}")
    idx, video_fps, merge, ts = calls[0]
    if merge != tp or video_fps != src_fps or not all(isinstance(t, float) for t in ts):
        die(f"{name}: timestamps computed with merge {merge}, fps {video_fps!r}")
    if len(ts) != int(out["video_grid_thw"][0][0]):
        die(f"{name}: {len(ts)} timestamps for grid {out['video_grid_thw'][0].tolist()}")
    prompt = "".join(re.findall(r"<[^<>|]* seconds>", placeholders[0]))
    if prompt != "".join(f"<{t:.1f} seconds>" for t in ts):
        die(f"{name}: prompt {prompt!r} does not print the timestamps {ts}")
    return np.asarray(idx, dtype=np.int64), float(video_fps), np.asarray(ts, dtype=np.float64), prompt


def write_clip_2997(path: str) -> None:
    """50 frames of 16x16 mpeg4 at 30000/1001 fps (a non-integer rate), deterministic for one PyAV build."""
    with av.open(path, "w", format="mp4", options={"fflags": "+bitexact"}) as c:
        s = c.add_stream("mpeg4", rate=fractions.Fraction(30000, 1001), options={"flags": "+bitexact"})
        s.width, s.height, s.pix_fmt = 16, 16, "yuv420p"
        s.codec_context.time_base = fractions.Fraction(1001, 30000)
        s.codec_context.options = {"flags": "+bitexact", "qscale": "4"}
        y, x = np.mgrid[0:16, 0:16]
        for i in range(50):
            img = np.stack([(x * 16 + i * 5) % 256, (y * 16 + i * 3) % 256, ((x + y) * 8 + i * 7) % 256], -1)
            f = av.VideoFrame.from_ndarray(img.astype(np.uint8), format="rgb24")
            f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "video.safetensors"))
    ap.add_argument("--write-clip-2997", action="store_true", help="write tests/data/video/video_2997.mp4 and stop")
    args = ap.parse_args()
    if args.write_clip_2997:
        path = os.path.join(ROOT, "tests", "data", "video", "video_2997.mp4")
        write_clip_2997(path)
        print(f"wrote {path}: {os.path.getsize(path)} bytes")
        return
    torch.set_num_threads(1)
    tensors: dict[str, torch.Tensor] = {}

    cases = sampling_cases()
    params, offsets, indices = [], [0], []
    for case in cases:
        idx = sample(*case)
        params.append([float(x) for x in case])
        indices.append(idx)
        offsets.append(offsets[-1] + len(idx))
    tensors["sample.params"] = torch.tensor(params, dtype=torch.float64)
    tensors["sample.offsets"] = torch.tensor(offsets, dtype=torch.int64)
    tensors["sample.indices"] = torch.from_numpy(np.concatenate(indices)).to(torch.int64)

    lut = rescale_lut(Qwen3VLVideoProcessor())
    tensors["pre.lut"] = lut
    pre_desc = {}
    for name, t, h, w, size, seed in PRE_CASES:
        frames = make_frames(t, h, w, seed)
        pv, grid = preprocess_case(frames, size)
        tensors[f"pre.{name}.frames"] = torch.from_numpy(frames)
        tensors[f"pre.{name}.size"] = torch.tensor(size, dtype=torch.int64)
        tensors[f"pre.{name}.grid"] = grid.reshape(3).to(torch.int64)
        tensors[f"pre.{name}.codes"] = encode_codes(pv.to(torch.float32), lut, name)
        pre_desc[name] = {"T": t, "H": h, "W": w, "size": list(size), "grid": grid.reshape(3).tolist(),
                          "rows": pv.shape[0]}

    dec_desc = {}
    tim_params, tim_idx, tim_ts, tim_prompt, tim_desc = [], [], [], [], []
    for clip in CLIPS:
        total, fps, idx, rgb = decode_clip(os.path.join(ROOT, "tests", "data", "video", clip))
        key = clip.replace("video_", "").replace(".", "_")
        tensors[f"dec.{key}.info"] = torch.tensor([total, fps], dtype=torch.float64)
        tensors[f"dec.{key}.indices"] = torch.from_numpy(idx)
        tensors[f"dec.{key}.rgb"] = torch.from_numpy(np.ascontiguousarray(rgb))
        dec_desc[key] = {"file": clip, "total": total, "fps": fps, "indices": idx.tolist(), "shape": list(rgb.shape)}
        frames = decode_all(os.path.join(ROOT, "tests", "data", "video", clip), int(total))
        for fps_req, nf, tp in TIMING_SETTINGS:
            name = f"{clip} fps={fps_req} num_frames={nf} temporal_patch={tp}"
            t_idx, t_fps, ts, prompt = timing_case(frames, int(total), fps, fps_req, nf, tp, name)
            if (fps_req, nf, tp) == (2, 0, 2) and not np.array_equal(t_idx, idx):
                die(f"{name}: the processor sampled {t_idx.tolist()}, sample_frames {idx.tolist()}")
            tim_params.append([float(CLIPS.index(clip)), float(fps_req), float(nf), float(tp), t_fps])
            tim_idx.append(t_idx)
            tim_ts.append(ts)
            tim_prompt.append(np.frombuffer(prompt.encode("ascii"), dtype=np.uint8))
            tim_desc.append({"case": name, "prompt": prompt})
    offs = lambda parts: torch.tensor(np.concatenate([[0], np.cumsum([len(p) for p in parts])]), dtype=torch.int64)
    tensors["tim.clips"] = torch.from_numpy(np.frombuffer("\n".join(CLIPS).encode("ascii"), dtype=np.uint8).copy())
    tensors["tim.params"] = torch.tensor(tim_params, dtype=torch.float64)
    tensors["tim.offsets"] = offs(tim_idx)
    tensors["tim.indices"] = torch.from_numpy(np.concatenate(tim_idx))
    tensors["tim.ts_offsets"] = offs(tim_ts)
    tensors["tim.ts"] = torch.from_numpy(np.concatenate(tim_ts))
    tensors["tim.prompt_offsets"] = offs(tim_prompt)
    tensors["tim.prompt"] = torch.from_numpy(np.concatenate(tim_prompt).copy())

    metadata = {
        "generator": "tests/oracle/video_oracle.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "av": av.__version__,
        "av_ffmpeg": json.dumps({k: ".".join(map(str, v)) for k, v in av.library_versions.items()}, sort_keys=True),
        "python": platform.python_version(),
        "sample_columns": "total,video_fps(0=unknown),fps(0=None),num_frames(0=None),min_frames,max_frames",
        "n_sample_cases": str(len(cases)),
        "pre_cases": json.dumps(pre_desc, sort_keys=True),
        "dec_clips": json.dumps(dec_desc, sort_keys=True),
        "tim_columns": "clip,fps(0=None),num_frames(0=None),temporal_patch_size,metadata.fps",
        "tim_cases": json.dumps(tim_desc, sort_keys=True),
    }
    save_deterministic(tensors, args.out, metadata)
    print(f"wrote {args.out}: {len(cases)} sampling cases, {len(PRE_CASES)} preprocess cases, {len(CLIPS)} clips, "
          f"{len(tim_params)} timing cases, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
