"""Which devices a plan is for (an edge): --gpu (sizes, catalog names, cpu), else the devices of the
llama-server that will run (its own `--list-devices`, with detection's facts), else vulkaninfo's
(--backend vulkan), else detection; --rpc workers first, as llama.cpp orders them; --ram replaces
the host's memory. Every source is a parameter with detection as its default, so that tests and
other machines plan without probing this one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import InputError
from ..units import MIB
from .devices import DeviceSpec
from .hardware import (
    GPUInfo,
    Hardware,
    RpcQuery,
    fit_devices,
    given,
    parse_gpu_option,
    parse_rpc_option,
)

if TYPE_CHECKING:
    from .server_devices import Listing


@dataclass(frozen=True)
class MachineSpec:
    """The devices to plan for: --gpu (sizes, catalog names, cpu; None: detect), --backend, --use,
    --rpc workers, and the bytes kept free per GPU (--reserve)."""

    gpu_spec: str | None = None
    backend: str = "cuda"
    use: str = "free"
    rpc: str | None = None
    reserve_bytes: int = 1024 * MIB
    ram: str | None = None  # --ram SIZE: another machine's host memory instead of what is free here
    # --bandwidth GB/s: each GPU's memory bandwidth (one value: every GPU)
    bandwidth_gbps: tuple[float, ...] = ()


def default_host() -> DeviceSpec:
    from .hardware import detect_host

    return detect_host()


def default_detect(env: Mapping[str, str]) -> Hardware:
    from .hardware import detect

    return detect(env)


HostFn = Callable[[], DeviceSpec]
DetectFn = Callable[[Mapping[str, str]], Hardware]


def parse_ram_option(text: str) -> DeviceSpec:
    """`--ram 64GiB`: plan for another machine's host memory (all of it usable)."""
    from .devices import host, parse_size

    if text.strip().replace(".", "", 1).isdigit():
        raise InputError(f"--ram {text.strip()} has no unit; did you mean {text.strip()}GiB?")
    size = parse_size(text)
    if size < MIB:
        raise InputError(f"--ram {text.strip()}: host RAM must be at least 1 MiB")
    return host(size, size)


def mac_host(gpu_spec: str) -> DeviceSpec | None:
    """A Mac named from the catalog (`--gpu m2-ultra-192gb`) is the whole machine: its unified
    memory is the host's RAM as well (all of it usable, as --ram gives it); None for anything else
    (--ram, or detection, gives the host then)."""
    from .catalog import host_ram
    from .devices import host

    ram = host_ram(gpu_spec) if "," not in gpu_spec else None
    return host(ram, ram) if ram else None


VulkanFn = Callable[[Mapping[str, str]], tuple[DeviceSpec, ...]]


def default_vulkan(env: Mapping[str, str]) -> tuple[DeviceSpec, ...]:
    from .vulkan import detect_vulkan, device_specs

    return device_specs(detect_vulkan(env))


def no_vulkan(env: Mapping[str, str]) -> tuple[DeviceSpec, ...]:
    return ()


def _with_limits(gpus: tuple[GPUInfo, ...], local: tuple[DeviceSpec, ...]) -> tuple[GPUInfo, ...]:
    """GPUs given by size take the tensor limit of the local Vulkan device with the same number."""
    return tuple(
        replace(g, spec=replace(g.spec, max_tensor_bytes=local[i].max_tensor_bytes))
        if i < len(local) and g.spec.backend == "vulkan" and g.spec.max_tensor_bytes is None
        else g
        for i, g in enumerate(gpus)
    )


ServerDevicesFn = Callable[[Mapping[str, str], Hardware], "Hardware | None"]


def server_devices_for(path: str | None, asked: list[Listing] | None = None) -> ServerDevicesFn:
    """The devices `path --list-devices` reports, with what detection and vulkaninfo add
    (machine/server_devices.py); None when there is no server or it gives no list. The answer is
    appended to `asked` (the command asks once: run's records take it from there)."""

    def devices(env: Mapping[str, str], detected: Hardware) -> Hardware | None:
        if path is None:
            return None
        from .server_devices import Listing, ask_list_devices, server_hardware
        from .vulkan import vulkaninfo_devices

        listed, failed = ask_list_devices(path, env)
        if asked is not None:  # a failure (hung, endless, not believed: #37 F4) is noted there
            asked.append(Listing(path, listed, failed))
        if listed is None:
            return None
        vulkan = vulkaninfo_devices(env) if any(d.backend == "vulkan" for d in listed) else ()
        return server_hardware(listed, detected, vulkan, os.path.basename(path))

    return devices


def one_pool(hw: Hardware) -> Hardware:
    """Detection's unified-memory GPUs (Apple silicon: the Metal working set is host RAM) and the
    host counted as one pool (unified.py): the GPU's free memory comes out of the host's."""
    from .unified import OsMemory, cross_check

    host, gpus = hw.host, []
    for g in hw.gpus:
        total, free = g.spec.total_bytes, g.spec.free_bytes
        if not g.unified or total is None or free is None:
            gpus.append(g)
            continue
        os_memory = OsMemory(
            integrated=True,
            shared_total=total,
            host_total=host.total_bytes,
            host_available=host.usable_bytes,
        )
        checked = cross_check(total, free, os_memory)
        if checked.shared_bytes and checked.host_available_bytes is not None:
            host = replace(host, free_bytes=checked.host_available_bytes)
        gpus.append(replace(g, spec=replace(g.spec, free_bytes=checked.free_bytes)))
    return replace(hw, gpus=tuple(gpus), host=host)


def pick_devices(
    spec: MachineSpec,
    env: Mapping[str, str],
    host_fn: HostFn,
    detect_fn: DetectFn,
    vulkan_fn: VulkanFn = no_vulkan,
    rpc_query: RpcQuery | None = None,
    server_devices: ServerDevicesFn | None = None,
) -> tuple[Hardware, tuple[DeviceSpec, ...]]:
    """--gpu (sizes, catalog names, cpu), else the devices of the llama-server that will run (its
    own `--list-devices`, with detection's facts), else detection; --rpc workers come first, as
    llama.cpp orders them; --ram replaces the host's memory.

    With --backend vulkan, no --gpu and no server, the Vulkan devices come from vulkaninfo (memory
    and the tensor-size limit, in llama.cpp's order: vulkan_info.py) when it finds any.
    """
    ram_host = parse_ram_option(spec.ram) if spec.ram is not None else None
    served = (
        server_devices(env, detect_fn(env))
        if server_devices is not None and spec.gpu_spec is None
        else None
    )
    passed_over: tuple[str, ...] = ()
    if (
        served is not None
        and spec.backend == "vulkan"
        and not any(g.spec.backend == "vulkan" for g in served.gpus)
    ):
        passed_over = (
            "--backend vulkan: the llama-server found lists no Vulkan device (a build without "
            "Vulkan?); planned for vulkaninfo's devices",
        )
        served = None
    vk = vulkan_fn(env) if spec.backend == "vulkan" and served is None else ()
    if served is not None:
        hw = served
    elif vk and spec.gpu_spec is None:
        hw = Hardware(
            tuple(GPUInfo(d, d.name, i) for i, d in enumerate(vk)),
            host_fn(),
            "vulkaninfo",
            passed_over,
        )
    elif spec.gpu_spec is None:
        hw = one_pool(detect_fn(env))
    else:
        hw = given(
            _with_limits(parse_gpu_option(spec.gpu_spec, backend=spec.backend), vk),
            ram_host or mac_host(spec.gpu_spec) or host_fn(),
        )
    if ram_host is not None:
        hw = replace(hw, host=ram_host)
    use = spec.use if spec.gpu_spec is None else "total"
    rpc = parse_rpc_option(spec.rpc, rpc_query) if spec.rpc else ()
    return hw, fit_devices(hw.gpus, use=use, rpc=rpc)
