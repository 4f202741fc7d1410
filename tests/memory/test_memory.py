"""Weights, KV and recurrent state per device: exact bytes by llama.cpp's placement rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import DeviceSpec, host
from llamafit.machine.hardware import gpu_specs
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.placement import cuda_alloc_size
from llamafit.memory.resolve import ConfigError, resolve
from llamafit.reader.ggml_types import GGMLType
from llamafit.reader.model import read_model
from tests.support import FIXTURES

GIB = 1 << 30
HOST = host(64 * GIB, 48 * GIB)
ONE_GPU = gpu_specs("24GiB")
TWO_GPUS = gpu_specs("24GiB,24GiB")
SERVER = LaunchConfig()


def model(name: str) -> MemoryModel:
    return MemoryModel(build_facts(read_model(FIXTURES / name)))


def estimate(mm: MemoryModel, cfg: LaunchConfig, gpus=ONE_GPU):
    return mm.estimate(resolve(cfg, mm.facts), gpus, HOST)


def padded(mm: MemoryModel, names) -> int:
    tensors = [t for t in mm.facts.tensors if t.name in names]
    return sum(cuda_alloc_size(GGMLType.of(t.ggml_type), t.shape, t.n_bytes) for t in tensors)


def raw(mm: MemoryModel, names) -> int:
    return sum(t.n_bytes for t in mm.facts.tensors if t.name in names)


def names(mm: MemoryModel, pred) -> set[str]:
    return {t.name for t in mm.facts.tensors if pred(t.name)}


def test_full_offload_puts_everything_but_token_embd_on_the_gpu() -> None:
    mm = model("dense-llama.gguf")
    gpu, cpu = estimate(mm, SERVER).devices
    on_gpu = names(mm, lambda n: n != "token_embd.weight")
    assert gpu.weights_bytes == padded(mm, on_gpu)
    assert cpu.weights_bytes == raw(mm, {"token_embd.weight"})


def test_ngl_counts_the_output_layer_first() -> None:
    mm = model("dense-llama.gguf")  # 4 blocks
    gpu, cpu = estimate(mm, replace(SERVER, n_gpu_layers=2)).devices  # output + block 3
    on_gpu = names(mm, lambda n: n.startswith(("output", "blk.3.")))
    assert gpu.weights_bytes == padded(mm, on_gpu)
    assert cpu.weights_bytes == raw(mm, names(mm, lambda n: n not in on_gpu))
    per_cell = 2 * (2 * 16) * 2  # K + V, 2 KV heads x 16, f16
    assert (gpu.kv_bytes, cpu.kv_bytes) == (1 * per_cell * 4096, 3 * per_cell * 4096)


def test_tied_output_duplicates_token_embd_on_the_gpu() -> None:
    mm = model("tied-llama.gguf")
    gpu, cpu = estimate(mm, SERVER).devices
    assert gpu.weights_bytes == padded(mm, names(mm, lambda n: n != "token_embd.weight")) + padded(
        mm, {"token_embd.weight"}
    )
    assert cpu.weights_bytes == raw(mm, {"token_embd.weight"})


def test_nextn_block_is_not_loaded() -> None:
    mm = model("nextn-glm4moe.gguf")
    gpu, cpu = estimate(mm, SERVER).devices
    loaded = names(mm, lambda n: not n.startswith("blk.3."))
    assert gpu.weights_bytes + cpu.weights_bytes == padded(
        mm, loaded - {"token_embd.weight"}
    ) + raw(mm, {"token_embd.weight"})
    # 3 KV layers of 2 heads x 32, f16, n_ctx_train
    assert gpu.kv_bytes == 3 * (2 * 2 * 32 * 2) * 65536


@pytest.mark.parametrize(
    "flags",
    [
        {"cpu_moe": True},
        {"n_cpu_moe": 4},
        {"override_tensor": ((r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),)},
    ],
)
def test_experts_on_the_cpu(flags: dict) -> None:
    mm = model("moe-qwen3.gguf")
    gpu, cpu = estimate(mm, replace(SERVER, **flags)).devices
    experts = names(mm, lambda n: "_exps." in n)
    assert cpu.weights_bytes == raw(mm, experts | {"token_embd.weight"})
    assert gpu.weights_bytes == padded(
        mm, names(mm, lambda n: n not in experts and n != "token_embd.weight")
    )


def test_n_cpu_moe_moves_the_first_blocks_only() -> None:
    mm = model("moe-qwen3.gguf")
    gpu, cpu = estimate(mm, replace(SERVER, n_cpu_moe=1)).devices
    moved = names(mm, lambda n: n.startswith("blk.0.") and "_exps." in n)
    assert cpu.weights_bytes == raw(mm, moved | {"token_embd.weight"})


def test_two_gpus_split_layers_by_free_memory() -> None:
    # 4 blocks + output over 2 equal GPUs: blocks 0-2 | block 3 + output
    mm = model("dense-llama.gguf")
    g0, g1, cpu = estimate(mm, SERVER, TWO_GPUS).devices
    assert g0.weights_bytes == padded(
        mm, names(mm, lambda n: n.startswith(("blk.0.", "blk.1.", "blk.2.")))
    )
    assert g1.weights_bytes == padded(mm, names(mm, lambda n: n.startswith(("blk.3.", "output"))))
    per_cell = 2 * (2 * 16) * 2
    assert (g0.kv_bytes, g1.kv_bytes) == (3 * per_cell * 4096, 1 * per_cell * 4096)


def test_no_kv_offload_keeps_kv_on_the_host() -> None:
    mm = model("dense-llama.gguf")
    gpu, cpu = estimate(mm, replace(SERVER, kv_offload=False)).devices
    assert (gpu.kv_bytes, cpu.kv_bytes) == (0, 4 * 128 * 4096)


@pytest.mark.parametrize(
    ("name", "n_parallel", "recurrent"),
    [
        # 4 * (n_embd_r + n_embd_s) * max(1, n_seq) per recurrent layer
        ("hybrid-granite.gguf", 1, 4 * 4 * (480 + 2048)),
        ("recurrent-mamba2.gguf", 1, 3 * 4 * (768 + 4096)),
        ("recurrent-mamba2.gguf", -1, 3 * 4 * (768 + 4096) * 4),  # np auto: 4 slots
    ],
)
def test_recurrent_state(name: str, n_parallel: int, recurrent: int) -> None:
    gpu, cpu = estimate(model(name), replace(SERVER, n_parallel=n_parallel)).devices
    assert (gpu.recurrent_bytes, cpu.recurrent_bytes) == (recurrent, 0)


def test_swa_cache_is_bounded_by_the_window() -> None:
    mm = model("swa-gemma3.gguf")  # 1 full + 6 SWA layers, 2 KV heads x 32, window 128
    gpu, _ = estimate(
        mm, SERVER
    ).devices  # 4 unified slots: SWA = PAD(128*4 + 512, 256) = 1024 cells
    per_layer_cell = 2 * 64 * 2
    assert gpu.kv_bytes == per_layer_cell * (1 * 32768 + 6 * 1024)
    full, _ = estimate(mm, replace(SERVER, swa_full=True)).devices
    assert full.kv_bytes == per_layer_cell * 7 * 32768


def test_output_buffer_is_n_vocab_logits_per_slot() -> None:
    mm = model("swa-gemma3.gguf")  # 512 tokens
    assert estimate(mm, SERVER).devices[-1].output_bytes == 512 * 4 * 4


def test_cpu_only_holds_everything_on_the_host() -> None:
    mm = model("dense-llama.gguf")
    (cpu,) = estimate(mm, SERVER, ()).devices
    assert cpu.weights_bytes == mm.facts.weights.total_bytes
    assert cpu.kv_bytes == 4 * 128 * 4096
    assert cpu.reserve_bytes == 1 << 30


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"split_mode": "row"}, "does not support split buffers"),
        ({"split_mode": "none", "main_gpu": 3}, "--main-gpu 3 is not one of the 1 GPU"),
        ({"override_tensor": (("ffn", "CUDA7"),)}, "unknown buffer type 'CUDA7'"),
    ],
)
def test_rejected_placements(flags: dict, message: str) -> None:
    with pytest.raises(
        ConfigError if "split" in str(flags) or "main" in str(flags) else ValueError, match=message
    ):
        estimate(model("dense-llama.gguf"), replace(SERVER, **flags))


def test_fits_verdict_against_device_memory() -> None:
    mm = model("dense-llama.gguf")
    tiny = (DeviceSpec("CUDA0", "gpu", "cuda", 1 << 30, 1 << 30),)
    b = estimate(mm, SERVER, tiny)  # the 1 GiB reserve alone fills it
    assert not b.fits and b.devices[0].free_after_bytes < 0
    assert estimate(mm, SERVER).fits


def test_apple_unified_memory_is_not_counted_twice() -> None:
    mm = model("dense-llama.gguf")
    metal = (DeviceSpec("MTL0", "gpu", "metal", 10 << 30, 10 << 30),)
    gpu, cpu = estimate(mm, SERVER, metal).devices
    assert cpu.usable_bytes == HOST.usable_bytes - gpu.used_bytes
