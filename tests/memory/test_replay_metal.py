"""The graph replay on Metal and at older builds (memory/graph/replay.py covers_backends,
device_compute_bytes with metal_backend, backends/metal.py: metal_graph_optimize, metal_buffer_type), through
MemoryModel.estimate on the GPU corpus's Metal rows (tests/memory/test_gpu_corpus.py)."""

from __future__ import annotations

import pytest

from llamafit.memory.graph.replay import covers_backends, covers_devices
from llamafit.memory.model import Breakdown
from tests.memory.test_gpu_corpus import ROWS, gpus_of, predicted, resolved
from tests.support.gpu_shapes import model

MISTRAL = "repo-jonsjoberg-mistral-small-24b-fit-90k-metal-m3pro"
QWEN = "repo-on1659-radar-qwen2.5-3b-metal-m4"


def _row(row_id: str, **settings: object) -> dict:
    row = next(r for r in ROWS if r["id"] == row_id)
    return {**row, "settings": {**row["settings"], **settings}}


def _compute(bd: Breakdown) -> tuple[int, ...]:
    return tuple(d.compute_bytes for d in bd.devices)


ESTIMATES = (  # (row, build) -> (MTL0, CPU) compute bytes through MemoryModel.estimate
    # b7960's log: 348.26 / 197.51 MiB (the F32 mask copied onto MTL0 and cast there; the reorder
    # before PR #19555); the hand model said 308.76 for MTL0
    (MISTRAL, 7960, 365178880, 207108096),
    # the same config with PR #19555's reorder (rule metal_reorder_64): the cast lands elsewhere
    (MISTRAL, 8054, 367276032, 207108096),
    # b8054's log: 300.75 / 16.01 MiB
    (QWEN, 8054, 315359232, 16791552),
    (QWEN, 7960, 315359232, 16791552),
)


@pytest.mark.parametrize(("row_id", "build", "mtl0", "cpu"), ESTIMATES)
def test_metal_estimate(row_id: str, build: int, mtl0: int, cpu: int) -> None:
    row = {**_row(row_id), "build": build}
    assert _compute(predicted(row)) == (mtl0, cpu)


def test_metal_refused_graph_keeps_the_hand_peaks() -> None:
    """A q8_0 cache with flash attention: Metal's SET_ROWS and FA over q8_0 and the FA extras of a
    quantized cache are not modelled (replay.metal_graph_ok): the hand-derived peaks stand."""
    row = _row(QWEN, type_k="q8_0", type_v="q8_0", flash_attn="on")
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row))
    assert _compute(predicted(row)) == _compute(predicted(row, replay=False))


COVERS = (  # (shape, build, backends) -> whether the replay covers it (covers_backends)
    ("mistral-small-3.1-24b", 7750, (), True),  # llama from inp_embd_both on
    ("mistral-small-3.1-24b", 7749, (), False),  # before: one of the two inputs
    ("qwen2.5-3b", 7960, ("metal",), True),
    ("qwen3-0.6b", 8054, ("metal",), True),
    ("qwen2.5-3b", 8499, ("metal",), True),
    ("qwen2.5-3b", 8500, ("metal",), False),  # Metal: none from attn_rot on (FA extras changed)
    ("qwen2.5-3b", None, ("metal",), False),
    # Vulkan: 0.3.17's reorder for these families from inp_embd_both until vk_reorder_ssm_conv
    # (test_replay_vulkan_old.py), b11434's from b11400; RPC: b11434's rules, from b11400
    ("qwen2.5-3b", 8179, ("vulkan",), True),
    ("qwen2.5-3b", 9039, ("vulkan",), True),
    ("qwen2.5-3b", 9040, ("vulkan",), False),
    ("qwen2.5-3b", 11399, ("vulkan",), False),
    ("mistral-small-3.1-24b", 7749, ("vulkan",), False),
    ("qwen3-0.6b", 8179, ("vulkan", "vulkan"), True),
    ("qwen2.5-3b", 8179, ("rpc",), False),  # 0.3.17's RPC device: no async compute, no events
    ("qwen2.5-3b", 8179, ("vulkan", "rpc"), False),
    ("qwen3-30b-a3b", 8179, ("vulkan",), False),
    ("qwen2.5-3b", 11400, ("vulkan", "rpc"), True),
    # CUDA and ROCm (test_replay_cuda.py): every family from the build its graph is replayed
    # from (MoE graphs are declined later, backends.cuda.cuda_graph_ok), one backend at a time
    ("qwen2.5-3b", 8179, ("cuda",), True),
    ("qwen2.5-3b", 9512, ("cuda", "cuda"), True),
    ("qwen2.5-3b", None, ("cuda",), True),
    ("mistral-small-3.1-24b", 7749, ("cuda",), False),
    ("qwen2.5-3b", 8179, ("rocm",), True),
    ("qwen2.5-3b", 8179, ("cuda", "vulkan"), False),
    # qwen3moe: replayed from inp_embd_both (0.3.17's graphs, test_build_older.py); CUDA
    # declines its MUL_MAT_ID graphs later (cuda_graph_ok)
    ("qwen3-30b-a3b", 8179, ("cuda",), True),
    ("qwen3-30b-a3b", 11400, ("rocm",), True),
    ("qwen3-30b-a3b", 8054, (), True),
    ("qwen3-30b-a3b", 7749, (), False),
    ("qwen3-30b-a3b", 11400, (), True),
    ("qwen3-30b-a3b", 11400, ("metal",), False),
    ("gpt-oss-20b", 7960, (), True),  # gpt-oss from inp_embd_both too (test_build_older.py)
    ("gpt-oss-20b", 7749, (), False),
)


@pytest.mark.parametrize(("shape", "build", "backends", "covered"), COVERS)
def test_covers_backends(
    shape: str, build: int | None, backends: tuple[str, ...], covered: bool
) -> None:
    assert covers_backends(model(shape).facts, build, backends) is covered


DEVICES: tuple[
    tuple[dict, tuple[str, ...], bool], ...
] = (  # (row settings, GPUs) -> covers_devices of the Qwen2.5 3B Metal row
    ({}, ("MTL0",), True),
    ({"n_gpu_layers": 36}, ("MTL0",), False),  # the output and 35 of 36 blocks (ngl_output_first)
    ({}, ("MTL0", "MTL1"), False),  # one Metal device only
    ({"kv_offload": False}, ("MTL0",), False),  # -nkvo: attention on the CPU backend
    ({"override_tensor": [["ffn_up", "CPU"]]}, ("MTL0",), False),  # host weights' ops
)


@pytest.mark.parametrize(("settings", "names", "covered"), DEVICES)
def test_covers_metal_devices(settings: dict, names: tuple[str, ...], covered: bool) -> None:
    row = {**_row(QWEN, **settings), "gpus": list(names)}
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row)) is covered
