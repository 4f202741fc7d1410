#!/usr/bin/env python3
"""Let a prebuilt libllama built against a newer glibc load here, for record_libllama.py.

The llama-cpp-py-sync wheels (PyPI: llama-cpp-py-sync==0.NNNN, a CPU libllama of llama.cpp bNNNN,
built on a glibc 2.38+ runner) need glibc 2.38 only for the C23 number parsers that gcc picks
under _GNU_SOURCE: __isoc23_strtol, __isoc23_strtoul, __isoc23_strtoull and __isoc23_sscanf,
which differ from strtol & co. only in also reading a 0b prefix. This copies the wheel's
libraries into a folder, marks their GLIBC_2.38+ version needs weak (VER_FLG_WEAK in
.gnu.version_r: ld.so then only warns where the C library lacks the version) and builds a small
library that defines the four functions through the older ones, to preload:

    python scripts/graph_dump/glibc_compat.py WHEEL_PACKAGE_DIR OUT_DIR
    python scripts/graph_dump/record_libllama.py --build 8683 --py SDIST --lib OUT_DIR \
        --preload OUT_DIR/libisoc23.so CASE ...

Nothing of llama.cpp's is replaced: the parsers read the libraries' own settings strings.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

SHT_GNU_VERNEED = 0x6FFFFFFE
VER_FLG_WEAK = 0x2
NEWEST = (2, 36)  # the glibc the libraries are made to load on (Debian 12)

ISOC23 = r"""
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
long __isoc23_strtol(const char *s, char **e, int b) { return strtol(s, e, b); }
unsigned long __isoc23_strtoul(const char *s, char **e, int b) { return strtoul(s, e, b); }
unsigned long long __isoc23_strtoull(const char *s, char **e, int b) { return strtoull(s, e, b); }
int __isoc23_sscanf(const char *s, const char *f, ...) {
    va_list ap; va_start(ap, f); int n = vsscanf(s, f, ap); va_end(ap); return n;
}
"""


def needs(data: bytes) -> list[tuple[int, str, int]]:
    """The version needs (.gnu.version_r vernaux entries) of an ELF64 little-endian file: each
    entry's offset, version name and flags."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit("not an ELF64 little-endian file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    out = []
    for _, sh_type, _, _, off, _, link, _, _, _ in sections:
        if sh_type != SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]
        vn = off
        while True:
            _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, vn)
            va = vn + aux
            for _ in range(cnt):
                _, flags, _, name, vnext = struct.unpack_from("<IHHII", data, va)
                end = data.index(b"\0", strtab + name)
                out.append((va, data[strtab + name : end].decode(), flags))
                va += vnext
            if not nxt:
                break
            vn += nxt
    return out


def weaken(path: Path, newest: tuple[int, int] = NEWEST) -> list[str]:
    """Mark the GLIBC_x.y needs newer than `newest` weak in an ELF64 little-endian file; the
    versions it marked."""
    data = bytearray(path.read_bytes())
    weakened = []
    for va, label, flags in needs(bytes(data)):
        if label.startswith("GLIBC_2.") and tuple(map(int, label[6:].split("."))) > newest:
            struct.pack_into("<H", data, va + 4, flags | VER_FLG_WEAK)
            weakened.append(label)
    path.write_bytes(bytes(data))
    return weakened


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    src, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for lib in sorted(src.glob("lib*.so*")):
        dst = out / lib.name
        shutil.copyfile(lib, dst)
        print(f"{lib.name}: {', '.join(weaken(dst)) or 'as is'}")
    c = out / "isoc23.c"
    c.write_text(ISOC23)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(out / "libisoc23.so"), str(c)], check=True
    )
    print(f"preload {out / 'libisoc23.so'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
