"""Shape predicates of ggml (ggml/src/ggml.c) over llamafit.memory.graph.nodes.Tensor, as the
backends' supports_op rules and graph_optimize reorders read them."""

from __future__ import annotations

from ...reader.ggml_types import GGMLType, ggml_type_name
from .nodes import Tensor

_TYPES: dict[str, GGMLType] = {}


def ggml_names(names: set[str] | frozenset[str]) -> frozenset[str]:
    """Type names as ggml_type_name spells them (the K quants with a capital K: "q4_K")."""
    return frozenset(ggml_type_name(n) for n in names)


def type_of(name: str) -> GGMLType:
    t = _TYPES.get(name)
    if t is None:
        t = _TYPES[name] = GGMLType.named(name)
    return t


def is_quantized(type_name: str) -> bool:
    """ggml_is_quantized (ggml/src/ggml.c): block size above one."""
    return type_of(type_name).block_size > 1


def nrows(t: Tensor) -> int:
    """ggml_nrows."""
    return t.ne[1] * t.ne[2] * t.ne[3]


def is_contiguous_n(t: Tensor, m: int) -> bool:
    """ggml_is_contiguous_m_n(t, m, GGML_MAX_DIMS) (ggml/src/ggml.c): contiguous above dim m."""
    ty = type_of(t.type)
    next_nb = ty.type_size
    if t.ne[0] != ty.block_size and t.nb[0] != next_nb:
        return False
    next_nb *= t.ne[0] // ty.block_size
    for i in range(1, 4):
        if i > m:
            if t.ne[i] != 1 and t.nb[i] != next_nb:
                return False
            next_nb *= t.ne[i]
        else:
            next_nb = t.ne[i] * t.nb[i]
    return True


def is_contiguous(t: Tensor) -> bool:
    return is_contiguous_n(t, 0)


def is_contiguous_rows(t: Tensor) -> bool:
    """ggml_is_contiguous_rows: ne[0] == block size or nb[0] == type size."""
    ty = type_of(t.type)
    return t.ne[0] == ty.block_size or t.nb[0] == ty.type_size


def n_dims(t: Tensor) -> int:
    """ggml_n_dims."""
    for i in range(3, 0, -1):
        if t.ne[i] > 1:
            return i + 1
    return 1
