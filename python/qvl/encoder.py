"""The qvl encoder from Python: items in (paths, bytes, PIL images, numpy pixels, frames, patch rows), numpy
embeddings out, written by the library straight into arrays allocated here."""

from __future__ import annotations

import base64
import ctypes
import functools
import io
import os
import queue
import stat
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from . import _lib
from . import cache as _cache
from .cache import _bf16_bits  # noqa: F401 (the tests take it from here)
from ._lib import lib

__all__ = [
    "QvlError",
    "Encoder",
    "EncoderInfo",
    "Result",
    "Batch",
    "Chunk",
    "Frames",
    "Preprocessed",
    "preprocess",
    "synth",
    "version",
    "write_cache_entry",
    "read_cache_entry",
]


class QvlError(Exception):
    """A libqvl failure: ``status`` is the library's status code, ``status_name`` its name and ``message`` the
    library's one-line message naming the cause."""

    def __init__(self, status: int, message: str):
        self.status = int(status)
        self.status_name = lib.qvl_status_name(self.status).decode()
        self.message = message
        super().__init__(f"{message} [{self.status_name}]")


def _check(status: int, err: _lib.Error) -> None:
    if status != _lib.OK:
        raise QvlError(status, err.message.decode(errors="replace") or lib.qvl_status_name(status).decode())


def version() -> str:
    """The library's version ("1.0.0")."""
    return lib.qvl_version().decode()


@dataclass
class Frames:
    """A video given as its frames (each an HxWx3/HxWx4 uint8 array or a PIL image, all one size), every frame
    used, at ``fps`` frames per second (0: the video params' default_fps); fps only sets the timestamps."""

    frames: Sequence[Any]
    fps: float = 0.0


@dataclass
class Preprocessed:
    """Patch rows as transformers' processor (or :func:`qvl.preprocess`) gives them: ``pixel_values``
    [t·h·w, row_len] float32 (merge-block-major) and the grid (t, h, w) of one image or video."""

    pixel_values: np.ndarray
    grid_thw: tuple[int, int, int]


Item = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray, Frames, Preprocessed, tuple, Any]

_DTYPES = {"float32": (_lib.DTYPE_F32, np.float32), "float16": (_lib.DTYPE_F16, np.float16),
           "bfloat16": (_lib.DTYPE_BF16, np.uint16)}
_LAYOUTS = {"concat": _lib.OUTPUT_CONCAT, "split": _lib.OUTPUT_SPLIT}
_RESIZE = {"torchvision": _lib.RESIZE_TORCHVISION, "pil": _lib.RESIZE_PIL, "pil-legacy": _lib.RESIZE_PIL_LEGACY}
_ISA = {"auto": _lib.ISA_AUTO, "avx2": _lib.ISA_AVX2, "avx512": _lib.ISA_AVX512, "amx": _lib.ISA_AMX}
_POS = {"closed": _lib.POS_CLOSED_FORM, "linspace": _lib.POS_LINSPACE}


def default_threads() -> int:
    """Threads an Encoder uses when given none: $OMP_NUM_THREADS (as Ray sets it for a task or actor), else the
    CPUs this process may run on (its affinity mask)."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env.split(",")[0])
            if n > 0:
                return n
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass
class EncoderInfo:
    """What an Encoder runs: the tower's dimensions, the weights' fingerprint and the kernel set."""

    model_type: str
    depth: int
    hidden: int
    heads: int
    out_hidden: int
    n_deepstack: int
    deepstack_index: tuple[int, ...]
    patch: int
    temporal_patch: int
    merge: int
    row_len: int
    weight_dtype: str
    n_params: int
    fingerprint: str
    kernels: str
    threads: int
    precision: str
    version: str


@dataclass
class Chunk:
    """A part of one item's output that is final (:meth:`Encoder.encode_chunks`): its tokens [tok0, tok0 + n) as
    ``embeds`` [n, out_hidden·(1 + n_deepstack)] (the concat layout), an array of its own; the item is ``total``
    tokens long."""

    tok0: int
    embeds: np.ndarray
    total: int


@dataclass
class Result:
    """One item's outcome. ``ok`` is False for an item that failed: then ``error`` holds the library's message,
    ``status`` its status code, and ``embeds`` is None.

    ``embeds`` is [n_tokens, out_hidden·(1 + n_deepstack)] (layout "concat": the merger output, then each
    DeepStack feature on the last axis, as vLLM and SGLang take Qwen3-VL embeddings) or
    [1 + n_deepstack, n_tokens, out_hidden] (layout "split"); ``merged`` and ``deepstack`` are views into it.
    A "bfloat16" result is held as uint16 (numpy has no bfloat16): the bf16 bit patterns."""

    index: int
    ok: bool
    key: str | None = None
    embeds: np.ndarray | None = None
    grid_thw: tuple[int, int, int] | None = None
    n_tokens: int = 0
    kind: str = ""
    dtype: str = "float32"
    layout: str = "concat"
    out_hidden: int = 0
    n_deepstack: int = 0
    status: int = 0
    error: str | None = None
    source_size: tuple[int, int] | None = None
    timestamps: tuple[float, ...] | None = None
    frame_indices: tuple[int, ...] | None = None
    decode_ms: float = 0.0
    preprocess_ms: float = 0.0
    encode_ms: float = 0.0
    cached: bool = False

    @property
    def merged(self) -> np.ndarray | None:
        """The merger output [n_tokens, out_hidden] (a view)."""
        if self.embeds is None:
            return None
        return self.embeds[:, : self.out_hidden] if self.layout == "concat" else self.embeds[0]

    @property
    def deepstack(self) -> list[np.ndarray]:
        """Each DeepStack feature [n_tokens, out_hidden] (views into ``embeds``); empty for models without them or
        an encode with deepstack=False."""
        if self.embeds is None:
            return []
        O = self.out_hidden
        if self.layout == "concat":
            n = self.embeds.shape[1] // O - 1
            return [self.embeds[:, O * (k + 1): O * (k + 2)] for k in range(n)]
        return [self.embeds[k] for k in range(1, self.embeds.shape[0])]

    def to_vllm(self, encoding: str = "torch") -> dict[str, Any]:
        """The embeddings as vLLM takes precomputed Qwen3-VL embeddings.

        Returns ``{"multi_modal_data": {...}, "content_part": {...}}``:

        - ``multi_modal_data``, for ``LLM.generate({"prompt": ..., "multi_modal_data": ...})`` (offline):
          ``{"image": {"image_embeds": T, "image_grid_thw": G}}`` (or ``video``/``video_embeds``/
          ``video_grid_thw``), torch tensors: T ``[n_tokens, out_hidden·(1 + n_deepstack)]`` (the concat layout) in
          the result's dtype, G int64 ``[1, 3]`` (vLLM's ``Qwen2_5_VLImageEmbeddingInputs``: ``(nf, hs)`` and
          ``(ni, 3)``). Present when torch (which vLLM brings) is importable.
        - ``content_part``, the chat-completions message part (server started with ``--enable-mm-embeds``):
          ``{"type": "image_embeds", "image_embeds": {"image_embeds": b64, "image_grid_thw": b64}, "uuid": key}``:
          T as above and the grid as int64 ``[3]``, one image per part (vLLM stacks the parts' grids into
          ``(n_images, 3)`` and concatenates their embeddings). ``encoding="torch"`` base64-encodes a
          ``torch.save`` of each tensor (vLLM reads it with ``torch.load(weights_only=True)``); ``"npy"`` a
          ``.npy`` file (read with ``np.load``; no torch needed; float32/float16 only, as npy has no bfloat16).
          ``uuid`` (the cache key) lets vLLM reuse its cached copy. vLLM's chat API takes no video embeddings:
          for a video ``content_part`` is None. Video or image is the result's kind; a cache hit on an entry that
          records none (kind "cached") is taken for a video only when its grid has more than one temporal patch."""
        if not self.ok or self.embeds is None:
            raise QvlError(self.status or _lib.ERR_INVALID_ARG, self.error or "the item has no embeddings")
        if encoding not in ("torch", "npy"):
            raise ValueError(f"encoding must be 'torch' or 'npy', not {encoding!r}")
        try:
            import torch  # type: ignore
        except ImportError as e:  # pragma: no cover - depends on the environment
            if encoding == "torch":
                raise ImportError("to_vllm() needs torch (installed with vLLM), or encoding='npy'") from e
            torch = None
        if encoding == "npy" and self.dtype == "bfloat16":
            raise ValueError("npy has no bfloat16: use encoding='torch' or a float32/float16 result")
        e = self.embeds
        if self.layout == "split":
            e = np.concatenate(list(e), axis=1)
        e = np.ascontiguousarray(e)
        grid = np.asarray(self.grid_thw, dtype=np.int64)
        # a hit on an entry that records no kind ("cached": written by qvl 1.0, or by a put without one): more
        # than one temporal patch means a video (a video of 1 or 2 frames passes for an image)
        video = self.kind in ("video", "frames") or (self.kind == "cached" and bool(self.grid_thw)
                                                      and self.grid_thw[0] > 1)
        name = "video" if video else "image"
        out: dict[str, Any] = {}
        if torch is not None:
            t = torch.from_numpy(e)
            if self.dtype == "bfloat16":
                t = t.view(torch.bfloat16)
            out["multi_modal_data"] = {name: {f"{name}_embeds": t,
                                              f"{name}_grid_thw": torch.from_numpy(grid.reshape(1, 3).copy())}}

        def b64(x: np.ndarray) -> str:
            buf = io.BytesIO()
            if encoding == "npy":
                np.save(buf, x, allow_pickle=False)
            else:
                tx = torch.from_numpy(x)
                torch.save(tx.view(torch.bfloat16) if x is e and self.dtype == "bfloat16" else tx, buf)
            return base64.b64encode(buf.getvalue()).decode()

        part = None
        if not video:
            part = {"type": "image_embeds", "image_embeds": {"image_embeds": b64(e), "image_grid_thw": b64(grid)}}
            if self.key:
                part["uuid"] = self.key
        out["content_part"] = part
        return out


@dataclass
class Batch:
    """encode_batch's output: every ok item's tokens in one contiguous ``embeds`` array
    [total_tokens, out_cols] (layout concat), item i's rows ``embeds[offsets[i]:offsets[i + 1]]`` (an empty range
    for a failed item), and each item's Result (whose ``embeds`` is that view)."""

    embeds: np.ndarray
    offsets: np.ndarray
    results: list[Result] = field(default_factory=list)


# ---- items -> qvl_item --------------------------------------------------------------------------------------


def _pixels_of(obj: Any, keep: list[Any], what: str) -> _lib.Pixels:
    """A qvl_pixels over a uint8 HxWx3 / HxWx4 array (in place when its pixels are packed; rows may be strided),
    or over a PIL image's pixels."""
    if not isinstance(obj, np.ndarray):
        try:
            from PIL import Image  # type: ignore
        except ImportError:
            Image = None
        if Image is not None and isinstance(obj, Image.Image):
            im = obj
            if im.mode not in ("RGB", "RGBA"):
                transparent = im.mode in ("RGBa", "LA", "La", "PA") or "transparency" in im.info
                im = im.convert("RGBA" if transparent else "RGB")
            obj = np.asarray(im)
        else:
            raise TypeError(f"{what}: {type(obj).__name__} is not an image "
                            "(a path, bytes, a PIL image or a uint8 array)")
    a = obj
    if a.dtype != np.uint8:
        raise TypeError(f"{what}: pixel arrays must be uint8, not {a.dtype}")
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"{what}: pixel arrays are HxWx3 (RGB) or HxWx4 (RGBA), not {a.shape}")
    h, w, c = a.shape
    if not (a.strides[2] == 1 and a.strides[1] == c and a.strides[0] >= w * c):
        a = np.ascontiguousarray(a)
    keep.append(a)
    return _lib.Pixels(a.ctypes.data, w, h, c, a.strides[0])


def _fill_item(it: _lib.Item, obj: Any, keep: list[Any], index: int, row_len: int) -> None:
    what = f"item {index}"
    if isinstance(obj, (str, os.PathLike)):
        p = os.fsencode(obj)
        keep.append(p)
        it.kind = _lib.ITEM_PATH
        it.path = p
    elif isinstance(obj, bytes):
        keep.append(obj)
        it.kind = _lib.ITEM_ENCODED
        it.data = ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p)
        it.size = len(obj)
    elif isinstance(obj, (bytearray, memoryview)):
        a = np.frombuffer(obj, dtype=np.uint8)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        keep.append(a)
        it.kind = _lib.ITEM_ENCODED
        it.data = a.ctypes.data
        it.size = a.size
    elif isinstance(obj, Frames) or (isinstance(obj, list) and obj and not isinstance(obj[0], (str, bytes))):
        fr = obj if isinstance(obj, Frames) else Frames(obj)
        arr = (_lib.Pixels * max(1, len(fr.frames)))()
        for i, f in enumerate(fr.frames):
            arr[i] = _pixels_of(f, keep, f"{what} frame {i}")
        keep.append(arr)
        it.kind = _lib.ITEM_FRAMES
        it.frames = arr
        it.n_frames = len(fr.frames)
        it.fps = float(fr.fps)
    elif isinstance(obj, (Preprocessed, tuple)):
        if isinstance(obj, tuple):
            if len(obj) != 2:
                raise TypeError(f"{what}: a tuple item is (pixel_values, grid_thw)")
            obj = Preprocessed(obj[0], obj[1])
        rows = obj.pixel_values
        if hasattr(rows, "detach"):  # a torch tensor
            rows = rows.detach().cpu().numpy()
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        g = np.asarray(obj.grid_thw, dtype=np.int64).reshape(-1)
        if g.size != 3:
            raise ValueError(f"{what}: grid_thw must be one (t, h, w); got {np.asarray(obj.grid_thw).shape}: pass one"
                             " (pixel_values, grid_thw) per image or video")
        if rows.ndim != 2:
            raise ValueError(f"{what}: pixel_values must be [rows, row_len], not {rows.shape}")
        if rows.shape[0] != int(g[0] * g[1] * g[2]):
            raise ValueError(f"{what}: pixel_values has {rows.shape[0]} rows, grid {tuple(int(x) for x in g)} needs"
                             f" {int(g[0] * g[1] * g[2])}")
        keep.append(rows)
        it.kind = _lib.ITEM_ROWS
        it.rows = rows.ctypes.data
        it.grid = _lib.Grid(int(g[0]), int(g[1]), int(g[2]))
        it.row_len = rows.shape[1]
    else:
        it.kind = _lib.ITEM_PIXELS
        it.image = _pixels_of(obj, keep, what)


def _items(objs: Sequence[Any], keep: list[Any], row_len: int = 0,
           failed: dict[int, str] | None = None, labels: Sequence[str] | None = None) -> ctypes.Array:
    """qvl_items for `objs`. An object that is no item (a wrong type or shape) raises, or, when `failed` is given,
    is recorded there with its message and left out of the plan, so that it fails alone."""
    arr = (_lib.Item * max(1, len(objs)))()
    for i, o in enumerate(objs):
        lib.qvl_item_init(ctypes.byref(arr[i]), ctypes.sizeof(_lib.Item))
        if labels is not None and labels[i]:
            lb = os.fsencode(labels[i])
            keep.append(lb)
            arr[i].label = lb
        try:
            _fill_item(arr[i], o, keep, i, row_len)
        except (TypeError, ValueError) as e:
            if failed is None:
                raise
            failed[i] = str(e)
    return arr


# The most bytes of a path item read ahead into memory (_pin_paths): every image there is and short clips; a longer
# video stays a path that FFmpeg reads in pieces (checked by its key after the encode instead), so that an encode of
# many long videos does not hold each whole file (up to the library's 2 GiB max_input_bytes) for the call.
_READ_AHEAD_BYTES = 64 << 20


def _read_ahead_bytes() -> int:
    """The most bytes of a path item read ahead: _READ_AHEAD_BYTES, or the library's default max_input_bytes
    (qvl_limits: the most of one ENCODED item, which the plans of an Encoder, setting no limits of their own, apply)
    where that is less."""
    return min(_READ_AHEAD_BYTES, int(_lib.init(_lib.Limits).max_input_bytes))


def _read_path(obj: Any, limit: int) -> bytes | None:
    """The bytes of a path item's file, read once, for the key and the encode both; None where the item stays a
    path for the library to open: a directory (of frames, which the library reads by name), a file that cannot be
    opened or is not a regular one (the plan reports why, as for any path), an empty one, or one of more than
    `limit` bytes (a long video, which FFmpeg reads in pieces)."""
    try:
        fd = os.open(obj, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_size > limit:
            return None
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, min(1 << 24, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks) if 0 < n <= limit else None  # grown past the limit meanwhile: left a path
    except OSError:
        return None
    finally:
        os.close(fd)


def _pin_paths(objs: list[Any], labels: Sequence[str] | None) -> tuple[list[Any], list[Any], set[int]]:
    """Path items whose file _read_path reads become those bytes, labelled with the path (so that messages name
    it as before; "" keeps the default label); returns the items, the labels and the indices of the path items
    left to the library."""
    limit = _read_ahead_bytes()
    out, names, left = list(objs), list(labels) if labels is not None else [""] * len(objs), set()
    for i, o in enumerate(objs):
        if not isinstance(o, (str, os.PathLike)):
            continue
        b = _read_path(o, limit)
        if b is None:
            left.add(i)
            continue
        out[i] = b
        if not names[i]:
            names[i] = o
    return out, names, left


def _preprocess_struct(model_dir: str | None, overrides: Mapping[str, Any] | None) -> tuple[Any, Any, Any]:
    """qvl_preprocess_params / video / decode structs: the model directory's json files (when given) over the
    library's defaults, then `overrides` (field names of the three C structs; resize and alpha by name)."""
    pp = _lib.init(_lib.PreprocessParams)
    vp = _lib.init(_lib.VideoParams)
    dp = _lib.init(_lib.DecodeParams)
    if model_dir is not None:
        err = _lib.Error()
        _check(lib.qvl_preprocess_params_load(os.fsencode(model_dir), ctypes.byref(pp), ctypes.byref(vp),
                                              ctypes.byref(err)), err)
    for k, v in (overrides or {}).items():
        if k == "video_fps":
            vp.fps = float(v)
        elif k == "decode_max_pixels":
            dp.max_pixels = int(v)
        elif k == "resize":
            pp.resize = _RESIZE[v] if isinstance(v, str) else int(v)
        elif k == "alpha":
            dp.alpha = {"white": _lib.ALPHA_WHITE, "drop": _lib.ALPHA_DROP}[v] if isinstance(v, str) else int(v)
        elif k in ("image_mean", "image_std"):
            getattr(pp, k)[:] = [float(x) for x in v]
        elif k in dict(_lib.PreprocessParams._fields_) and k != "struct_size":
            setattr(pp, k, v)
        elif k in dict(_lib.VideoParams._fields_) and k not in ("struct_size", "max_pixels"):
            setattr(vp, k, v)
        elif k in dict(_lib.DecodeParams._fields_) and k not in ("struct_size", "max_pixels"):
            setattr(dp, k, v)
        else:
            raise ValueError(f"unknown preprocessing option {k!r}")
    return pp, vp, dp


def _info(plan: ctypes.c_void_p, i: int) -> _lib.ItemInfo:
    info = _lib.ItemInfo()
    lib.qvl_plan_item_sized(plan, i, ctypes.byref(info), ctypes.sizeof(info))
    return info


# ---- cache entries -------------------------------------------------------------------------------------------


def _entry_matrix(result: Result) -> np.ndarray:
    """The matrix the server stores for this output: concat [n_tokens, cols]; split [1 + n_deepstack, n_tokens,
    out_hidden], or [n_tokens, out_hidden] when it has one plane."""
    e = result.embeds
    if e is None:
        raise ValueError("a failed item has no cache entry")
    if result.layout == "split" and e.ndim == 3 and e.shape[0] == 1:
        e = e[0]
    return e


def write_cache_entry(cache_dir: str | os.PathLike, result: Result, fingerprint: str) -> str:
    """Store one ok result in the cache directory shared with ``qvl serve`` / ``qvl encode --cache`` (format in
    :mod:`qvl.cache`): under its key (which names its dtype, layout, DeepStack choice and precision), the matrix as the
    server stores that output, written through a temporary renamed into place. Returns the entry's path."""
    if not result.ok or not result.key:
        raise ValueError("only an ok result with a key can be cached")
    kind = result.kind if result.kind in ("image", "video", "frames", "rows") else None
    return _cache.put_entry(cache_dir, result.key, _entry_matrix(result), _cache.ST_DTYPES[result.dtype],
                            result.grid_thw or (1, 1, 1), fingerprint, version(), kind)


def read_cache_entry(cache_dir: str | os.PathLike, key: str) -> _cache.CacheEntry | None:
    """The verified entry of `key` in the cache directory, or None (a miss; a corrupt entry is deleted, as the
    server does; a directory that is not a qvl cache is a miss and is left as it was). See :mod:`qvl.cache`."""
    return _cache.get_entry(cache_dir, key)


# ---- the encoder ------------------------------------------------------------------------------------------------


# qvl_precision
_PRECISION = {"f32": 0, "float32": 0, "bf16": 1, "bfloat16": 1, "auto": 2}


class Encoder:
    """A loaded vision tower and one encoding context (its thread pool and scratch).

    ``threads=None`` honours $OMP_NUM_THREADS (as Ray sets it), else the process's CPU affinity. ``precision``
    is the compute precision: "f32" (exact to the fp32 reference), "bf16" (GEMM and attention operands rounded to
    bf16, f32 accumulation) or "auto" (bf16 on usable AMX tiles, or on AVX512-BF16 where its dot product is measured
    at 1.25x the f32 FMA rate or more, as on AMD Zen 4/5; f32 elsewhere: ``qvl.describe()["auto_precision"]`` says
    which and why); ``device`` "cpu". With ``cache_dir``,
    results are looked up by key in that cache directory first and written there after encoding, in the format
    ``qvl serve`` and ``qvl encode --cache`` share (:mod:`qvl.cache`; the key names the dtype, layout, DeepStack
    choice and precision, so an entry is a hit only for the same output; a hit's Result has cached=True and the
    kind its entry records, or "cached" for an entry that records none: written by qvl 1.0 or without a kind).
    Wherever a key is computed (``keys=True`` or a cache), a path item's file is read once and keyed and encoded
    as those bytes; a directory of frames or a file over 64 MiB (a long video) is left to the library and keeps
    its key only if it is unchanged after the encode.
    ``preprocess`` overrides the model directory's preprocessing for every item (min_pixels, max_pixels,
    resize="torchvision"|"pil"|"pil-legacy", size_h/size_w, image_mean/image_std, video fps as video_fps,
    num_frames, max_frames, transformers' per-frame pixel cap as cap_pixels_per_frame=True with max_video_tokens,
    alpha="white"|"drop", ...). One Encoder runs one call at a time (calls from
    several threads take turns); for parallel encoding use one Encoder per thread. The GIL is released while
    the library decodes and encodes.
    """

    def __init__(self, model_dir: str | os.PathLike, threads: int | None = None, precision: str = "f32",
                 device: str = "cpu", cache_dir: str | os.PathLike | None = None, *, isa: str = "auto",
                 pos_mode: str = "closed", preprocess: Mapping[str, Any] | None = None):
        if precision not in _PRECISION:
            raise ValueError(f"precision {precision!r}: one of {', '.join(_PRECISION)}")
        if device != "cpu":
            raise ValueError(f"device {device!r}: qvl runs on the CPU ('cpu')")
        self.model_dir = os.fspath(model_dir)
        self.precision = "f32"  # what the loaded model computes in: set below
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self._lock = threading.Lock()
        # calls made outside _lock (key, fingerprint, info, cancel: they may run while an encode does) hold
        # (model, ctx) through the guard, and close() waits for them before it frees the handles they use
        self._guard = _lib.HandleGuard(functools.partial(QvlError, _lib.ERR_INVALID_ARG, "the Encoder is closed"))
        self._model = ctypes.c_void_p()
        self._ctx = ctypes.c_void_p()
        err = _lib.Error()
        lp = _lib.init(_lib.LoadParams)
        lp.isa = _ISA[isa]
        n = default_threads() if threads is None else int(threads)
        lp.n_threads = n
        lp.precision = _PRECISION[precision]
        _check(lib.qvl_model_load(os.fsencode(self.model_dir), ctypes.byref(lp), ctypes.byref(self._model),
                                  ctypes.byref(err)), err)
        cp = _lib.init(_lib.CtxParams)
        cp.n_threads = n
        cp.pos_mode = _POS[pos_mode]
        try:
            _check(lib.qvl_ctx_create(self._model, ctypes.byref(cp), ctypes.byref(self._ctx), ctypes.byref(err)),
                   err)
        except QvlError:
            lib.qvl_model_free(self._model)
            self._model = ctypes.c_void_p()
            raise
        self._guard.open((self._model, self._ctx))
        self._mi = _lib.ModelInfo()
        lib.qvl_model_get_info_sized(self._model, ctypes.byref(self._mi), ctypes.sizeof(self._mi))
        self.precision = "bf16" if self._mi.precision == 1 else "f32"
        self._pp, self._vp, self._dp = _preprocess_struct(self.model_dir, preprocess)
        self._fingerprint: str | None = None
        if self.cache_dir is not None:
            _cache.init_cache_dir(self.cache_dir)

    # lifecycle
    def close(self) -> None:
        """Free the context and the weights (also done when the Encoder is collected), once the encode and the
        calls other threads have in flight are done; calls after it raise QvlError (cancel() does nothing)."""
        with self._lock:
            handles = self._guard.close()
            if handles:
                model, ctx = handles
                self._ctx = ctypes.c_void_p()  # _live() refuses an encode from now on
                self._model = ctypes.c_void_p()
                lib.qvl_ctx_free(ctx)
                lib.qvl_model_free(model)

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _live(self) -> None:
        if not self._ctx:
            raise QvlError(_lib.ERR_INVALID_ARG, "the Encoder is closed")

    @property
    def fingerprint(self) -> str:
        """The weights' content fingerprint (32 hex digits, computed by the load)."""
        if self._fingerprint is None:
            err = _lib.Error()
            hexbuf = ctypes.create_string_buffer(33)
            with self._guard.using() as (model, _):
                _check(lib.qvl_model_fingerprint(model, None, hexbuf, ctypes.byref(err)), err)
            self._fingerprint = hexbuf.value.decode()
        return self._fingerprint

    @property
    def info(self) -> EncoderInfo:
        """Dimensions, fingerprint and kernel set."""
        mi = self._mi
        with self._guard.using() as (_, ctx):
            threads = lib.qvl_ctx_threads(ctx)
        return EncoderInfo(
            model_type=mi.model_type.decode(), depth=mi.depth, hidden=mi.hidden, heads=mi.heads,
            out_hidden=mi.out_hidden, n_deepstack=mi.n_deepstack,
            deepstack_index=tuple(mi.deepstack_index[: mi.n_deepstack]), patch=mi.patch,
            temporal_patch=mi.temporal_patch, merge=mi.merge, row_len=mi.row_len,
            weight_dtype={0: "f32", 1: "f16", 2: "bf16"}.get(mi.weight_dtype, "?"), n_params=int(mi.n_params),
            fingerprint=self.fingerprint, kernels=mi.backend.decode() or lib.qvl_isa_name(mi.isa).decode(),
            threads=threads, precision=self.precision, version=version())

    def cancel(self) -> None:
        """Cancel the encode running now (from any thread), its decoding included: the items not yet decoded or
        encoded fail with status cancelled. The next encode call clears the flag. Does nothing once the Encoder is
        closed."""
        try:
            with self._guard.using() as (_, ctx):
                lib.qvl_ctx_cancel(ctx)
        except QvlError:
            pass  # closed

    # plans
    def _plan_params(self, dtype: str, layout: str, deepstack: bool, preprocess: Mapping[str, Any] | None,
                     keep: list[Any]) -> _lib.PlanParams:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r}: one of {', '.join(_DTYPES)}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout {layout!r}: 'concat' or 'split'")
        pl = _lib.init(_lib.PlanParams)
        pl.dtype = _DTYPES[dtype][0]
        pl.layout = _LAYOUTS[layout]
        pl.deepstack = 1 if deepstack else 0
        if preprocess:
            pp, vp, dp = _preprocess_struct(self.model_dir, preprocess)
        else:
            pp, vp, dp = self._pp, self._vp, self._dp
        keep += [pp, vp, dp]
        pl.preprocess = ctypes.pointer(pp)
        pl.video = ctypes.pointer(vp)
        pl.decode = ctypes.pointer(dp)
        return pl

    def key(self, item: Item, dtype: str = "float32", layout: str = "concat", *, deepstack: bool = True,
            preprocess: Mapping[str, Any] | None = None) -> str:
        """The content-addressed cache key of one item (qvl_item_key, 64 hex digits): the same the CLI and servers
        compute for the same output dtype, layout and DeepStack choice (they are part of the key)."""
        keep: list[Any] = []
        items = _items([item], keep)
        pl = self._plan_params(dtype, layout, deepstack, preprocess, keep)
        with self._guard.using():
            return self._key(items, 0, pl)

    def _key(self, items: ctypes.Array, i: int, pl: _lib.PlanParams) -> str:
        err = _lib.Error()
        hexbuf = ctypes.create_string_buffer(65)
        _check(lib.qvl_item_key(self._ctx, ctypes.byref(items[i]), ctypes.byref(pl), None, hexbuf,
                                ctypes.byref(err)), err)
        return hexbuf.value.decode()

    def encode(self, items: Iterable[Item], dtype: str = "float32", layout: str = "concat", *,
               deepstack: bool = True, raise_on_error: bool = False, keys: bool = True,
               preprocess: Mapping[str, Any] | None = None, labels: Sequence[str] | None = None) -> list[Result]:
        """Encode items into one numpy array each (see :class:`Result`).

        Items: a path (image, video, or a directory of frame images), the bytes of an image file, a PIL image, a
        uint8 HxWx3/HxWx4 array (read in place when its pixels are packed), a :class:`Frames` (or a list of
        frames), or a :class:`Preprocessed` / ``(pixel_values, grid_thw)`` tuple. An item that fails gives a
        Result with ok=False and the library's message; ``raise_on_error=True`` raises :class:`QvlError` for the
        first instead. ``keys=False`` skips computing each item's cache key. ``labels`` name the items in
        messages (default: the path, else "item N")."""
        return self._run(list(items), dtype, layout, deepstack, raise_on_error, keys, preprocess, batch=False,
                         labels=labels)[0]

    def encode_chunks(self, item: Item, dtype: str = "float32", *, deepstack: bool = True,
                      preprocess: Mapping[str, Any] | None = None, max_batch_rows: int | None = None,
                      label: str | None = None) -> Iterator[Chunk]:
        """Encode one item as a stream, yielding its output in :class:`Chunk` s as they become final. A video is
        decoded while it encodes: its rows gather in pieces of whole temporal patches of at most ``max_batch_rows``
        patch rows (default the library's stream default, 4096), each piece is encoded as soon as its rows are
        complete and comes out at once, so a long video's first tokens can be used (written, sent, fed to a model)
        while the rest decodes and encodes, and neither its rows nor its output are held whole (qvl_encode_stream).
        Anything else is one chunk. The chunks are in order, back to back, and the same bits as :meth:`encode`'s
        (concat layout). The encode runs on a thread of its own, holding this Encoder as an encode does, and waits
        while two chunks are not yet taken; leaving the loop early (``break``, an exception, closing the generator)
        stops it after the piece in progress. An item that fails raises :class:`QvlError`; a video sampled again
        after chunks were yielded (its container counts more frames than it holds) raises it with status
        ``ERR_RESAMPLED`` (12): the chunks yielded are not its, and :meth:`encode` reads it whole."""
        np_dtype = _DTYPES[dtype][1] if dtype in _DTYPES else None

        def run(put: Any) -> Any:
            keep: list[Any] = []
            with self._lock:
                self._live()
                lib.qvl_ctx_uncancel(self._ctx)
                pl = self._plan_params(dtype, "concat", deepstack, preprocess, keep)
                _set_piece_rows(pl, max_batch_rows)
                citems = _items([item], keep, labels=[label] if label else None)
                err = _lib.Error()

                def told(user: Any, info: Any, chunk: Any) -> int:
                    inf, c = info.contents, chunk.contents
                    part = np.frombuffer(ctypes.string_at(c.data, c.bytes), dtype=np_dtype)
                    part = part.reshape(c.n_tokens, inf.out_cols)
                    return 0 if put(Chunk(tok0=c.tok0, embeds=part, total=inf.n_tokens)) else 1

                fn = _lib.STREAM_FN(told)
                return lib.qvl_encode_stream(self._ctx, citems, ctypes.byref(pl), fn, None, ctypes.byref(err)), err

        return _stream_parts(run, "qvl-encode-chunks")

    def encode_batch(self, items: Iterable[Item], dtype: str = "float32", *, deepstack: bool = True,
                     raise_on_error: bool = False, keys: bool = True,
                     preprocess: Mapping[str, Any] | None = None, labels: Sequence[str] | None = None) -> Batch:
        """Encode items into one contiguous array (concat layout) plus token offsets: for bulk jobs."""
        results, big, offsets = self._run(list(items), dtype, "concat", deepstack, raise_on_error, keys,
                                          preprocess, batch=True, labels=labels)
        return Batch(big, offsets, results)

    def _run(self, objs: list[Any], dtype: str, layout: str, deepstack: bool, raise_on_error: bool, keys: bool,
             preprocess: Mapping[str, Any] | None, batch: bool,
             labels: Sequence[str] | None = None) -> tuple[list[Result], Any, Any]:
        keep: list[Any] = []
        with self._lock:
            self._live()
            lib.qvl_ctx_uncancel(self._ctx)
            pl = self._plan_params(dtype, layout, deepstack, preprocess, keep)
            n = len(objs)
            failed: dict[int, str] = {}
            if labels is not None and len(labels) != n:
                raise ValueError(f"{len(labels)} labels for {n} items")
            want_key = keys or self.cache_dir is not None
            as_path: set[int] = set()  # path items left to the library: keyed again after the encode
            if want_key:  # a path's file read here once: its key and its encode come from the same bytes
                objs, labels, as_path = _pin_paths(objs, labels)
            citems = _items(objs, keep, failed=failed, labels=labels)
            O, nds = self._mi.out_hidden, (self._mi.n_deepstack if deepstack else 0)
            np_dtype = _DTYPES[dtype][1]
            results: list[Result | None] = [None] * n
            key_of: list[str | None] = [None] * n
            for i, msg in failed.items():
                results[i] = Result(index=i, ok=False, status=_lib.ERR_INVALID_ARG, error=msg, dtype=dtype,
                                    layout=layout, out_hidden=O, n_deepstack=nds)
            todo = [i for i in range(n) if i not in failed]
            if want_key:
                for i in todo:
                    try:
                        key_of[i] = self._key(citems, i, pl)
                    except QvlError:
                        key_of[i] = None  # the plan reports why the item fails
            if self.cache_dir is not None:
                todo, candidates = [], todo
                for i in candidates:
                    r = self._cached(i, key_of[i], dtype, layout, deepstack) if key_of[i] else None
                    if r is None:
                        todo.append(i)
                    else:
                        results[i] = r
            sub = citems
            if len(todo) != n:
                sub = (_lib.Item * max(1, len(todo)))()
                for j, i in enumerate(todo):
                    ctypes.memmove(ctypes.byref(sub, j * ctypes.sizeof(_lib.Item)), ctypes.byref(citems[i]),
                                   ctypes.sizeof(_lib.Item))
            err = _lib.Error()
            plan = ctypes.c_void_p()
            big = offsets = None
            if todo:
                _check(lib.qvl_plan_create(self._ctx, sub, len(todo), ctypes.byref(pl), ctypes.byref(plan),
                                           ctypes.byref(err)), err)
            try:
                infos = [_info(plan, j) for j in range(len(todo))]
                outs = (ctypes.c_void_p * max(1, len(todo)))()
                arrays: list[np.ndarray | None] = [None] * len(todo)
                if batch:
                    tok = [inf.n_tokens if inf.status == _lib.OK else 0 for inf in infos]
                    cols = O * (1 + nds)
                    big = np.empty((sum(tok), cols), dtype=np_dtype)
                    starts = np.concatenate([[0], np.cumsum(tok)]).astype(np.int64)
                    for j, inf in enumerate(infos):
                        if inf.status == _lib.OK:
                            arrays[j] = big[starts[j]: starts[j + 1]]
                else:
                    for j, inf in enumerate(infos):
                        if inf.status != _lib.OK:
                            continue
                        shape = (inf.n_tokens, inf.out_cols) if inf.n_planes == 1 and layout == "concat" else (
                            inf.n_planes, inf.n_tokens, inf.out_cols)
                        arrays[j] = np.empty(shape, dtype=np_dtype)
                for j, a in enumerate(arrays):
                    if a is not None:
                        assert a.nbytes == infos[j].out_bytes
                        outs[j] = a.ctypes.data
                if todo and lib.qvl_plan_ok_count(plan):
                    lib.qvl_ctx_reserve_plan(self._ctx, plan, None)
                    lib.qvl_plan_encode(self._ctx, plan, outs, ctypes.byref(err))  # per-item statuses below
                for j, i in enumerate(todo):
                    inf = _info(plan, j)
                    results[i] = self._result(i, inf, arrays[j] if inf.status == _lib.OK else None, key_of[i],
                                              dtype, layout, O, nds)
            finally:
                lib.qvl_plan_free(plan)
            # a path the library opened itself (a directory of frames, a big video) keeps its key only if the same
            # key comes out again now: a change the encode may have seen leaves the result without one (uncached)
            for i in as_path:
                r = results[i]
                if r is not None and r.ok and r.key and not r.cached:
                    try:
                        again = self._key(citems, i, pl)
                    except QvlError:
                        again = None
                    if again != r.key:
                        r.key = None
            if self.cache_dir is not None:
                for i in todo:
                    r = results[i]
                    if r is not None and r.ok and r.key:
                        try:
                            write_cache_entry(self.cache_dir, r, self.fingerprint)
                        except (OSError, ValueError, MemoryError):
                            pass  # the cache is an optimisation: a full disk, a read-only cache, an output over an
                            # entry's size (ValueError) or no memory for the entry is no error of the encode
        out = [r for r in results if r is not None]
        if raise_on_error:
            for r in out:
                if not r.ok:
                    raise QvlError(r.status, r.error or "")
        if batch:
            if big is None or len(todo) != n:  # some came from the cache: gather them into one array
                parts = [r.embeds if r.ok and r.embeds is not None else
                         np.empty((0, O * (1 + nds)), dtype=np_dtype) for r in out]
                big = np.concatenate(parts, axis=0) if parts else np.empty((0, O * (1 + nds)), dtype=np_dtype)
                offsets = np.concatenate([[0], np.cumsum([p.shape[0] for p in parts])]).astype(np.int64)
                for r, a, b in zip(out, offsets[:-1], offsets[1:]):
                    if r.ok:
                        r.embeds = big[a:b]
            else:
                offsets = np.concatenate([[0], np.cumsum([r.n_tokens if r.ok else 0 for r in out])]).astype(np.int64)
        return out, big, offsets

    def _result(self, i: int, inf: _lib.ItemInfo, arr: np.ndarray | None, key: str | None, dtype: str,
                layout: str, O: int, nds: int) -> Result:
        g = inf.grid
        r = Result(index=i, ok=inf.status == _lib.OK, key=key, embeds=arr, kind=(inf.kind or b"").decode(),
                   dtype=dtype, layout=layout, out_hidden=O, n_deepstack=nds, status=inf.status,
                   decode_ms=inf.decode_ms, preprocess_ms=inf.preprocess_ms, encode_ms=inf.encode_ms)
        if r.ok:
            r.grid_thw = (g.t, g.h, g.w)
            r.n_tokens = int(inf.n_tokens)
            r.source_size = (inf.src_width, inf.src_height)
            if inf.n_timestamps and inf.timestamps:
                r.timestamps = tuple(inf.timestamps[k] for k in range(inf.n_timestamps))
            if inf.n_frames and inf.frame_indices:
                r.frame_indices = tuple(int(inf.frame_indices[k]) for k in range(inf.n_frames))
        else:
            r.error = (inf.message or b"").decode(errors="replace") or lib.qvl_status_name(inf.status).decode()
            r.embeds = None
        return r

    def _cached(self, i: int, key: str, dtype: str, layout: str, deepstack: bool) -> Result | None:
        ent = read_cache_entry(self.cache_dir or "", key)
        O, nds = self._mi.out_hidden, (self._mi.n_deepstack if deepstack else 0)
        if ent is None or ent.dtype != _cache.ST_DTYPES[dtype]:
            return None
        e = ent.data
        if layout == "concat":
            ok = e.ndim == 2 and e.shape[1] == O * (1 + nds)
        else:
            if e.ndim == 2:  # one plane, stored as [n_tokens, out_hidden]
                e = e.reshape(1, *e.shape)
            ok = e.shape[0] == 1 + nds and e.shape[2] == O
        if not ok:
            return None
        e = e.astype(_DTYPES[dtype][1], copy=True)  # own, writable memory (the entry is a view into its file)
        return Result(index=i, ok=True, key=key, embeds=e, grid_thw=ent.grid_thw, n_tokens=e.shape[-2],
                      kind=ent.meta.get("kind") or "cached", dtype=dtype, layout=layout, out_hidden=O,
                      n_deepstack=nds, cached=True)

    def preprocess(self, items: Iterable[Item], preprocess: Mapping[str, Any] | None = None) -> list[Result]:
        """Decode and preprocess only, with this model's geometry: Results whose ``embeds`` are the pixel rows
        [t·h·w, row_len] float32 (as transformers' processor gives ``pixel_values``)."""
        with self._lock:
            self._live()
            return _preprocess(self._ctx, list(items), self._plan_params("float32", "concat", True, preprocess, []))


def _set_piece_rows(pl: _lib.PlanParams, max_batch_rows: int | None) -> None:
    if max_batch_rows is not None:
        if max_batch_rows < 1:
            raise ValueError(f"max_batch_rows {max_batch_rows}: at least 1")
        pl.max_batch_rows = max_batch_rows


def _stream_parts(run: Any, name: str) -> Iterator[Any]:
    """The parts a streaming call tells, as a generator: run(put) makes the call on a thread of its own and returns
    (status, error); put(part) hands a part over, waiting while two are not yet taken (the call waits with it), and
    says False once the consumer has gone (the callback then asks the call to stop). Leaving the loop early stops
    the call after the part in progress; a failure is raised in the consumer."""
    msgs: queue.Queue = queue.Queue(maxsize=2)  # parts not yet taken: the call waits beyond them
    stop = threading.Event()

    def send(kind: str, m: Any) -> bool:  # False once the consumer has gone
        while not stop.is_set():
            try:
                msgs.put((kind, m), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            s, err = run(lambda m: send("part", m))
            if s != _lib.OK and not stop.is_set():
                raise QvlError(s, err.message.decode(errors="replace"))
        except BaseException as e:  # handed to the consumer, raised there
            send("error", e)
        else:
            send("done", None)

    t = threading.Thread(target=work, name=name, daemon=True)
    t.start()
    try:
        while True:
            kind, m = msgs.get()
            if kind == "part":
                yield m
            elif kind == "error":
                raise m
            else:
                return
    finally:
        stop.set()
        t.join()


@dataclass
class RowsChunk:
    """A part of one item's pixel rows (:func:`qvl.preprocess_chunks`): its rows [row0, row0 + n) as
    ``pixel_values`` [n, row_len] float32, an array of its own, which are its temporal patches [t0, t0 + t) of the
    item's grid ``grid_thw``; the item is ``total`` rows long. Encoded as pixel rows of grid (t, h, w), a part gives
    exactly those tokens of the whole item's encode."""

    row0: int
    pixel_values: np.ndarray
    t0: int
    grid_thw: tuple[int, int, int]
    total: int


def preprocess_chunks(item: Item, model_dir: str | os.PathLike | None = None, *, max_batch_rows: int | None = None,
                      **options: Any) -> Iterator[RowsChunk]:
    """Decode and preprocess one item without a model, yielding its pixel rows in :class:`RowsChunk` s as they are
    complete (qvl_preprocess_stream): a video's in pieces of whole temporal patches of at most ``max_batch_rows``
    rows (default 4096), so that a long video's rows are never held whole; anything else as one chunk. The same rows
    as :func:`preprocess`, in order and back to back. ``model_dir`` and ``options`` as for :func:`preprocess`. The
    read runs on a thread of its own and waits while two chunks are not yet taken; leaving the loop early stops it.
    An item that fails raises :class:`QvlError`; a video sampled again after chunks were yielded raises it with status
    ``ERR_RESAMPLED`` (12): the chunks yielded are not its, and :func:`preprocess` reads it whole."""
    pp, vp, dp = _preprocess_struct(os.fspath(model_dir) if model_dir is not None else None, options)
    pl = _lib.init(_lib.PlanParams)
    pl.preprocess, pl.video, pl.decode = ctypes.pointer(pp), ctypes.pointer(vp), ctypes.pointer(dp)
    _set_piece_rows(pl, max_batch_rows)

    def run(put: Any) -> Any:
        keep: list[Any] = [pl, pp, vp, dp]
        citems = _items([item], keep)
        err = _lib.Error()

        def told(user: Any, info: Any, chunk: Any) -> int:
            inf, c = info.contents, chunk.contents
            rows = np.ctypeslib.as_array(c.rows, shape=(c.n_rows, c.row_len)).copy()
            g = (inf.grid.t, inf.grid.h, inf.grid.w)
            return 0 if put(RowsChunk(row0=c.row0, pixel_values=rows, t0=c.t0, grid_thw=g, total=inf.n_rows)) else 1

        fn = _lib.ROWS_FN(told)
        return lib.qvl_preprocess_stream(None, citems, ctypes.byref(pl), fn, None, ctypes.byref(err)), err

    return _stream_parts(run, "qvl-preprocess-chunks")


def _preprocess(ctx: Any, objs: list[Any], pl: _lib.PlanParams) -> list[Result]:
    keep: list[Any] = [pl]
    citems = _items(objs, keep)
    err = _lib.Error()
    plan = ctypes.c_void_p()
    _check(lib.qvl_plan_create(ctx, citems, len(objs), ctypes.byref(pl), ctypes.byref(plan), ctypes.byref(err)),
           err)
    out = []
    try:
        for i in range(len(objs)):
            inf = _info(plan, i)
            r = Result(index=i, ok=inf.status == _lib.OK, kind=(inf.kind or b"").decode(), status=inf.status,
                       decode_ms=inf.decode_ms, preprocess_ms=inf.preprocess_ms)
            if r.ok:
                rows = lib.qvl_plan_rows(plan, i)
                row_len = 3 * pl.preprocess.contents.temporal_patch * pl.preprocess.contents.patch ** 2
                r.embeds = np.ctypeslib.as_array(rows, shape=(inf.n_rows, row_len)).copy()
                r.grid_thw = (inf.grid.t, inf.grid.h, inf.grid.w)
                r.n_tokens = int(inf.n_tokens)
                r.source_size = (inf.src_width, inf.src_height)
            else:
                r.error = (inf.message or b"").decode(errors="replace")
            out.append(r)
    finally:
        lib.qvl_plan_free(plan)
    return out


def preprocess(items: Iterable[Item], model_dir: str | os.PathLike | None = None,
               **options: Any) -> list[Preprocessed | Result]:
    """Decode and preprocess items without a model: the pixel rows and grids alone, as transformers' Qwen3-VL
    processors produce them. ``model_dir`` supplies preprocessor_config.json / video_preprocessor_config.json
    (else Qwen3-VL's published values); ``options`` override them (as Encoder's ``preprocess``). Each item gives
    a :class:`Preprocessed` (pixel_values, grid_thw), or its failed :class:`Result`."""
    pp, vp, dp = _preprocess_struct(os.fspath(model_dir) if model_dir is not None else None, options)
    pl = _lib.init(_lib.PlanParams)
    pl.preprocess, pl.video, pl.decode = ctypes.pointer(pp), ctypes.pointer(vp), ctypes.pointer(dp)
    res = _preprocess(None, list(items), pl)
    return [Preprocessed(r.embeds, r.grid_thw) if r.ok else r for r in res]  # type: ignore[misc]


def synth(out_dir: str | os.PathLike, preset: str = "tiny", seed: int = 1, *, depth: int = 0,
          deepstack: Sequence[int] | None = None, dtype: str = "bf16", layout: str = "hf") -> str:
    """Write a deterministic synthetic checkpoint (qvl_synth_write) into ``out_dir``; returns its path. Presets:
    "tiny", "qwen3-vl-2b", "qwen3-vl-8b", "qwen3.5-27b", ...; ``deepstack`` lists DeepStack block indices
    (None: the preset's)."""
    sp = _lib.init(_lib.SynthParams)
    p = preset.encode()
    sp.preset = p
    sp.seed = int(seed)
    sp.depth = int(depth)
    sp.dtype = {"f32": _lib.DTYPE_F32, "f16": _lib.DTYPE_F16, "bf16": _lib.DTYPE_BF16}[dtype]
    sp.layout = {"hf": 0, "mlx": 1, "sidecar": 2, "sharded": 3, "nested": 4}[layout]
    if deepstack is not None:
        ds = list(deepstack)
        sp.n_deepstack = len(ds)
        for k, v in enumerate(ds):
            sp.deepstack_index[k] = int(v)
    err = _lib.Error()
    _check(lib.qvl_synth_write(ctypes.byref(sp), os.fsencode(out_dir), ctypes.byref(err)), err)
    return os.fspath(out_dir)


def describe(model_dir: str | os.PathLike) -> dict[str, Any]:
    """Describe a model directory's vision tower without loading it for encoding: every weight is read, checked
    finite and fingerprinted, none is packed (a fraction of an Encoder's load time and memory). The keys and
    values are those of ``qvl info --json`` (model_type, fingerprint, depth, hidden, ..., kernels, bf16_kernels);
    raises QvlError as an Encoder's load would (a NaN weight, a missing tensor, ...)."""
    lp = _lib.init(_lib.LoadParams)
    lp.describe_only = 1
    m = ctypes.c_void_p()
    err = _lib.Error()
    _check(lib.qvl_model_load(os.fsencode(model_dir), ctypes.byref(lp), ctypes.byref(m), ctypes.byref(err)), err)
    try:
        mi = _lib.ModelInfo()
        lib.qvl_model_get_info_sized(m, ctypes.byref(mi), ctypes.sizeof(mi))
        hexbuf = ctypes.create_string_buffer(33)
        _check(lib.qvl_model_fingerprint(m, None, hexbuf, ctypes.byref(err)), err)
    finally:
        lib.qvl_model_free(m)
    return {
        "qvl_version": version(), "model": os.fspath(model_dir), "model_type": mi.model_type.decode(),
        "fingerprint": hexbuf.value.decode(), "depth": mi.depth, "hidden": mi.hidden, "heads": mi.heads,
        "head_dim": mi.head_dim, "intermediate": mi.intermediate, "out_hidden": mi.out_hidden,
        "n_deepstack": mi.n_deepstack, "deepstack_index": list(mi.deepstack_index[: mi.n_deepstack]),
        "patch": mi.patch, "temporal_patch": mi.temporal_patch, "merge": mi.merge, "in_channels": mi.in_channels,
        "row_len": mi.row_len, "num_pos": mi.num_pos, "n_tensors": int(mi.n_tensors), "n_params": int(mi.n_params),
        "weight_bytes": int(mi.weight_bytes), "weight_dtype": lib.qvl_dtype_name(mi.weight_dtype).decode(),
        "kernels": lib.qvl_isa_name(mi.isa).decode(), "bf16_kernels": mi.bf16_backend.decode() or None,
        "amx": mi.amx.decode(), "auto_precision": mi.auto_precision.decode(),
        "source": {0: "sidecar", 1: "sharded", 2: "single"}.get(mi.source, "?"),
        "n_files": mi.n_files, "prefix": mi.prefix.decode(), "conv_layout": "mlx" if mi.conv_layout_mlx else "hf",
    }
