"""Corrections from earlier runs: `llamafit run` appends predicted vs reported buffers to a
calibration file; later plans for the same llama.cpp build and the same devices scale the
compute-buffer prediction by the median reported/predicted ratio of those runs (pure)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SCALE, MAX_SCALE = 0.5, 2.0  # a correction outside this says more about the record than the model


@dataclass(frozen=True, slots=True)
class Correction:
    compute_scale: float
    runs: int


def parse_records(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The calibration file's JSON lines; a damaged line is skipped, not fatal."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _devices_of(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(d.get("name")), str(d.get("backend"))) for d in record.get("hardware", []) if isinstance(d, dict)]


def compute_correction(records: Iterable[dict[str, Any]], *, devices: Sequence[tuple[str, str]],
                       build: int | None) -> Correction | None:  # fmt: skip
    """Median reported/predicted compute ratio over runs with the same build and devices."""
    ratios = []
    for r in records:
        server = r.get("server") or {}
        if server.get("build") != build or _devices_of(r) != list(devices):
            continue
        applied = r.get("compute_scale") or 1.0  # undo a correction the record's prediction already had
        for row in r.get("buffers", []):
            if row.get("kind") == "compute" and row.get("predicted_mib", 0) > 0 and row.get("actual_mib", 0) > 0:
                ratios.append(row["actual_mib"] / (row["predicted_mib"] / applied))
    if not ratios:
        return None
    scale = min(max(statistics.median(ratios), MIN_SCALE), MAX_SCALE)
    return Correction(scale, len(ratios))
