"""The Python API used the way a notebook user would: plan for a header, print the breakdown."""

from __future__ import annotations

import subprocess
import sys

import llamafit as lf
from tests.support import QWEN


def test_plan_for_a_header_and_print_the_breakdown() -> None:
    facts = lf.build_facts(lf.read_model(QWEN))
    target = lf.make_target(facts, "24GiB", host_bytes=64 << 30)
    result = lf.plan(target, lf.LaunchConfig(), lf.Policy())
    assert result.choice is not None
    assert (
        lf.breakdown_text(result.choice.breakdown)
        == """\
(MiB)      usable weights      KV     RS compute  output reserve    used    left
CUDA0      24,576  18,508   4,352      0     234       0   1,024  24,118     458
CPU        65,536     418       0      0      72       2       0     492  65,044"""
    )
    assert lf.verdict_text(result.verdict) == (
        "fits 32,768 tokens per slot with all layers on the GPU, q8_0/q8_0 KV (a negligible "
        "quality loss), flash attention on — the trained maximum"
    )
    assert lf.server_argv(facts.path, result.choice.cfg, result.choice.rc)[3:] == [
        "-c",
        "32768",
        "-ngl",
        "65",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-b",
        "2048",
        "-ub",
        "512",
        "--fit",
        "off",
    ]


def test_solve_check_a_config_and_catch_no_fit() -> None:
    facts = lf.build_facts(lf.read_model(QWEN))
    target = lf.make_target(facts, "12GiB")
    choice = lf.solve(target, lf.LaunchConfig(), lf.Policy(kv="q4_0", ctx=4096))
    # op offload: room for one host weight
    assert (choice.ctx, choice.rc.n_gpu_layers) == (
        4096,
        37,
    )
    # and no more
    assert not target.fits(lf.with_given(choice.cfg, n_gpu_layers=choice.rc.n_gpu_layers + 1))
    rc = lf.resolve(choice.cfg, facts)
    assert lf.MemoryModel(facts).estimate(rc, target.gpus, target.host).fits
    try:
        lf.solve(
            lf.make_target(facts, "2GiB"),
            lf.with_given(lf.LaunchConfig(), n_gpu_layers=65),
            lf.Policy(min_ctx=32768),
        )
    except lf.NoFit as e:
        assert (e.min_ctx, e.cause, e.pinned_ngl) == (32768, "pinned_ngl", 65)
    else:
        raise AssertionError("2 GiB cannot hold 65 layers")


def test_all_names_resolve_and_import_llamafit_stays_cheap() -> None:
    assert sorted(dir(lf)) == sorted(lf.__all__)
    assert all(getattr(lf, name) is not None for name in lf.__all__)
    code = "import sys, llamafit; print(sorted(m for m in sys.modules if m.startswith('llamafit')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == "['llamafit']\n"


def test_make_target_reads_gpus_the_way_the_gpu_option_does() -> None:
    """One parser for `--gpu` and the API's GPU string: sizes, catalog names, counts, the same
    errors."""
    from llamafit.machine.hardware import device_specs, parse_gpu_option

    facts = lf.build_facts(lf.read_model(QWEN))
    sized = lf.make_target(facts, "24GiB,12G").gpus
    assert [(g.name, g.kind, g.backend, g.total_bytes, g.free_bytes) for g in sized] == [
        ("CUDA0", "gpu", "cuda", 24 << 30, 24 << 30),
        ("CUDA1", "gpu", "cuda", 12 << 30, 12 << 30),
    ]
    assert [g.name for g in lf.make_target(facts, "8GiB", backend="vulkan").gpus] == ["Vulkan0"]
    assert lf.make_target(facts, "cpu").gpus == ()
    assert lf.make_target(facts, "2xrtx4090").gpus == device_specs(parse_gpu_option("2xrtx4090"))
    for spec, message in [
        ("24", "--gpu 24 has no unit; did you mean 24GiB?"),
        ("24GiB", "unknown backend 'cpu'; expected one of cuda, rocm, vulkan, metal"),
    ]:
        try:
            lf.make_target(facts, spec, backend="cpu" if spec == "24GiB" else "cuda")
        except lf.LlamafitError as e:
            assert str(e) == message
        else:
            raise AssertionError(spec)
