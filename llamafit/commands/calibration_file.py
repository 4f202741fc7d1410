"""The calibration file on disk (an edge): read it bounded, append to it, clear it (all through
safe_io).

The file may be anything `$LLAMAFIT_CALIBRATION` names: it is read only when it is a regular file
(no FIFO, device node or symbolic link; at most CALIBRATION_FILE bytes), appended to only when it is
a regular file (safe_io.append_line), and removed or rewritten only when it is a regular file whose
every line is a record llamafit writes (a JSON object of its schema; a cut-off last line is
allowed), so that `calibration clear` never deletes a file that is not ours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LlamafitError
from ..memory.calibration import parse_records, record_problem
from ..paths import calibration_path
from ..safe_io import CALIBRATION_FILE, read_regular, read_regular_stat, remove_read, write_atomic

# the speed model's records (run_verify.py); the rest are memory records
SPEED_KINDS = (
    "verify",
    "serve",
)
KINDS = ("memory", "speed")


def kind_of(record: dict[str, Any]) -> str:
    return "speed" if record.get("kind") in SPEED_KINDS else "memory"


def read_records(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(records that match the schema, why each damaged line was skipped); [] when there is no file.
    OSError (safe_io.UnsafeFile: a FIFO, device, link or oversized file) for anything else."""
    try:
        data = read_regular(path, CALIBRATION_FILE)
    except FileNotFoundError:
        return [], []
    skipped: list[str] = []
    return parse_records(data.decode("utf-8", "replace").splitlines(), skipped), skipped


def speed_records(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The records the speed model calibrates from: none when the file is missing or unsafe to
    read."""
    try:
        return read_records(calibration_path(env))[0]
    except OSError:
        return []


def _ours(lines: list[str]) -> bool:
    """Every line a record llamafit writes (the last may be cut off mid-write): a JSON object that
    matches the schema (memory.calibration.record_problem) and holds buffers, speed or llamafit's
    version."""
    lines = [line for line in lines if line.strip()]
    for i, line in enumerate(lines):
        try:
            record = json.loads(line, parse_constant=lambda c: None)
        except (ValueError, RecursionError):
            record = None
        if record_problem(record) is not None or not {"buffers", "speed", "llamafit"} & set(record):
            if i < len(lines) - 1 or i == 0:
                return False
    return True


@dataclass(frozen=True)
class Cleared:
    removed: int  # records dropped
    kept: int  # records of the other kind, still in the file
    existed: bool


def clear(path: str, kind: str | None = None) -> Cleared:
    """Drop every record (`kind` None: delete the file) or only one kind's ("memory" or "speed": the
    file is rewritten atomically without them). Refused unless the file is a regular file of
    ours."""
    try:
        data, st = read_regular_stat(path, CALIBRATION_FILE)
    except FileNotFoundError:
        return Cleared(0, 0, False)
    except OSError as e:
        raise LlamafitError(
            f"{path} {e.strerror or e}: not cleared (llamafit removes only its own regular "
            "calibration file)"
        ) from e
    lines = data.decode("utf-8", "replace").splitlines()
    if not _ours(lines):
        raise LlamafitError(
            f"{path} does not hold llamafit's calibration records: not cleared (remove it "
            "yourself if it is yours)"
        )
    records = parse_records(lines)
    try:
        if kind is None:
            remove_read(path, st)
            return Cleared(len(records), 0, True)
        keep = [r for r in records if kind_of(r) != kind]
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in keep).encode())
    except OSError as e:
        raise LlamafitError(f"{path}: {e.strerror or e}") from e
    return Cleared(len(records) - len(keep), len(keep), True)
