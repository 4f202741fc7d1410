"""The RPC backend (ggml/src/ggml-rpc/ggml-rpc.cpp): a device whose worker runs the ops."""

from __future__ import annotations

from ..sched import Backend
from .cpu import CPU

# ggml-rpc.cpp ggml_backend_rpc_get_alignment asks the worker; a CPU worker (ggml-rpc-server
# -d CPU, its default) answers the CPU buffer type's TENSOR_ALIGNMENT
RPC_ALIGNMENT_DEFAULT = CPU.alignment


def rpc_backend(name: str) -> Backend:
    """An RPC device: ggml_backend_rpc_device_supports_op takes every op (it does not ask the
    server), supports_buft only its own endpoint's buffer type (named like the backend,
    "RPC0[127.0.0.1:50052]"), no offload_op, no graph_optimize."""
    return Backend(name=name, buft=name, bufts=frozenset({name}))
