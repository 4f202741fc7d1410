"""Metal's reorder of a split: a port of ggml_graph_optimize (ggml/src/ggml-metal/
ggml-metal-common.cpp), which ggml_backend_metal_graph_optimize runs on every Metal split
(ggml_backend_graph_optimize, called by ggml_backend_sched_split_graph). It packs the fusable
ADD / NORM / RMS_NORM chains, then ggml_metal_graph_optimize_reorder hoists later nodes into the
current set of concurrent nodes (no memory range of one read where another writes), looking
N_FORWARD nodes ahead over a list of "safe" ops, and unpacks.

PR #19555 (resolve.py rule metal_reorder_64) made the look-ahead 64 nodes (before: 8) and added
ops to the safe list; `metal_graph_optimize(build)` picks the rule of that build. The two lists
are those of the b7960-era source (before) and of llama-cpp-python 0.3.17's vendored llama.cpp
49bfddeca (after).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llamafit.memory.graph.nodes import FLAG_COMPUTE, FLAG_OUTPUT, Tensor
from llamafit.memory.graph.sched import AllocDeps, GraphOptimize
from llamafit.memory.resolve import since

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


def metal_reorder(safe: frozenset[str], n_forward: int) -> GraphOptimize:
    """ggml_graph_optimize with this safe list and look-ahead.

    Memory ranges (ggml_mem_range_from_tensor) at reserve: an unallocated tensor is its own range
    (its base tensor as the buffer id); the KV cache is allocated, k_l0, v_l0, k_l1, ... back to
    back in one buffer, and two ranges overlap when p0 < cmp.p1 && p1 >= cmp.p0 (so the end of
    one layer's K touches its V). Weights are only read: source ranges never conflict."""

    def optimize(
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
