"""The machine side of the speed model: bandwidth and throughput per device, with where each came
from.

GPU memory bandwidth: NVML's (bus width x memory clock) or the catalog entry for the card's name;
GPU throughput: the maker's dense FP16 tensor TFLOPS (Apple: FP32 GPU TFLOPS) below, for the catalog
cards; the host: measured by the probe (host_probe.py, cached). Earlier runs' timings of the same
model family on the same machine replace the generation efficiency (speed_calibration.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import InputError
from ..fit.speed import SpeedInputs
from ..machine import catalog as gpu_catalog
from ..machine.devices import DeviceSpec
from ..machine.hardware import GPUInfo
from ..machine.rates import Rate

# Dense FP16 tensor-core TFLOPS per device from the makers' spec sheets (Apple: FP32 GPU TFLOPS).
# Prompt speed is a rough estimate; these only scale it.
GPU_TFLOPS: dict[str, float] = {
    "rtx3060-12gb": 51,
    "rtx3070": 81,
    "rtx3080-10gb": 119,
    "rtx3090": 142,
    "rtx3090ti": 160,
    "rtx4060-8gb": 60,
    "rtx4060ti-16gb": 88,
    "rtx4070": 117,
    "rtx4070ti-super": 177,
    "rtx4080": 195,
    "rtx4090": 330,
    "rtx5080": 225,
    "rtx5090": 419,
    "rtx-a6000": 155,
    "rtx6000-ada": 364,
    "t4": 65,
    "v100-16gb": 125,
    "v100-32gb": 125,
    "a10": 125,
    "a40": 150,
    "a100-40gb": 312,
    "a100-80gb": 312,
    "l4": 121,
    "l40s": 362,
    "h100": 989,
    "h100-pcie": 756,
    "h100-nvl": 835,
    "h200": 989,
    "rx7900xtx": 123,
    "mi210": 181,
    "mi250": 181,
    "mi300x": 1307,
    "m1-max-64gb": 10.4,
    "m2-max-96gb": 13.6,
    "m3-max-128gb": 16.4,
    "m4-max-128gb": 18.4,
    "m2-ultra-192gb": 27.2,
    "m3-ultra-512gb": 28.2,
}


def _catalog_entry(info: GPUInfo) -> gpu_catalog.CatalogEntry | None:
    """The catalog entry of a GPU: of its name as its driver reports it ("NVIDIA GeForce RTX 4090",
    "llvmpipe (LLVM 15.0.7, 256 bits)") or as --gpu names it; a Mac's by its working set."""
    return gpu_catalog.match_device(info.name, info.spec.total_bytes or None)


def _tflops(entry: gpu_catalog.CatalogEntry) -> float | None:
    """The spec-sheet TFLOPS of a card; a Mac's are its chip's at any memory size."""
    if entry.key in GPU_TFLOPS:
        return GPU_TFLOPS[entry.key]
    if entry.vendor != "apple":
        return None
    chip = entry.key.rsplit("-", 1)[0]
    return next((v for k, v in GPU_TFLOPS.items() if k.rsplit("-", 1)[0] == chip), None)


def gpu_memory(info: GPUInfo) -> str | None:
    """The memory class of a GPU (catalog.CatalogEntry.memory); None: not in the catalog."""
    entry = _catalog_entry(info)
    return entry.memory if entry is not None else None


def gpu_rates(info: GPUInfo) -> tuple[Rate | None, Rate | None]:
    """(memory bandwidth, throughput) of one GPU, each with its source; None where unknown (and for
    a CPU-type device, whose rates are the host's: speed_inputs)."""
    entry = _catalog_entry(info)
    bw = None
    if entry is not None and entry.memory == "host":
        return None, None
    if entry is not None and info.bandwidth_bytes_per_s in (None, entry.bandwidth_bytes_per_s):
        bw = Rate(float(entry.bandwidth_bytes_per_s), f"catalog: {entry.name}")
    elif info.bandwidth_bytes_per_s:
        bw = Rate(float(info.bandwidth_bytes_per_s), "NVML: memory bus width x clock")
    tflops = _tflops(entry) if entry else None
    flops = (
        Rate(tflops * 1e12, f"spec sheet: {entry.name} {tflops:g} TFLOPS")
        if entry and tflops
        else None
    )
    return bw, flops


def assumed_rates(
    info: GPUInfo,
) -> tuple[Rate, tuple[float, float], Rate | None, tuple[float, float] | None] | None:
    """A GPU given by size has no bandwidth of its own: assume the median of the catalog cards of
    its backend with that memory (the nearest size when none has it exactly), and say their range —
    (bandwidth, its range, throughput, its range). None for a card the catalog names."""
    if _catalog_entry(info) is not None or info.bandwidth_bytes_per_s:
        return None
    vendors = _BACKEND_VENDORS.get(info.spec.backend, ("nvidia", "amd"))
    cards = [e for e in gpu_catalog.CATALOG if e.vendor in vendors]
    if not cards:
        return None
    size = info.spec.total_bytes or 0
    nearest = min(abs(e.vram_bytes - size) for e in cards)
    same = sorted(
        (e for e in cards if abs(e.vram_bytes - size) == nearest),
        key=lambda e: e.bandwidth_bytes_per_s,
    )
    bws = [float(e.bandwidth_bytes_per_s) for e in same]
    gib = same[0].vram_bytes / 2**30
    what = f"{len(same)} catalog card{'s' if len(same) > 1 else ''} with {gib:,.0f} GiB"
    bw = Rate(
        statistics.median(bws),
        f"assumed: the median of {what} ({bws[0] / 1e9:,.0f}-{bws[-1] / 1e9:,.0f} GB/s); "
        "--bandwidth GB/s or a catalog name (--gpu rtx4090) gives the card's own",
    )
    tflops = [GPU_TFLOPS[e.key] * 1e12 for e in same if e.key in GPU_TFLOPS]
    if not tflops:
        return bw, (bws[0], bws[-1]), None, None
    flops = Rate(statistics.median(tflops), f"assumed: the median spec-sheet TFLOPS of {what}")
    return bw, (bws[0], bws[-1]), flops, (min(tflops), max(tflops))


# the least share of the host's bandwidth a CPU-type Vulkan device (lavapipe) is assumed to reach:
# issue #35 saw lavapipe serve the demo model at 1.8 tokens/s where the host's bandwidth allows tens
ON_HOST_LOW = 0.02

_BACKEND_VENDORS = {
    "cuda": ("nvidia",),
    "rocm": ("amd",),
    "metal": ("apple",),
    "vulkan": ("nvidia", "amd", "intel"),
}


def with_bandwidth(
    inputs: SpeedInputs, n_rpc: int, infos: Sequence[GPUInfo], given: Sequence[float]
) -> SpeedInputs:
    """Per GPU, what `--bandwidth` gives (GB/s; one value for every GPU) in place of the catalog's
    or an assumption."""
    if not given:
        return inputs
    values = list(given) if len(given) > 1 else [given[0]] * len(infos)
    if len(values) != len(infos):
        raise InputError(
            f"--bandwidth gives {len(values)} values for {len(infos)} GPUs: one, or one per GPU"
        )
    bws = list(inputs.gpu_bandwidth)
    ranges = list(inputs.gpu_bandwidth_range) or [None] * len(bws)
    for i, gbs in enumerate(values):
        bws[n_rpc + i] = Rate(gbs * 1e9, f"--bandwidth {gbs:g} GB/s")
        ranges[n_rpc + i] = None
    return replace(inputs, gpu_bandwidth=tuple(bws), gpu_bandwidth_range=tuple(ranges))


def threads_given(passthrough: Sequence[str], env: Mapping[str, str], n_cpu: int) -> int | None:
    """llama-server's -t/--threads (or $LLAMA_ARG_THREADS when no flag gives it; the last flag
    wins), as common/arg.cpp applies it: a value <= 0 means every CPU (hardware_concurrency); None:
    not given."""
    raw = next(
        (
            passthrough[i + 1]
            for i in range(len(passthrough) - 2, -1, -1)
            if passthrough[i] in ("-t", "--threads")
        ),
        env.get("LLAMA_ARG_THREADS"),
    )
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        return None  # llama-server refuses it; the plan keeps its default
    return value if value > 0 else n_cpu


def speed_inputs(
    gpus: Sequence[DeviceSpec],
    infos: Sequence[GPUInfo],
    env: Mapping[str, str],
    cache: Path,
    threads: int | None = None,
    *,
    assume: bool = False,
) -> SpeedInputs:
    """Per device of the target (RPC workers first: unknown), and the host from the probe, read at
    `threads` (default: llama.cpp's, one per physical core)."""
    from ..machine.host_probe import host_rates, llama_threads

    n_rpc = sum(1 for d in gpus if d.backend == "rpc")
    rates = [gpu_rates(g) for g in infos]
    host = host_rates(env, cache)
    memory = tuple(gpu_memory(g) for g in infos)
    # a CPU-type device (lavapipe: "llvmpipe") computes on the host's cores from the host's RAM
    on_host = Rate(host.bandwidth.value, "host RAM: a CPU-type device (host probe)")
    bws = (None,) * n_rpc + tuple(
        on_host if m == "host" else r[0] for r, m in zip(rates, memory, strict=True)
    )
    flops = (None,) * n_rpc + tuple(
        host.flops if m == "host" else r[1] for r, m in zip(rates, memory, strict=True)
    )
    # what share of it lavapipe reaches is not known: it computes in software (Mesa's llvmpipe JIT),
    # so its rate is a guess from the host's down to ON_HOST_LOW of it (the range says "assumed")
    ranges = (None,) * n_rpc + tuple(
        (on_host.value * ON_HOST_LOW, on_host.value) if m == "host" else None for m in memory
    )
    inputs = SpeedInputs(
        bws,
        flops,
        host.bandwidth,
        host.flops,
        gpu_memory=(None,) * n_rpc + memory,
        gpu_bandwidth_range=ranges if any(ranges) else (),
        host_bandwidth_by_threads=host.bandwidth_by_threads,
        n_threads=threads or llama_threads(),
        host_flops_threads=host.flops_threads,
        cpu_kernels=host.kernels,
        cpu_attention=host.attention,
    )
    return with_assumptions(inputs, n_rpc, infos) if assume else inputs


def with_assumptions(inputs: SpeedInputs, n_rpc: int, infos: Sequence[GPUInfo]) -> SpeedInputs:
    """Each GPU given by size gets the assumed rates of assumed_rates, with their ranges."""
    bws, flops = list(inputs.gpu_bandwidth), list(inputs.gpu_flops)
    # the ranges already assumed (a CPU-type device's) stay
    bw_ranges = list(inputs.gpu_bandwidth_range) or [None] * len(bws)
    flops_ranges = list(inputs.gpu_flops_range) or [None] * len(flops)
    for i, info in enumerate(infos):
        assumed = assumed_rates(info) if bws[n_rpc + i] is None else None
        if assumed is None:
            continue
        bws[n_rpc + i], bw_ranges[n_rpc + i] = assumed[0], assumed[1]
        if flops[n_rpc + i] is None and assumed[2] is not None:
            flops[n_rpc + i], flops_ranges[n_rpc + i] = assumed[2], assumed[3]
    if not any(bw_ranges):
        return inputs
    return replace(
        inputs,
        gpu_bandwidth=tuple(bws),
        gpu_flops=tuple(flops),
        gpu_bandwidth_range=tuple(bw_ranges),
        gpu_flops_range=tuple(flops_ranges),
    )


def machine_speed(
    gpus: Sequence[DeviceSpec],
    infos: Sequence[GPUInfo],
    architecture: str,
    env: Mapping[str, str],
    calibrated: bool = True,
    passthrough: Sequence[str] = (),
    bandwidth: Sequence[float] = (),
) -> SpeedInputs:
    """The speed model's inputs for this machine: device rates, the host probe at the threads
    llama-server will use (-t in `passthrough`), and (calibrated) the generation efficiency learned
    from earlier measured runs (run --verify, and each served run) of this model family here."""
    import os

    from ..paths import cache_dir

    threads = threads_given(passthrough, env, os.cpu_count() or 1)
    inputs = speed_inputs(gpus, infos, env, cache_dir(), threads, assume=True)
    inputs = with_bandwidth(inputs, sum(1 for d in gpus if d.backend == "rpc"), infos, bandwidth)
    if not calibrated:
        return inputs
    from ..fit.speed_calibration import calibrate
    from ..machine.host_probe import machine_key
    from .records import speed_records

    return calibrate(inputs, speed_records(env), machine=machine_key(), architecture=architecture)
