"""Metal's fusion table (ggml/src/ggml-metal/ggml-metal-fusion.cpp) in the mode its graph
optimizer reads it (GGML_METAL_FUSION_STRUCTURAL: no buffer is allocated yet), and the
allocation dependencies ggml_backend_metal_graph_optimize adds from it
(ggml_metal_fusion_add_alloc_deps).

ggml_graph_optimize (ggml-metal-common.cpp) packs each run of nodes the table fuses
(ggml_metal_fusion_max) before its concurrency reorder, so the reorder moves a fused group as one
node. From PR #28164 (builds.py rule metal_fusion_table) the packing follows this table instead
of the hand-written ADD / NORM / RMS_NORM chains; PR #28948 (rule metal_moe_fusion) added the
MoE routing, MoE reduction and SSM_CONV + SILU patterns and the allocation dependencies, which
keep a fused group's external sources allocated until its last node; the MUL_MAT + ADD pattern
is in b11434's table and not in llama-cpp-python 0.3.36's, whose tree has PR #29206
(2026-09-21) and not PR #29622 (rule mixed_batch, b11400): its PR was not found, so it counts
from MUL_MAT_ADD_SINCE, the first build the replay knows to have it (b11434's) at the latest.

The table as b11434 has it, less GGML_METAL_FUSION_SNAKE (MUL + SIN + SQR + MUL + ADD: no
builder of the replay makes a SIN). A pattern is (its raw ops with the empty ones, the offsets of
its extra outputs, whether its own check is the only one, the check, the rule it came with).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from ....builds import since
from ..nodes import FLAG_OUTPUT, USAGE_WEIGHTS, Tensor
from ..shapes import is_contiguous, is_contiguous_rows
from . import can_fuse_subgraph_ext

FUSION_MAX = 16  # ggml-metal-fusion.h GGML_METAL_FUSION_MAX
TOPK_MOE_MAX_EXPERTS = 1024  # GGML_METAL_TOPK_MOE_MAX_EXPERTS
MOE_REDUCE_MAX_EXPERTS = 8  # GGML_METAL_MOE_REDUCE_MAX_EXPERTS
EMPTY = frozenset({"NONE", "RESHAPE", "TRANSPOSE", "VIEW", "PERMUTE"})  # ggml_op_is_empty
# ggml-metal-common.cpp ggml_metal_mul_mv_mma_type_supported
MMA_TYPES = frozenset(
    {"f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"}
)


class SplitView:
    """One split as ggml_graph_optimize sees it: its nodes (tensor indexes, in order), every
    tensor's current sources (the scheduler's input copies in place) and the whole graph's use
    counts (ggml_graph_view shares them)."""

    def __init__(
        self,
        tensors: Sequence[Tensor],
        nodes: Sequence[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
    ) -> None:
        self.tensors = tensors
        self.nodes = nodes
        self.srcs = srcs
        self.counts = counts
        self.ops = [tensors[i].op for i in nodes]
        # the raw positions of the non-empty nodes, in order
        self.nonempty = [k for k, op in enumerate(self.ops) if op not in EMPTY]

    def t(self, k: int) -> Tensor:
        """The tensor at raw position k of the split."""
        return self.tensors[self.nodes[k]]

    def src(self, i: int, s: int) -> int | None:
        """Source s of tensor i (None where it has none)."""
        ss = self.srcs[i]
        return ss[s] if s < len(ss) else None

    def can_fuse_subgraph_ext(
        self, idxs: Sequence[int], ops: Sequence[str], outputs: Sequence[int]
    ) -> bool:
        """ggml_can_fuse_subgraph_ext (ggml/src/ggml.c) over raw positions idxs."""
        return can_fuse_subgraph_ext(
            self.tensors, self.nodes, self.srcs, self.counts, idxs, ops, outputs
        )


# check(view, fusion, node tensor indexes, non-empty positions, index into them) -> bool
Check = Callable[["SplitView", "Fusion", Sequence[int], Sequence[int], int], bool]


@dataclass(frozen=True, slots=True)
class Fusion:
    """One entry of ggml_metal_fusions."""

    name: str  # ggml_metal_fusion_id
    ops_all: tuple[str, ...]
    outs: tuple[int, ...]
    unsafe: bool
    check: Check
    rule: str | int  # the builds.py rule it came with, or its first build
    ops: tuple[str, ...] = ()  # ggml_metal_fusion_filter_ops: the non-empty ops (set by _fusion)


def _fusion(
    name: str,
    ops_all: tuple[str, ...],
    outs: tuple[int, ...],
    unsafe: bool,
    check: Check,
    rule: str | int,
) -> Fusion:
    ops = tuple(o for o in ops_all if o not in EMPTY)
    return Fusion(name, ops_all, outs, unsafe, check, rule, ops)


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return a.ne == b.ne


def _check_norm(
    v: SplitView, f: Fusion, nodes: Sequence[int], _idxs: Sequence[int], _i: int
) -> bool:
    """ggml_metal_fusion_check_norm."""
    ts = v.tensors
    if f.name == "NORM_SCALE":
        sc = ts[nodes[1]]
        return (
            sc.op == "SCALE"
            and v.src(nodes[1], 0) == nodes[0]
            and v.src(nodes[1], 1) is None
            and sc.type == "f32"
        )
    for j in range(1, len(f.ops)):
        if v.src(nodes[j], 0) != nodes[j - 1]:
            return False
        w = v.src(nodes[j], 1)
        if w is None or ts[w].ne[0] != ts[nodes[0]].ne[0] or not is_contiguous_rows(ts[w]):
            return False
        if ts[nodes[j]].type != "f32":
            return False
    return True


def _check_ssm_conv_silu(
    v: SplitView, _f: Fusion, nodes: Sequence[int], _idxs: Sequence[int], _i: int
) -> bool:
    """ggml_metal_fusion_check_ssm_conv_silu."""
    conv, un = (v.tensors[n] for n in nodes[:2])
    if conv.op != "SSM_CONV" or un.op != "UNARY" or v.src(nodes[1], 0) != nodes[0]:
        return False
    if v.src(nodes[1], 1) is not None or un.desc != "SILU":
        return False
    return conv.type == "f32" and un.type == "f32" and is_contiguous_rows(un)


def _check_add_chain(
    v: SplitView, f: Fusion, nodes: Sequence[int], _idxs: Sequence[int], _i: int
) -> bool:
    """ggml_metal_fusion_check_add_chain (the same-buffer test is the FULL mode's only)."""
    ts = v.tensors
    for j in range(1, len(f.ops)):
        if v.src(nodes[j], 0) != nodes[j - 1]:
            return False
        a, b = v.src(nodes[j], 1), v.src(nodes[j - 1], 1)
        if a is None or b is None:
            return False
        ta, tb = ts[a], ts[b]
        if (ta.type, ta.ne, ta.nb) != (tb.type, tb.ne, tb.nb):  # ggml_are_same_layout
            return False
    return True


def _check_gdn_cache(
    v: SplitView, _f: Fusion, nodes: Sequence[int], _idxs: Sequence[int], _i: int
) -> bool:
    """ggml_metal_fusion_check_gdn_cache: the CPY of a GATED_DELTA_NET's state snapshots into the
    recurrent cache (K, the snapshot count, is an op param: here it is read back from the
    output's rows, {S_v * H, T * B + K * S_v * B})."""
    ts = v.tensors
    gdn, cpy = ts[nodes[0]], ts[nodes[1]]
    if gdn.type != "f32" or gdn.flags & FLAG_OUTPUT or cpy.op != "CPY" or cpy.flags & FLAG_OUTPUT:
        return False
    vv = v.src(nodes[0], 2)
    s, d = v.src(nodes[1], 0), v.src(nodes[1], 1)
    if vv is None or s is None or d is None:
        return False
    s_v, h, n_tokens, n_seqs = ts[vv].ne
    k = (gdn.ne[1] - n_tokens * n_seqs) // (s_v * n_seqs)
    tail_off = 4 * s_v * h * n_tokens * n_seqs
    dd = s_v * s_v * h
    n_written = min(n_tokens, k)
    src, dst = ts[s], ts[d]
    if src.op != "VIEW" or src.view_src != nodes[0] or src.view_offs != tail_off:
        return False
    if not is_contiguous(src):
        return False
    return (
        dst.type == "f32"
        and dst.ne == (dd, n_seqs, n_written, 1)
        and dst.nb[0] == 4
        and dst.nb[1] == 4 * dd
    )


def _check_topk_moe(  # noqa: C901 (ggml port: kept diffable)
    v: SplitView, f: Fusion, _nodes: Sequence[int], idxs: Sequence[int], i: int
) -> bool:
    """ggml_metal_fusion_check_topk_moe: the routing softmax, argsort, top-k view and GET_ROWS of
    the weights (plus their normalization and scale), over the raw nodes. The softmax's scale and
    max bias are op params: ggml_soft_max without a mask has 1 and 0."""
    n_ops = len(f.ops)
    with_norm = n_ops >= 6
    with_scale = n_ops in (4, 7)
    n = len(v.nodes)
    raw_start = idxs[i]
    raw_end = idxs[i + n_ops - 1]
    if with_norm and not with_scale:
        if raw_end + 1 >= n:
            return False
        raw_end += 1
    raw_count = raw_end - raw_start + 1
    if raw_count != len(f.ops_all):
        return False
    raw = list(range(raw_start, raw_end + 1))
    if any(v.t(k).op != f.ops_all[j] for j, k in enumerate(raw)):
        return False
    nd = v.nodes
    softmax, probs_r, argsort, ids, get_rows = (nd[raw_start + j] for j in range(5))
    out = nd[raw_end]
    logits = v.src(softmax, 0)
    if logits is None or v.src(softmax, 1) is not None or v.src(softmax, 2) is not None:
        return False
    ts = v.tensors
    tl, tsm, to, tid = ts[logits], ts[softmax], ts[out], ts[ids]
    if tl.type != "f32" or tsm.type != "f32" or to.type != "f32" or tid.type != "i32":
        return False
    n_expert, n_tokens = tl.ne[0], tl.ne[1]
    n_used = tid.ne[0]
    if n_expert <= 0 or n_used <= 0 or n_used > n_expert or n_expert > TOPK_MOE_MAX_EXPERTS:
        return False
    if tl.ne[2] != 1 or tl.ne[3] != 1 or tid.ne[1:] != (n_tokens, 1, 1):
        return False
    if to.ne != (1, n_used, n_tokens, 1):
        return False
    if not is_contiguous(tl) or not is_contiguous(to):
        return False
    if tid.nb[0] != 4 or tid.nb[1] != 4 * n_expert:
        return False
    if (
        v.src(probs_r, 0) != softmax
        or v.src(argsort, 0) != softmax
        or v.src(ids, 0) != argsort
        or v.src(get_rows, 0) != probs_r
        or v.src(get_rows, 1) != ids
    ):
        return False
    if with_norm:
        w_r, sum_rows, clamp, div, out_r = (nd[raw_start + j] for j in range(5, 10))
        if (
            v.src(w_r, 0) != get_rows
            or v.src(sum_rows, 0) != w_r
            or v.src(clamp, 0) != sum_rows
            or v.src(div, 0) != w_r
            or v.src(div, 1) != clamp
            or v.src(out_r, 0) != div
        ):
            return False
        if with_scale and v.src(nd[raw_start + 10], 0) != out_r:
            return False
    elif with_scale and v.src(nd[raw_start + 5], 0) != get_rows:
        return False
    return v.can_fuse_subgraph_ext(raw, f.ops_all, (raw_start + 3, raw_end))


def _match_moe_reduce(v: SplitView, k0: int, ops_all: tuple[str, ...]) -> int:  # noqa: C901
    """ggml_metal_fusion_match_moe_reduce at raw position k0: the weighted experts' MUL, one VIEW
    per expert and the ADDs summing them; its raw node count, 0 where it does not match."""
    n = len(v.nodes)
    raw_count = len(ops_all)
    if k0 + raw_count > n:
        return 0
    ts, nd = v.tensors, v.nodes
    mul = ts[nd[k0]]
    if mul.op != "MUL" or mul.type != "f32":
        return 0
    n_used = raw_count // 2
    if n_used < 2 or n_used > MOE_REDUCE_MAX_EXPERTS or raw_count != 2 * n_used:
        return 0
    n_views = 0
    while k0 + 1 + n_views < n and v.t(k0 + 1 + n_views).op == "VIEW":
        n_views += 1
    if n_views != n_used:
        return 0
    if any(v.t(k0 + j).op != "ADD" for j in range(n_used + 1, raw_count)):
        return 0
    raw = list(range(k0, k0 + raw_count))
    if any(v.t(k).op != ops_all[j] for j, k in enumerate(raw)):
        return 0
    e, w = v.src(nd[k0], 0), v.src(nd[k0], 1)
    if e is None or w is None:
        return 0
    experts, weights, dst = ts[e], ts[w], v.t(k0 + raw_count - 1)
    if experts.type != "f32" or weights.type != "f32" or dst.type != "f32":
        return 0
    n_embd, n_tokens = experts.ne[0], experts.ne[2]
    if (
        n_embd <= 0
        or experts.ne[1] != n_used
        or experts.ne[3] != 1
        or weights.ne != (1, n_used, n_tokens, 1)
        or dst.ne != (n_embd, n_tokens, 1, 1)
    ):
        return 0
    if not (is_contiguous(experts) and is_contiguous(weights) and is_contiguous(dst)):
        return 0
    for j in range(1, n_used + 1):
        view = v.t(k0 + j)
        if (
            view.view_src != nd[k0]
            or v.src(nd[k0 + j], 0) != nd[k0]
            or view.view_offs != (j - 1) * mul.nb[1]
            or view.ne[0] != n_embd
            or view.ne[1] != n_tokens
            or view.nb[1] != mul.nb[2]
        ):
            return 0
    prev = -1
    for j in range(1, n_used):
        add = nd[k0 + n_used + j]
        lhs = nd[k0 + 1] if j == 1 else prev
        if v.src(add, 0) != lhs or v.src(add, 1) != nd[k0 + j + 1]:
            return 0
        prev = add
    if not v.can_fuse_subgraph_ext(raw, ops_all, (k0 + raw_count - 1,)):
        return 0
    return raw_count


def _check_moe_reduce(
    v: SplitView, f: Fusion, _nodes: Sequence[int], idxs: Sequence[int], i: int
) -> bool:
    """ggml_metal_fusion_check_moe_reduce."""
    count = _match_moe_reduce(v, idxs[i], f.ops_all)
    if not count:
        return False
    e = v.src(v.nodes[idxs[i]], 0)
    if e is None or len(f.ops) != v.tensors[e].ne[1]:
        return False
    return idxs[i + len(f.ops) - 1] == idxs[i] + count - 1


def _is_weight(ts: Sequence[Tensor], i: int) -> bool:
    """ggml_metal_tensor_is_weight: t or its base is in a buffer of weights."""
    b = ts[i].view_src
    base = ts[i] if b is None else ts[b]
    return base.buffer is not None and base.usage == USAGE_WEIGHTS


def _check_mul_mat_add(
    v: SplitView, _f: Fusion, nodes: Sequence[int], _idxs: Sequence[int], _i: int
) -> bool:
    """ggml_metal_fusion_check_mul_mat_add in the STRUCTURAL mode: the ADD's other operand is
    an F32 non-weight (ggml_metal_mul_mat_add_operand) and the MUL_MAT's types have a few-row MMA
    kernel (ggml_metal_op_mul_mat_may_use_mma); the residual's shape and the rows are the FULL
    mode's."""
    ts = v.tensors
    mm, add = nodes[0], nodes[1]
    a0, a1 = v.src(add, 0), v.src(add, 1)
    if ts[add].op != "ADD" or (a0 == mm) == (a1 == mm):
        return False
    other = a1 if a0 == mm else a0
    if other is None or ts[other].type != "f32" or ts[add].type != "f32" or _is_weight(ts, other):
        return False
    s0, s1 = v.src(mm, 0), v.src(mm, 1)
    return s0 is not None and s1 is not None and ts[s0].type in MMA_TYPES and ts[s1].type == "f32"


def _moe_reduce_ops(n: int) -> tuple[str, ...]:
    return ("MUL",) + ("VIEW",) * n + ("ADD",) * (n - 1)


_TOPK = ("SOFT_MAX", "RESHAPE", "ARGSORT", "VIEW", "GET_ROWS")
_TOPK_NORM = (*_TOPK, "RESHAPE", "SUM_ROWS", "CLAMP", "DIV", "RESHAPE")
MUL_MAT_ADD_SINCE = 11434  # b11434 has GGML_METAL_FUSION_MUL_MAT_ADD; 0.3.36's tree does not
_T, _M, _X = "metal_fusion_table", "metal_moe_fusion", MUL_MAT_ADD_SINCE

# ggml_metal_fusions, in its order (the first of two equally long matches wins)
FUSIONS: tuple[Fusion, ...] = (
    _fusion("NORM_MUL", ("NORM", "MUL"), (), False, _check_norm, _T),
    _fusion("NORM_MUL_ADD", ("NORM", "MUL", "ADD"), (), False, _check_norm, _T),
    _fusion("NORM_SCALE", ("NORM", "SCALE"), (), False, _check_norm, _T),
    _fusion("NORM_MUL", ("RMS_NORM", "MUL"), (), False, _check_norm, _T),
    _fusion("NORM_MUL_ADD", ("RMS_NORM", "MUL", "ADD"), (), False, _check_norm, _T),
    _fusion("NORM_SCALE", ("RMS_NORM", "SCALE"), (), False, _check_norm, _T),
    *(_fusion("ADD_CHAIN", ("ADD",) * n, (), False, _check_add_chain, _T) for n in range(2, 8)),
    _fusion("GDN_CACHE", ("GATED_DELTA_NET", "CPY"), (), True, _check_gdn_cache, _T),
    _fusion("TOPK_MOE", _TOPK, (1,), True, _check_topk_moe, _M),
    _fusion("TOPK_MOE", (*_TOPK, "SCALE"), (1,), True, _check_topk_moe, _M),
    _fusion("TOPK_MOE", _TOPK_NORM, (1,), True, _check_topk_moe, _M),
    _fusion("TOPK_MOE", (*_TOPK_NORM, "SCALE"), (1,), True, _check_topk_moe, _M),
    *(
        _fusion("MOE_REDUCE", _moe_reduce_ops(n), (), True, _check_moe_reduce, _M)
        for n in range(2, 9)
    ),
    _fusion("SSM_CONV_SILU", ("SSM_CONV", "UNARY"), (), False, _check_ssm_conv_silu, _M),
    _fusion("MUL_MAT_ADD", ("MUL_MAT", "ADD"), (), False, _check_mul_mat_add, _X),
)


@cache
def fusions_at(build: int | None) -> FusionTable:
    """The table as llama.cpp build `build` has it."""
    return FusionTable(
        [
            f
            for f in FUSIONS
            if (
                since(f.rule, build)
                if isinstance(f.rule, str)
                else build is None or build >= f.rule
            )
        ]
    )


class FusionTable:
    """A build's table with its patterns by first op (of ops, and of the raw ops_all), in table
    order."""

    def __init__(self, fusions: Sequence[Fusion]) -> None:
        self.fusions = tuple(fusions)
        self.by_first: dict[str, tuple[Fusion, ...]] = _index(self.fusions, raw=False)
        self.by_first_raw: dict[str, tuple[Fusion, ...]] = _index(self.fusions, raw=True)


def _index(fusions: tuple[Fusion, ...], *, raw: bool) -> dict[str, tuple[Fusion, ...]]:
    out: dict[str, list[Fusion]] = {}
    for f in fusions:
        out.setdefault((f.ops_all if raw else f.ops)[0], []).append(f)
    return {op: tuple(fs) for op, fs in out.items()}


def fusion_next(
    v: SplitView,
    table: FusionTable,
    idxs: Sequence[int],
    i: int,
    ops_at: Sequence[str] | None = None,
) -> tuple[Fusion | None, int]:
    """ggml_metal_fusion_next (STRUCTURAL): the longest pattern at idxs[i] (non-empty raw
    positions; ops_at their ops) and its length in non-empty nodes (1 where none matches)."""
    if ops_at is None:
        ops_at = [v.ops[k] for k in idxs]
    res: Fusion | None = None
    best = 1
    for f in table.by_first.get(ops_at[i], ()):
        ops = f.ops
        n_ops = len(ops)
        if n_ops <= best or i + n_ops > len(idxs) or tuple(ops_at[i : i + n_ops]) != ops:
            continue
        nodes = [v.nodes[idxs[i + j]] for j in range(n_ops)]
        if not f.unsafe:
            ok = all(
                (v.src(nodes[j], 0) == nodes[j - 1] or v.src(nodes[j], 1) == nodes[j - 1])
                and _same_shape(v.tensors[nodes[j]], v.tensors[nodes[j - 1]])
                for j in range(1, n_ops)
            )
            if not ok:
                continue
            outputs = [idxs[i + n_ops - 1], *(idxs[i + o] for o in f.outs)]
            if not v.can_fuse_subgraph_ext(idxs[i : i + n_ops], ops, outputs):
                continue
        if not f.check(v, f, nodes, idxs, i):
            continue
        best = n_ops
        res = f
    return res, best


def fusion_max(v: SplitView, table: FusionTable, k: int) -> int:
    """ggml_metal_fusion_max: how many raw nodes from position k the patterns, chained back to
    back, pack together (the empty nodes between them included); 1 where none starts at k."""
    if v.ops[k] in EMPTY:
        return 1
    first = bisect_left(v.nonempty, k)
    idxs = v.nonempty[first : first + FUSION_MAX]
    ops_at = [v.ops[j] for j in idxs]
    total = i_f = 0
    while i_f < len(idxs) and total < FUSION_MAX:
        f, n = fusion_next(v, table, idxs, i_f, ops_at)
        if f is None or total + n > FUSION_MAX:
            break
        total += n
        i_f += n
    if i_f == 0:
        return 1
    return min(FUSION_MAX, idxs[i_f - 1] - k + 1)


def fusion_alloc_deps(v: SplitView, table: FusionTable) -> list[tuple[int, list[int]]]:
    """ggml_metal_fusion_add_alloc_deps: at each raw position, the longest pattern whose raw ops
    match (ops only, no checks) keeps every source from outside it allocated until its last
    node. (until, kept) pairs in the order add_alloc_dep receives them."""
    deps: dict[int, list[int]] = {}
    n = len(v.nodes)
    by_first = table.by_first_raw
    k = 0
    while k < n:
        best: Fusion | None = None
        best_raw = 0
        for f in by_first.get(v.ops[k], ()):
            size = len(f.ops_all)
            if size <= best_raw or k + size > n:
                continue
            if tuple(v.ops[k : k + size]) == f.ops_all:
                best, best_raw = f, size
        if best is not None:
            until = v.nodes[k + best_raw - 1]
            seen: set[int] = set()
            for j in range(best_raw):
                node = v.nodes[k + j]
                for s in v.srcs[node]:
                    if s is not None and s not in seen:
                        seen.add(s)
                        lst = deps.setdefault(until, [])
                        if s not in lst:
                            lst.append(s)
                seen.add(node)
            k += best_raw - 1
        k += 1
    return list(deps.items())
