"""llama.cpp's own estimate, remembered (issue #28): where llama_cpp_check found llama.cpp's figure
for a buffer kind on a device to differ from llamafit's, and the tensor limits learned from its
placement, later plans for the same server build and device start from it (with_recorded), also
with --no-llama-check; a different build or device never uses it.

The records themselves (their file, their entries) are in records.py, with the other records a
run leaves on disk.

A dry run's answer is a prediction too, so it is held to what a record of a real start is held to
(issue #37 F10): it is kept only when plausible (no difference larger than the device: it would
refuse every later plan; records.plausible), a real start of the same build on the same devices (a
calibration record of `run`, newer) overrides it, it applies only when llama.cpp's check is asked
for (not with --no-llama-check), and `calibration show` lists the records and `calibration clear`
(all, or --kind memory) removes them (records.listed, records.clear_all).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..fit.llama_check import Difference, room_per_device
from ..paths import calibration_path
from .records import device_fields, device_key, load, model_key, record_path

if TYPE_CHECKING:
    from .prepared import Prepared


def with_recorded(p: Prepared) -> Prepared:
    """The plan started from what llama.cpp's estimate showed earlier for this build and these
    devices: a Vulkan device of unknown tensor limit takes the limit learned, and a device keeps
    room for llama.cpp's larger weights, KV and compute of this model (fit/llama_check.py
    room_per_device; compute only as recorded at llama-fit-params' own graph, `same_graph`).
    `llama_recorded` holds what applied (the `llama_cpp_recorded` JSON); unchanged without any."""
    if p.server_identity is None or not p.target.gpus or not p.llama_check:
        return p  # --no-llama-check: nothing of llama.cpp's dry run, remembered or new (#37 F10)
    entries = _not_overridden(load(p.server_identity), p)
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
                # a compute difference without same_graph held llama.cpp's worst-case logits
                same = d.kind != "compute" or e.get("same_graph") is True
                wins = e.get("agrees") is False and d.room_bytes > 0 and same
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


def _not_overridden(entries: list[dict[str, Any]], p: Prepared) -> list[dict[str, Any]]:
    """The entries no real start has overridden: a difference recorded before a calibration
    record of `run` for the same build (identity) on a device of that record is dropped; the
    real start's buffers are what the plan uses from then on (memory/calibration.py)."""
    if not entries:  # nothing remembered: the calibration file need not be read
        return entries
    from ..memory.calibration import _devices_of, record_identity
    from .records import read_records

    try:
        records = read_records(calibration_path(p.env))[0]
    except OSError:
        return entries
    started: dict[str, str] = {}  # device → the newest real start's time
    for r in records:
        if "buffers" in r and record_identity(r) == p.server_identity:
            for name, _ in _devices_of(r):
                started[name] = max(started.get(name, ""), str(r.get("time", "")))
    return [
        e
        for e in entries
        if "kind" not in e or str(e.get("time", "")) > started.get(e["device"], "")
    ]


def recorded_room(p: Prepared) -> dict[str, int]:
    """The room per device with_recorded already gave (device name → bytes)."""
    rows = (p.llama_recorded or {}).get("room", [])
    return {r["device"]: r["bytes"] for r in rows}
