"""The CPU backend (ggml/src/ggml-cpu/ggml-cpu.cpp ggml_backend_cpu_device_supports_op,
_supports_buft; the x86 build's extra buffer type CPU_REPACK) and its buffer type
(ggml-backend.cpp).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ....reader.ggml_types import ggml_type_name
from ..alloc import BufferType
from ..nodes import Tensor
from ..sched import HOST_BUFTS, Backend
from ..shapes import ggml_names, is_contiguous, is_quantized, n_dims
from . import VIEW_OR_NONE
from . import src as _src

CPU_EXTRA_BUFTS = frozenset({"CPU_REPACK"})  # ggml_backend_cpu_get_extra_buffer_types (x86 build)
# ggml/src/ggml-backend.cpp ggml_backend_cpu_buffer_type_get_alignment (TENSOR_ALIGNMENT)
TENSOR_ALIGNMENT = 32

CPU = BufferType("CPU", TENSOR_ALIGNMENT)


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
_VEC_DOT = {ggml_type_name(k): ggml_type_name(v) for k, v in _VEC_DOT.items()}


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
    return Backend(
        name="CPU",
        buft=buft,
        bufts=host_bufts | extra_bufts,
        supports_op=supports,
        op_and_sources=True,  # supports_op reads the op and its sources
    )
