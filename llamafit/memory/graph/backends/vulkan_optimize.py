"""Vulkan's reorder of a split: a port of ggml_vk_graph_optimize
(ggml/src/ggml-vulkan/ggml-vulkan.cpp, llama.cpp b11434), which the scheduler calls on every
Vulkan split before it builds the allocator's graph (ggml_backend_sched_split_graph). It groups
nodes that do not depend on each other (up to 20 ahead) so that fusable chains stay adjacent,
keeps the fusion patterns of ggml-vulkan-types.h in place, and asks the allocator to keep the
inputs of a fused top-k MoE or hc_post gate alive until the pattern's last node (add_alloc_dep).
Before builds.py's rule vk_reorder_ssm_conv (PR #22653, the first change to it after
llama-cpp-python 0.3.17's vendored llama.cpp that we found) the reorder is 0.3.17's
(vk_graph_optimize_0317); `vk_graph_optimize_for(build)` picks the one of a build.

Nodes are indexes into the scheduler's tensor table; `srcs` holds every tensor's current sources
(split inputs already replaced by their copies), `counts` the original graph's use counts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from ....builds import since
from ..nodes import FLAG_COMPUTE, FLAG_OUTPUT, Tensor
from ..sched import AllocDeps, GraphOptimize
from ..shapes import is_contiguous_n
from . import views_fusable

# ggml-vulkan-types.h
TOPK_MOE_EARLY_SOFTMAX_NORM = (
    "SOFT_MAX",
    "RESHAPE",
    "ARGSORT",
    "VIEW",
    "GET_ROWS",
    "RESHAPE",
    "SUM_ROWS",
    "CLAMP",
    "DIV",
    "RESHAPE",
)
TOPK_MOE_SIGMOID_NORM_BIAS = (
    "UNARY",
    "RESHAPE",
    "ADD",
    "ARGSORT",
    "VIEW",
    "GET_ROWS",
    "RESHAPE",
    "SUM_ROWS",
    "CLAMP",
    "DIV",
    "RESHAPE",
)
TOPK_MOE_SQRT_SOFTPLUS_NORM_BIAS = (
    "UNARY",
    "SQRT",
    "RESHAPE",
    "ADD",
    "ARGSORT",
    "VIEW",
    "GET_ROWS",
    "RESHAPE",
    "SUM_ROWS",
    "CLAMP",
    "DIV",
    "RESHAPE",
)
TOPK_MOE_EARLY_SOFTMAX = ("SOFT_MAX", "RESHAPE", "ARGSORT", "VIEW", "GET_ROWS")
TOPK_MOE_LATE_SOFTMAX = ("ARGSORT", "VIEW", "GET_ROWS", "RESHAPE", "SOFT_MAX", "RESHAPE")
SNAKE = ("MUL", "SIN", "SQR", "MUL", "ADD")
TOPK_QSA = ("GET_ROWS", "PERMUTE", "CONT", "CPY", "RESHAPE", "ADD", "TOP_K")
RMS_NORM_MUL_ADD_MUL = ("RMS_NORM", "MUL", "ADD", "MUL")
RMS_NORM_MUL_ADD = ("RMS_NORM", "MUL", "ADD")
RMS_NORM_MUL_ROPE_VIEW_SET_ROWS = ("RMS_NORM", "MUL", "ROPE", "VIEW", "SET_ROWS")
RMS_NORM_VIEW_SET_ROWS = ("RMS_NORM", "VIEW", "SET_ROWS")
ROPE_VIEW_SET_ROWS = ("ROPE", "VIEW", "SET_ROWS")
HC_POST_GATE = ("SCALE", "UNARY", "SCALE", "DSV4_HC_POST")

TOPK_MOE = (
    TOPK_MOE_EARLY_SOFTMAX_NORM,
    TOPK_MOE_SIGMOID_NORM_BIAS,
    TOPK_MOE_SQRT_SOFTPLUS_NORM_BIAS,
    TOPK_MOE_EARLY_SOFTMAX,
    TOPK_MOE_LATE_SOFTMAX,
)
KEPT = (
    SNAKE,
    TOPK_QSA,
    RMS_NORM_MUL_ADD_MUL,
    RMS_NORM_MUL_ADD,
    RMS_NORM_MUL_ROPE_VIEW_SET_ROWS,
    RMS_NORM_VIEW_SET_ROWS,
    ROPE_VIEW_SET_ROWS,
)
# the patterns a node may not start when it is pulled forward (the first pass's skip list)
NOT_PULLED = (
    *TOPK_MOE,
    SNAKE,
    RMS_NORM_MUL_ADD_MUL,
    RMS_NORM_MUL_ADD,
    RMS_NORM_MUL_ROPE_VIEW_SET_ROWS,
    RMS_NORM_VIEW_SET_ROWS,
    ROPE_VIEW_SET_ROWS,
    HC_POST_GATE,
)

_BY_FIRST_OP: dict[str, list[tuple[str, ...]]] = {}
for _p in (*TOPK_MOE, *KEPT, HC_POST_GATE):
    _BY_FIRST_OP.setdefault(_p[0], []).append(_p)
_NOT_PULLED_SET = frozenset(NOT_PULLED)

EMPTY_OPS = frozenset({"NONE", "RESHAPE", "TRANSPOSE", "VIEW", "PERMUTE"})
NUM_TO_CHECK = 20
UNARY_MUL_OPS = frozenset({"GELU", "SIGMOID", "SILU", "SOFTPLUS"})  # ggml_vk_unary_mul_op_index

# the (c, j) pairs of the first pass that may stay adjacent although j reads c
_ADJACENT = frozenset(
    {
        ("MUL_MAT", "ADD"),
        ("MUL_MAT_ID", "ADD_ID"),
        ("MUL_MAT_ID", "MUL"),
        ("ADD", "ADD"),
        ("SSM_CONV", "ADD"),
        ("SSM_CONV", "UNARY"),
    }
)


def _is_contiguous_1(t: Tensor) -> bool:
    return is_contiguous_n(t, 1)


def _is_empty_tensor(t: Tensor) -> bool:
    return any(x == 0 for x in t.ne)


def _can_repeat(t0: Tensor, t1: Tensor) -> bool:
    """ggml_can_repeat (ggml/src/ggml.c)."""
    if _is_empty_tensor(t0):
        return _is_empty_tensor(t1)
    return all(b % a == 0 for a, b in zip(t0.ne, t1.ne, strict=True))


def vk_graph_optimize(  # noqa: C901 (ggml port: kept diffable)
    tensors: Sequence[Tensor],
    split_nodes: Sequence[int],
    srcs: Sequence[tuple[int | None, ...]],
    counts: Sequence[int],
) -> AllocDeps:
    """ggml_vk_graph_optimize over one split (its nodes in the scheduler's order)."""
    nodes = list(split_nodes)
    n = len(nodes)
    if n <= 2:  # no pattern is that short, and one pass keeps two nodes in order
        return AllocDeps(order=tuple(nodes))
    ops = [tensors[i].op for i in nodes]
    empty = [o in EMPTY_OPS for o in ops]

    def src(i: int, k: int) -> int | None:
        s = srcs[i]
        return s[k] if k < len(s) else None

    # is_src_of's reads, per position: the tensor's sources, the base tensors (view sources) of
    # its sources, and its own base
    src_sets: list[set[int]] = []
    src_bases: list[set[int]] = []
    bases: list[int] = []
    for i in nodes:
        ss = {x for x in srcs[i] if x is not None}
        src_sets.append(ss)
        sb: set[int] = set()
        for x in ss:
            vx = tensors[x].view_src
            sb.add(x if vx is None else vx)
        src_bases.append(sb)
        v = tensors[i].view_src
        bases.append(i if v is None else v)

    def is_src_of(j: int, c: int) -> bool:
        """The C lambda is_src_of(nodes[j], nodes[c]): the node at j reads the node at c, or
        storage it writes through another view (the same base tensor)."""
        if nodes[c] in src_sets[j]:
            return True
        if not (empty[j] or empty[c]):
            if bases[c] in src_bases[j] or bases[j] in src_bases[c]:
                return True
        return bases[j] == bases[c]

    # the positions each position depends on (is_src_of), found through maps and cached
    pos_of = {x: k for k, x in enumerate(nodes)}
    by_base: dict[int, list[int]] = {}
    by_src_base: dict[int, list[int]] = {}
    for k in range(n):
        by_base.setdefault(bases[k], []).append(k)
        if not empty[k]:
            for b in src_bases[k]:
                by_src_base.setdefault(b, []).append(k)
    dep_cache: dict[int, list[int]] = {}

    def deps(j: int) -> list[int]:
        d = dep_cache.get(j)
        if d is None:
            found = {pos_of[x] for x in src_sets[j] if x in pos_of}
            found.update(by_base[bases[j]])
            if not empty[j]:
                for b in src_bases[j]:
                    found.update(c for c in by_base.get(b, ()) if not empty[c])
                found.update(by_src_base.get(bases[j], ()))
            found.discard(j)
            d = dep_cache[j] = sorted(found)
        return d

    used = [False] * n
    used_set: set[int] = set()
    new_order: list[int] = []
    keep: dict[int, list[int]] = {}
    keep_order: list[int] = []

    def add_dep(t: int, until: int) -> None:
        lst = keep.get(until)
        if lst is None:
            lst = keep[until] = []
            keep_order.append(until)
        if t not in lst:
            lst.append(t)

    # the patterns whose ops start at a position of the split, used or not
    at: dict[int, set[tuple[str, ...]]] = {}
    for k in range(n):
        for pattern in _BY_FIRST_OP.get(ops[k], ()):
            size = len(pattern)
            if k + size <= n and tuple(ops[k : k + size]) == pattern:
                at.setdefault(k, set()).add(pattern)
    pulled_at = {k: [p for p in ps if p in _NOT_PULLED_SET] for k, ps in at.items()}

    def match(pattern: tuple[str, ...], start: int) -> bool:
        ps = at.get(start)
        if ps is None or pattern not in ps:
            return False
        return not any(used[start : start + len(pattern)])

    first = 0

    def advance() -> None:
        nonlocal first
        while first < n and used[first]:
            first += 1

    def keep_pattern(pattern: tuple[str, ...]) -> bool:
        if not match(pattern, first):
            return False
        for j in range(len(pattern)):
            new_order.append(nodes[first + j])
            used_set.add(nodes[first + j])
            used[first + j] = True
        advance()
        return True

    def add_pattern_deps(pattern: tuple[str, ...], last_node: int) -> None:
        seen: set[int] = set()
        for j in range(len(pattern)):
            node = nodes[first + j]
            for s in srcs[node]:
                if s is not None and s not in seen:
                    seen.add(s)
                    add_dep(s, nodes[last_node])
            seen.add(node)

    def keep_topk(pattern: tuple[str, ...]) -> bool:
        if not match(pattern, first):
            return False
        last_node = first + len(pattern) - 1
        if last_node + 1 < n and ops[last_node + 1] == "SCALE":
            last_node += 1
        add_pattern_deps(pattern, last_node)
        return keep_pattern(pattern)

    def use_count(k: int) -> int:
        return counts[nodes[k]]

    def can_fuse_subgraph_ext(
        idxs: Sequence[int], pattern: Sequence[str], outputs: Sequence[int]
    ) -> bool:
        """ggml_can_fuse_subgraph_ext (ggml/src/ggml.c)."""
        members = {nodes[k] for k in idxs if k < n}
        outs = {nodes[k] for k in outputs if k < n}
        for i, k in enumerate(idxs):
            if k >= n:
                return False
            t = tensors[nodes[k]]
            if t.op != pattern[i] or not t.flags & FLAG_COMPUTE:
                return False
            if nodes[k] in outs:
                continue
            if t.flags & FLAG_OUTPUT:
                return False
            uses = 0
            for j in range(i + 1, len(idxs)):
                uses += sum(1 for s in srcs[nodes[idxs[j]]] if s == nodes[k])
            if uses != use_count(k):
                return False
            if not views_fusable(tensors, t, members):
                return False
        return True

    def can_fuse_unary_mul(u: int, m: int) -> bool:
        """ggml_vk_can_fuse_unary_mul."""
        unary = tensors[nodes[u]]
        mul = tensors[nodes[m]]
        if unary.desc not in UNARY_MUL_OPS:
            return False
        if unary.type not in ("f32", "f16") or unary.type != mul.type:
            return False
        m0, m1 = src(nodes[m], 0), src(nodes[m], 1)
        if m0 != nodes[u] and m1 != nodes[u]:
            return False
        other = m1 if m0 == nodes[u] else m0
        if other is None or tensors[other].type != unary.type:
            return False
        u0 = src(nodes[u], 0)
        if u0 is None or not _is_contiguous_1(tensors[other]) or not _is_contiguous_1(tensors[u0]):
            return False
        if m0 == nodes[u]:
            return _can_repeat(tensors[other], unary)
        assert m0 is not None
        return _can_repeat(unary, tensors[m0])

    def empty_or_scheduled(lo: int, hi: int) -> bool:
        return all(used[v] or empty[v] for v in range(lo, hi))

    qsa = any(TOPK_QSA in ps for ps in at.values())

    real_pos = [k for k in range(n) if not empty[k]]
    empty_pos = [k for k in range(n) if empty[k]]

    def in_qsa(k: int) -> bool:
        return any(k - o >= 0 and match(TOPK_QSA, k - o) for o in range(len(TOPK_QSA)))

    while first < n:
        if first in at:  # a pattern's ops start here: the kept patterns, in the source's order
            if any(keep_topk(p) for p in TOPK_MOE):
                continue
            if any(keep_pattern(p) for p in KEPT):
                continue
            if match(HC_POST_GATE, first):
                add_pattern_deps(HC_POST_GATE, first + len(HC_POST_GATE) - 1)
                keep_pattern(HC_POST_GATE)
                continue

        current = [first]
        limit = min(first + NUM_TO_CHECK, n)
        for j in real_pos[bisect_right(real_pos, first) : bisect_left(real_pos, limit)]:
            if used[j]:
                continue
            if (j in at and any(match(p, j) for p in pulled_at[j])) or (qsa and in_qsa(j)):
                continue
            ok = True
            for c in deps(j):
                if c < first or c >= j or used[c]:
                    continue
                back = c == current[-1]
                oc, oj = ops[c], ops[j]
                if (
                    back
                    and oj == "MUL"
                    and oc in ("RMS_NORM", "UNARY")
                    and empty_or_scheduled(c + 1, j)
                ):
                    continue
                if back and j == c + 1 and (oc, oj) in _ADJACENT:
                    continue
                ok = False
                break
            if not ok:
                continue
            current.append(j)
            rope_idx = j
            if ops[j] == "MUL" and ops[j - 1] == "RMS_NORM":
                rope_idx = _pull_rope(j, nodes, ops, srcs, tensors, used, current, n)
            if ops[rope_idx] in ("ROPE", "RMS_NORM"):
                view_idx = -1
                set_rows_idx = -1
                for k in range(rope_idx + 1, min(rope_idx + 15, n)):
                    if used[k]:
                        continue
                    if view_idx == -1 and ops[k] == "VIEW" and src(nodes[k], 0) == nodes[rope_idx]:
                        view_idx = k
                        continue
                    if (
                        view_idx != -1
                        and ops[k] == "SET_ROWS"
                        and src(nodes[k], 0) == nodes[view_idx]
                    ):
                        set_rows_idx = k
                        break
                if set_rows_idx != -1:
                    can_pull = can_fuse_subgraph_ext(
                        (rope_idx, view_idx, set_rows_idx),
                        (ops[rope_idx], "VIEW", "SET_ROWS"),
                        (set_rows_idx,),
                    )
                    for c in range(rope_idx + 1, set_rows_idx):
                        if not can_pull:
                            break
                        if (
                            not used[c]
                            and c != view_idx
                            and not empty[c]
                            and is_src_of(set_rows_idx, c)
                        ):
                            can_pull = False
                    if can_pull:
                        current.append(view_idx)
                        current.append(set_rows_idx)
                        used[view_idx] = True
                        used[set_rows_idx] = True
            if ops[j] == "ADD_ID" and ops[j - 1] == "MUL_MAT_ID":
                _pull_next(j, "MUL", nodes, ops, srcs, tensors, used, used_set, current, n)
            if ops[j] == "ADD" and ops[j - 1] == "MUL_MAT":
                _pull_next(j, "ADD", nodes, ops, srcs, tensors, used, used_set, current, n)
            if ops[j] == "ADD" and ops[j - 1] == "SSM_CONV":
                for k in range(j + 1, min(j + 15, n)):
                    if ops[k] == "UNARY" and src(nodes[k], 0) == nodes[j]:
                        current.append(k)
                        used[k] = True
                        break
            if ops[j] == "UNARY":
                for k in range(j + 1, min(j + 15, n)):
                    mk = nodes[k]
                    m0, m1 = src(mk, 0), src(mk, 1)
                    if ops[k] != "MUL" or (m0 != nodes[j] and m1 != nodes[j]):
                        continue
                    other = m1 if m0 == nodes[j] else m0
                    assert other is not None
                    if not (tensors[other].op == "NONE" or other in used_set):
                        continue
                    if not can_fuse_unary_mul(j, k):
                        continue
                    current.append(k)
                    used[k] = True
                    break
        if ops[current[-1]] != "ADD":
            window = empty_pos[bisect_right(empty_pos, first) : bisect_left(empty_pos, limit)]
            _pull_empty(window, first, deps, used, current)
        for c in current:
            new_order.append(nodes[c])
            used_set.add(nodes[c])
            used[c] = True
        advance()

    return AllocDeps(order=tuple(new_order), keep=tuple((u, tuple(keep[u])) for u in keep_order))


def _pull_next(
    j: int,
    op: str,
    nodes: Sequence[int],
    ops: Sequence[str],
    srcs: Sequence[tuple[int | None, ...]],
    tensors: Sequence[Tensor],
    used: list[bool],
    used_set: set[int],
    current: list[int],
    n: int,
) -> None:
    """MUL_MAT_ID + ADD_ID + MUL and MUL_MAT + ADD + ADD: pull the next node of the chain forward
    when its other source is a leaf or already ordered."""
    for k in range(j + 1, min(j + 15, n)):
        s = srcs[nodes[k]]
        s0 = s[0] if s else None
        s1 = s[1] if len(s) > 1 else None
        if (
            ops[k] == op
            and s0 == nodes[j]
            and s1 is not None
            and (tensors[s1].op == "NONE" or s1 in used_set)
        ):
            current.append(k)
            used[k] = True
            break


def _pull_empty(
    window: Sequence[int],
    first: int,
    deps: Callable[[int], Sequence[int]],
    used: Sequence[bool],
    current: list[int],
) -> None:
    """The empty nodes (views, reshapes: EMPTY_OPS) of the window after `first` that no node
    still to be ordered feeds go with the current set (both versions of ggml_vk_graph_optimize)."""
    for j in window:
        if used[j]:
            continue
        if all(not (first <= c < j and not used[c] and c not in current) for c in deps(j)):
            current.append(j)


def _pull_rope(
    j: int,
    nodes: Sequence[int],
    ops: Sequence[str],
    srcs: Sequence[tuple[int | None, ...]],
    tensors: Sequence[Tensor],
    used: list[bool],
    current: list[int],
    n: int,
) -> int:
    """RMS_NORM + MUL (at j) + ROPE: pull forward the ROPE that reads the MUL, with leaf
    positions and factors; its position, or j where there is none (both versions of
    ggml_vk_graph_optimize)."""
    for k in range(j + 1, min(j + 15, n)):
        s = srcs[nodes[k]]
        s0 = s[0] if s else None
        s1 = s[1] if len(s) > 1 else None
        s2 = s[2] if len(s) > 2 else None
        if (
            ops[k] == "ROPE"
            and s0 == nodes[j]
            and s1 is not None
            and tensors[s1].op == "NONE"
            and (s2 is None or tensors[s2].op == "NONE")
        ):
            current.append(k)
            used[k] = True
            return k
    return j


# ---------------------------------------------------------------------------------------------
# The reorder before builds.py's rule vk_reorder_ssm_conv: ggml_vk_graph_optimize as
# llama-cpp-python 0.3.17's vendored llama.cpp (49bfddeca, 2026-03-22) has it.

# the four top-k MoE patterns of that source (ggml-vulkan.cpp), kept in place and never pulled
TOPK_MOE_0317 = (
    TOPK_MOE_EARLY_SOFTMAX_NORM,
    TOPK_MOE_SIGMOID_NORM_BIAS,
    TOPK_MOE_EARLY_SOFTMAX,
    TOPK_MOE_LATE_SOFTMAX,
)
# the (c, j) pairs that may stay adjacent although j reads c
_ADJACENT_0317 = frozenset(
    {
        ("RMS_NORM", "MUL"),
        ("MUL_MAT", "ADD"),
        ("MUL_MAT_ID", "ADD_ID"),
        ("MUL_MAT_ID", "MUL"),
        ("ADD", "ADD"),
    }
)
ROPE_SET_ROWS_WINDOW_0317 = 10  # ROPE + VIEW + SET_ROWS: looked for in the next 9 nodes


def vk_graph_optimize_0317(  # noqa: C901 (ggml port: kept diffable)
    tensors: Sequence[Tensor],
    split_nodes: Sequence[int],
    srcs: Sequence[tuple[int | None, ...]],
    counts: Sequence[int],
) -> AllocDeps:
    """ggml_vk_graph_optimize over one split as 0.3.17's llama.cpp has it. Against b11434's
    (vk_graph_optimize): is_src_of knows only direct sources and views of one base tensor; only
    the four top-k MoE patterns are kept in place (no RMS_NORM + MUL + ADD, ROPE + VIEW +
    SET_ROWS, ... patterns, no alloc dependencies); RMS_NORM + MUL may stay together only when
    adjacent; ROPE + VIEW + SET_ROWS is pulled together without ggml_can_fuse_subgraph_ext's
    check, looking 9 nodes past the ROPE, ROPE only (not RMS_NORM); no UNARY + MUL, no SSM_CONV
    pulls. `counts` is unused (no fusion check reads it)."""
    del counts
    nodes = list(split_nodes)
    n = len(nodes)
    if n <= 2:
        return AllocDeps(order=tuple(nodes))
    ops = [tensors[i].op for i in nodes]
    empty = [o in EMPTY_OPS for o in ops]

    def src(i: int, k: int) -> int | None:
        s = srcs[i]
        return s[k] if k < len(s) else None

    bases: list[int] = []
    for i in nodes:
        v = tensors[i].view_src
        bases.append(i if v is None else v)
    pos_of = {x: k for k, x in enumerate(nodes)}
    by_base: dict[int, list[int]] = {}
    for k in range(n):
        by_base.setdefault(bases[k], []).append(k)
    dep_cache: dict[int, list[int]] = {}

    def deps(j: int) -> list[int]:
        """The positions c != j with is_src_of(nodes[j], nodes[c]): c is a source of j, or both
        are views of (or are) one base tensor."""
        d = dep_cache.get(j)
        if d is None:
            found = {pos_of[x] for x in srcs[nodes[j]] if x is not None and x in pos_of}
            found.update(by_base[bases[j]])
            found.discard(j)
            d = dep_cache[j] = sorted(found)
        return d

    used = [False] * n
    used_set: set[int] = set()
    new_order: list[int] = []

    def match(pattern: tuple[str, ...], start: int) -> bool:
        size = len(pattern)
        if start + size > n:
            return False
        return tuple(ops[start : start + size]) == pattern and not any(used[start : start + size])

    first = 0
    while first < n:
        kept = next((p for p in TOPK_MOE_0317 if match(p, first)), None)
        if kept is not None:
            for j in range(len(kept)):
                new_order.append(nodes[first + j])
                used_set.add(nodes[first + j])
                used[first + j] = True
            while first < n and used[first]:
                first += 1
            continue

        current = [first]
        limit = min(first + NUM_TO_CHECK, n)
        for j in range(first + 1, limit):
            if used[j] or empty[j] or any(match(p, j) for p in TOPK_MOE_0317):
                continue
            ok = True
            for c in deps(j):
                if c < first or c >= j or used[c]:
                    continue
                if j == c + 1 and c == current[-1] and (ops[c], ops[j]) in _ADJACENT_0317:
                    continue
                ok = False
                break
            if not ok:
                continue
            current.append(j)
            rope_idx = j
            if ops[j] == "MUL" and ops[j - 1] == "RMS_NORM":
                rope_idx = _pull_rope(j, nodes, ops, srcs, tensors, used, current, n)
            if ops[rope_idx] == "ROPE":
                view_idx = -1
                set_rows_idx = -1
                for k in range(rope_idx + 1, min(rope_idx + ROPE_SET_ROWS_WINDOW_0317, n)):
                    if view_idx == -1 and ops[k] == "VIEW" and src(nodes[k], 0) == nodes[rope_idx]:
                        view_idx = k
                        continue
                    if (
                        view_idx != -1
                        and ops[k] == "SET_ROWS"
                        and src(nodes[k], 0) == nodes[view_idx]
                    ):
                        set_rows_idx = k
                        break
                if set_rows_idx != -1:
                    current.append(view_idx)
                    current.append(set_rows_idx)
                    used[view_idx] = True
                    used[set_rows_idx] = True
            if ops[j] == "ADD_ID" and ops[j - 1] == "MUL_MAT_ID":
                _pull_next(j, "MUL", nodes, ops, srcs, tensors, used, used_set, current, n)
            if ops[j] == "ADD" and ops[j - 1] == "MUL_MAT":
                _pull_next(j, "ADD", nodes, ops, srcs, tensors, used, used_set, current, n)
        if ops[current[-1]] != "ADD":
            window = [j for j in range(first + 1, limit) if empty[j]]
            _pull_empty(window, first, deps, used, current)
        for c in current:
            new_order.append(nodes[c])
            used_set.add(nodes[c])
            used[c] = True
        while first < n and used[first]:
            first += 1

    return AllocDeps(order=tuple(new_order))


def vk_graph_optimize_for(build: int | None) -> GraphOptimize:
    """The ggml_vk_graph_optimize of llama.cpp build `build` (None: the current one): 0.3.17's
    before rule vk_reorder_ssm_conv, b11434's from it on. Between the two, PRs #22653, #26124,
    #27220, #27812, #27301 and #28024 changed it step by step; the replay covers Vulkan neither
    there nor before 0.3.17's graphs (replay.covers_backends)."""
    return vk_graph_optimize if since("vk_reorder_ssm_conv", build) else vk_graph_optimize_0317
