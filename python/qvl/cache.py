"""The on-disk content-addressed embedding cache shared with ``qvl serve``, ``qvl cache`` and ``qvl encode --cache``:
ctypes over libqvl's cache API (``qvl_cache_*`` in include/qvl.h, src/cache/cache.c), so the binding reads and
writes entries with the very code the server and the CLI use.

    root/objects/ab/<key>.safetensors   one entry per key (ab: the key's first two hex digits), a safetensors
                                        file: "ec_cache" (the item's output matrix in the dtype it was asked
                                        for: [n_tokens, cols], or [1 + n_deepstack, n_tokens, out_hidden] for
                                        the split layout with DeepStack planes) then "grid_thw" I64 [1, 3];
                                        __metadata__: qvl_entry "1", key, fingerprint, qvl_version, created
                                        (Unix seconds), xxh3_128 (of every data byte), and kind (image,
                                        video, frames, rows) where the writer gave it
    root/tmp/                           temporaries, written whole and renamed into objects/ (atomic)

Reads take no lock: the checksum is checked on every read, and an entry that fails it (or does not parse) is
deleted and counts as a miss. A hit older than an hour has its mtime refreshed (eviction by ``qvl cache gc``, the
server's ``--cache-size`` or :meth:`Cache.gc` is least recently used by mtime). The key (qvl_item_key) names the
output's dtype, layout, DeepStack choice and precision: each output is its own entry.

The module functions use one :class:`Cache` handle per root and process (opening one scans the root once). A read
(get_entry) opens it on an existing cache only and creates nothing: a directory that is not a qvl cache (no
objects/) is a miss, left as it was; a write (put_entry, init_cache_dir) opens one that creates the cache's
directories, which then serves the reads too.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import _lib

__all__ = ["Cache", "CacheEntry", "entry_path", "init_cache_dir", "put_entry", "get_entry", "ST_DTYPES"]

# safetensors dtype names of the output dtypes, and their numpy types (bfloat16 as its uint16 bit patterns)
ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_NP = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_QVL_DTYPE = {"F32": _lib.DTYPE_F32, "F16": _lib.DTYPE_F16, "BF16": _lib.DTYPE_BF16}


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounded to nearest even (NaN kept quiet), as the library rounds."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r


def _is_key(key: str) -> bool:
    return isinstance(key, str) and len(key) == 64 and all(c in "0123456789abcdef" for c in key)


def _raise(err: _lib.Error, what: str) -> None:
    msg = f"{what}: {err.message.decode(errors='replace')}"
    if err.status in (_lib.ERR_INVALID_ARG, _lib.ERR_LIMIT):
        raise ValueError(msg)
    if err.status == _lib.ERR_NOMEM:
        raise MemoryError(msg)
    raise OSError(msg)


def entry_path(root: str | os.PathLike, key: str) -> str:
    """Where the entry of `key` lives: root/objects/<key[:2]>/<key>.safetensors."""
    return os.path.join(os.fsdecode(root), "objects", key[:2], key + ".safetensors")


@dataclass
class CacheEntry:
    """A verified entry: ``data`` the stored matrix (a read-only view into a copy of the file's bytes; "BF16" as
    uint16), ``dtype`` its safetensors dtype name, ``grid_thw`` and the metadata."""

    key: str
    data: np.ndarray
    dtype: str
    grid_thw: tuple[int, int, int]
    meta: dict[str, str] = field(default_factory=dict)


class Cache:
    """A libqvl cache handle on `root` (created with its directories and CACHEDIR.TAG if need be). ``max_bytes``:
    the size budget a put over it collects down to (0: unbounded); ``vllm_links``: also link
    root/vllm-ec/<key>/encoder_cache.safetensors. ``existing=True`` opens only an existing cache (root/objects/ a
    directory) and creates nothing there, for reads (qvl_cache_params.existing): another directory is OSError
    "qvl_cache_open: <root> is not a qvl cache (...)". Thread-safe; processes share a root through the files.
    `root` may be str, bytes or os.PathLike (``root`` holds it as str, os.fsdecode'd)."""

    def __init__(self, root: str | bytes | os.PathLike, max_bytes: int = 0, vllm_links: bool = False, *,
                 existing: bool = False) -> None:
        self.root = os.fsdecode(root)
        self.existing = bool(existing)
        self._guard = _lib.HandleGuard(functools.partial(ValueError, f"the cache {self.root!r} is closed"))
        p = _lib.init(_lib.CacheParams)
        p.max_bytes = max_bytes
        p.vllm_links = int(bool(vllm_links))
        p.existing = int(self.existing)
        h, err = ctypes.c_void_p(), _lib.Error()
        if _lib.lib.qvl_cache_open(os.fsencode(self.root), ctypes.byref(p), ctypes.byref(h), ctypes.byref(err)):
            _raise(err, "qvl_cache_open")
        self._guard.open(h)

    def close(self) -> None:
        """Close the handle once the calls other threads have in flight are done; calls after it raise
        ValueError."""
        h = self._guard.close()
        if h:
            _lib.lib.qvl_cache_close(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, key: str) -> CacheEntry | None:
        """The verified entry of `key`, or None (a miss; a corrupt entry is deleted)."""
        if not _is_key(key):
            return None
        rec, err = _lib.CacheRecord(), _lib.Error()
        with self._guard.using() as h:
            if _lib.lib.qvl_cache_get_sized(h, key.encode(), ctypes.byref(rec), ctypes.sizeof(rec), ctypes.byref(err)):
                _raise(err, "qvl_cache_get")
        if rec.result != _lib.CACHE_HIT:
            return None
        try:
            raw = ctypes.string_at(rec.file, rec.file_bytes)
        finally:
            _lib.lib.qvl_free(rec.file)
        dt = rec.dtype.decode()
        shape = tuple(int(rec.shape[i]) for i in range(rec.ndim))
        arr = np.frombuffer(raw, dtype=_NP[dt], count=rec.nbytes // _NP[dt].itemsize,
                            offset=rec.data - rec.file).reshape(shape)
        meta = {"qvl_entry": "1", "key": key, "fingerprint": rec.fingerprint.decode(errors="replace"),
                "qvl_version": rec.qvl_version.decode(errors="replace"), "created": str(rec.created),
                "xxh3_128": rec.xxh3_128.decode()}
        if rec.kind:
            meta["kind"] = rec.kind.decode(errors="replace")
        return CacheEntry(key, arr, dt, (rec.grid.t, rec.grid.h, rec.grid.w), meta)

    def put(self, key: str, data: np.ndarray, dtype: str, grid_thw: tuple[int, int, int], fingerprint: str,
            kind: str | None = None) -> str:
        """Store `data` ([n_tokens, cols], or [planes, n_tokens, cols]; dtype "F32"/"F16"/"BF16") under `key`, as
        every writer does (one plane is stored [n_tokens, cols]); returns the entry's path. For "BF16", `data` is
        either the bit patterns (uint16, as get returns them) or floats, rounded to bf16 (nearest even). `kind`
        ("image", "video", "frames", "rows" or None) is recorded as the entry's meta["kind"]."""
        if not _is_key(key):
            raise ValueError(f"{key!r} is not a cache key (64 hex digits)")
        if dtype not in _NP or data.ndim not in (2, 3):
            raise ValueError(f"cache entries hold a 2-D or 3-D F32/F16/BF16 matrix, not {dtype} {data.shape}")
        if dtype == "BF16" and data.dtype.kind == "f":
            a = _bf16_bits(data)  # a cast to uint16 would store the values' integer parts as bit patterns
        elif dtype == "BF16" and data.dtype != np.uint16:
            raise ValueError(f"BF16 entries take bf16 bit patterns (uint16) or floats, not {data.dtype}")
        else:
            a = np.ascontiguousarray(data, dtype=_NP[dtype])
        planes, tokens, cols = (1, *a.shape) if a.ndim == 2 else a.shape
        err = _lib.Error()
        with self._guard.using() as h:
            if _lib.lib.qvl_cache_put_kind(h, key.encode(), kind.encode() if kind else None, _QVL_DTYPE[dtype],
                                           a.ctypes.data if a.size else None, planes, tokens, cols,
                                           _lib.Grid(*grid_thw), (fingerprint or "").encode(), ctypes.byref(err)):
                _raise(err, "qvl_cache_put")
        return entry_path(self.root, key)

    def exists(self, key: str) -> bool:
        """Whether an entry file exists for `key` (not verified)."""
        if not _is_key(key):
            return False
        with self._guard.using() as h:
            return bool(_lib.lib.qvl_cache_exists(h, key.encode(), None))

    def gc(self, target: int = 0) -> tuple[int, int]:
        """Evict least recently used entries down to `target` bytes (0: 90 % of the budget): (entries, bytes)
        evicted. OSError when another collector holds the lock."""
        b, n, err = ctypes.c_uint64(), ctypes.c_size_t(), _lib.Error()
        with self._guard.using() as h:
            if _lib.lib.qvl_cache_gc(h, target, ctypes.byref(b), ctypes.byref(n), ctypes.byref(err)):
                _raise(err, "qvl_cache_gc")
        return n.value, b.value

    def verify(self) -> tuple[int, int]:
        """Read and verify every entry, deleting corrupt ones: (ok, corrupt)."""
        ok, bad, err = ctypes.c_size_t(), ctypes.c_size_t(), _lib.Error()
        with self._guard.using() as h:
            if _lib.lib.qvl_cache_verify(h, ctypes.byref(ok), ctypes.byref(bad), ctypes.byref(err)):
                _raise(err, "qvl_cache_verify")
        return ok.value, bad.value

    def export_vllm(self, directory: str | bytes | os.PathLike) -> int:
        """Link every entry as directory/<key>/encoder_cache.safetensors (vLLM's layout): the count."""
        n, err = ctypes.c_size_t(), _lib.Error()
        with self._guard.using() as h:
            if _lib.lib.qvl_cache_export_vllm(h, os.fsencode(directory), ctypes.byref(n), ctypes.byref(err)):
                _raise(err, "qvl_cache_export_vllm")
        return n.value

    def stats(self) -> dict[str, int]:
        """This handle's counters: hits, misses (corrupt included), corrupt, puts, put_errors, bytes, entries
        (scanned at open and by each collection), evictions, evicted_bytes."""
        s = _lib.CacheStats()
        with self._guard.using() as h:
            _lib.lib.qvl_cache_get_stats_sized(h, ctypes.byref(s), ctypes.sizeof(s))
        return {name: int(getattr(s, name)) for name, _ in _lib.CacheStats._fields_}


_handles: dict[tuple[int, str], Cache] = {}  # (pid, root): a creating handle, or an existing-only one for reads
_handles_mu = threading.Lock()


def _cache(root: str | bytes | os.PathLike, existing: bool = False) -> Cache | None:
    """This process's handle on root (a forked child opens its own). For a write (existing False): one that
    creates the cache's directories, opened in place of an existing-only handle the table holds. For a read: any
    handle the table holds, else one opened on an existing cache only, or None when root is not a qvl cache (no
    objects/ directory: nothing is opened or created). A replaced handle is not closed here: calls that took it
    finish on it, and it closes when the last of them drops it."""
    k = (os.getpid(), os.path.abspath(os.fsdecode(root)))
    with _handles_mu:
        c = _handles.get(k)
        if c is not None and (existing or not c.existing):
            return c
        if existing and not os.path.isdir(os.path.join(k[1], "objects")):
            return None
        c = _handles[k] = Cache(k[1], existing=existing)
        return c


def _writer(root: str | bytes | os.PathLike) -> Cache:
    """This process's creating handle on root (see _cache)."""
    c = _cache(root)
    assert c is not None
    return c


def init_cache_dir(root: str | os.PathLike) -> None:
    """Create the cache's directories (objects, tmp, gc, vllm-ec) and its CACHEDIR.TAG, as the server does."""
    _writer(root)


def get_entry(root: str | os.PathLike, key: str) -> CacheEntry | None:
    """The entry of `key`, verified, or None (a miss). An entry that fails verification is deleted (as the
    server does); a hit whose mtime is over an hour old is touched (LRU). A read creates no cache: a root that is
    not a qvl cache (no objects/ directory, or no directory at all) is a miss and is left as it was."""
    if not _is_key(key) or not os.path.isdir(os.fspath(root)):
        return None
    c = _cache(root, existing=True)
    return c.get(key) if c is not None else None


def put_entry(root: str | os.PathLike, key: str, data: np.ndarray, dtype: str, grid_thw: tuple[int, int, int],
              fingerprint: str, qvl_version: str | None = None, kind: str | None = None) -> str:
    """Store `data` (the matrix, [n_tokens, cols] or [planes, n_tokens, out_hidden]; dtype "F32"/"F16"/"BF16")
    as the entry of `key`: written whole into root/tmp, then renamed into objects/ (atomic: readers never see a
    partial entry); one plane is stored [n_tokens, cols]. Returns the entry's path; OSError when it cannot be
    written. ``qvl_version`` is accepted for compatibility: the entry records the loaded libqvl's version. ``kind``
    (image, video, frames, rows) is recorded as the entry's meta["kind"]."""
    del qvl_version
    return _writer(root).put(key, data, dtype, grid_thw, fingerprint, kind)
