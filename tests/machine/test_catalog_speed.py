"""Detected devices matched to the catalog for the speed model (issue #35): a card by its driver's
name, lavapipe ("llvmpipe") as a CPU-type device at the host's bandwidth; and a Mac named from the
catalog is the whole machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamafit.commands.speed_inputs import speed_inputs
from llamafit.machine.hardware import Hardware
from llamafit.machine.pick import mac_host
from llamafit.machine.server_devices import ListedDevice, server_hardware
from tests.support import HOST

MIB, GIB = 1 << 20, 1 << 30


def test_lavapipe_reads_the_hosts_memory_and_a_card_its_own(tmp_path: Path) -> None:
    listed = (
        ListedDevice("Vulkan0", "vulkan", "NVIDIA GeForce RTX 4090", 24564 * MIB, 24000 * MIB),
        ListedDevice(
            "Vulkan1", "vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", 2048 * MIB, 2048 * MIB
        ),
    )
    hw = server_hardware(listed, Hardware((), HOST, "none"), (), "llama-server")
    inputs = speed_inputs([g.spec for g in hw.gpus], hw.gpus, os.environ, tmp_path, 2)
    # the host probe is pinned by tests/conftest.py: LLAMAFIT_HOST_BANDWIDTH=50e9
    assert [(r.value, r.source) if r else None for r in inputs.gpu_bandwidth] == [
        (1008e9, "catalog: NVIDIA GeForce RTX 4090"),
        (50e9, "host RAM: a CPU-type device (host probe)"),
    ]
    assert inputs.gpu_memory == ("gddr", "host")
    # what share of it lavapipe reaches (it computes in software) is a guess: a range, "assumed"
    assert inputs.gpu_bandwidth_range == (None, (1e9, 50e9))


@pytest.mark.parametrize(
    ("gpu", "ram"),
    [
        ("m2-ultra-192gb", 192 * GIB),
        ("M3 Max 64GB", 64 * GIB),
        ("rtx4090", None),
        ("24GiB", None),
        ("m2-ultra-192gb,rtx4090", None),  # not one Mac
    ],
)
def test_a_mac_named_from_the_catalog_brings_its_ram(gpu: str, ram: int | None) -> None:
    host = mac_host(gpu)
    assert (host.total_bytes if host else None, host.free_bytes if host else None) == (ram, ram)
