"""What a configuration costs, per device: the rows of a Breakdown (DeviceUsage), the side models'
bytes (SideUsage), and the Breakdown that MemoryModel.estimate returns. Plain values: the model
(model.py), the side models (side_models.py), the solver and the reports all read them."""

from __future__ import annotations

from dataclasses import dataclass

from .placement import LayerMap


@dataclass(frozen=True, slots=True)
class SideDeviceUsage:
    """One side model's bytes on one device (the device named as in the main breakdown)."""

    name: str
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes


@dataclass(frozen=True, slots=True)
class SideUsage:
    """A side model's memory: kind is "draft", "mtp" or "mmproj"."""

    kind: str
    path: str
    devices: tuple[SideDeviceUsage, ...]
    n_ctx: int = 0  # cells of its context (0 for a projector)
    details: tuple[tuple[str, int | str], ...] = ()  # kind-specific facts (image size, tokens, ...)

    @property
    def total_bytes(self) -> int:
        return sum(d.total_bytes for d in self.devices)

    def on(self, name: str) -> int:
        return sum(d.total_bytes for d in self.devices if d.name == name)


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """Predicted bytes on one device; `usable_bytes` is what it may use (free memory), if known."""

    name: str
    kind: str
    total_bytes: int | None
    usable_bytes: int | None
    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    output_bytes: int
    reserve_bytes: int
    # CUDA context + cuBLAS workspace (DeviceSpec.overhead_bytes), apart from the reserve
    overhead_bytes: int = 0
    # host only: the part in the GPU backend's pinned host buffers (CUDA_Host, ROCm_Host)
    pinned_bytes: int = 0
    side_bytes: int = 0  # draft model, MTP context, projector on this device (side_models.py)
    repack_bytes: int = (
        0  # host only: the part of weights_bytes in the CPU_REPACK buffer (repack.py)
    )
    # whose figure compute_bytes is (MemoryModel._compute): "graph", the replay of llama.cpp's
    # reserve graph (memory/graph/replay.py), or "estimate", the hand-derived peaks
    compute_source: str = "estimate"

    @property
    def used_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.recurrent_bytes
            + self.compute_bytes
            + self.output_bytes
            + self.reserve_bytes
            + self.overhead_bytes
            + self.side_bytes
        )

    @property
    def free_after_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return self.usable_bytes is None or self.used_bytes <= self.usable_bytes


@dataclass(frozen=True, slots=True)
class Breakdown:
    devices: tuple[DeviceUsage, ...]  # GPUs in order, then the host ("CPU")
    layer_devices: LayerMap
    host_weights_mapped: bool  # CPU weights are mmap'd from the file (page cache), not anonymous
    cache_ram_bytes: int  # llama-server's prompt cache limit in host RAM (grows with use)
    side_models: tuple[SideUsage, ...] = ()  # their bytes are in the rows' side_bytes too

    def hard_bytes(self, d: DeviceUsage) -> int:
        """What `d` must hold in memory. With GPUs, the host's memory-mapped weights may page from
        disk (slow, but it runs); KV, recurrent state, compute and output buffers are allocated and
        cannot. Without a GPU everything counts: paging weights per token would not be a plan."""
        paged = (
            d.kind == "host"
            and self.host_weights_mapped
            and any(x.kind == "gpu" for x in self.devices)
        )
        return d.used_bytes - (d.weights_bytes if paged else 0)

    @property
    def short(self) -> tuple[tuple[DeviceUsage, int], ...]:
        """(device, bytes short) for every device that cannot hold what it must."""
        return tuple(
            (d, self.hard_bytes(d) - d.usable_bytes)
            for d in self.devices
            if d.usable_bytes is not None and self.hard_bytes(d) > d.usable_bytes
        )

    @property
    def fits(self) -> bool:
        return not self.short

    @property
    def host_pages(self) -> bool:
        """It fits, but only because the host's mapped weights page from disk."""
        host = self.devices[-1]
        return self.fits and not host.fits
