"""The ctypes structs of qvl/_lib.py match include/qvl.h: size, and every field's offset, as a C compiler lays
them out (skips without a compiler)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from qvl import _lib

from conftest import SRC


def test_struct_layout(tmp_path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    header = SRC / "include" / "qvl.h"
    if not cc or not header.exists():
        pytest.skip("no C compiler or qvl.h")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "qvl.h"', "int main(void) {"]
    for cname, st in _lib.STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for fname, _ in st._fields_:
            lines.append(f'printf("{cname}.{fname} %zu\\n", offsetof({cname}, {fname}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(SRC / "include"), str(src), "-o", str(exe)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                         check=True).stdout.splitlines())
    for cname, st in _lib.STRUCTS.items():
        assert int(got[cname]) == ctypes.sizeof(st), cname
        for fname, _ in st._fields_:
            assert int(got[f"{cname}.{fname}"]) == getattr(st, fname).offset, f"{cname}.{fname}"
