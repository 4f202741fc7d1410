"""build.py's graphs of older llama.cpp builds (GraphConfig.build, resolve.py's BUILD_RULES): the
mixed token/embedding branch from mixed_batch (b11400), the F32 KQ mask and its ggml_cast to F16
with flash attention before fa_mask_f16 (b9380; b7960-era src/llama-graph.cpp build_kq_mask,
build_attn_inp_kv_impl, build_attn_inp_kv_iswa), the Hadamard rotation of a quantized cache from
attn_rot (b8500). test_build_b9512.py checks them against real graphs of b9512 and 0.3.17."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.memory.graph.nodes import FLAG_INPUT
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.template import build_graph
from tests.support.graph_build import cases, configs, facts_of

CASES = cases()
MODELS = {"llama3.2-1b": "llama1b-c4096", "demo": "gemma3-c4096"}


def _config(model: str, build: int | None, fa: bool, cache: str) -> GraphConfig:
    facts, _ = facts_of(model)
    pp = configs(CASES[MODELS[model]], facts)[0]
    return replace(pp, build=build, flash_attn=fa, type_k=cache, type_v=cache)


COUNTS = (  # (model, build, flash attention, cache type) -> (nodes, leafs) of the pp graph
    # b11434: the mixed branch (3 inputs; DUP, GET_ROWS, SET_ROWS), an F16 mask input
    ("llama3.2-1b", None, True, "f16", 505, 188),
    ("llama3.2-1b", None, False, "f16", 585, 188),
    # q8_0: two F32 rotation inputs and 192 Hadamard nodes (16 layers: Q, K, V, the output)
    ("llama3.2-1b", None, True, "q8_0", 697, 190),
    # before mixed_batch: 3 nodes and 3 leafs fewer
    ("llama3.2-1b", 11399, True, "f16", 502, 185),
    ("llama3.2-1b", 11399, True, "q8_0", 694, 187),
    # before fa_mask_f16: one node more with flash attention (the cast), none without
    ("llama3.2-1b", 9379, True, "f16", 503, 185),
    ("llama3.2-1b", 9379, False, "f16", 582, 185),
    ("llama3.2-1b", 9379, True, "q8_0", 695, 187),
    # before attn_rot: a quantized cache is not rotated
    ("llama3.2-1b", 8499, True, "q8_0", 503, 185),
    ("llama3.2-1b", 7775, False, "q8_0", 582, 185),
    # before inp_embd_both: the token ids alone, no embeddings input (one leaf fewer)
    ("llama3.2-1b", 7774, False, "q8_0", 582, 184),
    # iSWA (gemma3): a cast per cache; before mixed_batch no inp_scale_rows input (the token
    # rows' sqrt(n_embd) is a SCALE node in the MUL's place)
    ("demo", None, True, "f16", 730, 286),
    ("demo", 11399, True, "f16", 727, 282),
    ("demo", 9379, True, "f16", 729, 282),
    ("demo", 9379, False, "f16", 817, 282),
    ("demo", 9379, True, "q8_0", 945, 286),
    ("demo", 8499, True, "q8_0", 729, 282),
    ("demo", 7774, True, "q8_0", 729, 281),
)


@pytest.mark.parametrize(("model", "build", "fa", "cache", "nodes", "leafs"), COUNTS)
def test_graph_size_by_build(
    model: str, build: int | None, fa: bool, cache: str, nodes: int, leafs: int
) -> None:
    facts, hp = facts_of(model)
    g = build_graph(facts, _config(model, build, fa, cache), hp)
    assert (len(g.nodes), len(g.leafs)) == (nodes, leafs)


MASKS = (  # (model, build, flash attention) -> mask inputs, and the casts the attention reads
    ("llama3.2-1b", 9380, True, [("attn_inp_kq_mask", "f16")], []),
    ("llama3.2-1b", 9380, False, [("attn_inp_kq_mask", "f32")], []),
    # unnamed: ggml_visit_parents names it leaf_<n>, the cast was named " (copy)" before that
    ("llama3.2-1b", 9379, True, [("leaf_12", "f32")], [(" (copy)", "f16")]),
    ("llama3.2-1b", 9379, False, [("leaf_12", "f32")], []),
    (
        "demo",
        9379,
        True,
        [("self_kq_mask_swa", "f32"), ("self_kq_mask", "f32")],
        [("self_kq_mask_swa_cnv", "f16"), ("self_kq_mask_cnv", "f16")],
    ),
    # without flash attention build_attn_inp_kv_iswa's name for the cast renames the mask
    ("demo", 9379, False, [("self_kq_mask_swa_cnv", "f32"), ("self_kq_mask_cnv", "f32")], []),
)


@pytest.mark.parametrize(("model", "build", "fa", "inputs", "casts"), MASKS)
def test_kq_mask_by_build(
    model: str,
    build: int,
    fa: bool,
    inputs: list[tuple[str, str]],
    casts: list[tuple[str, str]],
) -> None:
    facts, hp = facts_of(model)
    config = _config(model, build, fa, "f16")
    g = build_graph(facts, config, hp)
    ts = g.tensors
    cells = (config.kv_size, config.kv_size_swa)  # a mask: cells x tokens
    masks = [
        i
        for i in g.leafs
        if ts[i].flags == FLAG_INPUT and ts[i].ne[:2] in {(n, 512) for n in cells}
    ]
    assert [(ts[i].name, ts[i].type) for i in masks] == inputs
    cast = [i for i in g.nodes if ts[i].op == "CPY" and ts[i].src[0] in masks]
    assert [(ts[i].name, ts[i].type) for i in cast] == casts
    # flash attention reads the cast where there is one, else the input itself
    fa_masks = {ts[i].src[3] for i in g.nodes if ts[i].op == "FLASH_ATTN_EXT"}
    assert fa_masks == (set(cast or masks) if fa else set())
