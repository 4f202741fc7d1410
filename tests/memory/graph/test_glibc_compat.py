"""scripts/graph_dump/glibc_compat.py: the version needs of a shared library it reads, and the
ones newer than a glibc it marks weak (VER_FLG_WEAK), on a library built here that needs
sscanf's GLIBC_2.7 (__isoc99_sscanf) and strtol's GLIBC_2.2.5."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.scripts import script

compat = script("glibc_compat")

SOURCE = """
#include <stdio.h>
#include <stdlib.h>
int parse(const char *s) { int n = 0; sscanf(s, "%d", &n); return n + (int) strtol(s, 0, 10); }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    out = tmp_path_factory.mktemp("compat")
    (out / "p.c").write_text(SOURCE)
    subprocess.run(
        [cc, "-std=gnu11", "-shared", "-fPIC", "-o", str(out / "libp.so"), str(out / "p.c")],
        check=True,
    )
    return out / "libp.so"


def _glibc(path: Path) -> dict[str, int]:
    return {v: f for _, v, f in compat.needs(path.read_bytes()) if v.startswith("GLIBC_")}


def test_newer_needs_are_marked_weak_and_the_library_still_loads(lib: Path, tmp_path: Path) -> None:
    copy = tmp_path / "libp.so"
    shutil.copyfile(lib, copy)
    assert _glibc(copy) == {"GLIBC_2.2.5": 0, "GLIBC_2.7": 0}
    assert compat.weaken(copy, newest=(2, 6)) == ["GLIBC_2.7"]
    assert _glibc(copy) == {"GLIBC_2.2.5": 0, "GLIBC_2.7": compat.VER_FLG_WEAK}
    assert ctypes.CDLL(str(copy)).parse(b"21") == 42


def test_nothing_newer_leaves_the_file_as_it_was(lib: Path, tmp_path: Path) -> None:
    copy = tmp_path / "libp.so"
    shutil.copyfile(lib, copy)
    assert compat.weaken(copy) == []
    assert copy.read_bytes() == lib.read_bytes()
