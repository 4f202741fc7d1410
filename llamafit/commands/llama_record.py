"""llama.cpp's own estimate, remembered (issue #28): where llama_cpp_check found llama.cpp's figure
for a buffer kind on a device to differ from llamafit's, and the tensor limits learned from its
placement, later plans for the same server build and device start from it (with_recorded), also
with --no-llama-check; a different build or device never uses it.

One file per build identity, cache_dir()/llama-check/<hash of the identity>.json, next to the
identities of server-identity/; read and replaced only through safe_io. Each entry names its
device (llama.cpp's name, the driver's card name and total bytes: another card behind the same
name is another device) and, for a difference, the model (architecture, parameters and tensor
bytes: a difference in weights or KV is the model's) and the config it was measured at.

A dry run's answer is a prediction too, so it is held to what a record of a real start is held to
(issue #37 F10): it is kept only when plausible (no difference larger than the device: it would
refuse every later plan), a real start of the
same build on the same devices (a calibration record of `run`, newer) overrides it, it applies only
when llama.cpp's check is asked for (not with --no-llama-check), and `calibration show` lists the
records and `calibration clear` (all, or --kind memory) removes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..fit.llama_check import KINDS, Difference, room_per_device
from ..machine.devices import DeviceSpec
from ..paths import cache_dir, calibration_path
from ..safe_io import read_regular, write_atomic

if TYPE_CHECKING:
    from .prepare import Prepared

FORMAT = 1
RECORD_FILE = 1 << 20
MAX_ENTRIES = 500  # per build: the oldest are dropped beyond it


def record_path(identity: str) -> str:
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache_dir(), "llama-check", f"{digest}.json")


def _device_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return entry.get("device"), entry.get("card"), entry.get("total_bytes")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("device"), str):
        return False
    if not isinstance(entry.get("card"), (str, type(None))) or not _int(
        entry.get("total_bytes", 0)
    ):
        return False
    if "kind" in entry:
        return (
            entry["kind"] in KINDS
            and _int(entry.get("bytes"))
            and isinstance(entry.get("model"), str)
            and _plausible_bytes(entry["bytes"], entry.get("total_bytes", 0))
        )
    return _int(entry.get("max_tensor_bytes")) and entry["max_tensor_bytes"] > 0


def _plausible_bytes(difference: int, total_bytes: int) -> bool:
    """A difference no larger than the whole device (a device of unknown size: any): more room
    than the card has is no estimate of what runs on it, and would refuse every later plan."""
    return total_bytes <= 0 or abs(difference) <= total_bytes


def load(identity: str) -> list[dict[str, Any]]:
    """The build's valid entries; [] when there is no file, or it is damaged or unsafe to read."""
    try:
        data = json.loads(read_regular(record_path(identity), RECORD_FILE))
    except (OSError, ValueError, RecursionError):
        return []
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or data.get("identity") != identity
    ):
        return []
    entries = data.get("entries")
    return [e for e in entries if _valid(e)] if isinstance(entries, list) else []


def _entry_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return (*_device_key(entry), entry.get("model"), entry.get("kind"))


def store(identity: str, entries: Sequence[dict[str, Any]]) -> None:
    """Replace the build's entries of the same device, model and kind (tensor limits: the same
    device) with `entries`; a read-only or unsafe cache only loses the record."""
    if not entries:
        return
    new = {_entry_key(e) for e in entries}
    kept = [e for e in load(identity) if _entry_key(e) not in new]
    data = {
        "format": FORMAT,
        "identity": identity,
        "entries": (kept + list(entries))[-MAX_ENTRIES:],
    }
    try:
        write_atomic(record_path(identity), json.dumps(data).encode())
    except OSError:
        pass


# ---- what identifies a device and a model ----


def device_fields(p: Prepared, device: DeviceSpec) -> dict[str, Any]:
    """The device as an entry names it: llama.cpp's name, the card, the total bytes."""
    card = next((g.name for g in p.hardware.gpus if g.spec.name == device.name), None)
    return {"device": device.name, "card": card, "total_bytes": device.total_bytes or 0}


def model_key(p: Prepared) -> str:
    """The model as a difference is keyed: architecture, parameters, tensor bytes (not its path)."""
    f = p.facts
    return f"{f.architecture}:{f.n_params}:{sum(t.n_bytes for t in f.tensors)}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def difference_entries(
    p: Prepared, diffs: Sequence[Difference], config: Mapping[str, Any], differs: Collection[str]
) -> list[dict[str, Any]]:
    """The entries of one check's differences, measured at `config` (report.json_parts.config_json);
    `differs`: the devices where the two estimates disagreed (only their differences are applied
    later, as larger_wins applies them now); an implausible one is not remembered (plausible)."""
    gpus = {g.name: g for g in p.target.gpus}
    name = os.path.basename(p.facts.path)
    return [
        device_fields(p, gpus[d.device])
        | {"model": model_key(p), "model_name": name, "kind": d.kind, "bytes": d.bytes}
        | {"agrees": d.device not in differs, "config": dict(config), "time": _now()}
        for d in diffs
        if d.device in gpus and plausible(d, gpus[d.device])
    ]


def plausible(d: Difference, device: DeviceSpec) -> bool:
    """Whether one difference from llama.cpp's dry run may be remembered: none larger than the
    device (more room than the card has is no estimate of what runs on it)."""
    return _plausible_bytes(d.bytes, device.total_bytes or 0)


def limit_entries(p: Prepared, limits: Mapping[str, int]) -> list[dict[str, Any]]:
    """The entries of tensor limits learned from llama.cpp's placement (device name → bytes)."""
    gpus = {g.name: g for g in p.target.gpus}
    return [
        device_fields(p, gpus[name])
        | {"max_tensor_bytes": limit, "model_name": os.path.basename(p.facts.path), "time": _now()}
        for name, limit in limits.items()
        if name in gpus
    ]


# ---- applying it before the solve ----


def with_recorded(p: Prepared) -> Prepared:
    """The plan started from what llama.cpp's estimate showed earlier for this build and these
    devices: a Vulkan device of unknown tensor limit takes the limit learned, and a device keeps
    room for llama.cpp's larger weights and KV of this model (fit/llama_check.py room_per_device).
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
        mine = [e for e in entries if _device_key(e) == _device_key(device_fields(p, g))]
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


def _not_overridden(entries: list[dict[str, Any]], p: Prepared) -> list[dict[str, Any]]:
    """The entries no real start has overridden: a difference recorded before a calibration
    record of `run` for the same build (identity) on a device of that record is dropped; the
    real start's buffers are what the plan uses from then on (memory/calibration.py)."""
    from ..memory.calibration import _devices_of, record_identity
    from .calibration_file import read_records

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


# ---- listed and cleared with the calibration records (#37 F10) ----


def _folder() -> str:
    return os.path.join(cache_dir(), "llama-check")


def _read_file(path: str) -> tuple[dict[str, Any], os.stat_result] | None:
    """One record file of ours (a regular file, our format), with its stat; None otherwise."""
    from ..safe_io import read_regular_stat

    try:
        raw, st = read_regular_stat(path, RECORD_FILE)
        data = json.loads(raw, parse_constant=lambda c: None)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if not isinstance(data.get("identity"), str) or not isinstance(data.get("entries"), list):
        return None
    return data, st


def _files() -> list[str]:
    try:
        names = sorted(os.listdir(_folder()))
    except OSError:
        return []
    return [os.path.join(_folder(), n) for n in names if n.endswith(".json")]


def listed() -> list[dict[str, Any]]:
    """Every build's remembered answers, for `calibration show`: the build, the file, and per
    entry the device, what it holds (a kind's difference or a tensor limit) and the model."""
    out = []
    for path in _files():
        read = _read_file(path)
        if read is None:
            continue
        data = read[0]
        entries = [e for e in data["entries"] if _valid(e)]
        out.append(
            {
                "build": data["identity"],
                "path": path,
                "entries": [
                    {
                        "device": e["device"],
                        "kind": e.get("kind", "tensor_limit"),
                        "bytes": e.get("bytes", e.get("max_tensor_bytes")),
                        "model_name": e.get("model_name"),
                    }
                    for e in entries
                ],
            }
        )
    return out


def clear_all() -> int:
    """Remove every record file of ours (`calibration clear`, all or --kind memory): the number
    removed. A file that is not ours (not a regular file, another format) is left."""
    from ..safe_io import remove_read

    removed = 0
    for path in _files():
        read = _read_file(path)
        if read is None:
            continue
        try:
            remove_read(path, read[1])
        except OSError:
            continue
        removed += 1
    return removed
