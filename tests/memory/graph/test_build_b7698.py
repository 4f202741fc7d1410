"""The graph builder before rule inp_embd_both (PR #18898) against the real graphs of llama.cpp
b7698: fixtures/graphs/b7698-<case>, recorded (scripts/graph_dump/record_libllama.py) through the
prebuilt CPU libllama of the npm package @node-llama-cpp/linux-x64 3.15.0, whose build metadata
and bundled source (node-llama-cpp 3.15.0's gitRelease.bundle) name release b7698. Recorded with
`--build 7698 --py <0.3.17's package> --lib <that folder>`, libllama.so and libggml.so linked to
its libllama.b7698.so and libggml.b7698.so, and two local changes to a copy of 0.3.17's bindings:
a symbol b7698 lacks is left unbound (_ctypes_extensions), and the folder's CPU backend is loaded
(ggml_backend_load_all_from_path: a GGML_BACKEND_DL build). Their llama_context_params and
llama_model_params are b7698's field for field.

At b7698 build_inp_embd (src/llama-graph.cpp) holds only the input of its batch: the token ids
for a reserve's text ubatch, their rows unpadded (Qwen3-VL adds no deepstack slice to a text
batch's graph), named "inp_embd" and expanded at once (PR #18599, rule inp_embd_expand, the
replay's OLD_SINCE). Node for node but for the names, the leafs as a set, and the CPU compute
buffer to the byte. Before PR #18550 (b7774) ggml had no compute flag, every node was computed, as
every node of these one-input graphs is: the builder's flag (its backends' fusion checks read it)
is left out of the comparison. The reserves run pp, then tg, into one ggml_gallocr, which only
grows (ggml_gallocr_reserve_n), so the tg reserve's buffer is the larger of the two.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.builds import build_of, since
from llamafit.memory.graph.alloc import Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.loader import tensor_map
from llamafit.memory.graph.models import MODELS, OLD_SINCE
from llamafit.memory.graph.nodes import FLAG_COMPUTE
from llamafit.memory.graph.replay import covers_model
from llamafit.memory.graph.template import build_graph
from tests.memory.graph.test_build_older import CASES, _configs, _cpu_bytes, _events, _recorded
from tests.memory.graph.test_build_older import _shape as shape
from tests.support.graph_build import facts_of

B7698 = 7698
RECORDED = _recorded(B7698)


@pytest.mark.parametrize("name", RECORDED)
def test_b7698_graph_is_the_real_one(name: str) -> None:
    facts, hp = facts_of(CASES[name].model)
    gallocr = Gallocr((CPU,))
    top = 0
    for config, event in zip(_configs(name, B7698), _events(B7698, name), strict=True):
        built = build_graph(facts, config, hp)
        nodes, leafs = shape(built)
        real_nodes, real_leafs = shape(event.graph)
        # (op, desc, type, ne, nb, view_offs, flags, srcs, view_src): the flags less the compute one
        nodes = [n[:6] + (int(n[6]) & ~FLAG_COMPUTE,) + n[7:] for n in nodes]  # type: ignore[call-overload]
        assert len(nodes) == len(real_nodes)
        assert [k for k, (a, b) in enumerate(zip(nodes, real_nodes, strict=True)) if a != b] == []
        assert leafs == real_leafs
        top = max(top, _cpu_bytes(built, gallocr))
        assert (("CPU", top),) == event.backends


def test_the_recorded_archs() -> None:
    """The b7698 graphs cover the families the rule touches: a plain decoder, MoE, iSWA with the
    token scale, a scaled-embedding hybrid, Qwen3-VL's deepstack and Gemma 3n."""
    archs = {facts_of(CASES[n].model)[0].architecture for n in RECORDED}
    assert {"llama", "qwen3", "qwen3moe", "gpt-oss", "gemma3", "granitehybrid", "qwen3vl"} <= archs
    assert {"gemma3n"} <= archs


def test_old_since_is_b7698_and_the_rule_after_b7774() -> None:
    """inp_embd_both (PR #18898) is taken at the earliest build after b7774 (the merge of PR
    #18550, on which it builds; a public b7772 log allocates one input), the replay's older
    graphs start at inp_embd_expand's b7698 (the first release seen with PR #18599)."""
    assert (build_of("inp_embd_both"), build_of(OLD_SINCE)) == (7775, B7698)
    assert [since("inp_embd_both", b) for b in (7772, 7774, 7775)] == [False, False, True]
    old = [a for a, m in MODELS.items() if m.since == OLD_SINCE]
    facts, _ = facts_of(CASES["qwen3-8b-c4096"].model)
    assert "qwen3" in old
    assert [covers_model(facts, b) for b in (B7698 - 1, B7698, 7772)] == [False, True, True]


def test_expert_weights_scaled_by_the_arch_flag_before_pr_20235() -> None:
    """Rule moe_scale_w_dropped: before it glm4-moe.cpp's scale_w (true) alone made the
    ffn_moe_weights_scaled SCALE, at expert_weights_scale 1.0 too (the b7698 graph above); from
    it build_moe_ffn skips a scale of 0 or 1. One SCALE a MoE layer before, none from it."""
    name = "fx-glm4moe"
    facts, hp = facts_of(CASES[name].model)
    assert hp.expert_weights_scale in (0.0, 1.0)
    moe_layers = sum(
        f"blk.{il}.ffn_gate_inp.weight" in tensor_map(facts) for il in range(facts.n_layer)
    )
    pp = _configs(name, B7698)[0]
    rule = build_of("moe_scale_w_dropped")

    def scales(build: int) -> int:
        g = build_graph(facts, replace(pp, build=build), hp)
        return sum(g.tensors[i].name.startswith("ffn_moe_weights_scaled") for i in g.nodes)

    assert moe_layers > 0
    assert (scales(rule - 1), scales(rule)) == (moe_layers, 0)
