"""The solver: policy order, pinned flags, exactness (+256 tokens never fits) and honest failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llamafit.fit.search import STEP
from llamafit.fit.solver import NoFit, Policy, solve
from llamafit.machine.devices import host
from llamafit.memory.config import LaunchConfig, with_given
from tests.support import FIXTURES, QWEN, ROOT, target

MIB = 1 << 20


def summary(choice) -> tuple:
    rc = choice.rc
    return (
        choice.ctx,
        rc.n_gpu_layers,
        rc.n_cpu_moe,
        "on" if rc.flash_attn else "off",
        rc.type_k.name.lower(),
        rc.type_v.name.lower(),
        rc.n_ubatch,
    )


def test_qwen_32b_on_24gib_by_hand() -> None:
    """Qwen2.5-32B Q4_K_M on a 24 GiB card: 18,508 MiB of weights on the GPU (all but token_embd,
    CUDA-padded), 1,024 MiB reserve, ~234 MiB compute. f16 KV costs 256 KiB per token, so f16
    reaches only (24,576 - 1,024 - 18,508 - 234) MiB / 0.25 MiB ≈ 19,240 → 19,200 tokens; q8_0 (136
    KiB per token, 4,352 MiB for 32,768 tokens) reaches the trained 32,768 — the most precise KV
    that does."""
    t = target(QWEN, "24GiB")
    choice = solve(t, LaunchConfig(), Policy())
    assert summary(choice) == (32768, 65, 0, "on", "q8_0", "q8_0", 512)
    gpu = choice.breakdown.devices[0]
    assert gpu.kv_bytes == 64 * 2 * 8 * 128 * 34 // 32 * 32768  # 136 KiB per token
    assert gpu.weights_bytes // MIB == 18508
    # a smaller -ub shrinks compute: 512 more tokens
    f16 = solve(t, LaunchConfig(), Policy(kv="f16"))
    assert summary(f16) == (19712, 65, 0, "on", "f16", "f16", 256)  # -ub 128 reaches no further
    f16_ub512 = solve(t, with_given(LaunchConfig(), n_ubatch=512), Policy(kv="f16"))
    assert summary(f16_ub512) == (19200, 65, 0, "on", "f16", "f16", 512)


def test_qwen_32b_on_16gib_moves_layers_to_the_cpu() -> None:
    choice = solve(target(QWEN, "16GiB"), LaunchConfig(), Policy())
    # op offload: the 53rd layer no longer fits
    assert summary(choice) == (
        7168,
        52,
        0,
        "on",
        "q4_0",
        "q4_0",
        128,
    )


def test_prefer_quality_keeps_f16() -> None:
    choice = solve(target(QWEN, "24GiB"), LaunchConfig(), Policy(prefer="quality"))
    assert summary(choice)[4:6] == ("f16", "f16")


def test_pinned_flags_are_kept() -> None:
    pinned = with_given(LaunchConfig(), n_gpu_layers=40, flash_attn="off")
    choice = solve(target(QWEN, "24GiB"), pinned, Policy())
    assert (choice.rc.n_gpu_layers, choice.rc.flash_attn) == (40, False)
    assert choice.rc.type_v.name.lower() == "f16"  # quantized V would need flash attention


def test_fixed_context_and_impossible_minimum() -> None:
    t = target(QWEN, "24GiB")
    assert solve(t, LaunchConfig(), Policy(ctx=8192)).ctx == 8192
    with pytest.raises(NoFit, match="no configuration fits 4,096 tokens per slot on this machine"):
        solve(target(QWEN, "4GiB"), with_given(LaunchConfig(), n_gpu_layers=65), Policy())


def test_moe_experts_go_to_the_cpu_before_layers() -> None:
    # a few MiB for the model
    t = target(FIXTURES / "moe-qwen3.gguf", "1026200K", reserve=1000 * MIB)
    choice = solve(t, LaunchConfig(), Policy(ctx=2048))
    # every block's experts on the CPU first (each host expert tensor is copied into the GPU's
    # compute buffer for its op: op offload, op_offload.add_op_offload, so moving experts frees less
    # than their size), then block 0 (which also takes the mixed input branch's split-input copies
    # off the GPU)
    assert summary(choice) == (2048, 4, 4, "on", "q4_0", "q4_0", 128)
    # every block's experts moved, all layers: too much
    assert not t.fits(replace(choice.cfg, n_gpu_layers=5))


FIT_MODELS = [
    "dense-llama.gguf",
    "swa-gemma3.gguf",
    "moe-qwen3.gguf",
    "hybrid-granite.gguf",
    "mla-deepseek2.gguf",
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(FIT_MODELS),
    gpu_mib=st.integers(1030, 1100),
    np=st.sampled_from([-1, 1, 2]),
)
def test_the_chosen_context_is_exact(name: str, gpu_mib: int, np: int) -> None:
    """The chosen context fits and the same config with 256 more tokens per slot does not."""
    t = target(FIXTURES / name, f"{gpu_mib}MiB")
    cfg = replace(LaunchConfig(), n_parallel=np)
    try:
        choice = solve(t, cfg, Policy(min_ctx=256))
    except NoFit:
        assume(False)  # not even 256 tokens fit this GPU: no boundary to check
        raise
    assert choice.breakdown.fits
    if choice.ctx < t.model.facts.n_ctx_train:
        more = replace(choice.cfg, n_ctx=(choice.ctx + STEP) * choice.rc.n_stream)
        assert not t.fits(more)


def test_two_unequal_gpus_are_rebalanced() -> None:
    """Split by free memory (16:8) the small GPU overflows first (its compute buffer, with pipeline
    parallelism's 4 input copies, and its reserve do not shrink with its layers); splitting by the
    room left for layers reaches the trained context (and needs no smaller -ub)."""
    t = target(QWEN, "16GiB,8GiB")
    by_free = solve(t, with_given(LaunchConfig(), tensor_split=(16.0, 8.0)), Policy())
    rebalanced = solve(t, LaunchConfig(), Policy())
    assert summary(by_free) == (32256, 65, 0, "on", "q4_0", "q4_0", 128)
    assert summary(rebalanced) == (32768, 65, 0, "on", "q4_0", "q4_0", 512)
    assert rebalanced.rc.tensor_split == (1.0, 0.461)  # GPU buffers hold no inp_embd (compute.py)
    assert all(d.fits for d in rebalanced.breakdown.devices)


def test_qwen_header_fixture_regenerates_identically(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "q.gguf"
    script = ROOT / "scripts" / "fixtures" / "make_qwen_like_header.py"
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    assert out.read_bytes() == QWEN.read_bytes()


def test_fixed_context_is_padded_like_llama_cpp() -> None:
    assert solve(target(QWEN, "24GiB"), LaunchConfig(), Policy(ctx=20000)).ctx == 20224
    pinned = solve(target(QWEN, "24GiB"), with_given(LaunchConfig(), n_ctx=1000), Policy())
    assert pinned.ctx == 1024


def test_host_ram_does_not_hide_a_partial_offload() -> None:
    """12 GiB GPU, 16 GiB host: some -ngl fit the GPU while the host holds the rest (mmap'd)."""
    t = replace(target(QWEN, "12GiB"), host=host(16 << 30, 16 << 30))
    choice = solve(t, LaunchConfig(), Policy(kv="q4_0", ctx=4096))
    # op offload: room for one host weight
    assert summary(choice) == (
        4096,
        37,
        0,
        "on",
        "q4_0",
        "q4_0",
        512,
    )


@pytest.mark.parametrize(
    ("n_parallel", "kv_unified", "expected", "evaluated"),
    [
        (-1, False, 1, 0),  # -np auto: 4 slots, one unified stream
        (1, False, 1, 0),
        (4, True, 1, 0),
        (4, False, 4, 1),  # a stream per slot: evaluated (llama.cpp may refuse the config)
        (300, False, 1, 0),  # over LLAMA_MAX_SEQ: resolve refuses it, as evaluate would
    ],
)
def test_streams_evaluates_only_for_several_streams(
    n_parallel: int, kv_unified: bool, expected: int, evaluated: int
) -> None:
    from llamafit.fit.search import streams

    t = target(QWEN, "24GiB")
    cfg = replace(LaunchConfig(), n_parallel=n_parallel, kv_unified=kv_unified)
    result = t.evaluate(replace(cfg, n_ctx=STEP))
    assert (result[0].n_stream if result is not None else 1) == expected  # the rule streams keeps
    t = target(QWEN, "24GiB")  # a fresh target: nothing evaluated yet
    assert streams(t, cfg) == expected
    assert len(t._evaluated) == evaluated


# ---- the combo search stops once no later combo can be picked (issue #16: a slow mamba2 plan), and
# rules out combos by a bound rather than searching each (issue #26) ----


def _exhaustive_best_combo(t, base: LaunchConfig, policy: Policy, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """The pick by searching every combo (the rule _best_combo must keep): the first combo reaching
    the best context (quality: the first reaching any)."""
    from llamafit.fit.search import max_context
    from llamafit.fit.solver import combos

    reached = [(c, ctx) for c in combos(base, policy) if (ctx := max_context(t, c, hi, lo))]
    if not reached:
        return None
    best = max(ctx for _, ctx in reached)
    return (
        reached[0] if policy.prefer == "quality" else next((c, x) for c, x in reached if x == best)
    )


@pytest.mark.parametrize("prefer", ["context", "speed", "quality"])
@pytest.mark.parametrize(
    ("name", "gpu", "lo", "hi", "exhaustive", "evaluated", "quality"),
    [
        # combos that resolve alike (-ub above -c 256) share one estimate (Target._searched);
        # search.streams evaluates nothing with one KV stream (-np auto: a unified cache);
        # max_context's search is guided by the devices' room (search.largest_guided)
        ("recurrent-mamba2.gguf", "8GiB", 256, 4096, 35, 3, 2),  # all 21 combos reach the top
        # -fa auto is off on CUDA for these fixtures' 16-wide heads (no kernel), with the cache as
        # made for flash attention: a config of its own, which -fa on and off do not share
        ("dense-llama.gguf", "8GiB", 256, 4096, 10, 2, 2),
        ("hybrid-granite.gguf", "24GiB,12GiB", 256, 4096, 10, 2, 2),
        (
            "header-only/qwen2.5-32b-like-q4_k_m.gguf",
            "24GiB",
            4096,
            32768,
            66,
            12,
            4,
        ),  # the 10th (q8_0/q8_0, -ub 512) reaches 32k first
        # below the top only the last (q4_0/q4_0, -ub 128) reaches the most, 12,288: each other
        # combo is asked once (it took two, at 12,544 and at 12,288: 44 evaluations)
        ("header-only/qwen2.5-32b-like-q4_k_m.gguf", "20GiB", 4096, 32768, 66, 24, 11),
    ],
)
def test_best_combo_is_the_exhaustive_pick_with_fewer_evaluations(
    name: str,
    gpu: str,
    lo: int,
    hi: int,
    exhaustive: int,
    evaluated: int,
    quality: int,
    prefer: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llamafit.fit import solver
    from llamafit.memory.model import MemoryModel

    calls: list[int] = []
    real = MemoryModel.estimate
    monkeypatch.setattr(MemoryModel, "estimate", lambda *a, **k: calls.append(1) or real(*a, **k))
    policy = Policy(prefer=prefer)
    t = target(FIXTURES / name, gpu)
    base = replace(LaunchConfig(), n_gpu_layers=t.model.facts.n_layer_all + 1)
    expected = _exhaustive_best_combo(t, base, policy, lo, hi)
    assert len(calls) == exhaustive
    calls.clear()
    t = target(FIXTURES / name, gpu)  # a fresh target: nothing evaluated yet
    choice = solver._best_combo(t, base, policy, lo, hi)
    assert expected is not None and choice is not None
    assert (replace(choice.cfg, n_ctx=0), choice.ctx) == (
        replace(expected[0], n_ctx=0),
        expected[1],
    )
    assert len(calls) == (quality if prefer == "quality" else evaluated)


@pytest.mark.parametrize(
    ("gpu", "searched", "settled"),
    [
        (
            "900MiB",
            (4096, 25, 8, "on", "q4_0", "q4_0", 256),
            (4096, 25, 10, "on", "f16", "q4_0", 128),
        ),
        (
            "700MiB",
            (4096, 25, 15, "on", "q4_0", "q4_0", 256),
            (4096, 25, 17, "on", "f16", "q4_0", 128),
        ),
    ],
)
def test_a_graph_llama_cpp_aborts_on_is_refused(
    shapes_dir: Path, gpu: str, searched: tuple, settled: tuple
) -> None:
    """Granite 3.0 1B-A400M with both caches quantized has 2065 graph tensors, more than the 2053 of
    llama.cpp's scheduler (tests/memory/graph/test_sched_overflow.py): the search on the hand peaks
    picks q4_0/q4_0, and exact_choice refuses that kind and solves again."""
    from llamafit.fit.solver import exact_choice
    from scripts.fixtures import make_shapes

    path = Path(make_shapes.write_shape("granite3-1b-a400m", shapes_dir))
    t = target(path, gpu, 256 * MIB)
    first = solve(t, LaunchConfig(), Policy())
    assert summary(first) == searched
    assert summary(exact_choice(t, LaunchConfig(), Policy(), first)) == settled


def test_a_pinned_kind_llama_cpp_aborts_on_is_its_error(shapes_dir: Path) -> None:
    from llamafit.fit.solver import exact_choice
    from llamafit.memory.model import SchedulerOverflowError
    from scripts.fixtures import make_shapes

    path = Path(make_shapes.write_shape("granite3-1b-a400m", shapes_dir))
    t = target(path, "900MiB", 256 * MIB)
    policy = Policy(kv="q8_0")
    with pytest.raises(SchedulerOverflowError):
        exact_choice(t, LaunchConfig(), policy, solve(t, LaunchConfig(), policy))


@pytest.mark.parametrize("prefer", ["speed", "context", "quality"])
def test_q8_0_kv_before_a_4_bit_v_where_both_reach_the_context(prefer: str) -> None:
    """Issue #37: at 28,672 tokens f16/q4_0 (10.25 bits per value) and q8_0/q8_0 (8.5) both fit on
    24 GiB; llama.cpp's KL divergences (PR #7412) rank q8_0/q8_0 first, whatever is preferred."""
    choice = solve(target(QWEN, "24GiB"), LaunchConfig(), Policy(prefer=prefer, ctx=28672))
    assert summary(choice)[4:6] == ("q8_0", "q8_0")


def test_attention_sink_models_keep_k_at_f16() -> None:
    """gpt-oss (attention sinks) suffers badly from any quantized K: K stays f16 unless asked."""
    gptoss = target(FIXTURES / "swa-gptoss.gguf", "1064MiB")
    assert summary(solve(gptoss, LaunchConfig(), Policy()))[4:6] == ("f16", "q4_0")
    asked = solve(gptoss, LaunchConfig(), Policy(kv="q4_0"))
    assert summary(asked)[4:6] == ("q4_0", "q4_0")


@pytest.mark.parametrize(
    ("name", "gpu", "policy", "expected", "evaluated"),
    [
        # quantized K/V refused (16-wide heads): the last accepted pair is f16/f16, both -fa
        (
            "dense-llama.gguf",
            "8GiB",
            Policy(),
            [("f16", "f16", "on", 128), ("f16", "f16", "off", 128)],
            17,
        ),
        ("dense-llama.gguf", "8GiB", Policy(fa="off"), [("f16", "f16", "off", 128)], 1),
        ("mla-deepseek2.gguf", "8GiB", Policy(kv="q8_0"), [], 3),  # none accepted
        # attention sinks: K stays f16
        ("swa-gptoss.gguf", "8GiB", Policy(), [("f16", "q4_0", "on", 128)], 1),
        ("moe-qwen3.gguf", "24GiB,12GiB", Policy(), [("q4_0", "q4_0", "on", 128)], 1),
    ],
)
def test_most_compact_is_the_rule_over_every_combo_with_fewer_evaluations(
    name: str, gpu: str, policy: Policy, expected: list[tuple[str, str, str, int]], evaluated: int
) -> None:
    """_most_compact asks the combos from the end and by -ub from the least: the same combos as
    the rule over every accepted one (the last accepted KV pair, the least -ub accepted)."""
    from llamafit.fit.solver import _most_compact, combos

    t = target(FIXTURES / name, gpu)
    accepted = [
        o
        for o in combos(LaunchConfig(), policy, t.model.facts.architecture)
        if t.evaluate(replace(o, n_ctx=STEP)) is not None
    ]
    rule = [
        o
        for o in accepted
        if (o.type_k, o.type_v) == (accepted[-1].type_k, accepted[-1].type_v)
        and o.n_ubatch == min(a.n_ubatch for a in accepted)
    ]
    t = target(FIXTURES / name, gpu)  # a fresh target: nothing evaluated yet
    got = _most_compact(t, LaunchConfig(), policy)
    assert got == rule
    assert [(o.type_k, o.type_v, o.flash_attn, o.n_ubatch) for o in got] == expected
    assert len(t._evaluated) == evaluated


# ---- max_context's guided search: bisection's answer in fewer evaluations (issue #36 item 5) ----


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(0, 40),
    width=st.integers(-2, 600),
    boundary=st.integers(-5, 700),
    rooms=st.lists(
        st.one_of(
            st.none(), st.lists(st.one_of(st.none(), st.integers(-(10**9), 10**9)), max_size=3)
        ),
        min_size=1,
        max_size=64,
    ),
)
def test_largest_guided_is_bisection_whatever_the_rooms_say(
    lo: int, width: int, boundary: int, rooms: list[list[int | None] | None]
) -> None:
    """The answer is the monotone predicate's boundary, as largest's, even where the rooms are
    wrong (they only choose the probes); each x is looked at once at most."""
    from llamafit.fit.search import largest, largest_guided

    hi = lo + width
    seen: list[int] = []

    def look(x: int) -> tuple[bool, tuple[int | None, ...] | None]:
        assert lo <= x <= hi and x not in seen
        seen.append(x)
        r = rooms[x % len(rooms)]
        return x <= boundary, None if r is None else tuple(r)

    assert largest_guided(lo, hi, look) == largest(lo, hi, lambda x: x <= boundary)


def _kinked(x: int) -> int:
    """A room that shrinks by 10 a step up to 50, then by 20."""
    return 1000 - 10 * x if x <= 50 else 500 - 20 * (x - 50)


@pytest.mark.parametrize(
    ("left", "boundary", "looks"),
    [
        # a line: from the two ends it meets 0 at the boundary, then the step after it
        (lambda x: 1000 - 10 * x, 100, [0, 500, 100, 101]),
        (lambda x: 1005 - 10 * x, 100, [0, 500, 100, 101]),
        (lambda x: 5001 - 10 * x, 500, [0, 500]),  # the upper end fits
        (_kinked, 75, [0, 500, 52, 75, 76]),  # the line from 52 and 500 meets 0 at 75
    ],
)
def test_largest_guided_finds_a_linear_boundary_in_a_few_looks(
    left: Callable[[int], int], boundary: int, looks: list[int]
) -> None:
    """Bisection over [0, 500] looks 10 times."""
    from llamafit.fit.search import largest_guided

    seen: list[int] = []

    def look(x: int) -> tuple[bool, tuple[int | None, ...]]:
        seen.append(x)
        return left(x) >= 0, (None, left(x))

    assert largest_guided(0, 500, look) == boundary
    assert seen == looks


@pytest.mark.parametrize(
    ("name", "gpu", "kv", "fa", "ctx_max"),
    [
        ("dense-llama.gguf", "2GiB", "f16", "on", 131072),
        ("moe-qwen3.gguf", "24GiB,12GiB", "q8_0", "on", 262144),
        ("swa-gemma3.gguf", "4GiB", "f16", "off", 131072),
        ("mla-deepseek2.gguf", "3GiB", "f16", "on", 163840),
        ("header-only/qwen2.5-32b-like-q4_k_m.gguf", "24GiB", "q8_0", "on", 131072),
        ("header-only/qwen2.5-32b-like-q4_k_m.gguf", "20GiB", "f16", "off", 131072),
    ],
)
def test_max_context_is_the_bisection_over_fits(
    name: str, gpu: str, kv: str, fa: str, ctx_max: int
) -> None:
    from llamafit.fit.search import largest, max_context

    cfg = replace(LaunchConfig(), type_k=kv, type_v=kv, flash_attn=fa)
    t = target(FIXTURES / name, gpu)
    found = max_context(t, cfg, ctx_max)
    t = target(FIXTURES / name, gpu)  # a fresh target: no bracket known
    k = largest(1, ctx_max // STEP, lambda k: t.fits(replace(cfg, n_ctx=k * STEP)))
    assert found == (None if k is None else k * STEP)
