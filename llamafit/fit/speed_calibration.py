"""The speed model learns from earlier runs (pure): `run --verify` records what the server measured
next to what the model estimated at that fill, and every `run` when its server stops records the
server's own timings of the requests it served (kind "serve"; run_verify.py). For the same machine and model family
(GGUF architecture), the generation efficiencies (memory, and on the CPU decode and attention) of the
slowest backend are scaled by the median measured / estimated over those runs, and estimates say so."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .speed import Efficiency, SpeedInputs, with_efficiency

MIN_RATIO, MAX_RATIO = 0.01, 10.0  # outside this a record says more about the run than the machine


def _implied(record: dict[str, Any], machine: str, architecture: str) -> tuple[str, float] | None:
    speed = record.get("speed")
    if record.get("kind") not in ("verify", "serve") or not isinstance(speed, dict):
        return None
    if speed.get("machine") != machine or speed.get("architecture") != architecture:
        return None
    measured, estimated, eff = (speed.get(k) for k in ("generation_tps", "estimated_generation_tps", "efficiency"))
    backend = speed.get("backend")
    if not isinstance(backend, str) or not all(isinstance(v, (int, float)) and 0 < v < 1e9 for v in
                                               (measured, estimated, eff)):  # fmt: skip
        return None
    ratio = float(measured) / float(estimated)  # type: ignore[arg-type]
    return (backend, ratio) if MIN_RATIO <= ratio <= MAX_RATIO else None


def calibrate(inputs: SpeedInputs, records: Iterable[dict[str, Any]], *, machine: str,
              architecture: str) -> SpeedInputs:  # fmt: skip
    """Inputs with the generation efficiency learned from earlier measured runs, when there are any."""
    by_backend: dict[str, list[float]] = {}
    for r in records:
        found = _implied(r, machine, architecture)
        if found:
            by_backend.setdefault(found[0], []).append(found[1])
    notes = []
    for backend, values in sorted(by_backend.items()):
        base = inputs.efficiency_for(backend)
        ratio = statistics.median(values)
        source = f"{base.source}, x {ratio:.2f}: the median of {len(values)} measured run(s) of {architecture} here"
        scaled = Efficiency(base.generation * ratio, base.prompt, source, base.decode and base.decode * ratio,
                            base.attention and base.attention * ratio)  # fmt: skip
        inputs = with_efficiency(inputs, backend, scaled)
        notes.append(f"{backend} generation speed x {ratio:.2f}, measured by {len(values)} measured run(s) of "
                     f"{architecture} on this machine")  # fmt: skip
    return replace(inputs, calibrated="; ".join(notes)) if notes else inputs
