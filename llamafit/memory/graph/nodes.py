"""A ggml compute graph as plain data: the fields of struct ggml_tensor and struct ggml_cgraph
(ggml/include/ggml.h, ggml/src/ggml-impl.h) that ggml_backend_sched_split_graph
(ggml/src/ggml-backend.cpp) and ggml_gallocr_alloc_graph_impl (ggml/src/ggml-alloc.c) read.

A graph is a flat tuple of tensors referenced by index: sources, views' sources, and the graph's
leaf and node lists (ggml_cgraph.leafs / .nodes, in graph order) are indexes into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

# enum ggml_tensor_flag (ggml/include/ggml.h)
FLAG_INPUT = 1
FLAG_OUTPUT = 2
FLAG_PARAM = 4
FLAG_LOSS = 8
FLAG_COMPUTE = 16

# Tensor.pin_layer: the CPU backend, unconditionally (build_attn_mha without flash attention and
# with -nkvo: ggml_backend_sched_set_tensor_backend(sched, cur, backend_cpu), src/llama-graph.cpp)
PIN_CPU = -2
# enum ggml_backend_buffer_usage (ggml/include/ggml-backend.h)
USAGE_ANY = 0
USAGE_WEIGHTS = 1
USAGE_COMPUTE = 2


class Tensor(NamedTuple):
    """One struct ggml_tensor.

    A named tuple, not a frozen dataclass: as immutable, and made about ten times faster (a
    frozen dataclass's __init__ sets each of the 16 fields through object.__setattr__; a plan of
    the 94-layer MoE makes some 44,000 tensors: converted builds, placements, the scheduler's
    copies and views). Only tensors are compared with tensors."""

    name: str
    op: str  # ggml_op_name: "NONE", "MUL_MAT", "VIEW", "UNARY", "GLU", ...
    type: str  # ggml_type_name: "f32", "f16", "q4_K", ...
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    nbytes: int  # ggml_nbytes
    flags: int = 0
    src: tuple[int | None, ...] = ()
    view_src: int | None = None
    view_offs: int = 0
    data: bool = False  # already has memory (weights, the KV cache): the allocator skips it
    buffer: str | None = None  # the buffer holding it when data is set ("CPU", "Vulkan0", ...)
    desc: str = ""  # ggml_op_desc: unary and GLU ops by their own name ("SILU", "SWIGLU")
    # llama_context::graph_get_cb (src/llama-context.cpp): when the ubatch has fewer than 32 tokens
    # or every layer is offloaded, a "norm" tensor of layer il asks the scheduler for that layer's
    # device (ggml_backend_sched_set_tensor_backend) if its backend supports the op; -1: no request;
    # PIN_CPU: the CPU backend
    pin_layer: int = -1
    usage: int = USAGE_ANY  # the buffer's usage: the weights' is USAGE_WEIGHTS, the KV cache's ANY
    backend: str | None = None  # pinned by ggml_backend_sched_set_tensor_backend before the split

    @property
    def is_input(self) -> bool:
        return bool(self.flags & FLAG_INPUT)

    @property
    def is_output(self) -> bool:
        return bool(self.flags & FLAG_OUTPUT)


# Tensor's fields in order (with_field's and the scheduler's copies index them)
TENSOR_FIELDS: tuple[str, ...] = Tensor._fields
# a Tensor of these field values, in TENSOR_FIELDS' order (tuple.__new__: no per-field call)
make_tensor: Callable[[type[Tensor], Iterable[object]], Tensor] = tuple.__new__


def tensor_of(values: Iterable[object]) -> Tensor:
    """The Tensor of these field values, in TENSOR_FIELDS' order."""
    return make_tensor(Tensor, values)


def with_field(t: Tensor, k: int, value: object) -> Tensor:
    """t with field TENSOR_FIELDS[k] set to value."""
    values: list[object] = list(t)
    values[k] = value
    return make_tensor(Tensor, values)


@dataclass(frozen=True, slots=True)
class Graph:
    """One struct ggml_cgraph, with the buffer id of each leaf and node when the scheduler has
    assigned them (the node_buffer_ids / leaf_buffer_ids of ggml_gallocr_reserve_n)."""

    tensors: tuple[Tensor, ...]
    leafs: tuple[int, ...]
    nodes: tuple[int, ...]
    leaf_buffer_ids: tuple[int, ...] | None = None
    node_buffer_ids: tuple[int, ...] | None = None
