"""The backends' rules the scheduler reads (ggml_backend_dev_supports_op, _supports_buft,
_offload_op), their buffer types (what ggml-alloc asks of each) and graph optimizers, one module per
backend as llama.cpp b11434 states them (ggml/src/ggml-<backend>/), over the tensor fields of
graph/nodes.py. Device properties are parameters.

cpu.py, vulkan.py (vulkan_optimize.py: ggml_vk_graph_optimize), metal.py, cuda.py (ROCm too),
rpc.py; here the op-offload rule the GPU backends share. Op parameters (op_params) are not part of the recorded
graph, so the few rules that read them are left out and say so where they stand; none of them
decides an op of llama.cpp's text models.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cparams import OP_OFFLOAD_MIN_BATCH
from ..nodes import FLAG_COMPUTE, FLAG_OUTPUT, FLAG_PARAM, USAGE_WEIGHTS, Tensor
from ..sched import OpPredicate
from ..shapes import nrows

VIEW_OR_NONE = frozenset({"NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"})


def srcs(tensors: Sequence[Tensor], op: Tensor) -> list[Tensor | None]:
    """The op's sources (None where a slot is empty)."""
    return [None if s is None else tensors[s] for s in op.src]


def src(tensors: Sequence[Tensor], op: Tensor, k: int) -> Tensor | None:
    """The op's k-th source, None where it has none."""
    s = op.src[k] if k < len(op.src) else None
    return None if s is None else tensors[s]


def views_fusable(tensors: Sequence[Tensor], t: Tensor, members: set[int]) -> bool:
    """ggml_can_fuse_subgraph_ext's view check (ggml/src/ggml.c): every view source up t's chain
    is in the subgraph (members) or constant (ggml_is_constant: a weight, not a parameter)."""
    v = t.view_src
    while v is not None:
        vt = tensors[v]
        constant = vt.buffer is not None and vt.usage == USAGE_WEIGHTS and not vt.flags & FLAG_PARAM
        if v not in members and not constant:
            return False
        v = vt.view_src
    return True


# op offload (ggml-cuda.cu get_op_batch_size, ggml-vulkan-debug.cpp ggml_vk_get_op_batch_size)


def op_batch_size(t: Tensor) -> int:
    """The batch an op works on, as CUDA's and Vulkan's offload_op measure it."""
    if t.op == "GET_ROWS":
        return 0
    if t.op == "MUL_MAT":
        return t.ne[1]
    if t.op in ("MUL_MAT_ID", "ROPE", "ROPE_BACK"):
        return t.ne[2]
    return nrows(t)


def batch_offload(min_batch: int = OP_OFFLOAD_MIN_BATCH) -> OpPredicate:
    """ggml_backend_cuda_device_offload_op / ggml_backend_vk_device_offload_op: an op whose batch
    is at least the device's op_offload_min_batch_size (GGML_OP_OFFLOAD_MIN_BATCH, else 32)."""

    def offload(tensors: Sequence[Tensor], i: int) -> bool:
        return op_batch_size(tensors[i]) >= min_batch

    return offload


def later_uses(picked: Sequence[int], srcs: Sequence[tuple[int | None, ...]]) -> list[int]:
    """Per member of a subgraph, its uses as a source of the members after it (one pass from the
    end: ggml_can_fuse_subgraph_ext's count of uses inside the subgraph)."""
    later: dict[int, int] = {}
    uses_after = [0] * len(picked)
    for pos in range(len(picked) - 1, -1, -1):
        uses_after[pos] = later.get(picked[pos], 0)
        for s in srcs[picked[pos]]:
            if s is not None:
                later[s] = later.get(s, 0) + 1
    return uses_after


def can_fuse_subgraph_ext(
    tensors: Sequence[Tensor],
    nodes: Sequence[int],
    srcs: Sequence[tuple[int | None, ...]],
    counts: Sequence[int],
    idxs: Sequence[int],
    ops: Sequence[str],
    outputs: Sequence[int],
) -> bool:
    """ggml_can_fuse_subgraph_ext (ggml/src/ggml.c) over positions idxs of a split's nodes (their
    current sources, the graph's use counts): each node has its op and is computed; one that is
    not an output is not a graph output, all its uses are inside the subgraph, and every view
    source under it is in the subgraph or a constant (ggml_is_constant: weights)."""
    n = len(nodes)
    if any(k >= n for k in idxs):
        return False
    picked = [nodes[k] for k in idxs]
    members = set(picked)
    outs = {nodes[k] for k in outputs if k < n}
    uses_after = later_uses(picked, srcs)
    for pos, node in enumerate(picked):
        t = tensors[node]
        if t.op != ops[pos] or not t.flags & FLAG_COMPUTE:
            return False
        if node in outs:
            continue
        if t.flags & FLAG_OUTPUT:
            return False
        if uses_after[pos] != counts[node]:
            return False
        if not views_fusable(tensors, t, members):
            return False
    return True
