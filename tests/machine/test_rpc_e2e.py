"""RPC for real: two ggml-rpc-server workers on loopback, llamafit's per-device prediction against
the RPC0[…] buffer lines llama-server prints, and the workers' memory asked with --list-devices."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.machine.rpc import parse_list_devices
from tests.support.loads import lab_load
from tests.support.scripts import script

device_lab = script("device_lab")

LIST = """Available devices:
  RPC0: 127.0.0.1:18101 (24105 MiB, 24000 MiB free)
  RPC1: 10.0.0.7:50052 (8192 MiB, 8000 MiB free)
"""


def test_list_devices_lines_are_read() -> None:
    assert parse_list_devices(LIST) == {
        "127.0.0.1:18101": (24105 << 20, 24000 << 20),
        "10.0.0.7:50052": (8192 << 20, 8000 << 20),
    }


@pytest.fixture(scope="module")
def workers(vk_rpc_bin: Path) -> Iterator[list[str]]:
    with device_lab.rpc_workers(2) as endpoints:
        yield endpoints


def _mib(n: int) -> float:
    return round(n / (1 << 20), 2)


@pytest.mark.parametrize(
    "flags",
    [["-ngl", "99", "-c", "4096"], ["-ngl", "10", "-c", "8192", "-ts", "3,1"]],
    ids=["full", "partial-ts"],
)
def test_predicted_rpc_buffers_match_the_workers(
    vk_rpc_bin: Path, workers: list[str], demo_path: Path, flags: list[str]
) -> None:
    env = {"LLAMA_SERVER": str(vk_rpc_bin / "llama-server"), "GGML_VK_VISIBLE_DEVICES": None}
    res = CliRunner(env=env).invoke(
        cli,
        [
            "check",
            str(demo_path),
            "--gpu",
            "cpu",
            "--rpc",
            ",".join(workers),
            "--reserve",
            "0",
            "--json",
            "--",
            *flags,
        ],
    )
    assert res.exit_code == 0, res.output
    pred = {d["name"]: d for d in json.loads(res.stdout)["devices"]}
    names = [f"RPC0[{e}]" for e in workers]
    assert list(pred) == [*names, "CPU"]
    # asked: llama-server --rpc … --list-devices
    assert all(pred[n]["total_bytes"] > 0 for n in names)
    got = lab_load(demo_path, ["--rpc", ",".join(workers), *flags], env=device_lab.vk_env(None))
    assert got.ok, got.failure
    for n in names:
        assert got.get("model", n) == _mib(pred[n]["weights_bytes"]), n
        assert got.get("KV", n) == _mib(pred[n]["kv_bytes"]), n
