"""The binding's cache is the server's (libqvl's qvl_cache_*, through ctypes): entries the binding writes pass `qvl
cache verify` and are hits for `qvl encode --cache`; entries `qvl encode --cache` writes are hits for the binding,
bit for bit; entries of qvl 1.0.0 read back; a damaged entry is a miss and is deleted; the handle's counters."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import qvl
from qvl import cache as qcache

from conftest import PHOTO, SRC, data, read_safetensors

OTHER = data("tests/data/photos/chelsea.png")


def cli_encode(qvl_bin: str, model_dir: str, root, path: str, out) -> dict[str, str]:
    subprocess.run([qvl_bin, "encode", "-q", "--model", model_dir, "--cache", str(root), path, "-o", str(out),
                    "-t", "1"], check=True)
    return read_safetensors(out)[1]


def verify(qvl_bin: str, root) -> tuple[int, int, str]:
    p = subprocess.run([qvl_bin, "cache", "verify", str(root)], capture_output=True, text=True)
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines())
    return int(lines["ok"]), int(lines["corrupt"].split()[0]), str(p.returncode)


def test_binding_entries_serve_the_cli(model_dir: str, qvl_bin: str, tmp_path) -> None:
    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [s] = e.encode([PHOTO], layout="split")  # what `qvl encode --cache` stores: F32, split, DeepStack
    [c] = e.encode([PHOTO])  # what a server request with the defaults stores: F32, concat, DeepStack
    assert not s.cached and not c.cached and s.key != c.key
    assert verify(qvl_bin, root) == (2, 0, "0")
    # the format, byte for byte where the server fixes it
    raw = open(qcache.entry_path(root, s.key), "rb").read()
    hl = int.from_bytes(raw[:8], "little")
    assert (8 + hl) % 64 == 0
    h = json.loads(raw[8: 8 + hl])
    assert list(h) == ["__metadata__", "ec_cache", "grid_thw"]
    assert list(h["__metadata__"]) == ["qvl_entry", "key", "fingerprint", "qvl_version", "created", "xxh3_128",
                                       "kind"]
    assert h["__metadata__"]["kind"] == "image"
    assert h["ec_cache"]["dtype"] == "F32" and h["ec_cache"]["shape"] == list(s.embeds.shape)
    assert h["grid_thw"] == {"dtype": "I64", "shape": [1, 3], "data_offsets": [s.embeds.nbytes, s.embeds.nbytes + 24]}
    # the CLI finds the binding's entry (a hit) and gives the same embeddings
    meta = cli_encode(qvl_bin, model_dir, root, PHOTO, tmp_path / "o.safetensors")
    assert meta.get("item0.cache") == "hit" and meta["item0.key"] == s.key
    t, _ = read_safetensors(tmp_path / "o.safetensors")
    assert t["item0.merged"].tobytes() == s.merged.tobytes()
    for k, d in enumerate(s.deepstack):
        assert t[f"item0.deepstack{k}"].tobytes() == d.tobytes()


def test_cli_entries_are_binding_hits(model_dir: str, qvl_bin: str, tmp_path) -> None:
    root = tmp_path / "cache"
    meta = cli_encode(qvl_bin, model_dir, root, OTHER, tmp_path / "o.safetensors")
    assert "item0.cache" not in meta
    key = meta["item0.key"]
    assert os.path.isfile(qcache.entry_path(root, key))
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    assert e.key(OTHER, layout="split") == key
    # the CLI's entry stands for the encode: a hit whose bytes are the CLI's (not the binding's own encode)
    ent = qvl.read_cache_entry(root, key)
    marked = ent.data.copy()
    marked[0, 0, 0] = 12345.0
    qcache.put_entry(root, key, marked, "F32", ent.grid_thw, e.fingerprint, qvl.version())
    [h] = e.encode([OTHER], layout="split")
    assert h.cached and h.embeds[0, 0, 0] == 12345.0
    qcache.put_entry(root, key, ent.data, "F32", ent.grid_thw, ent.meta["fingerprint"], qvl.version())
    [h] = e.encode([OTHER], layout="split")
    [ref] = qvl.Encoder(model_dir, threads=1).encode([OTHER], layout="split")
    assert h.cached and h.grid_thw == ref.grid_thw and h.embeds.tobytes() == ref.embeds.tobytes()
    # another output of the same item is another key: a miss
    [c] = e.encode([OTHER])
    assert not c.cached


def test_damaged_entry_is_a_deleted_miss(model_dir: str, qvl_bin: str, tmp_path) -> None:
    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [a] = e.encode([PHOTO])
    path = qcache.entry_path(root, a.key)
    raw = bytearray(open(path, "rb").read())
    for where in (len(raw) - 30, len(raw) - 3):  # a byte of the matrix; a byte of grid_thw
        bad = bytearray(raw)
        bad[where] ^= 0x01
        open(path, "wb").write(bad)
        assert qvl.read_cache_entry(root, a.key) is None and not os.path.exists(path)
        open(path, "wb").write(bad)
        [b] = e.encode([PHOTO])  # a miss: encoded again, and stored again
        assert not b.cached and b.embeds.tobytes() == a.embeds.tobytes()
        assert qvl.read_cache_entry(root, a.key).data.tobytes() == a.embeds.tobytes()
        assert verify(qvl_bin, root) == (1, 0, "0")
    # the server's verify agrees about a damaged binding entry
    bad = bytearray(raw)
    bad[len(raw) - 30] ^= 0x01
    open(path, "wb").write(bad)
    assert verify(qvl_bin, root) == (0, 1, "1") and not os.path.exists(path)


def test_lru_touch_on_hit(model_dir: str, tmp_path) -> None:
    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [a] = e.encode([PHOTO])
    path = qcache.entry_path(root, a.key)
    old = os.stat(path).st_mtime - 7200
    os.utime(path, (old, old))
    [b] = e.encode([PHOTO])
    assert b.cached and os.stat(path).st_mtime > old + 3600


def test_server_shares_the_cache(model_dir: str, qvl_bin: str, tmp_path) -> None:
    """`qvl serve --cache` answers a request from the binding's entry, and the binding hits the server's."""
    import signal
    import time
    import urllib.error
    import urllib.request

    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [mine] = e.encode([PHOTO], dtype="bfloat16")  # the binding's entry: bf16, concat, DeepStack
    port_file = tmp_path / "port"
    log = open(tmp_path / "serve.log", "w")
    srv = subprocess.Popen([qvl_bin, "serve", "--model", model_dir, "--port", "0", "--port-file", str(port_file),
                            "--cache", str(root), "--threads", "1", "--workers", "1"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert srv.poll() is None and time.monotonic() < deadline, open(tmp_path / "serve.log").read()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{int(port_file.read_text())}"
        while True:  # the port file is written once listening; /health/ready says 503 until the model is loaded
            try:
                with urllib.request.urlopen(f"{base}/health/ready", timeout=10):
                    break
            except urllib.error.HTTPError:
                assert srv.poll() is None and time.monotonic() < deadline, open(tmp_path / "serve.log").read()
                time.sleep(0.05)

        def post(path: str, query: str) -> tuple[dict[str, str], bytes]:
            body = open(path, "rb").read()
            ctype = "image/png" if path.endswith(".png") else "image/jpeg"
            req = urllib.request.Request(f"{base}/v1/encode?{query}", data=body, headers={"Content-Type": ctype})
            with urllib.request.urlopen(req, timeout=60) as r:
                return dict(r.headers), r.read()

        h, body = post(PHOTO, "dtype=bf16")
        assert h["X-Qvl-Cache"] == "hit" and h["X-Qvl-Key"] == mine.key
        out = tmp_path / "r.safetensors"
        out.write_bytes(body)
        t, _ = read_safetensors(out)
        assert t["embeddings"].tobytes() == mine.embeds.tobytes()
        # the server stores its own output (f16, split) and the binding finds it
        h, _ = post(OTHER, "dtype=f16&layout=split")
        assert h["X-Qvl-Cache"] == "miss"
        key = h["X-Qvl-Key"]
        deadline = time.monotonic() + 30  # the server writes its entry after answering
        while not os.path.exists(qcache.entry_path(root, key)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
        log.close()
    [h2] = e.encode([OTHER], dtype="float16", layout="split")
    [ref] = qvl.Encoder(model_dir, threads=1).encode([OTHER], dtype="float16", layout="split")
    assert h2.cached and h2.key == key and h2.embeds.tobytes() == ref.embeds.tobytes()


def test_old_entries_read_back(tmp_path) -> None:
    """Entries written by qvl 1.0.0's server code (tests/fixtures/cache) are hits, with the matrix the file holds."""
    root = tmp_path / "cache"
    fixtures = sorted((SRC / "tests" / "fixtures" / "cache").glob("*.safetensors"))
    assert len(fixtures) == 2
    for f in fixtures:
        key = f.stem
        os.makedirs(root / "objects" / key[:2], exist_ok=True)
        shutil.copy(f, qcache.entry_path(root, key))
        t, meta = read_safetensors(f)
        ent = qcache.get_entry(root, key)
        assert ent is not None and ent.dtype == "F32" and ent.meta["qvl_version"] == "1.0.0"
        assert ent.meta["key"] == key and ent.meta["fingerprint"] == meta["fingerprint"]
        assert ent.data.tobytes() == t["ec_cache"].tobytes() and ent.data.shape == t["ec_cache"].shape
        assert ent.grid_thw == tuple(int(v) for v in t["grid_thw"][0])


def test_cache_handle(tmp_path) -> None:
    """qcache.Cache: exact counters, one plane stored 2-D, a flipped byte deleted, verify, gc, export."""
    root = tmp_path / "c"
    keys = [f"{i:02x}" * 32 for i in range(3)]
    with qcache.Cache(root) as c:
        m = np.arange(2 * 5 * 4, dtype=np.float32).reshape(2, 5, 4)
        c.put(keys[0], m, "F32", (1, 2, 10), "fp")
        c.put(keys[1], m[:1], "BF16", (1, 2, 10), "fp")  # one plane: [tokens, cols]
        assert c.get(keys[2]) is None
        e0, e1 = c.get(keys[0]), c.get(keys[1])
        assert e0.data.shape == (2, 5, 4) and e0.data.tobytes() == m.tobytes() and e0.grid_thw == (1, 2, 10)
        assert e1.data.shape == (5, 4) and e1.dtype == "BF16" and e1.meta["fingerprint"] == "fp"
        # floats stored as BF16 are rounded to bf16 bit patterns (a cast to uint16 stored 1.5 as 1)
        assert e1.data.tobytes() == qcache._bf16_bits(m[0]).tobytes()
        with pytest.raises(ValueError, match="bit patterns"):
            c.put(keys[2], m[0].astype(np.int64), "BF16", (1, 2, 10), "fp")
        size = sum(os.path.getsize(qcache.entry_path(root, k)) for k in keys[:2])
        s = c.stats()
        assert (s["hits"], s["misses"], s["corrupt"], s["puts"], s["entries"], s["bytes"]) == (2, 1, 0, 2, 2, size)
        with pytest.raises(ValueError, match="hex"):
            c.put("nope", m, "F32", (1, 2, 10), "fp")
        p = qcache.entry_path(root, keys[1])
        raw = bytearray(open(p, "rb").read())
        raw[-30] ^= 1
        open(p, "wb").write(raw)
        assert c.get(keys[1]) is None and not os.path.exists(p)
        s = c.stats()
        assert (s["corrupt"], s["misses"], s["entries"]) == (1, 2, 1)
        assert c.verify() == (1, 0)
        assert c.export_vllm(tmp_path / "ex") == 1
        assert os.path.isfile(tmp_path / "ex" / keys[0] / "encoder_cache.safetensors")
        assert c.gc(1) == (1, os.path.getsize(tmp_path / "ex" / keys[0] / "encoder_cache.safetensors"))
        assert not c.exists(keys[0]) and c.stats()["evictions"] == 1 and c.stats()["entries"] == 0


def _swap_after_first_key(monkeypatch: pytest.MonkeyPatch, e: qvl.Encoder, swap) -> None:
    """Run `swap` (replace an item's file) right after the Encoder computes its first key, before the plan."""
    key, done = e._key, []

    def keyed(*args):
        k = key(*args)
        if not done:
            done.append(1)
            swap()
        return k

    monkeypatch.setattr(e, "_key", keyed)


def test_path_read_once_for_key_and_encode(model_dir: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path's file is read once, keyed and encoded from those bytes: a file replaced after its key is computed
    changes neither the result nor the entry stored under that key (the replacement's embeddings were stored under
    the first file's key)."""
    root = tmp_path / "cache"
    item, other = tmp_path / "item", tmp_path / "other"
    shutil.copy(OTHER, item)
    shutil.copy(PHOTO, other)
    ref = qvl.Encoder(model_dir, threads=1)
    [want] = ref.encode([OTHER])
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    _swap_after_first_key(monkeypatch, e, lambda: os.replace(other, item))
    [r] = e.encode([str(item)])
    assert r.ok and r.kind == "image" and r.key == want.key
    assert r.embeds.tobytes() == want.embeds.tobytes()
    assert qvl.read_cache_entry(root, want.key).data.tobytes() == want.embeds.tobytes()
    # an error still names the file
    bad = tmp_path / "bad.jpg"
    shutil.copy(data("tests/data/bad/truncated.jpg"), bad)
    [f] = e.encode([str(bad)])
    assert not f.ok and "bad.jpg" in f.error


def test_frames_dir_changed_during_encode_is_not_cached(model_dir: str, tmp_path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory of frames stays a path the library reads frame by frame: a frame changed after the key is
    computed leaves the result without a key, and nothing is stored under the old one."""
    from PIL import Image

    src = np.asarray(Image.open(PHOTO).convert("RGB").resize((64, 48)))
    d = tmp_path / "frames"
    d.mkdir()
    for k in range(3):
        Image.fromarray(np.ascontiguousarray(np.roll(src, 7 * k, axis=1))).save(d / f"f{k}.png")
    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    before = e.key(str(d))
    _swap_after_first_key(monkeypatch, e, lambda: Image.fromarray(np.ascontiguousarray(src[::-1])).save(d / "f1.png"))
    [r] = e.encode([str(d)])
    assert r.ok and r.kind == "frames" and r.key is None
    assert not os.path.exists(qcache.entry_path(root, before))
    monkeypatch.undo()
    [again] = e.encode([str(d)])  # unchanged during this one: keyed and stored
    assert again.ok and again.key == e.key(str(d)) != before and not again.cached
    assert qvl.read_cache_entry(root, again.key).data.tobytes() == again.embeds.tobytes()


def test_file_over_read_ahead_stays_a_path(model_dir: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over the read-ahead bound (64 MiB: a long video) is not held in memory for the call: it stays a path
    the library reads, keyed and cached when it did not change during the encode, unkeyed when it did."""
    import qvl.encoder as qenc

    monkeypatch.setattr(qenc, "_READ_AHEAD_BYTES", 1024)  # both photographs are larger
    assert qenc._read_ahead_bytes() == 1024
    root = tmp_path / "cache"
    item, other = tmp_path / "item", tmp_path / "other"
    shutil.copy(OTHER, item)
    shutil.copy(PHOTO, other)
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [r] = e.encode([str(item)])
    assert r.ok and r.kind == "image" and r.key == e.key(OTHER) and not r.cached
    assert qvl.read_cache_entry(root, r.key).data.tobytes() == r.embeds.tobytes()
    e2 = qvl.Encoder(model_dir, threads=1, cache_dir=tmp_path / "cache2")
    _swap_after_first_key(monkeypatch, e2, lambda: os.replace(other, item))
    [s] = e2.encode([str(item)])
    assert s.ok and s.key is None  # changed between its key and its encode: not cached under either key
    assert not os.path.exists(qcache.entry_path(tmp_path / "cache2", r.key))


def test_hit_keeps_the_item_kind(model_dir: str, tmp_path) -> None:
    """A hit has the kind its entry records: a video of two frames (grid t 1) is a video on a hit as on a miss (a hit
    was kind "cached", and to_vllm took it for an image by its grid). An entry without a kind (qvl 1.0, or a put
    without one) is kind "cached", and to_vllm tells a video by its grid."""
    from PIL import Image

    src = np.asarray(Image.open(PHOTO).convert("RGB").resize((64, 48)))
    clip = qvl.Frames([src, np.ascontiguousarray(src[::-1])], fps=2)
    root = tmp_path / "cache"
    e = qvl.Encoder(model_dir, threads=1, cache_dir=root)
    [miss] = e.encode([clip])
    [hit] = e.encode([clip])
    assert not miss.cached and hit.cached and miss.grid_thw[0] == 1
    assert miss.kind == hit.kind == "frames"
    assert qvl.read_cache_entry(root, miss.key).meta["kind"] == "frames"
    for r in (miss, hit):
        out = r.to_vllm(encoding="npy")
        assert out["content_part"] is None and ("multi_modal_data" not in out or "video" in out["multi_modal_data"])
    [im] = e.encode([PHOTO])
    [imh] = e.encode([PHOTO])
    assert imh.cached and im.kind == imh.kind == "image"
    assert imh.to_vllm(encoding="npy")["content_part"]["type"] == "image_embeds"
    # an entry without a kind
    ent = qvl.read_cache_entry(root, miss.key)
    qcache.put_entry(root, miss.key, ent.data, ent.dtype, ent.grid_thw, e.fingerprint)
    assert "kind" not in qvl.read_cache_entry(root, miss.key).meta
    [old] = e.encode([clip])
    assert old.cached and old.kind == "cached"


@pytest.mark.parametrize("exc", [ValueError("qvl_cache_put: a [1, 65536, 16384] F32 matrix exceeds an entry's bytes"),
                                 MemoryError("qvl_cache_put: out of memory")])
def test_failed_put_keeps_the_results(model_dir: str, tmp_path, monkeypatch: pytest.MonkeyPatch, exc) -> None:
    """A put refused (an output over an entry's size: ValueError) or out of memory loses no result: the cache is an
    optimisation (only OSError was caught, and the encode raised, its results lost)."""
    import qvl.encoder as qenc

    def refuse(*args, **kwargs):
        raise exc

    monkeypatch.setattr(qenc._cache, "put_entry", refuse)
    e = qvl.Encoder(model_dir, threads=1, cache_dir=tmp_path / "cache")
    [r] = e.encode([PHOTO])
    assert r.ok and not r.cached and r.embeds is not None
    assert not os.path.exists(qcache.entry_path(tmp_path / "cache", r.key))


def test_cache_bytes_and_pathlike_roots(tmp_path) -> None:
    """Cache takes a root (and an export directory) as str, bytes or os.PathLike, a name that is not UTF-8 too
    (bytes raised AttributeError, such a str UnicodeEncodeError)."""
    key = "ab" * 32
    m = np.ones((2, 4), np.float32)
    for root in (os.fsencode(tmp_path / "b"), tmp_path / "p", os.fsdecode(os.fsencode(tmp_path) + b"/n\xff")):
        with qcache.Cache(root) as c:
            c.put(key, m, "F32", (1, 2, 4), "fp")
            assert c.get(key).data.tobytes() == m.tobytes() and os.path.isfile(qcache.entry_path(c.root, key))
            ex = os.fsencode(root) + b".ex"
            assert c.export_vllm(ex) == 1 and os.path.isfile(os.path.join(ex, key.encode(), b"encoder_cache.safetensors"))


def _tree(root) -> list[str]:
    """Every path under root, relative, sorted (directories too)."""
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files)


def test_get_entry_creates_nothing(tmp_path) -> None:
    """get_entry is a read: on a directory that is not a qvl cache it is a miss and leaves the directory as it was
    (it created objects/, tmp/, gc/, vllm-ec/ and CACHEDIR.TAG there); put_entry then makes it a cache, and
    get_entry reads it. On a cache of objects/ alone, a miss and a hit (its mtime refreshed) create nothing either,
    and a damaged entry is deleted."""
    key, other, bad = "ef" * 32, "0e" * 32, "ba" * 32
    m = np.arange(8, dtype=np.float32).reshape(2, 4)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    before = _tree(plain)
    assert qcache.get_entry(plain, key) is None and qcache.get_entry(os.fsencode(plain), key) is None
    assert _tree(plain) == before
    qcache.put_entry(plain, key, m, "F32", (1, 2, 4), "fp")
    ent = qcache.get_entry(plain, key)
    assert ent is not None and ent.data.tobytes() == m.tobytes() and ent.grid_thw == (1, 2, 4)
    assert os.path.isfile(plain / "CACHEDIR.TAG")
    # a cache another handle wrote, of objects/ alone: read through a handle that creates nothing, then written
    # through one that does (it replaces the reading handle), and read again
    root = tmp_path / "bare"
    with qcache.Cache(tmp_path / "src") as c:
        c.put(key, m, "F32", (1, 2, 4), "fp")
    os.makedirs(root / "objects" / key[:2])
    shutil.copy(qcache.entry_path(tmp_path / "src", key), qcache.entry_path(root, key))
    old = os.stat(qcache.entry_path(root, key)).st_mtime - 7200
    os.utime(qcache.entry_path(root, key), (old, old))
    before = _tree(root)
    assert qcache.get_entry(root, other) is None
    assert qcache.get_entry(root, key).data.tobytes() == m.tobytes()
    assert _tree(root) == before and os.stat(qcache.entry_path(root, key)).st_mtime > old + 3600
    raw = bytearray(open(qcache.entry_path(root, key), "rb").read())
    raw[-30] ^= 1
    os.makedirs(root / "objects" / bad[:2])
    open(qcache.entry_path(root, bad), "wb").write(raw)
    assert qcache.get_entry(root, bad) is None and not os.path.exists(qcache.entry_path(root, bad))
    qcache.put_entry(root, other, 2 * m, "F32", (1, 2, 4), "fp")
    assert qcache.get_entry(root, other).data.tobytes() == (2 * m).tobytes()
    assert qcache.get_entry(root, key).data.tobytes() == m.tobytes()
    assert os.path.isdir(root / "tmp") and os.path.isfile(root / "CACHEDIR.TAG")


def test_cache_existing_only(tmp_path) -> None:
    """Cache(existing=True) opens an existing cache and creates nothing: a plain directory is OSError naming it
    (qvl_cache_open: ... is not a qvl cache), left as it was; on a cache it reads."""
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(OSError, match="not a qvl cache") as e:
        qcache.Cache(plain, existing=True)
    assert str(plain) in str(e.value) and _tree(plain) == []
    key = "ab" * 32
    m = np.ones((2, 4), np.float32)
    qcache.Cache(tmp_path / "c").put(key, m, "F32", (1, 2, 4), "fp")
    with qcache.Cache(tmp_path / "c", existing=True) as c:
        assert c.existing and c.get(key).data.tobytes() == m.tobytes()
