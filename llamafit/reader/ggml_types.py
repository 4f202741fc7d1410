"""ggml tensor types: block size and bytes per block (ggml/src/ggml.c type_traits; the ids of
enum ggml_type in ggml/include/ggml.h). The table is written out here so that reading a header
imports nothing beyond the standard library; tests/reader/test_ggml_types.py checks it against the
gguf package's GGML_QUANT_SIZES.

`row_size` and `tensor_nbytes` mirror ggml_row_size / ggml_nbytes (ggml/src/ggml.c).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GGMLType:
    """A ggml type: `block_size` elements take `type_size` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int

    @staticmethod
    def of(type_id: int) -> GGMLType:
        """The type with this id; KeyError for ids ggml does not know."""
        return _BY_ID[type_id]

    @staticmethod
    def named(name: str) -> GGMLType:
        """The type with this name, case-insensitive (`q8_0`, `F16`); KeyError if unknown."""
        return _BY_NAME[name.lower()]

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    def row_size(self, n: int) -> int:
        """Bytes of a row of n elements (ggml_row_size asserts n % block_size == 0)."""
        if n % self.block_size:
            raise ValueError(
                f"{n} elements is not a multiple of {self.name}'s block size {self.block_size}"
            )
        return n // self.block_size * self.type_size


def tensor_nbytes(t: GGMLType, n_elements: int) -> int:
    """ggml_nbytes for a contiguous tensor whose row length is a multiple of the block size."""
    return n_elements // t.block_size * t.type_size


# (id, name, block_size, type_size): gguf 0.19's GGML_QUANT_SIZES, the types llama.cpp loads.
_TABLE = (
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
)
_BY_ID = {type_id: GGMLType(type_id, name, block, size) for type_id, name, block, size in _TABLE}
_BY_NAME = {t.name.lower(): t for t in _BY_ID.values()}
# the types ggml knows, by id (GGMLType.of without its KeyError)
TYPES_BY_ID: Mapping[int, GGMLType] = _BY_ID


def ggml_type_name(name: str) -> str:
    """ggml_type_name (ggml/src/ggml.c type_traits) of a type named here or in any case: lower
    case, the K quants with a capital K ("q4_K")."""
    low = name.lower()
    return low[:-2] + "_K" if low.endswith("_k") else low


# the table by ggml_type_name: id -> name, and name -> (block size, type size)
GGML_TYPE_NAMES: dict[int, str] = {t.id: ggml_type_name(t.name) for t in _BY_ID.values()}
GGML_TYPE_SIZES: dict[str, tuple[int, int]] = {
    ggml_type_name(t.name): (t.block_size, t.type_size) for t in _BY_ID.values()
}

GGML_MAX_NAME = 64  # ggml/include/ggml.h: a tensor name holds 63 bytes and a NUL

# llama-server's accepted --cache-type-k/-v values (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
