"""Shared fixtures: the repository's test data, a tiny synthetic checkpoint, and the qvl CLI when built.

Run from anywhere: QVL_SOURCE_DIR names the repository (default: two levels up), QVL_BIN the CLI (tests that
compare with it skip without it), QVL_LIBRARY a libqvl.so.1 or build directory (default: the installed one)."""

from __future__ import annotations

import os
import struct
import json
from pathlib import Path

import numpy as np
import pytest

import qvl

SRC = Path(os.environ.get("QVL_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def data(rel: str) -> str:
    return str(SRC / rel)


PHOTO = data("tests/data/photos/rocket.jpg")


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8: 8 + n])
    meta = h.pop("__metadata__", {}) or {}
    dt = {"F32": np.float32, "I64": np.int64, "BF16": np.uint16, "F16": np.float16, "I32": np.int32}
    out = {}
    for k, t in h.items():
        a, e = t["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + a: 8 + n + e], dtype=dt[t["dtype"]]).reshape(t["shape"])
    return out, meta


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("tiny") / "m"
    return qvl.synth(d, "tiny", seed=1)


@pytest.fixture(scope="session")
def enc(model_dir: str) -> qvl.Encoder:
    return qvl.Encoder(model_dir, threads=1)


@pytest.fixture(scope="session")
def qvl_bin() -> str:
    b = os.environ.get("QVL_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("QVL_BIN (the qvl CLI) not set")
    return b
