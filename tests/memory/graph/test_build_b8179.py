"""The graph builder against the real graphs of llama.cpp b8179, before the fused gated
DeltaNet op was in the graph (rule gdn_chunking): fixtures/graphs/b8179-<case>, recorded with
scripts/graph_dump/record_libllama.py --build 8179 from a libllama built of the llama.cpp tree
that node-llama-cpp 3.17.1 ships (llama/gitRelease.bundle, release b8179, whole and unchanged:
no file swapped in), driven by llama-cpp-python 0.3.17's bindings (llama.h's structs are the
same; the functions b8179 lacks left unbound). Checked as test_build_older checks 0.3.17's:
node for node but for the names, the leafs as a set, the CPU compute buffer to the byte.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.builds import build_of
from llamafit.memory.graph.models import MODELS
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.replay import covers_model
from llamafit.memory.graph.template import build_graph
from tests.memory.graph.test_build_older import CASES, _recorded, _same_graphs
from tests.support.graph_build import facts_of

B8179 = 8179
RECORDED = _recorded(B8179)


def test_gdn_cases_are_recorded() -> None:
    assert RECORDED == [
        "qwen35-27b-c4096-ub128",
        "qwen35moe-c4096-ub128",
        "qwen3next-c4096-fa-off-np2",
        "qwen3next-c4096-ub128",
        "qwen3next-ssm-in-c4096-np1",
    ]


@pytest.mark.parametrize("name", RECORDED)
def test_b8179_graph_is_the_real_one(name: str) -> None:
    _same_graphs(name, B8179)


@pytest.mark.parametrize("arch", ["qwen3next", "qwen35moe", "qwen35"])
def test_gdn_archs_are_covered_up_to_b8298_and_from_b8333(arch: str) -> None:
    """Rule gdn_chunking (b8179, the tree read) up to gdn_fused_ch (b8299, the fused prompt
    path on a transposed state, not ported) and from gdn_chunked_fused (b8333) on; not before
    b8179 (not read)."""
    name = {"qwen3next": "qwen3next-c4096-ub128", "qwen35moe": "qwen35moe-c4096-ub128"}
    facts, _ = facts_of(CASES[name.get(arch, "qwen35-27b-c4096-ub128")].model)
    assert facts.architecture == arch
    model = MODELS[arch]
    assert (model.since, model.gap) == ("gdn_chunking", ("gdn_fused_ch", "gdn_chunked_fused"))
    rules = ("gdn_chunking", "gdn_fused_ar", "gdn_fused_ch", "gdn_chunked_fused")
    assert [build_of(r) for r in rules] == [8179, 8233, 8299, 8333]
    builds = (8178, 8179, 8233, 8298, 8299, 8332, 8333, 8470)
    covered = [covers_model(facts, b) for b in builds]
    assert covered == [False, True, True, True, False, False, True, True]


def _counts(build: int) -> tuple[int, int]:
    """The prompt and one-token graphs' node counts of b8233's public Qwen3-Next log config
    (bushman77/Symbrella llama-server.log: -c 40960, -ub 512, one slot, flash attention on) on
    its GGUF's shape (qwen3-coder-next: the legacy ssm_in projection, 807 tensors)."""
    facts, hp = facts_of("qwen3-coder-next")
    assert len(facts.tensors) == 807
    config = GraphConfig(n_tokens=512, n_seqs=1, n_outputs=512, kv_size=40960, build=build)
    pp = build_graph(facts, config, hp)
    tg = build_graph(facts, replace(config, n_tokens=1, n_outputs=1), hp)
    return len(pp.nodes), len(tg.nodes)


def test_b8233_node_counts_are_the_public_logs() -> None:
    """b8233 logs 'graph nodes = 12069 (with bs=512), 5337 (with bs=1)': build_delta_net_chunking
    for the prompt and the fused GATED_DELTA_NET for one token (rule gdn_fused_ar); b8179's
    one-token graph (build_delta_net_autoregressive) has 20 nodes more in each DeltaNet layer."""
    assert _counts(8233) == (12069, 5337)
    assert _counts(8179) == (12069, 5337 + 20 * 36)
