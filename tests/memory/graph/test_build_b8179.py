"""The graph builder against the real graphs of llama.cpp b8179, before the fused gated
DeltaNet op was in the graph (rule gdn_chunking): fixtures/graphs/b8179-<case>, recorded with
scripts/graph_dump/record_libllama.py --build 8179 from a libllama built of the llama.cpp tree
that node-llama-cpp 3.17.1 ships (llama/gitRelease.bundle, release b8179, whole and unchanged:
no file swapped in), driven by llama-cpp-python 0.3.17's bindings (llama.h's structs are the
same; the functions b8179 lacks left unbound). Checked as test_build_older checks 0.3.17's:
node for node but for the names, the leafs as a set, the CPU compute buffer to the byte. And
b8233's public Qwen3-Next log (one CUDA device, -fit): its node counts, and its compute buffers
and splits with the placement llama_params_fit made.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.builds import build_of, since
from llamafit.memory.graph.models import MODELS, graph_hparams_of
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.replay import _placed, _setup, covers_model, n_copies
from llamafit.memory.graph.reserve import reserve_configs
from llamafit.memory.graph.sched import split_graph
from llamafit.memory.graph.template import build_graph
from llamafit.memory.model import _device_placement
from llamafit.memory.overrides import Rules
from llamafit.memory.weights import place_weights
from tests.memory.graph.test_build_older import CASES, _recorded, _same_graphs
from tests.support import FIXTURES
from tests.support.graph_build import facts_of
from tests.support.scripts import script

bench = script("bench_public_compute")

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


# The public b8233 log of Qwen3-Coder-Next with -fit on a 4060 (fixtures/calibration/
# gpu-corpus-2026.jsonl): the fit placed the experts, so its -ot rules are the fit's.
FIT_ROW = "repo-bushman77-qwen3-coder-next-fit-exps-cpu-4060"

# llama_params_fit_impl's get_overflow_pattern (src/llama.cpp): what a partial layer sends to the
# overflow buffer type by its layer_fraction_t. The fit's code from here to its end is the same
# in b8179's tree and b8352's (node-llama-cpp 3.17.1 and 3.18.0), so at b8233 too.
OVERFLOW = {
    "ATTN": r"blk\.{il}\.ffn_(up|gate|down).*",
    "UP": r"blk\.{il}\.ffn_(gate|down).*",
    "GATE": r"blk\.{il}\.ffn_down.*",
    "MOE": r"blk\.{il}\.ffn_(up|down|gate)_(ch|)exps",
}


def fit_overrides(n_layer: int, n_gpu_layers: int, n_part: int, first: str) -> Rules:
    """set_ngl_tensor_split_tbo of llama_params_fit_impl for one device: its partial layers start
    at il0 = n_layer + 1 - n_gpu_layers + n_full (n_full = n_gpu_layers - n_part); the first
    overflows by its own fraction, the others by LAYER_FRACTION_MOE, all to the CPU's buffer type
    (one device: overflow_bufts[0] is the CPU's)."""
    il0 = n_layer + 1 - n_gpu_layers + (n_gpu_layers - n_part)
    return tuple(
        (OVERFLOW[first if il == il0 else "MOE"].format(il=il), "CPU")
        for il in range(il0, il0 + n_part)
    )


def _fit_row(rules: Rules | None = None) -> dict:
    path = FIXTURES / "calibration" / "gpu-corpus-2026.jsonl"
    row = next(r for r in bench.load_rows(path) if r["id"] == FIT_ROW)
    if rules is not None:
        row["settings"] = {**row["settings"], "override_tensor": [list(r) for r in rules]}
    return row


def test_the_fit_rows_rules_place_tensors_as_llama_params_fit() -> None:
    """'49 layers (47 overflowing)' on one device: blocks 0 and 1 whole, block 2 as
    LAYER_FRACTION_UP (the fit's 'one extra layer': its gate and down tensors, router and shared
    expert's included, to the CPU), blocks 3..47 as LAYER_FRACTION_MOE (the 48th partial layer
    is the output layer: blk.48 matches nothing). The row's two rules place every tensor so."""
    row = _fit_row()
    m = bench.row_model(row)
    fit = m.override_targets(fit_overrides(48, 49, 47, "UP"))
    rules = tuple((rx, buft) for rx, buft in row["settings"]["override_tensor"])
    assert m.override_targets(rules) == fit
    on_cpu = sorted(name for name, buft in fit.items() if buft == "CPU")
    assert len(on_cpu) == 6 + 45 * 3
    assert [n for n in on_cpu if n.startswith("blk.2.")] == [
        "blk.2.ffn_down_exps.weight",
        "blk.2.ffn_down_shexp.weight",
        "blk.2.ffn_gate_exps.weight",
        "blk.2.ffn_gate_inp.weight",
        "blk.2.ffn_gate_inp_shexp.weight",
        "blk.2.ffn_gate_shexp.weight",
    ]


def _splits(row: dict) -> tuple[int, ...]:
    """The graph splits of the prompt and one-token reserves (sched_reserve's 'graph splits')."""
    m = bench.row_model(row)
    rc = bench.row_config(row)
    gpus, lmap, _weights, moved = place_weights(m, rc, bench.row_gpus(row))
    placement = _device_placement(m, rc, lmap, gpus, bench.HOST.cpu_features, moved)
    s = _setup(m.facts, rc, gpus, placement)
    hp = graph_hparams_of(m.facts)
    out = []
    for _reserve, config in reserve_configs(rc, **s.buffers)[:2]:
        graph = _placed(build_graph(m.facts, config, hp), s.backends, s.device_of_layer)
        split = split_graph(
            graph,
            s.backends,
            n_copies=n_copies(m.facts, rc, gpus),
            op_offload=rc.op_offload,
            all_inputs=since("sched_all_inputs", rc.build),
        )
        out.append(len(split.splits))
    return tuple(out)


# the reading before: block 0 whole, the experts of blocks 1..47 on the CPU
EXPERTS_1_47: Rules = ((r"blk\.([1-9]|[1-3][0-9]|4[0-7])\.ffn_(up|down|gate)_exps", "CPU"),)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        # the fit's placement: the log's CUDA0 583.69 and CUDA_Host 88.01 MiB, 143 and 98
        # splits; CUDA0's weights 4145.12 MiB against the logged 4147.99 (the shape's type mix)
        (None, (4346471424, 612040832, 92289056, 143, 98)),
        # blocks 1..47's experts on the CPU: 1,473 MiB of weights short, 4.06% under, 96 splits
        (EXPERTS_1_47, (2804417536, 587202688, 92289056, 143, 96)),
    ],
)
def test_b8233_fit_log_is_replayed_with_the_fits_placement(
    rules: Rules | None, expected: tuple[int, ...]
) -> None:
    """At the peak, block 2's down experts (Q6_K, 420 MiB) are copied to CUDA0 beside its up
    experts' product, which stays on CUDA0 with the up experts (rule LAYER_FRACTION_UP); the
    one-token graph runs block 2's gate and down experts on the CPU, its up experts on CUDA0:
    two splits more."""
    row = _fit_row(rules)
    bd = bench.row_model(row).estimate(
        bench.row_config(row), bench.row_gpus(row), bench.HOST, reserve_bytes=0
    )
    cuda0, host = bd.devices
    assert (cuda0.compute_source, host.compute_source) == ("graph", "graph")
    got = (cuda0.weights_bytes, cuda0.compute_bytes, host.compute_bytes, *_splits(row))
    assert got == expected
