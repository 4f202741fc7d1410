"""After an out-of-memory start: a plan with a strictly smaller footprint on the device that failed.

Each retry caps the failed device below what the last plan put there (by a tenth, at least 1 MiB,
and, when that alone does not shrink it (a fixed layout, or the host beside
GPUs, which the solver does not bound), the context per slot by a quarter. The result says what
was given up, as numbers; cmd_run writes the sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..units import MIB
from .explain import PlanResult, plan
from .search import STEP, Target
from .solver import Choice, Policy
from .speed import SpeedInputs

MIN_STEP = MIB  # at least 1 MiB less each try; a tenth of the footprint on big devices
_CUDA_DEVICE = re.compile(r"on device (\d+)")


def failed_device(line: str | None, names: Sequence[str]) -> str | None:
    """Which device an out-of-memory log line names: a device name in it, ggml-cuda's `on device N`,
    a CPU buffer or host allocation (the host), or None when it does not say."""
    if not line:
        return None
    for name in sorted(names, key=len, reverse=True):
        if re.search(rf"\b{re.escape(name)}\b", line):
            return name
    if (m := _CUDA_DEVICE.search(line)) and f"CUDA{m.group(1)}" in names:
        return f"CUDA{m.group(1)}"
    if re.search(r"\bCPU\b|ggml_aligned_malloc|cpu_buffer", line):
        return "CPU"
    return None


@dataclass(frozen=True)
class Retreat:
    result: PlanResult
    device: str  # the device whose footprint shrank ("CPU" for the host)
    before_bytes: int
    after_bytes: int
    ctx_before: int
    ctx_after: int
    # (flag, before, after) of what the next try runs differently
    changes: tuple[tuple[str, str, str], ...]


def _changes(a: Choice, b: Choice) -> tuple[tuple[str, str, str], ...]:
    """The flags that differ between two plans, as llama-server spells them."""
    fields = (
        ("-c", lambda c: c.rc.n_ctx),
        ("-ngl", lambda c: c.rc.n_gpu_layers),
        ("--n-cpu-moe", lambda c: c.rc.n_cpu_moe),
        ("-ctk", lambda c: c.rc.type_k.name.lower()),
        ("-ctv", lambda c: c.rc.type_v.name.lower()),
        ("-fa", lambda c: c.rc.fa_flag),
        ("-ub", lambda c: c.rc.n_ubatch),
    )
    return tuple((flag, str(get(a)), str(get(b))) for flag, get in fields if get(a) != get(b))


def _used(choice: Choice, device: str) -> int:
    """What the plan puts on the device, its fixed reserve left out."""
    return next(
        (d.used_bytes - d.reserve_bytes for d in choice.breakdown.devices if d.name == device), 0
    )


def _reserve(choice: Choice, device: str) -> int:
    return next((d.reserve_bytes for d in choice.breakdown.devices if d.name == device), 0)


def _capped(spec: DeviceSpec, limit: int) -> DeviceSpec:
    usable = spec.usable_bytes
    return replace(spec, free_bytes=limit if usable is None else min(usable, limit))


def retreat(
    target: Target,
    cfg: LaunchConfig,
    policy: Policy,
    last: Choice,
    device: str | None,
    speed: SpeedInputs | None = None,
) -> Retreat | None:
    """A plan whose footprint on `device` (None: the most loaded device of `last`) is strictly
    smaller than `last`'s; None when nothing smaller fits."""
    names = [d.name for d in last.breakdown.devices]
    if device not in names:
        device = max(last.breakdown.devices, key=lambda d: d.used_bytes).name
    before = _used(last, device)
    limit = _reserve(last, device) + before - max(MIN_STEP, before // 10)
    gpus = tuple(_capped(g, limit) if g.name == device else g for g in target.gpus)
    host = _capped(target.host, limit) if device == target.host.name else target.host
    smaller = replace(target, gpus=gpus, host=host)
    attempts = [policy]
    if policy.ctx is None and last.ctx > STEP:
        attempts.append(
            replace(policy, ctx_max=max(STEP, (last.ctx - max(STEP, last.ctx // 4)) // STEP * STEP))
        )
    for pol in attempts:
        result = plan(smaller, cfg, pol, speed=speed)
        if result.choice is not None and _used(result.choice, device) < before:
            return Retreat(
                result,
                device,
                before,
                _used(result.choice, device),
                last.ctx,
                result.choice.ctx,
                _changes(last, result.choice),
            )
    return None
