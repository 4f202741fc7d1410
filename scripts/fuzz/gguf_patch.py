"""Patch one metadata key of a GGUF header in place (any value type): hostile-header tests and
scripts/fuzz/fuzz.py."""

from __future__ import annotations

import struct
from typing import Any

_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_FMT = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def enc(vtype: int, v: Any) -> bytes:
    if vtype == 8:
        return gstr(v)
    if vtype == 9:
        it, items = v
        return struct.pack("<IQ", it, len(items)) + b"".join(enc(it, i) for i in items)
    return struct.pack("<" + _FMT[vtype], v)


def _value_end(data: bytes, at: int, vtype: int) -> int:
    if vtype == 8:
        return at + 8 + struct.unpack_from("<Q", data, at)[0]
    if vtype == 9:
        it, n = struct.unpack_from("<IQ", data, at)
        at += 12
        for _ in range(n):
            at = _value_end(data, at, it)
        return at
    return at + _SIZES[vtype]


def patch(data: bytes, key: str, vtype: int, v: Any) -> bytes:
    """Replace key's value (or append the key) in a GGUF header."""
    k = gstr(key)
    i = data.find(k)
    if i < 0:
        n_kv = struct.unpack_from("<Q", data, 16)[0]
        # insert right after the counts
        return (
            data[:16]
            + struct.pack("<Q", n_kv + 1)
            + k
            + struct.pack("<I", vtype)
            + enc(vtype, v)
            + data[24:]
        )
    at = i + len(k)
    old = struct.unpack_from("<I", data, at)[0]
    end = _value_end(data, at + 4, old)
    return data[:at] + struct.pack("<I", vtype) + enc(vtype, v) + data[end:]


def drop(data: bytes, key: str) -> bytes:
    """Remove key (and its value) from a GGUF header."""
    k = gstr(key)
    i = data.find(k)
    if i < 0:
        return data
    vtype = struct.unpack_from("<I", data, i + len(k))[0]
    end = _value_end(data, i + len(k) + 4, vtype)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    return data[:16] + struct.pack("<Q", n_kv - 1) + data[24:i] + data[end:]
