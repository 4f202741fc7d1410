"""A ggml compute graph as plain data: the fields of struct ggml_tensor and struct ggml_cgraph
(ggml/include/ggml.h, ggml/src/ggml-impl.h) that ggml_backend_sched_split_graph
(ggml/src/ggml-backend.cpp) and ggml_gallocr_alloc_graph_impl (ggml/src/ggml-alloc.c) read.

A graph is a flat tuple of tensors referenced by index: sources, views' sources, and the graph's
leaf and node lists (ggml_cgraph.leafs / .nodes, in graph order) are indexes into it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter

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


@dataclass(frozen=True, slots=True)
class Tensor:
    """One struct ggml_tensor."""

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


# Tensor's fields in order, and all of them read at once: with_field and the scheduler's copies
# (dataclasses.replace without its per-call cost: a 94-layer graph changes a thousand tensors)
TENSOR_FIELDS = tuple(f.name for f in fields(Tensor))
tensor_values = attrgetter(*TENSOR_FIELDS)


def with_field(t: Tensor, k: int, value: object) -> Tensor:
    """t with field TENSOR_FIELDS[k] set to value."""
    values = list(tensor_values(t))
    values[k] = value
    return Tensor(*values)


@dataclass(frozen=True, slots=True)
class Graph:
    """One struct ggml_cgraph, with the buffer id of each leaf and node when the scheduler has
    assigned them (the node_buffer_ids / leaf_buffer_ids of ggml_gallocr_reserve_n)."""

    tensors: tuple[Tensor, ...]
    leafs: tuple[int, ...]
    nodes: tuple[int, ...]
    leaf_buffer_ids: tuple[int, ...] | None = None
    node_buffer_ids: tuple[int, ...] | None = None
