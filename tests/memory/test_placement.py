"""Layer → device assignment and CUDA allocation sizes (src/llama-model.cpp, ggml-cuda.cu)."""

from __future__ import annotations

import pytest

from llamafit.memory.placement import (
    CPU,
    ROPE_FACTORS,
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


# (shape, -ngl, -ot rules) → bytes of the RoPE factor copies per device (CPU = -1): one per buffer
# type among the blocks that make them (gemma4: the full-attention blocks 4, 9, ..., 34 of E2B),
# one where an -ot rule names them
ROPE_COPIES = [
    ("gemma4-e2b", 99, (), {0: 1024}),
    ("gemma4-e2b", 2, (), {CPU: 1024, 0: 1024}),  # block 34 on the GPU, blocks 4..29 on the host
    ("gemma4-e2b", 0, (), {CPU: 1024}),
    ("gemma4-e2b", 99, (("rope_freqs", "CPU"),), {CPU: 1024}),
    ("gemma4-26b-a4b", 4, (), {CPU: 1024, 0: 1024}),  # block 29 on the GPU
    ("qwen3-8b", 4, (), {}),  # no per-block RoPE factors
]


@pytest.mark.parametrize(("key", "ngl", "rules", "expected"), ROPE_COPIES)
def test_rope_factor_copies(
    key: str, ngl: int, rules: tuple[tuple[str, str], ...], expected: dict[int, int]
) -> None:

    from llamafit.machine.devices import DeviceSpec
    from llamafit.memory import weights as placed
    from llamafit.memory.config import LaunchConfig
    from llamafit.memory.model import MemoryModel
    from llamafit.memory.resolve import resolve
    from tests.support.graph_build import facts_of

    facts, _ = facts_of(key)
    mm = MemoryModel(facts)
    rc = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=ngl, override_tensor=rules),
        facts,
        engine="llama-server",
    )
    gpus = [DeviceSpec("Vulkan0", "gpu", "vulkan", 8 << 30, 8 << 30)]
    lmap = layer_map(facts.n_layer_all, rc.n_gpu_layers, split_points([1.0]))
    weights = placed._tensor_weights if rules else placed._weights
    with_rope = weights(mm, rc, lmap, gpus)
    mm.rope_raw = 0
    mm.tensors = [t for t in mm.tensors if t[0] not in ROPE_FACTORS]
    without = weights(mm, rc, lmap, gpus)
    assert {d: b - without[d] for d, b in with_rope.items() if b != without[d]} == expected
