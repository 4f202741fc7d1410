"""What else is using the GPU (issue #25): NVML's per-process memory through a fake NVML module, the
pure logic over the process list, and plan's line about it."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import pytest

from llamafit.machine.devices import DeviceSpec
from llamafit.machine.gpu_processes import (
    GpuProcess,
    OthersInUse,
    gpu_processes,
    others_in_use,
    tokens_for,
)
from llamafit.machine.hardware import GPUInfo
from tests.support import QWEN

MIB = 1 << 20


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The part of pynvml gpu_processes calls: per physical index, compute and graphics
    processes."""

    NVMLError = FakeNvmlError

    def __init__(
        self,
        compute: dict[int, list[tuple[int, Any]]],
        graphics: dict[int, list[tuple[int, Any]]] | None = None,
        names: dict[int, Any] | None = None,
        fail: str | None = None,
    ) -> None:
        self.compute, self.graphics, self.names, self.fail = (
            compute,
            graphics or {},
            names or {},
            fail,
        )
        self.calls: list[str] = []

    def _maybe_fail(self, what: str) -> None:
        self.calls.append(what)
        if self.fail == what:
            raise FakeNvmlError(what)

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        self._maybe_fail("init")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        self._maybe_fail("handle")
        return i

    def _procs(self, table: dict[int, list[tuple[int, Any]]], handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in table.get(handle, [])]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:  # noqa: N802
        self._maybe_fail("compute")
        return self._procs(self.compute, handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:  # noqa: N802
        return self._procs(self.graphics, handle)

    def nvmlSystemGetProcessName(self, pid: int) -> Any:  # noqa: N802
        if pid not in self.names:
            raise FakeNvmlError("not found")
        return self.names[pid]


def gpu(name: str, physical: int | None) -> GPUInfo:
    return GPUInfo(
        DeviceSpec(name, "gpu", "cuda", 24 << 30, 24 << 30), "NVIDIA GeForce RTX 4090", 0, physical
    )


# CUDA_VISIBLE_DEVICES=1,0: llama.cpp's order is not NVML's
GPUS = (
    gpu("CUDA0", 1),
    gpu("CUDA1", 0),
)


@pytest.mark.parametrize(
    ("nvml", "expected"),
    [
        # one process in both lists counts once (its larger figure); this process is left out;
        # NVML's name is a path
        (
            FakeNvml(
                {1: [(100, 900 * MIB), (42, 5000 * MIB)], 0: [(200, 300 * MIB)]},
                {1: [(100, 120 * MIB)]},
                {100: b"/usr/lib/firefox/firefox --type=gpu", 200: "python3"},
            ),
            [
                GpuProcess("CUDA0", 100, "firefox", 900 * MIB),
                GpuProcess("CUDA1", 200, "python3", 300 * MIB),
            ],
        ),
        # the driver does not say (None, as under WDDM) or says 0: not counted; no name: the pid
        (
            FakeNvml({1: [(7, None), (8, 0), (9, 512 * MIB)]}),
            [GpuProcess("CUDA0", 9, "9", 512 * MIB)],
        ),
        (FakeNvml({}, fail="init"), []),  # no NVIDIA driver
        (
            FakeNvml({1: [(9, 512 * MIB)]}, fail="compute"),
            [],
        ),  # an error mid-way: nothing rather than half
    ],
)
def test_gpu_processes_from_nvml(nvml: FakeNvml, expected: list[GpuProcess]) -> None:
    assert list(gpu_processes(GPUS, nvml, own_pid=42)) == expected
    if nvml.fail != "init":
        assert nvml.calls[-1] == "shutdown"


def test_a_gpu_without_a_physical_index_is_not_asked() -> None:
    nvml = FakeNvml({0: [(9, 512 * MIB)]})
    assert gpu_processes((gpu("Vulkan0", None),), nvml, own_pid=1) == ()
    assert "handle" not in nvml.calls


A, B = GpuProcess("CUDA0", 1, "a", 200 * MIB), GpuProcess("CUDA0", 2, "b", 100 * MIB)
C, D = GpuProcess("CUDA1", 3, "c", 400 * MIB), GpuProcess("CUDA1", 4, "d", 900 * MIB)


@pytest.mark.parametrize(
    ("procs", "expected"),
    [
        ([], []),
        ([GpuProcess("CUDA0", 1, "a", 299 * MIB)], []),  # below a few hundred MiB: not worth a line
        (
            [A, B],
            [OthersInUse("CUDA0", 300 * MIB, (A, B))],
        ),  # 300 MiB together: named, largest first
        (
            [C, GpuProcess("CUDA0", 1, "a", 100 * MIB), D],
            [OthersInUse("CUDA1", 1300 * MIB, (D, C))],
        ),
    ],
)
def test_others_in_use(procs: list[GpuProcess], expected: list[OthersInUse]) -> None:
    assert list(others_in_use(procs)) == expected


@pytest.mark.parametrize(
    ("used", "per_1000", "room", "tokens"),
    [
        (1000 * MIB, 100.0, 1 << 20, 10000),
        (1000 * MIB, 100.0, 4096, 4096),  # no more than the wanted context
        (1000 * MIB, None, 4096, None),
        (1000 * MIB, 0.0, 4096, None),
        (1000 * MIB, 100.0, 0, 0),
    ],
)
def test_tokens_for(used: int, per_1000: float | None, room: int, tokens: int | None) -> None:
    assert tokens_for(used, per_1000, room) == tokens


def test_plan_names_them_and_the_context_closing_them_would_give(fixed_host) -> None:
    """QWEN on an RTX 4080 reaches 7,424 of 32,768 tokens at 56.0 MiB per 1,000 tokens."""
    from llamafit.commands.plan import run_plan
    from llamafit.commands.prepared import ModelRef, Request
    from llamafit.fit.solver import Policy
    from llamafit.machine.pick import MachineSpec

    procs = (
        GpuProcess("CUDA0", 11, "firefox", 700 * MIB),
        GpuProcess("CUDA0", 12, "python3", 1500 * MIB),
        GpuProcess("CUDA0", 13, "Xorg", 60 * MIB),
        GpuProcess("CUDA0", 14, "code", 50 * MIB),
    )
    env = {
        k: os.environ[k]
        for k in ("LLAMAFIT_CACHE_DIR", "LLAMAFIT_HOST_BANDWIDTH", "LLAMAFIT_HOST_FLOPS")
    }
    # the host's rates pinned (conftest)
    request = Request(ModelRef(str(QWEN)), MachineSpec("rtx4080"), env=env)
    report = run_plan(request, Policy(), processes=procs)
    (notice,) = [w for w in report.json["warnings"] if w["code"] == "gpu_in_use"]
    per_1000 = report.json["mib_per_1000_tokens"]
    assert int(2310 / per_1000 * 1000) > 32768 - 7424  # more than is left up to the trained context
    tokens = 32768 - 7424
    assert notice == {
        "code": "gpu_in_use",
        "device": "CUDA0",
        "used_bytes": 2310 * MIB,
        "processes": [
            {"pid": 12, "name": "python3", "used_bytes": 1500 * MIB},
            {"pid": 11, "name": "firefox", "used_bytes": 700 * MIB},
            {"pid": 13, "name": "Xorg", "used_bytes": 60 * MIB},
            {"pid": 14, "name": "code", "used_bytes": 50 * MIB},
        ],
        "tokens": tokens,
        "text": (
            "CUDA0: other processes use 2,310 MiB (python3 1,500, firefox 700, Xorg 60, …); "
            f"closing them would give about {tokens:,} more tokens per slot; --use total plans "
            "for the idle card"
        ),
    }
    assert report.text.splitlines()[-3:] == [
        "Note       CUDA0: other processes use 2,310 MiB (python3 1,500, firefox 700,",
        f"           Xorg 60, …); closing them would give about {tokens:,} more tokens per",
        "           slot; --use total plans for the idle card",
    ]
    json.dumps(report.json)  # the notice is plain data
