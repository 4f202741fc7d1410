"""`llamafit ls`, the pure part: what one model can do on a machine, as one row of data.

For each model the solver's default policy (speed: every layer on the GPUs first, then the
largest context, then the most precise KV cache) answers: the largest context per slot and its
KV type, the -ngl / --n-cpu-moe it needs when not every layer fits, or — when nothing fits — the
GPU memory it would need for the minimum context with every layer on one GPU and q8_0 KV
(f16 where q8_0's block does not divide the head size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..facts.hparams import ModelFacts
from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..memory.model import MemoryModel
from ..memory.side_models import SidePlan
from .explain import smallest_gpu_any_kv
from .plan_speed import choice_speed
from .search import Target
from .solver import DEFAULT_MIN_CTX, NoFit, Policy, solve_exact
from .speed import SpeedInputs

VERDICTS = ("fits", "offload", "needs", "no-fit")  # sort order: best first


@dataclass(frozen=True)
class Fit:
    """What fits here. verdict: fits (all layers on the GPUs), offload (some on the CPU), needs
    (no config fits: `need_bytes` of one GPU would), no-fit (nothing fits and no GPU size helps)."""

    verdict: str
    ctx: int | None = None  # per slot
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: bool | None = None
    n_gpu_layers: int | None = None
    n_layers: int | None = None  # block count + the output layer (what -ngl counts)
    n_cpu_moe: int = 0
    gpu_bytes: int | None = None  # on the GPUs together
    need_bytes: int | None = None
    error: str | None = None
    # speed.py: [full context, empty context]; None: a bandwidth unknown
    generation_tps: list[float] | None = None
    host_bytes: int | None = None  # on the host (the reserve included on a machine without GPUs)
    # the paired projector's weights and encoder compute, counted in the fit
    mmproj_bytes: int | None = None
    # per device of the chosen config (DeviceUsage.compute_source): "graph" or "estimate"
    compute_source: dict[str, str] | None = None


@dataclass(frozen=True)
class Row:
    name: str
    store: str
    ref: str
    path: str
    n_shards: int
    mmproj: str | None
    arch: str
    quant: str
    size_bytes: int
    n_ctx_train: int
    fit: Fit

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Row:
        return Row(**{**data, "fit": Fit(**data["fit"])})


def fit_model(
    facts: ModelFacts,
    cfg: LaunchConfig,
    gpus: tuple[DeviceSpec, ...],
    host: DeviceSpec,
    *,
    reserve_bytes: int,
    engine: str = "llama-server",
    build: int | None = None,
    policy: Policy | None = None,
    speed: SpeedInputs | None = None,
    side: SidePlan | None = None,
) -> Fit:
    """`side`: the paired projector (side_models.SidePlan), resident next to the model in every
    config tried."""
    target = Target(MemoryModel(facts), engine, build, gpus, host, reserve_bytes, side=side)
    n_layers = facts.n_layer_all + 1
    try:
        pol = policy or Policy()
        c = solve_exact(target, cfg, pol)
    except NoFit:
        if not gpus:
            return Fit("no-fit", n_layers=n_layers)
        lo = min(DEFAULT_MIN_CTX, facts.n_ctx_train)
        found = smallest_gpu_any_kv(target, cfg, lo)
        if found is None:
            return Fit("no-fit", n_layers=n_layers)
        return Fit(
            "needs",
            ctx=lo,
            type_k=found[2][0],
            type_v=found[2][1],
            flash_attn=True,
            n_layers=n_layers,
            need_bytes=found[1],
        )
    rc = c.rc
    full = not gpus or (rc.n_gpu_layers >= n_layers and not rc.n_cpu_moe and not rc.cpu_moe)
    gpu_bytes = sum(d.used_bytes for d in c.breakdown.devices if d.kind == "gpu") if gpus else None
    est = choice_speed(target, c, speed) if speed else None
    mmproj = (
        sum(u.total_bytes for u in c.breakdown.side_models if u.kind == "mmproj") if side else None
    )
    return Fit(
        "fits" if full else "offload",
        c.ctx,
        rc.type_k.name.lower(),
        rc.type_v.name.lower(),
        rc.flash_attn,
        min(rc.n_gpu_layers, n_layers),
        n_layers,
        rc.n_cpu_moe,
        gpu_bytes,
        generation_tps=[round(x, 2) for x in est.generation_tps] if est else None,
        host_bytes=c.breakdown.devices[-1].used_bytes,
        mmproj_bytes=mmproj,
        compute_source={d.name: d.compute_source for d in c.breakdown.devices},
    )


def best_possible(row: Row) -> bool:
    """The policy's objective is reached in full: every layer placed, the trained context, f16 K and
    V. On a host with more free memory the solver can do no better, so the answer stands wherever
    these bytes still fit (ls_cli reuses such a row on a CPU-only machine whose free RAM
    changed)."""
    f = row.fit
    return f.verdict == "fits" and f.ctx == row.n_ctx_train and f.type_k == f.type_v == "f16"


def sort_rows(rows: Sequence[Row]) -> list[Row]:
    """Best verdict first; within one, the largest model first (what this machine can run at its
    best)."""
    return sorted(rows, key=lambda r: (VERDICTS.index(r.fit.verdict), -r.size_bytes, r.name))
