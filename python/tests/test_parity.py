"""Parity through the binding: on the oracle fixtures Encoder.encode equals the qvl CLI bit for bit, and on a
photograph it matches transformers' processor + vision model (float32, tests/fixtures/e2e_rocket.safetensors)
within the C test's gates (test_e2e.c: 1e-4 relative, max |diff| / rms 1e-4)."""

from __future__ import annotations

import glob
import os
import subprocess

import numpy as np
import pytest

import qvl

from conftest import PHOTO, SRC, data, read_safetensors


def synth_from(meta: dict, out: str) -> str:
    """The checkpoint a fixture was made from, from its recorded synth recipe."""
    ds = meta.get("synth_deepstack", "preset")
    deepstack = None if ds == "preset" else ([] if ds in ("", "none") else [int(x) for x in ds.split(",")])
    return qvl.synth(out, meta["synth_preset"], seed=int(meta["synth_seed"]), depth=int(meta.get("synth_depth", 0)),
                     deepstack=deepstack)


def test_e2e_photograph_matches_transformers(tmp_path) -> None:
    t, meta = read_safetensors(SRC / "tests/fixtures/e2e_rocket.safetensors")
    model = synth_from(meta, str(tmp_path / "ckpt"))
    enc = qvl.Encoder(model, threads=2, preprocess={"max_pixels": int(meta["max_pixels"])})
    assert enc.fingerprint == meta["fingerprint"]
    assert meta["image"] == "tests/data/photos/rocket.jpg"
    [r] = enc.encode([data(meta["image"])])
    assert r.ok, r.error
    assert list(r.grid_thw) == list(t["grid_thw"].reshape(-1))
    outs = [r.merged] + r.deepstack
    names = meta["outputs"].split(",")
    assert len(outs) == len(names)
    for name, ours in zip(names, outs):
        ref = t[name].astype(np.float64)
        d = np.asarray(ours, np.float64) - ref
        rel = np.linalg.norm(d) / np.linalg.norm(ref)
        mxr = np.abs(d).max() / np.sqrt(np.mean(ref * ref))
        print(f"{name}: rel {rel:.3e}, max/rms {mxr:.3e}")
        assert rel <= 1e-4 and mxr <= 1e-4


TOWER = sorted(glob.glob(str(SRC / "tests/fixtures/tower/*.safetensors")))


@pytest.mark.parametrize("fixture", TOWER, ids=[os.path.basename(f) for f in TOWER])
def test_tower_fixtures_equal_cli(fixture: str, tmp_path, qvl_bin: str) -> None:
    """The fixture's pixel rows, one ROWS item per grid: the binding's outputs equal `qvl encode --pixels`'s."""
    t, meta = read_safetensors(fixture)
    model = synth_from(meta, str(tmp_path / "ckpt"))
    out = tmp_path / "cli.safetensors"
    subprocess.run([qvl_bin, "encode", "-q", "--model", model, "--pixels", fixture, "-o", str(out), "-t", "1"],
                   check=True)
    cli, _ = read_safetensors(out)
    rows = np.ascontiguousarray(t["pixel_values"], dtype=np.float32)
    grids = t["grid_thw"].reshape(-1, 3)
    items, r0 = [], 0
    for g in grids:
        n = int(g[0] * g[1] * g[2])
        items.append((rows[r0: r0 + n], tuple(int(x) for x in g)))
        r0 += n
    enc = qvl.Encoder(model, threads=2)
    rs = enc.encode(items, raise_on_error=True)
    merged = np.concatenate([r.merged for r in rs])
    assert merged.tobytes() == cli["merged"].tobytes()
    for k in range(enc.info.n_deepstack):
        ds = np.concatenate([r.deepstack[k] for r in rs])
        assert ds.tobytes() == cli[f"deepstack{k}"].tobytes()
    assert f"deepstack{enc.info.n_deepstack}" not in cli


def test_files_equal_cli(model_dir: str, tmp_path, qvl_bin: str) -> None:
    """Image and video files: the binding equals `qvl encode FILES` bit for bit, keys included."""
    files = [PHOTO, data("tests/data/photos/coffee.png"), data("tests/data/images/png_rgba.png"),
             data("tests/data/images/jpeg_exif_6.jpg"), data("tests/data/video/video_testsrc_30.mp4")]
    files = [f for f in files if os.path.exists(f)]
    out = tmp_path / "cli.safetensors"
    subprocess.run([qvl_bin, "encode", "-q", "--model", model_dir, *files, "-o", str(out), "-t", "1"], check=True)
    cli, meta = read_safetensors(out)
    rs = qvl.Encoder(model_dir, threads=2).encode(files, layout="split", raise_on_error=True)
    for i, r in enumerate(rs):
        assert r.embeds[0].tobytes() == cli[f"item{i}.merged"].tobytes(), files[i]
        for k in range(r.n_deepstack):
            assert r.embeds[1 + k].tobytes() == cli[f"item{i}.deepstack{k}"].tobytes()
        assert meta[f"item{i}.key"] == r.key
