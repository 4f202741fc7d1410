"""`llamafit plan` as a function: solve, then explain — the trade-off table, marginal costs and
an honest verdict, every number from the memory model."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InputError
from ..findings import Notice, Verdict
from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..memory.graph.replay import paused_gc
from ..memory.model import Breakdown
from ..memory.resolve import ResolvedConfig, resolve, since
from ..memory.side_models import SideFlags, SidePlan
from ..units import MIB
from .mtp import MtpEffect, mtp_effect
from .plan_speed import choice_speed, speed_of, speed_options
from .search import STEP, Target, graph_kind, max_context, streams
from .side_plan import STEPS, SideCost, applicable, apply_step, context_costs
from .solver import Choice, NoFit, Policy, bounds, combos, solve, solve_exact
from .speed import SpeedEstimate, SpeedInputs

PADDED_OR_PLAIN = ("cuda", "rocm", "vulkan", "metal")


@dataclass(frozen=True)
class Tradeoff:
    flash_attn: str
    type_k: str
    type_v: str
    n_gpu_layers: int
    n_cpu_moe: int
    max_ctx: int | None  # per slot; None: not even the minimum fits
    generation_tps: tuple[float, float] | None = None  # at that context: full, empty (speed.py)
    # llama.cpp aborts reserving this row's graph (Target.refused: the scheduler's hash set)
    llama_cpp_aborts: bool = False


@dataclass(frozen=True)
class PlanResult:
    choice: Choice | None
    tradeoffs: tuple[Tradeoff, ...]
    mib_per_1000_tokens: float | None  # GPU memory one more 1,000 tokens per slot costs
    mib_per_layer: float | None  # GPU memory one more offloaded block costs
    verdict: Verdict
    warnings: tuple[Notice | str, ...]
    smallest_gpu: str | None = None  # the catalog card that would hold the target context fully
    speed: SpeedEstimate | None = None  # tokens/s of the choice and the inputs behind it (speed.py)
    side_costs: tuple[SideCost, ...] = ()  # what each side model costs in context (side_plan.py)
    side: SidePlan | None = None  # the side models the plan keeps (after side_steps)
    side_steps: tuple[str, ...] = ()  # side_plan.STEPS taken to fit
    # with MTP self-speculation in the plan: its expected effect (mtp.py)
    mtp: MtpEffect | None = None


def smallest_gpu_for(
    target: Target, cfg: LaunchConfig, per_slot: int
) -> tuple[str | None, int] | None:
    """The smallest catalog card (and the bytes needed) that holds `per_slot` tokens per slot with
    every layer on it, the same KV choice, and the same reserve. None where nothing is known or
    where llama.cpp aborts reserving that config's graph (replay.scheduler_overflow)."""
    from ..machine.catalog import smallest_fitting

    backend = target.gpus[0].backend if target.gpus else "cuda"
    big = DeviceSpec(
        "GPU0", "gpu", backend if backend in PADDED_OR_PLAIN else "cuda", 1 << 50, 1 << 50
    )
    one = replace(target, gpus=(big,))
    n_all = target.model.facts.n_layer_all + 1
    full = replace(
        cfg,
        n_ctx=per_slot * streams(one, cfg),
        n_gpu_layers=n_all,
        n_cpu_moe=0,
        cpu_moe=False,
        tensor_split=(),
    )
    evaluated = one.evaluate(full)
    if evaluated is None:
        return None
    rc, breakdown = evaluated
    if one.model.scheduler_overflow(rc, breakdown.layer_devices, one.gpus) is not None:
        return None
    need = evaluated[1].devices[0].used_bytes
    card = smallest_fitting(need)
    if card is None:
        return None, need
    return f"{card.name} ({card.usable_bytes / 2**30:,.0f} GiB)", need


# the caches smallest_gpu_any_kv tries, smallest first: (type_k, type_v)
SMALL_CACHES = (("q8_0", "q8_0"), ("q8_0", "f16"), ("f16", "f16"))


def smallest_gpu_any_kv(
    target: Target, cfg: LaunchConfig, per_slot: int
) -> tuple[str | None, int, tuple[str, str]] | None:
    """smallest_gpu_for with flash attention and the smallest cache of SMALL_CACHES that llama.cpp
    takes for this model: q8_0 where its block divides the head size and the graph stays within
    the scheduler's hash set (a quantized K or V adds a rotation per layer: Granite 3.0 1B-A400M
    aborts with both quantized), else one of them f16, else f16."""
    for kv in SMALL_CACHES:
        found = smallest_gpu_for(
            target, replace(cfg, type_k=kv[0], type_v=kv[1], flash_attn="on"), per_slot
        )
        if found:
            return found[0], found[1], kv
    return None


def tradeoffs(
    target: Target,
    base: LaunchConfig,
    policy: Policy,
    lo: int,
    hi: int,
    speed: SpeedInputs | None = None,
) -> list[Tradeoff]:
    """The largest context per (flash attention, K/V types) at the chosen offload and -ub, and its
    speed."""
    rows = []
    arch = target.model.facts.architecture
    for cfg in combos(replace(base, given=base.given | {"n_ubatch"}), policy, arch):
        rc_ngl = target.evaluate(replace(cfg, n_ctx=STEP))
        ngl = rc_ngl[0].n_gpu_layers if rc_ngl else cfg.n_gpu_layers
        fa = cfg.flash_attn
        if fa == "auto":  # as the row would run: -fa auto settled (the pick's way: exact)
            try:
                fa = "on" if settled(target, replace(cfg, n_ctx=STEP)).flash_attn else "off"
            except InputError:
                pass
        best = max_context(target, cfg, hi, lo)
        est = (
            speed_of(target, replace(cfg, n_ctx=best * streams(target, cfg)), speed)
            if speed and best
            else None
        )
        rows.append(
            Tradeoff(
                fa,
                cfg.type_k,
                cfg.type_v,
                ngl,
                cfg.n_cpu_moe,
                best,
                est.generation_tps if est else None,
                _refused(target, cfg),
            )
        )
    return rows


def _with_pick(rows: list[Tradeoff], choice: Choice) -> list[Tradeoff]:
    """The rows with the pick's own row at the pick's context: the rows come from the hand-derived
    peaks the searches run on, the pick from the exact figures (solver.exact_choice), which may
    reach more or less."""
    rc = choice.rc
    pick = (
        "on" if rc.flash_attn else "off",
        rc.type_k.name.lower(),
        rc.type_v.name.lower(),
        rc.n_gpu_layers,
        rc.n_cpu_moe,
    )
    return [
        replace(t, max_ctx=choice.ctx)
        if (t.flash_attn, t.type_k, t.type_v, t.n_gpu_layers, t.n_cpu_moe) == pick
        else t
        for t in rows
    ]


def settled(target: Target, cfg: LaunchConfig) -> ResolvedConfig:
    """`cfg` resolved with -fa auto settled on its devices as llama_context settles it
    (MemoryModel.settle_flash_attn, the exact way check and the pick use): every figure an
    explanation prints for a config is for the flash attention it runs with. InputError where
    llama.cpp refuses it."""
    rc = resolve(cfg, target.model.facts, engine=target.engine, build=target.build)
    return target.model.settle_flash_attn(rc, target.devices_of(cfg), target.host)


def _refused(target: Target, cfg: LaunchConfig) -> bool:
    """Whether llama.cpp aborts on this config's kind of graph (Target.refused)."""
    if not target.refused:
        return False
    try:
        rc = settled(target, replace(cfg, n_ctx=STEP))
    except InputError:
        return False
    return graph_kind(rc) in target.refused


def _gpu_used(b: Breakdown) -> int:
    return sum(d.used_bytes for d in b.devices if d.kind == "gpu")


def marginal_costs(target: Target, choice: Choice) -> tuple[float | None, float | None]:
    """MiB of GPU memory per 1,000 more tokens per slot, and per block moved onto the GPU, both
    by the exact figures the pick has (Target.breakdown: the graph replay where it covers them).
    Per token: between the pick and the farthest other context of its config that the boundary
    search replayed (Choice.exact_near: no replay more, issue #36 item 5), else the pick's
    context less 4 steps."""
    if not target.gpus:
        return None, None
    per_tokens = None
    near = _rate_point(target, choice)
    if near is not None:
        ctx, other = near
        per_tokens = (
            (_gpu_used(choice.breakdown) - _gpu_used(other)) / (choice.ctx - ctx) * 1000 / MIB
        )
    fewer = _exact(target, replace(choice.cfg, n_gpu_layers=max(choice.rc.n_gpu_layers - 1, 0)))
    per_layer = (
        (_gpu_used(choice.breakdown) - _gpu_used(fewer[1])) / MIB
        if fewer and choice.rc.n_gpu_layers
        else None
    )
    if per_layer is not None and per_layer <= 0:
        # the first block on the host brings op offload's copies to the GPU: nothing to buy
        per_layer = None
    return per_tokens, per_layer


def _rate_point(target: Target, choice: Choice) -> tuple[int, Breakdown] | None:
    """The other per-slot context of the pick's config that its rate per token is taken against,
    with its exact breakdown: the farthest the boundary search replayed (Choice.exact_near: no
    replay more), else 4 steps below the pick (a replay); None where neither is."""
    if choice.exact_near:
        return max(choice.exact_near, key=lambda p: (abs(p[0] - choice.ctx), p[0]))
    if choice.ctx <= STEP:
        return None
    ctx = max(STEP, choice.ctx - 4 * STEP)
    smaller = _exact(target, replace(choice.cfg, n_ctx=ctx * choice.rc.n_stream))
    return (ctx, smaller[1]) if smaller else None


def _exact(target: Target, cfg: LaunchConfig) -> tuple[ResolvedConfig, Breakdown] | None:
    """The resolved config and its exact breakdown; None where llama.cpp would refuse it."""
    try:
        rc = settled(target, cfg)
        return rc, target.breakdown(cfg, rc)
    except InputError:
        return None


def _placement(target: Target, rc: ResolvedConfig, n_all: int) -> str:
    if not target.gpus:
        return "cpu"
    if rc.n_cpu_moe:
        return "experts_on_cpu"
    if rc.n_gpu_layers >= n_all and not rc.cpu_moe:
        return "all_gpu"
    return "layers_on_cpu"


def _verdict(
    target: Target,
    choice: Choice,
    lo: int,
    hi: int,
    per_tokens: float | None,
    per_layer: float | None,
) -> Verdict:
    facts = target.model.facts
    rc = choice.rc
    n_all = facts.n_layer_all + 1
    more = blocks = None
    if choice.ctx < hi and per_tokens and per_layer:
        more = (hi - choice.ctx) * per_tokens / 1000
        blocks = int(-(-more // per_layer))
    return Verdict(
        True,
        lo,
        hi,
        hi == facts.n_ctx_train,
        choice.ctx,
        _placement(target, rc, n_all),
        n_all,
        rc.n_gpu_layers,
        rc.n_cpu_moe,
        rc.type_k.name.lower(),
        rc.type_v.name.lower(),
        rc.flash_attn,
        more,
        per_layer if more is not None else None,
        blocks,
    )


def _full_context_tps(target: Target, choice: Choice, speed: SpeedInputs) -> float | None:
    est = choice_speed(target, choice, speed)
    return est.generation_tps[0] if est else None


def plan(
    target: Target, cfg: LaunchConfig, policy: Policy, *, speed: SpeedInputs | None = None
) -> PlanResult:
    """The plan for this target and config (solve, then the exact figures of the pick), with
    Python's cyclic collector paused (replay.paused_gc: the searches and replays make many
    objects and no cycles)."""
    with paused_gc():
        return _plan(target, cfg, policy, speed=speed)


def _plan(
    target: Target, cfg: LaunchConfig, policy: Policy, *, speed: SpeedInputs | None = None
) -> PlanResult:
    asked = policy
    lo, hi = bounds(target, cfg, policy)
    if (
        speed is not None and policy.speed_of is None
    ):  # --prefer speed ranks candidates by the estimate
        policy = replace(policy, speed_of=lambda c: _full_context_tps(target, c, speed))
    warnings: list[Notice | str] = []
    if target.gpus and target.reserve_bytes < 512 * MIB:
        warnings.append(Notice("small_reserve", {"reserve_bytes": target.reserve_bytes}))
    try:
        choice = solve_exact(target, cfg, policy)
    except NoFit as e:
        return _no_fit(target, cfg, policy, speed, warnings, e)
    target = learned_target(target, choice)
    mtp_target, mtp_note = _auto_mtp(target, cfg, policy, choice)
    if mtp_target is not None and mtp_note is not None:
        result = plan(mtp_target, cfg, asked, speed=speed)
        return replace(result, warnings=(mtp_note, *result.warnings)) if result.choice else result
    if mtp_note is not None:
        warnings.append(mtp_note)
    host = choice.breakdown.devices[-1]
    if choice.breakdown.host_pages:  # it fits: only the mapped weights are short of host RAM
        short = {"used_bytes": host.used_bytes, "usable_bytes": host.usable_bytes or 0}
        warnings.append(Notice("host_ram_short", short))
    rows = _with_pick(tradeoffs(target, choice.cfg, policy, STEP, hi, speed), choice)
    per_tokens, per_layer = marginal_costs(target, choice)
    verdict = _verdict(target, choice, lo, hi, per_tokens, per_layer)
    est = choice_speed(target, choice, speed) if speed else None
    if est is not None and speed is not None:
        verdict = replace(
            verdict,
            generation_tps=est.generation_tps,
            speed_options=tuple(speed_options(target, choice, hi, speed)),
        )
    card = _smallest_card(target, choice, hi)
    if card is not None:
        verdict = replace(verdict, smallest_gpu=card)
    costs = context_costs(target, choice.cfg, choice.ctx, hi, _side_bytes(target, choice))
    faster = _projector_off_the_gpu(target, cfg, policy, choice)
    if faster is not None:
        warnings.append(faster)
    side = target.side
    mtp = (
        mtp_effect(target.model.facts, side.flags.draft_n_max) if side and side.flags.mtp else None
    )
    return PlanResult(
        choice,
        tuple(rows),
        per_tokens,
        per_layer,
        verdict,
        tuple(warnings),
        card,
        est,
        costs,
        target.side,
        mtp=mtp,
    )


def _no_fit(
    target: Target,
    cfg: LaunchConfig,
    policy: Policy,
    speed: SpeedInputs | None,
    warnings: list[Notice | str],
    e: NoFit,
) -> PlanResult:
    """The plan where nothing fits: without side models where that fits, else the trade-offs and
    the smallest GPU that would hold the least context."""
    lo, hi = bounds(target, cfg, policy)
    fallback, ways = _without_side_models(target, cfg, policy, speed)
    if fallback is not None:
        return fallback
    rows = tradeoffs(target, cfg, policy, STEP, hi)
    need = smallest_gpu_any_kv(target, cfg, lo)
    name = need[0] if need else None
    verdict = Verdict(
        False,
        lo,
        hi,
        hi == target.model.facts.n_ctx_train,
        smallest_gpu=name,
        smallest_gpu_cache=need[2] if need and name else None,
        cause=e.cause,
        pinned_ngl=e.pinned_ngl,
    )
    return PlanResult(None, tuple(rows), None, None, verdict, tuple(warnings + ways), name)


def learned_target(target: Target, choice: Choice) -> Target:
    """The target the plan's other rows use: kinds llama.cpp aborts on leave the trade-offs too,
    and the exact figures' ratios to the hand-derived peaks bring the other rows near the exact
    ones."""
    if not (choice.refused or choice.compute_scales):
        return target
    return replace(
        target,
        refused=target.refused | choice.refused,
        compute_scales=choice.compute_scales or target.compute_scales,
    )


def _smallest_card(target: Target, choice: Choice, hi: int) -> str | None:
    """The smallest catalog card holding the whole context with every layer, where the choice
    stops short of either."""
    partial = bool(target.gpus) and choice.rc.n_gpu_layers < target.model.facts.n_layer_all + 1
    if not (choice.ctx < hi or partial or choice.rc.n_cpu_moe):
        return None
    found = smallest_gpu_for(target, choice.cfg, hi)
    return found[0] if found and found[0] else None


def _side_bytes(target: Target, choice: Choice) -> dict[str, int]:
    """Each side model's bytes on the GPUs (on the host without one)."""
    names = {g.name for g in target.gpus}
    return {
        u.kind: sum(d.total_bytes for d in u.devices if d.name in names)
        if target.gpus
        else u.total_bytes
        for u in choice.breakdown.side_models
    }


def _auto_mtp(
    target: Target, cfg: LaunchConfig, policy: Policy, choice: Choice
) -> tuple[Target | None, Notice | None]:
    """--prefer speed on a model with NextN blocks, no --spec-type and no draft model given, a
    llama-server build with draft-mtp (resolve rule draft_mtp): the plan with MTP self-speculation
    on, when it keeps the offload of the plan without it (a layer moved to the CPU costs more than
    drafting gains). Returns (the target with MTP, mtp_auto {n_draft}) or (None, mtp_no_room
    {n_gpu_layers, n_cpu_moe} where MTP would move layers) or (None, None) where it does not
    apply."""
    side, facts = target.side, target.model.facts
    flags = side.flags if side else SideFlags()
    if (
        policy.prefer != "speed"
        or not facts.n_layer_nextn
        or target.engine != "llama-server"
        or not since("draft_mtp", target.build)
        or flags.mtp
        or "spec_types" in flags.given
        or flags.draft_model
    ):
        return None, None
    with_mtp = replace(flags, spec_types=(*flags.spec_types, "draft-mtp"))
    trial = replace(target, side=replace(side, flags=with_mtp) if side else SidePlan(with_mtp))
    try:
        other = solve(trial, cfg, policy)
    except NoFit:
        other = None
    if other is None or (other.rc.n_gpu_layers, other.rc.n_cpu_moe) != (
        choice.rc.n_gpu_layers,
        choice.rc.n_cpu_moe,
    ):
        where = (
            {"n_gpu_layers": other.rc.n_gpu_layers, "n_cpu_moe": other.rc.n_cpu_moe}
            if other
            else {}
        )
        return None, Notice("mtp_no_room", where)
    return trial, Notice("mtp_auto", {"n_draft": with_mtp.draft_n_max})


def _projector_off_the_gpu(
    target: Target, cfg: LaunchConfig, policy: Policy, choice: Choice
) -> Notice | None:
    """Layers on the CPU while the projector sits on the GPU: would --no-mmproj-offload put more
    layers (or more context) on the GPU? Said, not applied: the encoder then runs on the CPU."""
    side = target.side
    if side is None or not target.gpus or not applicable(side, "mmproj_to_cpu"):
        return None
    if (
        choice.rc.n_gpu_layers >= target.model.facts.n_layer_all + 1
        and choice.ctx >= bounds(target, cfg, policy)[1]
    ):
        return None
    try:
        other = solve(replace(target, side=apply_step(side, "mmproj_to_cpu")), cfg, policy)
    except NoFit:
        return None
    if (other.rc.n_gpu_layers, other.ctx) <= (choice.rc.n_gpu_layers, choice.ctx):
        return None
    return Notice("mmproj_offload_costs", {"n_gpu_layers": other.rc.n_gpu_layers, "ctx": other.ctx})


def _without_side_models(
    target: Target, cfg: LaunchConfig, policy: Policy, speed: SpeedInputs | None
) -> tuple[PlanResult | None, list[Notice | str]]:
    """Nothing fits with the side models: the projector to the CPU first (it keeps working), then,
    with --drop-side-models, each side model left out in turn (side_plan.STEPS). Without
    --drop-side-models the drops that would fit are said as notices (side_way_out {step, ctx})
    instead."""
    side, steps = target.side, list[str]()
    ways: list[Notice | str] = []
    if side is None:
        return None, ways
    for step in STEPS:
        if side is None or not applicable(side, step):
            continue
        trial = apply_step(side, step)
        if step != "mmproj_to_cpu" and not policy.drop_side:
            try:
                ctx = solve_exact(replace(target, side=trial), cfg, policy).ctx
                ways.append(Notice("side_way_out", {"step": step, "ctx": ctx}))
            except NoFit:
                pass
            continue
        side, steps = trial, steps + [step]
        try:  # by the exact figures, as the plan will be (solver.solve_exact)
            solve_exact(replace(target, side=side), cfg, policy)
        except NoFit:
            continue
        result = plan(replace(target, side=side), cfg, policy, speed=speed)
        taken = tuple(Notice("side_step", {"step": s}) for s in steps)
        return replace(
            result, side=side, side_steps=tuple(steps), warnings=taken + result.warnings
        ), ways
    return None, ways
