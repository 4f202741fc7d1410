"""Gemma 4 from its first build (rule gemma4_arch) to b10182, against the real graphs of the
prebuilt CPU libllama of llama-cpp-py-sync 0.8683, 0.8739, 0.9445 and 0.9554 (those llama.cpp
builds, recorded with scripts/graph_dump/record_libllama.py through glibc_compat.py), on the
shapes of the two Gemma 4 rows of fixtures/calibration/gpu-corpus-2026.jsonl: node for node but
for the names, the leafs as a set, the CPU compute buffer to the byte
(test_build_older._same_graphs). b8683 is before rules attn_rot_per_cache and gemma4_ple_expand,
b8739 after; b9445 and b9554 lie on the two sides of gemma4_out_rows_norm (b9553). Then each
rule on both sides of its build, the builds the replay covers, and the two Metal rows of the
corpus, exact to the MiB their logs print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from llamafit.memory.graph.alloc import Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.backends.metal import metal_graph_ok
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.replay import covers_model
from llamafit.memory.graph.template import build_graph
from tests.memory.graph.test_build_older import (
    _configs,
    _cpu_bytes,
    _events,
    _same_graphs,
    _shape,
)
from tests.support import FIXTURES
from tests.support.graph_build import cases, configs, facts_of
from tests.support.scripts import script

CASES = cases()
E4B, E2B = "gemma4-e4b-c65536-np1", "gemma4-e2b-c32768-ub1024-q8kv"


@pytest.mark.parametrize("build", [8683, 8739])
@pytest.mark.parametrize("name", [E4B, E2B])
def test_graph_is_the_real_one(name: str, build: int) -> None:
    _same_graphs(name, build)


@pytest.mark.parametrize("build", [8683, 8739])
def test_gemma3n_graph_is_the_real_one(build: int) -> None:
    """Gemma 3n's per-layer rows change at the same build (rule gemma3n_ple_expand)."""
    _same_graphs("gemma3n-e2b-c4096", build)


def test_b9554_graph_is_the_real_one() -> None:
    """llama-cpp-py-sync 0.9554's libllama (b9554, recorded with llama-cpp-python 0.3.28's API,
    the same llama_context_params): the output rows after the output norm."""
    _same_graphs(E4B, 9554)


def test_b9445_graph_is_the_real_one() -> None:
    """llama-cpp-py-sync 0.9445's libllama (b9445, with 0.3.24's API): the output rows still in
    the last layer. Its llama_context_params has no n_outputs_max (rule server_output_limit,
    b9464): the prompt-sized reserve has an output per token."""
    facts, hp = facts_of(CASES[E4B].model)
    gallocr = Gallocr((CPU,))
    for config, event in zip(_configs(E4B, 9445), _events(9445, E4B), strict=True):
        assert config.n_outputs == config.n_tokens
        built = build_graph(facts, config, hp)
        assert _shape(built) == _shape(event.graph)
        assert (("CPU", _cpu_bytes(built, gallocr)),) == event.backends


def _graph(name: str, build: int) -> Graph:
    """The builder's prompt-sized graph of the case at this build."""
    facts, hp = facts_of(CASES[name].model)
    return build_graph(facts, replace(configs(CASES[name], facts)[0], build=build), hp)


def _named(g: Graph, name: str) -> bool:
    return any(g.tensors[i].name == name for i in g.leafs)


def _get_rows(g: Graph) -> int:
    return sum(g.tensors[i].op == "GET_ROWS" for i in g.nodes)


def _first_per_layer_rows(g: Graph) -> int:
    """The position of the per-layer token rows' GET_ROWS among the nodes."""
    ts = g.tensors
    return next(
        k
        for k, i in enumerate(g.nodes)
        if ts[i].op == "GET_ROWS" and ts[ts[i].src[0]].name == "per_layer_token_embd.weight"
    )


RULES: list[tuple[str, str, int, Callable[[Graph], object], object, object]] = [
    # (rule, case, its build, what the graph shows, before, from the build)
    # a quantized cache rotated only where every layer has the same K row: never for Gemma 4
    ("attn_rot_per_cache", E2B, 8739, lambda g: _named(g, "attn_inp_k_rot"), False, True),
    # the per-layer token rows expanded right after the token embeddings (node 0) before the
    # embeddings' scale; before, where layer 0's per-layer input first reads them
    ("gemma4_ple_expand", E4B, 8739, _first_per_layer_rows, 50, 1),
    # the output rows of the attention output, its residual and the per-layer input picked in
    # the last layer (three GET_ROWS beside the two input ones) before; after the output norm
    ("gemma4_out_rows_norm", E4B, 9553, _get_rows, 5, 3),
]


@pytest.mark.parametrize(("rule", "name", "build", "probe", "old", "new"), RULES)
def test_rule_on_both_sides_of_its_build(
    rule: str,
    name: str,
    build: int,
    probe: Callable[[Graph], object],
    old: object,
    new: object,
) -> None:
    assert (probe(_graph(name, build - 1)), probe(_graph(name, build))) == (old, new)


# the builds the replay covers: from gemma4_arch (b8639), not while the logits bias of a file
# with tokenizer.ggml.suppress_tokens may be in the graph (gemma4_logits_bias, b9496, until
# gemma4_no_logits_bias, b10182: the facts do not read that key)
COVERS = [(8638, False), (8639, True), (9495, True), (9496, False), (10181, False), (10182, True)]


@pytest.mark.parametrize(("build", "covered"), COVERS)
def test_covered_builds(build: int, covered: bool) -> None:
    assert covers_model(facts_of(CASES[E4B].model)[0], build) is covered


def test_metal_takes_the_graphs_from_head_512() -> None:
    """Metal's flash attention over the full layers' 512-wide heads (rule metal_fa_512) and a
    Q8_0 cache; GELU, GEGLU and TANH (0.3.17's and 0.3.20's supports_op)."""
    g = _graph(E2B, 8683)
    assert [metal_graph_ok(g, b) for b in (8638, 8639)] == [False, True]


bench = script("bench_public_compute")
CORPUS = FIXTURES / "calibration" / "gpu-corpus-2026.jsonl"
MIB = 1 << 20
METAL = {  # the logged buffers (MiB) of the two rows, MTL0 and CPU, as predicted: bytes
    "repo-acdtrx-gemma4-e4b-q8-c65536-metal-m4": {"MTL0": 542638080, "CPU": 146825216},
    "repo-coin1860-gemma4-e2b-q8kv-ub1024-metal-m4": {"MTL0": 1081081856, "CPU": 153141248},
}


@pytest.mark.parametrize("row_id", sorted(METAL))
def test_metal_rows_of_the_2026_corpus(row_id: str) -> None:
    """b8680's E4B (f16 cache, 64k) and b8700's E2B (-ub 1024, Q8_0 cache) on an M4: both
    buffers from the graph, each the log's MiB to its two decimals."""
    (row,) = [r for r in bench.load_rows(CORPUS) if r["id"] == row_id]
    figs = bench.figures(row)
    assert {f.device: f.predicted for f in figs} == METAL[row_id]
    assert {f.source for f in figs} == {"graph"}
    for f in figs:
        assert abs(f.predicted - f.measured) <= 0.005 * MIB


# the graph nodes the two corpus logs print (sched_reserve: graph nodes), at their builds: b8680
# (E4B, its build_info) and the E2B log's estimated b8700 (attn_rot_k = 0: before
# attn_rot_per_cache)
LOGGED_NODES = [(E4B, 8680, 1867), (E2B, 8700, 1500)]


@pytest.mark.parametrize(("name", "build", "nodes"), LOGGED_NODES)
def test_node_count_is_the_logs(name: str, build: int, nodes: int) -> None:
    assert len(_graph(name, build).nodes) == nodes
