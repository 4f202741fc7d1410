"""CUDA / ROCm flash attention (memory/graph/backends/cuda_fattn.py): the K/V types each build
takes, the kernel ggml_cuda_get_best_fattn_kernel picks by compute capability (vector or not) and
the F16 copies ggml_cuda_flash_attn_ext_get_alloc_size adds to the node."""

from __future__ import annotations

import pytest

from llamafit.memory.graph.backends.cuda import cuda_alloc_size
from llamafit.memory.graph.backends.cuda_fattn import (
    amd_cc,
    fattn_alloc_size,
    fattn_heads_supported,
    fattn_supported,
    fattn_uses_vec,
)
from llamafit.memory.graph.nodes import Tensor
from llamafit.memory.graph.shapes import type_of

OLD = 10454  # 0.3.35: K = V of F32, F16, Q4_0, Q8_0, BF16 (FA_ALL_QUANTS off)
NEW = None  # b11434: any two of the supported types, a missing vector kernel converts both
RDNA3 = amd_cc("gfx1100")
CDNA3 = amd_cc("gfx942")


def _t(name: str, ty: str, ne: tuple[int, int, int, int], **kw: object) -> Tensor:
    """A contiguous tensor of this shape."""
    tt = type_of(ty)
    nb0 = tt.type_size
    nb1 = tt.row_size(ne[0])
    nb = (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])
    return Tensor(name, str(kw.pop("op", "NONE")), ty, ne, nb, nb[3] * ne[3], **kw)  # type: ignore[arg-type]


def _fa(
    n_tokens: int, type_k: str, type_v: str, *, n_kv: int = 8192, head: int = 128, gqa: int = 4
) -> list[Tensor]:
    """Q, K, V (views of two caches), the F16 mask and the FLASH_ATTN_EXT node: 8 KV heads."""
    return [
        _t("q", "f32", (head, n_tokens, 8 * gqa, 1)),
        _t("k", type_k, (head, n_kv, 8, 1), view_src=5),
        _t("v", type_v, (head, n_kv, 8, 1), view_src=6),
        _t("mask", "f16", (n_kv, n_tokens, 1, 1)),
        _t("fa", "f32", (head, 8 * gqa, n_tokens, 1), op="FLASH_ATTN_EXT", src=(0, 1, 2, 3)),
        _t("cache_k_l0", type_k, (head * 8 * n_kv, 1, 1, 1), data=True),
        _t("cache_v_l0", type_v, (head * 8 * n_kv, 1, 1, 1), data=True),
    ]


@pytest.mark.parametrize(
    ("type_k", "type_v", "build", "supported"),
    [
        ("q8_0", "q8_0", OLD, True),
        ("bf16", "bf16", OLD, True),
        ("q8_0", "f16", OLD, False),  # two types: the CPU ran it
        ("q4_1", "q4_1", OLD, False),
        ("iq4_nl", "iq4_nl", OLD, False),
        ("q8_0", "f16", NEW, True),
        ("q4_1", "q5_0", NEW, True),
        ("iq4_nl", "iq4_nl", NEW, False),
    ],
)
def test_kv_types_by_build(type_k: str, type_v: str, build: int | None, supported: bool) -> None:
    ts = _fa(512, type_k, type_v)
    assert fattn_supported(ts[0], ts[1], ts[2], ts[3], build) is supported


def _fa_heads(
    n_tokens: int,
    type_kv: str,
    head_k: int,
    head_v: int,
    gqa: int,
    *,
    n_kv: int = 8192,
    v_of_k: bool = False,
    mask: bool = True,
) -> list[Tensor]:
    """Q, K, V and the FLASH_ATTN_EXT node over 2 KV heads (1 with v_of_k: MLA, V a view of K's
    cache at offset 0), K and V heads of their own sizes."""
    n_head_kv = 1 if v_of_k else 2
    ts = [
        _t("q", "f32", (head_k, n_tokens, n_head_kv * gqa, 1)),
        _t("k", type_kv, (head_k, n_kv, n_head_kv, 1), view_src=5),
        _t("v", type_kv, (head_v, n_kv, n_head_kv, 1), view_src=5 if v_of_k else 6),
        _t("mask", "f16", (n_kv, n_tokens, 1, 1)),
        _t(
            "fa",
            "f32",
            (head_v, n_head_kv * gqa, n_tokens, 1),
            op="FLASH_ATTN_EXT",
            src=(0, 1, 2, 3 if mask else None),
        ),
        _t("cache_k_l0", type_kv, (head_k * n_head_kv * n_kv, 1, 1, 1), data=True),
        _t("cache_v_l0", type_kv, (head_v * n_head_kv * n_kv, 1, 1, 1), data=True),
    ]
    return ts


GQA_HEADS = [  # (case, tensors, build, the head-size switch: True, False or None, not placed)
    (
        "MLA 576/512, 16 heads a KV head",
        _fa_heads(512, "f16", 576, 512, 16, v_of_k=True),
        NEW,
        True,
    ),
    ("MLA in 0.3.17", _fa_heads(512, "f16", 576, 512, 16, v_of_k=True), 8470, True),
    ("576 with V of 576", _fa_heads(512, "f16", 576, 576, 16, v_of_k=True), NEW, False),
    # gqa_opt_applies: a mask, a cache of whole 256-cell strides, a GQA ratio of 2 or more
    ("MLA, no mask", _fa_heads(512, "f16", 576, 512, 16, v_of_k=True, mask=False), NEW, False),
    ("MLA, 1000 cells", _fa_heads(512, "f16", 576, 512, 16, v_of_k=True, n_kv=1000), NEW, False),
    ("Gemma 4 512/512, GQA 8", _fa_heads(512, "q8_0", 512, 512, 8), NEW, True),
    ("512 without GQA", _fa_heads(512, "q8_0", 512, 512, 1), NEW, False),
    ("512 before the first tree read", _fa_heads(512, "q8_0", 512, 512, 8), 9904, None),
    ("192/128, GQA 8", _fa_heads(512, "f16", 192, 128, 8), NEW, True),
    ("192/128, GQA 4", _fa_heads(512, "f16", 192, 128, 4), NEW, False),
    ("320/256, GQA 32", _fa_heads(512, "f16", 320, 256, 32), NEW, True),
    ("320/256, GQA 16", _fa_heads(512, "f16", 320, 256, 16), NEW, False),
]


@pytest.mark.parametrize(
    ("case", "ts", "build", "supported"), GQA_HEADS, ids=[c[0] for c in GQA_HEADS]
)
def test_heads_with_the_gqa_optimisation(
    case: str, ts: list[Tensor], build: int | None, supported: bool | None
) -> None:
    """ggml_cuda_get_best_fattn_kernel's 192, 320, 512 and 576: their V size and the GQA
    optimisation; 192, 320 and 512 from the first tree read with them (FA_GQA_HEADS_READ)."""
    mask = ts[3] if ts[4].src[3] is not None else None
    assert fattn_heads_supported(ts[0], ts[1], ts[2], mask, build) is supported
    assert fattn_supported(ts[0], ts[1], ts[2], mask, build) is bool(supported)


MLA_OWN = 512 * 16 * 4  # one token's F32 output: 16 heads of 512
MLA_K = 576 * 8192 * 2  # K's cache in F16: V, a view of it, shares the copy


@pytest.mark.parametrize(
    ("case", "ts", "cc", "expected"),
    [
        # no vector kernel reads a head above 256: every quantized cache is copied, also at one
        # token on Ada
        (
            "MLA q8_0 one token",
            _fa_heads(1, "q8_0", 576, 512, 16, v_of_k=True),
            890,
            MLA_OWN + MLA_K,
        ),
        ("MLA f16", _fa_heads(1, "f16", 576, 512, 16, v_of_k=True), 890, MLA_OWN),
        (
            "Gemma 4 q8_0: K and V",
            _fa_heads(1, "q8_0", 512, 512, 8),
            890,
            512 * 16 * 4 + 2 * 512 * 8192 * 2 * 2,
        ),
    ],
    ids=["mla-q8_0", "mla-f16", "gemma4-q8_0"],
)
def test_gqa_heads_copy_a_quantized_cache(
    case: str, ts: list[Tensor], cc: int, expected: int
) -> None:
    assert fattn_uses_vec(ts[0], ts[1], ts[2], ts[3], cc) is False
    assert fattn_alloc_size(ts, 4, cc, NEW) == expected


@pytest.mark.parametrize(
    ("cc", "n_tokens", "type_kv", "gqa", "vec"),
    [
        (None, 1, "q8_0", 4, False),  # unknown: taken as the copying kernels
        (890, 1, "q8_0", 4, True),  # Ada: a quantized cache, one or two tokens
        (890, 2, "q8_0", 4, True),
        (890, 512, "q8_0", 4, False),  # a prompt: MMA
        (860, 1, "q8_0", 4, True),  # Ampere: one token only
        (860, 2, "q8_0", 4, False),
        (890, 1, "f16", 4, True),  # F16, one token, a GQA ratio of 4
        (890, 1, "bf16", 8, False),  # above 4: b11434's sparse gather may apply, taken as MMA
        (700, 1, "q8_0", 1, True),  # Volta: tokens x the GQA ratio's power of two at most 2
        (700, 1, "q8_0", 4, False),  # the tile kernel
        (610, 2, "q8_0", 4, True),  # Pascal: the generic choice
        (610, 3, "q8_0", 4, False),
        (RDNA3, 2, "q8_0", 8, False),  # WMMA over 8 rows: 2 x 8 = 16
        (RDNA3, 1, "q8_0", 8, True),
        (CDNA3, 2, "q8_0", 8, True),  # MFMA from 16 rows up at head size 128: 2 x 8 = 16
        (CDNA3, 3, "q8_0", 8, False),  # 24 rows: MFMA
    ],
)
def test_the_vector_kernel_by_compute_capability(
    cc: int | None, n_tokens: int, type_kv: str, gqa: int, vec: bool
) -> None:
    q, k, v, mask = _fa(n_tokens, type_kv, type_kv, gqa=gqa)[:4]
    assert fattn_uses_vec(q, k, v, mask, cc) is vec


FA_BYTES = 128 * 32 * 512 * 4  # the node's own F32 output, a multiple of 128
COPY = 128 * 8192 * 8 * 2  # one cache (8192 cells, 8 heads of 128) in F16


@pytest.mark.parametrize(
    ("n_tokens", "type_k", "type_v", "cc", "build", "expected"),
    [
        (512, "q8_0", "q8_0", 890, NEW, FA_BYTES + 2 * COPY),  # MMA: K and V in F16
        (512, "q8_0", "f16", 890, NEW, FA_BYTES + COPY),  # V is F16 already
        (512, "f16", "f16", 890, NEW, FA_BYTES),
        (1, "q8_0", "q8_0", 890, NEW, 128 * 32 * 4 + 0),  # the q8_0-q8_0 vector kernel
        (1, "q8_0", "q4_0", 890, NEW, 16384 + 2 * COPY),  # not compiled: the F16 fallback
        (1, "q8_0", "q8_0", None, NEW, 16384 + 2 * COPY),  # unknown device: every copy
        (1, "q8_0", "q4_0", 890, OLD, 16384),  # not supported there: the node as it is
        (1, "q8_0", "q8_0", 860, OLD, 16384),  # the vector kernel reads q8_0
        (512, "q4_0", "q4_0", 700, OLD, FA_BYTES + 2 * COPY),
    ],
)
def test_f16_copies_in_the_node(
    n_tokens: int, type_k: str, type_v: str, cc: int | None, build: int | None, expected: int
) -> None:
    ts = _fa(n_tokens, type_k, type_v)
    assert fattn_alloc_size(ts, 4, cc, build) == expected


def test_the_copies_are_padded_to_128_and_a_v_view_of_k_shares_them() -> None:
    """ggml_cuda_flash_attn_ext_get_f16_extra_data: GGML_PAD(end, 128) before each copy; V as a
    view of K's cache at the same offset (MLA) reads K's copy."""
    ts = _fa(3, "q8_0", "q8_0", head=64, n_kv=256, gqa=1)
    own = 64 * 8 * 3 * 4  # 6144: a multiple of 128
    copy = 64 * 256 * 8 * 2
    assert fattn_alloc_size(ts, 4, 890, NEW) == own + 2 * copy
    ts[2] = _t("v", "q8_0", (64, 256, 8, 1), view_src=5)
    assert fattn_alloc_size(ts, 4, 890, NEW) == own + copy
    odd = _fa(3, "bf16", "bf16", head=80, n_kv=256, gqa=1)
    odd[0] = _t("q", "f32", (80, 3, 7, 1))
    odd[4] = _t("fa", "f32", (80, 7, 3, 1), op="FLASH_ATTN_EXT", src=(0, 1, 2, 3))
    assert odd[4].nbytes == 6720
    assert fattn_alloc_size(odd, 4, 890, NEW) == 6784 + 2 * (80 * 256 * 8 * 2)


@pytest.mark.parametrize(("build", "expected"), [(9380, FA_BYTES), (9430, FA_BYTES + 2 * COPY)])
def test_the_copies_enter_the_buffer_from_pr_23907(build: int, expected: int) -> None:
    """Before rule cuda_fa_f16_in_buffer the copies came from the CUDA pool, outside every buffer."""
    assert cuda_alloc_size(_fa(512, "q8_0", "q8_0"), 4, cc=890, build=build) == expected


def test_amd_compute_capabilities() -> None:
    assert (amd_cc("gfx1100"), amd_cc("gfx90a"), amd_cc("gfx1151")) == (
        0x1001100,
        0x100090A,
        0x1001151,
    )
