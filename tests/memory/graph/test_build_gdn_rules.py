"""The rules by which the graphs of the gated DeltaNet archs (qwen35, qwen35moe, qwen3next:
src/models/qwen35*.cpp, qwen3next.cpp, delta-net-base.cpp), Gemma 3n, DeepSeek-2 and MiniCPM3
changed between llama-cpp-python 0.3.17 (b8470) and b11311, whose real graphs test_build_older.py
checks: each rule on both sides of its build, as the change of the prompt graph's ops (or of
the shapes a rule changes alone) on the real-shape stand-ins."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from llamafit.builds import build_of
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.template import build_graph
from tests.support.graph_build import cases, configs, facts_of

CASES = cases()


def _pp(name: str, build: int) -> Graph:
    facts, hp = facts_of(CASES[name].model)
    return build_graph(facts, replace(configs(CASES[name], facts)[0], build=build), hp)


def _ops(g: Graph) -> Counter[str]:
    return Counter(g.tensors[i].op for i in g.nodes)


def _delta(name: str, rule: str) -> dict[str, int]:
    """The nodes per op that the rule's build adds (negative: removes) to the build before."""
    first = build_of(rule)
    before, after = _ops(_pp(name, first - 1)), _ops(_pp(name, first))
    return {op: after[op] - before[op] for op in sorted(before | after) if after[op] != before[op]}


# qwen35moe: 40 layers, 30 of them gated DeltaNet (full_attention_interval 4); qwen3next: 48
# layers, 12 of them full attention
DELTAS: tuple[tuple[str, str, dict[str, int]], ...] = (
    # build_delta_net_fused: the state reshaped to 3-D, one RESHAPE per DeltaNet layer
    ("qwen35moe-c4096-ub128", "gdn_state_3d", {"RESHAPE": 30}),
    # ggml_gated_delta_net(..., s, K): the 4-D state again
    ("qwen35moe-c4096-ub128", "gdn_state_4d", {"RESHAPE": -30}),
    # the output rows picked once, after the output norm (two GET_ROWS in the last layer before)
    ("qwen35moe-c4096-ub128", "qwen35_h_nextn", {"GET_ROWS": -1}),
    ("qwen35-27b-c4096-ub128", "qwen35_h_nextn", {"GET_ROWS": -1}),
    # and for qwen3next its attention gate's RESHAPE after the sigmoid goes
    ("qwen3next-c4096-ub128", "qwen3next_h_nextn", {"GET_ROWS": -1, "RESHAPE": -12}),
    # alpha viewed by ggml_reshape_3d instead of copied by ggml_cont_3d
    ("qwen35moe-c4096-ub128", "qwen35_alpha_reshape", {"CONT": -30, "RESHAPE": 30}),
    ("qwen35-27b-c4096-ub128", "qwen35_alpha_reshape", {"CONT": -48, "RESHAPE": 48}),
    # build_gdn_l2_norm: q and k RMS-normed and scaled instead of ggml_l2_norm
    ("qwen35moe-c4096-ub128", "qkv_heads", {"L2_NORM": -60, "RMS_NORM": 60, "SCALE": 60}),
    ("qwen3next-c4096-ub128", "qkv_heads", {"L2_NORM": -72, "RMS_NORM": 72, "SCALE": 72}),
    # DeepSeek-2 (3 layers): q reshaped to heads before its q_nope / q_pe views
    ("fx-deepseek2", "deepseek2_q_reshape", {"RESHAPE": 3}),
    # MiniCPM3 (62 layers): the whole q reshaped and roped from an offset, no q_nope / q_pe views
    # and no concat of them
    ("minicpm3-4b-c4096-ub128", "rope_set_offset", {"CONCAT": -62, "RESHAPE": 62, "VIEW": -124}),
    # shapes and order only
    ("qwen35moe-c4096-ub128", "rs_state_2d", {}),
    ("qwen3next-c4096-ub128", "qwen3next_repeat_4d", {}),
    ("gemma3n-e2b-c4096", "gemma3n_ple_expand", {}),
)


@pytest.mark.parametrize(("name", "rule", "delta"), DELTAS)
def test_rule_changes_the_graph_at_its_build(name: str, rule: str, delta: dict[str, int]) -> None:
    assert _delta(name, rule) == delta


def test_recurrent_state_tensors_are_2d_from_rs_2d() -> None:
    """llama_memory_recurrent's cache_r_l* / cache_s_l* (one of each per DeltaNet layer, two
    sequences): 1-D before rule rs_state_2d, {n_embd_r or n_embd_s, 2} from it."""
    first = build_of("rs_state_2d")
    for build, rows in ((first - 1, 1), (first, 2)):
        g = _pp("qwen3next-c4096-fa-off-np2", build)
        ts = g.tensors
        caches = [ts[i] for i in g.leafs if ts[i].name.startswith(("cache_r_l", "cache_s_l"))]
        assert len(caches) == 72
        assert {t.ne[1:] for t in caches} == {(rows, 1, 1)}


def test_qwen3next_repeats_heads_over_3d_before_its_rule() -> None:
    """qwen3next_repeat_4d: q and k repeated as {head_k, rf, n_k x tokens, 1} before, as
    {head_k, rf, n_k, tokens} from it (128-wide heads, 16 K heads, 32 V heads)."""
    name = "qwen3next-c4096-ub128"
    facts, _ = facts_of(CASES[name].model)
    n = configs(CASES[name], facts)[0].n_tokens
    first = build_of("qwen3next_repeat_4d")
    for build, shape in ((first - 1, (128, 2, 16 * n, 1)), (first, (128, 2, 16, n))):
        g = _pp(name, build)
        repeats = {g.tensors[i].ne for i in g.nodes if g.tensors[i].op == "REPEAT"}
        assert repeats == {shape}


def test_gemma3n_per_layer_rows_come_first_from_their_rule() -> None:
    """gemma3n_ple_expand: the per-layer token rows (GET_ROWS, RESHAPE, SCALE:
    inp_per_layer_selected) right after the token embeddings; before, after the AltUp streams
    (inp_stacked), where layer 0 first reads them."""
    first = build_of("gemma3n_ple_expand")
    for build, before_stacked in ((first - 1, False), (first, True)):
        g = _pp("gemma3n-e2b-c4096", build)
        names = [g.tensors[i].name for i in g.nodes]
        selected, stacked = names.index("inp_per_layer_selected"), names.index("inp_stacked")
        assert (selected < stacked) == before_stacked
        assert (selected == 3) == before_stacked  # embd, the rows' GET_ROWS and RESHAPE, SCALE


def test_fused_prompt_path_has_the_node_count_of_a_public_log() -> None:
    """Rule gdn_chunked_fused's form is the one public llama.cpp ran between b8333 and b8500: a
    llama-server log of Qwen3.5-35B-A3B (lota09/local_LLM_llama llama_server.log: ebbf544,
    'fused Gated Delta Net (chunked) enabled', no attn_rot_k lines) prints 'graph nodes = 3729'
    for -c 6912 -ub 512 with -np auto (4 slots, a unified cache), flash attention on (before
    rule qwen35_alpha_reshape a CONT of alpha stands for its RESHAPE: the same count). The
    b8299..b8332 form (the state transposed in the graph) has more nodes, as has b8233's
    build_delta_net_chunking (a Qwen3-Next log there: 12069)."""
    facts, hp = facts_of("qwen3.5-35b-a3b")
    config = GraphConfig(
        n_tokens=512, n_seqs=4, n_outputs=4, kv_size=6912, n_seq_max=4, kv_unified=True
    )
    builds = (8333, 8390, 8470)
    counts = {b: len(build_graph(facts, replace(config, build=b), hp).nodes) for b in builds}
    assert counts == {8333: 3729, 8390: 3729, 8470: 3729}
