"""The Metal backend (ggml/src/ggml-metal/, as llama-cpp-python 0.3.17's vendored llama.cpp has it):
offload_op, supports_buft, which graphs supports_op takes (metal_graph_ok), its buffer type's
alloc size (the flash attention extras), and ggml_metal_graph_optimize's reorder.

Metal's reorder of a split: a port of ggml_graph_optimize (ggml/src/ggml-metal/
ggml-metal-common.cpp), which ggml_backend_metal_graph_optimize runs on every Metal split
(ggml_backend_graph_optimize, called by ggml_backend_sched_split_graph). It packs the fusable
ADD / NORM / RMS_NORM chains, then ggml_metal_graph_optimize_reorder hoists later nodes into the
current set of concurrent nodes (no memory range of one read where another writes), looking
N_FORWARD nodes ahead over a list of "safe" ops, and unpacks.

PR #19555 (builds.py rule metal_reorder_64) made the look-ahead 64 nodes (before: 8) and added
ops to the safe list; `metal_graph_optimize(build)` picks the rule of that build. The two lists
are those of the b7960-era source (before) and of llama-cpp-python 0.3.17's vendored llama.cpp
49bfddeca (after).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ....builds import since
from ..alloc import BufferType
from ..cparams import OP_OFFLOAD_MIN_BATCH
from ..nodes import FLAG_COMPUTE, FLAG_OUTPUT, Graph, Tensor
from ..sched import AllocDeps, Backend, GraphOptimize, OpPredicate
from . import op_batch_size

# ggml-metal-impl.h: the flash attention kernels' queries and cache values per simdgroup
METAL_FA_NQPSG, METAL_FA_NCPSG = 8, 64
METAL_FA_VEC_NQPSG, METAL_FA_VEC_NCPSG = 1, 32
METAL_FA_NWG = 32  # ggml_metal_op_flash_attn_ext_extra_tmp's workgroups
# ggml-metal.cpp ggml_backend_metal_buffer_type_shared_get_alignment
METAL_ALIGNMENT = 32


def metal_fa_extra(tensors: Sequence[Tensor], i: int) -> int:
    """The bytes ggml_backend_metal_buffer_type_get_alloc_size (ggml-metal.cpp) adds to a
    FLASH_ATTN_EXT, as llama-cpp-python 0.3.17's vendored llama.cpp (49bfddeca) has them
    (ggml-metal-ops.cpp): extra_pad, always the non-vec kernel's NCPSG rows of K, V and the F16
    mask; extra_blk, the block map of the kernel ggml_metal_op_flash_attn_ext_use_vec picks, padded
    to 32; extra_tmp, the 32 workgroups' F32 results (V head + 2) of up to 32 queries. Later
    builds add the F16 copy of a quantized cache and sparse index lists (not modelled)."""
    t = tensors[i]
    q, k, v = (tensors[s] for s in t.src[:3] if s is not None)
    m_id = t.src[3] if len(t.src) > 3 else None
    m = tensors[m_id] if m_id is not None else None
    mask_rows = 2 * m.ne[1] * m.ne[2] * m.ne[3] if m is not None else 0
    res = METAL_FA_NCPSG * (k.nb[1] * k.ne[2] * k.ne[3] + v.nb[1] * v.ne[2] * v.ne[3] + mask_rows)
    if m is not None:
        vec = q.ne[1] < 20 and q.ne[0] % 32 == 0  # ggml_metal_op_flash_attn_ext_use_vec
        nq, nc = (
            (METAL_FA_VEC_NQPSG, METAL_FA_VEC_NCPSG) if vec else (METAL_FA_NQPSG, METAL_FA_NCPSG)
        )
        blk = -(-m.ne[0] // nc) * -(-q.ne[1] // nq) * m.ne[2] * m.ne[3]
        res += -(-blk // 32) * 32
    return res + 4 * min(q.ne[1], 32) * q.ne[2] * q.ne[3] * METAL_FA_NWG * (v.ne[0] + 2)


def metal_alloc_size(tensors: Sequence[Tensor], i: int) -> int:
    """ggml_backend_metal_buffer_type_get_alloc_size for the ops whose extras are modelled
    (FLASH_ATTN_EXT; MUL_MAT_ID, CUMSUM, ARGSORT and TOP_K add theirs too: the replay refuses
    graphs with those, METAL_OPS)."""
    t = tensors[i]
    if t.op == "FLASH_ATTN_EXT":
        return t.nbytes + metal_fa_extra(tensors, i)
    return t.nbytes


def metal_buffer_type(name: str) -> BufferType:
    """A Metal device's buffer type (ggml-metal.cpp: shared or private, alignment 32, max size
    the device's maxBufferLength, not modelled) with its alloc size."""
    return BufferType(name, METAL_ALIGNMENT, alloc_size=metal_alloc_size)


# ggml-metal-device.m ggml_metal_device_supports_op (0.3.17): the ops of the checked_0317 archs'
# graphs, and for those with conditions the types and head sizes it takes
METAL_OPS = frozenset(
    {
        "NONE",
        "VIEW",
        "RESHAPE",
        "PERMUTE",
        "TRANSPOSE",
        "GET_ROWS",
        "RMS_NORM",
        "MUL",
        "ADD",
        "MUL_MAT",
        "ROPE",
        "SET_ROWS",
        "CPY",
        "CONT",
        "FLASH_ATTN_EXT",
        "SOFT_MAX",
        "GLU",
        "SCALE",
    }
)
METAL_FA_HEADS = frozenset({32, 40, 48, 64, 72, 80, 96, 112, 128, 192, 256, 320, 576})
METAL_KV_TYPES = frozenset({"f32", "f16"})  # the cache types the Metal replay takes


def metal_graph_ok(graph: Graph) -> bool:
    """Whether ggml_metal_device_supports_op takes every node of this graph (no BF16: a device
    without bfloat refuses it; FLASH_ATTN_EXT: a listed head size, K and V of one type; CPY / CONT
    / SET_ROWS between F32 and F16; GLU: SWIGLU), and its alloc size is modelled (METAL_OPS)."""
    ts = graph.tensors
    for i in graph.nodes:
        t = ts[i]
        srcs = [ts[s] for s in t.src if s is not None and s != i]
        if t.op not in METAL_OPS or t.type == "bf16" or any(s.type == "bf16" for s in srcs):
            return False
        if t.op == "FLASH_ATTN_EXT":
            q, k, v = srcs[:3]
            if q.ne[0] not in METAL_FA_HEADS or k.type != v.type or k.type not in METAL_KV_TYPES:
                return False
        elif t.op in ("CPY", "CONT", "SET_ROWS"):
            if t.type not in METAL_KV_TYPES or srcs[0].type not in METAL_KV_TYPES:
                return False
        elif t.op == "GLU" and t.desc != "SWIGLU":
            return False
    return True


def metal_offload(min_batch: int = OP_OFFLOAD_MIN_BATCH) -> OpPredicate:
    """ggml_backend_metal_device_offload_op: MUL_MAT / MUL_MAT_ID whose batch (get_op_batch_size:
    ne[1], ne[2]) is at least op_offload_min_batch_size (GGML_OP_OFFLOAD_MIN_BATCH, else 32)."""

    def offload(tensors: Sequence[Tensor], i: int) -> bool:
        t = tensors[i]
        return t.op in ("MUL_MAT", "MUL_MAT_ID") and op_batch_size(t) >= min_batch

    return offload


def metal_backend(
    name: str,
    build: int | None,
    *,
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH,
) -> Backend:
    """A Metal device: supports_buft only its own buffer types (ggml_backend_metal_device_
    supports_buft: shared, private, mapped; named like the device here), offload_op by batch size,
    and the reorder of ggml_metal_graph_optimize as build `build` has it (metal_graph_optimize).
    supports_op takes every op: ggml_metal_device_supports_op accepts every op of the graphs the
    replay covers on Metal (metal_graph_ok checks them, and refuses the graphs with others)."""
    return Backend(
        name=name,
        buft=name,
        bufts=frozenset({name}),
        offload_op=metal_offload(op_offload_min_batch),
        graph_optimize=metal_graph_optimize(build),
    )


# ggml_metal_graph_optimize_reorder's h_safe and N_FORWARD before PR #19555
SAFE_BEFORE_19555 = frozenset(
    {
        "MUL_MAT",
        "MUL_MAT_ID",
        "ROPE",
        "NORM",
        "RMS_NORM",
        "GROUP_NORM",
        "SUM_ROWS",
        "MUL",
        "ADD",
        "DIV",
        "GLU",
        "SCALE",
        "GET_ROWS",
        "CPY",
        "SET_ROWS",
    }
)
N_FORWARD_BEFORE_19555 = 8
# the same from PR #19555 on
SAFE_19555 = SAFE_BEFORE_19555 | {
    "L2_NORM",
    "SSM_CONV",
    "SSM_SCAN",
    "CLAMP",
    "TRI",
    "DIAG",
    "SUB",
    "UNARY",
    "SET",
    "CONT",
    "REPEAT",
}
N_FORWARD_19555 = 64
EMPTY = frozenset({"NONE", "RESHAPE", "TRANSPOSE", "VIEW", "PERMUTE"})  # ggml_op_is_empty
# ggml_graph_optimize's packing: a chain starts at one of FUSE_FIRST, goes on over FUSE_NEXT
FUSE_FIRST = frozenset({"ADD", "NORM", "RMS_NORM"})
FUSE_NEXT = frozenset({"ADD", "MUL", "NORM", "RMS_NORM"})
MAX_FUSE = 16
_CACHE = re.compile(r"cache_([kv])_l(\d+)$")

_Range = tuple[object, int, int]


def metal_graph_optimize(build: int | None) -> GraphOptimize:
    """ggml_graph_optimize as llama.cpp build `build` has it (None: the current one)."""
    if since("metal_reorder_64", build):
        return metal_reorder(SAFE_19555, N_FORWARD_19555)
    return metal_reorder(SAFE_BEFORE_19555, N_FORWARD_BEFORE_19555)


def metal_reorder(safe: frozenset[str], n_forward: int) -> GraphOptimize:  # noqa: C901 (port)
    """ggml_graph_optimize with this safe list and look-ahead.

    Memory ranges (ggml_mem_range_from_tensor) at reserve: an unallocated tensor is its own range
    (its base tensor as the buffer id); the KV cache is allocated, k_l0, v_l0, k_l1, ... back to
    back in one buffer, and two ranges overlap when p0 < cmp.p1 && p1 >= cmp.p0 (so the end of
    one layer's K touches its V). Weights are only read: source ranges never conflict."""

    def optimize(  # noqa: C901 (ggml port: kept diffable)
        tensors: Sequence[Tensor],
        nodes: Sequence[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
    ) -> AllocDeps:
        n = len(nodes)

        def base(i: int) -> int:
            v = tensors[i].view_src
            while v is not None:
                i, v = v, tensors[v].view_src
            return i

        def mem_range(i: int) -> _Range:
            b = base(i)
            m = _CACHE.match(tensors[b].name)
            if tensors[b].data and m:
                p = 2 * int(m.group(2)) + (m.group(1) == "v")
                return ("kv", p, p + 1)
            return (b, 0, 1024)

        def can_fuse(i: int, f: int) -> bool:
            """ggml_can_fuse (ggml-impl.h) over nodes i .. i + f - 1."""
            for k in range(f):
                t = tensors[nodes[i + k]]
                if not t.flags & FLAG_COMPUTE:
                    return False
                if k < f - 1 and (
                    counts[nodes[i + k]] != 1 or t.view_src is not None or t.flags & FLAG_OUTPUT
                ):
                    return False
                if k > 0:
                    prev = nodes[i + k - 1]
                    s = srcs[nodes[i + k]]
                    if prev not in s[:2] or t.ne != tensors[prev].ne:
                        return False
            return True

        packed: list[tuple[int, ...]] = []
        i = 0
        while i < n:
            f = 1
            if tensors[nodes[i]].op in FUSE_FIRST:
                f = i + 1
                while f < n and f < i + MAX_FUSE and tensors[nodes[f]].op in FUSE_NEXT:
                    f += 1
                f -= i
                while f > 1 and not can_fuse(i, f):
                    f -= 1
            packed.append(tuple(nodes[i : i + f]))
            i += f

        def reads(p: tuple[int, ...]) -> list[_Range]:
            return [mem_range(s) for t in p for s in srcs[t] if s is not None]

        def overlap(a: _Range, b: _Range) -> bool:
            return a[0] == b[0] and a[1] < b[2] and a[2] >= b[1]

        Ranges = list[tuple[_Range, bool]]  # (range, is a destination)

        def add(mrs: Ranges, p: tuple[int, ...]) -> None:
            """ggml_mem_ranges_add: the sources read, the last node's destination written."""
            mrs.extend((r, False) for r in reads(p))
            mrs.append((mem_range(p[-1]), True))

        def check(mrs: Ranges, p: tuple[int, ...]) -> bool:
            """ggml_mem_ranges_check: no source where the set writes, no destination where the
            set reads or writes."""
            for r in reads(p):
                if any(dst and overlap(r, c) for c, dst in mrs):
                    return False
            d = mem_range(p[-1])
            return not any(overlap(d, c) for c, _ in mrs)

        used = [False] * len(packed)
        order: list[int] = []
        mrs0: Ranges = []
        for i0, p0 in enumerate(packed):
            if used[i0]:
                continue
            if tensors[p0[0]].op not in EMPTY and not check(mrs0, p0):
                mrs1: Ranges = []
                add(mrs1, p0)
                for i1 in range(i0 + 1, min(i0 + n_forward, len(packed))):
                    if used[i1]:
                        continue
                    p1 = packed[i1]
                    op = tensors[p1[0]].op
                    if op not in safe and op not in EMPTY:
                        break
                    if (op in EMPTY or check(mrs0, p1)) and check(mrs1, p1):
                        add(mrs0, p1)
                        order.extend(p1)
                        used[i1] = True
                    else:
                        add(mrs1, p1)
                mrs0 = []
            add(mrs0, p0)
            order.extend(p0)
        return AllocDeps(order=tuple(order))

    return optimize
