#!/usr/bin/env python3
"""hf_video.py — transformers' Qwen3-VL video preprocessing of one file, timed: the peer of `qvl encode
--preprocess-only` in bench/video_bench.sh.

    bench/hf_video.py VIDEO [--num-frames N] [--fps F]

Reads the video as transformers does with PyAV (transformers.video_utils.load_video(backend="pyav"), sampled by
Qwen3VLVideoProcessor.sample_frames: every frame decoded up to the last sampled one, the sampled ones kept), then
runs Qwen3VLVideoProcessor on the frames with Qwen3-VL's published video_preprocessor_config.json values (budget
4096..25165824 pixels, fps 2, min/max frames 4/768, mean = std = 0.5), cap_pixels_per_frame=False (transformers
5.23's default). Prints one line: import, decode and processor seconds, the grid and the row count.
"""
import argparse
import functools
import time

t0 = time.perf_counter()
import torch  # noqa: E402
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # noqa: E402
from transformers.video_utils import load_video  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("video")
    ap.add_argument("--num-frames", type=int, default=None)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2, this project's VM)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t_import = time.perf_counter() - t0
    proc = Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824}, fps=a.fps, min_frames=4,
                                 max_frames=768, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    sample = functools.partial(proc.sample_frames, num_frames=a.num_frames, fps=None if a.num_frames else a.fps)
    t1 = time.perf_counter()
    frames, meta = load_video(a.video, backend="pyav", sample_indices_fn=sample)
    t2 = time.perf_counter()
    out = proc(videos=[frames], video_metadata=[meta], do_sample_frames=False, cap_pixels_per_frame=False,
               return_tensors="pt")
    t3 = time.perf_counter()
    g = out["video_grid_thw"][0].tolist()
    print(f"hf_video: import {t_import:.2f} s, decode {t2 - t1:.2f} s, processor {t3 - t2:.2f} s, "
          f"{len(meta.frames_indices)} frames, grid {g[0]}x{g[1]}x{g[2]}, rows {out['pixel_values_videos'].shape[0]}")


if __name__ == "__main__":
    main()
