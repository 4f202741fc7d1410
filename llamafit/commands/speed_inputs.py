"""The machine side of the speed model: bandwidth and throughput per device, with where each came from.

GPU memory bandwidth: NVML's (bus width x memory clock) or the catalog entry for the card's name;
GPU throughput: the maker's dense FP16 tensor TFLOPS (Apple: FP32 GPU TFLOPS) below, for the catalog
cards; the host: measured by the probe (host_probe.py, cached). Earlier runs' timings of the same
model family on the same machine replace the generation efficiency (speed_calibration.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..machine import catalog as gpu_catalog
from ..machine.devices import DeviceSpec
from ..machine.hardware import GPUInfo
from ..fit.speed import Rate, SpeedInputs

# Dense FP16 tensor-core TFLOPS per device from the makers' spec sheets (Apple: FP32 GPU TFLOPS).
# Prompt speed is a rough estimate; these only scale it.
GPU_TFLOPS: dict[str, float] = {
    "rtx3060-12gb": 51, "rtx3070": 81, "rtx3080-10gb": 119, "rtx3090": 142, "rtx3090ti": 160, "rtx4060-8gb": 60,
    "rtx4060ti-16gb": 88, "rtx4070": 117, "rtx4070ti-super": 177, "rtx4080": 195, "rtx4090": 330, "rtx5080": 225,
    "rtx5090": 419, "rtx-a6000": 155, "rtx6000-ada": 364, "t4": 65, "v100-16gb": 125, "v100-32gb": 125, "a10": 125,
    "a40": 150, "a100-40gb": 312, "a100-80gb": 312, "l4": 121, "l40s": 362, "h100": 989, "h100-pcie": 756,
    "h100-nvl": 835, "h200": 989, "rx7900xtx": 123, "mi210": 181, "mi250": 181, "mi300x": 1307,
    "m1-max-64gb": 10.4, "m2-max-96gb": 13.6, "m3-max-128gb": 16.4, "m4-max-128gb": 18.4, "m2-ultra-192gb": 27.2,
    "m3-ultra-512gb": 28.2,
}  # fmt: skip


def _catalog_entry(name: str) -> gpu_catalog.CatalogEntry | None:
    entry = gpu_catalog.find(name)
    if entry is not None:
        return entry
    return next((e for e in gpu_catalog.CATALOG if e.name.lower() == name.strip().lower()), None)


def gpu_rates(info: GPUInfo) -> tuple[Rate | None, Rate | None]:
    """(memory bandwidth, throughput) of one GPU, each with its source; None where unknown."""
    entry = _catalog_entry(info.name)
    bw = None
    if entry is not None and info.bandwidth_bytes_per_s in (None, entry.bandwidth_bytes_per_s):
        bw = Rate(float(entry.bandwidth_bytes_per_s), f"catalog: {entry.name}")
    elif info.bandwidth_bytes_per_s:
        bw = Rate(float(info.bandwidth_bytes_per_s), "NVML: memory bus width x clock")
    tflops = GPU_TFLOPS.get(entry.key) if entry else None
    flops = Rate(tflops * 1e12, f"spec sheet: {entry.name} {tflops:g} TFLOPS") if entry and tflops else None
    return bw, flops


def threads_given(passthrough: Sequence[str], env: Mapping[str, str], n_cpu: int) -> int | None:
    """llama-server's -t/--threads (or $LLAMA_ARG_THREADS when no flag gives it; the last flag wins),
    as common/arg.cpp applies it: a value <= 0 means every CPU (hardware_concurrency); None: not given."""
    raw = next((passthrough[i + 1] for i in range(len(passthrough) - 2, -1, -1)
                if passthrough[i] in ("-t", "--threads")), env.get("LLAMA_ARG_THREADS"))  # fmt: skip
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        return None  # llama-server refuses it; the plan keeps its default
    return value if value > 0 else n_cpu


def speed_inputs(gpus: Sequence[DeviceSpec], infos: Sequence[GPUInfo], env: Mapping[str, str],
                 cache: Path, threads: int | None = None) -> SpeedInputs:  # fmt: skip
    """Per device of the target (RPC workers first: unknown), and the host from the probe, read at
    `threads` (default: llama.cpp's, one per physical core)."""
    from ..machine.host_probe import host_rates, llama_threads

    n_rpc = sum(1 for d in gpus if d.backend == "rpc")
    rates = [gpu_rates(g) for g in infos]
    bws = (None,) * n_rpc + tuple(r[0] for r in rates)
    flops = (None,) * n_rpc + tuple(r[1] for r in rates)
    host = host_rates(env, cache)
    return SpeedInputs(bws, flops, host.bandwidth, host.flops, host_bandwidth_by_threads=host.bandwidth_by_threads,
                       n_threads=threads or llama_threads(), host_flops_threads=host.flops_threads,
                       cpu_kernels=host.kernels, cpu_attention=host.attention)  # fmt: skip


def machine_speed(gpus: Sequence[DeviceSpec], infos: Sequence[GPUInfo], architecture: str, env: Mapping[str, str],
                  calibrated: bool = True, passthrough: Sequence[str] = ()) -> SpeedInputs:  # fmt: skip
    """The speed model's inputs for this machine: device rates, the host probe at the threads
    llama-server will use (-t in `passthrough`), and (calibrated) the generation efficiency learned
    from earlier measured runs (run --verify, and each served run) of this model family here."""
    import os

    from ..paths import cache_dir

    threads = threads_given(passthrough, env, os.cpu_count() or 1)
    inputs = speed_inputs(gpus, infos, env, cache_dir(), threads)
    if not calibrated:
        return inputs
    from ..machine.host_probe import machine_key
    from ..fit.speed_calibration import calibrate
    from .calibration_file import speed_records

    return calibrate(inputs, speed_records(env), machine=machine_key(), architecture=architecture)
