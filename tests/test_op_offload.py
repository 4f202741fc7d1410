"""Op offload at partial offload (ggml-backend.cpp scheduler pass 1, *_device_offload_op): the first
offloading GPU's compute buffer holds a host layer's activations and the largest host weight."""

from __future__ import annotations

import json
from pathlib import Path

import device_lab
import make_shapes
import pytest
from click.testing import CliRunner

from llamafit.cli import cli

BASE = ["-c", "4096", "-np", "1", "--no-repack"]


def _compute(path: Path, flags: list[str], env: dict[str, str] | None = None) -> dict[str, int]:
    res = CliRunner(env=env).invoke(cli, ["check", str(path), "--gpu", "lavapipe", "--reserve", "0", "--json",
                                          "--", *flags])  # fmt: skip
    assert res.exit_code == 0, res.output
    return {d["name"]: d["compute_bytes"] for d in json.loads(res.stdout)["devices"]}


# (flags, env, predicted Vulkan0 compute bytes) on the Llama 3.2 1B shape
CASES = [
    (["-ngl", "0"], {}, 89_262_208),  # ub 512: activations + ffn_down (13.1 MiB) + one layer's K/V
    (["-ngl", "0", "-ub", "32"], {}, 26_345_728),
    (["-ngl", "0", "-ub", "31"], {}, 254_720),  # below GGML_OP_OFFLOAD_MIN_BATCH: nothing offloaded
    (["-ngl", "0", "--no-op-offload"], {}, 4_204_672),
    (["-ngl", "0", "-ub", "64"], {"GGML_OP_OFFLOAD_MIN_BATCH": "128"}, 525_696),
    (["-ngl", "0", "-fa", "off"], {}, 76_679_296),  # attention stays on the host with the cache
]


@pytest.mark.parametrize(("flags", "env", "expected"), CASES, ids=[" ".join(c[0]) + str(c[1]) for c in CASES])
def test_predicted_gpu_compute(shapes_dir: Path, flags: list[str], env: dict[str, str], expected: int) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    assert _compute(path, BASE + flags, env)["Vulkan0"] == expected


# Live: what Vulkan0 reports (MiB) must not exceed the prediction (never an OOM), and the threshold,
# the switch and the env override behave as the source says.
LIVE = [["-ngl", "0"], ["-ngl", "0", "-ub", "32"], ["-ngl", "0", "-ub", "31"], ["-ngl", "0", "--no-op-offload"],
        ["-ngl", "4"]]  # fmt: skip


@pytest.mark.parametrize("flags", LIVE, ids=[" ".join(f) for f in LIVE])
def test_vulkan0_compute_within_prediction(vulkan0: Path, shapes_dir: Path, flags: list[str]) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    got = device_lab.load(path, BASE + flags)
    assert got.ok, got.failure
    real = got.get("compute", "Vulkan0")
    pred = _compute(path, BASE + flags)["Vulkan0"] / (1 << 20)
    assert real <= pred + 0.01
    offloaded = "--no-op-offload" not in flags and "31" not in flags
    assert (real > 10) == offloaded  # below the threshold / switched off: no weight copy at all
