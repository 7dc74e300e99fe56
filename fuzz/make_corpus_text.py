#!/usr/bin/env python3
"""make_corpus_text.py — write the seed corpora for fuzz_npy (fuzz/corpus/npy/), fuzz_config
(fuzz/corpus/config/) and fuzz_preproc (fuzz/corpus/preproc/: one byte, 0 for preprocessor_config.json and 1 for
video_preprocessor_config.json, then the JSON): small valid, malformed and hostile files, each under 4 KB. Plain python3, no
dependencies; rerun after editing (it only adds or overwrites the files it names)."""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def npy(descr, shape, data, version=(1, 0), fortran=False, header=None, magic=b"\x93NUMPY"):
    """A .npy file: magic, version, header length (2 bytes for 1.0, 4 for 2.0/3.0), the dict padded to 64."""
    text = header if header is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", "(%s)" % "".join("%d," % d for d in shape) if len(shape) == 1
        else "(" + ", ".join(str(d) for d in shape) + ")")
    lenbytes = 2 if version[0] == 1 else 4
    pre = len(magic) + 2 + lenbytes
    pad = -(pre + len(text) + 1) % 64
    body = (text + " " * pad + "\n").encode("latin1")
    hl = struct.pack("<H" if lenbytes == 2 else "<I", len(body))
    return magic + bytes(version) + hl + body + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


NPY = {
    "valid_f4_2x3": npy("<f4", (2, 3), f32(1, 2, 3, 4, 5, 6)),
    "valid_f8_1d": npy("<f8", (3,), struct.pack("<3d", 0.5, -1e300, 7)),
    "valid_f2_3d_v2": npy("<f2", (2, 1, 2), struct.pack("<4H", 0x3c00, 0x7c00, 0xfc00, 0x7e00), version=(2, 0)),
    "valid_v3": npy("<f4", (1, 1), f32(3), version=(3, 0)),
    "valid_zero_rows": npy("<f4", (0, 5), b""),
    "bad_fortran": npy("<f4", (2, 2), f32(1, 2, 3, 4), fortran=True),
    "bad_truncated": npy("<f4", (4, 4), f32(1, 2, 3)),
    "bad_magic": npy("<f4", (1, 1), f32(1), magic=b"\x93NUMPZ"),
    "bad_descr": npy(">i8", (1, 1), b"\0" * 8),
    "bad_0d": npy("<f4", (), f32(1), header="{'descr': '<f4', 'fortran_order': False, 'shape': (), }"),
    "bad_overflow": npy("<f4", (1 << 40, 1 << 40), b""),
    "bad_header": npy("<f4", (1,), f32(1), header="{'descr': '<f4', 'shape': (1,"),
    "bad_version": npy("<f4", (1, 1), f32(1), version=(9, 0)),
}

VISION = {"deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh",
          "hidden_size": 1024, "in_channels": 3, "intermediate_size": 4096, "model_type": "qwen3_vl",
          "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048, "patch_size": 16,
          "spatial_merge_size": 2, "temporal_patch_size": 2}
Q35 = {"depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
       "intermediate_size": 4304, "model_type": "qwen3_5", "num_heads": 16, "num_position_embeddings": 2304,
       "out_hidden_size": 5120, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
IMAGE = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "merge_size": 2, "patch_size": 16,
         "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "temporal_patch_size": 2}
VIDEO = {"fps": 2, "min_frames": 4, "max_frames": 768, "size": {"longest_edge": 25165824, "shortest_edge": 4096},
         "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2}


def js(o):
    return json.dumps(o, indent=1).encode()


CONFIG = {
    "valid_qwen3_vl_2b": js({"model_type": "qwen3_vl", "text_config": {"hidden_size": 2048}, "vision_config": VISION}),
    "valid_qwen3_5": js({"model_type": "qwen3_5", "vision_config": Q35}),
    "valid_vision_only": js(dict(Q35, model_type="qwen3_5_vision")),
    "valid_image_processor": js(IMAGE),
    "valid_image_legacy_pixels": js(dict(IMAGE, min_pixels=3136, max_pixels=12845056)),
    "valid_video_processor": js(VIDEO),
    "bad_not_object": b"[1, 2, 3]",
    "bad_truncated": js({"model_type": "qwen3_vl", "vision_config": VISION})[:150],
    "bad_heads": js({"model_type": "qwen3_vl", "vision_config": dict(VISION, num_heads=7)}),
    "bad_deepstack": js({"model_type": "qwen3_vl", "vision_config": dict(VISION, deepstack_visual_indexes=[3, 3, 99])}),
    "bad_types": js({"model_type": 5, "vision_config": dict(VISION, depth="24", hidden_act=1)}),
    "bad_text_hidden": js({"model_type": "qwen3_vl", "text_config": {"hidden_size": 7}, "vision_config": VISION}),
    "bad_mean": js(dict(IMAGE, image_mean=[0.5, "x"], rescale_factor=-1)),
    "bad_deep_nesting": b"[" * 2000 + b"]" * 2000,
    "bad_numbers": b'{"depth": 1e999, "hidden_size": -0, "patch_size": 1.5, "fps": NaN}',
}

# The hostile inputs of issue 10 that reach these parsers: a budget that turns any image into ~1.5 M patches,
# a budget the other way round, JSON nested past cJSON's limit, invalid JSON, a .npy whose bad magic once made it
# be parsed as safetensors, trailing bytes after the data.
NPY.update({
    "hostile_bad_magic_st_like": b"\x93NUMPZ\x01\x00v\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }"
                                 + b" " * 53 + b"\n" + f32(1),
    "hostile_trailing_bytes": npy("<f4", (1, 2), f32(1, 2) + b"garbage after the data"),
    "hostile_header_claims_4g": b"\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr': '<f4', ",
    "hostile_shape_2e9_rows": npy("<f4", (2000000000, 1536), b""),
})
CONFIG.update({
    "hostile_min_pixels_4e8": js(dict(IMAGE, min_pixels=400000000)),
    "hostile_invalid_json": b'{"patch_size": 16, "merge_size": 2,, }',
    "hostile_deep_object": b"{\"a\":" + b"[" * 1100 + b"]" * 1100 + b"}",
    "hostile_merge_size_1": js({"model_type": "qwen3_vl", "vision_config": dict(VISION, spatial_merge_size=1)}),
})
IMG, VID = b"\x00", b"\x01"
PREPROC = {
    "valid_image": IMG + js(IMAGE),
    "valid_image_legacy_pixels": IMG + js(dict(IMAGE, min_pixels=3136, max_pixels=12845056)),
    "valid_image_pil": IMG + js(dict(IMAGE, image_processor_type="Qwen2VLImageProcessor", do_resize=True,
                                     resample=3, rescale_factor=0.00392156862745098)),
    "valid_video": VID + js(VIDEO),
    "valid_video_num_frames": VID + js(dict(VIDEO, num_frames=16, fps=None)),
    "bad_mean": IMG + js(dict(IMAGE, image_mean=[0.5, "x"], rescale_factor=-1)),
    "bad_std_zero": IMG + js(dict(IMAGE, image_std=[0.5, 0, 0.5])),
    "bad_size_list": IMG + js(dict(IMAGE, size=[1, 2])),
    "bad_patch_zero": IMG + js(dict(IMAGE, patch_size=0)),
    "bad_fps_zero": VID + js(dict(VIDEO, fps=0)),
    "bad_frames_reversed": VID + js(dict(VIDEO, min_frames=100, max_frames=4)),
    "bad_not_object": IMG + b"[1, 2, 3]",
    "hostile_min_pixels_4e8": IMG + js(dict(IMAGE, min_pixels=400000000)),
    "hostile_video_min_pixels_1e12": VID + js(dict(VIDEO, size={"shortest_edge": 10 ** 12, "longest_edge": 10 ** 12})),
    "hostile_min_above_max": IMG + js(dict(IMAGE, min_pixels=1000000, max_pixels=1000)),
    "hostile_longest_edge_1e12": IMG + js(dict(IMAGE, size={"shortest_edge": 1, "longest_edge": 10 ** 12})),
    "hostile_max_frames_huge": VID + js(dict(VIDEO, max_frames=2 ** 31 - 1, fps=1000)),
    "hostile_deep_nesting": IMG + b"[" * 2000 + b"]" * 2000,
    "hostile_invalid_json": VID + b'{"fps": 2,, }',
    "hostile_numbers": IMG + b'{"min_pixels": 1e999, "patch_size": 1.5, "merge_size": -0, "rescale_factor": NaN}',
}

for sub, cases in (("npy", NPY), ("config", CONFIG), ("preproc", PREPROC)):
    d = os.path.join(ROOT, sub)
    os.makedirs(d, exist_ok=True)
    for name, data in cases.items():
        assert len(data) < 4096, name
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print("wrote", sum(len(c) for c in (NPY, CONFIG, PREPROC)), "seeds")

# Cross seeds: a hostile input of one format handed to another parser (what a server sees when a client lies about
# the type), copied from the corpora above and from make_corpus.py's safetensors seeds when present.
CROSS = {
    "decode": [("npy", "hostile_bad_magic_st_like"), ("safetensors", "nul_in_name"), ("config", "hostile_deep_object")],
    "npy": [("safetensors", "valid_one_f32"), ("safetensors", "bad_huge_hlen"), ("decode", "limit_tEXt_2g.png")],
    "safetensors": [("npy", "hostile_bad_magic_st_like"), ("npy", "valid_f4_2x3"), ("config", "hostile_deep_object")],
    "preproc": [("config", "valid_qwen3_vl_2b"), ("safetensors", "valid_meta_only")],
}
copied = 0
for dst, srcs in CROSS.items():
    for sub, name in srcs:
        src = os.path.join(ROOT, sub, name)
        if os.path.isfile(src):
            with open(src, "rb") as f:
                data = f.read()
            with open(os.path.join(ROOT, dst, "cross_%s_%s" % (sub, name.replace(".", "_"))), "wb") as f:
                f.write(data)
            copied += 1
print("copied", copied, "cross seeds")
