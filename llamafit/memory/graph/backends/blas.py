"""The BLAS backend (ggml/src/ggml-blas/ggml-blas.cpp) that Apple builds of llama.cpp have by
default (ggml/CMakeLists.txt: GGML_BLAS_DEFAULT ON with Accelerate on APPLE): an ACCEL device
that llama_context puts between the GPUs and the CPU (src/llama-context.cpp), with the CPU's
buffer type, so it shares the CPU backend's compute buffer.

What the scheduler reads of it: supports_buft, any host buffer type
(ggml_backend_blas_device_supports_buft: ggml_backend_buft_is_host; not CPU_REPACK); no
offload_op; supports_op: views, and a MUL_MAT of contiguous sources over F32 activations whose
result and inner dimension are at least 32 (min_batch) and whose weight can be converted to
float. A host weight's product that it takes stays off the GPU: the scheduler offers op offload
only for weights whose first backend is the last one, the CPU
(ggml_backend_sched_backend_id_from_cur). From PR #25710 (rule blas_no_hadamard) it refuses
the KV rotation's product (GGML_HINT_SRC0_IS_HADAMARD, an op param: here the MUL_MAT whose
first source is the rotation input attn_inp_k_rot / attn_inp_v_rot, llama-impl.h
ggml_rotate_hadamard).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ....builds import since
from ..nodes import Tensor
from ..sched import HOST_BUFTS, Backend
from ..shapes import is_contiguous
from . import VIEW_OR_NONE

BLAS_MIN_BATCH = 32  # ggml_backend_blas_device_supports_op: min_batch
ROTATION_INPUTS = frozenset({"attn_inp_k_rot", "attn_inp_v_rot"})
NO_TO_FLOAT = frozenset({"q8_K", "i8", "i16", "i32", "i64"})  # ggml type traits without to_float


def blas_supports_op(tensors: Sequence[Tensor], i: int, build: int | None = None) -> bool:
    """ggml_backend_blas_device_supports_op for the ops of the replay's graphs (OUT_PROD aside:
    no builder makes one)."""
    t = tensors[i]
    if t.op in VIEW_OR_NONE:
        return True
    if t.op != "MUL_MAT":
        return False
    s0, s1 = (tensors[s] for s in t.src[:2] if s is not None)
    if since("blas_no_hadamard", build) and s0.name in ROTATION_INPUTS:
        return False
    return (
        is_contiguous(s0)
        and is_contiguous(s1)
        and s1.type == "f32"
        and t.ne[0] >= BLAS_MIN_BATCH
        and t.ne[1] >= BLAS_MIN_BATCH
        and s1.ne[0] >= BLAS_MIN_BATCH
        and s0.type not in NO_TO_FLOAT
    )


def blas_backend(build: int | None = None, *, buft: str = "CPU") -> Backend:
    """The BLAS backend: the host buffer types, its supports_op at build `build`, no offload_op,
    no graph_optimize; `buft` its compute buffer type (the CPU's)."""
    return Backend(
        name="BLAS",
        buft=buft,
        bufts=HOST_BUFTS,
        supports_op=partial(blas_supports_op, build=build),
    )
