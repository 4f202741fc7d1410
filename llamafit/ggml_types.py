"""ggml tensor types: block size and bytes per block, from the gguf package's constants.

`row_size` and `tensor_nbytes` mirror ggml_row_size / ggml_nbytes (ggml/src/ggml.c).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType


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
            raise ValueError(f"{n} elements is not a multiple of {self.name}'s block size {self.block_size}")
        return n // self.block_size * self.type_size


def tensor_nbytes(t: GGMLType, n_elements: int) -> int:
    """ggml_nbytes for a contiguous tensor whose row length is a multiple of the block size."""
    return n_elements // t.block_size * t.type_size


_BY_ID = {
    int(q): GGMLType(int(q), q.name, *GGML_QUANT_SIZES[q]) for q in GGMLQuantizationType if q in GGML_QUANT_SIZES
}
_BY_NAME = {t.name.lower(): t for t in _BY_ID.values()}

# llama-server's accepted --cache-type-k/-v values (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
