"""The calibration file on disk (an edge): read it bounded, append to it, clear it (all through
safe_io).

The file may be anything `$LLAMAFIT_CALIBRATION` names: it is read only when it is a regular file
(no FIFO, device node or symbolic link; its newest CALIBRATION_FILE bytes, whole lines: the records
are appended, so a larger file's oldest are the ones not read), appended to only when it is a
regular file (safe_io.append_line), and removed or rewritten only when it is a regular file whose
every line is a record llamafit writes (a JSON object of its schema; a cut-off last line is
allowed), so that `calibration clear` never deletes a file that is not ours. Clearing reads the
file line by line, whatever its size (#37 F13: a file over 16 MiB could be neither shown nor
cleared).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import LlamafitError
from ..memory.calibration import json_int, parse_records, record_problem
from ..paths import calibration_path
from ..safe_io import CALIBRATION_FILE, open_regular, remove_read, write_atomic

# the speed model's records (run_verify.py); the rest are memory records
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
