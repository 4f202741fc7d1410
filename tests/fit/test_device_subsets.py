"""Several GPUs never plan worse than fewer (issue #37): leaving a device out is a candidate
(solver.device_subsets), and the solver's own objective (solver.rank) orders the plans."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamafit.fit.plan_speed import choice_speed
from llamafit.fit.search import Target
from llamafit.fit.solver import Choice, NoFit, Policy, device_subsets, rank, solve
from llamafit.fit.speed import SpeedInputs
from llamafit.machine.rates import Rate
from llamafit.memory.config import LaunchConfig, with_given
from tests.support import FIXTURES, GIB, QWEN, target


def _inputs(t: Target) -> SpeedInputs:
    """Bandwidth grows with a card's memory (as the catalog's assumptions mostly do); the host's
    is fixed."""
    bws = tuple(Rate(200e9 + 30 * (g.usable_bytes or 0), "test") for g in t.gpus)
    return SpeedInputs(bws, (Rate(50e12, "test"),) * len(bws), Rate(50e9, "test"), Rate(1e12, "t"))


def _plan(t: Target, prefer: str) -> tuple[Choice | None, Policy]:
    inputs = _inputs(t)

    def speed(c: Choice) -> float | None:
        est = choice_speed(t, c, inputs)
        return est.generation_tps[0] if est else None

    policy = Policy(prefer=prefer, speed_of=speed if prefer == "speed" else None)
    try:
        return solve(t, LaunchConfig(), policy), policy
    except NoFit:
        return None, policy


def _key(t: Target, prefer: str) -> tuple[float, ...]:
    choice, policy = _plan(t, prefer)
    if choice is None:
        return (-1.0,)
    hi = t.model.facts.n_ctx_train
    return rank(t, choice, policy, hi, policy.speed_of if prefer == "speed" else None)


SIZES = st.sampled_from([1, 2, 4, 6, 8, 12, 16, 20, 24])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(SIZES, min_size=2, max_size=3),
    prefer=st.sampled_from(["speed", "context", "quality"]),
)
def test_no_set_of_gpus_plans_worse_than_a_subset_of_it(sizes: list[int], prefer: str) -> None:
    whole = target(QWEN, ",".join(f"{s}GiB" for s in sizes))
    best = _key(whole, prefer)
    for k in range(1, len(sizes)):
        for kept in combinations(range(len(sizes)), k):
            fewer = replace(whole, gpus=tuple(whole.gpus[i] for i in kept))
            assert best >= _key(fewer, prefer), (sizes, kept)


@pytest.mark.parametrize("second", ["4GiB", "2GiB", "1GiB"])
def test_a_small_second_gpu_is_left_out(second: str) -> None:
    """Issue #37: with 24 GiB and a small card, the plan is the 24 GiB card's alone: all 65 layers
    on it at 32,768 tokens (before, 3 to 27 layers went to the CPU)."""
    choice = solve(target(QWEN, f"24GiB,{second}"), LaunchConfig(), Policy())
    alone = solve(target(QWEN, "24GiB"), LaunchConfig(), Policy())
    rc = choice.rc
    assert (rc.split_mode, rc.main_gpu, rc.n_gpu_layers, choice.ctx) == ("none", 0, 65, 32768)
    assert [d.name for d in choice.breakdown.devices] == ["CUDA0", "CPU"]
    assert choice.breakdown.devices == alone.breakdown.devices


def test_the_largest_gpu_alone_wherever_it_is() -> None:
    choice = solve(target(QWEN, "4GiB,24GiB"), LaunchConfig(), Policy())
    assert (choice.rc.split_mode, choice.rc.main_gpu) == ("none", 1)
    assert [d.name for d in choice.breakdown.devices] == ["CUDA1", "CPU"]


def test_two_gpus_that_are_needed_are_both_used() -> None:
    choice = solve(target(QWEN, "16GiB,16GiB"), LaunchConfig(), Policy())
    assert (choice.rc.split_mode, choice.rc.n_gpu_layers, choice.ctx) == ("layer", 65, 32768)
    assert [d.name for d in choice.breakdown.devices] == ["CUDA0", "CUDA1", "CPU"]


def test_three_gpus_drop_the_smallest_by_naming_the_others() -> None:
    """-dev, not -ts 0: a device at split 0 would still be the first device, the one llama.cpp
    offloads the CPU layers' large matrix products to."""
    choice = solve(target(QWEN, "20GiB,6GiB,1GiB"), LaunchConfig(), Policy())
    assert (choice.cfg.devices, choice.rc.n_gpu_layers) == (("CUDA0", "CUDA1"), 65)
    assert [d.name for d in choice.breakdown.devices] == ["CUDA0", "CUDA1", "CPU"]


@pytest.mark.parametrize(
    "pinned",
    [
        {"tensor_split": (1.0, 1.0)},
        {"split_mode": "layer"},
        {"main_gpu": 0},
        {"devices": ("CUDA0", "CUDA1")},
    ],
)
def test_a_choice_of_devices_the_user_made_is_kept(pinned: dict[str, object]) -> None:
    choice = solve(target(QWEN, "24GiB,4GiB"), with_given(LaunchConfig(), **pinned), Policy())
    assert choice.rc.split_mode == "layer"
    assert [d.name for d in choice.breakdown.devices] == ["CUDA0", "CUDA1", "CPU"]


def test_cpu_only_plans_keep_the_server_off_the_gpu() -> None:
    choice = solve(target(FIXTURES / "dense-llama.gguf", "cpu"), LaunchConfig(), Policy())
    assert (choice.cfg.devices, choice.rc.n_gpu_layers) == (("none",), 0)
    pinned = with_given(LaunchConfig(), devices=("none",))
    assert solve(target(FIXTURES / "dense-llama.gguf", "cpu"), pinned, Policy()).cfg.devices == (
        "none",
    )


def test_rpc_workers_keep_the_whole_set() -> None:
    from llamafit.machine.devices import DeviceSpec

    t = target(QWEN, "24GiB,4GiB")
    rpc = DeviceSpec("RPC[10.0.0.2:50052]", "gpu", "rpc", 4 * GIB, 4 * GIB)
    with_rpc = replace(t, gpus=(rpc, *t.gpus))
    assert device_subsets(with_rpc, LaunchConfig()) == []
    assert len(device_subsets(t, LaunchConfig())) == 2
