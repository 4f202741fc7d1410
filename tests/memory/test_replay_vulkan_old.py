"""The graph replay on Vulkan before b11400 (memory/graph/replay.py covers_backends, VK_OLD_UNTIL;
backends/vulkan_optimize.py vk_graph_optimize_0317, llama-cpp-python 0.3.17's ggml_vk_graph_optimize), through
MemoryModel.estimate on the GPU corpus's Vulkan rows (tests/memory/test_gpu_corpus.py)."""

from __future__ import annotations

import pytest

from llamafit.machine.devices import DeviceSpec
from llamafit.memory.graph.backends import vulkan_optimize as vk_optimize
from llamafit.memory.graph.replay import covers_devices, device_compute_bytes
from llamafit.memory.model import Breakdown
from tests.memory.test_gpu_corpus import HOST, ROWS, gpus_of, predicted, resolved
from tests.support.gpu_shapes import model

TINYLLAMA = "repo-layyyth-mig-tinyllama-1.1b-np4-vulkan-3090"
QWEN = "repo-dzkrimo-aigis-qwen2.5-3b-ngl35-vulkan"
MALI = "repo-bgpr-armage-llama3.2-1b-ngl0-vulkan-mali"


def _row(row_id: str, build: int | None = None, **settings: object) -> dict:
    row = next(r for r in ROWS if r["id"] == row_id)
    return {
        **row,
        "build": row["build"] if build is None else build,
        "settings": {**row["settings"], **settings},
    }


def _compute(bd: Breakdown) -> tuple[int, ...]:
    return tuple(d.compute_bytes for d in bd.devices)


def _replayed(row: dict, gpus: list[DeviceSpec] | None = None) -> tuple[int, ...] | None:
    """The replay's (GPU, host) compute bytes, None where it declines (not the hand peaks)."""
    mm = model(row["shape"])
    mm._memo.clear()
    rc = resolved(row, mm.facts)
    gpus = gpus_of(row) if gpus is None else gpus
    got: list[dict[int, int] | None] = []
    orig = device_compute_bytes

    def spy(*args: object) -> dict[int, int] | None:
        got.append(orig(*args))  # type: ignore[arg-type]
        return got[-1]

    mp = pytest.MonkeyPatch()
    mp.setattr("llamafit.memory.model.device_compute_bytes", spy)
    try:
        mm.estimate(rc, gpus, HOST, reserve_bytes=0)
    finally:
        mp.undo()
        mm._memo.clear()
    out = got[-1] if got else None
    return None if out is None else (out[0], out[-1])


REPLAYED: tuple[
    tuple[str, int | None, dict, tuple[int, int]], ...
] = (  # (row, build, settings) -> (Vulkan0, Vulkan_Host) bytes from the replay
    # b8121's log: 66.50 / 12.01 MiB; b11434's reorder gives 73924608 (70.50) for Vulkan0
    (TINYLLAMA, None, {}, (69730304, 12597280)),
    (TINYLLAMA, 7775, {}, (69730304, 12597280)),  # inp_embd_both
    # before it (from OLD_SINCE, b7698) the host holds no embeddings input: 2048 x 512 F32 less
    (TINYLLAMA, 7774, {}, (69730304, 12597280 - 2048 * 512 * 4)),
    (TINYLLAMA, 7698, {}, (69730304, 12597280 - 2048 * 512 * 4)),
    (TINYLLAMA, 9039, {}, (69730304, 12597280)),  # the last before vk_reorder_ssm_conv
    (TINYLLAMA, None, {"n_gpu_layers": 10}, (69730304, 12597280)),  # hand peaks: 82849792
    (TINYLLAMA, None, {"flash_attn": "off"}, (147857408, 13641760)),  # hand peaks: 156246016
    (
        TINYLLAMA,
        None,
        {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"},
        (69730304, 12597280),
    ),
)


@pytest.mark.parametrize(("row_id", "build", "settings", "expected"), REPLAYED)
def test_old_vulkan_replay(
    row_id: str, build: int | None, settings: dict, expected: tuple[int, int]
) -> None:
    row = _row(row_id, build, **settings)
    assert _replayed(row) == expected
    assert _compute(predicted(row)) == expected


def test_old_reorder_by_build() -> None:
    """0.3.17's reorder before rule vk_reorder_ssm_conv (PR #22653), b11434's from it on."""
    assert vk_optimize.vk_graph_optimize_for(8121) is vk_optimize.vk_graph_optimize_0317
    assert vk_optimize.vk_graph_optimize_for(9039) is vk_optimize.vk_graph_optimize_0317
    assert vk_optimize.vk_graph_optimize_for(9040) is vk_optimize.vk_graph_optimize
    assert vk_optimize.vk_graph_optimize_for(None) is vk_optimize.vk_graph_optimize


def test_b11434_reorder_misses_the_b8121_log() -> None:
    """With b11434's reorder on b8121's graph Vulkan0 comes to 70.50 MiB, not the log's 66.50."""
    row = _row(TINYLLAMA)
    mp = pytest.MonkeyPatch()
    mp.setattr(
        "llamafit.memory.graph.backends.vulkan.vk_graph_optimize_for",
        lambda build: vk_optimize.vk_graph_optimize,
    )
    try:
        assert _replayed(row) == (73924608, 12597280)
    finally:
        mp.undo()


DECLINED: tuple[
    tuple[str, dict, int | None, tuple[int, int] | None], ...
] = (  # (row, settings, GPU max_tensor_bytes) -> replayed bytes, None: the hand peaks
    # the logits (151936 x 512 F32, 297 MiB) and the Mali row's F32 KQ mask (256 MiB) are over
    # the Vulkan specification's 128 MiB minimum of maxStorageBufferRange: with the device's
    # limit unrecorded, whether Vulkan takes them is unknown (backends.UnknownDeviceLimit)
    (QWEN, {}, None, None),
    (QWEN, {}, 1 << 30, (315359232, 12597280)),  # a known limit: the log's 300.75 / 12.01 MiB
    (MALI, {}, None, None),  # the log: 658.25 MiB; a 256 MiB limit gives 656.0, no limit 755.5
    # flash attention over a mixed K/V (refused by 0.3.17's supports_op, taken by b11434's) or
    # a type 0.3.17 takes with coopmat2 only: not covered (covers_devices)
    (TINYLLAMA, {"type_k": "q8_0", "type_v": "f16", "flash_attn": "on"}, None, None),
    (TINYLLAMA, {"type_k": "q4_1", "type_v": "q4_1", "flash_attn": "on"}, None, None),
)


@pytest.mark.parametrize(("row_id", "settings", "limit", "expected"), DECLINED)
def test_old_vulkan_declines_what_the_device_decides(
    row_id: str, settings: dict, limit: int | None, expected: tuple[int, int] | None
) -> None:
    row = _row(row_id, **settings)
    gpus = [DeviceSpec(g.name, "gpu", "vulkan", max_tensor_bytes=limit) for g in gpus_of(row)]
    assert _replayed(row, gpus) == expected
    if expected is None and limit is None:
        assert _compute(predicted(row)) == _compute(predicted(row, replay=False))


COVERS_DEVICES: tuple[tuple[str, dict, bool], ...] = (  # (row, settings) -> covers_devices
    (TINYLLAMA, {}, True),
    (TINYLLAMA, {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"}, True),
    (TINYLLAMA, {"type_k": "q8_0", "type_v": "f16", "flash_attn": "on"}, False),
    (TINYLLAMA, {"type_k": "q4_1", "type_v": "q4_1", "flash_attn": "on"}, False),
    (TINYLLAMA, {"type_k": "q8_0", "type_v": "f16", "flash_attn": "off"}, True),
    (TINYLLAMA, {"type_k": "bf16", "type_v": "bf16", "flash_attn": "off"}, False),  # no BF16 CPY
)


@pytest.mark.parametrize(("row_id", "settings", "covered"), COVERS_DEVICES)
def test_covers_old_vulkan_devices(row_id: str, settings: dict, covered: bool) -> None:
    row = _row(row_id, **settings)
    mm = model(row["shape"])
    assert covers_devices(mm.facts, resolved(row, mm.facts), gpus_of(row)) is covered
