"""What a run leaves on disk, next to the code that reads it back.

The calibration file (`$LLAMAFIT_CALIBRATION`, paths.calibration_path): one JSON record a line,
appended by `run` (the buffers llama.cpp reported next to the prediction; kind "failed": a server
that died after Ready, never read as calibration; kind "verify": --verify's request and its speed;
kind "serve": the speed of the requests a server served), read back by the memory model's
correction (memory/calibration.py) and the speed model (speed_inputs.py), shown and cleared by
`calibration`. It may be anything the variable names: it is read only when it is a regular file
(no FIFO, device node or symbolic link; its newest CALIBRATION_FILE bytes, whole lines: the records
are appended, so a larger file's oldest are the ones not read), appended to only when it is a
regular file (safe_io.append_line), and removed or rewritten only when it is a regular file whose
every line is a record llamafit writes (a JSON object of its schema; a cut-off last line is
allowed), so that `calibration clear` never deletes a file that is not ours. Clearing reads the
file line by line, whatever its size (#37 F13: a file over 16 MiB could be neither shown nor
cleared).

llama.cpp's own estimate (issue #28), one file per server build identity,
cache_dir()/llama-check/<hash of the identity>.json, next to the identities of server-identity/;
read and replaced only through safe_io. Each entry names its device (llama.cpp's name, the
driver's card name and total bytes: another card behind the same name is another device) and, for
a difference, the model (architecture, parameters and tensor bytes: a difference in weights or KV
is the model's) and the config it was measured at. llama_record.with_recorded applies them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import LlamafitError
from ..fit.llama_check import KINDS as DIFFERENCE_KINDS
from ..fit.llama_check import Difference
from ..machine.devices import DeviceSpec
from ..memory.calibration import json_int, parse_records, record_problem
from ..paths import cache_dir, calibration_path
from ..report.json_parts import config_json
from ..safe_io import (
    CALIBRATION_FILE,
    append_line,
    open_regular,
    read_regular_stat,
    remove_read,
    write_atomic,
)
from ..version import __version__

if TYPE_CHECKING:
    from ..server.supervise import Exited
    from ..server.verify import VerifyResult
    from .launch import Launch
    from .prepared import Prepared

# ---- the calibration file: the records a run appends ----


def try_record(
    path: str, write: Callable[[str], None], what: str, say: Callable[[str], None]
) -> None:
    """Recording is a side job: a calibration file that cannot be written never stops a healthy
    server."""
    from ..report.run import record_error_line, recorded_line  # the run's, not a plan's

    try:
        write(path)
        say(recorded_line(what, path))
    except OSError as e:
        say(record_error_line(path, e))


def run_entry(launch: Launch, p: Prepared, kind: str | None = None) -> dict[str, Any]:
    """What every record of a run says: when, which llamafit and server, the model, the flags, the
    devices."""
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "llamafit": __version__,
        "server": launch.server_info,
        "model": p.facts.path,
        "architecture": p.facts.architecture,
        "config": config_json(launch.choice.rc),
        "hardware": [
            {"name": d.name, "backend": d.backend, "total_bytes": d.total_bytes}
            for d in p.target.gpus
        ],
    }
    return entry if kind is None else {"kind": kind, **entry}


def _memory_entry(launch: Launch, p: Prepared, kind: str | None = None) -> dict[str, Any]:
    """run_entry with the correction already in these predictions (a memory record's)."""
    return run_entry(launch, p, kind) | {"compute_scale": p.target.compute_scale}


def record_buffers(path: str, launch: Launch, p: Prepared, rows: list[dict[str, Any]]) -> None:
    """Append (prediction, actual, build, hardware) to the calibration file for later plans."""
    append_line(path, json.dumps(_memory_entry(launch, p) | {"buffers": rows}))


def record_failed(path: str, launch: Launch, p: Prepared, event: Exited) -> None:
    """A run whose server died after Ready (kind "failed": never read as calibration): how it
    ended."""
    ended = {
        "ready": event.ready,
        "exit_code": event.code,
        "signal": event.signal,
        "signal_name": event.signal_name,
        "failure": event.diagnosis,
    }
    append_line(path, json.dumps(_memory_entry(launch, p, "failed") | {"exit": ended}))


def record_served(path: str, p: Prepared, launch: Launch, speed: dict[str, Any]) -> None:
    """The speed of the requests a server served (kind "serve": run_verify.served_record)."""
    # never through a link, FIFO or device (safe_io.py)
    append_line(path, json.dumps(run_entry(launch, p, "serve") | {"speed": speed}))


def record_verify(
    path: str, p: Prepared, launch: Launch, result: VerifyResult, speed: dict[str, Any] | None
) -> None:
    """--verify's request (kind "verify"): what it found, and the speed next to the estimate."""
    entry = run_entry(launch, p, "verify") | {"verify": result.as_json(), "speed": speed}
    append_line(path, json.dumps(entry))


# ---- the calibration file: reading and clearing it ----

# the speed model's records (record_verify, record_served); the rest are memory records
SPEED_KINDS = (
    "verify",
    "serve",
)
KINDS = ("memory", "speed")


def kind_of(record: dict[str, Any]) -> str:
    return "speed" if record.get("kind") in SPEED_KINDS else "memory"


def read_newest(path: str) -> tuple[str, int]:
    """The newest CALIBRATION_FILE bytes of the file as text, from the start of a line, and how
    many older bytes were not read (0: all of it). FileNotFoundError when there is none; OSError
    (safe_io.UnsafeFile: a FIFO, device or link) for anything else."""
    f, st = open_regular(path)
    with f:
        older = max(st.st_size - CALIBRATION_FILE, 0)
        f.seek(older)
        data = f.read(CALIBRATION_FILE)
    if older:
        cut = data.find(b"\n") + 1  # the first line is cut off unless the cut is at its start
        older, data = older + cut, data[cut:]
    return data.decode("utf-8", "replace"), older


def read_records(path: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """(records that match the schema, why each damaged line was skipped, bytes of older records
    not read); nothing when there is no file. OSError (safe_io.UnsafeFile: a FIFO, device or link)
    for anything else."""
    try:
        text, older = read_newest(path)
    except FileNotFoundError:
        return [], [], 0
    skipped: list[str] = []
    return parse_records(text.splitlines(), skipped), skipped, older


def speed_records(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The records the speed model calibrates from: none when the file is missing or unsafe to
    read."""
    try:
        return read_records(calibration_path(env))[0]
    except OSError:
        return []


def _is_ours(line: str) -> bool:
    """A record llamafit writes: a JSON object that matches the schema
    (memory.calibration.record_problem) and holds buffers, speed or llamafit's version."""
    try:
        record = json.loads(line, parse_constant=lambda c: None, parse_int=json_int)
    except (ValueError, RecursionError):
        return False
    return record_problem(record) is None and bool({"buffers", "speed", "llamafit"} & set(record))


def _lines(f: BinaryIO) -> Iterator[str]:
    """The file's non-blank lines, one at a time (a file of any size, a line of any length)."""
    for raw in f:
        line = raw.decode("utf-8", "replace")
        if line.strip():
            yield line


@dataclass(frozen=True)
class Cleared:
    removed: int  # records dropped
    kept: int  # records of the other kind, still in the file
    existed: bool


def clear(path: str, kind: str | None = None) -> Cleared:
    """Drop every record (`kind` None: delete the file) or only one kind's ("memory" or "speed": the
    file is rewritten atomically without them). Refused unless the file is a regular file of
    ours: every line a record of ours, but for a last line cut off mid-write."""
    try:
        f, st = open_regular(path)
    except FileNotFoundError:
        return Cleared(0, 0, False)
    except OSError as e:
        raise LlamafitError(
            f"{path} {e.strerror or e}: not cleared (llamafit removes only its own regular "
            "calibration file)"
        ) from e
    not_ours = LlamafitError(
        f"{path} does not hold llamafit's calibration records: not cleared (remove it yourself "
        "if it is yours)"
    )
    removed = kept = 0
    keep: list[str] = []  # the other kind's records (kind given): rewritten
    bad_line = False  # a line that is not ours: allowed only last, and not first
    with f:
        for i, line in enumerate(_lines(f)):
            if bad_line:
                raise not_ours
            if not _is_ours(line):
                if i == 0:
                    raise not_ours
                bad_line = True
                continue
            record = parse_records([line])
            if kind is not None and record and kind_of(record[0]) != kind:
                keep.append(json.dumps(record[0]) + "\n")
                kept += 1
            else:
                removed += len(record)
    try:
        if kind is None:
            remove_read(path, st)
            return Cleared(removed, 0, True)
        write_atomic(path, "".join(keep).encode())
    except OSError as e:
        raise LlamafitError(f"{path}: {e.strerror or e}") from e
    return Cleared(removed, kept, True)


# ---- llama.cpp's own estimate, per server build ----

FORMAT = 1
RECORD_FILE = 1 << 20
MAX_ENTRIES = 500  # per build: the oldest are dropped beyond it


def record_path(identity: str) -> str:
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache_dir(), "llama-check", f"{digest}.json")


def device_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
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
            entry["kind"] in DIFFERENCE_KINDS
            and _int(entry.get("bytes"))
            and isinstance(entry.get("model"), str)
            and _plausible_bytes(entry["bytes"], entry.get("total_bytes", 0))
        )
    return _int(entry.get("max_tensor_bytes")) and entry["max_tensor_bytes"] > 0


def _plausible_bytes(difference: int, total_bytes: int) -> bool:
    """A difference no larger than the whole device (a device of unknown size: any): more room
    than the card has is no estimate of what runs on it, and would refuse every later plan
    (#37 F10)."""
    return total_bytes <= 0 or abs(difference) <= total_bytes


def plausible(d: Difference, device: DeviceSpec) -> bool:
    """Whether one difference from llama.cpp's dry run may be remembered: none larger than the
    device (more room than the card has is no estimate of what runs on it)."""
    return _plausible_bytes(d.bytes, device.total_bytes or 0)


def load(identity: str) -> list[dict[str, Any]]:
    """The build's valid entries; [] when there is no file, or it is damaged or unsafe to read."""
    read = _read_file(record_path(identity))
    if read is None or read[0]["identity"] != identity:
        return []
    return [e for e in read[0]["entries"] if _valid(e)]


def _entry_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return (*device_key(entry), entry.get("model"), entry.get("kind"))


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
    later, as larger_wins applies them now); an implausible one is not remembered (plausible). A
    compute difference says `same_graph`: it was taken at llama-fit-params' own graph
    (fit_params_rc); one recorded before that held its worst-case logits and is never applied."""
    gpus = {g.name: g for g in p.target.gpus}
    name = os.path.basename(p.facts.path)
    return [
        device_fields(p, gpus[d.device])
        | {"model": model_key(p), "model_name": name, "kind": d.kind, "bytes": d.bytes}
        | {"agrees": d.device not in differs, "config": dict(config), "time": _now()}
        | ({"same_graph": True} if d.kind == "compute" else {})
        for d in diffs
        if d.device in gpus and plausible(d, gpus[d.device])
    ]


def limit_entries(p: Prepared, limits: Mapping[str, int]) -> list[dict[str, Any]]:
    """The entries of tensor limits learned from llama.cpp's placement (device name → bytes)."""
    gpus = {g.name: g for g in p.target.gpus}
    return [
        device_fields(p, gpus[name])
        | {"max_tensor_bytes": limit, "model_name": os.path.basename(p.facts.path), "time": _now()}
        for name, limit in limits.items()
        if name in gpus
    ]


# ---- llama.cpp's remembered estimates, listed and cleared with the calibration records (#37 F10) --


def _folder() -> str:
    return os.path.join(cache_dir(), "llama-check")


def _read_file(path: str) -> tuple[dict[str, Any], os.stat_result] | None:
    """One record file of ours (a regular file, our format), with its stat; None otherwise."""
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
