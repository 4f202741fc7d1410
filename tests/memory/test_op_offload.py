"""Op offload at partial offload (ggml-backend.cpp scheduler pass 1, *_device_offload_op): the first
offloading GPU's compute buffer holds a host layer's activations and the largest host weight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support.loads import lab_load
from tests.support.scripts import script

make_shapes = script("make_shapes")

BASE = ["-c", "4096", "-np", "1", "--no-repack"]


def _compute(path: Path, flags: list[str], env: dict[str, str] | None = None) -> dict[str, int]:
    res = CliRunner(env=env).invoke(
        cli, ["check", str(path), "--gpu", "lavapipe", "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code == 0, res.output
    return {d["name"]: d["compute_bytes"] for d in json.loads(res.stdout)["devices"]}


# Llama 3.2 1B shape at -c 4096, -ub 512: one host layer run on Vulkan0 (A, 67_119_232 bytes: inputs
# and the FFN peak, compute.op_offload_compute), its largest weight copy (ffn_down Q6_K, 8192 / 256
# x 210 x 2048 = 13_762_560), its K/V views (4096 cells x (512 + 512) x 2 B = 8_388_608) and two
# n_embd x n_tokens F32 rows (2 x 2048 x 512 x 4 = 8_388_608); the tied output (205 MiB) is over
# lavapipe's 128 MiB storage range. (flags, env, predicted Vulkan0 compute bytes)
CASES = [
    (["-ngl", "0"], {}, 67_119_232 + 13_762_560 + 8_388_608 + 8_388_608),
    (["-ngl", "0", "-ub", "32"], {}, 4_195_072 + 13_762_560 + 8_388_608 + 2 * 2048 * 32 * 4),
    # below GGML_OP_OFFLOAD_MIN_BATCH or switched off: no node runs on Vulkan0, which holds no
    # layer, and the server prints no Vulkan0 compute buffer (b11434: size 0)
    (["-ngl", "0", "-ub", "31"], {}, 0),
    (["-ngl", "0", "--no-op-offload"], {}, 0),
    (["-ngl", "0", "-ub", "64"], {"GGML_OP_OFFLOAD_MIN_BATCH": "128"}, 0),
    # KQ [4096, 512, 32] F32 = 256 MiB is over the storage range: attention stays on the host, no
    # K/V views
    (["-ngl", "0", "-fa", "off"], {}, 80_873_600),
    # at -ub 128 the 64 MiB KQ fits: attention runs on Vulkan0 with the K/V views (real: 79.00 MiB)
    (["-ngl", "0", "-fa", "off", "-ub", "128"], {}, 98_174_592),
]


def _hand_compute(path: Path, flags: list[str], env: dict[str, str]) -> int:
    """Vulkan0's compute bytes on the hand-derived peaks (replay=False: what the solver searches
    on; `check` shows the graph replay's)."""
    from llamafit.facts.hparams import build_facts
    from llamafit.machine.hardware import gpu_specs
    from llamafit.memory.model import MemoryModel
    from llamafit.memory.resolve import resolve
    from llamafit.reader.model import read_model
    from llamafit.server.flags import parse_server_args
    from tests.support.gpu_shapes import HOST

    mm = MemoryModel(build_facts(read_model(path)))
    rc = resolve(parse_server_args(flags, env).config, mm.facts)
    bd = mm.estimate(rc, gpu_specs("lavapipe"), HOST, reserve_bytes=0, replay=False)
    return bd.devices[0].compute_bytes


@pytest.mark.parametrize(
    ("flags", "env", "expected"), CASES, ids=[" ".join(c[0]) + str(c[1]) for c in CASES]
)
def test_predicted_gpu_compute(
    shapes_dir: Path, flags: list[str], env: dict[str, str], expected: int
) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    assert _hand_compute(path, BASE + flags, env) == expected


# The graph replay (memory/graph/replay.py, what `check` shows) gives what real Vulkan0 reports:
# 85.00 MiB at -ngl 0 (fixtures/calibration/devices-vulkan-rpc.json), 79.00 MiB at -fa off -ub 128
# (the comment above); no compute buffer where no op is offloaded.
REPLAYED = [
    (["-ngl", "0"], {}, 85 << 20),
    (["-ngl", "0", "-ub", "31"], {}, 0),
    (["-ngl", "0", "--no-op-offload"], {}, 0),
    (["-ngl", "0", "-ub", "64"], {"GGML_OP_OFFLOAD_MIN_BATCH": "128"}, 0),
    (["-ngl", "0", "-fa", "off", "-ub", "128"], {}, 79 << 20),
]


@pytest.mark.parametrize(
    ("flags", "env", "mib"), REPLAYED, ids=[" ".join(c[0]) + str(c[1]) for c in REPLAYED]
)
def test_replayed_gpu_compute(
    shapes_dir: Path, flags: list[str], env: dict[str, str], mib: int
) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    got = _compute(path, BASE + flags, env)["Vulkan0"]
    assert round(got / (1 << 20), 2) == mib / (1 << 20)


# Live: what Vulkan0 reports (MiB) must not exceed the prediction (never an OOM), and the threshold,
# the switch and the env override behave as the source says.
LIVE = [
    ["-ngl", "0"],
    ["-ngl", "0", "-ub", "32"],
    ["-ngl", "0", "-ub", "31"],
    ["-ngl", "0", "--no-op-offload"],
    ["-ngl", "4"],
    ["-ngl", "0", "-fa", "off", "-ub", "128"],
    ["-ngl", "0", "-ub", "2048", "-b", "2048"],
]


@pytest.mark.parametrize("flags", LIVE, ids=[" ".join(f) for f in LIVE])
def test_vulkan0_compute_within_prediction(
    vulkan0: Path, shapes_dir: Path, flags: list[str]
) -> None:
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    got = lab_load(path, BASE + flags)
    assert got.ok, got.failure
    real = got.get("compute", "Vulkan0")
    pred = _compute(path, BASE + flags)["Vulkan0"] / (1 << 20)
    assert real <= pred + 0.01
    offloaded = "--no-op-offload" not in flags and "31" not in flags
    assert (real > 10) == offloaded  # below the threshold / switched off: no weight copy at all


# Granite 3.0 1B-A400M shape, -ot exps=CPU (every block on Vulkan0, the experts on the host): the
# GPU's own peak plus the largest expert copy (ffn_down_exps Q6_K, 13.125 MiB) and two n_embd rows;
# from -ub 1024 the copy fits the freed gate/up products and displaces the down product [1024, 8, T]
# F32 on top.
MOE_LIVE = [
    ["-ot", "exps=CPU", "-ub", "2048", "-b", "2048"],
    ["-ot", "exps=CPU", "-ub", "1024"],
    ["-ot", "exps=CPU", "-ub", "32"],
]


@pytest.mark.parametrize("flags", MOE_LIVE, ids=[" ".join(f) for f in MOE_LIVE])
def test_vulkan0_moe_copies_within_prediction(
    vulkan0: Path, shapes_dir: Path, flags: list[str]
) -> None:
    path = make_shapes.write_shape("granite3-1b-a400m", shapes_dir)
    got = lab_load(path, [*BASE, "-ngl", "99", *flags])
    assert got.ok, got.failure
    assert (
        got.get("compute", "Vulkan0")
        <= _compute(path, [*BASE, "-ngl", "99", *flags])["Vulkan0"] / (1 << 20) + 0.01
    )


# --- the output layer on the host (its lm_head is offloaded when the reserve graph's n_outputs >=
# 32) ------


def _estimate(shape: str, build: int | None, ngl: int, backend: str = "cuda") -> tuple[int, int]:
    """(GPU compute, host compute) for -c 4096 -ub 512 -np 1, FA off, one device without a tensor
    limit, by the hand-derived peaks (the graph replay covers some of these on CUDA:
    test_replay_cuda.py)."""
    from llamafit.machine.devices import DeviceSpec
    from llamafit.memory.config import LaunchConfig
    from llamafit.memory.resolve import resolve
    from tests.support.gpu_shapes import HOST, model

    mm = model(shape)
    cfg = LaunchConfig(
        n_ctx=4096, n_ubatch=512, n_parallel=1, n_gpu_layers=ngl, flash_attn="off", fit=False
    )
    rc = resolve(cfg, mm.facts, engine="llama-server", build=build)
    gpus = [DeviceSpec(f"{backend.upper()}0", "gpu", backend)]
    bd = mm.estimate(rc, gpus, HOST, reserve_bytes=0, replay=False)
    return bd.devices[0].compute_bytes, bd.devices[-1].compute_bytes


QWEN3_06B_OUT = 151936 * 1024 // 256 * 210  # output.weight Q6_K (the Jetson log's file)
# the copy, the logits and two normed rows
QWEN3_06B_LM_HEAD = QWEN3_06B_OUT + 4 * 512 * (151936 + 2 * 1024)
# the host SET_ROWS read copies of Kcur and Vcur: K fits the freed token rows
QWEN3_06B_KCUR_VCUR = 4 * 512 * 1024


@pytest.mark.parametrize(("build", "lm_head_on_gpu"), [(5489, True), (None, False)])
def test_host_output_layer_offloaded_with_its_logits(
    build: int | None, lm_head_on_gpu: bool
) -> None:
    """-ngl 0 on an untied model (qwen3-0.6b of the GPU corpus, FA off). Before PR #23861 the server
    reserved n_ubatch outputs: the lm_head's batch is 512, so CUDA0 takes it with a copy of the host
    output matrix and holds the logits (the Jetson log: 422.92 MiB), and the host keeps only the
    graph inputs. From it, n_outputs = n_parallel = 1 < 32: the lm_head stays on the host, and
    CUDA0's peak is one host layer run there: its activations A, the F16 ffn copy (3072 x 1024 x 2),
    the K/V views (4096 x 2048 x 2), two rows."""
    from llamafit.memory.config import LaunchConfig
    from llamafit.memory.op_offload import op_offload_compute, op_offload_host_compute
    from llamafit.memory.resolve import resolve
    from tests.support.gpu_shapes import model

    f = model("qwen3-0.6b").facts
    rc = resolve(
        LaunchConfig(
            n_ctx=4096, n_ubatch=512, n_parallel=1, n_gpu_layers=0, flash_attn="off", fit=False
        ),
        f,
        engine="llama-server",
        build=build,
    )
    layer = (
        op_offload_compute(f, rc, (0,), "cuda")
        + 3072 * 1024 * 2
        + 4096 * 2048 * 2
        + 2 * 1024 * 512 * 4
    )
    host = op_offload_host_compute(f, rc, "cuda", output=not lm_head_on_gpu) + QWEN3_06B_KCUR_VCUR
    assert _estimate("qwen3-0.6b", build, 0) == (
        max(layer, QWEN3_06B_LM_HEAD) if lm_head_on_gpu else layer,
        host,
    )
    # so the Jetson log's 422.92 MiB is the lm_head's (422.46 predicted)
    assert QWEN3_06B_LM_HEAD > layer


# The copies of a host layer's Kcur and Vcur (n_tokens F32 rows each) that the host's SET_ROWS reads
# land, best-fit, in the hole the token rows' GET_ROWS result (n_embd x n_tokens F32) leaves once
# the first GPU split has copied it in; only a copy that no longer fits grows the host buffer.
# (n_embd, n_embd_k_gqa, n_embd_v_gqa, n_tokens, growth in bytes; the log or start it matches)
KV_ROW_COPIES = [
    (
        1024,
        1024,
        1024,
        512,
        4 * 512 * 1024,
    ),  # Qwen3-0.6B, Jetson CUDA: 12.01 MiB, one V row over the inputs
    (2560, 1024, 1024, 512, 0),  # Qwen3-4B -ngl 0, GTX 1660 Ti b5285: 13.01, the inputs alone
    (5120, 1024, 1024, 512, 0),  # Mistral-Nemo -ngl 40, RTX 5070 b8133: 36.01
    (2048, 512, 512, 2048, 0),  # Llama 3.2 1B -ngl 0 -ub 2048, lavapipe: 80.07
    (
        1024,
        512,
        512,
        512,
        0,
    ),  # Granite 3.0 1B-A400M -ngl 0, lavapipe: 12.02 (k + v = n_embd, still fits)
    (
        2560,
        2560,
        2560,
        512,
        4 * 512 * 2560,
    ),  # Pythia 2.8B (MHA): K fills the hole, V grows the buffer
    (1024, 2048, 256, 512, 4 * 512 * 2048),  # K alone over the hole: K grows it, V fits
]


@pytest.mark.parametrize(("n_embd", "k", "v", "n_tokens", "grow"), KV_ROW_COPIES)
def test_kv_row_copies_fill_the_token_rows_hole(
    n_embd: int, k: int, v: int, n_tokens: int, grow: int
) -> None:
    from types import SimpleNamespace

    from llamafit.memory.op_offload import _kv_row_copies

    facts = SimpleNamespace(n_embd=n_embd, n_embd_k_gqa=lambda il: k, n_embd_v_gqa=lambda il: v)
    assert _kv_row_copies(SimpleNamespace(facts=facts), n_tokens, 0) == grow  # type: ignore[arg-type]


HOST_EXACT_LIVE = [
    ["-ngl", "0"],
    ["-ngl", "0", "-ub", "2048", "-b", "2048"],
    ["-ngl", "4", "-ub", "128"],
]


@pytest.mark.parametrize("flags", HOST_EXACT_LIVE, ids=[" ".join(f) for f in HOST_EXACT_LIVE])
def test_vulkan_host_is_the_inputs_when_kv_rows_fit(
    vulkan0: Path, shapes_dir: Path, flags: list[str]
) -> None:
    """Llama 3.2 1B (k + v = n_embd / 2): the host layers' Kcur/Vcur copies add nothing to
    Vulkan_Host."""
    path = make_shapes.write_shape("llama3.2-1b", shapes_dir)
    got = lab_load(path, BASE + flags)
    assert got.ok, got.failure
    assert (
        abs(got.get("compute", "Vulkan_Host") - _host_compute(path, BASE + flags) / (1 << 20))
        <= 0.01
    )


def test_tied_output_copy_is_offloaded_like_an_untied_one() -> None:
    """A tied model's output is a second token_embd (TENSOR_DUPLICATED); on the host, the lm_head
    reads it and CUDA0 copies it in like an output.weight (qwen2.5-3b of the corpus, tied, F16:
    151936 x 2048 x 2)."""
    gpu, _ = _estimate("qwen2.5-3b", 5489, 0)
    assert gpu == 151936 * 2048 * 2 + 4 * 512 * (151936 + 2 * 2048)


@pytest.mark.parametrize(("build", "threshold"), [(None, 128), (7590, 128), (7589, 32)])
def test_min_batch_env_is_honoured_from_pr_18535(build: int | None, threshold: int) -> None:
    """GGML_OP_OFFLOAD_MIN_BATCH=128 moves the threshold from PR #18535 on; before, every backend
    had 32."""
    from llamafit.memory.config import LaunchConfig
    from llamafit.memory.resolve import resolve
    from tests.support.gpu_shapes import model

    cfg = LaunchConfig(n_ctx=4096, fit=False, op_offload_min_batch=128)
    assert resolve(cfg, model("qwen3-0.6b").facts, build=build).op_offload_min_batch == threshold


# Experts on the host under GPU layers that no GPU takes (--no-op-offload, a batch under the
# threshold): the CPU runs their FFN, so the host's compute buffer holds its activations (before:
# only the graph inputs, 4x under at -ub 2048).
HOST_LIVE = [
    ["-ot", "exps=CPU", "--no-op-offload", "-ub", "2048", "-b", "2048"],
    ["-ot", "exps=CPU", "-ub", "16"],
]


def _host_compute(path: Path, flags: list[str]) -> int:
    res = CliRunner(env={"GGML_VK_VISIBLE_DEVICES": None}).invoke(
        cli, ["check", str(path), "--gpu", "lavapipe", "--reserve", "0", "--json", "--", *flags]
    )
    assert res.exit_code == 0, res.output
    return next(d["compute_bytes"] for d in json.loads(res.stdout)["devices"] if d["name"] == "CPU")


@pytest.mark.parametrize("flags", HOST_LIVE, ids=[" ".join(f) for f in HOST_LIVE])
def test_host_runs_the_ffn_no_gpu_takes(vulkan0: Path, shapes_dir: Path, flags: list[str]) -> None:
    path = make_shapes.write_shape("granite3-1b-a400m", shapes_dir)
    got = lab_load(path, [*BASE, "-ngl", "99", *flags])
    assert got.ok, got.failure
    real = got.get("compute", "Vulkan_Host")
    pred = _host_compute(path, [*BASE, "-ngl", "99", *flags]) / (1 << 20)
    # never under, and not the whole model's buffer
    assert real <= pred + 0.01 and pred <= 1.2 * real + 0.25


def test_host_keeps_the_ops_the_gpu_refuses(shapes_dir: Path) -> None:
    """gpt-oss-20b's expert tensors (32 x 2880 x 2880 MXFP4, 134 MiB) are over lavapipe's 128 MiB
    storage range: ggml_backend_vk_device_supports_op refuses their MUL_MAT_ID, so at -ngl 0 those
    ops stay on the CPU while op offload takes the rest of each host layer to Vulkan0. The graph
    replay (memory/graph/) gives both buffers as the real server sized them (b11434, recorded with
    the graph-dump shim: Vulkan0 111,153,152 and CPU 63,989,856 bytes; with --no-op-offload 0 and
    105,277,536): the host keeps less than without op offload, not the same (the hand-derived
    peaks said the same)."""
    path = make_shapes.write_shape("gpt-oss-20b", shapes_dir)
    flags = [*BASE, "-ngl", "0"]
    on, off = _compute(path, flags), _compute(path, [*flags, "--no-op-offload"])
    assert (on["Vulkan0"], on["CPU"]) == (111_153_152, 63_989_856)
    assert (off["Vulkan0"], off["CPU"]) == (0, 105_277_536)
