"""ctypes declarations of libqvl's public API (include/qvl.h), and where the library is found.

The structs mirror qvl.h field for field; every params struct is initialised by the library's own ``*_init``
function with ``ctypes.sizeof`` of the struct declared here, so a newer libqvl.so.1 fills the fields this
binding does not know with their defaults (the ABI rule of qvl.h). ``ctypes.CDLL`` releases the GIL around
every call, so decoding and encoding in one thread never block Python threads elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, Callable, Iterator

MAX_DEEPSTACK = 8

# qvl_status
OK = 0
ERR_INVALID_ARG = 1
ERR_IO = 2
ERR_FORMAT = 3
ERR_SHAPE = 4
ERR_UNSUPPORTED = 5
ERR_LIMIT = 6
ERR_NOMEM = 7
ERR_BACKEND = 8
ERR_INTERNAL = 9
ERR_CANCELLED = 10
ERR_NONFINITE = 11
ERR_RESAMPLED = 12

# qvl_dtype
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
# qvl_item_kind
ITEM_PATH, ITEM_ENCODED, ITEM_PIXELS, ITEM_FRAMES, ITEM_ROWS = 0, 1, 2, 3, 4
# qvl_output_layout
OUTPUT_CONCAT, OUTPUT_SPLIT = 0, 1
# qvl_pos_mode
POS_CLOSED_FORM, POS_LINSPACE = 0, 1
# qvl_isa
ISA_AUTO, ISA_AVX2, ISA_AVX512, ISA_AMX = 0, 2, 3, 4
# qvl_resize_mode
RESIZE_TORCHVISION, RESIZE_PIL, RESIZE_PIL_LEGACY = 0, 1, 2
# qvl_alpha_mode
ALPHA_WHITE, ALPHA_DROP = 0, 1


class Error(Structure):
    _fields_ = [("status", c_int), ("message", c_char * 1024)]


class ModelInfo(Structure):
    _fields_ = [
        ("model_type", c_char * 32),
        ("depth", c_int),
        ("hidden", c_int),
        ("heads", c_int),
        ("head_dim", c_int),
        ("intermediate", c_int),
        ("out_hidden", c_int),
        ("patch", c_int),
        ("temporal_patch", c_int),
        ("merge", c_int),
        ("in_channels", c_int),
        ("num_pos", c_int),
        ("row_len", c_int),
        ("n_deepstack", c_int),
        ("deepstack_index", c_int * MAX_DEEPSTACK),
        ("weight_dtype", c_int),
        ("source", c_int),
        ("prefix", c_char * 40),
        ("conv_layout_mlx", c_int),
        ("n_files", c_int),
        ("n_tensors", c_size_t),
        ("n_params", c_uint64),
        ("weight_bytes", c_uint64),
        ("isa", c_int),
        ("precision", c_int),
        ("backend", c_char * 24),
        ("bf16_backend", c_char * 24),
        ("amx", c_char * 96),
        ("auto_precision", c_char * 96),
    ]


class LoadParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("isa", c_int), ("n_threads", c_int), ("precision", c_int),
                ("reserved0", c_int), ("describe_only", c_int), ("reserved1", c_int)]


class Limits(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("max_image_pixels", c_uint64),
        ("max_canvas_pixels", c_uint64),
        ("max_input_bytes", c_uint64),
        ("max_png_chunk_bytes", c_uint64),
        ("max_jpeg_scans", c_uint32),
        ("max_video_frames", c_uint32),
        ("max_video_pixels", c_uint64),
        ("max_item_patches", c_uint64),
        ("max_call_patches", c_uint64),
        ("max_decode_work", c_uint64),
        ("max_video_decode_pixels", c_uint64),
    ]


class CtxParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("n_threads", c_int), ("pos_mode", c_int),
                ("limits", POINTER(Limits))]


class Grid(Structure):
    _fields_ = [("t", c_int32), ("h", c_int32), ("w", c_int32)]


class Pixels(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("width", c_int32),
        ("height", c_int32),
        ("channels", c_int32),
        ("stride", c_size_t),
    ]


class PreprocessParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("resize", c_int),
        ("min_pixels", c_uint64),
        ("max_pixels", c_uint64),
        ("video_min_pixels", c_uint64),
        ("video_max_pixels", c_uint64),
        ("size_h", c_int32),
        ("size_w", c_int32),
        ("image_mean", c_float * 3),
        ("image_std", c_float * 3),
        ("rescale_factor", c_double),
        ("patch", c_int32),
        ("temporal_patch", c_int32),
        ("merge", c_int32),
        ("n_threads", c_int),
        ("cap_pixels_per_frame", c_int),
        ("max_video_tokens", c_int32),
    ]


class VideoParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("fps", c_double),
        ("num_frames", c_int32),
        ("min_frames", c_int32),
        ("max_frames", c_int32),
        ("default_fps", c_double),
        ("max_pixels", c_uint64),
        ("limits", POINTER(Limits)),
    ]


class DecodeParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("max_pixels", c_uint64),
        ("apply_exif", c_int),
        ("alpha", c_int),
        ("limits", POINTER(Limits)),
    ]


class Item(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int),
        ("label", c_char_p),
        ("path", c_char_p),
        ("data", c_void_p),
        ("size", c_size_t),
        ("image", Pixels),
        ("frames", POINTER(Pixels)),
        ("n_frames", c_size_t),
        ("fps", c_double),
        ("rows", c_void_p),
        ("grid", Grid),
        ("row_len", c_size_t),
        ("preprocess", POINTER(PreprocessParams)),
        ("video", POINTER(VideoParams)),
        ("decode", POINTER(DecodeParams)),
    ]


class PlanParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int),
        ("layout", c_int),
        ("deepstack", c_int),
        ("max_batch_rows", c_size_t),
        ("preprocess", POINTER(PreprocessParams)),
        ("video", POINTER(VideoParams)),
        ("decode", POINTER(DecodeParams)),
        ("limits", POINTER(Limits)),
        ("cancel_fn", c_void_p),  # qvl_cancel_fn: unused here (NULL)
        ("cancel_user", c_void_p),
    ]


class ItemInfo(Structure):
    _fields_ = [
        ("status", c_int),
        ("message", c_char_p),
        ("kind", c_char_p),
        ("grid", Grid),
        ("n_rows", c_size_t),
        ("n_tokens", c_size_t),
        ("out_cols", c_size_t),
        ("n_planes", c_size_t),
        ("out_bytes", c_size_t),
        ("src_width", c_int32),
        ("src_height", c_int32),
        ("resized_width", c_int32),
        ("resized_height", c_int32),
        ("n_frames", c_int32),
        ("total_frames", c_int64),
        ("source_fps", c_double),
        ("frame_indices", POINTER(c_int64)),
        ("n_timestamps", c_size_t),
        ("timestamps", POINTER(c_double)),
        ("decode_ms", c_double),
        ("preprocess_ms", c_double),
        ("encode_ms", c_double),
    ]


class SynthParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("preset", c_char_p),
        ("seed", c_uint64),
        ("layout", c_int),
        ("dtype", c_int),
        ("depth", c_int),
        ("n_deepstack", c_int),
        ("deepstack_index", c_int * MAX_DEEPSTACK),
    ]


class CacheParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("max_bytes", c_uint64), ("vllm_links", c_int), ("reserved0", c_int),
                ("existing", c_int), ("reserved1", c_int)]


# qvl_cache_entry.result
CACHE_MISS, CACHE_HIT, CACHE_CORRUPT = 0, 1, 2


class CacheRecord(Structure):  # qvl_cache_entry
    _fields_ = [
        ("result", c_int),
        ("file", c_void_p),
        ("file_bytes", c_size_t),
        ("data", c_void_p),
        ("nbytes", c_size_t),
        ("dtype", c_char * 8),
        ("ndim", c_int),
        ("shape", c_int64 * 3),
        ("n_planes", c_size_t),
        ("n_tokens", c_size_t),
        ("cols", c_size_t),
        ("grid", Grid),
        ("created", c_int64),
        ("fingerprint", c_char * 65),
        ("qvl_version", c_char * 32),
        ("xxh3_128", c_char * 33),
        ("kind", c_char * 8),
    ]


class CacheStats(Structure):
    _fields_ = [(n, c_uint64) for n in ("hits", "misses", "corrupt", "puts", "put_errors", "bytes", "entries",
                                         "evictions", "evicted_bytes")]


class StreamChunk(Structure):  # qvl_chunk
    _fields_ = [
        ("tok0", c_size_t),
        ("n_tokens", c_size_t),
        ("t0", c_int32),
        ("t", c_int32),
        ("data", c_void_p),
        ("plane_stride", c_size_t),
        ("bytes", c_size_t),
    ]


class RowsChunk(Structure):  # qvl_rows_chunk
    _fields_ = [
        ("row0", c_size_t),
        ("n_rows", c_size_t),
        ("tok0", c_size_t),
        ("n_tokens", c_size_t),
        ("t0", c_int32),
        ("t", c_int32),
        ("rows", POINTER(ctypes.c_float)),
        ("row_len", c_size_t),
    ]


STRUCTS = {
    "qvl_error": Error,
    "qvl_model_info": ModelInfo,
    "qvl_load_params": LoadParams,
    "qvl_limits": Limits,
    "qvl_ctx_params": CtxParams,
    "qvl_grid": Grid,
    "qvl_pixels": Pixels,
    "qvl_preprocess_params": PreprocessParams,
    "qvl_video_params": VideoParams,
    "qvl_decode_params": DecodeParams,
    "qvl_item": Item,
    "qvl_plan_params": PlanParams,
    "qvl_item_info": ItemInfo,
    "qvl_synth_params": SynthParams,
    "qvl_cache_params": CacheParams,
    "qvl_cache_entry": CacheRecord,
    "qvl_cache_stats": CacheStats,
    "qvl_chunk": StreamChunk,
    "qvl_rows_chunk": RowsChunk,
}

_status = c_int
_err = POINTER(Error)

# qvl_chunk_fn: int (*)(void *user, size_t item, size_t tok0, size_t n_tokens)
CHUNK_FN = ctypes.CFUNCTYPE(ctypes.c_int, c_void_p, c_size_t, c_size_t, c_size_t)


# qvl_stream_fn: int (*)(void *user, const qvl_item_info *info, const qvl_chunk *chunk)
STREAM_FN = ctypes.CFUNCTYPE(ctypes.c_int, c_void_p, POINTER(ItemInfo), POINTER(StreamChunk))

# qvl_rows_fn: int (*)(void *user, const qvl_item_info *info, const qvl_rows_chunk *chunk)
ROWS_FN = ctypes.CFUNCTYPE(ctypes.c_int, c_void_p, POINTER(ItemInfo), POINTER(RowsChunk))

# name: (restype, argtypes)
_SIGNATURES = {
    "qvl_version": (c_char_p, []),
    "qvl_version_number": (c_int, []),
    "qvl_status_name": (c_char_p, [c_int]),
    "qvl_isa_name": (c_char_p, [c_int]),
    "qvl_dtype_name": (c_char_p, [c_int]),
    "qvl_load_params_init": (None, [POINTER(LoadParams), c_size_t]),
    "qvl_model_load": (_status, [c_char_p, POINTER(LoadParams), POINTER(c_void_p), _err]),
    "qvl_model_free": (None, [c_void_p]),
    "qvl_model_get_info_sized": (None, [c_void_p, POINTER(ModelInfo), c_size_t]),
    "qvl_model_fingerprint": (_status, [c_void_p, c_void_p, c_char_p, _err]),
    "qvl_limits_init": (None, [POINTER(Limits), c_size_t]),
    "qvl_ctx_params_init": (None, [POINTER(CtxParams), c_size_t]),
    "qvl_ctx_create": (_status, [c_void_p, POINTER(CtxParams), POINTER(c_void_p), _err]),
    "qvl_ctx_free": (None, [c_void_p]),
    "qvl_ctx_threads": (c_int, [c_void_p]),
    "qvl_ctx_cancel": (None, [c_void_p]),
    "qvl_ctx_uncancel": (None, [c_void_p]),
    "qvl_preprocess_params_init": (None, [POINTER(PreprocessParams), c_size_t]),
    "qvl_video_params_init": (None, [POINTER(VideoParams), c_size_t]),
    "qvl_decode_params_init": (None, [POINTER(DecodeParams), c_size_t]),
    "qvl_preprocess_params_load": (
        _status,
        [c_char_p, POINTER(PreprocessParams), POINTER(VideoParams), _err],
    ),
    "qvl_item_init": (None, [POINTER(Item), c_size_t]),
    "qvl_plan_params_init": (None, [POINTER(PlanParams), c_size_t]),
    "qvl_plan_create": (
        _status,
        [c_void_p, POINTER(Item), c_size_t, POINTER(PlanParams), POINTER(c_void_p), _err],
    ),
    "qvl_plan_free": (None, [c_void_p]),
    "qvl_plan_count": (c_size_t, [c_void_p]),
    "qvl_plan_item_sized": (None, [c_void_p, c_size_t, POINTER(ItemInfo), c_size_t]),
    "qvl_plan_ok_count": (c_size_t, [c_void_p]),
    "qvl_plan_out_bytes": (c_size_t, [c_void_p]),
    "qvl_plan_rows": (POINTER(c_float), [c_void_p, c_size_t]),
    "qvl_ctx_reserve_plan": (_status, [c_void_p, c_void_p, _err]),
    "qvl_plan_encode": (_status, [c_void_p, c_void_p, POINTER(c_void_p), _err]),
    "qvl_plan_encode_chunks": (_status, [c_void_p, c_void_p, POINTER(c_void_p), c_void_p, c_void_p, _err]),
    "qvl_encode_stream": (_status, [c_void_p, POINTER(Item), POINTER(PlanParams), c_void_p, c_void_p, _err]),
    "qvl_preprocess_stream": (_status, [c_void_p, POINTER(Item), POINTER(PlanParams), c_void_p, c_void_p, _err]),
    "qvl_item_key": (_status, [c_void_p, POINTER(Item), POINTER(PlanParams), c_void_p, c_char_p, _err]),
    "qvl_synth_params_init": (None, [POINTER(SynthParams), c_size_t]),
    "qvl_synth_write": (_status, [POINTER(SynthParams), c_char_p, _err]),
    "qvl_st_writer_open": (_status, [c_char_p, c_size_t, POINTER(c_void_p), _err]),
    "qvl_st_writer_meta": (_status, [c_void_p, c_char_p, c_char_p, _err]),
    "qvl_st_writer_tensor": (_status, [c_void_p, c_char_p, c_char_p, POINTER(c_int64), c_int, _err]),
    "qvl_st_writer_data": (_status, [c_void_p, c_void_p, c_size_t, _err]),
    "qvl_st_writer_finish": (_status, [c_void_p, _err]),
    "qvl_st_writer_abort": (None, [c_void_p]),
    "qvl_free": (None, [c_void_p]),
    "qvl_cache_params_init": (None, [POINTER(CacheParams), c_size_t]),
    "qvl_cache_open": (_status, [c_char_p, POINTER(CacheParams), POINTER(c_void_p), _err]),
    "qvl_cache_close": (None, [c_void_p]),
    "qvl_cache_get_sized": (_status, [c_void_p, c_char_p, POINTER(CacheRecord), c_size_t, _err]),
    "qvl_cache_put": (
        _status,
        [c_void_p, c_char_p, c_int, c_void_p, c_size_t, c_size_t, c_size_t, Grid, c_char_p, _err],
    ),
    "qvl_cache_put_kind": (
        _status,
        [c_void_p, c_char_p, c_char_p, c_int, c_void_p, c_size_t, c_size_t, c_size_t, Grid, c_char_p, _err],
    ),
    "qvl_cache_exists": (c_int, [c_void_p, c_char_p, POINTER(c_uint64)]),
    "qvl_cache_gc": (_status, [c_void_p, c_uint64, POINTER(c_uint64), POINTER(c_size_t), _err]),
    "qvl_cache_verify": (_status, [c_void_p, POINTER(c_size_t), POINTER(c_size_t), _err]),
    "qvl_cache_export_vllm": (_status, [c_void_p, c_char_p, POINTER(c_size_t), _err]),
    "qvl_cache_get_stats_sized": (None, [c_void_p, POINTER(CacheStats), c_size_t]),
}

SONAME = "libqvl.so.1"


def library_path() -> str:
    """Where libqvl is loaded from: $QVL_LIBRARY (a file, or a build directory holding libqvl.so.1) if set,
    else the copy installed next to this package."""
    env = os.environ.get("QVL_LIBRARY")
    if env:
        p = Path(env)
        return str(p / SONAME if p.is_dir() else p)
    return str(Path(__file__).resolve().parent / SONAME)


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        lib = ctypes.CDLL(path)  # CDLL, not PyDLL: the GIL is released for the duration of every call
    except OSError as e:
        raise ImportError(
            f"qvl: cannot load {path}: {e} (set QVL_LIBRARY to a libqvl.so.1 or a build directory holding one)"
        ) from e
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


def init(struct_type: type[Structure]) -> Structure:
    """A params struct with the library's defaults (its *_init with this struct's size)."""
    s = struct_type()
    fn = {
        LoadParams: lib.qvl_load_params_init,
        Limits: lib.qvl_limits_init,
        CtxParams: lib.qvl_ctx_params_init,
        PreprocessParams: lib.qvl_preprocess_params_init,
        VideoParams: lib.qvl_video_params_init,
        DecodeParams: lib.qvl_decode_params_init,
        Item: lib.qvl_item_init,
        PlanParams: lib.qvl_plan_params_init,
        SynthParams: lib.qvl_synth_params_init,
        CacheParams: lib.qvl_cache_params_init,
    }[struct_type]
    fn(ctypes.byref(s), ctypes.sizeof(s))
    return s


class HandleGuard:
    """A native handle shared by threads, and the calls using it: close() waits for the calls in flight before the
    handle is freed (ctypes releases the GIL in a call, so another thread's close could free it under the call),
    and a call after close() raises ``closed()``. The handle is any truthy object (a pointer, a tuple of them);
    None (not opened yet, or closed) reads as closed. The owner opens it, makes each call inside ``using()`` and
    frees what ``close()`` returns."""

    def __init__(self, closed: Callable[[], Exception]) -> None:
        self._closed_error = closed  # the error a call on a closed handle raises
        self._handle: Any = None
        self._calls = threading.Condition()  # calls in flight (their count), which close() waits for
        self._in_flight = 0

    def open(self, handle: Any) -> None:
        """Install the handle the calls use (once opened, before another thread can see the owner)."""
        with self._calls:
            self._handle = handle

    @contextlib.contextmanager
    def using(self) -> Iterator[Any]:
        """The handle, held for one call: close() waits for it to end. Raises ``closed()`` once closed."""
        with self._calls:
            if not self._handle:
                raise self._closed_error()
            self._in_flight += 1
            h = self._handle
        try:
            yield h
        finally:
            with self._calls:
                self._in_flight -= 1
                if not self._in_flight:
                    self._calls.notify_all()

    def close(self) -> Any:
        """Refuse new calls, wait for those in flight, and return the handle for the caller to free (None when it
        was never opened or is closed already: free it once)."""
        with self._calls:
            h, self._handle = self._handle, None
            while self._in_flight:
                self._calls.wait()
        return h


__all__ = ["lib", "library_path", "init", "STRUCTS", "c_uint8", "HandleGuard"]
