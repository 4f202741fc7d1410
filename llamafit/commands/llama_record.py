"""llama.cpp's own estimate, remembered (issue #28): where llama_cpp_check found llama.cpp's figure
for a buffer kind on a device to differ from llamafit's, and the tensor limits learned from its
placement, later plans for the same server build and device start from it (with_recorded), also
with --no-llama-check; a different build or device never uses it.

The records themselves (their file, their entries) are in records.py, with the other records a
run leaves on disk.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..fit.llama_check import Difference, room_per_device
from .records import device_fields, device_key, load, model_key, record_path

if TYPE_CHECKING:
    from .prepared import Prepared


def with_recorded(p: Prepared) -> Prepared:
    """The plan started from what llama.cpp's estimate showed earlier for this build and these
    devices: a Vulkan device of unknown tensor limit takes the limit learned, and a device keeps
    room for llama.cpp's larger weights and KV of this model (fit/llama_check.py room_per_device).
    `llama_recorded` holds what applied (the `llama_cpp_recorded` JSON); unchanged without any."""
    if p.server_identity is None or not p.target.gpus:
        return p
    entries = load(p.server_identity)
    if not entries:
        return p
    key = model_key(p)
    gpus, hardware = list(p.target.gpus), p.hardware
    shown: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    for i, g in enumerate(gpus):
        mine = [e for e in entries if device_key(e) == device_key(device_fields(p, g))]
        limit = next((e for e in reversed(mine) if "max_tensor_bytes" in e), None)
        if limit is not None and g.backend == "vulkan" and g.max_tensor_bytes is None:
            gpus[i] = replace(g, max_tensor_bytes=limit["max_tensor_bytes"])
            limits.append(
                {"device": g.name, "max_tensor_bytes": limit["max_tensor_bytes"]}
                | {"model_name": limit.get("model_name"), "time": limit.get("time")}
            )
        for e in mine:
            if e.get("model") == key:
                d = Difference(g.name, e["kind"], e["bytes"])
                wins = e.get("agrees") is False and d.room_bytes > 0
                shown.append(
                    {"device": g.name, "kind": d.kind, "bytes": d.bytes, "applied": wins}
                    | {"config": e.get("config"), "time": e.get("time")}
                )
    room = room_per_device(
        [Difference(s["device"], s["kind"], s["bytes"]) for s in shown if s["applied"]]
    )
    if not limits and not room:
        return p
    gpus = [replace(g, overhead_bytes=g.overhead_bytes + room.get(g.name, 0)) for g in gpus]
    if limits:  # the limit is known now: the vulkaninfo note of server_hardware no longer applies
        named = {lim["device"] for lim in limits}
        notes = tuple(
            n for n in hardware.notes if not (n.split(":", 1)[0] in named and "vulkaninfo" in n)
        )
        limit_of = {g.name: g.max_tensor_bytes for g in gpus}
        hw_gpus = tuple(
            replace(h, spec=replace(h.spec, max_tensor_bytes=limit_of[h.spec.name]))
            if h.spec.name in limit_of
            else h
            for h in hardware.gpus
        )
        hardware = replace(hardware, gpus=hw_gpus, notes=notes)
    recorded = {
        "build": p.server_identity,
        "path": record_path(p.server_identity),
        "checked": p.llama_check,
        "room": [{"device": n, "bytes": b} for n, b in room.items()],
        "differences": shown,
        "tensor_limits": limits,
    }
    target = replace(p.target, gpus=tuple(gpus))
    return replace(p, target=target, hardware=hardware, llama_recorded=recorded)


def recorded_room(p: Prepared) -> dict[str, int]:
    """The room per device with_recorded already gave (device name → bytes)."""
    rows = (p.llama_recorded or {}).get("room", [])
    return {r["device"]: r["bytes"] for r in rows}
