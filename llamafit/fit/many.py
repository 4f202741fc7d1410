"""Many models on one machine: which fit on the GPUs together and each one's fitted flags (the
llama-swap config and router presets that serve them are server/scripts.py's).

Packing (the GPUs; on a machine without GPUs, host RAM): each model's footprint at its minimum
context (min(4096, trained), every layer it can place) is packed first-fit-decreasing into sets
whose footprints, per device, stay within the device's usable memory less the reserve. Each set's
leftover memory is then shared equally: every member is solved again with its footprint plus its
share as its devices, so the members together never exceed them. A model alone in its set gets
the whole machine. llama-swap: every set of two or more is a `swap: false` group (they run
together); the rest share one `swap: true` group; every group is `exclusive: true`, so loading
any model unloads the other groups' models first and at most one set is resident.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from .devices import used_per_gpu
from .search import Target
from .solver import DEFAULT_MIN_CTX, Choice, NoFit, Policy, solve_exact


@dataclass(frozen=True)
class Member:
    """One model's fitted launch inside a set."""

    name: str
    choice: Choice
    gpu_bytes: tuple[int, ...]  # per GPU, as planned, the reserve not counted


def pool(target: Target) -> tuple[DeviceSpec, ...]:
    """The memory the models share: the GPUs, or the host RAM on a machine without GPUs."""
    return target.gpus or (target.host,)


def pooled(target: Target, c: Choice) -> tuple[int, ...]:
    """A choice's bytes on the pooled devices, the reserve not counted (memory.Breakdown rows); 0
    on a GPU the choice leaves out (solver.device_subsets)."""
    if not target.gpus:
        return tuple(
            d.used_bytes - target.reserve_bytes for d in c.breakdown.devices if d.kind == "host"
        )
    used = used_per_gpu(target.gpus, c.breakdown.devices)
    return tuple(max(u - target.reserve_bytes, 0) if u else 0 for u in used)


def footprint(target: Target, cfg: LaunchConfig) -> tuple[int, ...] | None:
    """Per-device bytes at the minimum context (None: not even that fits on this machine)."""
    ctx = min(DEFAULT_MIN_CTX, target.model.facts.n_ctx_train)
    try:
        c = solve_exact(target, cfg, Policy(ctx=ctx))
    except NoFit:
        return None
    return pooled(target, c)


def capacities(devices: Sequence[DeviceSpec], reserve_bytes: int) -> tuple[int, ...]:
    return tuple(max((g.usable_bytes or 0) - reserve_bytes, 0) for g in devices)


def pack(footprints: Sequence[tuple[int, ...] | None], caps: tuple[int, ...]) -> list[list[int]]:
    """Indices into `footprints` in sets that fit together (first-fit decreasing by total bytes);
    a model with no footprint, or none on a GPU, is alone in its set."""
    order = sorted(range(len(footprints)), key=lambda i: -sum(footprints[i] or (1 << 62,)))
    sets: list[list[int]] = []
    used: list[list[int]] = []
    for i in order:
        fp = footprints[i]
        if fp is None or not caps:
            sets.append([i])
            used.append(list(caps))
            continue
        for s, u in zip(sets, used, strict=True):
            first = footprints[s[0]]
            if first is not None and all(u[d] + fp[d] <= caps[d] for d in range(len(caps))):
                s.append(i)
                for d in range(len(caps)):
                    u[d] += fp[d]
                break
        else:
            sets.append([i])
            used.append(list(fp))
    return sets


def shares(members: Sequence[tuple[int, ...]], caps: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each member's footprint plus an equal part of what the set leaves free, per GPU."""
    k = len(members)
    left = [caps[d] - sum(m[d] for m in members) for d in range(len(caps))]
    return [tuple(m[d] + left[d] // k for d in range(len(caps))) for m in members]


def with_budget(target: Target, budget: tuple[int, ...]) -> Target:
    """The same machine with each pooled device's usable memory cut to `budget` (plus the
    reserve)."""
    cut = tuple(
        replace(g, free_bytes=b + target.reserve_bytes)
        for g, b in zip(pool(target), budget, strict=True)
    )
    return replace(target, gpus=cut) if target.gpus else replace(target, host=cut[0])


@dataclass(frozen=True)
class Packing:
    sets: tuple[tuple[Member, ...], ...]
    unfit: tuple[str, ...]  # names of models nothing fits for


def plan_many(
    names: Sequence[str], targets: Sequence[Target], cfgs: Sequence[LaunchConfig], policy: Policy
) -> Packing:
    """Pack the models into sets that fit together and solve each member within its share."""
    caps = capacities(pool(targets[0]), targets[0].reserve_bytes) if targets else ()
    fps = [footprint(t, c) for t, c in zip(targets, cfgs, strict=True)]
    sets, unfit = [], []
    for idx in pack(fps, caps):
        alone = len(idx) == 1
        budgets = [None] * len(idx) if alone else shares([fps[i] or () for i in idx], caps)
        members = []
        for i, budget in zip(idx, budgets, strict=True):
            target = targets[i] if budget is None else with_budget(targets[i], budget)
            try:
                c = solve_exact(target, cfgs[i], policy)
            except NoFit:
                unfit.append(names[i])
                continue
            members.append(Member(names[i], c, pooled(target, c)))
        if members:
            sets.append(tuple(members))
    return Packing(tuple(sets), tuple(unfit))
