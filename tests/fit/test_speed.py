"""The speed model's pure parts: the CPU's arithmetic bound, calibration from verified runs, the
probe's cache."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.speed import Efficiency, SpeedInputs, estimate
from llamafit.fit.speed_calibration import calibrate
from llamafit.machine.rates import AttentionRate, KernelRate, Rate
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.placement import layer_map
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from tests.support import FIXTURES
from tests.support.speed import cpu

MODEL = MemoryModel(build_facts(read_model(str(FIXTURES / "dense-llama.gguf"))))
RC = resolve(LaunchConfig(n_ctx=4096), MODEL.facts, engine="llama-server")
LMAP = layer_map(MODEL.facts.n_layer_all, 0, ())


@pytest.mark.parametrize("flash_attn, empty_cells", [("on", 1), ("off", 256)])
def test_cpu_token_time_is_the_slower_of_memory_and_arithmetic_plus_attention(
    flash_attn: str, empty_cells: int
) -> None:
    """The CPU's flash attention skips masked cells: an empty context attends over 1 cell, not a
    256-cell block."""
    rc = resolve(
        LaunchConfig(n_ctx=4096, flash_attn=flash_attn), MODEL.facts, engine="llama-server"
    )
    memory_only = estimate(MODEL, rc, LMAP, (), cpu(1e9, 1e12))
    assert memory_only is not None
    d = memory_only.devices[0]
    assert d.bound == "memory" and d.seconds[0] == (d.weight_bytes + d.kv_bytes_empty) / 1e9
    cell_bytes = (d.kv_bytes_full - d.kv_bytes_empty) // (4096 - empty_cells)
    assert d.kv_bytes_empty == cell_bytes * empty_cells
    # 1 MFLOP/s: arithmetic wins
    slow = estimate(MODEL, rc, LMAP, (), cpu(1e12, 1e6, decode=1.0, attention=1.0))
    assert slow is not None and slow.devices[0].bound == "compute"
    flops = slow.flops_per_token
    facts = MODEL.facts
    attn_cell = sum(
        2 * facts.n_head[il] * (facts.n_embd_head_k + facts.n_embd_head_v)
        for il in range(facts.n_layer)
    )
    assert slow.devices[0].seconds == pytest.approx(
        (flops / 1e6 + attn_cell * empty_cells / 1e6, flops / 1e6 + attn_cell * 4096 / 1e6),
        rel=1e-12,
    )


def record(
    machine: str = "m",
    arch: str = "llama",
    measured: object = 10.0,
    estimated: object = 20.0,
    backend: object = "cpu",
    kind: str = "serve",
) -> dict[str, object]:
    """A served run with enough evidence on an idle machine (speed_calibration.py's rules:
    test_hostile_campaign.py)."""
    return {
        "kind": kind,
        "speed": {
            "machine": machine,
            "architecture": arch,
            "backend": backend,
            "generation_tps": measured,
            "estimated_generation_tps": estimated,
            "efficiency": 0.7,
            "requests": 8,
            "generated_tokens": 1024,
            "load_average": 0.5,
            "cpus": 2,
        },
    }


@pytest.mark.parametrize(
    "records, scale, runs",
    [
        ([record()], 0.5, 1),
        (
            [record(), record(measured=30.0), record(measured=40.0)],
            1.5,
            3,
        ),  # the median of 0.5, 1.5, 2.0
        ([record(machine="other")], None, 0),  # another machine
        ([record(arch="qwen2")], None, 0),  # another model family
        ([record(kind="load")], None, 0),  # not a verified run
        ([record(measured="fast")], None, 0),  # wrong JSON types are skipped, not fatal
        ([record(estimated=0)], None, 0),
        ([record(backend=["cpu"])], None, 0),
        ([record(measured=1e-9)], None, 0),  # a ratio no machine explains
        ([{"kind": "verify", "speed": "x"}, record()], 0.5, 1),
        (
            [record(kind="verify")],
            None,
            0,
        ),  # a verify run alone: one request of 16 tokens, not enough evidence
    ],
)
def test_calibration_scales_the_slowest_backend_by_measured_over_estimated(
    records, scale, runs
) -> None:  # type: ignore[no-untyped-def]
    base = cpu(1e9, 1e9, decode=0.5, attention=0.1)
    out = calibrate(base, records, machine="m", architecture="llama")
    eff = out.efficiency_for("cpu")
    if scale is None:
        assert out is base and out.calibrated is None
        return
    assert (eff.generation, eff.decode, eff.attention) == pytest.approx(
        (1.0 * scale, 0.5 * scale, 0.1 * scale)
    )
    assert (
        out.calibrated
        == f"cpu generation speed x {scale:.2f}, measured by {runs} run(s) of llama on this "
        f"machine ({8 * runs:,} requests, {1024 * runs:,} tokens; llamafit calibration show)"
    )


def test_host_probe_cache_is_used_and_bad_caches_are_remeasured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.machine import host_probe

    calls: list[object] = []
    monkeypatch.setattr(host_probe.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(host_probe, "measure_bandwidth", lambda n=None: calls.append(n) or 4e9 * n)
    monkeypatch.setattr(host_probe, "measure_flops", lambda: calls.append("flops") or 34e9)
    monkeypatch.setattr(
        host_probe,
        "measure_kernels",
        lambda: {
            "q4_K": [5e9, 6e9],
            "q9_X": [1e9, 1e9],
            "flash_attn_ext": [2e9, 7e9],
            "streams": {
                "q4_K": [[1, 2e9], [2, 3e9], [3, 3.5e9]],
                "q8_0": [[1, 4e9]],
                "flash_attn_ext": [[1, 1e9], [3, 2e9]],
            },
        },
    )
    rates = host_probe.host_rates({}, tmp_path)
    src = rates.bandwidth.source
    assert src.startswith("measured by the host probe (")
    assert rates == host_probe.HostRates(
        Rate(12e9, src),
        Rate(34e9, src),
        ((1, 4e9), (2, 8e9), (3, 12e9)),
        3,
        # a type llamafit does not know: left out; a streaming figure without a kernel figure too
        (KernelRate(12, 5e9, 6e9, ((1, 2e9), (2, 3e9), (3, 3.5e9))),),
        AttentionRate(2e9, 7e9, ((1, 1e9), (3, 2e9))),
    )
    assert calls == [1, 2, 3, "flops"]
    assert host_probe.host_rates({}, tmp_path) == rates and len(calls) == 4  # cached
    record = json.loads((tmp_path / "host-probe.json").read_text())
    assert (
        record["bandwidth_by_threads"] == [[1, 4e9], [2, 8e9], [3, 12e9]]
        and record["flops_threads"] == 3
    )
    good = dict(record)
    junk = [
        "[1, 2]",
        '{"schema": "llamafit.host-probe/1", "bandwidth_bytes_per_s": "x"}',
        "\x00" * 20000,
        json.dumps(
            {**good, "schema": "llamafit.host-probe/1"}
        ),  # the one-figure probe of earlier versions
        json.dumps(
            {**good, "schema": "llamafit.host-probe/2"}
        ),  # its 1-thread figure read BLAS's threads
        json.dumps({**good, "schema": "llamafit.host-probe/3"}),  # no flash attention figure
        json.dumps({**good, "schema": "llamafit.host-probe/4"}),  # no streaming figures
        json.dumps({**good, "bandwidth_by_threads": [[2, 8e9], [1, 4e9]]}),  # not ascending
        json.dumps({**good, "bandwidth_by_threads": []}),
        json.dumps({**good, "bandwidth_by_threads": [[1, "fast"]]}),
        json.dumps({**good, "bandwidth_by_threads": [[True, 4e9]]}),
        json.dumps({**good, "flops_threads": 0}),
        json.dumps({**good, "kernels": [1]}),
    ]
    for text in junk:
        (tmp_path / "host-probe.json").write_text(text)
        host_probe.host_rates({}, tmp_path)
    assert len(calls) == 4 + 4 * len(junk)  # each junk cache measured again, never trusted
    env = {"LLAMAFIT_HOST_BANDWIDTH": "51.2e9", "LLAMAFIT_HOST_FLOPS": "1e12"}
    assert host_probe.host_rates(env, tmp_path) == host_probe.HostRates(
        Rate(51.2e9, "$LLAMAFIT_HOST_BANDWIDTH"), Rate(1e12, "$LLAMAFIT_HOST_FLOPS")
    )
    only_bw = host_probe.host_rates({"LLAMAFIT_HOST_BANDWIDTH": "51.2e9"}, tmp_path)
    assert (
        only_bw.bandwidth.value,
        only_bw.bandwidth_by_threads,
        only_bw.flops.value,
        only_bw.flops_threads,
    ) == (51.2e9, (), 34e9, 3)  # a given bandwidth holds at every thread count
    assert json.loads((tmp_path / "host-probe.json").read_text())["bandwidth_bytes_per_s"] == 12e9
    monkeypatch.setattr(host_probe, "measure_bandwidth", lambda n=None: {1: 6e9, 2: 5e9, 3: 9e9}[n])
    # 2 threads: disturbed
    assert host_probe.probe()["bandwidth_by_threads"] == [
        [1, 6e9],
        [2, 6e9],
        [3, 9e9],
    ]


@pytest.mark.slow  # measures this machine
def test_one_thread_bandwidth_runs_on_one_thread() -> None:
    """The probe's 1-thread figure is one thread reading: the process's CPU time stays at its wall
    time (a BLAS dot product ran on every core, so "1 thread" read the whole machine's
    bandwidth)."""
    import os
    import time

    from llamafit.machine import host_probe

    # numpy's import starts BLAS's threads, which spin a while: not measured
    host_probe.measure_bandwidth(1)
    cpu0, wall0 = sum(os.times()[:2]), time.perf_counter()
    host_probe.measure_bandwidth(1)
    cpu, wall = sum(os.times()[:2]) - cpu0, time.perf_counter() - wall0
    assert cpu <= 1.4 * wall, (cpu, wall)  # BLAS's dot product on two cores: about 2 x wall


@pytest.mark.parametrize(
    "n_cpu, counts",
    [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12]), (0, [1])],
)
def test_probe_thread_counts(n_cpu: int, counts: list[int]) -> None:
    from llamafit.machine.host_probe import thread_counts

    assert thread_counts(n_cpu) == counts


CURVE = ((1, 6e9), (2, 10e9), (4, 14e9))


@pytest.mark.parametrize(
    "threads, expected", [(1, 6e9), (2, 10e9), (3, 12e9), (4, 14e9), (16, 14e9), (0, 6e9)]
)
def test_bandwidth_at_a_thread_count(threads: int, expected: float) -> None:
    from llamafit.fit.speed import bandwidth_at

    assert bandwidth_at(CURVE, threads) == expected
    assert bandwidth_at(tuple(reversed(CURVE)), threads) == expected  # order does not matter


@pytest.mark.parametrize(
    "n_threads, curve, bw, flops, bw_source, flops_source",
    [
        (1, CURVE, 6e9, 10e9, "probe, 1 thread", "probe, x 1/4 threads"),
        (3, CURVE, 12e9, 30e9, "probe, 3 threads", "probe, x 3/4 threads"),
        (4, CURVE, 14e9, 40e9, "probe, 4 threads", "probe"),
        (
            8,
            CURVE,
            14e9,
            40e9,
            "probe, 8 threads",
            "probe, x 4/4 threads",
        ),  # no more cores than measured
        (0, CURVE, 20e9, 40e9, "probe", "probe"),  # thread count unknown: every core's figures
        (
            2,
            (),
            20e9,
            20e9,
            "probe",
            "probe, x 2/4 threads",
        ),  # a bandwidth from the environment: no curve
    ],
)
def test_host_rates_follow_the_thread_count(
    n_threads: int,
    curve: tuple[tuple[int, float], ...],
    bw: float,
    flops: float,
    bw_source: str,
    flops_source: str,
) -> None:
    inputs = SpeedInputs(
        (),
        (),
        Rate(20e9, "probe"),
        Rate(40e9, "probe"),
        host_bandwidth_by_threads=curve,
        n_threads=n_threads,
        host_flops_threads=4,
    )
    assert inputs.host_bandwidth_at() == Rate(bw, bw_source)
    assert inputs.host_flops_at() == Rate(flops, flops_source)


def test_one_thread_reads_at_the_one_thread_bandwidth() -> None:
    eff = {"cpu": Efficiency(0.5, 1.0, "test")}
    one, all_ = (
        SpeedInputs(
            (),
            (),
            Rate(14e9, "p"),
            Rate(1e12, "p"),
            efficiency=eff,
            host_bandwidth_by_threads=CURVE,
            n_threads=n,
            host_flops_threads=4,
        )
        for n in (1, 4)
    )
    e1, e4 = estimate(MODEL, RC, LMAP, (), one), estimate(MODEL, RC, LMAP, (), all_)
    assert e1 is not None and e4 is not None and (e1.n_threads, e4.n_threads) == (1, 4)
    d = e1.devices[0]
    assert d.bandwidth == Rate(6e9, "p, 1 thread")
    assert e1.generation_tps == pytest.approx(
        (
            0.5 * 6e9 / (d.weight_bytes + d.kv_bytes_full),
            0.5 * 6e9 / (d.weight_bytes + d.kv_bytes_empty),
        ),
        rel=1e-12,
    )
    assert e4.generation_tps[1] / e1.generation_tps[1] == pytest.approx(14 / 6, rel=1e-12)


@pytest.mark.parametrize(
    "passthrough, env, expected",
    [
        ((), {}, None),
        (("-t", "3"), {}, 3),
        (("--threads", "2", "-t", "5"), {}, 5),  # the last flag wins
        (("-t", "3"), {"LLAMA_ARG_THREADS": "7"}, 3),  # a flag beats the environment
        ((), {"LLAMA_ARG_THREADS": "7"}, 7),
        (("-t", "0"), {}, 16),  # <= 0: hardware_concurrency (common/arg.cpp)
        (("-t", "-1"), {}, 16),
        (("-t", "many"), {}, None),  # llama-server refuses it
        (("-c", "4096"), {}, None),
    ],
)
def test_threads_given(
    passthrough: tuple[str, ...], env: dict[str, str], expected: int | None
) -> None:
    from llamafit.commands.speed_inputs import threads_given

    assert threads_given(passthrough, env, 16) == expected


@pytest.mark.parametrize(
    "siblings, expected",
    [
        (["0-1", "0-1", "2-3", "2-3"], 2),  # two cores with two hyper-threads each
        (["0", "1"], 2),
        (["00000001", "00000002", "00000004"], 3),
    ],
)
def test_llama_threads_counts_physical_cores(
    tmp_path: Path, siblings: list[str], expected: int
) -> None:
    from llamafit.machine.host_probe import llama_threads

    for n, text in enumerate(siblings):
        (tmp_path / f"cpu{n}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{n}" / "topology" / "thread_siblings").write_text(text + "\n")
    assert llama_threads(str(tmp_path)) == expected


def test_cpu_kernels_bound_a_token_and_a_prompt_per_weight_type() -> None:
    """With llama.cpp's kernel rates, each weight type's FLOPs go at its own rate x the threads, and
    the weights' streaming time overlaps them (the longer counts); attention goes at the flash
    attention kernel's rate x the threads x its share, overlapping the cache's reads (the longer
    counts); a prompt leaves out the output matrix (logits for its last token only); a type without
    a rate falls back to the BLAS rate x the efficiency."""
    facts = MODEL.facts
    types = {t.name: t.ggml_type for t in facts.tensors}
    flops: dict[int, int] = {}
    for t in facts.tensors:
        if t.name != "token_embd.weight":  # a row lookup; the fixture's output is its own matrix
            flops[t.ggml_type] = flops.get(t.ggml_type, 0) + 2 * t.n_elements
    out = 2 * next(t.n_elements for t in facts.tensors if t.name == "output.weight")
    # F32 norms, F16 and Q8_0 matrices
    assert set(flops) == {0, 1, 8} and types["output.weight"] == 8
    kernels = tuple(KernelRate(k, 1e6 * (k + 1), 2e6 * (k + 1)) for k in flops if k != 0)
    eff = {
        "cpu": Efficiency(
            1.0,
            0.5,
            "test",
            decode=0.25,
            attention=1.0,
            attention_kernel=0.5,
            prompt_attention_kernel=0.25,
        )
    }
    inputs = SpeedInputs(
        (),
        (),
        Rate(1e15, "p"),
        Rate(8e6, "p"),
        efficiency=eff,
        n_threads=2,
        host_flops_threads=2,
        cpu_kernels=kernels,
        cpu_attention=AttentionRate(3e6, 5e6),
    )
    est = estimate(MODEL, RC, LMAP, (), inputs)
    assert est is not None and est.devices[0].bound == "compute"
    rate = {k: 1e6 * (k + 1) * 2 for k in flops}  # two threads
    # F32 norms: no kernel rate
    matmul = sum(n / (rate[k] if k else 8e6 * 0.25) for k, n in flops.items())
    attn_cell = sum(
        2 * facts.n_head[il] * (facts.n_embd_head_k + facts.n_embd_head_v)
        for il in range(facts.n_layer)
    )
    fa_rate, fa_prompt = 3e6 * 2, 5e6 * 2  # the flash attention kernel x two threads
    d = est.devices[0]
    # each op: its reads overlap its arithmetic
    weights, kv = (
        d.weight_bytes / 1e15,
        d.kv_bytes_empty / 1e15,
    )
    expected = max(weights, matmul) + max(kv, attn_cell / (fa_rate * 0.5))
    assert 1 / est.generation_tps[1] == pytest.approx(expected, rel=1e-12)
    prompt_flops = dict(flops)
    prompt_flops[types["output.weight"]] -= out
    # prompt: 2x decode's rate
    pp = sum(n / (rate[k] * 2 if k else 8e6 * 0.5) for k, n in prompt_flops.items())
    assert 1 / est.prompt_tps == pytest.approx(pp + attn_cell * 256 / (fa_prompt * 0.25), rel=1e-12)
    assert (
        est.prompt_source
        == "llama.cpp's matrix kernels per weight type, measured here x 2 threads (test)"
    )


@pytest.mark.parametrize("threads, q8_rate", [(1, 4e9), (2, 6e9), (3, 7e9), (8, 8e9)])
def test_streamed_weights_go_at_the_kernels_streaming_rate(threads: int, q8_rate: float) -> None:
    """A weight type whose kernel the probe measured streaming from memory is charged its bytes at
    that rate at n_threads (linear between measured counts, saturated past the last) x
    Efficiency.stream, neither the bandwidth nor the arithmetic: those hold for the types without
    a streaming figure (here F16 and the F32 norms), the longer of the two. Attention likewise
    at the flash attention kernel's rate over a cache in memory, not its in-cache one."""
    facts = MODEL.facts
    by_type: dict[int, int] = {}
    flops: dict[int, int] = {}
    for t in facts.tensors:
        if t.name != "token_embd.weight":
            by_type[t.ggml_type] = by_type.get(t.ggml_type, 0) + t.n_bytes
            flops[t.ggml_type] = flops.get(t.ggml_type, 0) + 2 * t.n_elements
    assert set(by_type) == {0, 1, 8}
    kernels = (
        KernelRate(1, 1e12, 1e12),
        KernelRate(8, 1e12, 1e12, ((1, 4e9), (2, 6e9), (4, 8e9))),  # Q8_0 streamed
    )
    eff = {"cpu": Efficiency(0.5, 1.0, "test", decode=1.0, attention=1.0, stream=0.8)}
    inputs = SpeedInputs(
        (),
        (),
        Rate(1e9, "p"),
        Rate(1e12, "p"),
        efficiency=eff,
        n_threads=threads,
        host_flops_threads=threads,
        cpu_kernels=kernels,
        # flash attention over a deep cache: 1 MFLOP/s a thread from memory (3e12 in the caches,
        # which a token at depth does not see)
        cpu_attention=AttentionRate(3e12, 3e12, ((1, 1e6), (2, 2e6), (4, 4e6))),
    )
    est = estimate(MODEL, RC, LMAP, (), inputs)
    assert est is not None
    d = est.devices[0]
    rest = (by_type[0] + by_type[1]) / (1e9 * 0.5)
    matmul = flops[1] / (1e12 * threads) + flops[0] / (1e12 * 1.0)
    attn_cell = sum(
        2 * facts.n_head[il] * (facts.n_embd_head_k + facts.n_embd_head_v)
        for il in range(facts.n_layer)
    )
    fa = {1: 1e6, 2: 2e6, 3: 3e6, 8: 4e6}[threads] * 0.8  # x Efficiency.stream
    reads = d.kv_bytes_empty / (1e9 * 0.5)
    assert RC.flash_attn and d.attention_rate == pytest.approx(fa)
    expected = by_type[8] / (q8_rate * 0.8) + max(rest, matmul) + max(reads, attn_cell / fa)
    assert d.seconds[0] == pytest.approx(expected, rel=1e-9)
    assert (d.streamed_bytes, d.streamed_rate) == (by_type[8], pytest.approx(q8_rate * 0.8))
    if threads != 2:
        return
    from llamafit.report.plan import speed_lines

    mib = (d.weight_bytes + d.kv_bytes_empty) / 2**20, (d.weight_bytes + d.kv_bytes_full) / 2**20
    assert speed_lines(est)[-2:] == [
        f"           CPU: {mib[0]:,.0f}-{mib[1]:,.0f} MiB/token; weights through llama.cpp's kernels at "
        "4.8 GB/s",
        "             (kernel probe, 2 threads), the rest 1.0 GB/s x 0.50 (p)",
    ]


def test_calibration_scales_the_streaming_share_and_keeps_the_kernel_shares() -> None:
    base = replace(
        cpu(1e9, 1e9, decode=0.5, attention=0.1),
        efficiency={
            "cpu": Efficiency(
                0.5,
                1.0,
                "test",
                decode=0.5,
                attention=0.1,
                attention_kernel=0.6,
                prompt_attention_kernel=0.4,
            )
        },
    )
    eff = calibrate(base, [record()], machine="m", architecture="llama").efficiency_for("cpu")
    assert (eff.stream, eff.attention_kernel, eff.prompt_attention_kernel) == pytest.approx(
        (0.5, 0.3, 0.4)
    )


@pytest.mark.slow  # runs llama.cpp's kernels on this machine
def test_kernel_probe_measures_every_type_with_llama_cpp() -> None:
    """The real ggml kernels (llama-cpp-python's libraries), in a child process: every listed type
    multiplies, and flash attention runs, at some rate."""
    from llamafit.machine.host_probe import measure_kernels, thread_counts
    from llamafit.machine.kernel_probe import ATTENTION, STREAMS, TYPES

    rates = measure_kernels()
    streams = rates.pop(STREAMS)
    assert sorted(rates) == sorted([*TYPES, ATTENTION])
    assert all(len(r) == 2 and r[0] > 0 and r[1] > 0 for r in rates.values())
    # every type, and flash attention over a deep cache, streamed from memory at 1, 2, 4, …
    # threads
    counts = thread_counts(os.cpu_count() or 1)
    assert sorted(streams) == sorted([*TYPES, ATTENTION])
    assert all([n for n, _ in c] == counts and all(v > 0 for _, v in c) for c in streams.values())


_T0 = [
    "0.12.582.979 I slot print_timing: id  0 | task 0 | prompt eval time =     859.18 ms /     5 "
    "tokens (  171.84 ms per token,     5.82 tokens per second)",
    "0.12.582.993 I slot print_timing: id  0 | task 0 |        eval time =    6396.08 ms /    24 "
    "tokens (  278.09 ms per token,     3.60 tokens per second)",
    "0.12.582.994 I slot print_timing: id  0 | task 0 |       total time =    7255.26 ms /    "
    "29 tokens",
    "0.12.583.054 I slot      release: id  0 | task 0 | stop processing: n_tokens = 28, "
    "truncated = 0",
]
_T26 = [x.replace("task 0 |", "task 26 |") for x in _T0]


@pytest.mark.parametrize(
    "lines, served",
    [
        (_T0, [(0, 5, 859.18, 24, 6396.08, 28)]),
        (_T0[:3], []),  # not released yet
        ([_T0[3], *_T0[:2]], [(0, 5, 859.18, 24, 6396.08, 28)]),  # any order
        (
            [_T0[0], *_T26, *_T0[1:]],
            [(26, 5, 859.18, 24, 6396.08, 28), (0, 5, 859.18, 24, 6396.08, 28)],
        ),  # interleaved
        ([x.replace("6396.08", "x") for x in _T0], []),  # not llama-server's format: nothing
        (
            [
                '{"type": "log", "level": "info", "msg": "slot print_timing: id  0 | task 0 | '
                "prompt eval time = 1.00 ms / "
                '2 tokens"}'
            ],
            [],
        ),
    ],
)
def test_the_log_watcher_collects_each_finished_requests_timings(
    lines: list[str], served: list[tuple]
) -> None:  # type: ignore[type-arg]
    from llamafit.server.log import LogWatcher, ServedRequest

    w = LogWatcher()
    for line in lines:
        w.feed(line)
    assert w.served == tuple(ServedRequest(*s) for s in served)


def test_the_log_watcher_forgets_requests_that_never_finish() -> None:
    from llamafit.server.log import MAX_PENDING, LogWatcher

    w = LogWatcher()
    for task in range(MAX_PENDING + 10):
        w.feed(_T0[0].replace("task 0 |", f"task {task} |"))
    assert list(w._timing) == list(range(10, MAX_PENDING + 10))  # the oldest ten forgotten


@pytest.mark.parametrize(
    "requests, expected",
    [
        ([], None),
        ([(0, 5, 100.0, 4, 100.0, 9)], None),  # too few generated tokens to time
        (
            [(0, 5, 100.0, 24, 2000.0, 28)],
            {
                "generation_tps": 12.0,
                "prompt_tps": None,
                "fill": 16,
                "requests": 1,
                "generated_tokens": 24,
            },
        ),
        (
            [(0, 100, 500.0, 10, 1000.0, 110), (1, 300, 500.0, 30, 1000.0, 400)],
            {
                "generation_tps": 20.0,
                "prompt_tps": 400.0,
                "fill": (105 * 10 + 385 * 30) // 40,
                "requests": 2,
                "generated_tokens": 40,
            },
        ),
    ],
)
def test_served_speed_sums_tokens_over_time(requests: list[tuple], expected: dict | None) -> None:  # type: ignore[type-arg]
    from llamafit.commands.run_verify import served_speed
    from llamafit.server.log import ServedRequest

    assert served_speed([ServedRequest(*r) for r in requests]) == expected


@pytest.mark.parametrize(
    "attention, expected_rate",
    [
        (
            AttentionRate(3e6, 5e6),
            3e6 * 2 * 0.5,
        ),  # the flash attention kernel x 2 threads x attention_kernel
        (
            None,
            8e6 * 0.25,
        ),  # no flash attention figure (a probe of an older ggml): the BLAS rate x `attention`
    ],
)
def test_cpu_attention_rate_and_its_fallback(
    attention: AttentionRate | None, expected_rate: float
) -> None:
    eff = {
        "cpu": Efficiency(
            1.0,
            0.5,
            "test",
            decode=0.25,
            attention=0.25,
            attention_kernel=0.5,
            prompt_attention_kernel=0.25,
        )
    }
    inputs = SpeedInputs(
        (),
        (),
        Rate(1e15, "p"),
        Rate(8e6, "p"),
        efficiency=eff,
        n_threads=2,
        host_flops_threads=2,
        cpu_kernels=(KernelRate(1, 1e6, 2e6),),
        cpu_attention=attention,
    )
    est = estimate(MODEL, RC, LMAP, (), inputs)
    assert est is not None and est.devices[0].attention_rate == expected_rate
