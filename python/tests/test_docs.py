"""The README's and docs/'s ```python blocks run as printed (tests/doc_examples.sh runs the shell and C ones).

Each page's blocks run in order, in one namespace, in a scratch directory holding what the examples name:
Qwen3-VL-2B-Instruct/ (a tiny synthetic model), photo.jpg, page.png, clip.mp4 and frames/ (five PNGs), with the
qvl CLI on PATH when QVL_BIN is set. A block that raises fails the page, naming the block's line."""

from __future__ import annotations

import os
import shutil
import traceback
from pathlib import Path

import pytest

from conftest import SRC, data

PAGES = [SRC / "README.md", *sorted((SRC / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """The page's ```python blocks: (line of the opening fence, code)."""
    out, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start, i = lines[i][3:].strip(), i + 1, i + 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            if info == "python":
                out.append((start, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return out


def scratch(d: Path, model_dir: str) -> None:
    shutil.copytree(model_dir, d / "Qwen3-VL-2B-Instruct")  # conftest's tiny model (seed 1), made once
    shutil.copy(data("tests/data/photos/rocket.jpg"), d / "photo.jpg")
    shutil.copy(data("tests/data/photos/chelsea.png"), d / "page.png")
    shutil.copy(data("tests/data/video/video_testsrc_30.mp4"), d / "clip.mp4")
    (d / "frames").mkdir()
    for f in range(5):
        shutil.copy(data(f"tests/data/video/frames/video_frame_{f}.png"), d / "frames")


def test_pages_have_python_examples():
    n = sum(len(python_blocks(p)) for p in PAGES)
    assert n >= 2, f"only {n} python blocks in README.md and docs/"


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_python_examples_run(page: Path, model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    scratch(tmp_path, model_dir)
    monkeypatch.chdir(tmp_path)
    qvl_bin = os.environ.get("QVL_BIN")
    if qvl_bin:
        monkeypatch.setenv("PATH", str(Path(qvl_bin).resolve().parent) + os.pathsep + os.environ.get("PATH", ""))
    ns: dict = {"__name__": "__main__"}
    for line, code in python_blocks(page):
        try:
            exec(compile(code, f"{page.name}:{line}", "exec"), ns)
        except Exception:  # noqa: BLE001 -- the block's own error, with the page and line it came from
            tb = traceback.format_exc()
            pytest.fail(f"{page.relative_to(SRC)}, the python block at line {line}:\n{tb}")
