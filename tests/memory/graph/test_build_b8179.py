"""The graph builder against the real graphs of llama.cpp b8179, before the fused gated
DeltaNet op was in the graph (rule gdn_chunking): fixtures/graphs/b8179-<case>, recorded with
scripts/graph_dump/record_libllama.py --build 8179 from a libllama built of the llama.cpp tree
that node-llama-cpp 3.17.1 ships (llama/gitRelease.bundle, release b8179, whole and unchanged:
no file swapped in), driven by llama-cpp-python 0.3.17's bindings (llama.h's structs are the
same; the functions b8179 lacks left unbound). Checked as test_build_older checks 0.3.17's:
node for node but for the names, the leafs as a set, the CPU compute buffer to the byte.
"""

from __future__ import annotations

import pytest

from llamafit.builds import build_of
from llamafit.memory.graph.models import MODELS
from llamafit.memory.graph.replay import covers_model
from tests.memory.graph.test_build_older import CASES, _recorded, _same_graphs
from tests.support.graph_build import facts_of

B8179 = 8179
RECORDED = _recorded(B8179)


def test_qwen3next_cases_are_recorded() -> None:
    assert RECORDED == ["qwen3next-c4096-fa-off-np2", "qwen3next-c4096-ub128"]


@pytest.mark.parametrize("name", RECORDED)
def test_b8179_graph_is_the_real_one(name: str) -> None:
    _same_graphs(name, B8179)


def test_qwen3next_is_covered_up_to_b8233_and_from_b8333() -> None:
    """Rule gdn_chunking (b8179, the tree read) to gdn_fused_op (after b8233, whose log shows
    the unfused prompt graph) and from gdn_chunked_fused (b8333) on; not between (the fused op
    on a transposed state, not ported), nor before b8179 (not read)."""
    facts, _ = facts_of(CASES["qwen3next-c4096-ub128"].model)
    model = MODELS["qwen3next"]
    assert (model.since, model.gap) == ("gdn_chunking", ("gdn_fused_op", "gdn_chunked_fused"))
    assert [build_of(r) for r in ("gdn_chunking", "gdn_fused_op", "gdn_chunked_fused")] == [
        8179,
        8234,
        8333,
    ]
    builds = (8178, 8179, 8233, 8234, 8298, 8299, 8332, 8333, 8470)
    covered = [covers_model(facts, b) for b in builds]
    assert covered == [False, True, True, False, False, False, False, True, True]
