"""Device properties as memory-model inputs: vulkaninfo parsing, the tensor-size rule, and real
Vulkan0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.machine.vulkan import device_specs, llama_order, parse_vulkaninfo
from llamafit.memory.tensors import op_probe_bytes
from tests.support import DATA, needs_demo
from tests.support.loads import lab_load
from tests.support.scripts import script

make_shapes = script("make_shapes")

VULKANINFO = DATA / "vulkaninfo"


def test_lavapipe_vulkaninfo_is_read() -> None:
    (dev,) = parse_vulkaninfo((VULKANINFO / "lavapipe-llvm15.txt").read_text())
    assert (dev.index, dev.name, dev.device_type) == (
        0,
        "llvmpipe (LLVM 15.0.6, 256 bits)",
        "PHYSICAL_DEVICE_TYPE_CPU",
    )
    assert (
        dev.heap_bytes,
        dev.max_storage_buffer_range,
        dev.max_buffer_size,
        dev.max_memory_allocation_size,
    ) == (2147483648, 134217728, 0xFFFFFFFF, 0x80000000)
    assert (dev.shader_64bit_indexing, dev.max_tensor_bytes) == (False, 134217728)
    # the compute-buffer replay's buffer types (memory/graph/replay.py scheduler_backends)
    assert (dev.min_storage_buffer_offset_alignment, dev.min_memory_map_alignment) == (16, 64)
    (spec,) = device_specs((dev,))
    assert (spec.buffer_alignment, spec.host_alignment, spec.max_allocation_bytes) == (
        16,
        64,
        0x80000000,
    )


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, ()),
        ({"GGML_VK_VISIBLE_DEVICES": "0"}, ("Vulkan0",)),
        ({"GGML_VK_VISIBLE_DEVICES": "3"}, ()),
    ],
)
def test_llama_cpp_skips_cpu_type_devices_unless_visible(
    env: dict[str, str], names: tuple[str, ...]
) -> None:
    devices = llama_order(parse_vulkaninfo((VULKANINFO / "lavapipe-llvm15.txt").read_text()), env)
    assert tuple(s.name for s in device_specs(devices)) == names


@pytest.mark.parametrize(
    ("shape", "n_bytes", "used", "experts", "expected"),
    [
        (
            (640, 262144),
            178257920,
            1,
            False,
            262144 * 512 * 4,
        ),  # Gemma 3 270M tied output: dst is larger
        (
            (2048, 128256),
            215470080,
            1,
            False,
            262668288,
        ),  # Llama 3.2 1B output: dst 128256 x 512 F32
        ((2048, 8192), 9437184, 1, False, 16777216),  # an FFN matrix: dst 8192 x 512 F32
        (
            (768, 2048, 128),
            165150720,
            8,
            True,
            165150720,
        ),  # Qwen3-30B ffn_down_exps (Q6_K): the weight
        ((2048,), 8192, 1, False, 8192),  # a norm
    ],
)
def test_probe_op_bytes(
    shape: tuple[int, ...], n_bytes: int, used: int, experts: bool, expected: int
) -> None:
    assert op_probe_bytes(shape, n_bytes, used, experts) == expected


def _check(args: list[str], env: dict[str, str | None] | None = None) -> dict[str, dict[str, int]]:
    i = args.index("--")
    res = CliRunner(env=env).invoke(
        cli, ["check", *args[:i], "--reserve", "0", "--json", *args[i:]]
    )
    assert res.exit_code == 0, res.output
    return {d["name"]: d for d in json.loads(res.stdout)["devices"]}


@needs_demo
def test_gemma_270m_tied_output_stays_on_the_host_of_lavapipe() -> None:
    got = _check(["--demo", "--gpu", "lavapipe", "--", "-ngl", "99", "-c", "4096", "-np", "1"])
    assert (got["Vulkan0"]["weights_bytes"], got["CPU"]["weights_bytes"]) == (68329984, 178257920)
    # lavapipe hidden, as llama.cpp hides CPU-type devices
    big = _check(
        [
            "--demo",
            "--gpu",
            "2GiB",
            "--backend",
            "vulkan",
            "--",
            "-ngl",
            "99",
            "-c",
            "4096",
            "-np",
            "1",
        ],
        env={"GGML_VK_VISIBLE_DEVICES": None},
    )
    # no limit known: the copy goes along
    assert big["Vulkan0"]["weights_bytes"] == 68329984 + 178257920


def test_a_sized_vulkan_gpu_takes_the_local_device_limit(vulkan0: Path, vulkaninfo: str) -> None:
    got = _check(
        [
            "--demo",
            "--gpu",
            "2GiB",
            "--backend",
            "vulkan",
            "--",
            "-ngl",
            "99",
            "-c",
            "4096",
            "-np",
            "1",
        ],
        env={"GGML_VK_VISIBLE_DEVICES": "0"},
    )
    assert got["Vulkan0"]["weights_bytes"] == 68329984


def _mib(n: int) -> float:
    return round(n / (1 << 20), 2)


def test_real_vulkan0_reports_what_detection_predicts(
    vulkan0: Path, vulkaninfo: str, demo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = ["-ngl", "99", "-c", "4096", "-np", "1"]
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    pred = _check([str(demo_path), "--backend", "vulkan", "--", *flags])  # devices from vulkaninfo
    got = lab_load(demo_path, flags)
    assert got.ok, got.failure
    assert got.get("model", "Vulkan0") == _mib(pred["Vulkan0"]["weights_bytes"]) == 65.16
    assert got.get("model", "CPU_Mapped") == _mib(pred["CPU"]["weights_bytes"]) == 170.0
    assert got.get("KV", "Vulkan0") == _mib(pred["Vulkan0"]["kv_bytes"])


def test_real_shape_partial_offload_keeps_the_large_output_on_the_host(
    vulkan0: Path, shapes_dir: Path
) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    flags = ["-c", "4096", "-np", "1", "-ngl", "2", "--no-repack"]
    got = lab_load(path, flags)
    assert got.ok, got.failure
    pred = _check([str(path), "--gpu", "lavapipe", "--", *flags])
    assert got.get("model", "Vulkan0") == _mib(pred["Vulkan0"]["weights_bytes"]) == 37.03
    # the mapped range also spans the 32-byte alignment gaps between tensors: 0.01 MiB here
    assert got.get("model", "CPU_Mapped") == pytest.approx(
        _mib(pred["CPU"]["weights_bytes"]), abs=0.011
    )
    assert (got.get("KV", "Vulkan0"), got.get("KV", "CPU")) == (
        _mib(pred["Vulkan0"]["kv_bytes"]),
        _mib(pred["CPU"]["kv_bytes"]),
    )


@pytest.mark.parametrize(
    ("flags", "kq_mib", "vk", "host"),
    [
        (["-c", "1024", "-ub", "512"], 64, 82.03, 76.03),
        (["-c", "1024", "-ub", "256"], 32, 41.02, 38.02),
    ],
)
def test_quantized_k_without_fa_runs_kq_on_the_host(
    vulkan0: Path, shapes_dir: Path, flags: list[str], kq_mib: int, vk: float, host: float
) -> None:
    """Vulkan refuses a quantized, non-dim01-contiguous K view as MUL_MAT src0
    (backends.vk_supports_op; the hand model's compute._vk_refuses_quantized_k), so KQ
    [n_kv, T, n_head] F32 runs on the CPU (the real Vulkan_Host buffer holds it); the graph replay
    `check` shows gives both buffers as llama.cpp reports them."""
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    args = ["-ngl", "99", "-np", "1", "-fa", "off", "-ctk", "q8_0", "--no-repack", *flags]
    got = lab_load(path, args)
    assert got.ok, got.failure
    pred = _check([str(path), "--gpu", "lavapipe", "--", *args])
    assert (_mib(pred["Vulkan0"]["compute_bytes"]), _mib(pred["CPU"]["compute_bytes"])) == (
        vk,
        host,
    )
    assert kq_mib < got.get("compute", "Vulkan_Host") == host
    assert got.get("compute", "Vulkan0") == vk


@pytest.mark.parametrize(
    ("flags", "host"),
    [
        (["-ngl", "99", "-ub", "512", "--pooling", "mean"], 517.52),
        (["-ngl", "99", "-ub", "256", "--pooling", "last"], 258.64),
        (["-ngl", "99", "-ub", "512", "--pooling", "none"], 514.5),
        (
            ["-ngl", "10", "-ub", "512", "--pooling", "mean"],
            517.52,
        ),  # partial offload: op offload keeps the output
    ],
)
def test_embeddings_logits_over_the_tensor_limit_run_on_the_host(
    vulkan0: Path, demo_path: Path, flags: list[str], host: float
) -> None:
    """compute._logits_fit: --embeddings reserves n_ubatch outputs, and Gemma's logits [262144, 512]
    F32 (512 MiB) exceed lavapipe's maxStorageBufferRange: the lm_head runs on the CPU, whose buffer
    holds the logits."""
    args = ["-c", "2048", "-np", "1", "-fa", "on", "--embeddings", "--no-repack", *flags]
    got = lab_load(demo_path, args)
    assert got.ok, got.failure
    pred = _check([str(demo_path), "--gpu", "lavapipe", "--", *args])
    assert _mib(pred["CPU"]["compute_bytes"]) == host
    assert abs(got.get("compute", "Vulkan_Host") - host) <= 0.011
    # no logits on the device
    assert got.get("compute", "Vulkan0") <= _mib(pred["Vulkan0"]["compute_bytes"]) < 64
