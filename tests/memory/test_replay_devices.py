"""The graph replay with GPUs (memory/graph/replay.py device_compute_bytes) against real starts.

Each slow case starts the Vulkan/RPC llama-server (b11434) once with scripts/graph_dump/graph_dump.c
preloaded and requires that `check` predicts every backend's compute buffer (ggml_backend_sched's
buffer after llama_context::sched_reserve: the last "sched" event) to the byte: Vulkan0 and its
host buffer (Vulkan_Host) at partial and full offload, op offload at partial offload, and two RPC
workers at full offload (pipeline parallelism: four copies of each split input). The fast tests
check the rules the replay takes from llama_context (backend order, buffer types, n_copies).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.machine.devices import DeviceSpec
from llamafit.memory.config import LaunchConfig
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.backends.vulkan import (
    VK_STORAGE_ALIGNMENT_BOUND,
    VK_SUBALLOCATION_BLOCK,
    vulkan_buffer_type,
    vulkan_host_buffer_type,
)
from llamafit.memory.graph.replay import n_copies, scheduler_backends
from llamafit.memory.resolve import resolve
from tests.support import FIXTURES, vulkan_rpc_bin_dir
from tests.support.gpu_shapes import model
from tests.support.graph_build import cases as graph_cases
from tests.support.graph_build import recorded
from tests.support.graph_dump import record
from tests.support.scripts import script

make_shapes = script("make_shapes")
device_lab = script("device_lab")

LAVAPIPE = DeviceSpec(
    "Vulkan0",
    "gpu",
    "vulkan",
    2 << 30,
    2 << 30,
    128 << 20,
    buffer_alignment=16,
    host_alignment=64,
    max_allocation_bytes=2 << 30,
)
RPC_A = DeviceSpec("RPC0[127.0.0.1:1]", "gpu", "rpc", 24 << 30, 24 << 30)
RPC_B = DeviceSpec("RPC0[127.0.0.1:2]", "gpu", "rpc", 24 << 30, 24 << 30)


def test_backends_in_llama_context_order_with_their_buffer_types() -> None:
    rc = resolve(LaunchConfig(n_ctx=4096, n_gpu_layers=99, fit=False), model("llama3.2-1b").facts)
    backends, bufts = scheduler_backends(rc, [LAVAPIPE])
    assert [b.name for b in backends] == ["Vulkan0", "CPU"]
    assert [b.buft for b in backends] == ["Vulkan0", "Vulkan_Host"]
    # lavapipe's alignments; the 1 GiB suballocation block under its 2 GiB allocation limit
    assert bufts == [
        vulkan_buffer_type("Vulkan0", 16, 1 << 30),
        vulkan_host_buffer_type(64, 1 << 30),
    ]
    small = DeviceSpec("Vulkan0", "gpu", "vulkan", max_allocation_bytes=256 << 20)
    assert scheduler_backends(rc, [small])[1][0] == vulkan_buffer_type(
        "Vulkan0", VK_STORAGE_ALIGNMENT_BOUND, 256 << 20
    )
    unknown = DeviceSpec("Vulkan0", "gpu", "vulkan")
    assert scheduler_backends(rc, [unknown])[1][0].max_size == VK_SUBALLOCATION_BLOCK
    # RPC first: no host buffer type, the CPU computes in its own buffer type
    backends, bufts = scheduler_backends(rc, [RPC_A, LAVAPIPE])
    assert [b.name for b in backends] == [RPC_A.name, "Vulkan0", "CPU"]
    assert (bufts[0].alignment, bufts[-1]) == (32, CPU)


@pytest.mark.parametrize(
    ("gpus", "config", "copies"),
    [
        ((RPC_A, RPC_B), LaunchConfig(n_ctx=4096, n_gpu_layers=99, fit=False), 4),
        ((RPC_A, LAVAPIPE), LaunchConfig(n_ctx=4096, n_gpu_layers=99, fit=False), 4),
        ((LAVAPIPE,), LaunchConfig(n_ctx=4096, n_gpu_layers=99, fit=False), 1),
        ((RPC_A, RPC_B), LaunchConfig(n_ctx=4096, n_gpu_layers=16, fit=False), 1),
        ((RPC_A, RPC_B), LaunchConfig(n_ctx=4096, n_gpu_layers=99, kv_offload=False, fit=False), 1),
        (
            (RPC_A, RPC_B),
            LaunchConfig(
                n_ctx=4096, n_gpu_layers=99, override_tensor=(("exps", "CPU"),), fit=False
            ),
            1,
        ),
        (
            (RPC_A, RPC_B),
            LaunchConfig(n_ctx=4096, n_gpu_layers=99, split_mode="none", fit=False),
            1,
        ),
    ],
)
def test_pipeline_parallel_copies(
    gpus: tuple[DeviceSpec, ...], config: LaunchConfig, copies: int
) -> None:
    """llama_context: 4 copies with several devices, every layer and the output offloaded (the
    1B's 16 blocks need -ngl 17), -sm layer, the KV cache offloaded and no tensor overrides."""
    facts = model("llama3.2-1b").facts
    rc = resolve(config, facts)
    active = gpus[:1] if rc.split_mode == "none" else gpus
    assert n_copies(facts, rc, active) == copies


# (id, server, model, flags): "vulkan" starts with Vulkan0 visible, "rpc" with two CPU workers,
# "mixed" with both
NR = "--no-repack"
LIVE = [
    ("demo-ngl6", "vulkan", "demo", ["-ngl", "6", "-c", "4096", "-np", "1", NR]),
    ("demo-full", "vulkan", "demo", ["-ngl", "99", "-c", "8192", NR]),
    ("1b-ngl4-op-offload", "vulkan", "llama3.2-1b", ["-ngl", "4", "-c", "4096", "-np", "1", NR]),
    ("demo-rpc-full", "rpc", "demo", ["-ngl", "99", "-c", "4096", "-ts", "1,1", NR]),
    # RPC workers first, then Vulkan0 (llama_model_load_from_file_impl: RPC servers lead)
    ("1b-rpc-vulkan", "mixed", "llama3.2-1b", ["-ngl", "99", "-c", "4096", "-ts", "2,1,1", NR]),
    # CPU_REPACK on: the demo's tied output is over lavapipe's 128 MiB range and stays on the host
    ("demo-ngl6-repack", "vulkan", "demo", ["-ngl", "6", "-c", "4096", "-np", "1"]),
    # -ot: four blocks' FFN weights on the host, their ops offloaded; no pipeline parallelism
    (
        "1b-ot-ffn",
        "vulkan",
        "llama3.2-1b",
        ["-ngl", "99", "-c", "4096", "-np", "1", "-ot", "blk\\.[0-3]\\.ffn_.*=CPU", NR],
    ),
]


# the recorded Vulkan0 starts of scripts/graph_dump/record_build.py (fixtures/graphs/build-vk-*),
# -fa auto's too: the granite hybrid's runs with flash attention off, which llama_context finds
# only after the cache was made for it (replay.fa_auto_mismatch; test_fa_auto.py)
VK_BUILD = sorted(name for name, case in graph_cases().items() if "@vulkan" in case.args)


@pytest.mark.parametrize("name", VK_BUILD)
def test_check_gives_the_recorded_vulkan_compute_buffers(
    demo_path: Path, shapes_dir: Path, name: str
) -> None:
    """`check --gpu lavapipe` predicts each backend's compute buffer of a recorded Vulkan0 start
    (the graph builder, the scheduler's split and the allocation together), to the byte."""
    case = graph_cases()[name]
    if case.model == "demo":
        path = demo_path
    elif case.model.startswith("fixtures/"):
        path = FIXTURES.parent / case.model
    else:
        path = make_shapes.write_shape(case.model, shapes_dir)
    flags = [a for a in case.args if a != "@vulkan"]
    real = [size for _, size in recorded(name)[-1].backends]
    assert _predicted(path, ["--gpu", "lavapipe"], flags) == real


def _predicted(path: Path, machine: list[str], flags: list[str]) -> list[int]:
    res = CliRunner(env={"GGML_VK_VISIBLE_DEVICES": None}).invoke(
        cli, ["check", str(path), *machine, "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code in (0, 1), res.output
    return [d["compute_bytes"] for d in json.loads(res.stdout)["devices"]]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "server", "key", "flags"), LIVE, ids=[c[0] for c in LIVE])
def test_replay_equals_the_real_compute_buffers(
    vulkan0: Path,
    demo_path: Path,
    shapes_dir: Path,
    name: str,
    server: str,
    key: str,
    flags: list[str],
) -> None:
    path = demo_path if key == "demo" else make_shapes.write_shape(key, shapes_dir)
    binary = vulkan_rpc_bin_dir()
    assert binary is not None
    args = ["-m", str(path), *flags, "--fit", "off"]
    env = dict(os.environ)
    if server == "vulkan":
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
        events, log = record(binary / "llama-server", args, env=env)
        machine = ["--gpu", "lavapipe"]
    else:
        env.pop("GGML_VK_VISIBLE_DEVICES", None)
        if server == "mixed":
            env["GGML_VK_VISIBLE_DEVICES"] = "0"
        with device_lab.rpc_workers(2) as endpoints:
            events, log = record(
                binary / "llama-server", [*args, "--rpc", ",".join(endpoints)], env=env
            )
        gpu = "lavapipe" if server == "mixed" else "cpu"
        machine = ["--gpu", gpu, "--rpc", ",".join(f"{e}=24GiB" for e in endpoints)]
    sched = [e for e in events if e.kind == "sched"]
    assert sched, log[-2000:]
    real = [size for _, size in sched[-1].backends]  # the GPUs in order, the CPU last
    assert _predicted(path, machine, flags) == real, name
