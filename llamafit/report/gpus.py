"""`llamafit gpus [--json]`: what detection found, as a stable dict and as text (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..safe_text import printable
from ..units import GIB
from .layout import wrap

if TYPE_CHECKING:  # values only: the edge module is not imported here
    from ..machine.hardware import GPUInfo, Hardware


def _gpu_json(g: GPUInfo) -> dict[str, Any]:
    return {
        "index": g.index,
        "physical_index": g.physical_index,
        "name": g.name,
        "device": g.spec.name,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "total_bytes": g.spec.total_bytes,
        "free_bytes": g.spec.free_bytes,
        "used_bytes": g.used_bytes,
        "driver": g.driver,
        "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s,
        "backend": g.spec.backend,
        "unified": g.unified,
    }


def gpus_json(
    hw: Hardware,
    server: Hardware | None = None,
    path: str | None = None,
    identity: str | None = None,
    server_notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Detection's GPUs; with `server` (the devices the llama-server at `path` lists, with
    detection's facts: server_devices.py) a `llama_server` object: what plans use."""
    data = {
        "source": hw.source,
        "gpus": [_gpu_json(g) for g in hw.gpus],
        "host": {"total_bytes": hw.host.total_bytes, "available_bytes": hw.host.free_bytes},
        "notes": list(hw.notes),
    }
    if server is not None:
        data["llama_server"] = {
            "path": path,
            "identity": identity,
            "devices": [_gpu_json(g) for g in server.gpus],
            "notes": list(server.notes),
        }
    if server_notes:  # the llama-server found was passed over, or its list not used
        data["server_notes"] = list(server_notes)
    return data


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def _bandwidth(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.0f} GB/s"


def _row(g: GPUInfo) -> list[str]:
    where = "" if g.physical_index is None else f"GPU {g.physical_index}"
    return [
        g.spec.name,
        g.name,
        _gib(g.spec.total_bytes),
        _gib(g.spec.free_bytes),
        _gib(g.used_bytes),
        _bandwidth(g.bandwidth_bytes_per_s),
        where,
        g.pci_bus_id or "",
        g.uuid or "",
    ]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def _headline(hw: Hardware) -> str:
    drivers = sorted({g.driver for g in hw.gpus if g.driver})
    driver = f", driver {', '.join(drivers)}" if drivers else ""
    if not hw.gpus:
        return f"No GPU found (source: {hw.source}{driver}): llama.cpp would run on the CPU."
    return f"{len(hw.gpus)} GPU{'s' if len(hw.gpus) > 1 else ''} (source: {hw.source}{driver}):"


def gpus_text(
    hw: Hardware,
    server: Hardware | None = None,
    path: str | None = None,
    server_notes: Sequence[str] = (),
) -> str:
    lines = [_headline(hw)]
    if server is not None and server.gpus and not hw.gpus:
        lines = [
            f"No GPU found by detection (source: {hw.source}); the llama-server sees "
            f"{len(server.gpus)}:"
        ]
    header = ["device", "name", "total", "free", "used", "bandwidth", "index", "pci bus id", "uuid"]
    if hw.gpus:
        lines += _table([header] + [_row(g) for g in hw.gpus])
    lines.append(
        f"Host RAM: {_gib(hw.host.total_bytes)} total, {_gib(hw.host.free_bytes)} available"
    )
    lines += [f"note: {n}" for n in hw.notes]
    if server is not None:  # what plans use: the devices of the llama-server that would run
        lines.append(f"llama-server: {path}")
        if server.gpus:
            lines.append("  its --list-devices, which plans use:")
            lines += _table([header[:6]] + [_row(g)[:6] for g in server.gpus])
        else:
            lines.append("  its --list-devices shows no GPU: plans run on the CPU")
        lines += [
            w
            for n in server.notes
            for w in wrap(f"note: {n}", 80, subsequent_indent="      ", break_on_hyphens=False)
        ]
    lines += [
        w
        for n in server_notes
        for w in wrap(f"note: {n}", 80, subsequent_indent="      ", break_on_hyphens=False)
    ]
    # names and paths from drivers, llama-server and the file system: escaped (#37 F8)
    return "\n".join(printable(line) for line in lines)


def catalog_text() -> str:
    """`--gpu help`: the catalog as a table (name, memory per device, bandwidth)."""
    from ..machine.catalog import CATALOG

    lines = [f"{'GPU':<16}{'memory':>8}{'bandwidth':>12}   --gpu NAME, 2xNAME, or a size (24GiB)"]
    for e in CATALOG:
        devices = f" x{e.devices}" if e.devices > 1 else ""
        memory = f"{e.vram_bytes / GIB:g} GiB"
        lines.append(f"{e.key:<16}{memory:>8}{e.bandwidth_bytes_per_s / 1e9:>7,.0f} GB/s{devices}")
    return "\n".join(lines)
