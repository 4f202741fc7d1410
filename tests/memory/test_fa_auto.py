"""-fa auto settled per placement as llama_context settles it (src/llama-context.cpp:
resolve_fused_ops' Flash Attention probe at b11434, sched_reserve's auto block at b8470): the
one-token graph with flash attention through the scheduler, off where a FLASH_ATTN_EXT node lands
on another device than its layer's (replay.fa_auto_mismatch, resolve.settle_flash_attn,
MemoryModel.settle_flash_attn)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llamafit.builds import build_of
from llamafit.cli import cli
from llamafit.machine.devices import DeviceSpec
from llamafit.memory.config import NGL_ALL, LaunchConfig
from llamafit.memory.model import COMPUTE_GRAPH, MemoryModel
from llamafit.memory.resolve import ConfigError, ResolvedConfig, resolve
from tests.memory.test_replay_devices import LAVAPIPE
from tests.support import FIXTURES, vulkan_rpc_bin_dir
from tests.support.graph_build import facts_of
from tests.support.graph_dump import record
from tests.support.scripts import script

HOST = DeviceSpec("CPU", "host", "cpu", 64 << 30, 64 << 30)
ADA = DeviceSpec("CUDA0", "gpu", "cuda", 24 << 30, 24 << 30, cc=890)
GRANITE = "fixtures/hybrid-granite.gguf"  # heads of 16
GLM4MOE = "fixtures/nextn-glm4moe.gguf"  # heads of 32
BGE = "bge-small-en-v1.5"  # heads of 32, no KV cache (non-causal)
LLAMA = "llama3.2-1b"  # heads of 64

CASES = [  # (shape, device, launch settings) -> the mismatch llama.cpp logs, or None (FA on)
    # lavapipe takes 16-wide heads; the scheduler's expansion carries host layer 2's node onto
    # Vulkan0 (the real b11434 log: "layer 2 is assigned to device CPU but Flash Attention is
    # assigned to device Vulkan0", test_the_real_server_logs_it)
    (GRANITE, LAVAPIPE, {"n_ctx": 1024, "n_parallel": 1, "n_gpu_layers": 4}, (2, "CPU", "Vulkan0")),
    (GRANITE, LAVAPIPE, {"n_ctx": 1024, "n_parallel": 1, "n_gpu_layers": NGL_ALL}, None),
    # CUDA has no kernel for a 32-wide head (fattn.cu ggml_cuda_get_best_fattn_kernel)
    (BGE, ADA, {"n_ctx": 512, "n_gpu_layers": NGL_ALL, "embeddings": True}, (0, "CUDA0", "CPU")),
    (GLM4MOE, ADA, {"n_ctx": 1024, "n_gpu_layers": NGL_ALL}, (0, "CUDA0", "CPU")),
    # only the host's layers: every node stays with them
    (GLM4MOE, ADA, {"n_ctx": 1024, "n_gpu_layers": 0}, None),
    # Vulkan takes 32-wide heads (a multiple of 8): on, as the recorded vk-bge-small start ran
    (BGE, LAVAPIPE, {"n_ctx": 512, "n_gpu_layers": NGL_ALL, "embeddings": True}, None),
    (LLAMA, ADA, {"n_ctx": 4096, "n_gpu_layers": NGL_ALL}, None),
    (LLAMA, ADA, {"n_ctx": 4096, "n_gpu_layers": 8}, None),
]


def _settled(key: str, gpu: DeviceSpec, settings: dict, **more: Any) -> ResolvedConfig:
    facts, _hp = facts_of(key)
    rc = resolve(LaunchConfig(fit=False, **{**settings, **more}), facts)
    return MemoryModel(facts).settle_flash_attn(rc, [gpu], HOST)


@pytest.mark.parametrize(("key", "gpu", "settings", "mismatch"), CASES)
def test_fa_auto_follows_the_devices(
    key: str, gpu: DeviceSpec, settings: dict, mismatch: tuple[int, str, str] | None
) -> None:
    rc = _settled(key, gpu, settings)
    assert (rc.flash_attn, rc.fa_auto, rc.fa_auto_off) == (mismatch is None, False, mismatch)


def test_fa_on_and_off_are_left_as_given() -> None:
    for fa, on in (("on", True), ("off", False)):
        rc = _settled(BGE, ADA, CASES[2][2], flash_attn=fa)
        assert (rc.flash_attn, rc.fa_auto, rc.fa_auto_off) == (on, False, None)


def test_the_figures_follow_it() -> None:
    """BGE small on CUDA: replayed with flash attention off (no cache: the same graph as -fa
    off), where the replay declined the FA graph before. The granite hybrid at -ngl 4: the cache
    as made for flash attention (-fa on's bytes), the graph without it."""

    def compute(fa: str, key: str = BGE, gpu: DeviceSpec = ADA, **s: Any) -> tuple:
        facts, _hp = facts_of(key)
        cfg = LaunchConfig(fit=False, flash_attn=fa, **s)
        b = MemoryModel(facts).estimate(resolve(cfg, facts), [gpu], HOST, reserve_bytes=0)
        return tuple((d.name, d.kv_bytes, d.compute_bytes, d.compute_source) for d in b.devices)

    bge: dict[str, Any] = {"n_ctx": 512, "n_gpu_layers": NGL_ALL, "embeddings": True}
    assert compute("auto", **bge) == compute("off", **bge)
    assert compute("auto", **bge) == (
        ("CUDA0", 0, 17567360, COMPUTE_GRAPH),
        ("CPU", 0, 4993056, COMPUTE_GRAPH),
    )
    granite: dict[str, Any] = {"n_ctx": 1024, "n_parallel": 1, "n_gpu_layers": 4}
    auto = compute("auto", GRANITE, LAVAPIPE, **granite)
    on = compute("on", GRANITE, LAVAPIPE, **granite)
    off = compute("off", GRANITE, LAVAPIPE, **granite)
    assert [d[1] for d in auto] == [d[1] for d in on]
    assert [d[2] for d in auto] != [d[2] for d in on]
    assert {d[3] for d in auto + off} == {COMPUTE_GRAPH}


QUANT_V: dict[str, Any] = {
    "n_ctx": 1024,
    "n_gpu_layers": NGL_ALL,
    "type_k": "q8_0",
    "type_v": "q8_0",
}


def test_a_quantized_v_cache_turns_auto_on_from_its_rule() -> None:
    """From rule fa_auto_quant_v llama_init_from_model makes -fa auto on for a quantized V
    cache: no device check (the FA node then runs on the CPU). Before it auto stayed auto and
    llama_context threw after the check turned it off."""
    rc = _settled(GLM4MOE, ADA, QUANT_V)
    assert (rc.flash_attn, rc.fa_auto, rc.fa_auto_off) == (True, False, None)
    assert "enabling flash_attn since it is required for quantized V cache" in rc.warnings
    facts, _hp = facts_of(GLM4MOE)
    old = resolve(LaunchConfig(fit=False, **QUANT_V), facts, build=build_of("fa_auto_quant_v") - 1)
    assert (old.flash_attn, old.fa_auto, old.warnings) == (True, True, ())
    with pytest.raises(ConfigError) as e:
        MemoryModel(facts).settle_flash_attn(old, [ADA], HOST)
    assert str(e.value) == (
        "quantized V cache was requested, but this requires Flash Attention (-fa auto turned it "
        "off: layer 0's flash attention would run on CPU, not CUDA0); use -ctv f16 or -fa on"
    )


def test_check_prints_and_reports_it(tmp_path: Path) -> None:
    path = script("make_shapes").write_shape(BGE, tmp_path)
    args = ["check", str(path), "--gpu", "rtx4090", "--reserve", "0"]
    flags = ["--", "-c", "512", "--embedding"]
    res = CliRunner().invoke(cli, [*args, "--json", *flags])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["config"]["flash_attn"] == "off"
    (note,) = [w for w in data["warnings"] if w["code"] == "fa_auto_off"]
    assert note == {
        "code": "fa_auto_off",
        "layer": 0,
        "device": "CUDA0",
        "fa_device": "CPU",
        "text": "-fa auto runs with flash attention off: layer 0 is on CUDA0 but its flash "
        "attention would run on CPU (no kernel there for its heads or cache types); the "
        "figures are without it",
    }
    assert [(d["name"], d["compute_source"]) for d in data["devices"]] == [
        ("CUDA0", COMPUTE_GRAPH),
        ("CPU", COMPUTE_GRAPH),
    ]
    text = CliRunner().invoke(cli, [*args, *flags]).output
    assert "-fa auto -ctk f16 -ctv f16" in text  # the flags the figures are for
    assert (
        "Warning    -fa auto runs with flash attention off: layer 0 is on CUDA0 but its\n"
        "           flash attention would run on CPU (no kernel there for its heads or\n"
        "           cache types); the figures are without it\n"
    ) in text


@pytest.mark.slow
def test_the_real_server_logs_it(vulkan0: Path) -> None:
    """b11434's llama-server on lavapipe's Vulkan0 logs the mismatch fa_auto_mismatch finds."""
    binary = vulkan_rpc_bin_dir()
    assert binary is not None
    args = ["-m", str(FIXTURES / "hybrid-granite.gguf"), "-c", "1024", "-np", "1"]
    args += ["-ngl", "4", "-fa", "auto", "--fit", "off"]
    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    _events, log = record(binary / "llama-server", args, env=env)
    assert (
        "resolve_fused_ops: layer 2 is assigned to device CPU but Flash Attention is assigned "
        "to device Vulkan0 (usually due to missing support)"
    ) in log
    assert "resolve_fused_ops: Flash Attention not supported, set to disabled" in log
    assert _settled(GRANITE, LAVAPIPE, CASES[0][2]).fa_auto_off == (2, "CPU", "Vulkan0")
