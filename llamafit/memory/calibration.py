"""Corrections from earlier runs: `llamafit run` appends predicted vs reported buffers to a
calibration file; later plans for the same llama.cpp build, the same devices (backend and name)
and the same model class (GGUF architecture) scale the compute-buffer prediction by the median
reported/predicted ratio of those runs (pure).

Only complete runs count: every buffer predicted was reported, and every GPU the plan used holds
something (a CPU-only build given `--gpu 24GiB` reports nothing there, and its host compute
buffer says nothing about the GPU's)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .placement import CPU

# a correction outside this says more about the record than the model
MIN_SCALE, MAX_SCALE = (
    0.5,
    2.0,
)


@dataclass(frozen=True, slots=True)
class Correction:
    compute_scale: float
    runs: int
    architecture: str | None = None
    devices: tuple[tuple[str, str], ...] = ()
    source: str | None = None  # the calibration file it came from

    @property
    def is_identity(self) -> bool:
        """Scales by 1 to the precision shown: not applied, not mentioned."""
        return round(self.compute_scale, 3) == 1.0


def incomplete(
    rows: Iterable[dict[str, Any]], gpus: Sequence[str]
) -> tuple[str, tuple[str, ...]] | None:
    """Why a run's predicted-vs-reported rows must not be recorded, or None when they may be:
    ("nothing_on_gpu", (device,)) for a GPU the plan used on which the server reported nothing, or
    ("not_reported", ("CUDA0 KV", …)) for predicted buffers the server did not report."""
    rows = list(rows)
    for g in gpus:
        mine = [r for r in rows if r.get("device") == g]
        if any(_num(r, "predicted_mib") > 0 for r in mine) and not any(
            _num(r, "actual_mib") > 0 for r in mine
        ):
            return "nothing_on_gpu", (g,)
    missing = tuple(
        f"{r.get('device')} {r.get('kind')}"
        for r in rows
        if _num(r, "predicted_mib") >= 0.01
        and _num(r, "actual_mib") <= 0
        and r.get("kind") != "output"
    )
    return ("not_reported", missing) if missing else None


def _num(row: dict[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def is_memory_record(record: dict[str, Any]) -> bool:
    """A record of predicted vs reported buffers (no "kind"); the speed records ("verify", "serve")
    and failed runs ("failed") are not."""
    return record.get("kind") is None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def record_problem(record: Any) -> str | None:
    """Why a calibration record does not match the schema `run` writes, or None when it does."""
    if not isinstance(record, dict):
        return "not a JSON object"
    server = record.get("server", {})
    if server is not None and (
        not isinstance(server, dict)
        or not isinstance(server.get("build"), (int, type(None)))
        or isinstance(server.get("build"), bool)
    ):
        return "server is not an object with an integer build"
    hardware = record.get("hardware", [])
    if not isinstance(hardware, list) or not all(isinstance(d, dict) for d in hardware):
        return "hardware is not a list of objects"
    scale = record.get("compute_scale")
    if scale is not None and (not _number(scale) or scale <= 0):
        return "compute_scale is not a positive number"
    buffers = record.get("buffers", [])
    if not isinstance(buffers, list) or not all(isinstance(b, dict) for b in buffers):
        return "buffers is not a list of objects"
    for row in buffers:
        if any(k in row and not _number(row[k]) for k in ("predicted_mib", "actual_mib")):
            return "a buffer size is not a number"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def json_int(digits: str) -> float:
    """A JSON integer of a record; one of more than 18 digits is no size or count llamafit wrote,
    and becomes infinity, which the schema refuses (math.isfinite of a 400-digit int raises:
    issue #37 F7)."""
    return int(digits) if len(digits.lstrip("-")) <= 18 else math.inf


def parse_records(lines: Iterable[str], skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The calibration file's JSON lines that match the schema; a damaged one is skipped (its reason
    appended to `skipped`), not fatal. NaN and Infinity are refused."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_no_constant, parse_int=json_int)
        except (ValueError, RecursionError) as e:
            problem: str | None = f"not JSON: {str(e)[:60]}"
        else:
            problem = record_problem(record)
        if problem is None:
            out.append(record)
        elif skipped is not None:
            skipped.append(problem)
    return out


def _devices_of(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (str(d.get("name")), str(d.get("backend")))
        for d in record.get("hardware", [])
        if isinstance(d, dict)
    ]


# ---- the record key: which server a record came from (issue #28) ----


def record_identity(record: dict[str, Any]) -> str | None:
    """The build identity `run` recorded (server.identity: version and commit, or the files' content
    hash when the build says unknown); None for records written before identities."""
    server = record.get("server") or {}
    identity = server.get("identity") if isinstance(server, dict) else None
    return identity if isinstance(identity, str) and identity else None


def same_server(record: dict[str, Any], *, build: int | None, identity: str | None) -> bool:
    """Whether a record speaks for the server a plan is for. With an identity: the same identity,
    or an older record (no identity) of the same known build number. Without one (a plan for given
    devices): only older records of the same build. Two builds that both say "build unknown" never
    share records: their identities (content hashes) differ."""
    server = record.get("server") or {}
    theirs = record_identity(record)
    if identity is not None:
        return theirs == identity or (
            theirs is None and build is not None and server.get("build") == build
        )
    return theirs is None and server.get("build") == build


def compute_correction(
    records: Iterable[dict[str, Any]],
    *,
    devices: Sequence[tuple[str, str]],
    build: int | None,
    architecture: str | None = None,
    identity: str | None = None,
) -> Correction | None:
    """Median reported/predicted compute ratio over complete runs of the same server (same_server),
    devices and (when given) model architecture."""
    ratios: list[float] = []
    runs = 0
    for r in records:
        if (
            not is_memory_record(r)
            or not same_server(r, build=build, identity=identity)
            or _devices_of(r) != list(devices)
        ):
            continue
        if architecture is not None and r.get("architecture") != architecture:
            continue
        if incomplete(r.get("buffers", []), [n for n, _ in devices]):  # recorded before this rule
            continue
        # undo a correction the record's prediction already had
        applied = r.get("compute_scale") or 1.0
        before = len(ratios)
        for row in r.get("buffers", []):
            if (
                row.get("kind") == "compute"
                and row.get("predicted_mib", 0) > 0
                and row.get("actual_mib", 0) > 0
            ):
                ratios.append(row["actual_mib"] * applied / row["predicted_mib"])
        runs += len(ratios) > before
    if not ratios:
        return None
    import statistics  # with records only: a plan without any need not load it

    scale = min(max(statistics.median(ratios), MIN_SCALE), MAX_SCALE)
    return Correction(scale, runs, architecture, tuple(devices))


def scaled_compute(
    compute: dict[int, int], compute_scale: float, compute_scales: Sequence[float], *, n_gpu: int
) -> dict[int, int]:
    """The estimate's compute buffers times a correction learned from earlier runs: one factor for
    every device (`compute_scale`), then, when there is one per device (the GPUs in order, then
    the host: solver.exact_choice's ratios of the replay to the estimate), each device's own."""
    if compute_scale != 1.0:
        compute = {d: int(v * compute_scale) for d, v in compute.items()}
    if len(compute_scales) == n_gpu + 1:  # per device, for these devices only
        compute = {d: int(v * compute_scales[n_gpu if d == CPU else d]) for d, v in compute.items()}
    return compute
