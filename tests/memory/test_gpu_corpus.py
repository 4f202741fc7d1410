"""The memory model against public llama.cpp logs from GPU machines
(fixtures/calibration/gpu-corpus.jsonl).

Each row is one log (its URL, build, flags and the buffer sizes it printed per device); its model is
rebuilt as a header-only GGUF from fixtures/calibration/gpu-shapes.json
(scripts/fixtures/make_shape_header.py) and run through resolve → estimate with the row's build (the
--llama-build rules). Checks: KV per device exact to the print precision; weights per device within
0.5 % where the log pins the tensor types; compute per device within the corpus tolerance
(COMPUTE_TOLERANCE), the figures of scripts/bench/bench_memory.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import ModelFacts, build_facts
from llamafit.machine.devices import DeviceSpec
from llamafit.memory.config import N_PARALLEL_AUTO, NGL_ALL, LaunchConfig
from llamafit.memory.model import Breakdown, MemoryModel
from llamafit.memory.resolve import ResolvedConfig, resolve, since
from llamafit.reader.model import read_model
from tests.support import FIXTURES
from tests.support.gpu_shapes import HOST, model
from tests.support.scripts import script

CORPUS = FIXTURES / "calibration" / "gpu-corpus.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
MIB = 1 << 20
# two decimals (a value on the half, 644.875 printed 644.88, plus the byte rounding)
PRINTED = 0.005 * MIB + 1
COMPUTE_TOLERANCE = 0.20  # the worst-case target for compute buffers


def is_host(device: str) -> bool:
    return device == "CPU" or device.endswith("_Host")


@dataclass(frozen=True)
class Compared:
    """Predicted vs measured bytes for one buffer of one device."""

    kind: str  # model | kv | compute
    device: str  # the log's buffer name (CUDA0, CUDA_Host, ...)
    predicted: int
    measured: int

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else 0.0


def resolved(row: dict, facts: ModelFacts) -> ResolvedConfig:
    """The row's llama-server config as libllama runs it at the row's build."""
    s = row["settings"]
    fa = s["flash_attn"]
    if not isinstance(fa, str):
        fa = "on" if fa else "off"
    cfg = LaunchConfig(
        n_ctx=s["n_ctx"],
        flash_attn=fa,
        type_k=s["type_k"],
        type_v=s["type_v"],
        n_gpu_layers=NGL_ALL if s["n_gpu_layers"] < 0 else s["n_gpu_layers"],
        n_batch=s["n_batch"],
        n_ubatch=s["n_ubatch"],
        n_parallel=N_PARALLEL_AUTO if s["n_seq_max"] is None else s["n_seq_max"],
        override_tensor=tuple((rx, buft) for rx, buft in s.get("override_tensor", ())),
        tensor_split=tuple(float(x) for x in s.get("tensor_split", ())),
        fit=False,
        split_mode=s.get("split_mode", "layer"),
        embeddings=s.get("embeddings", False),
        pooling=s.get("pooling", ""),
        kv_offload=s.get("kv_offload", True),
        cache_ram_mib=0,
    )
    return resolve(cfg, facts, engine="llama-server", build=row["build"])


def gpus_of(row: dict) -> list[DeviceSpec]:
    return [DeviceSpec(name, "gpu", row["backend"]) for name in row["gpus"]]


def predicted(row: dict, *, replay: bool = True) -> Breakdown:
    mm = model(row["shape"])
    rc = resolved(row, mm.facts)
    return mm.estimate(rc, gpus_of(row), HOST, reserve_bytes=0, replay=replay)


def compared(row: dict) -> list[Compared]:
    """Every buffer the log printed, paired with the prediction for the same device."""
    bd = predicted(row)
    by_name = {d.name: d for d in bd.devices[:-1]}
    hostrow = bd.devices[-1]
    field = {"model": "weights_bytes", "kv": "kv_bytes", "compute": "compute_bytes"}
    out = []
    for kind in ("model", "kv", "compute") if _pinned(row) else ("kv", "compute"):
        for dev, mib in row["measured"].get(kind, {}).items():
            usage = by_name.get(dev, hostrow)
            out.append(Compared(kind, dev, getattr(usage, field[kind]), round(mib * MIB)))
    return out


def classes(row: dict, facts: ModelFacts | None = None) -> list[str]:
    return list(row["classes"])


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_kv_exact(row: dict) -> None:
    # two decimals, or whole MiB (breakdown tables, truncated)
    precision = row.get("precision_mib", 0.01) * MIB
    for c in compared(row):
        if c.kind == "kv":
            assert (
                0 <= c.predicted - c.measured < precision
                or abs(c.predicted - c.measured) <= PRINTED
            ), (c.device, c.predicted / MIB, c.measured / MIB)


def _pinned(row: dict) -> bool:
    """The shape spec gives the tensor types (the log pins them): only then are weights
    comparable."""
    make_shape_header = script("make_shape_header")

    return "model" in row["measured"] and "type" in make_shape_header.load_specs()[row["shape"]]


@pytest.mark.parametrize(
    "row", [r for r in ROWS if _pinned(r)], ids=[r["id"] for r in ROWS if _pinned(r)]
)
def test_weights_within_half_percent(row: dict) -> None:
    for c in compared(row):
        if c.kind == "model":
            assert abs(c.error) <= 0.005, (c.device, c.predicted / MIB, c.measured / MIB)


def _awaiting(rows: list[dict]) -> list:
    """Rows whose compute needs a rule another branch brings are strict xfails: they flip when it
    lands."""
    return [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=r["awaits"]))
        if r.get("awaits")
        else r
        for r in rows
    ]


@pytest.mark.parametrize("row", _awaiting(ROWS), ids=[r["id"] for r in ROWS])
def test_gpu_compute_within_tolerance(row: dict) -> None:
    """GPU compute buffers (the host's pinned compute buffers are
    test_host_compute_within_tolerance's)."""
    for c in compared(row):
        if c.kind == "compute" and not is_host(c.device):
            assert abs(c.error) <= COMPUTE_TOLERANCE, (
                c.device,
                c.predicted / MIB,
                c.measured / MIB,
            )


MODELLED = [r for r in ROWS if not r.get("awaits")]
_HOST = [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=r["awaits_host"]))
    if r.get("awaits_host")
    else r
    for r in MODELLED
]


@pytest.mark.parametrize("row", _HOST, ids=[r["id"] for r in MODELLED])
def test_host_compute_within_tolerance(row: dict) -> None:
    """The pinned host compute buffer (CUDA_Host, ROCm_Host, Vulkan_Host; Metal's CPU): the graph
    inputs, which changed with the build (set_rows indices, the dual embeddings input, the F16 FA
    mask)."""
    for c in compared(row):
        if c.kind == "compute" and is_host(c.device):
            assert abs(c.error) <= COMPUTE_TOLERANCE, (
                c.device,
                c.predicted / MIB,
                c.measured / MIB,
            )


def test_corpus_rows_name_their_source() -> None:
    """Every row carries a public URL, a build, a shape that exists and at least one KV line."""
    make_shape_header = script("make_shape_header")

    shapes = make_shape_header.load_specs()
    for row in ROWS:
        assert row["url"].startswith("https://github.com/"), row["id"]
        assert isinstance(row["build"], int) and row["build"] > 0, row["id"]
        assert row["shape"] in shapes, row["id"]
        assert row["measured"]["kv"], row["id"]


@pytest.mark.parametrize(("cc_major", "expected_mib"), [(None, 260), (8, 260), (9, 288), (12, 288)])
def test_cuda_overhead_is_context_plus_cublas_workspace(
    cc_major: int | None, expected_mib: int
) -> None:
    from llamafit.machine.devices import cuda_overhead_bytes

    # 256 MiB context + 4 MiB (32 MiB Hopper on)
    assert cuda_overhead_bytes(cc_major) == expected_mib * MIB


def test_overhead_is_a_term_apart_from_the_reserve() -> None:
    row = ROWS[0]
    mm = model(row["shape"])
    rc = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=NGL_ALL, fit=False), mm.facts, build=row["build"]
    )
    plain = mm.estimate(
        rc, [DeviceSpec("CUDA0", "gpu", "cuda")], HOST, reserve_bytes=512 * MIB
    ).devices[0]
    withctx = mm.estimate(
        rc,
        [DeviceSpec("CUDA0", "gpu", "cuda", overhead_bytes=260 * MIB)],
        HOST,
        reserve_bytes=512 * MIB,
    ).devices[0]
    assert (plain.overhead_bytes, withctx.overhead_bytes) == (0, 260 * MIB)
    assert withctx.reserve_bytes == plain.reserve_bytes == 512 * MIB
    assert withctx.used_bytes - plain.used_bytes == 260 * MIB


# --- the build-rule table (resolve.BUILD_RULES): each rule on both sides of its build
# ----------------------


def test_build_rules_are_one_dated_table() -> None:
    from llamafit.memory.resolve import BUILD_RULES, since

    keys = [r.key for r in BUILD_RULES]
    assert len(keys) == len(set(keys))
    assert [r.build for r in BUILD_RULES] == sorted(r.build for r in BUILD_RULES)
    for r in BUILD_RULES:
        # a PR not found (0) leaves the build to published source releases, said in `merged`
        assert (r.pr > 0 or "source release" in r.merged) and r.change
        assert since(r.key, None) and since(r.key, r.build) and not since(r.key, r.build - 1)


@pytest.mark.parametrize(
    ("output_first", "layers_on_gpu", "output"), [(True, 47, 0), (False, 48, -1)]
)
def test_ngl_counts_the_output_layer_first_from_pr_18148(
    output_first: bool, layers_on_gpu: int, output: int
) -> None:
    """-ngl 48 on 48 blocks: now the output layer and blocks 1..47; before PR #18148 all 48 blocks
    and the output layer on the CPU (the fit-params README's breakdown at b6895 shows the old
    placement)."""
    from llamafit.memory.placement import layer_map

    lmap = layer_map(48, 48, (1.0,), output_first)
    assert (sum(d == 0 for d in lmap.layers), lmap.output) == (layers_on_gpu, output)


QWEN3 = "qwen3-30b-a3b"


@pytest.mark.parametrize(
    ("build", "n_ctx", "fa", "np", "expected"),
    [
        # (n_ctx cells, n_ctx_seq, n_seq_max, kv_unified, flash_attn, n_gpu_layers unset -> value)
        (
            None,
            70000,
            "off",
            2,
            (70144, 35072, 2, False, False),
        ),  # PAD 256 of n_ctx and of n_ctx / n_seq
        (6980, 70000, "off", 2, (70144, 35072, 2, False, False)),  # PR #17046
        (6979, 70000, "off", 2, (70000, 35000, 2, False, False)),  # PR #16812: no padding
        (
            6889,
            70000,
            "off",
            2,
            (70016, 35008, 2, False, False),
        ),  # before: 32 without FA, n_ctx / n_seq
        (6889, 70000, "on", 2, (70144, 35072, 2, False, True)),  # ... 256 with FA
        (
            None,
            8192,
            "auto",
            -1,
            (8192, 8192, 4, True, True),
        ),  # np auto: 4 unified slots; FA auto on
        (6999, 8192, "auto", -1, (8192, 8192, 1, False, True)),  # before PR #16736: one slot
        (
            6324,
            8192,
            "auto",
            1,
            (8192, 8192, 1, False, False),
        ),  # before PR #15434: no -fa auto (off)
        (
            5913,
            8192,
            "off",
            4,
            (8192, 2048, 4, False, False),
        ),  # PR #14363: one KV stream per sequence
        (
            5912,
            8192,
            "off",
            4,
            (8192, 8192, 4, True, False),
        ),  # before: one unified cache for all sequences
    ],
)
def test_context_rules_by_build(
    build: int | None, n_ctx: int, fa: str, np: int, expected: tuple
) -> None:
    mm = model(QWEN3)
    rc = resolve(
        LaunchConfig(n_ctx=n_ctx, flash_attn=fa, n_parallel=np, fit=False), mm.facts, build=build
    )
    assert (rc.n_ctx, rc.n_ctx_seq, rc.n_seq_max, rc.kv_unified, rc.flash_attn) == expected


def test_unset_ngl_meant_cpu_only_before_pr_15434() -> None:
    mm = model(QWEN3)
    assert resolve(LaunchConfig(fit=False), mm.facts, build=6324).n_gpu_layers == 0
    assert (
        resolve(LaunchConfig(fit=False), mm.facts, build=6325).n_gpu_layers
        == mm.facts.n_layer_all + 1
    )


def test_cuda_fa_f16_copies_enter_the_compute_buffer_with_pr_23907() -> None:
    """q8_0 K/V with flash attention on CUDA: from PR #23907 the F16 copies of the whole cache are
    in the CUDA compute buffer (2 B x n_kv x (n_embd_k_gqa + n_embd_v_gqa) = 2 x 65536 x 1024 B =
    128 MiB here); before, they came from the CUDA pool. A GPU without the output layer, so
    attention sets the peak."""
    from llamafit.memory.compute import ComputeSettings, fa_f16_extra, predict_compute

    f = model(QWEN3).facts
    s = ComputeSettings(
        n_ctx_seq=65536,
        n_ubatch=512,
        n_outputs=1,
        flash_attn=True,
        type_k="q8_0",
        type_v="q8_0",
        backend="cuda",
        holds_output=False,
    )
    with_copies = predict_compute(f, s)
    without = predict_compute(f, replace(s, fa_f16_in_buffer=False))
    assert (
        fa_f16_extra(f, s, 0) == 128 * MIB
        and fa_f16_extra(f, replace(s, fa_f16_in_buffer=False), 0) == 0
    )
    # 128 MiB lift the attention peak over the FFN
    assert (with_copies.peak, without.peak) == (
        "attention",
        "moe",
    )


@pytest.mark.parametrize(
    ("build", "device_bytes"),
    [(5779, 183502976 + 23040 * 512 * 4), (5780, 183502976)],
)
def test_fused_up_split_by_two_copies_before_pr_14158(build: int, device_bytes: int) -> None:
    """GLM-Z1 32B (glm4: ffn_up [6144, 46080], the gate fused in, n_ff 23040) on a GPU without the
    output layer, 512 tokens, flash attention: before PR #14158 build_ffn's LLM_FFN_SWIGLU made two
    ggml_cont copies of up's halves, live with up, so the FFN peak holds one n_ff x 512 F32 block
    (45 MiB) more than ggml_swiglu's [2 n_ff] + [n_ff]."""
    from llamafit.memory.compute import base_settings, predict_compute

    f = model("glm-z1-32b-0414").facts
    cfg = LaunchConfig(n_ctx=4096, flash_attn="on", n_gpu_layers=NGL_ALL, fit=False)
    s = replace(
        base_settings(f, resolve(cfg, f, build=build)),
        backend="cuda",
        holds_output=False,
        n_outputs=1,
    )
    got = predict_compute(f, s)
    assert (got.device, got.peak) == (device_bytes, "ffn")


@pytest.mark.parametrize(
    ("build", "backend", "n_ctx", "n_ubatch", "device_mib"),
    [
        (5274, "cuda", 32768, 512, 353),  # ik_llama.cpp#370's and #344's CUDA0: 45 + 12 + 296
        (5274, "cuda", 28672, 512, 353),  # a 56 MiB F32 mask: the bottom still holds n_ff + n_embd
        (5274, "rocm", 32768, 512, 353),
        (5274, "cuda", 32768, 256, 176.5),  # 22.5 + 6 + 148
        (5274, "cuda", 8192, 512, 308),  # a 16 MiB mask: n_ff does not fit the bottom
        (5274, "cuda", 49152, 512, 308),  # a 96 MiB mask: the fused up [2 n_ff] fits it
        (5274, "metal", 32768, 512, 308),  # Metal reads the host's inputs in place: no copies
        (9380, "cuda", 32768, 512, 308),  # PR #23764: the F16 mask input stays to the last block
    ],
)
def test_glm4_logits_above_the_mask_hole_before_pr_23764(
    build: int, backend: str, n_ctx: int, n_ubatch: int, device_mib: float
) -> None:
    """GLM-Z1 32B on one GPU, every layer offloaded, flash attention, all tokens output: the split
    input copies of the F32 KQ mask and the embeddings lookup leave a hole at the bottom of the GPU
    buffer; the last block's SWIGLU activation [n_ff] and ffn_down [n_embd] fill it and the logits
    go above them (compute._logits_above_mask_hole). At b5274 on CUDA/ROCm the whole buffer is also
    what scripts/audit/audit_glm4_b5274.py's replay of that build's graph and allocator gives."""
    from llamafit.memory.compute import base_settings, predict_compute

    audit = script("audit_glm4_b5274")

    f = model("glm-z1-32b-0414").facts
    cfg = LaunchConfig(
        n_ctx=n_ctx,
        n_ubatch=n_ubatch,
        flash_attn="on",
        n_gpu_layers=NGL_ALL,
        n_parallel=1,
        fit=False,
    )
    s = replace(base_settings(f, resolve(cfg, f, build=build)), backend=backend)
    got = predict_compute(f, s)
    assert (got.device, got.peak) == (int(device_mib * MIB), "output")
    if build == 5274 and backend in ("cuda", "rocm"):
        replayed = audit.gpu_buffers(audit.GLM_Z1_32B, f.n_layer, n_ubatch, n_ctx)[0]
        assert replayed == got.device


def test_glm4_b5274_replay_reproduces_the_logs() -> None:
    """scripts/audit/audit_glm4_b5274.py against what ik_llama.cpp#370 and #344 print for GLM-Z1 32B
    (-fa -ub 512): CUDA0 353.00 and CUDA_Host 76.01 MiB at -c 32768 (the host: the 64 MiB F32 mask,
    the 12 MiB lookup, three 2 KiB index inputs), the CPU buffer 308.00 MiB at -c 5120."""
    audit = script("audit_glm4_b5274")
    gpu, host, _ = audit.gpu_buffers(audit.GLM_Z1_32B, 61, 512, 32768)
    cpu = audit.cpu_buffer(audit.GLM_Z1_32B, 61, 512, 5120)
    assert (gpu, host, cpu) == (353 * MIB, 76 * MIB + 3 * 2048, 308 * MIB)


def test_mla_caches_v_before_pr_19067(tmp_path: Path) -> None:
    """An MLA model (fixtures/mla-deepseek2.gguf: K 576 wide, V = kv_lora_rank 512): V-less from
    b7800."""
    from tests.support import FIXTURES as FX

    mm = MemoryModel(build_facts(read_model(FX / "mla-deepseek2.gguf")))
    cfg = LaunchConfig(n_ctx=4096, n_parallel=1, fit=False)
    new = mm.estimate(resolve(cfg, mm.facts, build=7800), (), HOST).devices[-1].kv_bytes
    old = mm.estimate(resolve(cfg, mm.facts, build=7799), (), HOST).devices[-1].kv_bytes
    layers = sum(mm.facts.has_kv)
    assert old - new == layers * 4096 * 2 * mm.facts.mla.kv_lora_rank  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("build", "keys"),
    [
        (None, {"inp_tokens", "inp_embd", "inp_pos", "out_ids", "k_idxs0", "v_idxs0", "kq_mask0"}),
        (
            7749,
            {"inp_tokens", "inp_pos", "out_ids", "k_idxs0", "v_idxs0", "kq_mask0"},
        ),  # before PR #18898
        (
            6089,
            {"inp_tokens", "inp_pos", "out_ids", "kq_mask0"},
        ),  # before PR #14959: no set_rows indices
    ],
)
def test_graph_inputs_by_build(build: int | None, keys: set[str]) -> None:
    """The host buffer of a full offload holds the graph inputs: which exist depends on the build
    (the pythia CI logs at b4343 show 9.01 MiB = F32 mask 2048 x 512 + the embedding rows, nothing
    else)."""
    from llamafit.memory.compute import ComputeSettings, input_bytes

    f = model(QWEN3).facts
    s = ComputeSettings(
        n_ctx_seq=2048,
        n_ubatch=512,
        n_outputs=512,
        flash_attn=False,
        backend="cuda",
        kv_idxs=since("kv_set_rows", build),
        inp_embd_input=since("inp_embd_both", build),
    )
    assert set(input_bytes(f, s)) == keys


def test_pinned_host_buffers_on_cuda() -> None:
    """CUDA_Host holds the host compute and output buffers (and unmapped CPU weights); none without
    CUDA/ROCm."""
    row = ROWS[0]
    mm = model(row["shape"])
    rc = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=NGL_ALL, fit=False), mm.facts, build=row["build"]
    )
    cuda = mm.estimate(rc, [DeviceSpec("CUDA0", "gpu", "cuda")], HOST).devices[-1]
    assert cuda.pinned_bytes == cuda.compute_bytes + cuda.output_bytes > 0
    vulkan = mm.estimate(rc, [DeviceSpec("Vulkan0", "gpu", "vulkan")], HOST).devices[-1]
    assert vulkan.pinned_bytes == 0
    unmapped = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=NGL_ALL, fit=False, load_mode="none"), mm.facts
    )
    host_row = mm.estimate(unmapped, [DeviceSpec("CUDA0", "gpu", "cuda")], HOST).devices[-1]
    assert (
        host_row.pinned_bytes
        == host_row.compute_bytes + host_row.output_bytes + host_row.weights_bytes
    )


@pytest.mark.parametrize(("build", "host_mib", "device_mib"), [(None, 2.0, 2.0), (9379, 4.0, 2.0)])
def test_flash_attention_mask_was_f32_before_pr_23764(
    build: int | None, host_mib: float, device_mib: float
) -> None:
    """With FA the mask input (n_kv x T) is F16 now; before PR #23764 an F32 input stayed on the
    host and the GPU got its F16 cast (issue #13545's ROCm_Host buffer: 64 MiB F32 mask at 32768 x
    512)."""
    from llamafit.memory.compute import ComputeSettings, input_bytes

    f = model(QWEN3).facts
    s = ComputeSettings(
        n_ctx_seq=2048,
        n_ubatch=512,
        n_outputs=1,
        flash_attn=True,
        backend="cuda",
        mask_f16_input=since("fa_mask_f16", build),
    )
    inputs = input_bytes(f, s)
    assert inputs["kq_mask0"] == host_mib * MIB
    assert inputs.get("kq_mask_f16_0", inputs["kq_mask0"]) == device_mib * MIB


# Qwen3-Embedding-8B (n_embd 4096, output rows 151665), 2048 tokens over 40960 cells, flash attention, mean
# pooling at b5618 (ROCm issue 4903): the split inputs below the pooling input's copy, then the logits
_E_ROW, _LOGITS = 4096 * 2048 * 4, 151665 * 2048 * 4
_POS, _OUT_IDS, _INP_MEAN = (
    2048 * 4,
    2048 * 4,
    2048 * 2048 * 4,
)  # inp_mean n_tokens x n_tokens before PR #14217


@pytest.mark.parametrize(
    ("mask_f16_input", "mask_copy", "device_bytes"),
    [
        (False, 40960 * 2048 * 4, 1628332032),  # b5618: the F32 mask's copy (the log: 1552.90 MiB)
        (True, 40960 * 2048 * 2, 1460559872),  # PR #23764 on: the F16 mask input's copy
    ],
)
def test_pooling_input_lies_above_the_f32_mask_copy_before_pr_23764(
    mask_f16_input: bool, mask_copy: int, device_bytes: int
) -> None:
    """Before PR #23764 the F16 cast of the F32 mask runs on the GPU (ggml_backend_sched_split_graph's pass
    2), so the split's input copies hold the F32 mask; the pooling input's copy, read last, lies above them
    and the logits above it (compute._f32_mask_copies, _pinned_output)."""
    from llamafit.memory.compute import base_settings, predict_compute

    f = model("qwen3-embedding-8b-q8_0").facts
    cfg = LaunchConfig(
        n_ctx=40960,
        flash_attn="on",
        n_gpu_layers=NGL_ALL,
        n_batch=2048,
        n_ubatch=2048,
        n_parallel=1,
        fit=False,
        embeddings=True,
        pooling="mean",
        cache_ram_mib=0,
    )
    s = replace(
        base_settings(f, resolve(cfg, f, engine="llama-server", build=5618)),
        backend="rocm",
        mask_f16_input=mask_f16_input,
    )
    got = predict_compute(f, s)
    below = _E_ROW + _POS + mask_copy + _OUT_IDS + _INP_MEAN
    assert (got.device, got.peak) == (device_bytes, "output")
    assert device_bytes == below + _LOGITS


@pytest.mark.parametrize(
    ("backend", "build", "refused"),
    [
        (
            "cuda",
            5261,
            False,
        ),  # issue #13661: -sm row over four K80s loads (CUDA0_Split ... buffers)
        ("cuda", 9889, False),
        (
            "cuda",
            9890,
            True,
        ),  # commit 74976e1 (issue #25884): "device CUDA0 does not support split buffers"
        ("cuda", None, True),
        ("rocm", 5400, False),  # issue #13545: -sm row over two Vega 20
        ("rocm", None, True),  # ROCm builds ggml-cuda (HIP): the same buffer types
        ("vulkan", None, False),
    ],
)
def test_row_split_on_cuda_until_b9890(backend: str, build: int | None, refused: bool) -> None:
    from llamafit.memory.resolve import ConfigError

    mm = model(QWEN3)
    rc = resolve(
        LaunchConfig(
            n_ctx=4096, n_gpu_layers=NGL_ALL, split_mode="row", tensor_split=(1.0, 1.0), fit=False
        ),
        mm.facts,
        build=build,
    )
    gpus = [DeviceSpec(f"{backend.upper()}{i}", "gpu", backend) for i in range(2)]
    if refused:
        with pytest.raises(ConfigError, match="does not support split buffers"):
            mm.estimate(rc, gpus, HOST)
    else:
        assert len(mm.estimate(rc, gpus, HOST).devices) == 3
