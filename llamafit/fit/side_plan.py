"""Planning with side models resident: what each costs in context, and the steps that make a launch
fit when the side models are the reason it does not (move the projector to the CPU first, then
drop).

Pure: the memory model and the searches of search.py, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..memory.config import LaunchConfig
from ..memory.side_models import SidePlan
from .search import Target, max_context

# the order in which side models give way (--no-mmproj-offload keeps the projector working)
STEPS = ("mmproj_to_cpu", "drop_mmproj", "drop_draft", "drop_mtp")


@dataclass(frozen=True, slots=True)
class SideCost:
    """How many tokens of context per slot one side model costs at the chosen configuration."""

    kind: str  # draft | mtp | mmproj
    tokens: int  # the largest context without it, minus the one with it (0: it costs none)
    bytes: int  # its bytes on the GPUs (on the host without GPUs)


def _kinds(side: SidePlan) -> list[str]:
    kinds = []
    if side.projector is not None:
        kinds.append("mmproj")
    if side.draft is not None:
        kinds.append("draft")
    if side.flags.mtp:
        kinds.append("mtp")
    return kinds


def context_costs(
    target: Target, cfg: LaunchConfig, ctx: int, hi: int, side_bytes: dict[str, int]
) -> tuple[SideCost, ...]:
    """For each side model: the largest per-slot context without it (everything else as chosen),
    minus `ctx`."""
    side = target.side
    if side is None:
        return ()
    out = []
    for kind in _kinds(side):
        without = max_context(replace(target, side=side.dropping(kind)), cfg, hi, ctx)
        out.append(SideCost(kind, max(0, (without or ctx) - ctx), side_bytes.get(kind, 0)))
    return tuple(out)


def apply_step(side: SidePlan, step: str) -> SidePlan | None:
    """The side models after one step of STEPS (None: none left); the same plan where it does not
    apply."""
    if step == "mmproj_to_cpu":
        return (
            replace(side, flags=replace(side.flags, mmproj_offload=False))
            if side.projector
            else side
        )
    kind = step.removeprefix("drop_")
    return side.dropping(kind) if kind in _kinds(side) else side


def applicable(side: SidePlan, step: str) -> bool:
    if step == "mmproj_to_cpu":
        return (
            side.projector is not None
            and side.flags.mmproj_offload
            and "mmproj_offload" not in side.flags.given
        )
    return step.removeprefix("drop_") in _kinds(side)
