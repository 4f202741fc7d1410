"""The speed model learns from earlier runs (pure): `run --verify` records what the server measured
next to what the model estimated at that fill, and every `run` when its server stops records the
server's own timings of the requests it served (kind "serve"; run_verify.py). For the same machine
and model family (GGUF architecture), the generation efficiencies (memory, and on the CPU decode and
attention) of the slowest backend are scaled by the median measured / estimated over those runs, and
estimates say so.

One bad run must not poison later estimates (issue #23: one run of 4 short requests on a busy
machine scaled every later estimate by x0.32-0.36), so a run counts only when
  - the machine was not overloaded: the 1-minute load average when it was recorded was at most the
    number of CPUs (a record without both figures, written before they were, does not count);
  - its ratio is one a machine can explain (MIN_RATIO..MAX_RATIO);
and a scale is used only when the runs that count hold enough evidence together: at least
MIN_REQUESTS requests and MIN_GENERATED_TOKENS generated tokens (a `run --verify` request generates
16). The scale is the median over the counted runs, clamped to MIN_SCALE..MAX_SCALE: no run, and no
few runs, move an estimate by more than that."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from .speed import EFFICIENCY, SpeedInputs, with_efficiency

MIN_RATIO, MAX_RATIO = 0.01, 10.0  # outside this a record says more about the run than the machine
MIN_SCALE, MAX_SCALE = 0.5, 2.0  # how far earlier runs may move an estimate
MIN_REQUESTS, MIN_GENERATED_TOKENS = 8, 1024  # the evidence a scale needs, over all its runs
# runs that measure how far runs here spread: with them a calibrated range narrows to that spread
# (never below MIN_BAND, never wider than the uncalibrated one)
MIN_SPREAD_RUNS, MIN_BAND = 3, 0.1


@dataclass(frozen=True)
class SpeedScale:
    """What the records of one (machine, architecture, backend) say, and the scale estimates use."""

    machine: str
    architecture: str
    backend: str
    runs: int = 0  # runs that count
    requests: int = 0
    generated_tokens: int = 0
    median: float | None = None  # measured / estimated over the runs that count, before clamping
    # the largest share a counted run lay from the median (max |ratio / median - 1|); None: fewer
    # than MIN_SPREAD_RUNS runs
    spread: float | None = None
    # reason -> runs: "overloaded", "load_unknown", …
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def enough(self) -> bool:
        return self.requests >= MIN_REQUESTS and self.generated_tokens >= MIN_GENERATED_TOKENS

    @property
    def scale(self) -> float | None:
        """The factor estimates use: None until the counted runs hold enough evidence."""
        if self.median is None or not self.enough:
            return None
        return min(max(self.median, MIN_SCALE), MAX_SCALE)


def _num(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _speed_of(record: dict[str, Any]) -> dict[str, Any] | None:
    speed = record.get("speed")
    if record.get("kind") not in ("verify", "serve") or not isinstance(speed, dict):
        return None
    if not all(isinstance(speed.get(k), str) for k in ("machine", "architecture", "backend")):
        return None
    return speed


def _why_not(speed: dict[str, Any]) -> str | None:
    """Why a run's timings must not count, or None when they may."""
    measured, estimated, eff = (
        speed.get(k) for k in ("generation_tps", "estimated_generation_tps", "efficiency")
    )
    if not (
        _num(measured)
        and _num(estimated)
        and _num(eff)
        and 0 < measured < 1e9
        and 0 < estimated < 1e9
        and 0 < eff < 1e9
    ):
        return "damaged"
    if not MIN_RATIO <= measured / estimated <= MAX_RATIO:
        return "implausible"
    load, cpus = speed.get("load_average"), speed.get("cpus")
    if not (_num(load) and _num(cpus) and load >= 0 and cpus >= 1):
        return "load_unknown"
    return "overloaded" if load > cpus else None


def _count(value: Any) -> int:
    return int(value) if _num(value) and 0 <= value < 1 << 40 else 0


def _evidence(record: dict[str, Any], speed: dict[str, Any]) -> tuple[int, int]:
    """(requests, generated tokens) of one run: a verify record is one request of
    `verify.n_predicted`."""
    if record.get("kind") == "verify":
        verify = record.get("verify")
        return 1, _count(verify.get("n_predicted") if isinstance(verify, dict) else None)
    return _count(speed.get("requests")), _count(speed.get("generated_tokens"))


def speed_scales(records: Iterable[dict[str, Any]]) -> list[SpeedScale]:
    """Every (machine, architecture, backend) the speed records name, with the runs that count and
    why the others do not, in the order first seen."""
    ratios: dict[tuple[str, str, str], list[float]] = {}
    out: dict[tuple[str, str, str], SpeedScale] = {}
    for r in records:
        speed = _speed_of(r)
        if speed is None:
            continue
        key = (speed["machine"], speed["architecture"], speed["backend"])
        s = out.setdefault(key, SpeedScale(*key))
        ratios.setdefault(key, [])
        why = _why_not(speed)
        if why is not None:
            out[key] = replace(s, skipped={**s.skipped, why: s.skipped.get(why, 0) + 1})
            continue
        requests, tokens = _evidence(r, speed)
        ratios[key].append(speed["generation_tps"] / speed["estimated_generation_tps"])
        out[key] = replace(
            s,
            runs=s.runs + 1,
            requests=s.requests + requests,
            generated_tokens=s.generated_tokens + tokens,
        )
    if not out:
        return []
    import statistics  # here: a plan without measured runs never needs it (about 3 ms)

    return [
        replace(
            s,
            median=statistics.median(ratios[k]) if ratios[k] else None,
            spread=_spread(ratios[k]),
        )
        for k, s in out.items()
    ]


def _spread(ratios: list[float]) -> float | None:
    if len(ratios) < MIN_SPREAD_RUNS:
        return None
    import statistics  # here, as in scales: a plan without measured runs never needs it

    mid = statistics.median(ratios)
    return max(abs(r / mid - 1) for r in ratios)


def calibrate(
    inputs: SpeedInputs, records: Iterable[dict[str, Any]], *, machine: str, architecture: str
) -> SpeedInputs:
    """Inputs with the generation efficiency learned from earlier measured runs, when they hold
    enough evidence."""
    notes = []
    for s in speed_scales(records):
        if s.machine != machine or s.architecture != architecture or (ratio := s.scale) is None:
            continue
        table = inputs.efficiency if inputs.efficiency is not None else EFFICIENCY
        # the backend on each memory class (cuda, cuda-hbm): runs here scale the one in use
        keys = [k for k in table if k == s.backend or k.startswith(f"{s.backend}-")]
        for key in keys or [s.backend]:
            base = table.get(key) or inputs.efficiency_for(s.backend)
            source = (
                f"{base.source}, x {ratio:.2f}: the median of {s.runs} measured run(s) of "
                f"{architecture} here" + (" (clamped)" if ratio != s.median else "")
            )
            # every rate a token is charged at, scaled alike (replace keeps the kernel shares that
            # a positional copy dropped: attention_kernel, prompt_attention_kernel)
            scaled = replace(
                base,
                generation=base.generation * ratio,
                source=source,
                decode=base.decode and base.decode * ratio,
                attention=base.attention and base.attention * ratio,
                attention_kernel=base.attention_kernel and base.attention_kernel * ratio,
                layer_seconds=base.layer_seconds / ratio,
                band=base.band if s.spread is None else min(base.band, max(s.spread, MIN_BAND)),
                stream=base.stream * ratio,
            )
            inputs = with_efficiency(inputs, key, scaled)
        notes.append(
            f"{s.backend} generation speed x {ratio:.2f}, measured by {s.runs} run(s) of "
            f"{architecture} on this machine ({s.requests:,} requests, {s.generated_tokens:,} "
            "tokens; llamafit calibration show)"
        )
    return replace(inputs, calibrated="; ".join(notes)) if notes else inputs
