"""The graph builder against the real graphs of llama-cpp-python 0.3.35 (llama.cpp b10454),
recorded through its libllama with llama-server's context for each case of
scripts/graph_dump/record_build.py (scripts/graph_dump/record_libllama.py --build 10454):
fixtures/graphs/b10454-<case>. A build between the rules of the recurrent and hybrid archs
(builds.py): after rs_state_2d, moe_sum_expanded, gemma4_no_logits_bias and
nemotron_h_rows_last, before ssm_state_slots, conv_state_slots and mamba2_proj_2d; for the gated
DeltaNet archs (qwen35, qwen35moe, qwen3next) and Gemma 3n after rs_state_2d, qwen3next_repeat_4d,
gemma3n_ple_expand, qwen35_h_nextn, gdn_state_4d and qwen3next_h_nextn, before qkv_heads;
DeepSeek-2 before deepseek2_q_reshape (fx-deepseek2 recorded with --no-extra-bufts). Node for
node but for the names (its graphs leave rs_s_copy, inp_pos and the K/V row indexes unnamed),
the leafs as a set and the CPU compute buffer to the byte, as test_build_older.py checks 0.3.17's.
"""

from __future__ import annotations

import pytest

from llamafit.memory.graph.replay import covers_model
from tests.memory.graph.test_build_older import CASES, _recorded, _same_graphs
from tests.support.graph_build import facts_of

BUILD = 10454


def _covered(name: str) -> bool:
    return covers_model(facts_of(CASES[name].model)[0], BUILD)


RECORDED = [n for n in _recorded(BUILD) if _covered(n)]


@pytest.mark.parametrize("name", RECORDED)
def test_b10454_graph_is_the_real_one(name: str) -> None:
    _same_graphs(name, BUILD)


def test_the_older_forms_are_checked_at_b10454() -> None:
    """Every b10454 recording is of an arch the replay covers at that build, and these archs
    have one."""
    archs = {facts_of(CASES[n].model)[0].architecture for n in RECORDED}
    assert len(RECORDED) == len(_recorded(BUILD))
    assert {
        "mamba2",
        "granitehybrid",
        "nemotron_h",
        "nemotron_h_moe",
        "falcon-h1",
        "lfm2",
        "lfm2moe",
        "gemma4",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "gemma3n",
        "deepseek2",
        "hunyuan_vl",
    } <= archs
