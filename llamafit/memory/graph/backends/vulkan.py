"""The Vulkan backend (ggml/src/ggml-vulkan/ggml-vulkan.cpp): ggml_backend_vk_device_supports_op,
_supports_buft, _offload_op, its buffer types (the device's and Vulkan_Host) with the device
properties they read, and its graph optimizer (vulkan_optimize.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ....errors import LlamafitError
from ....machine.devices import DeviceSpec
from ..alloc import BufferType
from ..cparams import OP_OFFLOAD_MIN_BATCH
from ..nodes import USAGE_WEIGHTS, Tensor
from ..sched import Backend, OpPredicate
from ..shapes import (
    ggml_names,
    is_contiguous,
    is_contiguous_rows,
    is_quantized,
    type_of,
)
from . import batch_offload
from . import srcs as _srcs
from .vulkan_optimize import vk_graph_optimize_for

# Vulkan device properties where the DeviceSpec does not give them: the Vulkan specification's
# bounds (minStorageBufferOffsetAlignment is at most 256; minMemoryMapAlignment at least 64, what
# every driver we know reports), and ggml-vulkan.cpp ggml_vk_get_device's own default for the
# suballocation block (1 GiB unless GGML_VK_SUBALLOCATION_BLOCK_SIZE says otherwise, at most
# maxMemoryAllocationSize).
VK_STORAGE_ALIGNMENT_BOUND = 256
VK_MAP_ALIGNMENT_DEFAULT = 64
VK_SUBALLOCATION_BLOCK = 1 << 30


def suballocation_block(g: DeviceSpec) -> int:
    """ggml-vulkan.cpp ggml_vk_get_device: suballocation_block_size."""
    cap = g.max_allocation_bytes
    return min(VK_SUBALLOCATION_BLOCK, cap) if cap else VK_SUBALLOCATION_BLOCK


def vulkan_buffer_type(
    name: str, min_storage_buffer_offset_alignment: int, suballocation_block_size: int
) -> BufferType:
    """A Vulkan device's buffer type (ggml-vulkan.cpp ggml_backend_vk_buffer_type_get_alignment,
    _get_max_size): the device's minStorageBufferOffsetAlignment and suballocation block size
    (1 GiB, or $GGML_VK_SUBALLOCATION_BLOCK_SIZE, at most maxMemoryAllocationSize)."""
    return BufferType(name, min_storage_buffer_offset_alignment, suballocation_block_size)


def vulkan_host_buffer_type(
    min_memory_map_alignment: int, suballocation_block_size: int
) -> BufferType:
    """Vulkan_Host, the CPU's compute buffer type when a Vulkan device is used (ggml-vulkan.cpp
    ggml_backend_vk_host_buffer_type: device 0's minMemoryMapAlignment and suballocation block
    size; every buffer 32 bytes larger than asked)."""
    return BufferType(
        "Vulkan_Host", min_memory_map_alignment, suballocation_block_size, alloc_extra=32
    )


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


def vk_supports_op(  # noqa: C901 (ggml port: kept diffable)
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


def _vk_other_op(op: Tensor, srcs: list[Tensor | None]) -> bool:  # noqa: C901 (ggml port)
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
    ggml_vk_graph_optimize as build `build` has it (vulkan_optimize.vk_graph_optimize_for; None: the
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
