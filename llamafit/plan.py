"""`llamafit plan` as a function: solve, then explain — the trade-off table, marginal costs and
an honest verdict, every number from the memory model."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import LaunchConfig
from .memory import Breakdown
from .search import STEP, Target, max_context
from .solver import Choice, NoFit, Policy, bounds, combos, solve

MIB = 1 << 20


@dataclass(frozen=True)
class Tradeoff:
    flash_attn: str
    type_k: str
    type_v: str
    n_gpu_layers: int
    n_cpu_moe: int
    max_ctx: int | None  # per slot; None: not even the minimum fits


@dataclass(frozen=True)
class PlanResult:
    choice: Choice | None
    tradeoffs: tuple[Tradeoff, ...]
    mib_per_1000_tokens: float | None  # GPU memory one more 1,000 tokens per slot costs
    mib_per_layer: float | None  # GPU memory one more offloaded block costs
    verdict: str
    warnings: tuple[str, ...]


def tradeoffs(target: Target, base: LaunchConfig, policy: Policy, lo: int, hi: int) -> list[Tradeoff]:
    """The largest context per (flash attention, K/V types) at the chosen offload and -ub."""
    rows = []
    for cfg in combos(replace(base, given=base.given | {"n_ubatch"}), policy):
        rc_ngl = target.evaluate(replace(cfg, n_ctx=STEP))
        ngl = rc_ngl[0].n_gpu_layers if rc_ngl else cfg.n_gpu_layers
        rows.append(Tradeoff(cfg.flash_attn, cfg.type_k, cfg.type_v, ngl, cfg.n_cpu_moe, max_context(target, cfg, hi, lo)))
    return rows


def _gpu_used(b: Breakdown) -> int:
    return sum(d.used_bytes for d in b.devices if d.kind == "gpu")


def marginal_costs(target: Target, choice: Choice) -> tuple[float | None, float | None]:
    """MiB of GPU memory per 1,000 more tokens per slot, and per block moved onto the GPU."""
    if not target.gpus:
        return None, None
    slots = choice.rc.n_stream
    smaller = target.evaluate(replace(choice.cfg, n_ctx=max(STEP, choice.ctx - 4 * STEP) * slots))
    per_tokens = None
    if smaller and choice.ctx > STEP:
        tokens = choice.ctx - max(STEP, choice.ctx - 4 * STEP)
        per_tokens = (_gpu_used(choice.breakdown) - _gpu_used(smaller[1])) / tokens * 1000 / MIB
    fewer = target.evaluate(replace(choice.cfg, n_gpu_layers=max(choice.rc.n_gpu_layers - 1, 0)))
    per_layer = (_gpu_used(choice.breakdown) - _gpu_used(fewer[1])) / MIB if fewer and choice.rc.n_gpu_layers else None
    return per_tokens, per_layer


def _verdict(target: Target, choice: Choice, lo: int, hi: int, per_tokens: float | None,
             per_layer: float | None) -> str:  # fmt: skip
    facts = target.model.facts
    rc = choice.rc
    kv = f"{rc.type_k.name.lower()}/{rc.type_v.name.lower()} KV"
    n_all = facts.n_layer_all + 1
    where = "on the CPU" if not target.gpus else (
        "all layers on the GPU" if rc.n_gpu_layers >= n_all and not rc.n_cpu_moe and not rc.cpu_moe
        else f"{n_all - rc.n_gpu_layers} of {n_all} layers and the experts of {rc.n_cpu_moe} blocks on the CPU"
        if rc.n_cpu_moe else f"{n_all - rc.n_gpu_layers} of {n_all} layers on the CPU (slower)")  # fmt: skip
    text = f"fits {choice.ctx:,} tokens per slot with {where}, {kv}, flash attention {'on' if rc.flash_attn else 'off'}"
    if choice.ctx >= hi:
        return text + (" — the trained maximum" if hi == facts.n_ctx_train else "")
    missing = hi - choice.ctx
    if per_tokens and per_layer:
        layers = int(-(-missing * per_tokens / 1000 // per_layer))
        text += (f"; {hi:,} would need about {missing * per_tokens / 1000:,.0f} MiB more GPU memory "
                 f"(each block moved to the CPU frees {per_layer:,.0f} MiB: about {layers} blocks)")  # fmt: skip
    return text


def plan(target: Target, cfg: LaunchConfig, policy: Policy) -> PlanResult:
    lo, hi = bounds(target, cfg, policy)
    warnings = []
    if target.gpus and target.reserve_bytes < 512 * MIB:
        warnings.append(f"the reserve per GPU is {target.reserve_bytes // MIB} MiB: below 512 MiB the CUDA context "
                        "and memory pools may not fit")  # fmt: skip
    try:
        choice = solve(target, cfg, policy)
    except NoFit as e:
        rows = tradeoffs(target, cfg, policy, STEP, hi)
        return PlanResult(None, tuple(rows), None, None, f"does not fit: {e}", tuple(warnings))
    rows = tradeoffs(target, choice.cfg, policy, STEP, hi)
    per_tokens, per_layer = marginal_costs(target, choice)
    verdict = _verdict(target, choice, lo, hi, per_tokens, per_layer)
    return PlanResult(choice, tuple(rows), per_tokens, per_layer, verdict, tuple(warnings))

