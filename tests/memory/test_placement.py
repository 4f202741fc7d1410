"""Layer → device assignment and CUDA allocation sizes (src/llama-model.cpp, ggml-cuda.cu)."""

from __future__ import annotations

import pytest

from llamafit.memory.placement import (
    CPU,
    LayerMap,
    cuda_alloc_size,
    layer_map,
    override_target,
    split_points,
)
from llamafit.reader.ggml_types import GGMLType


@pytest.mark.parametrize(
    ("n_layer_all", "ngl", "fractions", "expected"),
    [
        (4, 5, [1.0], LayerMap((0, 0, 0, 0), 0)),  # everything
        (4, 1, [1.0], LayerMap((CPU, CPU, CPU, CPU), 0)),  # -ngl 1: only the output layer
        (4, 3, [1.0], LayerMap((CPU, CPU, 0, 0), 0)),  # output + the last 2 blocks
        (4, 0, [1.0], LayerMap((CPU,) * 4, CPU)),
        (4, 5, [1.0, 1.0], LayerMap((0, 0, 0, 1), 1)),  # (il)/5 vs split points 0.5, 1.0
        (4, 5, [3.0, 1.0], LayerMap((0, 0, 0, 0), 1)),
        (4, 5, [], LayerMap((CPU,) * 4, CPU)),  # no GPU
        (
            6,
            4,
            [1.0, 2.0],
            LayerMap((CPU, CPU, CPU, 0, 0, 1), 1),
        ),  # (il-3)/4: 0, .25, .5 ; 1/3 split
    ],
)
def test_layer_map(n_layer_all: int, ngl: int, fractions: list[float], expected: LayerMap) -> None:
    points = split_points(fractions) if fractions else ()
    assert layer_map(n_layer_all, ngl, points) == expected


@pytest.mark.parametrize(
    ("type_name", "shape", "expected"),
    [
        ("q4_0", (4096, 4096), 4096 * 4096 // 32 * 18),  # rows already multiples of 512: no padding
        ("q4_0", (4000, 10), 22656),  # 22500 + a partial row of 96 (54 B) = 22554, aligned to 128
        ("f16", (4000, 10), 80000),  # not quantized: alignment only (80000 is a multiple of 128)
        ("f32", (3,), 128),
    ],
)
def test_cuda_alloc_size(type_name: str, shape: tuple[int, ...], expected: int) -> None:
    t = GGMLType.named(type_name)
    n = 1
    for d in shape:
        n *= d
    assert cuda_alloc_size(t, shape, n // t.block_size * t.type_size) == expected
    assert expected % 128 == 0


def test_override_first_match_wins() -> None:
    rules = (("blk\\.1\\.", "CUDA1"), ("ffn", "CPU"))
    names = ("blk.1.ffn_up.weight", "blk.2.ffn_up.weight", "blk.2.attn_q.weight")
    assert [override_target(n, rules) for n in names] == ["CUDA1", "CPU", None]
