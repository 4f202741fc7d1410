"""The graph replay on Metal by build (memory/graph/replay.py covers_backends, covers_devices,
device_compute_bytes with metal_backend and Apple's BLAS backend; backends/metal.py:
metal_graph_optimize, metal_buffer_type), through MemoryModel.estimate on the GPU corpus's Metal
rows (tests/memory/test_gpu_corpus.py) at their builds and at later ones. The rows of builds no
Metal log checks are the port's own figures (rules in tests/memory/graph/test_metal_rules.py)."""

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
    """A BF16 cache with flash attention at b8054: before rule metal_fusion_table the replay takes
    only the ops and types the 0.3.17 and 0.3.20 trees were read for (metal_graph_ok: no BF16,
    has_bfloat is not modelled), so the hand-derived peaks stand; a Q8_0 cache is replayed
    (0.3.17's supports_op takes FLASH_ATTN_EXT over K and V of one legacy quant, SET_ROWS from
    F32 into it)."""
    row = _row(QWEN, type_k="bf16", type_v="bf16", flash_attn="on")
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row))
    bd = predicted(row)
    assert _compute(bd) == _compute(predicted(row, replay=False))
    assert {d.compute_source for d in bd.devices} == {"estimate"}
    q8 = predicted(_row(QWEN, type_k="q8_0", type_v="q8_0", flash_attn="on"))
    assert {d.compute_source for d in q8.devices} == {"graph"}
    assert _compute(q8) == (315359232, 16791552)


COVERS = (  # (shape, build, backends) -> whether the replay covers it (covers_backends)
    ("mistral-small-3.1-24b", 7698, (), True),  # llama from OLD_SINCE (inp_embd_expand) on
    ("mistral-small-3.1-24b", 7697, (), False),  # before: not checked
    ("qwen2.5-3b", 7960, ("metal",), True),
    ("qwen3-0.6b", 8054, ("metal",), True),
    ("qwen2.5-3b", 8499, ("metal",), True),
    # Metal's rules by build from 0.3.17's tree to b11434's (backends/metal.py): every build
    ("qwen2.5-3b", 8500, ("metal",), True),
    ("qwen2.5-3b", None, ("metal",), True),
    ("qwen2.5-3b", 11434, ("metal", "metal"), True),
    ("qwen2.5-3b", 11434, ("metal", "cuda"), False),
    # Vulkan: 0.3.17's reorder for these families from OLD_SINCE until vk_reorder_ssm_conv
    # (test_replay_vulkan_old.py), b11434's from b11400; RPC: b11434's rules, from b11400
    ("qwen2.5-3b", 8179, ("vulkan",), True),
    ("qwen2.5-3b", 9039, ("vulkan",), True),
    ("qwen2.5-3b", 9040, ("vulkan",), False),
    ("qwen2.5-3b", 11399, ("vulkan",), False),
    ("mistral-small-3.1-24b", 7697, ("vulkan",), False),
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
    ("mistral-small-3.1-24b", 7697, ("cuda",), False),
    ("qwen2.5-3b", 8179, ("rocm",), True),
    ("qwen2.5-3b", 8179, ("cuda", "vulkan"), False),
    # qwen3moe: replayed from OLD_SINCE (b7698's and 0.3.17's graphs, test_build_b7698.py); CUDA
    # declines its MUL_MAT_ID graphs later (cuda_graph_ok)
    ("qwen3-30b-a3b", 8179, ("cuda",), True),
    ("qwen3-30b-a3b", 11400, ("rocm",), True),
    ("qwen3-30b-a3b", 8054, (), True),
    ("qwen3-30b-a3b", 7697, (), False),
    ("qwen3-30b-a3b", 11400, (), True),
    ("qwen3-30b-a3b", 11400, ("metal",), True),  # every family from its first replayed build
    ("qwen3-30b-a3b", 8179, ("metal",), True),  # (metal_graph_ok decides the ops by build)
    ("qwen3-30b-a3b", 7697, ("metal",), False),
    ("gpt-oss-20b", 7698, (), True),  # gpt-oss from OLD_SINCE too (test_build_b7698.py)
    ("gpt-oss-20b", 7697, (), False),
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
    # any offload from Metal's BLAS port on (backends/blas.py)
    ({"n_gpu_layers": 36}, ("MTL0",), True),  # the output and 35 of 36 blocks (ngl_output_first)
    ({}, ("MTL0", "MTL1"), False),  # one Metal device only
    ({"kv_offload": False}, ("MTL0",), True),  # -nkvo: attention on the CPU backend
    ({"override_tensor": [["ffn_up", "CPU"]]}, ("MTL0",), True),  # host weights' ops
)


@pytest.mark.parametrize(("settings", "names", "covered"), DEVICES)
def test_covers_metal_devices(settings: dict, names: tuple[str, ...], covered: bool) -> None:
    row = {**_row(QWEN, **settings), "gpus": list(names)}
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row)) is covered


# --- Metal at current builds (backends/metal.py, metal_fusion.py) ----------------------------

CURRENT = (  # (row, build, K/V cache, flash attention) -> (MTL0, CPU) through MemoryModel.estimate
    # from rule server_output_limit the logits of 4 outputs, not 512 (b8054's 300.75 MiB)
    (QWEN, 10400, "f16", "off", 152049696, 17834016),
    (QWEN, 10400, "f16", "on", 80226336, 12595232),
    (QWEN, 10900, "f16", "on", 80226336, 12595232),  # the fusion table packs RMS_NORM + MUL
    # b11434: MUL_MAT + ADD packed with their sources kept, the mixed-batch inputs
    (QWEN, 11434, "f16", "off", 160442400, 26228768),
    (QWEN, 11434, "f16", "on", 88619040, 20989984),
    (QWEN, 11434, "q8_0", "on", 88700960, 21071904),
    # flash attention over 90880 cells: from PR #27390 the F16 copies of K and V of every cache
    # type (2 x 177.5 MiB, reserved even for an F16 cache), the pad rows of a quantized one F16
    (MISTRAL, 10400, "f16", "on", 351439648, 114044960),
    (MISTRAL, 10700, "f16", "on", 522357536, 114044960),
    (MISTRAL, 11434, "f16", "on", 534944544, 135022624),
    (MISTRAL, 11434, "q8_0", "on", 533191456, 135104544),
)


@pytest.mark.parametrize(("row_id", "build", "kv", "fa", "mtl0", "cpu"), CURRENT)
def test_metal_current_builds(
    row_id: str, build: int, kv: str, fa: str, mtl0: int, cpu: int
) -> None:
    row = {**_row(row_id, type_k=kv, type_v=kv, flash_attn=fa), "build": build}
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row))
    assert _compute(predicted(row)) == (mtl0, cpu)


PARTIAL = (  # (row, build, -ngl, -nkvo) -> (MTL0, CPU) with Apple's BLAS backend (backends/blas.py)
    # the output layer on MTL0 (its logits), 29 of 36 blocks: the host blocks' products at 512
    # rows run on BLAS (no op offload), their activations in the CPU buffer
    (QWEN, 8054, 30, False, 315359232, 88619008),
    (QWEN, 11434, 30, False, 80226336, 92817440),
    (QWEN, 11434, 0, False, 0, 92817440),
    # -nkvo with flash attention: the attention stays on MTL0 and copies K and V from the host
    (MISTRAL, 11434, -2, True, 907180800, 135022624),
    (MISTRAL, 11434, 30, False, 513968928, 346834976),
)


@pytest.mark.parametrize(("row_id", "build", "ngl", "nkvo", "mtl0", "cpu"), PARTIAL)
def test_metal_partial_offload(
    row_id: str, build: int, ngl: int, nkvo: bool, mtl0: int, cpu: int
) -> None:
    row = {**_row(row_id, n_gpu_layers=ngl, kv_offload=not nkvo), "build": build}
    assert _compute(predicted(row)) == (mtl0, cpu)


ARCHS = (  # (shape, -ngl) -> (MTL0, CPU) at b11434, the Qwen2.5 row's settings at 8192 cells, FA on
    # MoE: MUL_MAT_ID's extras (tpe, ids, amax), the routing and reduction packed, their sources
    # kept (metal_moe_fusion)
    ("qwen3-30b-a3b", -2, 97274496, 25184288),
    # 5 of 48 blocks: the host experts' MUL_MAT_ID (BLAS takes no MUL_MAT_ID) is op-offloaded,
    # its stacked weights copied into MTL0
    ("qwen3-30b-a3b", 5, 462685728, 46155808),
    ("gpt-oss-20b", -2, 103965024, 33056800),  # sinks, ADD_ID, sliding-window layers
    # 8 KV heads of 128 over 8192 cells: the F16 copies of K and V (2 x 16 MiB) of rule
    # metal_fa_kv_f16 in every FA op's extras
    ("qwen3-0.6b", -2, 75716640, 16795680),
)


@pytest.mark.parametrize(("shape", "ngl", "mtl0", "cpu"), ARCHS)
def test_metal_archs(shape: str, ngl: int, mtl0: int, cpu: int) -> None:
    row = {
        **_row(QWEN, flash_attn="on", n_ctx=8192, n_gpu_layers=ngl),
        "build": 11434,
        "shape": shape,
    }
    assert _compute(predicted(row)) == (mtl0, cpu)
