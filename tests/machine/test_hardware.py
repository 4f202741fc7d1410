"""Hardware detection from recorded inputs (a stand-in pynvml, fake sysfs trees, a fake sysctl),
`--gpu` / `--use` / `--rpc` parsing and the `llamafit gpus` report. Never the real hardware."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llamafit.errors import InputError
from llamafit.machine.devices import DeviceSpec, cuda_overhead_bytes, host
from llamafit.machine.hardware import (
    GPUInfo,
    Hardware,
    detect,
    device_specs,
    fit_devices,
    given,
    parse_gpu_option,
    parse_rpc_option,
)
from llamafit.report.gpus import gpus_json, gpus_text

GiB = 1 << 30
MiB = 1 << 20
HOST = host(64 * GiB, 48 * GiB)


def _host() -> DeviceSpec:
    return HOST


# ---- a stand-in pynvml with recorded values ----


class NVMLError(Exception):
    pass


@dataclass(frozen=True)
class RecordedGPU:
    name: str
    uuid: str
    bus_id: str
    total: int
    used: int
    bus_width: int | None  # None: NVML_ERROR_NOT_SUPPORTED
    mem_mhz: int


RTX4090 = RecordedGPU(
    "NVIDIA GeForce RTX 4090",
    "GPU-aaaa1111-2222-3333-4444-555566667777",
    "00000000:01:00.0",
    24564 * MiB,
    1000 * MiB,
    384,
    10501,
)
RTX3060 = RecordedGPU(
    "NVIDIA GeForce RTX 3060",
    "GPU-bbbb1111-2222-3333-4444-555566667777",
    "00000000:02:00.0",
    12288 * MiB,
    300 * MiB,
    192,
    7501,
)


class FakeNVML:
    """Exactly the pynvml calls hardware.py makes; old pynvml returned bytes, so names are bytes."""

    NVMLError = NVMLError
    NVML_CLOCK_MEM = 2

    def __init__(self, gpus: list[RecordedGPU], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[str] = []

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> RecordedGPU:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: RecordedGPU) -> bytes:
        return h.name.encode()

    def nvmlDeviceGetUUID(self, h: RecordedGPU) -> str:
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h: RecordedGPU) -> Any:
        return SimpleNamespace(busId=h.bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, h: RecordedGPU) -> Any:
        return SimpleNamespace(total=h.total, free=h.total - h.used, used=h.used)

    def nvmlDeviceGetMemoryBusWidth(self, h: RecordedGPU) -> int:
        if h.bus_width is None:
            raise NVMLError("Not Supported")
        return h.bus_width

    def nvmlDeviceGetMaxClockInfo(self, h: RecordedGPU, clock: int) -> int:
        assert clock == self.NVML_CLOCK_MEM
        return h.mem_mhz


def _not_apple(name: str) -> str | None:
    return None


def _cuda(i: int, rec: RecordedGPU, physical: int, bandwidth: int | None) -> GPUInfo:
    # the recorded driver answers no compute capability: context + the pre-Hopper cuBLAS workspace
    spec = DeviceSpec(
        f"CUDA{i}",
        "gpu",
        "cuda",
        rec.total,
        rec.total - rec.used,
        overhead_bytes=cuda_overhead_bytes(None),
    )
    return GPUInfo(
        spec, rec.name, i, physical, rec.uuid, rec.bus_id, "550.54.15", bandwidth, rec.used
    )


BW_4090 = 48 * 10501 * 10**6 * 2  # 384-bit × 10501 MHz × 2 = 1008.096 GB/s
BW_3060 = 24 * 7501 * 10**6 * 2  # 360.048 GB/s
ORDER_NOTE = (
    "GPUs differ: CUDA numbers them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; shown in "
    "PCI order"
)


@pytest.mark.parametrize(
    ("env", "physical", "notes"),
    [
        ({}, (0, 1), (ORDER_NOTE,)),
        ({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, (0, 1), ()),
        ({"CUDA_VISIBLE_DEVICES": "1,0"}, (1, 0), (ORDER_NOTE,)),
        ({"CUDA_VISIBLE_DEVICES": "1"}, (1,), ()),
        ({"CUDA_VISIBLE_DEVICES": " 1 "}, (1,), ()),
        ({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, (1,), ()),  # a unique UUID prefix
        (
            {"CUDA_VISIBLE_DEVICES": "gpu-bbbb1111-2222-3333-4444-555566667777,0"},
            (1, 0),
            (ORDER_NOTE,),
        ),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, (), ()),
        ({"CUDA_VISIBLE_DEVICES": ""}, (), ()),
        (
            {"CUDA_VISIBLE_DEVICES": "0,7,1"},
            (0,),
            ("CUDA_VISIBLE_DEVICES=0,7,1: '7' names no GPU here; it and the rest are ignored",),
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "0,0"},
            (0,),
            ("CUDA_VISIBLE_DEVICES=0,0: '0' names no GPU here; it and the rest are ignored",),
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-"},
            (),  # ambiguous prefix
            ("CUDA_VISIBLE_DEVICES=GPU-: 'GPU-' names no GPU here; it and the rest are ignored",),
        ),
    ],
)
def test_nvml_visible_devices(
    env: dict[str, str], physical: tuple[int, ...], notes: tuple[str, ...], tmp_path: Path
) -> None:
    nvml = FakeNVML([RTX4090, RTX3060])
    hw = detect(env, nvml=nvml, sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    recs, bws = (RTX4090, RTX3060), (BW_4090, BW_3060)
    expected = tuple(_cuda(i, recs[p], p, bws[p]) for i, p in enumerate(physical))
    assert hw == Hardware(expected, HOST, "nvml", notes)
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_bandwidth_not_supported_is_none(tmp_path: Path) -> None:
    rec = RecordedGPU("Tesla T4", "GPU-cccc", "00000000:03:00.0", 15360 * MiB, 0, None, 5001)
    hw = detect({}, nvml=FakeNVML([rec]), sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    assert hw.gpus == (_cuda(0, rec, 0, None),)


class FakeNVMLWithCC(FakeNVML):
    """A driver that answers the compute capability (pynvml: a (major, minor) pair)."""

    def nvmlDeviceGetCudaComputeCapability(self, h: RecordedGPU) -> tuple[int, int]:
        return (8, 9) if "4090" in h.name else (9, 0)


@pytest.mark.parametrize(
    ("rec", "cc", "overhead"),
    [(RTX4090, 890, cuda_overhead_bytes(8)), (RTX3060, 900, cuda_overhead_bytes(9))],
)
def test_nvml_compute_capability(rec: RecordedGPU, cc: int, overhead: int, tmp_path: Path) -> None:
    """ggml-cuda's numbering (100 x major + 10 x minor): the flash-attention kernel's choice."""
    nvml = FakeNVMLWithCC([rec])
    hw = detect({}, nvml=nvml, sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    assert (hw.gpus[0].spec.cc, hw.gpus[0].spec.overhead_bytes) == (cc, overhead)


@pytest.mark.parametrize(
    ("nvml", "first_note"),
    [
        (FakeNVML([], init_error="Driver Not Loaded"), "nvml: Driver Not Loaded"),
        (FakeNVML([]), "nvml: no NVIDIA GPU"),
    ],
)
def test_nvml_falls_through_with_reason(nvml: FakeNVML, first_note: str, tmp_path: Path) -> None:
    hw = detect({}, nvml=nvml, sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    drm = tmp_path / "class" / "drm"
    assert hw == Hardware(
        (), HOST, "none", (first_note, f"sysfs: no {drm}", "sysctl: not Apple Silicon")
    )


def test_pynvml_not_importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml → ImportError
    hw = detect({}, sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    assert hw.source == "none"
    assert hw.notes[0].startswith("nvml: pynvml not importable (")


# ---- AMD via a fake sysfs tree ----


def _card(root: Path, name: str, files: dict[str, str]) -> None:
    dev = root / "class" / "drm" / name / "device"
    dev.mkdir(parents=True)
    for fname, text in files.items():
        (dev / fname).write_text(text + "\n")


MI210 = {
    "vendor": "0x1002",
    "device": "0x740f",
    "product_name": "AMD Instinct MI210",
    "unique_id": "0x1a2b3c4d5e6f7081",
    "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0",
    "mem_info_vram_total": str(64 * GiB),
    "mem_info_vram_used": str(10 * MiB),
}
RX7900 = {
    "vendor": "0x1002",
    "device": "0x744c",
    "unique_id": "0x99aa",
    "mem_info_vram_total": str(24 * GiB),
    "mem_info_vram_used": str(2 * GiB),
}
NVIDIA_CARD = {"vendor": "0x10de", "mem_info_vram_total": str(8 * GiB), "mem_info_vram_used": "0"}


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    _card(tmp_path, "card0", MI210)
    _card(tmp_path, "card1", NVIDIA_CARD)  # another vendor: ignored
    _card(tmp_path, "card2", RX7900)
    # no VRAM files (e.g. a display-only GPU): ignored
    _card(tmp_path, "card10", {"vendor": "0x1002"})
    (tmp_path / "class" / "drm" / "card0-DP-1").mkdir()  # connectors and render nodes: ignored
    (tmp_path / "class" / "drm" / "renderD128").mkdir()
    return tmp_path


def _rocm(i: int, which: str) -> GPUInfo:
    if which == "mi210":
        spec = DeviceSpec(f"ROCm{i}", "gpu", "rocm", 64 * GiB, 64 * GiB - 10 * MiB)
        return GPUInfo(
            spec,
            "AMD Instinct MI210",
            i,
            0,
            "GPU-1a2b3c4d5e6f7081",
            "0000:03:00.0",
            used_bytes=10 * MiB,
        )
    spec = DeviceSpec(f"ROCm{i}", "gpu", "rocm", 24 * GiB, 22 * GiB)
    return GPUInfo(spec, "AMD GPU 0x744c", i, 1, "GPU-99aa", None, used_bytes=2 * GiB)


NVML_OFF = "nvml: NVML Shared Library Not Found"


@pytest.mark.parametrize(
    ("env", "cards", "notes"),
    [
        ({}, ("mi210", "rx7900"), ()),
        ({"HIP_VISIBLE_DEVICES": "1"}, ("rx7900",), ()),
        ({"HIP_VISIBLE_DEVICES": "1,0"}, ("rx7900", "mi210"), ()),
        ({"CUDA_VISIBLE_DEVICES": "1"}, ("rx7900",), ()),  # HIP reads it too
        (
            {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"},
            ("mi210",),
            (),
        ),  # HIP's own wins
        ({"ROCR_VISIBLE_DEVICES": "GPU-99aa"}, ("rx7900",), ()),
        (
            {"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"},
            ("mi210",),
            (),
        ),  # HIP indexes ROCR's list
        ({"HIP_VISIBLE_DEVICES": ""}, (), ()),
        (
            {"HIP_VISIBLE_DEVICES": "2"},
            (),
            ("HIP_VISIBLE_DEVICES=2: '2' names no GPU here; it and the rest are ignored",),
        ),
    ],
)
def test_sysfs_amd(
    env: dict[str, str], cards: tuple[str, ...], notes: tuple[str, ...], sysfs: Path
) -> None:
    hw = detect(
        env,
        nvml=FakeNVML([], init_error="NVML Shared Library Not Found"),
        sysfs_root=sysfs,
        sysctl=_not_apple,
        host_fn=_host,
    )
    expected = tuple(_rocm(i, c) for i, c in enumerate(cards))
    assert hw == Hardware(expected, HOST, "sysfs", (NVML_OFF, *notes))


def test_sysfs_without_amd_falls_through(tmp_path: Path) -> None:
    _card(tmp_path, "card0", NVIDIA_CARD)
    hw = detect({}, nvml=FakeNVML([]), sysfs_root=tmp_path, sysctl=_not_apple, host_fn=_host)
    no_amd = "sysfs: no AMD GPU with mem_info_vram_total"
    assert hw.notes == ("nvml: no NVIDIA GPU", no_amd, "sysctl: not Apple Silicon")


# ---- Apple Silicon via a fake sysctl ----

M2_MAX_96 = {
    "hw.optional.arm64": "1",
    "hw.memsize": str(96 * GiB),
    "machdep.cpu.brand_string": "Apple M2 Max",
}


@pytest.mark.parametrize(
    ("values", "usable", "how"),
    [
        (
            {**M2_MAX_96, "iogpu.wired_limit_mb": "0"},
            72 * GiB,
            "2/3 of RAM up to 36 GiB, 3/4 above",
        ),
        (M2_MAX_96, 72 * GiB, "2/3 of RAM up to 36 GiB, 3/4 above"),  # older macOS: no such name
        ({**M2_MAX_96, "iogpu.wired_limit_mb": "90000"}, 90000 * MiB, "iogpu.wired_limit_mb=90000"),
        (
            {"hw.optional.arm64": "1", "hw.memsize": str(16 * GiB)},
            11_453_246_122,
            "2/3 of RAM up to 36 GiB, 3/4 above",
        ),
    ],
)
def test_sysctl_apple(values: dict[str, str], usable: int, how: str, tmp_path: Path) -> None:
    hw = detect({}, nvml=FakeNVML([]), sysfs_root=tmp_path, sysctl=values.get, host_fn=_host)
    name = values.get("machdep.cpu.brand_string", "Apple Silicon")
    gpu = GPUInfo(DeviceSpec("MTL0", "gpu", "metal", usable, usable), name, 0, 0, unified=True)
    drm = tmp_path / "class" / "drm"
    notes = (
        "nvml: no NVIDIA GPU",
        f"sysfs: no {drm}",
        f"MTL0: unified memory; usable = Metal working set ({how})",
    )
    assert hw == Hardware((gpu,), HOST, "sysctl", notes)


@pytest.mark.parametrize(
    ("values", "note"),
    [
        ({"hw.memsize": str(16 * GiB)}, "sysctl: not Apple Silicon"),  # an Intel Mac
        ({"hw.optional.arm64": "1"}, "sysctl: no hw.memsize"),
    ],
)
def test_sysctl_skips(values: dict[str, str], note: str, tmp_path: Path) -> None:
    hw = detect({}, nvml=FakeNVML([]), sysfs_root=tmp_path, sysctl=values.get, host_fn=_host)
    assert (hw.source, hw.notes[-1]) == ("none", note)


# ---- --gpu ----


@pytest.mark.parametrize(
    ("spec", "backend", "expected"),
    [
        ("cpu", "cuda", []),
        (" CPU ", "cuda", []),
        ("24GiB", "cuda", [("CUDA0", "cuda", 24 * GiB, "24 GiB GPU", None)]),
        (
            "24G,12G",
            "rocm",
            [
                ("ROCm0", "rocm", 24 * GiB, "24 GiB GPU", None),
                ("ROCm1", "rocm", 12 * GiB, "12 GiB GPU", None),
            ],
        ),
        (
            "rtx4090,rtx3060-12gb",
            "cuda",
            [
                ("CUDA0", "cuda", 24 * GiB, "NVIDIA GeForce RTX 4090", 1008 * 10**9),
                ("CUDA1", "cuda", 12 * GiB, "NVIDIA GeForce RTX 3060", 360 * 10**9),
            ],
        ),
        (
            "RTX_4090, 12G",
            "cuda",
            [
                ("CUDA0", "cuda", 24 * GiB, "NVIDIA GeForce RTX 4090", 1008 * 10**9),
                ("CUDA1", "cuda", 12 * GiB, "12 GiB GPU", None),
            ],
        ),
        (
            "2xh100",
            "cuda",
            [
                ("CUDA0", "cuda", 80 * GiB, "NVIDIA H100 80GB HBM3", 3350 * 10**9),
                ("CUDA1", "cuda", 80 * GiB, "NVIDIA H100 80GB HBM3", 3350 * 10**9),
            ],
        ),
        (
            "mi250",
            "cuda",
            [
                ("ROCm0", "rocm", 64 * GiB, "AMD Instinct MI250", 1638_400_000_000),
                ("ROCm1", "rocm", 64 * GiB, "AMD Instinct MI250", 1638_400_000_000),
            ],
        ),
        (
            "mi300x,64G",
            "cuda",
            [
                ("ROCm0", "rocm", 192 * GiB, "AMD Instinct MI300X", 5300 * 10**9),
                ("ROCm1", "rocm", 64 * GiB, "64 GiB GPU", None),
            ],
        ),  # sizes follow the card
        (
            "rtx4090",
            "vulkan",
            [("Vulkan0", "vulkan", 24 * GiB, "NVIDIA GeForce RTX 4090", 1008 * 10**9)],
        ),
        ("m2-max-96gb", "cuda", [("MTL0", "metal", 72 * GiB, "Apple M2 Max", 400 * 10**9)]),
        ("36G", "metal", [("MTL0", "metal", 36 * GiB, "36 GiB GPU", None)]),
    ],
)
def test_parse_gpu_option(
    spec: str, backend: str, expected: list[tuple[str, str, int, str, int | None]]
) -> None:
    got = parse_gpu_option(spec, backend=backend)
    assert [
        (g.spec.name, g.spec.backend, g.spec.total_bytes, g.name, g.bandwidth_bytes_per_s)
        for g in got
    ] == expected
    assert all(g.spec.free_bytes == g.spec.total_bytes and g.index == i for i, g in enumerate(got))
    assert all(g.unified == (g.spec.backend == "metal") for g in got)


@pytest.mark.parametrize(
    ("spec", "backend", "message"),
    [
        (
            "rtx4090,mi300x",
            "cuda",
            "--gpu mixes cuda and rocm cards; one llama.cpp build drives one GPU backend",
        ),
        (
            "m2-max-96gb,24G",
            "cuda",
            "Metal drives one GPU (MTL0); give one Apple Silicon machine to --gpu",
        ),
        (
            "rtx4091",
            "cuda",
            "unknown GPU 'rtx4091'; did you mean rtx4090, rtx4090d, rtx-a400, rtx5090, rtx4080? "
            "(or give a size such as 24GiB)",
        ),
        (
            ",",
            "cuda",
            "--gpu needs at least one size or GPU name, e.g. --gpu 24GiB or --gpu rtx4090",
        ),
        ("0xrtx4090", "cuda", "--gpu 0xrtx4090: a count must be 1 to 16 (e.g. 2xrtx4090)"),
        ("24G", "opencl", "unknown backend 'opencl'; expected one of cuda, rocm, vulkan, metal"),
    ],
)
def test_parse_gpu_option_errors(spec: str, backend: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_gpu_option(spec, backend=backend)
    assert str(err.value) == message


# ---- --use, --rpc ----

DETECTED = (_cuda(0, RTX4090, 0, BW_4090), _cuda(1, RTX3060, 1, BW_3060))


@pytest.mark.parametrize(
    ("use", "free"),
    [("free", [23564 * MiB, 11988 * MiB]), ("total", [24564 * MiB, 12288 * MiB])],
)
def test_device_specs_use(use: str, free: list[int]) -> None:
    specs = device_specs(DETECTED, use)
    assert [(s.name, s.total_bytes, s.free_bytes) for s in specs] == [
        ("CUDA0", 24564 * MiB, free[0]),
        ("CUDA1", 12288 * MiB, free[1]),
    ]


def test_device_specs_bad_use() -> None:
    with pytest.raises(InputError, match=r"^--use must be free or total, not 'half'$"):
        device_specs(DETECTED, "half")


def test_parse_rpc_and_device_order() -> None:
    rpc = parse_rpc_option("192.168.1.5:50052=24GiB, [::1]:50053=12G")
    assert rpc == (
        DeviceSpec("RPC0[192.168.1.5:50052]", "gpu", "rpc", 24 * GiB, 24 * GiB),
        DeviceSpec("RPC0[[::1]:50053]", "gpu", "rpc", 12 * GiB, 12 * GiB),  # device 0 of its worker
    )
    names = [s.name for s in fit_devices(DETECTED, use="total", rpc=rpc)]
    # RPC first, as llama.cpp
    assert names == [
        "RPC0[192.168.1.5:50052]",
        "RPC0[[::1]:50053]",
        "CUDA0",
        "CUDA1",
    ]


def test_rpc_workers_without_a_size_are_asked() -> None:
    asked: list[list[str]] = []

    def query(endpoints: list[str]) -> dict[str, tuple[int, int]]:
        asked.append(list(endpoints))
        return {"10.0.0.2:50052": (24105 << 20, 24000 << 20)}

    rpc = parse_rpc_option("10.0.0.1:50052=8GiB,10.0.0.2:50052", query)  # type: ignore[arg-type]
    assert asked == [["10.0.0.2:50052"]]
    assert rpc[1] == DeviceSpec("RPC0[10.0.0.2:50052]", "gpu", "rpc", 24105 << 20, 24000 << 20)
    with pytest.raises(
        InputError, match=r"^--rpc 10\.0\.0\.3:1: cannot ask the worker for its memory"
    ):
        parse_rpc_option("10.0.0.3:1", query)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^--rpc 10\.0\.0\.3:1: cannot ask"):
        parse_rpc_option("10.0.0.3:1")  # no way to ask


@pytest.mark.parametrize(
    "spec", ["host=24G", ":50052=24G", "host:99999=24G", "host:port=24G", "host"]
)
def test_parse_rpc_errors(spec: str) -> None:
    wants = r"^--rpc wants host:port\[=SIZE\] \(e\.g\. 192\.168\.1\.5:50052=24GiB\), not '"
    with pytest.raises(InputError, match=wants):
        parse_rpc_option(spec)


def test_parse_rpc_bad_size() -> None:
    with pytest.raises(InputError, match=r"^cannot read 'lots' as a memory size"):
        parse_rpc_option("host:50052=lots")


# ---- llamafit gpus report ----

REPORT_HW = Hardware(DETECTED[1:], host(64 * GiB, 48 * GiB), "nvml", ("sysfs: not tried",))


def test_gpus_json() -> None:
    assert gpus_json(REPORT_HW) == {
        "source": "nvml",
        "gpus": [
            {
                "index": 1,
                "physical_index": 1,
                "name": "NVIDIA GeForce RTX 3060",
                "device": "CUDA1",
                "uuid": "GPU-bbbb1111-2222-3333-4444-555566667777",
                "pci_bus_id": "00000000:02:00.0",
                "total_bytes": 12288 * MiB,
                "free_bytes": 11988 * MiB,
                "used_bytes": 300 * MiB,
                "driver": "550.54.15",
                "bandwidth_bytes_per_s": BW_3060,
                "backend": "cuda",
                "unified": False,
            }
        ],
        "host": {"total_bytes": 64 * GiB, "available_bytes": 48 * GiB},
        "notes": ["sysfs: not tried"],
    }


@pytest.mark.parametrize(
    ("hw", "text"),
    [
        (
            REPORT_HW,
            "1 GPU (source: nvml, driver 550.54.15):\n"
            "  device  name                     total     free      used     bandwidth  index  "
            "pci bus id        uuid\n"
            "  CUDA1   NVIDIA GeForce RTX 3060  12.0 GiB  11.7 GiB  0.3 GiB  360 GB/s   GPU 1  "
            "00000000:02:00.0"
            "  GPU-bbbb1111-2222-3333-4444-555566667777\n"
            "Host RAM: 64.0 GiB total, 48.0 GiB available\n"
            "note: sysfs: not tried",
        ),
        (
            given(parse_gpu_option("24G"), HOST),
            "1 GPU (source: given):\n"
            "  device  name        total     free      used  bandwidth  index  pci bus id  uuid\n"
            "  CUDA0   24 GiB GPU  24.0 GiB  24.0 GiB  ?     ?\n"
            "Host RAM: 64.0 GiB total, 48.0 GiB available",
        ),
        (
            Hardware((), HOST, "none", ("nvml: Driver Not Loaded",)),
            "No GPU found (source: none): llama.cpp would run on the CPU.\n"
            "Host RAM: 64.0 GiB total, 48.0 GiB available\n"
            "note: nvml: Driver Not Loaded",
        ),
    ],
)
def test_gpus_text(hw: Hardware, text: str) -> None:
    assert gpus_text(hw) == text


def test_gpus_command_prints_what_detection_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from llamafit.cli import cli
    from llamafit.machine import hardware

    gpu = GPUInfo(
        DeviceSpec("CUDA0", "gpu", "cuda", 24 << 30, 20 << 30),
        "NVIDIA GeForce RTX 4090",
        0,
        uuid="GPU-1234",
        bandwidth_bytes_per_s=1008 * 10**9,
    )
    found = Hardware((gpu,), host(64 << 30, 32 << 30), "nvml")
    from llamafit.server import find

    monkeypatch.setattr(hardware, "detect", lambda *a, **k: found)
    # no llama-server here: detection alone
    monkeypatch.setattr(find, "local_server", lambda env, notes=None: None)
    as_json = CliRunner().invoke(cli, ["gpus", "--json"])
    as_text = CliRunner().invoke(cli, ["gpus"])
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (0, gpus_json(found))
    assert (as_text.exit_code, as_text.stdout) == (0, gpus_text(found) + "\n")


def test_an_apu_card_reads_its_carve_out_and_gtt(tmp_path: Path) -> None:
    """amdgpu's mem_info_gtt_*: the host RAM the GPU may map, for unified.py's one pool."""
    from llamafit.machine.hardware import _sysfs_gpus

    strix = {
        "vendor": "0x1002",
        "product_name": "AMD Radeon 8060S Graphics",
        "mem_info_vram_total": str(64 * GiB),
        "mem_info_vram_used": str(1 * GiB),
        "mem_info_gtt_total": str(48 * GiB),
        "mem_info_gtt_used": str(512 * MiB),
    }
    _card(tmp_path, "card0", strix)
    (gpu,), _ = _sysfs_gpus(tmp_path, {})
    assert (gpu.spec.total_bytes, gpu.spec.free_bytes, gpu.used_bytes) == (
        64 * GiB,
        63 * GiB,
        1 * GiB,
    )
    assert (gpu.shared_total_bytes, gpu.shared_used_bytes) == (48 * GiB, 512 * MiB)


# ---- host RAM without psutil: /proc/meminfo read as psutil's Linux virtual_memory reads it ----

_MEMINFO = (
    "MemTotal:       65536000 kB\nMemFree:         1000000 kB\nMemAvailable:   50000000 kB\n"
    "Buffers:          20000 kB\nCached:         3000000 kB\nShmem:            40000 kB\n"
    "Active:         5000000 kB\nInactive:       6000000 kB\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_MEMINFO, (65536000 * 1024, 50000000 * 1024)),
        # psutil computes or corrects these itself (or warns): left to it
        (_MEMINFO.replace("MemAvailable:   50000000", "MemAvailable:   0"), None),
        (_MEMINFO.replace("MemAvailable:   50000000", "MemAvailable:   99999999"), None),
        ("".join(x for x in _MEMINFO.splitlines(True) if "MemAvailable" not in x), None),
        ("".join(x for x in _MEMINFO.splitlines(True) if "Buffers" not in x), None),
        (_MEMINFO + "Broken:\n", None),
        ("", None),
    ],
)
def test_linux_meminfo(tmp_path: Path, text: str, expected: tuple[int, int] | None) -> None:
    from llamafit.machine.hardware import linux_meminfo

    (tmp_path / "meminfo").write_text(text)
    if not sys.platform.startswith("linux"):
        expected = None
    assert linux_meminfo(str(tmp_path / "meminfo")) == expected
    assert linux_meminfo(str(tmp_path / "missing")) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo is Linux's")
def test_linux_meminfo_total_is_psutils() -> None:
    import psutil

    from llamafit.machine.hardware import linux_meminfo

    found = linux_meminfo()
    assert found is not None and found[0] == psutil.virtual_memory().total
