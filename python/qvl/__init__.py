"""qvl: the Qwen3-VL / Qwen3.5 vision encoder (libqvl) from Python.

    import qvl
    enc = qvl.Encoder("/models/Qwen3-VL-8B-Instruct")
    [r] = enc.encode(["photo.jpg"])
    r.embeds.shape, r.grid_thw, r.key        # (tokens, 4096·(1+3)), (1, h, w), "3f…"

The library is the libqvl.so.1 installed beside this package (or $QVL_LIBRARY); calls release the GIL.
"""

from .encoder import (
    Batch,
    Encoder,
    EncoderInfo,
    Frames,
    Preprocessed,
    QvlError,
    Result,
    default_threads,
    describe,
    preprocess,
    preprocess_chunks,
    read_cache_entry,
    RowsChunk,
    synth,
    version,
    write_cache_entry,
)
from ._lib import library_path
from . import cache

__version__ = "1.0.0"

__all__ = [
    "Batch",
    "Encoder",
    "EncoderInfo",
    "Frames",
    "Preprocessed",
    "QvlError",
    "Result",
    "cache",
    "default_threads",
    "describe",
    "library_path",
    "preprocess",
    "preprocess_chunks",
    "read_cache_entry",
    "RowsChunk",
    "synth",
    "version",
    "write_cache_entry",
]
