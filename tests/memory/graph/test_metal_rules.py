"""Metal's rules by build, on hand-made tensors: ggml_backend_metal_buffer_type_get_alloc_size
(backends/metal.py metal_alloc_size), the fusion table's packing and allocation dependencies
(backends/metal_fusion.py), ggml_metal_device_supports_op (metal_supports_op)."""

from __future__ import annotations

import pytest

from llamafit.memory.graph.backends.metal import metal_alloc_size, metal_supports_op
from llamafit.memory.graph.backends.metal_fusion import (
    FusionTable,
    SplitView,
    fusion_alloc_deps,
    fusion_max,
    fusions_at,
)
from llamafit.memory.graph.nodes import FLAG_COMPUTE, USAGE_WEIGHTS, Tensor

N_KV, N_HEAD_KV, HEAD = 4096, 8, 128
Q8_ROW = N_KV * 0 + HEAD * N_HEAD_KV // 32 * 34  # a q8_0 cache row of 8 heads: 1088 bytes


def _fa(n_tokens: int, cache: str) -> list[Tensor]:
    """Q (32 heads of 128), K and V permuted views of a cache of N_KV cells and 8 heads, the F16
    mask, and the FLASH_ATTN_EXT reading them (as build_attn_mha makes them)."""
    row = 2 * HEAD * N_HEAD_KV if cache == "f16" else Q8_ROW
    head = row // N_HEAD_KV
    q = Tensor("q", "PERMUTE", "f32", (HEAD, n_tokens, 32, 1), (4, 16384, 512, 0), 0)
    cache_ne = (HEAD * N_HEAD_KV, N_KV, 1, 1)
    k_cache = Tensor("cache_k_l0", "NONE", cache, cache_ne, (0, row, 0, 0), 0, data=True)
    v_cache = Tensor("cache_v_l0", "NONE", cache, cache_ne, (0, row, 0, 0), 0, data=True)
    nb = (2 if cache == "f16" else 34, row, head, row * N_KV)
    k = Tensor("k", "PERMUTE", cache, (HEAD, N_KV, N_HEAD_KV, 1), nb, 0, view_src=1)
    v = Tensor("v", "PERMUTE", cache, (HEAD, N_KV, N_HEAD_KV, 1), nb, 0, view_src=2)
    mask = Tensor("mask", "NONE", "f16", (N_KV, n_tokens, 1, 1), (2, 2 * N_KV, 0, 0), 0)
    fa = Tensor(
        "fa",
        "FLASH_ATTN_EXT",
        "f32",
        (HEAD, 32, n_tokens, 1),
        (4, 512, 16384, 0),
        4 * HEAD * 32 * n_tokens,
        src=(0, 3, 4, 5),
    )
    return [q, k_cache, v_cache, k, v, mask, fa]


FA_EXTRAS = (  # (build, ubatch, cache) -> the FLASH_ATTN_EXT's extra bytes (alloc size - nbytes)
    # pad 64 x (K row 2048 x 8 + V 2048 x 8 + 2 x 512 mask) + blk 64 x 64 + tmp 4 x 32 x 32 x 32 x 130
    (10669, 512, "f16", 2162688 + 4096 + 17039360),
    # from PR #27390: + the F16 copies of K and V, 2 x 128 x 4096 x 8 x 2 bytes, for F16 too
    (10670, 512, "f16", 2162688 + 4096 + 17039360 + 2 * 8388608),
    # q8_0: pad rows of 1088 bytes before; F16 rows of 256 after (512 queries: the F16 kernels)
    (10669, 512, "q8_0", 64 * (1088 * 8 * 2 + 1024) + 4096 + 17039360),
    (10670, 512, "q8_0", 64 * (256 * 8 * 2 + 1024) + 4096 + 17039360 + 2 * 8388608),
    # one query: the vec kernel (no dequantized copy read, still reserved): blk 128 x 1, tmp x 1
    (None, 1, "q8_0", 64 * (1088 * 8 * 2 + 2) + 128 + 532480 + 2 * 8388608),
)


@pytest.mark.parametrize(("build", "n_tokens", "cache", "extra"), FA_EXTRAS)
def test_metal_fa_extras(build: int | None, n_tokens: int, cache: str, extra: int) -> None:
    ts = _fa(n_tokens, cache)
    assert metal_alloc_size(build)(ts, 6) - ts[6].nbytes == extra


@pytest.mark.parametrize(
    ("build", "extra"),
    [(10349, 4 * 128 + 4 * 128 * 512), (10350, 4 * 128 + 4 * 128 * 512 + 8 + 1024)],
)
def test_metal_mul_mat_id_extras(build: int, extra: int) -> None:
    """MUL_MAT_ID of 128 experts over 512 tokens: tpe (I32 per expert) + ids (per expert and
    token), and from PR #26223 the amax scales (8 + 256 x 4)."""
    w = Tensor("w", "NONE", "q4_0", (2048, 768, 128, 1), (18, 1152, 884736, 0), 0, data=True)
    x = Tensor("x", "NONE", "f32", (2048, 8, 512, 1), (4, 8192, 65536, 0), 0)
    ids = Tensor("ids", "NONE", "i32", (8, 512, 1, 1), (4, 32, 0, 0), 0)
    mm = Tensor(
        "mm", "MUL_MAT_ID", "f32", (768, 8, 512, 1), (4, 3072, 24576, 0), 12582912, src=(0, 1, 2)
    )
    assert metal_alloc_size(build)([w, x, ids, mm], 3) - mm.nbytes == extra


def _node(
    name: str, op: str, src: tuple[int, ...], ne: tuple[int, int, int, int] = (64, 4, 1, 1)
) -> Tensor:
    return Tensor(name, op, "f32", ne, (4, 256, 1024, 1024), 4 * ne[0] * ne[1], FLAG_COMPUTE, src)


def _mm_add(residual_weight: bool) -> tuple[list[Tensor], list[int]]:
    """x -> RMS_NORM -> MUL(norm weight) -> MUL_MAT(w) -> ADD(residual): the tensors and the
    split's nodes."""
    w_usage = USAGE_WEIGHTS
    ts = [
        Tensor("x", "NONE", "f32", (64, 4, 1, 1), (4, 256, 1024, 1024), 1024),
        Tensor(
            "g",
            "NONE",
            "f32",
            (64, 1, 1, 1),
            (4, 256, 256, 256),
            256,
            data=True,
            buffer="MTL0",
            usage=w_usage,
        ),
        Tensor(
            "w",
            "NONE",
            "q8_0",
            (64, 64, 1, 1),
            (34, 68, 4352, 4352),
            4352,
            data=True,
            buffer="MTL0",
            usage=w_usage,
        ),
        Tensor(
            "r",
            "NONE",
            "f32",
            (64, 4, 1, 1),
            (4, 256, 1024, 1024),
            1024,
            data=residual_weight,
            buffer="MTL0" if residual_weight else None,
            usage=w_usage if residual_weight else 0,
        ),
        _node("norm", "RMS_NORM", (0,)),
        _node("normed", "MUL", (4, 1)),
        _node("mm", "MUL_MAT", (2, 5)),
        _node("out", "ADD", (6, 3)),
    ]
    return ts, [4, 5, 6, 7]


def _view(ts: list[Tensor], nodes: list[int]) -> SplitView:
    counts = [0] * len(ts)
    for t in ts:
        for s in t.src:
            if s is not None:
                counts[s] += 1
    return SplitView(ts, nodes, [t.src for t in ts], counts)


PACKING = (  # (build, the residual is a weight) -> the raw nodes packed at each position
    (10869, False, (1, 1, 1, 1)),  # before the table: graph_optimize's own ADD/NORM chains
    (10870, False, (2, 1, 1, 1)),  # RMS_NORM + MUL (NORM_MUL)
    (11433, False, (2, 1, 1, 1)),
    (11434, False, (4, 1, 2, 1)),  # then MUL_MAT + ADD chained on (MUL_MAT_ADD)
    (11434, True, (2, 1, 1, 1)),  # the ADD of a weight (a bias) is not packed
)


@pytest.mark.parametrize(("build", "weight", "packed"), PACKING)
def test_metal_fusion_packing(build: int, weight: bool, packed: tuple[int, ...]) -> None:
    ts, nodes = _mm_add(weight)
    view = _view(ts, nodes)
    table = fusions_at(build) if build >= 10870 else FusionTable(())
    assert tuple(fusion_max(view, table, k) for k in range(4)) == packed


DEPS = (  # (build, residual a weight) -> ggml_metal_fusion_add_alloc_deps: (until, kept)
    (11084, False, []),
    (11085, False, [(5, [0, 1])]),  # RMS_NORM + MUL: x and g kept until the MUL
    (11434, False, [(5, [0, 1]), (7, [2, 5, 3])]),  # MUL_MAT + ADD: w, normed and r to the ADD
    (11434, True, [(5, [0, 1]), (7, [2, 5, 3])]),  # the raw ops match: no check reads the weight
)


@pytest.mark.parametrize(("build", "weight", "deps"), DEPS)
def test_metal_fusion_alloc_deps(build: int, weight: bool, deps: list) -> None:
    ts, nodes = _mm_add(weight)
    table = fusions_at(build) if build >= 11085 else FusionTable(())
    assert fusion_alloc_deps(_view(ts, nodes), table) == deps


SUPPORTS = (  # (the op's cache / types) -> ggml_metal_device_supports_op (b11434)
    ("f16", True),
    ("q8_0", True),
    ("q4_1", True),
    ("q4_K", False),  # FLASH_ATTN_EXT over a K-quant cache: the CPU runs it
)


@pytest.mark.parametrize(("cache", "ok"), SUPPORTS)
def test_metal_supports_flash_attn(cache: str, ok: bool) -> None:
    ts = _fa(512, cache)
    assert metal_supports_op(ts, 6) is ok


def _matmul(n_tokens: int, weight: str = "w", n_out: int = 4096) -> list[Tensor]:
    """A host weight (4096 x n_out, q4_0) times n_tokens F32 activations."""
    w = Tensor(weight, "NONE", "q4_0", (4096, n_out, 1, 1), (18, 2304, 0, 0), 0, data=True)
    x = Tensor("x", "NONE", "f32", (4096, n_tokens, 1, 1), (4, 16384, 0, 0), 0)
    mm = Tensor(
        "mm", "MUL_MAT", "f32", (n_out, n_tokens, 1, 1), (4, 4 * n_out, 0, 0), 0, src=(0, 1)
    )
    return [w, x, mm]


BLAS = (  # (build, rows, the weight's name) -> ggml_backend_blas_device_supports_op
    (None, 32, "blk.0.ffn_up.weight", True),  # 32 rows and more: BLAS takes the host product
    (None, 31, "blk.0.ffn_up.weight", False),
    (10134, 512, "attn_inp_k_rot", True),  # the KV rotation's product, until PR #25710
    (10135, 512, "attn_inp_k_rot", False),
)


@pytest.mark.parametrize(("build", "rows", "name", "ok"), BLAS)
def test_blas_supports_op(build: int | None, rows: int, name: str, ok: bool) -> None:
    from llamafit.memory.graph.backends.blas import blas_supports_op

    assert blas_supports_op(_matmul(rows, name), 2, build) is ok
