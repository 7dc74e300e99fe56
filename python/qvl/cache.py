"""The on-disk content-addressed embedding cache shared with ``qvl serve``, ``qvl cache`` and ``qvl encode --cache``
(tools/serve/serve_cache.c): the same files, written and checked the same way, so that entries written here are
served by the server and entries the server or the CLI wrote are hits here.

    root/objects/ab/<key>.safetensors   one entry per key (ab: the key's first two hex digits), a safetensors
                                        file: "ec_cache" (the item's output matrix in the dtype it was asked
                                        for: [n_tokens, cols], or [1 + n_deepstack, n_tokens, out_hidden] for
                                        the split layout with DeepStack planes; first, at the 64-byte data
                                        start) then "grid_thw" I64 [1, 3]; __metadata__: qvl_entry "1", key,
                                        fingerprint, qvl_version, created (Unix seconds), xxh3_128 (32 hex
                                        digits: XXH3-128 of every data byte after the header, high 64 bits
                                        first)
    root/tmp/                           temporaries, written whole and renamed into objects/ (atomic)

Reads take no lock: the checksum is checked on every read, and an entry that fails it (or does not parse) is
deleted and counts as a miss. A hit older than an hour has its mtime refreshed (eviction by ``qvl cache gc`` or
the server's ``--cache-size`` is least recently used by mtime; this module evicts nothing). The key
(qvl_item_key) names the output's dtype, layout, DeepStack choice and precision: each output is its own entry.
The hash is libxxhash's XXH3_128bits, called through ctypes: libqvl links libxxhash, so it is loaded wherever
libqvl is.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import _lib

__all__ = ["CacheEntry", "entry_path", "init_cache_dir", "put_entry", "get_entry", "parse_entry", "xxh3_128_hex",
           "ST_DTYPES"]

ENTRY_MAX_BYTES = 4 << 30
HEADER_MAX_BYTES = 64 << 20
TOUCH_AFTER_S = 3600
# safetensors dtype names of the output dtypes, and their numpy types (bfloat16 as its uint16 bit patterns)
ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
_CACHEDIR_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# qvl embedding cache\n"


class _Hash128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]  # XXH128_hash_t


def _load_xxhash() -> ctypes.CDLL | None:
    _lib.lib  # libqvl first: its libxxhash.so.0 is then the one found (already loaded, by soname)
    try:
        x = ctypes.CDLL("libxxhash.so.0")
    except OSError:  # a libqvl without a shared libxxhash: the xxhash package, if installed, is used instead
        return None
    x.XXH3_128bits.restype = _Hash128
    x.XXH3_128bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return x


_xxh = _load_xxhash()


def xxh3_128_hex(data: bytes | bytearray | memoryview | np.ndarray) -> str:
    """XXH3-128 of the bytes as the cache writes it: 32 hex digits, the high 64 bits first (libxxhash's
    canonical form)."""
    a = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    if _xxh is None:
        try:
            import xxhash  # type: ignore
        except ImportError as e:
            raise ImportError("the qvl cache needs libxxhash.so.0 (libqvl's dependency) or the xxhash package") from e
        return xxhash.xxh3_128_hexdigest(a.tobytes())
    h = _xxh.XXH3_128bits(a.ctypes.data if a.size else None, a.size)
    return f"{h.high64:016x}{h.low64:016x}"


def _is_key(key: str) -> bool:
    return len(key) == 64 and all(c in "0123456789abcdef" for c in key)


def entry_path(root: str | os.PathLike, key: str) -> str:
    """Where the entry of `key` lives: root/objects/<key[:2]>/<key>.safetensors."""
    return os.path.join(os.fspath(root), "objects", key[:2], key + ".safetensors")


def init_cache_dir(root: str | os.PathLike) -> None:
    """Create the cache's directories (objects, tmp, gc, vllm-ec) and its CACHEDIR.TAG, as the server does."""
    root = os.fspath(root)
    for sub in ("objects", "tmp", "gc", "vllm-ec"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    try:
        fd = os.open(os.path.join(root, "CACHEDIR.TAG"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, _CACHEDIR_TAG)  # only a marker for backup tools
    finally:
        os.close(fd)


@dataclass
class CacheEntry:
    """A verified entry: ``data`` the stored matrix (a read-only view into the file's bytes; "BF16" as uint16),
    ``dtype`` its safetensors dtype name, ``grid_thw`` and the metadata."""

    key: str
    data: np.ndarray
    dtype: str
    grid_thw: tuple[int, int, int]
    meta: dict[str, str] = field(default_factory=dict)


def parse_entry(buf: bytes, key: str) -> CacheEntry:
    """Parse and verify an entry file's bytes as the server does (key, checksum, tensors); ValueError if it is
    not a sound entry for `key`."""
    n = len(buf)
    if n < 8:
        raise ValueError("too short")
    hl = int.from_bytes(buf[:8], "little")
    if hl > n - 8 or hl > HEADER_MAX_BYTES:
        raise ValueError("bad header length")
    try:
        h = json.loads(buf[8: 8 + hl])
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"bad header: {e}") from None
    if not isinstance(h, dict):
        raise ValueError("bad header")
    meta = h.get("__metadata__")
    ec, g = h.get("ec_cache"), h.get("grid_thw")
    if not isinstance(meta, dict) or meta.get("key") != key or not isinstance(meta.get("xxh3_128"), str) \
            or not isinstance(ec, dict) or not isinstance(g, dict):
        raise ValueError("not an entry for this key")
    data = memoryview(buf)[8 + hl:]
    if xxh3_128_hex(data) != meta["xxh3_128"]:
        raise ValueError("checksum mismatch")
    dt, sh, of, gof = ec.get("dtype"), ec.get("shape"), ec.get("data_offsets"), g.get("data_offsets")
    if dt not in _NP or not isinstance(sh, list) or not 2 <= len(sh) <= 3 or not isinstance(of, list) \
            or len(of) != 2 or not isinstance(gof, list) or len(gof) != 2:
        raise ValueError("bad tensors")
    b, e = of
    gb, ge = gof
    dlen = len(data)
    if not (0 <= b <= e <= dlen and 0 <= gb and ge == gb + 24 and ge <= dlen):
        raise ValueError("bad offsets")
    if not all(isinstance(v, int) and 0 <= v < 10 ** 12 for v in sh) or int(np.prod(sh)) * np.dtype(_NP[dt]).itemsize != e - b:
        raise ValueError("bad shape")
    grid = np.frombuffer(data[gb:ge], dtype="<i8")
    if not all(1 <= int(v) <= 2 ** 31 - 1 for v in grid):
        raise ValueError("bad grid")
    arr = np.frombuffer(data[b:e], dtype=np.dtype(_NP[dt]).newbyteorder("<")).reshape(sh)
    return CacheEntry(key, arr, dt, (int(grid[0]), int(grid[1]), int(grid[2])),
                      {k: v for k, v in meta.items() if isinstance(v, str)})


def get_entry(root: str | os.PathLike, key: str) -> CacheEntry | None:
    """The entry of `key`, verified, or None (a miss). An entry that fails verification is deleted (as the
    server does); a hit whose mtime is over an hour old is touched (LRU)."""
    if not _is_key(key):
        return None
    path = entry_path(root, key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        ok = stat.S_ISREG(st.st_mode) and st.st_size <= ENTRY_MAX_BYTES
        buf = b""
        if ok:
            parts, left = [], st.st_size
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 26))
                if not chunk:
                    break
                parts.append(chunk)
                left -= len(chunk)
            ok = left == 0
            buf = b"".join(parts)
    except OSError:
        ok = False
    finally:
        os.close(fd)
    entry = None
    if ok:
        try:
            entry = parse_entry(buf, key)
        except ValueError:
            entry = None
    if entry is None:
        try:
            os.unlink(path)  # corrupt: gone, a miss
        except OSError:
            pass
        return None
    if time.time() - st.st_mtime > TOUCH_AFTER_S:
        try:
            os.utime(path)  # LRU: used now
        except OSError:
            pass
    return entry


def _build(tensors: list[tuple[str, str, tuple[int, ...], bytes | memoryview]], meta: dict[str, str]) -> bytes:
    """A safetensors file as the server lays it out: __metadata__ then the tensors in order, compact JSON padded
    with spaces so that the data starts at a multiple of 64."""
    h: dict[str, object] = {"__metadata__": meta}
    off = 0
    for name, dt, shape, data in tensors:
        nb = memoryview(data).nbytes
        h[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nb]}
        off += nb
    js = json.dumps(h, separators=(",", ":")).encode()
    hl = (8 + len(js) + 63) // 64 * 64 - 8
    return b"".join([hl.to_bytes(8, "little"), js, b" " * (hl - len(js))] + [bytes(t[3]) for t in tensors])


def put_entry(root: str | os.PathLike, key: str, data: np.ndarray, dtype: str, grid_thw: tuple[int, int, int],
              fingerprint: str, qvl_version: str) -> str:
    """Store `data` (the matrix, [n_tokens, cols] or [planes, n_tokens, out_hidden]; dtype "F32"/"F16"/"BF16")
    as the entry of `key`: written whole into root/tmp, then renamed into objects/ (atomic: readers never see a
    partial entry). Returns the entry's path; OSError when it cannot be written."""
    if not _is_key(key):
        raise ValueError(f"{key!r} is not a cache key (64 hex digits)")
    if dtype not in _NP or data.ndim not in (2, 3):
        raise ValueError(f"cache entries hold a 2-D or 3-D F32/F16/BF16 matrix, not {dtype} {data.shape}")
    root = os.fspath(root)
    a = np.ascontiguousarray(data, dtype=np.dtype(_NP[dtype]).newbyteorder("<"))
    g = np.asarray([grid_thw], dtype="<i8")
    body = a.tobytes() + g.tobytes()
    meta = {"qvl_entry": "1", "key": key, "fingerprint": fingerprint or "", "qvl_version": qvl_version,
            "created": str(int(time.time())), "xxh3_128": xxh3_128_hex(body)}
    blob = _build([("ec_cache", dtype, a.shape, memoryview(body)[: a.nbytes]),
                   ("grid_thw", "I64", (1, 3), memoryview(body)[a.nbytes:])], meta)
    tmpdir = os.path.join(root, "tmp")
    os.makedirs(tmpdir, exist_ok=True)
    tmp = os.path.join(tmpdir, f"{os.getpid()}.{threading.get_ident():x}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        dst = entry_path(root, key)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return dst
