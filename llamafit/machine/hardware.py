"""Hardware detection (an edge: the core takes DeviceSpec values as parameters).

Sources, first that finds GPUs wins: NVML (NVIDIA), sysfs (AMD on Linux), sysctl (Apple Silicon);
the host's RAM always comes from psutil. Every external thing is a parameter, so tests drive it
with recorded values. `--gpu`, `--use` and `--rpc` parsing live here too, next to what they replace.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..safe_text import printable
from ..units import GIB, MIB
from . import catalog as gpu_catalog
from .devices import (
    BACKEND_DEVICE_PREFIX,
    DeviceSpec,
    SizeTooLarge,
    cuda_overhead_bytes,
    host,
    parse_size,
)

Sysctl = Callable[[str], "str | None"]  # sysctl name → value, None when the name is unknown
_AMD_VENDOR = "0x1002"
_ORDER_NOTE = (
    "GPUs differ: CUDA numbers them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; shown in "
    "PCI order"
)


@dataclass(frozen=True, slots=True)
class GPUInfo:
    """One GPU as llama.cpp would see it: `spec.name` is CUDA0/ROCm0/MTL0… in visible order."""

    spec: DeviceSpec
    name: str  # the driver's name: "NVIDIA GeForce RTX 4090"
    index: int  # llama.cpp's device number (position among visible devices)
    physical_index: int | None = None  # the driver's index (NVML / card order); None when given
    uuid: str | None = None
    pci_bus_id: str | None = None
    driver: str | None = None
    bandwidth_bytes_per_s: int | None = None
    used_bytes: int | None = None
    unified: bool = False  # memory shared with the host (Apple Silicon)
    # host RAM the GPU may map: amdgpu's GTT (mem_info_gtt_total / _used); None where unknown
    shared_total_bytes: int | None = None
    shared_used_bytes: int | None = None


@dataclass(frozen=True)
class Hardware:
    gpus: tuple[GPUInfo, ...]
    host: DeviceSpec
    source: str  # nvml | sysfs | sysctl | none | given
    notes: tuple[str, ...] = ()  # why sources were skipped, visibility caveats


class _Skip(Exception):
    """A source found nothing usable; the message says why."""


def detect_host() -> DeviceSpec:
    """Host RAM from psutil (total and available) and the CPU features repacked weights need."""
    ram = linux_meminfo()
    if ram is None:
        import psutil

        vm = psutil.virtual_memory()
        ram = int(vm.total), int(vm.available)
    return host(*ram, cpu_features())


# what psutil's Linux virtual_memory reads without warning that a figure is missing
_MEMINFO_FIELDS = (
    b"MemTotal: MemFree: MemAvailable: Buffers: Cached: Shmem: Active: Inactive:".split()
)


def linux_meminfo(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(total, available) bytes as psutil.virtual_memory gives them on Linux (psutil/_pslinux.py
    virtual_memory: MemTotal and MemAvailable, kB x 1024), read here without importing psutil
    (about 10 ms of a plan); None where psutil would compute or correct them (no MemAvailable,
    0, more than the total, a field missing): psutil decides."""
    if not sys.platform.startswith("linux"):
        return None
    mems: dict[bytes, int] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                fields = line.split()
                mems[fields[0]] = int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if any(k not in mems for k in _MEMINFO_FIELDS):
        return None
    total, avail = mems[b"MemTotal:"], mems[b"MemAvailable:"]
    return (total, avail) if 0 < avail <= total else None


# /proc/cpuinfo flag -> ggml_cpu_has_* name (ggml/src/ggml-cpu/ggml-cpu.c). llama.cpp's prebuilt CPU
# backends load the variant the CPU supports (GGML_CPU_ALL_VARIANTS), so the CPU's own flags decide.
# SVE is left out: its repacked layout also needs a 256-bit vector length, which cpuinfo does not say.
_CPU_FLAGS = {
    "avx2": "avx2",
    "avx512f": "avx512",
    "asimd": "neon",
    "asimddp": "dotprod",
    "i8mm": "matmul_int8",
}


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The features of memory/repack.py this CPU has: from cpuinfo's flags (x86) or Features (Arm);
    Apple silicon (no cpuinfo) has NEON and the dot product everywhere."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(_CPU_FLAGS[w] for w in value.split() if w in _CPU_FLAGS)
    except OSError:
        pass
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return frozenset({"neon", "dotprod"})
    return frozenset()


# ---- visibility (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES) ----


def _entry_index(entry: str, uuids: Sequence[str | None]) -> int | None:
    if entry.isascii() and entry.isdigit():  # not '²', which isdigit() accepts and int() refuses
        return int(entry) if len(entry) <= 9 and int(entry) < len(uuids) else None
    want = entry.lower()
    hits = [
        i
        for i, u in enumerate(uuids)
        if u and want.startswith("gpu-") and u.lower().startswith(want)
    ]
    return hits[0] if len(hits) == 1 else None


def visible_indices(
    var: str, value: str | None, uuids: Sequence[str | None]
) -> tuple[tuple[int, ...], str | None]:
    """Indices a `*_VISIBLE_DEVICES` value keeps, in its order, and a note when it drops some.

    Like the CUDA/HIP runtimes: unset → all; empty or "-1" → none; indices or unique `GPU-` UUID
    prefixes; the first invalid (or repeated) entry ends the list.
    """
    if value is None:
        return tuple(range(len(uuids))), None
    kept: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        i = _entry_index(entry, uuids)
        if i is None or i in kept:
            if entry and entry != "-1":
                return tuple(
                    kept
                ), f"{var}={value}: '{entry}' names no GPU here; it and the rest are ignored"
            break
        kept.append(i)
    return tuple(kept), None


def _renamed(gpus: Sequence[GPUInfo], order: Sequence[int], prefix: str) -> tuple[GPUInfo, ...]:
    return tuple(
        replace(gpus[p], index=i, spec=replace(gpus[p].spec, name=f"{prefix}{i}"))
        for i, p in enumerate(order)
    )


# ---- NVIDIA via NVML ----


def _text(value: str | bytes) -> str:
    """A driver's text (old pynvml gives bytes), escaped for a terminal (#37 F8, F14)."""
    return printable(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))


# the largest memory figure believed from a driver (1 PiB: far above any GPU); beyond, or
# negative, or not a number, NVML is passed over with a note (#37 F14)
MAX_DRIVER_BYTES = 1 << 50


def _bytes(value: object) -> int:
    if isinstance(value, int) and 0 <= value <= MAX_DRIVER_BYTES:
        return value
    shown = (
        repr(value)[:40]
        if not isinstance(value, int) or value.bit_length() < 64
        else "2^%d" % (value.bit_length() - 1)
    )
    raise ValueError(f"a memory figure of {shown}")


def _nvml_bandwidth(nvml: Any, handle: Any) -> int | None:
    """Bus width (bits) × max memory clock (MHz) × 2 (double data rate), in bytes/s."""
    try:
        width = nvml.nvmlDeviceGetMemoryBusWidth(handle)
        mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
    except nvml.NVMLError:
        return None  # not supported on every GPU
    return int(width) // 8 * int(mhz) * 1_000_000 * 2


def _nvml_device(nvml: Any, i: int, driver: str) -> GPUInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(i)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        cc_major: int | None = int(major)
        cc: int | None = 100 * int(major) + 10 * int(minor)  # ggml-cuda's numbering (DeviceSpec.cc)
    except (nvml.NVMLError, AttributeError, TypeError, ValueError):
        cc_major = cc = None
    spec = DeviceSpec(
        f"CUDA{i}",
        "gpu",
        "cuda",
        _bytes(mem.total),
        _bytes(mem.free),
        overhead_bytes=cuda_overhead_bytes(cc_major),
        cc=cc,
    )
    return GPUInfo(
        spec=spec,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        index=i,
        physical_index=i,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        driver=driver,
        bandwidth_bytes_per_s=_nvml_bandwidth(nvml, handle),
        used_bytes=_bytes(mem.used),
    )


def _nvml_all(nvml: Any) -> tuple[GPUInfo, ...]:
    nvml.nvmlInit()
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        return tuple(_nvml_device(nvml, i, driver) for i in range(nvml.nvmlDeviceGetCount()))
    finally:
        nvml.nvmlShutdown()


def _load_nvml() -> Any:
    try:
        import pynvml
    except ImportError as e:
        raise _Skip(f"nvml: pynvml not importable ({e})") from e
    return pynvml


def _nvml_gpus(nvml: Any, env: Mapping[str, str]) -> tuple[tuple[GPUInfo, ...], list[str]]:
    nvml = _load_nvml() if nvml is None else nvml
    try:
        found = _nvml_all(nvml)
    except nvml.NVMLError as e:
        raise _Skip(f"nvml: {e}") from e
    except (ValueError, TypeError, OverflowError) as e:  # odd values (#37 F14)
        raise _Skip(f"nvml: {printable(str(e))}, not believed") from e
    if not found:
        raise _Skip("nvml: no NVIDIA GPU")
    order, note = visible_indices(
        "CUDA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"), [g.uuid for g in found]
    )
    notes = [note] if note else []
    if len({found[i].name for i in order}) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append(_ORDER_NOTE)
    return _renamed(found, order, "CUDA"), notes


# ---- AMD via sysfs ----


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pci_slot(dev: Path) -> str | None:
    for line in (_read(dev / "uevent") or "").splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1]
    return None


def _amd_card(dev: Path, i: int) -> GPUInfo | None:
    total, used = _read(dev / "mem_info_vram_total"), _read(dev / "mem_info_vram_used")
    if (_read(dev / "vendor") or "").lower() != _AMD_VENDOR or total is None or used is None:
        return None
    unique = _read(dev / "unique_id")
    gtt_total, gtt_used = _read(dev / "mem_info_gtt_total"), _read(dev / "mem_info_gtt_used")
    return GPUInfo(
        spec=DeviceSpec(f"ROCm{i}", "gpu", "rocm", int(total), int(total) - int(used)),
        name=_read(dev / "product_name") or f"AMD GPU {_read(dev / 'device') or '?'}",
        index=i,
        physical_index=i,
        uuid=f"GPU-{unique.removeprefix('0x')}" if unique else None,
        pci_bus_id=_pci_slot(dev),
        used_bytes=int(used),
        shared_total_bytes=_int_or_none(gtt_total),
        shared_used_bytes=_int_or_none(gtt_used),
    )


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _sysfs_gpus(root: str | Path, env: Mapping[str, str]) -> tuple[tuple[GPUInfo, ...], list[str]]:
    drm = Path(root) / "class" / "drm"
    if not drm.is_dir():
        raise _Skip(f"sysfs: no {drm}")
    cards = sorted(
        (p for p in drm.iterdir() if re.fullmatch(r"card\d+", p.name)),
        key=lambda p: int(p.name[4:]),
    )
    found: list[GPUInfo] = []
    for card in cards:
        gpu = _amd_card(card / "device", len(found))
        found += [gpu] if gpu else []
    if not found:
        raise _Skip("sysfs: no AMD GPU with mem_info_vram_total")
    notes: list[str] = []
    order: Sequence[int] = range(len(found))
    # ROCR picks first, then HIP (or CUDA_VISIBLE_DEVICES, which HIP also reads) indexes what is
    # left.
    hip_var = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
    for var in ("ROCR_VISIBLE_DEVICES", hip_var):
        picked, note = visible_indices(var, env.get(var), [found[i].uuid for i in order])
        order = [order[i] for i in picked]
        notes += [note] if note else []
    return _renamed(found, order, "ROCm"), notes


# ---- Apple Silicon via sysctl ----


def run_sysctl(name: str) -> str | None:
    """`sysctl -n NAME`, None when the name is unknown or sysctl is missing."""
    import subprocess

    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _sysctl_gpus(sysctl: Sysctl | None) -> tuple[tuple[GPUInfo, ...], list[str]]:
    if sysctl is None:
        if sys.platform != "darwin":
            raise _Skip("sysctl: not macOS")
        sysctl = run_sysctl
    if sysctl("hw.optional.arm64") != "1":
        raise _Skip("sysctl: not Apple Silicon")
    ram = int(sysctl("hw.memsize") or 0)
    if ram <= 0:
        raise _Skip("sysctl: no hw.memsize")
    limit_mb = int(sysctl("iogpu.wired_limit_mb") or 0)
    usable = gpu_catalog.metal_working_set(ram, limit_mb)
    how = (
        f"iogpu.wired_limit_mb={limit_mb}" if limit_mb > 0 else "2/3 of RAM up to 36 GiB, 3/4 above"
    )
    gpu = GPUInfo(
        spec=DeviceSpec("MTL0", "gpu", "metal", usable, usable),
        name=sysctl("machdep.cpu.brand_string") or "Apple Silicon",
        index=0,
        physical_index=0,
        unified=True,
    )
    return (gpu,), [f"MTL0: unified memory; usable = Metal working set ({how})"]


# ---- detection ----


def detect(
    env: Mapping[str, str] = os.environ,
    *,
    nvml: Any = None,
    sysfs_root: str | Path = "/sys",
    sysctl: Sysctl | None = None,
    host_fn: Callable[[], DeviceSpec] = detect_host,
) -> Hardware:
    """GPUs from the first source that has any (nvml, sysfs, sysctl), the host always.

    `nvml`: a pynvml-like module (None: import pynvml); `sysctl`: a runner (None: `sysctl -n` on
    macOS).
    """
    sources: list[tuple[str, Callable[[], tuple[tuple[GPUInfo, ...], list[str]]]]] = [
        ("nvml", lambda: _nvml_gpus(nvml, env)),
        ("sysfs", lambda: _sysfs_gpus(sysfs_root, env)),
        ("sysctl", lambda: _sysctl_gpus(sysctl)),
    ]
    skipped: list[str] = []
    for source, probe in sources:
        try:
            gpus, notes = probe()
        except _Skip as e:
            skipped.append(str(e))
            continue
        return Hardware(gpus, host_fn(), source, tuple(skipped + notes))
    return Hardware((), host_fn(), "none", tuple(skipped))


# ---- --gpu / --use / --rpc ----


def _catalog_gpus(entry: gpu_catalog.CatalogEntry) -> list[GPUInfo]:
    usable = entry.usable_bytes
    align, map_align, max_alloc = entry.vk_limits or (None, None, None)
    spec = DeviceSpec(
        "",
        "gpu",
        entry.backend,
        usable,
        usable,
        entry.max_tensor_bytes,
        buffer_alignment=align,
        host_alignment=map_align,
        max_allocation_bytes=max_alloc,
        cc=entry.cc,
    )
    one = GPUInfo(
        spec,
        entry.name,
        0,
        bandwidth_bytes_per_s=entry.bandwidth_bytes_per_s,
        unified=entry.unified,
    )
    return [one] * entry.devices


def _sized_gpu(size: int) -> GPUInfo:
    return GPUInfo(DeviceSpec("", "gpu", "", size, size), f"{size / GIB:g} GiB GPU", 0)


MAX_GPUS = 16  # ggml-cuda's GGML_CUDA_MAX_DEVICES


def _option_items(spec: str) -> list[tuple[str, int]]:
    """`2xrtx4090,24G` → [("rtx4090", 2), ("24G", 1)]."""
    items: list[tuple[str, int]] = []
    for part in (p.strip() for p in spec.split(",")):
        if part:
            m = re.fullmatch(r"(\d+)\s*[x*]\s*(.+)", part, re.IGNORECASE)
            count = 1
            if m:  # no 4,300-digit int()
                count = int(m.group(1)) if len(m.group(1)) <= 4 else MAX_GPUS + 1
            items.append((m.group(2), count) if m else (part, 1))
    if any(not 1 <= count <= MAX_GPUS for _, count in items):
        shown = spec if len(spec) <= 40 else spec[:39] + "…"
        raise InputError(f"--gpu {shown}: a count must be 1 to {MAX_GPUS} (e.g. 2xrtx4090)")
    return items


def _size_or_none(item: str) -> int | None:
    try:
        return parse_size(item)
    except SizeTooLarge:
        raise
    except InputError:
        return None


MIN_GPU_BYTES = MIB


def _no_unit_hint(item: str) -> str:
    """`24` → 24GiB, `3090` → rtx3090 (a card name missing its prefix), `24000` → 24000MiB."""
    card = gpu_catalog.find(f"rtx{item}")
    if card is not None:
        return card.key
    return f"{item}GiB" if float(item) < 1024 else f"{item}MiB"


def _item_gpus(item: str) -> list[GPUInfo]:
    if re.fullmatch(r"\d+(\.\d+)?", item.strip()):
        raise InputError(
            f"--gpu {item.strip()} has no unit; did you mean {_no_unit_hint(item.strip())}?"
        )
    size = _size_or_none(item)
    if size is None:
        return _catalog_gpus(gpu_catalog.lookup(item))  # unknown → InputError with close matches
    if size < MIN_GPU_BYTES:
        raise InputError(f"--gpu {item.strip()}: a GPU needs at least 1 MiB (e.g. 24GiB)")
    return [_sized_gpu(size)]


def _list_backend(gpus: Sequence[GPUInfo], backend: str) -> str:
    """Named cards bring their backend (sizes follow them); `vulkan` drives any card."""
    if backend not in BACKEND_DEVICE_PREFIX or backend == "cpu":
        raise InputError(f"unknown backend '{backend}'; expected one of cuda, rocm, vulkan, metal")
    native = sorted({g.spec.backend for g in gpus if g.spec.backend})
    if backend == "vulkan" or not native:
        return backend
    if len(native) > 1:
        raise InputError(
            f"--gpu mixes {' and '.join(native)} cards; one llama.cpp build drives one GPU backend"
        )
    return native[0]


def parse_gpu_option(spec: str, *, backend: str = "cuda") -> tuple[GPUInfo, ...]:
    """`--gpu`: sizes (`24GiB,12G`), catalog names (`rtx4090,rtx3060-12gb`, `2xh100`), a mix, or
    `cpu`.

    `backend` names the size-given GPUs; catalog cards keep their own (except under vulkan).
    """
    if spec.strip().lower() == "cpu":
        return ()
    gpus = [
        g for item, count in _option_items(spec) for _ in range(count) for g in _item_gpus(item)
    ]
    if not gpus:
        raise InputError(
            "--gpu needs at least one size or GPU name, e.g. --gpu 24GiB or --gpu rtx4090"
        )
    chosen = _list_backend(gpus, backend)
    if chosen == "metal" and len(gpus) > 1:
        raise InputError("Metal drives one GPU (MTL0); give one Apple Silicon machine to --gpu")
    prefix = BACKEND_DEVICE_PREFIX[chosen]
    return tuple(
        replace(
            g,
            index=i,
            spec=replace(g.spec, name=f"{prefix}{i}", backend=chosen),
            unified=g.unified or chosen == "metal",
        )
        for i, g in enumerate(gpus)
    )


def given(gpus: tuple[GPUInfo, ...], host_spec: DeviceSpec) -> Hardware:
    """`--gpu` instead of detection."""
    return Hardware(gpus, host_spec, "given")


def device_specs(gpus: Sequence[GPUInfo], use: str = "free") -> tuple[DeviceSpec, ...]:
    """`--use free` (default: what is free now) or `--use total` (the whole card, as if nothing else
    ran)."""
    if use not in ("free", "total"):
        raise InputError(f"--use must be free or total, not '{use}'")
    if use == "free":
        return tuple(g.spec for g in gpus)
    return tuple(replace(g.spec, free_bytes=g.spec.total_bytes) for g in gpus)


def gpu_specs(spec: str, backend: str = "cuda") -> tuple[DeviceSpec, ...]:
    """The devices a `--gpu` value gives (each GPU's free memory), e.g. `24GiB,12GiB` → CUDA0,
    CUDA1."""
    return device_specs(parse_gpu_option(spec, backend=backend))


def _port_number(text: str) -> bool:
    """1-65535 in ASCII digits (not '²', which isdigit() accepts; no 4,300-digit int())."""
    return text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) < 65536


RpcQuery = Callable[[Sequence[str]], "dict[str, tuple[int, int]]"]


def parse_rpc_option(spec: str, query: RpcQuery | None = None) -> tuple[DeviceSpec, ...]:
    """`--rpc host:port=24GiB[,host:port]` → one device per worker, named as llama.cpp names its
    buffers: `RPC0[host:port]` (ggml-rpc.cpp ggml_backend_rpc_buffer_type: "RPC" + the device's
    index on that worker + "[endpoint]"; one device per worker). A worker given without a size is
    asked through `query` (llama-server --rpc … --list-devices: rpc_info.py), which reports its free
    memory."""
    items: list[tuple[str, str | None]] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        endpoint, eq, size = part.rpartition("=") if "=" in part else (part, "", "")
        hostname, colon, port = endpoint.rpartition(":")
        if not colon or not hostname or not _port_number(port):
            shown = part if len(part) <= 40 else part[:39] + "…"
            raise InputError(
                f"--rpc wants host:port[=SIZE] (e.g. 192.168.1.5:50052=24GiB), not '{shown}'"
            )
        items.append((endpoint, size if eq else None))
    if not items:
        raise InputError("--rpc needs at least one host:port[=SIZE]")
    unsized = [e for e, s in items if s is None]
    answers = query(unsized) if unsized and query is not None else {}
    workers: list[DeviceSpec] = []
    for endpoint, given_size in items:
        if any(w.name.endswith(f"[{endpoint}]") for w in workers):
            raise InputError(f"--rpc names {endpoint} twice; give each worker once")
        if given_size is not None:
            total = free = parse_size(given_size)
        elif endpoint in answers:
            total, free = answers[endpoint]
        else:
            raise InputError(
                f"--rpc {endpoint}: cannot ask the worker for its memory (no llama-server with "
                "RPC, or the worker does not answer); give its size: host:port=SIZE"
            )
        workers.append(DeviceSpec(f"RPC0[{endpoint}]", "gpu", "rpc", total, free))
    return tuple(workers)


def fit_devices(
    gpus: Sequence[GPUInfo], *, use: str = "free", rpc: Sequence[DeviceSpec] = ()
) -> tuple[DeviceSpec, ...]:
    """The model's device list as llama.cpp builds it: RPC workers first, then local GPUs."""
    return tuple(rpc) + device_specs(gpus, use)
