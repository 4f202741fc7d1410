"""Write deliberately broken GGUF files to fixtures/broken/ (deterministic).

Each file breaks one rule that llama.cpp's gguf.cpp checks; tests/cli/test_cli_broken.py expects
a one-line `Error: …` naming the file, the byte offset and the defect for each. The files are
built byte by byte (struct), because gguf.GGUFWriter refuses to write most of them.

    python scripts/make_broken_fixtures.py [OUT_DIR]
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64 = 4, 5, 6, 7, 8, 9, 10
GGML_F32, GGML_Q4_0 = 0, 2


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype: int, v: Any) -> bytes:
    """Encode one metadata value (arrays as (item_type, [items]))."""
    if vtype == T_STRING:
        return gstr(v)
    if vtype == T_ARRAY:
        itype, items = v
        return struct.pack("<IQ", itype, len(items)) + b"".join(value(itype, i) for i in items)
    fmt = {
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
    }[vtype]
    return struct.pack("<" + fmt, v)


def kv(key: str, vtype: int, v: Any) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def tensor_info(name: str, dims: Sequence[int], ggml_type: int, offset: int) -> bytes:
    return (
        gstr(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


BASE_KVS = [
    kv("general.architecture", T_STRING, "llama"),
    kv("llama.block_count", T_UINT32, 1),
    kv("llama.context_length", T_UINT32, 256),
    kv("llama.embedding_length", T_UINT32, 32),
    kv("llama.attention.head_count", T_UINT32, 2),
]


def gguf(
    kvs: Sequence[bytes] = BASE_KVS,
    tensors: Sequence[bytes] = (),
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    data: bytes = b"",
    alignment: int = 32,
) -> bytes:
    """A GGUF file; counts default to the lists' lengths, data is placed after alignment padding."""
    head = magic + struct.pack("<I", version)
    head += struct.pack(
        "<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    head += b"".join(kvs) + b"".join(tensors)
    if data:
        head += b"\0" * (-len(head) % alignment)
    return head + data


_ONE_TENSOR = [tensor_info("blk.0.attn_norm.weight", [32], GGML_F32, 0)]
_GOOD = gguf(tensors=_ONE_TENSOR, data=b"\0" * 128)


def _huge_string() -> bytes:
    return gguf([*BASE_KVS, gstr("general.name") + struct.pack("<IQ", T_STRING, 1 << 63) + b"x"])


def _nested(depth: int) -> bytes:
    v: Any = (T_UINT32, [1])
    for _ in range(depth):
        v = (T_ARRAY, [v])
    return gguf([*BASE_KVS, kv("test.nested", T_ARRAY, v)])


BROKEN: dict[str, Callable[[], bytes]] = {
    "not-gguf": lambda: b"this is plain text, not a model\n",
    "empty": lambda: b"",
    "big-endian": lambda: b"GGUF" + struct.pack(">I", 3) + struct.pack(">QQ", 0, 0),
    "version-1": lambda: gguf(version=1),
    "version-99": lambda: gguf(version=99),
    "truncated-in-kv": lambda: gguf()[:-3],
    "truncated-in-tensor-info": lambda: _GOOD[: len(gguf(tensors=_ONE_TENSOR)) - 5],
    "huge-string": _huge_string,
    "huge-tensor-count": lambda: gguf(n_tensors=1 << 40),
    "huge-kv-count": lambda: gguf(n_kv=1 << 40),
    "huge-array": lambda: gguf(
        [*BASE_KVS, gstr("test.arr") + struct.pack("<IIQ", T_ARRAY, T_UINT32, 1 << 62)]
    ),
    "unknown-value-type": lambda: gguf([*BASE_KVS, gstr("test.x") + struct.pack("<II", 13, 0)]),
    "unknown-tensor-type": lambda: gguf(
        tensors=[tensor_info("blk.0.w", [32], 4, 0)], data=b"\0" * 128
    ),
    "duplicate-key": lambda: gguf([*BASE_KVS, kv("llama.block_count", T_UINT32, 2)]),
    "duplicate-tensor": lambda: gguf(tensors=_ONE_TENSOR * 2, data=b"\0" * 256),
    "data-out-of-bounds": lambda: _GOOD[:-100],
    "bad-tensor-offset": lambda: gguf(
        tensors=[tensor_info("blk.0.w", [32], GGML_F32, 64)], data=b"\0" * 256
    ),
    "too-many-dims": lambda: gguf(
        tensors=[tensor_info("blk.0.w", [1, 1, 1, 1, 32], GGML_F32, 0)], data=b"\0" * 128
    ),
    "bad-alignment": lambda: gguf([*BASE_KVS, kv("general.alignment", T_UINT32, 48)]),
    "bad-block-size": lambda: gguf(
        tensors=[tensor_info("blk.0.w", [10], GGML_Q4_0, 0)], data=b"\0" * 128
    ),
    "nested-too-deep": lambda: _nested(12),
    "missing-block-count": lambda: gguf([k for k in BASE_KVS if b"block_count" not in k]),
    "wrong-array-length": lambda: gguf(
        [*BASE_KVS, kv("llama.attention.head_count_kv", T_ARRAY, (T_INT32, [1, 1, 1]))]
    ),
}


def write_all(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in BROKEN.items():
        path = out_dir / f"{name}.gguf"
        path.write_bytes(make())
        paths.append(path)
    return paths


if __name__ == "__main__":
    default = Path(__file__).resolve().parent.parent / "fixtures" / "broken"
    for p in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else default):
        print(p)
