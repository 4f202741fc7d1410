"""solver.solve_exact: the pick follows the exact figures (the graph replay), not the hand-derived
peaks the searches run on (issue #36 item 3). Where the two disagree both ways on a small CUDA
GPU: the proxy over the replay (gpt-oss's 32-wide heads under -fa on: CUDA has no flash-attention
kernel for them, the CPU runs the attention and the GPU's compute buffer is all but empty) finds
nothing, yet the exact figures fit; the proxy under the replay (-fa off) picks a config whose
exact figures are over the GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.findings import WayOut
from llamafit.fit.search import STEP
from llamafit.fit.solver import NoFit, Policy, exact_choice, solve, solve_exact
from llamafit.fit.ways_out import _fits_exactly, suggestions
from llamafit.memory.config import LaunchConfig, with_given
from llamafit.memory.resolve import resolve
from tests.support import FIXTURES, target

# --for agent's floor and ubatches (presets.PRESETS)
AGENT = Policy(min_ctx=65536, ubatches=(1024, 512, 256, 128))
FA_OFF = Policy(fa="off")


def _summary(c) -> tuple:
    rc = c.rc
    fa = "on" if rc.flash_attn else "off"
    kv = (rc.type_k.name.lower(), rc.type_v.name.lower())
    return (c.ctx, rc.n_gpu_layers, rc.n_cpu_moe, fa, *kv, rc.n_ubatch)


def _proxy(t, policy: Policy) -> tuple | str:
    """What the hand-derived search alone picks, with whether its exact figures fit."""
    try:
        c = exact_choice(t, LaunchConfig(), policy, solve(t, LaunchConfig(), policy))
    except NoFit:
        return "no fit"
    return (*_summary(c), c.breakdown.fits)


CASES = [
    # (fixture, GPU, policy, the proxy's pick (and whether its replay fits), solve_exact's)
    # the proxy over the replay: nothing fits by it, the exact figures fit
    ("swa-gptoss", "1030MiB", AGENT, "no fit", (131072, 1, 4, "on", "f16", "f16", 1024)),
    ("swa-gptoss", "1036MiB", AGENT, "no fit", (72960, 3, 4, "on", "f16", "q4_0", 128)),
    ("swa-gptoss", "1048MiB", AGENT, "no fit", (73472, 5, 0, "on", "f16", "q4_0", 128)),
    ("hybrid-granite", "1042MiB", AGENT, "no fit", (68608, 7, 0, "on", "f16", "f16", 128)),
    ("mla-deepseek2", "1042MiB", AGENT, "no fit", (95232, 3, 3, "on", "f16", "f16", 128)),
    # the proxy under the replay: its pick is over the GPU by the exact figures
    (
        "hybrid-granite",
        "1036MiB",
        FA_OFF,
        (4096, 7, 0, "off", "f16", "f16", 128, False),
        (4096, 5, 0, "off", "f16", "f16", 128),
    ),
    ("swa-gptoss", "1036MiB", FA_OFF, (4096, 1, 4, "off", "f16", "f16", 128, False), "offloaded"),
]


@pytest.mark.parametrize(
    ("name", "gpu", "policy", "proxy", "picked"),
    CASES,
    ids=[f"{c[0]}-{c[1]}-{'agent' if c[2] is AGENT else 'fa-off'}" for c in CASES],
)
def test_the_exact_figures_decide(
    name: str, gpu: str, policy: Policy, proxy: tuple | str, picked: tuple | str
) -> None:
    path = FIXTURES / f"{name}.gguf"
    assert _proxy(target(path, gpu), policy) == proxy
    t = target(path, gpu)
    if isinstance(picked, str):  # nothing fits by the exact figures either
        with pytest.raises(NoFit) as e:
            solve_exact(t, LaunchConfig(), policy)
        assert e.value.cause == picked
        return
    c = solve_exact(t, LaunchConfig(), policy)
    assert _summary(c) == picked
    # the figures shown are the replay's, and they fit ...
    rc = resolve(c.cfg, t.model.facts, engine=t.engine, build=t.build)
    rc = t.model.settle_flash_attn(rc, t.devices_of(c.cfg), t.host)
    assert c.breakdown == t.breakdown(c.cfg, rc) and c.breakdown.fits
    # ... and one step more context does not (short of the trained maximum)
    if c.ctx < t.model.facts.n_ctx_train:
        more = replace(c.cfg, n_ctx=c.cfg.n_ctx + STEP * c.rc.n_stream)
        rc_more = resolve(more, t.model.facts, engine=t.engine, build=t.build)
        rc_more = t.model.settle_flash_attn(rc_more, t.devices_of(more), t.host)
        assert not t.breakdown(more, rc_more).fits


def test_a_plan_that_fits_on_the_proxy_is_the_same() -> None:
    """Where the proxy's pick fits by the replay, solve_exact is exact_choice of it."""
    t = target(FIXTURES / "swa-gptoss.gguf", "1064MiB")
    c = solve_exact(t, LaunchConfig(), AGENT)
    assert _summary(c) == (124672, 5, 0, "on", "f16", "q4_0", 128)
    assert _proxy(target(FIXTURES / "swa-gptoss.gguf", "1064MiB"), AGENT) == (*_summary(c), True)


WAYS = [
    # (fixture, GPU, the flags that do not fit, the ways out by the exact figures)
    (
        "dense-llama",
        "1030MiB",
        {"n_ctx": 32768, "flash_attn": "on"},
        [WayOut("context", ctx_per_slot=9216), WayOut("gpu_layers", n_ctx=32768, n_gpu_layers=2)],
    ),
    (
        "swa-gptoss",
        "1040MiB",
        {"n_ctx": 131072, "flash_attn": "on", "n_parallel": 1},
        [
            # by the hand-derived peaks alone: 9,216, 9,984 and 8,704 tokens, no -ngl
            WayOut("kv", type_kv="q8_0", ctx_per_slot=54016),
            WayOut("kv", type_kv="q4_0", ctx_per_slot=102912),
            WayOut("context", ctx_per_slot=28160),
            WayOut("gpu_layers", n_ctx=131072, n_gpu_layers=1),
        ],
    ),
]


@pytest.mark.parametrize(("name", "gpu", "flags", "ways"), WAYS, ids=[w[0] for w in WAYS])
def test_check_ways_out_are_confirmed_by_replay(
    name: str, gpu: str, flags: dict, ways: list[WayOut]
) -> None:
    """check's ways out (ways_out.suggestions given the exact figures): each fits by the replay
    and one step further (+256 tokens, one more layer) does not."""
    t = target(FIXTURES / f"{name}.gguf", gpu)
    cfg = with_given(LaunchConfig(), **flags)
    rc = resolve(cfg, t.model.facts, engine=t.engine, build=t.build)
    rc = t.model.settle_flash_attn(rc, t.devices_of(cfg), t.host)
    exact = t.breakdown(cfg, rc)
    assert not exact.fits
    assert suggestions(t, cfg, n_ctx=rc.n_ctx, exact=exact) == ways
    for w in ways:
        kv = {"type_k": w.type_kv, "type_v": w.type_kv, "flash_attn": "on"} if w.type_kv else {}
        way = replace(cfg, **kv)
        if w.n_gpu_layers is not None:
            way, further = (
                replace(way, n_gpu_layers=k, n_ctx=rc.n_ctx)
                for k in (w.n_gpu_layers, w.n_gpu_layers + 1)
            )
        else:
            assert w.ctx_per_slot is not None
            way, further = (replace(way, n_ctx=n) for n in (w.ctx_per_slot, w.ctx_per_slot + STEP))
        assert (_fits_exactly(t, way), _fits_exactly(t, further)) == (True, False), w


LS = [
    # (fixture, ls's verdict, per-slot context, K, V, -ngl, --n-cpu-moe) on 1,026 MiB (2 MiB after
    # the reserve); by the hand-derived peaks alone each was `needs` (a larger GPU) at 4,096
    ("swa-gptoss", "offload", 4352, "f16", "q4_0", 4, 4),
    ("hybrid-granite", "offload", 4352, "f16", "f16", 5, 0),
    ("moe-qwen3", "fits", 4352, "q4_0", "q4_0", 5, 0),
    ("swa-gemma3", "fits", 9728, "q4_0", "q4_0", 8, 0),
]


@pytest.mark.parametrize(
    ("name", "verdict", "ctx", "type_k", "type_v", "ngl", "cpu_moe"), LS, ids=[r[0] for r in LS]
)
def test_ls_follows_the_exact_figures(
    name: str, verdict: str, ctx: int, type_k: str, type_v: str, ngl: int, cpu_moe: int
) -> None:
    from llamafit.fit.listing import fit_model

    t = target(FIXTURES / f"{name}.gguf", "1026MiB")
    f = fit_model(t.model.facts, LaunchConfig(), t.gpus, t.host, reserve_bytes=t.reserve_bytes)
    assert (f.verdict, f.ctx, f.type_k, f.type_v, f.n_gpu_layers, f.n_cpu_moe) == (
        verdict,
        ctx,
        type_k,
        type_v,
        ngl,
        cpu_moe,
    )
    assert f.compute_source == {"CUDA0": "graph", "CPU": "graph"}
    c = solve_exact(t, LaunchConfig(), Policy())  # ls's pick: the replay confirms it
    assert _summary(c)[:3] + _summary(c)[4:6] == (ctx, ngl, cpu_moe, type_k, type_v)
    assert _fits_exactly(t, c.cfg) and c.breakdown.devices[0].used_bytes == f.gpu_bytes
