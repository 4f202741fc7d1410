"""The header parser: every value type, versions, header-only files, and each defect's error."""

from __future__ import annotations

import struct

import pytest

from llamafit.errors import GGUFError
from llamafit.reader.header import SkippedArray, TensorInfo, read_header
from llamafit.reader.source import BytesSource
from tests.support.scripts import script

_gguf_bytes = script("make_broken_fixtures")  # GGUF byte builders
BASE_KVS = _gguf_bytes.BASE_KVS
GGML_F32 = _gguf_bytes.GGML_F32
T_ARRAY = _gguf_bytes.T_ARRAY
T_BOOL = _gguf_bytes.T_BOOL
T_FLOAT32 = _gguf_bytes.T_FLOAT32
T_STRING = _gguf_bytes.T_STRING
T_UINT32 = _gguf_bytes.T_UINT32
T_UINT64 = _gguf_bytes.T_UINT64
gguf = _gguf_bytes.gguf
gstr = _gguf_bytes.gstr
kv = _gguf_bytes.kv
tensor_info = _gguf_bytes.tensor_info


def parse(data: bytes):
    return read_header(BytesSource(data, "mem.gguf"))


ALL_TYPES = [
    kv("t.u8", 0, 255),
    kv("t.i8", 1, -128),
    kv("t.u16", 2, 65535),
    kv("t.i16", 3, -32768),
    kv("t.u32", 4, 2**32 - 1),
    kv("t.i32", 5, -(2**31)),
    kv("t.f32", 6, 0.5),
    kv("t.bool", 7, True),
    kv("t.str", 8, "héllo"),
    kv("t.u64", 10, 2**64 - 1),
    kv("t.i64", 11, -(2**63)),
    kv("t.f64", 12, 0.25),
    kv("t.arr_str", T_ARRAY, (T_STRING, ["a", "", "ccc"])),
    kv("t.arr_nested", T_ARRAY, (T_ARRAY, [(T_UINT32, [1, 2]), (T_BOOL, [True])])),
    kv("t.arr_empty", T_ARRAY, (T_FLOAT32, [])),
    kv("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, ["<s>", "a", "b"])),
    kv("tokenizer.ggml.scores", T_ARRAY, (T_FLOAT32, [0.0, 1.0, 2.0])),
]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("t.u8", 255),
        ("t.i8", -128),
        ("t.u16", 65535),
        ("t.i16", -32768),
        ("t.u32", 2**32 - 1),
        ("t.i32", -(2**31)),
        ("t.f32", 0.5),
        ("t.bool", True),
        ("t.str", "héllo"),
        ("t.u64", 2**64 - 1),
        ("t.i64", -(2**63)),
        ("t.f64", 0.25),
        ("t.arr_str", ["a", "", "ccc"]),
        ("t.arr_nested", [[1, 2], [True]]),
        ("t.arr_empty", []),
        ("tokenizer.ggml.tokens", SkippedArray(T_STRING, 3)),
        ("tokenizer.ggml.scores", SkippedArray(T_FLOAT32, 3)),
    ],
)
@pytest.mark.parametrize("version", [2, 3])
def test_every_value_type(version: int, key: str, expected: object) -> None:
    header = parse(gguf([*BASE_KVS, *ALL_TYPES], version=version))
    assert header.version == version
    assert header.metadata[key] == expected


def test_tensor_infos_alignment_and_offsets() -> None:
    tensors = [
        tensor_info("a", [32, 2], GGML_F32, 0),  # 256 bytes
        tensor_info("b", [32], 2, 256),  # Q4_0: 18 bytes, padded to 64 at alignment 64
        tensor_info("c", [3], GGML_F32, 320),
    ]
    kvs = [*BASE_KVS, kv("general.alignment", T_UINT32, 64)]
    data = gguf(kvs, tensors, data=b"\0" * 384, alignment=64)
    h = parse(data)
    assert h.alignment == 64
    assert h.data_offset % 64 == 0
    assert h.data_size == 384
    assert h.tensors == (
        TensorInfo("a", (32, 2), 0, 0, 256),
        TensorInfo("b", (32,), 2, 256, 18),
        TensorInfo("c", (3,), 0, 320, 12),
    )
    assert not h.header_only
    header_only = parse(data[: h.data_offset])
    assert header_only.header_only and header_only.tensors == h.tensors


def test_header_only_file_reads_like_the_full_one(demo_path) -> None:
    data = demo_path.read_bytes()
    full = read_header(BytesSource(data, "demo"))
    assert not full.header_only
    for end in (full.data_offset, full.data_offset - 1):  # with and without the alignment padding
        cut = read_header(BytesSource(data[:end], "demo"))
        assert cut.header_only
        assert (cut.tensors, cut.metadata, cut.data_offset) == (
            full.tensors,
            full.metadata,
            full.data_offset,
        )
    assert len(full.tensors) == 236
    assert full.metadata["tokenizer.ggml.tokens"] == SkippedArray(T_STRING, 262144)


def test_alignment_must_be_uint32() -> None:
    with pytest.raises(GGUFError, match="general.alignment must be a uint32"):
        parse(gguf([*BASE_KVS, kv("general.alignment", T_UINT64, 32)]))


BASE = len(gguf())  # where a sixth key/value starts
VALUE = BASE + len(gstr("k")) + 4  # where its value starts


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (
            gguf([*BASE_KVS, gstr("k") + struct.pack("<IQ", T_STRING, 2**63)]),
            VALUE,
            "string length 9223372036854775808",
        ),
        (gguf(n_tensors=2**40), 8, "tensor count 1099511627776 exceeds"),
        (
            gguf([*BASE_KVS, gstr("k") + struct.pack("<IIQ", T_ARRAY, T_STRING, 2**61)]),
            VALUE,
            "array of 2305843009213693952",
        ),
        (gguf([*BASE_KVS, gstr("") + struct.pack("<II", T_UINT32, 1)]), BASE, "key 5 is empty"),
        (
            gguf([*BASE_KVS, gstr("k") + struct.pack("<II", 9, 77) + b"\0" * 8]),
            VALUE,
            "unknown array item type 77",
        ),
    ],
    ids=["string-2^63", "tensors-2^40", "array-2^61", "empty-key", "array-item-type"],
)
def test_hostile_counts_fail_fast(data: bytes, offset: int, message: str) -> None:
    with pytest.raises(GGUFError, match=message) as e:
        parse(data)
    assert e.value.offset == offset
    assert str(e.value).startswith(f"mem.gguf at byte {offset}: ")
