"""The solver: the best llama-server configuration that fits, under an explicit policy.

Default policy, in order: (1) every layer on the GPU(s) when any KV choice reaches the minimum
context — speed; (2) the largest context up to n_ctx_train per slot (or --ctx-max); (3) the
fastest by the speed estimate; (4) the best KV cache by llama.cpp's measured quality that still
reaches that context (KV_PAIRS: f16/f16, f16/q8_0, q8_0/q8_0, then a 4-bit V; K never less
precise than V, quantized V only with flash attention; K f16 for attention-sink models). With
several GPUs, leaving some out is a candidate too (device_subsets), weighed by the same order
(rank). Anything the user pinned (llama-server flags after `--`, recorded in LaunchConfig.given,
or --ctx/--kv/--fa) stays as given; the rest is solved around it. Every search is a bisection
over the monotone memory model (search.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING

from ..errors import InputError
from ..frozen import replace
from ..memory.config import LaunchConfig
from ..memory.model import Breakdown, SchedulerOverflowError
from ..memory.resolve import ResolvedConfig, resolve
from ..units import pad
from .search import STEP, Target, graph_kind, largest, max_context, streams

if TYPE_CHECKING:
    from .presets import Preset

# K/V pairs from the best quality to the worst as llama.cpp measured it, not by bytes, K never
# below V. llama.cpp PR #7412 ("CUDA: quantized KV cache demo", JohannesGaessler's table, KL
# divergence of the token distribution against the f16 model's over wikitext, f16 weights): K/V
# f16/f16 0.000189, f16/q8_0 0.000743, q8_0/q8_0 0.000980, f16/q5_1 0.001759 — so q8_0/q8_0
# (8.5 bits per value) comes before any 4-bit V (f16/q4_0 has fewer bits in V than f16/q5_1, so a
# larger divergence than its 0.001759), though f16/q4_0 takes more memory (10.25 bits).
KV_PAIRS = (
    ("f16", "f16"),
    ("f16", "q8_0"),
    ("q8_0", "q8_0"),
    ("f16", "q4_0"),
    ("q8_0", "q4_0"),
    ("q4_0", "q4_0"),
)
# What each pair costs in quality, in words a report can use (the same measurements): none; about
# 0.001 KL divergence ("negligible"); more than f16/q5_1's 0.00176 ("some", a 4-bit V); the
# most (a 4-bit K too).
KV_QUALITY = {
    ("f16", "f16"): "full",
    ("f16", "q8_0"): "negligible_loss",
    ("q8_0", "q8_0"): "negligible_loss",
    ("f16", "q4_0"): "some_loss",
    ("q8_0", "q4_0"): "some_loss",
    ("q4_0", "q4_0"): "most_loss",
}
# Architectures with attention sinks, whose quality suffers badly from any quantized K: gpt-oss
# (src/llama-model.cpp LLM_ARCH_OPENAI_MOE loads attn_sinks per layer). Measured with
# llama-perplexity --kl-divergence against its own f16 KV (TheTom/llama-cpp-turboquant issue #305):
# q8_0/q8_0 median KLD 0.055 and 74.9% same top token, against about 0.001 above. The solver
# keeps K at f16 for them unless -ctk or --kv says otherwise.
SINK_ARCHS = frozenset({"gpt-oss"})
UBATCHES = (512, 256, 128)  # llama-server's default first; smaller ones only when they buy context
PREFER = ("speed", "context", "quality")
# llama.cpp: common/common.h common_params::fit_params_min_ctx (--fit-ctx, default 4096): the least
# context llama.cpp's own fitter reduces to, so the least worth running.
DEFAULT_MIN_CTX = 4096


class NoFit(InputError):
    """No configuration reaches `min_ctx` tokens per slot on this machine. `cause`: pinned_ngl (at
    the pinned -ngl), offloaded (not even with layers on the CPU), each with the smallest KV cache;
    none (no candidate reached it)."""

    def __init__(self, min_ctx: int, cause: str = "none", pinned_ngl: int | None = None) -> None:
        self.min_ctx, self.cause, self.pinned_ngl = min_ctx, cause, pinned_ngl
        how = {
            "pinned_ngl": f", with -ngl {pinned_ngl} as pinned and the smallest KV cache",
            "offloaded": ", even with layers on the CPU and the smallest KV cache",
        }.get(cause, "")
        super().__init__(f"no configuration fits {min_ctx:,} tokens per slot on this machine{how}")


@dataclass(frozen=True)
class Policy:
    prefer: str = "speed"
    ctx_max: int | None = None  # per slot; default n_ctx_train
    min_ctx: int | None = None  # per slot; default min(4096, target)
    ctx: int | None = None  # a fixed per-slot context
    kv: str | None = None  # a fixed type for K and V
    fa: str | None = None  # "on" | "off" fixed
    drop_side: bool = False  # --drop-side-models: leave out side models when nothing fits with them
    # --prefer speed: estimated generation tokens/s of a choice at its full context (plan_speed.py);
    # among candidates that reach the same context, the faster one wins
    speed_of: Callable[[Choice], float | None] | None = field(default=None, compare=False)
    # --for chat|agent|long|serve[:N] (presets.py): applied by commands/plan.py before solving; the
    # solver itself reads only `ubatches`, the -ub values tried (preferred first; None: UBATCHES)
    preset: Preset | None = None
    ubatches: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Choice:
    cfg: LaunchConfig
    ctx: int  # per-slot context reached
    rc: ResolvedConfig
    breakdown: Breakdown
    # graph kinds exact_choice found llama.cpp aborts on (Target.refused), for the plan's other rows
    refused: frozenset[tuple[bool, bool, bool]] = frozenset()
    # exact_choice's per-device ratios of the replay to the hand-derived peaks (Target.compute_
    # scales), so that the plan's other rows (trade-offs, marginal costs) are near the exact ones
    compute_scales: tuple[float, ...] = ()
    # the exact breakdowns of this config at other per-slot contexts that _exact_boundary
    # replayed on its way (explain.marginal_costs takes its rate from them: no replay more)
    exact_near: tuple[tuple[int, Breakdown], ...] = ()


def _pinned(cfg: LaunchConfig, *names: str) -> bool:
    return any(n in cfg.given for n in names)


def _kv_options(cfg: LaunchConfig, policy: Policy, architecture: str) -> list[tuple[str, str]]:
    if policy.kv:
        return [(policy.kv, policy.kv)]
    if _pinned(cfg, "type_k", "type_v"):
        return [(cfg.type_k, cfg.type_v)]
    if architecture in SINK_ARCHS:  # K stays f16 (SINK_ARCHS)
        return [p for p in KV_PAIRS if p[0] == "f16"]
    return list(KV_PAIRS)


def _fa_options(cfg: LaunchConfig, policy: Policy) -> list[str]:
    if policy.fa:
        return [policy.fa]
    return [cfg.flash_attn] if _pinned(cfg, "flash_attn") else ["on", "off"]


def _ub_options(cfg: LaunchConfig, ubatches: tuple[int, ...] | None = None) -> list[int]:
    if _pinned(cfg, "n_ubatch"):
        return [cfg.n_ubatch]
    if not ubatches:
        return list(UBATCHES)
    # -ub above -b: llama.cpp clamps it
    return [ub for ub in ubatches if ub <= cfg.n_batch] or [cfg.n_batch]


def combos(cfg: LaunchConfig, policy: Policy, architecture: str = "") -> Iterator[LaunchConfig]:
    """Every KV/FA/ubatch combination allowed for a model of `architecture`, best first (KV
    quality, KV_PAIRS, then FA on, then -ub 512)."""
    for type_k, type_v in _kv_options(cfg, policy, architecture):
        for fa in _fa_options(cfg, policy):
            if fa == "off" and type_v not in ("f16", "f32", "bf16"):
                continue  # quantized V needs flash attention
            for ub in _ub_options(cfg, policy.ubatches):
                yield replace(cfg, type_k=type_k, type_v=type_v, flash_attn=fa, n_ubatch=ub)


def _most_compact(target: Target, cfg: LaunchConfig, policy: Policy) -> list[LaunchConfig]:
    """The combos that need the least memory per token — the last KV pair llama.cpp accepts for this
    model (a quantized block must divide the head size), each FA setting, the smallest -ub that
    any accepted combo has.

    Of the accepted combos only the last one's KV pair and the least -ub matter, so the combos
    are asked from the end (the last accepted) and by -ub from the least up (the first -ub that
    one accepts): usually a few evaluations, not every combo's (issue #36 item 5)."""
    options = list(combos(cfg, policy, target.model.facts.architecture))

    def accepted(o: LaunchConfig) -> bool:
        return target.evaluate(replace(o, n_ctx=STEP)) is not None

    last = next((o for o in reversed(options) if accepted(o)), None)
    if last is None:
        return []
    last_kv = (last.type_k, last.type_v)
    smallest_ub = next(
        ub
        for ub in sorted({o.n_ubatch for o in options})
        if any(accepted(o) for o in reversed(options) if o.n_ubatch == ub)
    )
    return [
        o
        for o in options
        if (o.type_k, o.type_v) == last_kv and o.n_ubatch == smallest_ub and accepted(o)
    ]


def _reaches(target: Target, cfgs: list[LaunchConfig], ctx: int, mult: int) -> bool:
    return any(target.fits(replace(c, n_ctx=ctx * mult)) for c in cfgs)


def _offload_levels(
    target: Target, cfg: LaunchConfig, policy: Policy, need: int, mult: int
) -> LaunchConfig | None:
    """The most offloaded config (all layers; then experts, then whole layers to the CPU) at which
    some KV choice reaches `need` tokens per slot; None when nothing does."""
    compact = _most_compact(target, cfg, policy)
    facts = target.model.facts
    if not target.gpus:
        cfg = cfg if _pinned(cfg, "n_gpu_layers") else replace(cfg, n_gpu_layers=0)
        if not _pinned(cfg, "devices"):
            # planned without a GPU: `-dev none` keeps the server off every GPU, large batches
            # included (-ngl 0 alone still computes on one: llama.cpp PR #10497)
            cfg = replace(cfg, devices=("none",))
        at_ngl = [replace(c, n_gpu_layers=cfg.n_gpu_layers) for c in compact]
        return cfg if _reaches(target, at_ngl, need, mult) else None
    if _pinned(cfg, "n_gpu_layers") and _pinned(cfg, "n_cpu_moe", "cpu_moe", "override_tensor"):
        return cfg if _reaches(target, compact, need, mult) else None
    full = cfg if _pinned(cfg, "n_gpu_layers") else replace(cfg, n_gpu_layers=facts.n_layer_all + 1)
    if _reaches(target, compact, need, mult):
        return full
    if facts.moe is not None and not _pinned(cfg, "n_cpu_moe", "cpu_moe", "override_tensor"):
        n = facts.n_layer
        kept = largest(
            0,
            n,
            lambda k: _reaches(target, [replace(c, n_cpu_moe=n - k) for c in compact], need, mult),
        )
        if kept is not None:
            return replace(full, n_cpu_moe=n - kept)
        full = replace(full, n_cpu_moe=n)
    if _pinned(cfg, "n_gpu_layers"):
        return None
    ngl = largest(
        0,
        facts.n_layer_all + 1,
        lambda k: _reaches(
            target,
            [replace(c, n_gpu_layers=k, n_cpu_moe=full.n_cpu_moe) for c in compact],
            need,
            mult,
        ),
    )
    return None if ngl is None else replace(full, n_gpu_layers=ngl)


def _best_combo(
    target: Target, base: LaunchConfig, policy: Policy, lo: int, hi: int
) -> Choice | None:
    """The largest context in [lo, hi] over the combos, then the most precise combo reaching it."""
    mult = streams(target, base)
    reached: list[tuple[LaunchConfig, int]] = []
    top = hi // STEP * STEP  # the most max_context can return
    options = list(combos(base, policy, target.model.facts.architecture))
    if policy.prefer != "quality" and options:
        # the pick is the first combo (in order) that reaches the largest context. The most
        # compact combo first (it usually reaches the most: issue #26); then, in order, one
        # evaluation per combo: until a combo is picked at the best so far (a tie picks the
        # earlier combo), after it at the best + STEP (only more context picks a later one); a
        # combo that reaches it is searched up from there. By monotonicity each combo is ruled
        # out at the best known when it is asked, not at the largest and again at the best.
        most = max_context(target, options[-1], hi, lo)
        pick: LaunchConfig | None = None
        for c in options:
            if pick is not None and most == top:
                break
            at = most + STEP if pick is not None and most else (most or lo)
            found = max_context(target, c, hi, at)
            if found:
                most, pick = found, c
        reached = [(pick, most)] if pick is not None and most else []
        options = []
    for c in options:
        ctx = max_context(target, c, hi, lo)
        if ctx:
            reached.append((c, ctx))
            # the pick is the first combo reaching the best context (quality: the first reaching
            # any): once one reaches the top, no later combo can be picked, so none is searched
            # (issue #16: a recurrent model reaches it with every KV type, and searched them all)
            if policy.prefer == "quality" or ctx == top:
                break
    if not reached:
        return None
    best_ctx = max(ctx for _, ctx in reached)
    if (
        policy.prefer == "quality"
    ):  # the most precise combo that fits at all, at its own best context
        cfg, best_ctx = reached[0]
    else:
        cfg = next(c for c, ctx in reached if ctx == best_ctx)
    cfg = replace(cfg, n_ctx=best_ctx * mult)
    evaluated = target.evaluate(cfg)
    assert evaluated is not None
    return Choice(cfg, best_ctx, *evaluated)


def bounds(target: Target, cfg: LaunchConfig, policy: Policy) -> tuple[int, int]:
    """(minimum, maximum) context per slot the policy asks for."""
    facts = target.model.facts
    if policy.ctx or _pinned(cfg, "n_ctx"):
        per_slot = policy.ctx or (
            cfg.n_ctx // streams(target, cfg) if cfg.n_ctx else facts.n_ctx_train
        )
        fixed = pad(per_slot, STEP)  # llama.cpp pads the context to 256 cells
        return fixed, fixed
    hi = policy.ctx_max or facts.n_ctx_train
    lo = policy.min_ctx or min(DEFAULT_MIN_CTX, hi)
    if lo > hi:
        raise InputError(f"--min-ctx {lo} is larger than the largest context asked for ({hi})")
    return lo, hi


def _reject_impossible(target: Target, cfg: LaunchConfig, policy: Policy) -> None:
    """When every allowed combination is one llama.cpp refuses, say why (as check does), not "no
    fit"."""
    options = list(combos(cfg, policy, target.model.facts.architecture))
    if all(target.evaluate(replace(o, n_ctx=STEP)) is None for o in options):
        pinned = [replace(o, n_ctx=STEP) for o in options[:1]]
        fixed = replace(
            cfg,
            n_ctx=STEP,
            flash_attn=policy.fa or cfg.flash_attn,
            type_k=policy.kv or cfg.type_k,
            type_v=policy.kv or cfg.type_v,
        )
        for candidate in [*pinned, fixed]:  # raises llama.cpp's own reason (ConfigError)
            resolve(candidate, target.model.facts, engine=target.engine, build=target.build)


def solve(target: Target, cfg: LaunchConfig, policy: Policy) -> Choice:
    """The configuration the policy picks; NoFit when even the minimum context cannot fit.

    With several GPUs the whole set is one candidate and leaving some of them out is another
    (device_subsets): a small or busy card is used only where the plan is better with it (rank)."""
    if policy.prefer not in PREFER:
        raise InputError(f"--prefer must be one of {', '.join(PREFER)}")
    lo, hi = bounds(target, cfg, policy)
    _reject_impossible(target, cfg, policy)
    found: list[Choice] = []
    whole: NoFit | None = None
    for i, variant in enumerate([cfg, *device_subsets(target, cfg)]):
        if found and not _may_match(target, variant, policy, found, lo, hi):
            continue
        try:
            found += _solve_on(target, variant, policy, lo, hi)
        except NoFit as e:
            whole = e if i == 0 else whole
    if not found:
        raise whole or NoFit(lo)
    speed = policy.speed_of if policy.prefer == "speed" and len(found) > 1 else None
    return max(found, key=lambda c: rank(target, c, policy, hi, speed))


def _may_match(
    target: Target, cfg: LaunchConfig, policy: Policy, found: list[Choice], lo: int, hi: int
) -> bool:
    """Whether the devices of `cfg` may plan as well as the best found so far, by cheap tests with
    the most compact KV cache: rank puts the blocks on the GPUs first (with --prefer context, once
    the largest context is reached), so devices that cannot hold as many at the least context
    cannot match it; and (but for --prefer quality, where the KV cache comes before the context)
    devices that hold no more cannot match it short of its context (solve skips them)."""
    best = max(found, key=lambda c: rank(target, c, policy, hi))
    if policy.prefer == "context" and best.ctx < hi:
        return True
    compact = _most_compact(target, cfg, policy)
    rc, mult = best.rc, streams(target, cfg)
    at = [
        replace(c, n_gpu_layers=rc.n_gpu_layers, n_cpu_moe=rc.n_cpu_moe, cpu_moe=rc.cpu_moe)
        for c in compact
    ]
    if not _reaches(target, at, lo, mult):
        return False
    if policy.prefer == "quality" or _more_on_gpu(target, at, lo, mult):
        return True
    if len(target.devices_of(cfg)) > 1 and cfg.split_mode != "none" and at:
        split = _split_by_room(target, at[0], hi, mult)  # as _solve_on's second candidate
        at += [replace(c, tensor_split=split) for c in at] if split else []
    return _reaches(target, at, best.ctx, mult)


def _more_on_gpu(target: Target, at: list[LaunchConfig], lo: int, mult: int) -> bool:
    """Whether one more block (or one more block's experts) than `at` fits on the GPUs at `lo`."""
    if not at:
        return False
    c = at[0]
    if c.cpu_moe or c.n_cpu_moe:
        n = target.model.facts.n_layer if c.cpu_moe else c.n_cpu_moe
        more = [replace(o, cpu_moe=False, n_cpu_moe=n - 1) for o in at]
    elif c.n_gpu_layers < target.model.facts.n_layer_all + 1:
        more = [replace(o, n_gpu_layers=o.n_gpu_layers + 1) for o in at]
    else:
        return False
    return _reaches(target, more, lo, mult)


def _solve_on(target: Target, cfg: LaunchConfig, policy: Policy, lo: int, hi: int) -> list[Choice]:
    """The candidates on one set of devices: the best combo at the most offloaded level that
    reaches the context asked for, and with several GPUs the same with a split by room."""
    mult = streams(target, cfg)
    need = hi if policy.prefer == "context" else lo
    base = _offload_levels(target, cfg, policy, need, mult)
    if base is None and policy.prefer == "context":
        base = _offload_levels(target, cfg, policy, lo, mult)
    if base is None:
        if _pinned(cfg, "n_gpu_layers"):
            raise NoFit(lo, "pinned_ngl", cfg.n_gpu_layers)
        raise NoFit(lo, "offloaded")
    candidates = [_best_combo(target, base, policy, lo, hi)]
    several = len(target.devices_of(cfg)) > 1 and cfg.split_mode != "none"
    if several and not _pinned(cfg, "tensor_split"):
        compact = _most_compact(target, base, policy)
        split = _split_by_room(target, compact[0], hi, mult) if compact else None
        if split:
            candidates.append(
                _best_combo(target, replace(base, tensor_split=split), policy, lo, hi)
            )
    return [c for c in candidates if c is not None]


ALL_SUBSETS_UP_TO = 3  # GPUs: every subset is a candidate up to this many; past it, a few


def device_subsets(target: Target, cfg: LaunchConfig) -> list[LaunchConfig]:
    """The ways to leave GPUs out that solve weighs against the whole set: each GPU alone (-sm none
    -mg i: llama.cpp loads the model on the main GPU only, src/llama.cpp
    llama_model_load_from_file_impl, and makes no context or buffer on the others) and each
    subset of two or more named by -dev (the model's devices are then those: a device left at
    -ts 0 would still be the first device, the one llama.cpp offloads the CPU layers' large
    matrix products to). Up to ALL_SUBSETS_UP_TO GPUs every subset, so that no set plans worse
    than a subset of it (tests/fit/test_device_subsets.py); past it the largest k, dropping the
    smallest in turn. Nothing where the user chose the devices or their split (-dev, -ts, -sm,
    -mg) or named a device in -ot, nor with RPC workers (llama.cpp adds them to its device list
    only when --rpc connects, issue #10609, and their speed is unknown here)."""
    gpus = target.gpus
    n = len(gpus)
    pinned = _pinned(cfg, "devices", "tensor_split", "split_mode", "main_gpu", "override_tensor")
    if n < 2 or pinned or any(g.backend == "rpc" for g in gpus):
        return []
    room = [g.usable_bytes or 0 for g in gpus]
    order = sorted(range(n), key=lambda i: (-room[i], i))
    out = [replace(cfg, split_mode="none", main_gpu=i) for i in order]
    if n <= ALL_SUBSETS_UP_TO:
        kept_sets = [c for k in range(2, n) for c in combinations(order, k)]
    else:
        kept_sets = [tuple(order[:k]) for k in range(2, n)]
    for kept in kept_sets:
        out.append(replace(cfg, devices=tuple(gpus[i].name for i in sorted(kept))))
    return out


def rank(
    target: Target,
    c: Choice,
    policy: Policy,
    hi: int,
    speed: Callable[[Choice], float | None] | None = None,
) -> tuple[float, ...]:
    """The solver's objective as one key, larger is better, the same order the single-set search
    follows (module docstring): --prefer speed (the default): the most blocks on the GPUs (then
    the fewest experts on the CPU), then the context, then the estimated tokens/s, then the KV
    quality (KV_PAIRS); context: reaching the largest context asked for first, then as speed;
    quality: the blocks on the GPUs, then the KV quality, then the context. A plan on a set of
    devices is worse than one on another where its key is smaller."""
    n_all = target.model.facts.n_layer_all + 1
    rc = c.rc
    layers = min(rc.n_gpu_layers, n_all) if target.gpus else 0
    experts = -(target.model.facts.n_layer if rc.cpu_moe else rc.n_cpu_moe)
    quality = -_precision_rank(c)
    tps = (speed(c) or 0.0) if speed else 0.0
    if policy.prefer == "quality":
        return (layers, experts, quality, c.ctx)
    if policy.prefer == "context":
        return (c.ctx >= hi, layers, experts, c.ctx, tps, quality)
    return (layers, experts, c.ctx, tps, quality)


SETTLE_ROUNDS = 3  # solve_exact's searches under the learned scales before the answer is NoFit


def solve_exact(target: Target, cfg: LaunchConfig, policy: Policy) -> Choice:
    """The plan's pick by the exact figures (issue #36: the hand-derived peaks are only the
    searches' fast proxy): solve, then exact_choice. Where the proxy finds nothing, its "no" is
    not the answer: the search runs again with the proxy scaled per device by the replay's ratio
    at the config it would most want (_probe_scales: every layer on the GPUs, the most compact KV
    cache, the least context). Where the pick's exact figures fit at none of its contexts (the
    proxy under the replay), the search runs again under the ratios learned at that pick, a few
    rounds (the ratio moves with the placement), and a pick is only ever one whose replay fits;
    else NoFit. A plan that fits on the proxy replays what it did before."""
    lo = bounds(target, cfg, policy)[0]
    try:
        first = solve(target, cfg, policy)
    except NoFit as e:
        scaled = _probe_scales(target, cfg, policy)
        if scaled is None:
            raise
        return _settle(scaled, cfg, policy, e)
    choice = exact_choice(target, cfg, policy, first)
    if choice.breakdown.fits:
        return choice
    pinned = _pinned(cfg, "n_gpu_layers")
    no = NoFit(lo, "pinned_ngl", cfg.n_gpu_layers) if pinned else NoFit(lo, "offloaded")
    return _settle(_learned(target, choice), cfg, policy, no, rounds=SETTLE_ROUNDS - 1)


def _learned(target: Target, choice: Choice) -> Target | None:
    """`target` under the scales and refused kinds exact_choice learned at `choice`; None where
    it learned nothing new (another round would search the same figures)."""
    scales = choice.compute_scales
    if not scales or scales == target.compute_scales:
        return None
    return replace(target, compute_scales=scales, refused=target.refused | choice.refused)


def _settle(
    target: Target | None,
    cfg: LaunchConfig,
    policy: Policy,
    no: NoFit,
    rounds: int = SETTLE_ROUNDS,
) -> Choice:
    """solve and exact_choice under `target`'s scales until the pick's exact figures fit, each
    round under the ratios the last one learned; `no` where none does within `rounds`."""
    for _ in range(rounds):
        if target is None:
            break
        try:
            first = solve(target, cfg, policy)
        except NoFit:
            break
        choice = exact_choice(target, cfg, policy, first)
        if choice.breakdown.fits:
            # the plan's other rows under the same scales (explain.learned_target)
            scales = choice.compute_scales or target.compute_scales
            return replace(choice, compute_scales=scales, refused=choice.refused | target.refused)
        target = _learned(target, choice)
    raise no


def _probe_scales(target: Target, cfg: LaunchConfig, policy: Policy) -> Target | None:
    """`target` with its compute scales times the replay's ratio to the hand-derived peaks per
    device (_compute_ratios) at the config the search would most want: every layer on the GPUs
    (unless pinned), the most compact KV cache, the least context asked for. None where the
    replay does not cover that config, llama.cpp would abort reserving it, or the two agree."""
    lo, _ = bounds(target, cfg, policy)
    base = cfg
    if target.gpus and not _pinned(cfg, "n_gpu_layers"):
        base = replace(cfg, n_gpu_layers=target.model.facts.n_layer_all + 1)
    for c in _most_compact(target, base, policy):
        probe = replace(c, n_ctx=lo * streams(target, c))
        evaluated = target.evaluate(probe)
        if evaluated is None:
            continue
        rc, hand = evaluated
        try:
            exact = target.breakdown(probe, rc)
        except SchedulerOverflowError:
            continue
        ratios = _compute_ratios(hand, exact)
        if ratios is None:
            return None
        old = target.compute_scales or (1.0,) * len(ratios)
        return replace(
            target, compute_scales=tuple(a * b for a, b in zip(old, ratios, strict=True))
        )
    return None


def exact_choice(target: Target, cfg: LaunchConfig, policy: Policy, choice: Choice) -> Choice:
    """The choice with its compute buffers from the graph itself (memory/graph/replay.py).

    The searches run on the hand-derived peaks (Target.evaluate). Where the replay covers the
    chosen config and gives other compute buffers, the search runs again with the two's ratio per
    device as its compute scales (so that it lands near the exact boundary of whichever device
    binds: with several devices the hand peaks may be over on one and under on another), and the
    context of that config then moves to the exact boundary (_exact_boundary); where none of its
    contexts fits exactly, the first choice's config is tried the same way: the plan holds what
    llama.cpp allocates, and no less context than the exact figures allow."""
    try:
        exact = target.breakdown(choice.cfg, choice.rc)
    except SchedulerOverflowError as overflow:
        # llama.cpp would abort reserving this graph: refuse its kind and solve again; where
        # nothing else fits (or the kind was pinned), llama.cpp's abort is the answer
        refused = replace(target, refused=target.refused | {graph_kind(choice.rc)})
        try:
            again = solve(refused, cfg, policy)
        except NoFit:
            raise overflow from None
        exact_again = exact_choice(refused, cfg, policy, again)
        return replace(exact_again, refused=exact_again.refused | refused.refused)
    if exact == choice.breakdown:
        return choice
    ratios = _compute_ratios(choice.breakdown, exact)
    found = choice
    if ratios is not None:
        old = target.compute_scales or (1.0,) * len(ratios)
        scales = tuple(a * b for a, b in zip(old, ratios, strict=True))
        try:
            found = solve(replace(target, compute_scales=scales), cfg, policy)
        except NoFit:
            pass
    lo, hi = bounds(target, cfg, policy)
    learned = scales if ratios is not None else ()
    for start in (found, choice):
        # the choice's exact figures, replayed above: a second point where its config is start's
        settled = _exact_boundary(target, cfg, start, lo, hi, also=(choice.cfg, exact))
        if settled is not None:
            return replace(settled, compute_scales=learned)
    return replace(
        choice, breakdown=exact, compute_scales=learned
    )  # nothing smaller fits either: the honest figures


def _exact_boundary(
    target: Target,
    cfg: LaunchConfig,
    start: Choice,
    lo: int,
    hi: int,
    also: tuple[LaunchConfig, Breakdown] | None = None,
) -> Choice | None:
    """The largest per-slot context (a multiple of STEP in [lo, hi]) at which `start`'s config fits
    by the exact figures (Target.breakdown: the replay), galloping from where the exact figures
    at `start.ctx` put it (_guess) up or down and then bisecting, so that a boundary a few steps
    away costs a few replays; None if none fits. `also`: a config and its exact figures, known
    already; where it is `start`'s at another context, the two exact points make the guess (and
    only the guess). A context the user pinned is only checked."""
    mult = start.rc.n_stream
    seen: dict[int, Choice | None] = {}
    exact: dict[int, Breakdown] = {}  # the exact figures at each step, fitting or not

    def at(k: int) -> Choice | None:
        if k not in seen:
            c = replace(start.cfg, n_ctx=k * STEP * mult)
            try:
                rc = resolve(c, target.model.facts, engine=target.engine, build=target.build)
                rc = target.model.settle_flash_attn(rc, target.devices_of(c), target.host)
            except InputError:
                seen[k] = None
            else:
                b = exact[k] = target.breakdown(c, rc)
                seen[k] = Choice(c, k * STEP, rc, b) if b.fits else None
        return seen[k]

    k = start.ctx // STEP
    if _pinned(cfg, "n_ctx") or start.ctx % STEP:
        return at(k) if start.ctx % STEP == 0 else None
    lo_k, hi_k = max(lo // STEP, 1), max(hi // STEP, k)
    here = at(k)
    second = None
    if also is not None:
        c, b = also
        j, off = divmod(c.n_ctx, STEP * mult)
        if not off and j != k and replace(c, n_ctx=0) == replace(start.cfg, n_ctx=0):
            second = (j, b)
    guess = _guess(target, start.cfg, (k, exact[k]), mult, second) if k in exact else None
    bracket = _bracket(at, k, here is not None, guess, lo_k, hi_k)
    if bracket is None:
        return None
    good, bad = bracket
    best = largest(good, bad - 1, lambda x: at(x) is not None)
    found = at(best) if best is not None else None
    return _with_near(found, exact, second) if found is not None else None


def _with_near(
    found: Choice, exact: dict[int, Breakdown], second: tuple[int, Breakdown] | None
) -> Choice:
    """`found` with the exact figures of its config at the other steps replayed (Choice.
    exact_near): `exact` by step, and `second` (a step and its figures known before)."""
    near = dict(exact)
    if second is not None:
        near.setdefault(*second)
    near.pop(found.ctx // STEP, None)
    return replace(found, exact_near=tuple((j * STEP, b) for j, b in sorted(near.items())))


def _bracket(
    at: Callable[[int], Choice | None], k: int, fits: bool, guess: int | None, lo_k: int, hi_k: int
) -> tuple[int, int] | None:
    """(a step that fits, a larger one that does not) around the boundary, galloping from the
    guess where it lies on the side of k the boundary is (k fits: above; else below), else
    from k; None where no step in [lo_k, k] fits."""
    if fits and guess is not None and guess > k and hi_k > k:  # k is known to fit
        g = min(guess, hi_k)
        return _gallop_up(at, g, hi_k) if at(g) is not None else _gallop_down(at, g, k)
    if not fits and guess is not None and guess < k and lo_k < k:  # k is known not to
        g = max(guess, lo_k)
        return _gallop_up(at, g, k - 1) if at(g) is not None else _gallop_down(at, g, lo_k)
    return _gallop_up(at, k, hi_k) if fits else _gallop_down(at, k, lo_k)


def _guess(
    target: Target,
    cfg: LaunchConfig,
    here: tuple[int, Breakdown],
    mult: int,
    second: tuple[int, Breakdown] | None,
) -> int | None:
    """Where the exact boundary of `cfg` likely is, in steps of STEP: k plus as many steps as the
    tightest device has room for by its exact figures at k (`here`: fewer where it is short),
    each step costing what the exact figures grow by between k and a second step (`second`),
    else what the hand-derived ones grow by from k to k + 1 (Target.evaluate); None where that
    is not known. Only where _exact_boundary starts: a wrong guess costs a replay or two, never
    another answer (the fit is monotone in the context)."""
    k, exact = here
    if second is not None:
        j, then = second
    else:
        a = target.evaluate(replace(cfg, n_ctx=k * STEP * mult))
        b = target.evaluate(replace(cfg, n_ctx=(k + 1) * STEP * mult))
        if a is None or b is None:
            return None
        j, exact, then = k + 1, a[1], b[1]
        if len(exact.devices) != len(here[1].devices):
            return None
    if len(then.devices) != len(exact.devices):
        return None
    steps = []
    for d, a_d, b_d in zip(here[1].devices, exact.devices, then.devices, strict=True):
        grow = then.hard_bytes(b_d) - exact.hard_bytes(a_d)  # over j - k steps
        if d.usable_bytes is not None and grow * (j - k) > 0:
            room = d.usable_bytes - here[1].hard_bytes(d)
            steps.append(room * (j - k) // grow)
    return k + min(steps) if steps else None


def _gallop_up(at: Callable[[int], Choice | None], k: int, hi_k: int) -> tuple[int, int]:
    """From k (which fits) up in doubling steps to the first step that does not fit: (the last
    that fits, the first that does not; hi_k + 1 where all do)."""
    good, step, bad = k, 1, hi_k + 1
    while good + step <= hi_k:
        if at(good + step) is None:
            bad = good + step
            break
        good, step = good + step, step * 2
    return good, bad


def _gallop_down(at: Callable[[int], Choice | None], k: int, lo_k: int) -> tuple[int, int] | None:
    """From k (which does not fit) down in doubling steps to one that fits, lo_k the last tried:
    (that one, the last that did not); None where none fits."""
    bad, step, good = k, 1, 0
    while k - step >= lo_k:
        if at(k - step) is not None:
            good = k - step
            break
        bad, step = k - step, step * 2
    if not good and lo_k < bad and at(lo_k) is not None:
        good = lo_k
    return (good, bad) if good else None


def _compute_ratios(hand: Breakdown, exact: Breakdown) -> tuple[float, ...] | None:
    """Per device, the replay's compute bytes over the hand-derived ones (1 where either is 0: no
    ratio to learn); None where the two disagree on nothing that a ratio can carry."""
    if len(hand.devices) != len(exact.devices):
        return None
    out = tuple(
        e.compute_bytes / h.compute_bytes if h.compute_bytes > 0 and e.compute_bytes > 0 else 1.0
        for h, e in zip(hand.devices, exact.devices, strict=True)
    )
    return None if all(r == 1.0 for r in out) else out


def _precision_rank(c: Choice) -> int:
    pair = (c.rc.type_k.name.lower(), c.rc.type_v.name.lower())
    return KV_PAIRS.index(pair) if pair in KV_PAIRS else len(KV_PAIRS)


def _split_by_room(
    target: Target, cfg: LaunchConfig, ctx: int, mult: int
) -> tuple[float, ...] | None:
    """A tensor split that gives each GPU layers in proportion to the room it has for them.

    llama.cpp splits layers by free memory, but the compute buffers, the output layer and the
    reserve are per device, not per layer, so the free-memory split overfills some GPU first."""
    probe = target.evaluate(replace(cfg, n_ctx=ctx * mult))
    if probe is None:
        return None
    gpus = [d for d in probe[1].devices if d.kind == "gpu"]
    room = [
        max((d.usable_bytes or 0) - d.compute_bytes - d.output_bytes - d.reserve_bytes, 1)
        for d in gpus
    ]
    return tuple(round(r / max(room), 4) for r in room)
