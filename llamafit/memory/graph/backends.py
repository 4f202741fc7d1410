"""The backends' rules the scheduler reads (ggml_backend_dev_supports_op, _supports_buft,
_offload_op), per backend, as llama.cpp b11434 states them, over the tensor fields of
llamafit.memory.graph.nodes. Device properties are parameters.

Op parameters (op_params) are not part of the recorded graph, so the few rules that read them are
left out and say so where they stand; none of them decides an op of llama.cpp's text models.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from llamafit.errors import LlamafitError
from llamafit.memory.graph.metal_optimize import metal_graph_optimize
from llamafit.memory.graph.nodes import USAGE_WEIGHTS, Tensor
from llamafit.memory.graph.sched import HOST_BUFTS, Backend, OpPredicate
from llamafit.memory.graph.shapes import (
    ggml_names,
    is_contiguous,
    is_contiguous_rows,
    is_quantized,
    n_dims,
    nrows,
    type_of,
)
from llamafit.memory.graph.vk_optimize import vk_graph_optimize_for

VIEW_OR_NONE = frozenset({"NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"})
CPU_EXTRA_BUFTS = frozenset({"CPU_REPACK"})  # ggml_backend_cpu_get_extra_buffer_types (x86 build)
OP_OFFLOAD_MIN_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH unset (ggml-cuda.cu / ggml-vulkan.cpp)


def _srcs(tensors: Sequence[Tensor], op: Tensor) -> list[Tensor | None]:
    return [None if s is None else tensors[s] for s in op.src]


def _src(tensors: Sequence[Tensor], op: Tensor, k: int) -> Tensor | None:
    s = op.src[k] if k < len(op.src) else None
    return None if s is None else tensors[s]


# ---------------------------------------------------------------------------------------------
# CPU (ggml/src/ggml-cpu/ggml-cpu.cpp ggml_backend_cpu_device_supports_op, _supports_buft)

_IQ_NO_FROM_FLOAT = ggml_names({"iq3_xxs", "iq3_s", "iq2_xxs", "iq2_xs", "iq2_s", "iq1_s", "iq1_m"})

# vec_dot_type of ggml/src/ggml-cpu/ggml-cpu.c type_traits_cpu (x86 build)
_VEC_DOT = {
    "f32": "f32",
    "f16": "f16",
    "bf16": "bf16",
    "q4_0": "q8_0",
    "q4_1": "q8_1",
    "q5_0": "q8_0",
    "q5_1": "q8_1",
    "q8_0": "q8_0",
    "q2_k": "q8_k",
    "q3_k": "q8_k",
    "q4_k": "q8_k",
    "q5_k": "q8_k",
    "q6_k": "q8_k",
    "iq2_xxs": "q8_k",
    "iq2_xs": "q8_k",
    "iq3_xxs": "q8_k",
    "iq3_s": "q8_k",
    "iq2_s": "q8_k",
    "iq1_s": "q8_k",
    "iq1_m": "q8_k",
    "iq4_nl": "q8_0",
    "iq4_xs": "q8_k",
    "tq1_0": "q8_k",
    "tq2_0": "q8_k",
    "mxfp4": "q8_0",
    "nvfp4": "q8_0",
    "q1_0": "q8_0",
}
_VEC_DOT = {
    k[:-1] + "K" if k.endswith("_k") else k: v[:-1] + "K" if v.endswith("_k") else v
    for k, v in _VEC_DOT.items()
}


def _repack_supports_op(
    tensors: Sequence[Tensor], op: Tensor, host_bufts: frozenset[str], extra_bufts: frozenset[str]
) -> bool:
    """ggml::cpu::repack::extra_buffer_type::supports_op (ggml/src/ggml-cpu/repack.cpp): a
    repacked weight serves a MUL_MAT (2-D) or MUL_MAT_ID (3-D) over F32 activations held in host
    memory (a weight is only repacked where ggml_repack_get_optimal_repack_type has a layout)."""
    src0, src1 = _src(tensors, op, 0), _src(tensors, op, 1)
    if src0 is None or src1 is None or src0.buffer not in extra_bufts:
        return False
    dims = n_dims(src0)
    if (op.op == "MUL_MAT" and dims == 2) or (op.op == "MUL_MAT_ID" and dims == 3):
        if src1.buffer is not None and src1.buffer not in host_bufts:
            return False
        return src1.type == "f32"
    return False


def cpu_supports_op(
    tensors: Sequence[Tensor],
    i: int,
    host_bufts: frozenset[str] = HOST_BUFTS,
    extra_bufts: frozenset[str] = CPU_EXTRA_BUFTS,
) -> bool:
    """ggml_backend_cpu_device_supports_op. Left out: the Hadamard hint of MUL_MAT, SOFT_MAX_BACK's
    max_bias and SSM_SCAN's op parameter (op_params are not recorded)."""
    op = tensors[i]
    if op.op in VIEW_OR_NONE:
        return True
    for s in op.src[:4]:
        if s is not None and tensors[s].buffer in extra_bufts:
            return _repack_supports_op(tensors, op, host_bufts, extra_bufts)
    src0, src1 = _src(tensors, op, 0), _src(tensors, op, 1)
    kind = op.op
    if kind in ("CPY", "SET_ROWS"):
        return op.type not in _IQ_NO_FROM_FLOAT
    if kind == "MUL_MAT" and src0 is not None and src1 is not None:
        vec_dot = _VEC_DOT.get(src0.type, "f32")
        return (
            src1.type == "f32" or src1.type == vec_dot or (src1.type == "bf16" and vec_dot == "f32")
        )
    if kind == "IM2COL_BACK" and src0 is not None and src1 is not None:
        return src0.type == "f32" and src1.type in ("f32", "f16")
    if kind == "GET_ROWS_BACK" and src0 is not None:
        return src0.type in ("f32", "f16")
    if kind == "OUT_PROD" and src0 is not None and src1 is not None:
        ok0 = src0.type == "f32" or (
            (src0.type == "f16" or is_quantized(src0.type))
            and src0.ne[2] == src1.ne[2]
            and src0.ne[3] == src1.ne[3]
        )
        return ok0 and src1.type == "f32" and op.type == "f32"
    if kind == "CONV_2D" and src0 is not None:
        return is_contiguous(src0)
    return True


def cpu_backend(
    buft: str = "CPU",
    *,
    host_bufts: frozenset[str] = HOST_BUFTS,
    extra_bufts: frozenset[str] = CPU_EXTRA_BUFTS,
) -> Backend:
    """The CPU backend: any host buffer type or one of its extra ones (ggml_backend_cpu_device_
    supports_buft); no offload_op, no graph_optimize (ggml-cpu.cpp). `buft` is the scheduler's
    buffer type for it: the first GPU's pinned host type where that GPU has one
    (src/llama-context.cpp: "Vulkan_Host", "CUDA_Host"), else "CPU"."""

    supports = partial(cpu_supports_op, host_bufts=host_bufts, extra_bufts=extra_bufts)
    return Backend(name="CPU", buft=buft, bufts=host_bufts | extra_bufts, supports_op=supports)


# ---------------------------------------------------------------------------------------------
# RPC (ggml/src/ggml-rpc/ggml-rpc.cpp)


def rpc_backend(name: str) -> Backend:
    """An RPC device: ggml_backend_rpc_device_supports_op takes every op (it does not ask the
    server), supports_buft only its own endpoint's buffer type (named like the backend,
    "RPC0[127.0.0.1:50052]"), no offload_op, no graph_optimize."""
    return Backend(name=name, buft=name, bufts=frozenset({name}))


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# Vulkan (ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_backend_vk_device_supports_op)

_VK_UNARY = frozenset(
    {
        "EXP",
        "EXPM1",
        "ELU",
        "GELU",
        "GELU_ERF",
        "GELU_QUICK",
        "SILU",
        "RELU",
        "XIELU",
        "NEG",
        "TANH",
        "SIGMOID",
        "HARDSIGMOID",
        "HARDSWISH",
        "ABS",
        "SOFTPLUS",
        "STEP",
        "ROUND",
        "CEIL",
        "FLOOR",
        "TRUNC",
        "SGN",
    }
)
_VK_GLU = frozenset(
    {"GEGLU", "REGLU", "SWIGLU", "SWIGLU_OAI", "GEGLU_ERF", "GEGLU_QUICK", "SWIGLU_CLAMP"}
)
_VK_MM_TYPES = ggml_names(
    {
        "f32",
        "f16",
        "bf16",
        "q1_0",
        "q2_0",
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
        "iq1_s",
        "iq1_m",
        "iq2_xxs",
        "iq2_xs",
        "iq2_s",
        "iq3_xxs",
        "iq3_s",
        "iq4_xs",
        "iq4_nl",
        "mxfp4",
        "nvfp4",
        "tq1_0",
        "tq2_0",
    }
)
_VK_GET_ROWS_TYPES = _VK_MM_TYPES | {"i32"}
_VK_SET_ROWS_TYPES = frozenset(
    {"f32", "f16", "bf16", "q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"}
)
_VK_FA_KV = frozenset({"f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl"})
_VK_CPY_QUANT = frozenset(
    {"f16", "bf16", "q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"}
)
_F = ("f32", "f16")


def vk_dim01_contiguous(t: Tensor) -> bool:
    """ggml_vk_dim01_contiguous (ggml-vulkan.cpp)."""
    ty = type_of(t.type)
    return (
        t.nb[0] == ty.type_size
        and t.nb[1] == (t.nb[0] * t.ne[0]) // ty.block_size
        and (t.ne[3] == 1 or t.nb[3] == t.nb[2] * t.ne[2])
    )


def vk_supports_op(
    tensors: Sequence[Tensor],
    i: int,
    *,
    max_tensor_bytes: int | None = None,
    flash_attn: bool = True,
    mul_mat_id: bool = True,
) -> bool:
    """ggml_backend_vk_device_supports_op for the ops of llama.cpp's graphs. A tensor (the op or a
    source) larger than `max_tensor_bytes` is refused: the device's maxBufferSize, and its
    maxStorageBufferRange unless it has 64-bit shader indexing (DeviceSpec.max_tensor_bytes, as
    llamafit.machine.vulkan reads it; the rule llamafit.memory.compute.kq_fits applies to the KQ
    product, here per op; lavapipe: 128 MiB).
    `flash_attn`: the device has coopmat2 or subgroup shuffle and vote (scalar FA);
    `mul_mat_id`: it has the shared memory for a MUL_MAT_ID pipeline of the weight's type.
    Left out: IM2COL's buffer-device-address exemption from the size limit, and the few rules
    _vk_other_op names."""
    op = tensors[i]
    srcs = _srcs(tensors, op)

    limit = max_tensor_bytes
    if limit is not None and (
        op.nbytes > limit or any(s is not None and s.nbytes > limit for s in srcs)
    ):
        return False
    kind = op.op
    s0 = srcs[0] if srcs else None
    s1 = srcs[1] if len(srcs) > 1 else None
    if kind == "UNARY":
        return op.desc in _VK_UNARY and s0 is not None and s0.type in _F and op.type == s0.type
    if kind == "GLU":
        return (
            op.desc in _VK_GLU
            and s0 is not None
            and s0.type in _F
            and op.type == s0.type
            and (s1 is None or s1.type == s0.type)
        )
    if kind in ("MUL_MAT", "MUL_MAT_ID"):
        assert s0 is not None and s1 is not None
        if kind == "MUL_MAT_ID" and not mul_mat_id:
            return False
        if s0.type not in _VK_MM_TYPES:
            return False
        a = s0 if kind == "MUL_MAT" else srcs[2]
        assert a is not None
        if a.ne[3] != s1.ne[3]:
            return False
        if not (vk_dim01_contiguous(s0) or s0.type in ("f32", "f16", "bf16")) or not (
            vk_dim01_contiguous(s1) or s1.type in _F
        ):
            return False
        if s0.type == "bf16" and s1.type == "f16":
            return False
        return not (s1.type == "bf16" and s0.type != "bf16")
    if kind == "FLASH_ATTN_EXT":
        assert s0 is not None and s1 is not None
        v = srcs[2]
        assert v is not None
        if s1.ne[0] % 8 or v.ne[0] % 8:
            return False
        mask = srcs[3] if len(srcs) > 3 else None
        sinks = srcs[4] if len(srcs) > 4 else None
        if (sinks is not None and sinks.type != "f32") or s0.type != "f32" or op.type != "f32":
            return False
        if mask is not None and mask.type != "f16":
            return False
        if s1.type not in _VK_FA_KV or v.type not in _VK_FA_KV:
            return False
        if (s1.type == "bf16") != (v.type == "bf16"):
            return False
        return flash_attn
    if kind == "GET_ROWS":
        return s0 is not None and s0.type in _VK_GET_ROWS_TYPES
    if kind == "SET_ROWS":
        assert s0 is not None and s1 is not None
        return s0.type in _F and s1.type in ("i32", "i64") and op.type in _VK_SET_ROWS_TYPES
    if kind in ("CONT", "CPY", "DUP"):
        assert s0 is not None
        t0 = s0.type
        t1 = s1.type if s1 is not None else t0
        if t0 == "f32" and (t1 == "f32" or t1 in _VK_CPY_QUANT):
            return True
        if t1 == "f32" and t0 in _VK_CPY_QUANT:
            return True
        if t0 == "f16" and t1 == "f16":
            return True
        if (t0, t1) in (("f32", "i32"), ("i32", "f32")):
            return True
        return (
            t0 == t1
            and (not is_quantized(t0) or (is_contiguous(s0) and is_contiguous(op)))
            and type_of(t0).type_size % 2 == 0
        )
    if kind == "REPEAT":
        assert s0 is not None
        size = type_of(op.type).type_size
        return size == type_of(s0.type).type_size and size in (2, 4)
    if kind == "ROPE":
        return s0 is not None and is_contiguous_rows(op) and is_contiguous_rows(s0)
    if kind in ("ROPE_BACK", "NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE", "RMS_NORM"):
        return True
    if kind == "GROUP_NORM":
        return s0 is not None and is_contiguous(s0)
    if kind in ("NORM", "L2_NORM"):
        return s0 is not None and s0.type == "f32" and op.type == "f32"
    if kind in ("ADD", "SUB", "MUL", "DIV"):
        return (
            s0 is not None and s1 is not None and s0.type in _F and s1.type in _F and op.type in _F
        )
    if kind == "ADD_ID":
        return (
            s0 is not None
            and s1 is not None
            and srcs[2] is not None
            and s0.type == "f32"
            and s1.type == "f32"
            and srcs[2].type == "i32"
            and op.type == "f32"
        )
    if kind in ("SQR", "SQRT", "SIN", "COS", "CLAMP", "LEAKY_RELU", "LOG", "TRI", "DIAG"):
        return s0 is not None and s0.type in _F and op.type == s0.type
    if kind in ("ARGSORT", "TOP_K"):
        return s0 is not None and is_contiguous(op) and is_contiguous(s0)
    if kind == "ACC":
        return s0 is not None and s1 is not None and s0.type == s1.type == op.type == "f32"
    if kind == "SET":
        return (
            s0 is not None
            and s1 is not None
            and s0.type == s1.type == op.type
            and s0.type in ("f32", "i32")
        )
    if kind == "ARANGE":
        return op.type == "f32"
    if kind == "FILL":
        return op.type in _F
    if kind in ("SCALE", "DIAG_MASK_INF", "ARGMAX"):
        return s0 is not None and is_contiguous(s0) and s0.type == "f32"
    if kind in ("PAD", "PAD_REFLECT_1D", "ROLL", "UPSCALE", "TIMESTEP_EMBEDDING", "SSM_CONV"):
        return s0 is not None and s0.type == "f32"
    if kind == "SOFT_MAX":
        return (
            s0 is not None
            and is_contiguous(s0)
            and s0.type == "f32"
            and (s1 is None or s1.type in _F)
        )
    if kind in ("SUM", "SUM_ROWS", "MEAN"):
        return s0 is not None and s0.type == "f32" and is_contiguous_rows(s0)
    if kind in ("RWKV_WKV6", "RWKV_WKV7"):
        return True
    if kind == "GATED_DELTA_NET":
        v = srcs[2] if len(srcs) > 2 else None
        if v is None or v.ne[0] not in (16, 32, 64, 128):
            return False
        six = [srcs[k] if k < len(srcs) else None for k in range(6)]
        return all(x is not None and x.type == "f32" for x in six) and op.type == "f32"
    if kind == "GATED_LINEAR_ATTN":
        return s0 is not None and s0.type == "f32" and op.type == "f32" and s0.ne[0] == 64
    return _vk_other_op(op, srcs)


def _vk_other_op(op: Tensor, srcs: list[Tensor | None]) -> bool:
    """The rest of ggml_backend_vk_device_supports_op's switch: the state-space, convolution,
    pooling, training and DeepSeek V4 ops (a device with the subgroup operations and shared memory
    they ask for; pipelines present). Left out: LIGHTNING_INDEXER (offsets, device fp16), SOLVE_TRI
    (shared memory per row), TOP_K's pipeline choice, ARGSORT without the Vulkan memory model:
    taken, UPSCALE's antialias mode (op_params)."""
    kind = op.op
    s0 = srcs[0] if srcs else None
    s1 = srcs[1] if len(srcs) > 1 else None
    if kind == "SSM_SCAN":
        assert s0 is not None
        if any(x is not None and is_quantized(x.type) for x in srcs[:6]):
            return False
        s6 = srcs[6] if len(srcs) > 6 else None
        if s6 is not None and s6.type != "i32":
            return False
        if s0.type != "f32" or op.type != "f32":
            return False
        s3 = srcs[3] if len(srcs) > 3 else None
        if s3 is None or s3.nb[1] != 4:  # Mamba-2 only
            return False
        return s0.ne[0] in (128, 256) and s0.ne[1] % 16 == 0
    if kind == "CONCAT":
        assert s0 is not None and s1 is not None
        if s0.type != s1.type or s0.type != op.type:
            return False
        if not is_quantized(s0.type):
            return type_of(s0.type).type_size in (1, 2, 4, 8)
        return is_contiguous_rows(s0) and is_contiguous_rows(s1) and is_contiguous_rows(op)
    if kind == "ADD1":
        assert s0 is not None and s1 is not None
        return (s0.type, s1.type) in (("f32", "f32"), ("f16", "f32"), ("f16", "f16"))
    if kind in ("CUMSUM",):
        return s0 is not None and s0.type == "f32" and is_contiguous_rows(s0)
    if kind in ("DSV4_HC_COMB", "DSV4_HC_PRE", "DSV4_HC_POST"):
        if op.type != "f32" or any(x is not None and x.type != "f32" for x in srcs):
            return False
        if kind == "DSV4_HC_PRE":
            return s0 is not None and s0.ne[1] == 4
        if kind == "DSV4_HC_POST":
            return s1 is not None and s1.ne[1] == 4
        return True
    if kind == "SOLVE_TRI":
        return s0 is not None and op.type == "f32" and s0.type == "f32"
    if kind in (
        "SILU_BACK",
        "RMS_NORM_BACK",
        "OPT_STEP_ADAMW",
        "OPT_STEP_SGD",
        "POOL_1D",
        "POOL_2D",
    ):
        return s0 is not None and is_contiguous(s0) and s0.type == "f32"
    if kind in ("GET_ROWS_BACK", "REPEAT_BACK"):
        return s0 is not None and op.type == "f32" and s0.type == "f32"
    if kind == "OUT_PROD":
        return (
            s0 is not None
            and s1 is not None
            and is_contiguous(s0)
            and s0.type == "f32"
            and is_contiguous(s1)
            and s1.type == "f32"
            and op.type == "f32"
        )
    if kind == "SOFT_MAX_BACK":
        return (
            s0 is not None
            and s1 is not None
            and is_contiguous(s0)
            and s0.type == "f32"
            and is_contiguous(s1)
            and s1.type == "f32"
        )
    if kind == "COUNT_EQUAL":
        return (
            s0 is not None
            and s1 is not None
            and is_contiguous(s0)
            and s0.type == "i32"
            and is_contiguous(s1)
            and s1.type == "i32"
        )
    if kind == "IM2COL":
        return s1 is not None and is_contiguous(s1) and s1.type == "f32" and op.type in _F
    if kind == "IM2COL_3D":
        return s1 is not None and s1.type == "f32" and op.type in _F
    if kind == "CONV_2D_DW":
        return s0 is not None and s1 is not None and s0.type in _F and s1.type == "f32"
    if kind == "CONV_TRANSPOSE_1D":
        return s0 is not None and s1 is not None and s0.type == "f32" and s1.type == "f32"
    if kind == "COL2IM_1D":
        return (
            s0 is not None
            and s0.type in ("f32", "f16", "bf16")
            and op.type == s0.type
            and is_contiguous(s0)
            and is_contiguous(op)
        )
    if kind in ("CONV_2D", "CONV_TRANSPOSE_2D"):
        assert s0 is not None and s1 is not None
        transpose = kind == "CONV_TRANSPOSE_2D"
        cout = s0.ne[2] if transpose else s0.ne[3]
        cin = s0.ne[3] if transpose else s0.ne[2]
        return (
            s0.type in _F
            and s0.nb[0] in (2, 4)
            and s1.type == "f32"
            and op.type == "f32"
            and cout == op.ne[2]
            and cin == s1.ne[2]
            and is_contiguous(s0)
            and is_contiguous(s1)
            and is_contiguous(op)
        )
    if kind == "CONV_3D":
        return (
            s0 is not None
            and s1 is not None
            and s0.type in _F
            and s1.type == "f32"
            and op.type == "f32"
            and is_contiguous(s0)
            and is_contiguous(s1)
            and is_contiguous(op)
        )
    return False


# The Vulkan specification's minimum of maxStorageBufferRange (2^27 bytes): every device takes a
# tensor up to it; past it, ggml_backend_vk_device_supports_op's size check depends on the device.
VK_STORAGE_RANGE_MIN = 1 << 27


class UnknownDeviceLimit(LlamafitError):
    """A Vulkan device whose tensor size limit is not known would be asked about a tensor over
    VK_STORAGE_RANGE_MIN: whether it takes the op depends on that limit."""


def vulkan_backend(
    name: str = "Vulkan0",
    *,
    max_tensor_bytes: int | None = None,
    flash_attn: bool = True,
    mul_mat_id: bool = True,
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH,
    graph_optimize: bool = True,
    build: int | None = None,
    strict_limit: bool = False,
) -> Backend:
    """A Vulkan device: supports_buft only its own buffer type (named like the device,
    ggml_backend_vk_device_supports_buft), offload_op by batch size, and the reorder of
    ggml_vk_graph_optimize as build `build` has it (vk_optimize.vk_graph_optimize_for; None: the
    current build; `graph_optimize` False: GGML_VK_DISABLE_GRAPH_OPTIMIZE set). `strict_limit`
    with an unknown `max_tensor_bytes`: supports_op raises UnknownDeviceLimit where the answer
    would depend on the limit (an op it takes otherwise, with the op or a source over
    VK_STORAGE_RANGE_MIN)."""

    supports: OpPredicate = partial(
        vk_supports_op,
        max_tensor_bytes=max_tensor_bytes,
        flash_attn=flash_attn,
        mul_mat_id=mul_mat_id,
    )
    if strict_limit and max_tensor_bytes is None:
        supports = _strict_limit(supports, name)
    return Backend(
        name=name,
        buft=name,
        bufts=frozenset({name}),
        supports_op=supports,
        offload_op=batch_offload(op_offload_min_batch),
        graph_optimize=vk_graph_optimize_for(build) if graph_optimize else None,
    )


def _strict_limit(supports: OpPredicate, buft: str) -> OpPredicate:
    """vulkan_backend's strict_limit: supports_op, raising UnknownDeviceLimit where a device
    limit of VK_STORAGE_RANGE_MIN would refuse what an unlimited device takes. Weights in the
    device's own buffer (the op itself, a weight leaf, or a source) do not count: their
    placement already took the device to hold them (llama_model::load_tensors asks supports_op
    of the weight's op; MemoryModel keeps a weight over a known limit on the host)."""

    def strict(tensors: Sequence[Tensor], i: int) -> bool:
        if not supports(tensors, i):
            return False
        op = tensors[i]
        sizes = [
            t.nbytes
            for t in (op, *_srcs(tensors, op))
            if t is not None and not (t.usage == USAGE_WEIGHTS and t.buffer == buft)
        ]
        if not sizes:
            return True
        if max(sizes) > VK_STORAGE_RANGE_MIN:
            raise UnknownDeviceLimit(f"{op.name}: {max(sizes)} bytes")
        return True

    return strict


def cuda_offload_backend(
    name: str, buft: str | None = None, *, op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH
) -> Backend:
    """A CUDA device's buffer and offload rules (ggml_backend_cuda_device_supports_buft: its own
    buffer type; ggml_backend_cuda_device_offload_op: batch size). Its supports_op and its
    graph_optimize (fusion reorders) are not ported: every op is taken, the order is kept."""
    return Backend(
        name=name,
        buft=buft or name,
        bufts=frozenset({buft or name}),
        offload_op=batch_offload(op_offload_min_batch),
    )


# ---------------------------------------------------------------------------------------------
# Metal (ggml/src/ggml-metal/ggml-metal.cpp, as llama-cpp-python 0.3.17's vendored llama.cpp)


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
    and the reorder of ggml_metal_graph_optimize as build `build` has it (metal_optimize.py).
    supports_op takes every op: ggml_metal_device_supports_op accepts every op of the graphs the
    replay covers on Metal (replay.metal_graph_ok checks them, and refuses the graphs with others)."""
    return Backend(
        name=name,
        buft=name,
        bufts=frozenset({name}),
        offload_op=metal_offload(op_offload_min_batch),
        graph_optimize=metal_graph_optimize(build),
    )
