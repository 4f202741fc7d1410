"""The speed model learns from earlier runs (pure): `run --verify` records what the server measured
next to what the model estimated at that fill (run_verify.py). For the same machine and model family
(GGUF architecture), the generation efficiency of the slowest backend becomes the median of
efficiency x measured / estimated over those runs, and estimates say so."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .speed import Efficiency, SpeedInputs, with_efficiency

MIN_EFF, MAX_EFF = 0.01, 2.0  # outside this a record says more about the run than the machine


def _implied(record: dict[str, Any], machine: str, architecture: str) -> tuple[str, float] | None:
    speed = record.get("speed")
    if record.get("kind") != "verify" or not isinstance(speed, dict):
        return None
    if speed.get("machine") != machine or speed.get("architecture") != architecture:
        return None
    measured, estimated, eff = (speed.get(k) for k in ("generation_tps", "estimated_generation_tps", "efficiency"))
    backend = speed.get("backend")
    if not isinstance(backend, str) or not all(isinstance(v, (int, float)) and 0 < v < 1e9 for v in
                                               (measured, estimated, eff)):  # fmt: skip
        return None
    implied = float(eff) * float(measured) / float(estimated)  # type: ignore[arg-type]
    return (backend, implied) if MIN_EFF <= implied <= MAX_EFF else None


def calibrate(inputs: SpeedInputs, records: Iterable[dict[str, Any]], *, machine: str, architecture: str) -> SpeedInputs:
    """Inputs with the generation efficiency learned from earlier verified runs, when there are any."""
    by_backend: dict[str, list[float]] = {}
    for r in records:
        found = _implied(r, machine, architecture)
        if found:
            by_backend.setdefault(found[0], []).append(found[1])
    notes = []
    for backend, values in sorted(by_backend.items()):
        base = inputs.efficiency_for(backend)
        eff = statistics.median(values)
        source = f"median of {len(values)} verified run(s) of {architecture} on this machine"
        inputs = with_efficiency(inputs, backend, Efficiency(eff, base.prompt, source, base.decode, base.attention))
        notes.append(f"{backend} generation efficiency {eff:.2f} from {len(values)} verified run(s) of {architecture} "
                     "on this machine")  # fmt: skip
    return replace(inputs, calibrated="; ".join(notes)) if notes else inputs
