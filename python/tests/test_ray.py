"""The Ray Data job on a local cluster (ray.init(num_cpus=2)) and on two nodes on 127.0.0.1
(ray.cluster_utils.Cluster): one row per input, embeddings bit-equal to the binding's, corrupt and missing files
as error rows, a rerun that resumes, and the cache-only mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import qvl

from conftest import data

ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")
import qvl.ray as qray  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("corpus")
    for rel in ("tests/data/photos/rocket.jpg", "tests/data/photos/coffee.png", "tests/data/images/png_rgba.png",
                "tests/data/images/webp_lossy.webp", "tests/data/video/video_testsrc_30.mp4",
                "tests/data/bad/truncated.jpg"):
        shutil.copy(data(rel), d / os.path.basename(rel))
    (d / "notes.txt").write_text("not an image, not a video\n")
    return str(d)


def rows_of(out: str) -> dict[str, dict]:
    t = pq.read_table(out).to_pylist()
    paths = [r["path"] for r in t]
    assert len(paths) == len(set(paths)), "an input has more than one row"
    return {r["path"]: r for r in t}


def check_rows(rows: dict[str, dict], files: list[str], model_dir: str) -> None:
    enc = qvl.Encoder(model_dir, threads=1)
    ref = dict(zip(files, enc.encode(files)))
    assert set(rows) == set(files)
    for p, r in rows.items():
        want = ref[p]
        assert r["qvl_version"] == qvl.version()
        if want.ok:
            assert r["error"] is None, r["error"]
            assert (r["grid_t"], r["grid_h"], r["grid_w"]) == want.grid_thw
            assert r["n_tokens"] == want.n_tokens and r["dim"] == want.embeds.shape[1]
            assert r["n_deepstack"] == 2 and r["dtype"] == "float32" and r["key"] == want.key
            assert r["fingerprint"] == enc.fingerprint
            assert qray.decode_embeds(r).tobytes() == want.embeds.tobytes(), p
        else:
            assert r["error"] and r["embeds"] is None and os.path.basename(p) in r["error"]


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    yield
    ray.shutdown()


def test_local_job_resume_and_cache(local_ray, corpus: str, model_dir: str, tmp_path) -> None:
    files = qray.expand_inputs(os.path.join(corpus, "*"))
    missing = str(tmp_path / "missing.jpg")
    out = str(tmp_path / "out")
    s = qray.embed(model_dir, [os.path.join(corpus, "*"), missing], out, actors=2, threads_per_actor=1, batch_size=2)
    print(s)
    assert s["inputs"] == len(files) + 1 and s["rows"] == len(files) + 1 and s["lost"] == 0
    rows = rows_of(out)
    assert "no such file" in rows[missing]["error"].lower()
    del rows[missing]
    check_rows(rows, files, model_dir)
    assert s["errors"] == 3  # truncated.jpg, notes.txt, missing.jpg
    # a rerun that keeps error rows writes nothing new; with one more input (and error rows retried, the
    # default), that one and the three errors again
    s2 = qray.embed(model_dir, [os.path.join(corpus, "*"), missing], out, actors=1, threads_per_actor=2,
                    retry_errors=False)
    assert s2["skipped"] == s2["inputs"] and s2["rows"] == 0 and s2["lost"] == 0
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(data("tests/data/photos/chelsea.png"), extra / "chelsea.png")
    s3 = qray.embed(model_dir, [os.path.join(corpus, "*"), missing, str(extra)], out, actors=1,
                    threads_per_actor=2)
    assert s3["skipped"] == len(files) + 1 - 3 and s3["rows"] == 1 + 3 and s3["retried"] == 3 and s3["lost"] == 0
    assert len(rows_of(out)) == len(files) + 2
    # cache only: an entry per encoded input (the server's format and key for the job's output), equal to the
    # binding's; a manifest without embeddings
    cache = str(tmp_path / "cache")
    s4 = qray.embed(model_dir, os.path.join(corpus, "*"), str(tmp_path / "manifest"), cache=cache, cache_only=True,
                    actors=2, threads_per_actor=1)
    assert s4["lost"] == 0
    ref = qvl.Encoder(model_dir, threads=1).encode(files)
    for f, r in zip(files, ref):
        if r.ok:
            ent = qvl.read_cache_entry(cache, r.key)
            assert ent.data.tobytes() == r.embeds.tobytes() and ent.grid_thw == r.grid_thw and ent.meta["key"] == r.key
        else:
            assert r.key is None or not os.path.exists(qvl.cache.entry_path(cache, r.key))
    man = pq.read_table(str(tmp_path / "manifest"))
    assert "embeds" not in man.column_names and man.num_rows == len(files)
    # a Parquet run with the warm cache reads it (a read touches an entry older than an hour) and gives the same
    # bytes
    hit = [r for r in ref if r.ok][0]
    old = os.stat(qvl.cache.entry_path(cache, hit.key)).st_mtime - 7200
    os.utime(qvl.cache.entry_path(cache, hit.key), (old, old))
    out2 = str(tmp_path / "out2")
    qray.embed(model_dir, os.path.join(corpus, "*"), out2, cache=cache, actors=1, threads_per_actor=2)
    check_rows(rows_of(out2), files, model_dir)
    assert os.stat(qvl.cache.entry_path(cache, hit.key)).st_mtime > old + 3600


def _one_row_each(out: str, files: list[str]) -> dict[str, dict]:
    rows = rows_of(out)  # asserts no input has two rows
    assert sorted(rows) == sorted(files)
    return rows


def test_file_unreadable_after_listing(local_ray, corpus: str, model_dir: str, tmp_path, monkeypatch) -> None:
    """Inputs that turn unreadable between the driver's listing and the actor's read (deleted, replaced by a
    directory or by a FIFO, which must not block, and chmod 000 when not root) are one error row each; the job
    does not fail and the other rows are bit-equal to the binding's."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    for n in ("gone", "dir", "fifo", "noperm"):
        shutil.copy(data("tests/data/photos/coffee.png"), d / f"{n}.png")
    listed = qray.expand_inputs(str(d))

    def break_files():
        os.unlink(d / "gone.png")
        os.unlink(d / "dir.png")
        os.mkdir(d / "dir.png")
        os.unlink(d / "fifo.png")
        os.mkfifo(d / "fifo.png")
        if os.geteuid() != 0:
            os.chmod(d / "noperm.png", 0)

    # the files break when the job builds its dataset: after the driver has listed (and, had it, checked) them,
    # before anything reads them
    for name in ("from_items", "read_binary_files"):
        real = getattr(ray.data, name)

        def hooked(*a, _real=real, **k):
            break_files()
            return _real(*a, **k)

        monkeypatch.setattr(ray.data, name, hooked)
    out = str(tmp_path / "out")
    s = qray.embed(model_dir, str(d), out, actors=2, threads_per_actor=1, batch_size=3)
    monkeypatch.undo()
    broken = ["gone", "dir", "fifo"] + (["noperm"] if os.geteuid() != 0 else [])
    assert s["lost"] == 0 and s["rows"] == len(listed) and s["errors"] == 2 + len(broken), s
    rows = _one_row_each(out, listed)
    for n in broken:
        r = rows[str(d / f"{n}.png")]
        assert r["error"] and r["embeds"] is None and f"{n}.png" in r["error"], r
    assert "regular file" in rows[str(d / "fifo.png")]["error"]  # refused, not waited on
    assert "directory" in rows[str(d / "dir.png")]["error"]  # a directory is read as video frames: none here
    good = [p for p in listed if os.path.basename(p)[:-4] not in broken]
    check_rows({p: rows[p] for p in good}, good, model_dir)
    # the actor alone: a batch with such a path still gives a row per path
    a = qray.EncoderActor(model_dir, threads=1)
    t = a({"path": [str(d / "fifo.png"), str(d / "rocket.jpg")]})
    assert t.num_rows == 2 and t.column("error").to_pylist()[1] is None and t.column("error").to_pylist()[0]


def test_rerun_retries_error_rows(local_ray, corpus: str, model_dir: str, tmp_path, monkeypatch) -> None:
    """A rerun encodes again the inputs whose row is an error (a transient failure fixed since), the new row
    replacing the old one, one row per input; --no-retry-errors keeps the error rows; a run stopped while
    publishing or before it loses no row, and the next run settles duplicates."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    flaky = d / "flaky.png"
    os.mkfifo(flaky)  # unreadable in the first run
    files = qray.expand_inputs(str(d))
    assert str(flaky) in files
    out = str(tmp_path / "out")
    s1 = qray.embed(model_dir, files, out, actors=1, threads_per_actor=2, batch_size=2)
    assert s1["lost"] == 0 and s1["errors"] == 3, s1  # truncated.jpg, notes.txt, flaky.png
    rows1 = _one_row_each(out, files)
    assert rows1[str(flaky)]["error"]
    os.unlink(flaky)
    shutil.copy(data("tests/data/photos/chelsea.png"), flaky)
    # not retried: nothing encoded, the error row stays
    s2 = qray.embed(model_dir, files, out, actors=1, threads_per_actor=2, retry_errors=False)
    assert s2["skipped"] == len(files) and s2["rows"] == 0 and s2["retried"] == 0 and s2["lost"] == 0, s2
    assert _one_row_each(out, files)[str(flaky)]["error"]
    p = subprocess.run([sys.executable, "-m", "qvl.ray", "--help"], capture_output=True, text=True, timeout=120)
    assert "--no-retry-errors" in p.stdout
    # stopped after writing its rows, before publishing them: the old rows are untouched
    real_publish, real_drop = qray._publish, qray._drop_rows

    def boom(*a, **k):
        raise KeyboardInterrupt("stopped")

    monkeypatch.setattr(qray, "_publish", boom)
    with pytest.raises(KeyboardInterrupt):
        qray.embed(model_dir, files, out, actors=1, threads_per_actor=2)
    monkeypatch.setattr(qray, "_publish", real_publish)
    assert _one_row_each(out, files)[str(flaky)]["error"]
    # stopped after publishing, before dropping the replaced rows: two rows for the retried inputs, none lost
    def boom_if_any(drop):
        if drop:
            raise KeyboardInterrupt("stopped")
        real_drop(drop)

    monkeypatch.setattr(qray, "_drop_rows", boom_if_any)
    with pytest.raises(KeyboardInterrupt):
        qray.embed(model_dir, files, out, actors=1, threads_per_actor=2)
    monkeypatch.setattr(qray, "_drop_rows", real_drop)
    t = pq.read_table(out, columns=["path", "error"]).to_pylist()
    counts = {f: sum(1 for r in t if r["path"] == f) for f in files}
    assert min(counts.values()) == 1 and counts[str(flaky)] == 2, counts
    # the next run settles them (the newer row wins) and retries what is still an error
    s3 = qray.embed(model_dir, files, out, actors=1, threads_per_actor=2)
    assert s3["retried"] == 2 and s3["rows"] == 2 and s3["errors"] == 2 and s3["lost"] == 0, s3
    rows3 = _one_row_each(out, files)
    assert not [f for f in os.listdir(out) if f.startswith(".")], os.listdir(out)
    check_rows(rows3, files, model_dir)  # flaky.png now has its embeddings; the rest as before
    assert rows3[str(flaky)]["error"] is None
    # a run with resume off replaces every row, still one each
    s4 = qray.embed(model_dir, files, out, actors=2, threads_per_actor=1, resume=False)
    assert s4["rows"] == len(files) and s4["lost"] == 0
    check_rows(_one_row_each(out, files), files, model_dir)


def test_two_node_cluster_cli(corpus: str, model_dir: str, tmp_path) -> None:
    """Two nodes on 127.0.0.1, one CPU each, one actor on each; the job run as `python -m qvl.ray`."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        out = str(tmp_path / "out")
        env = dict(os.environ, RAY_ADDRESS=cluster.address)
        p = subprocess.run([sys.executable, "-m", "qvl.ray", "--model", model_dir, "--input",
                            os.path.join(corpus, "*"), "--output", out, "--actors", "2", "--threads-per-actor", "1",
                            "--batch-size", "2"], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        s = json.loads(p.stdout.strip().splitlines()[-1])
        files = qray.expand_inputs(os.path.join(corpus, "*"))
        assert s["inputs"] == len(files) and s["rows"] == len(files) and s["lost"] == 0 and s["errors"] == 2
        check_rows(rows_of(out), files, model_dir)
        ray.init(address=cluster.address, log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        ray.shutdown()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
