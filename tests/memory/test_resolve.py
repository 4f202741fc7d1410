"""llama-server's and libllama's rules for the effective configuration (src/llama-context.cpp)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.memory.config import LaunchConfig, engine_defaults, with_given
from llamafit.memory.resolve import ConfigError, resolve
from llamafit.reader.model import read_model
from tests.support import FIXTURES

# n_ctx_train 32768, 7 layers, window 128
GEMMA = build_facts(read_model(FIXTURES / "swa-gemma3.gguf"))
MLA = build_facts(read_model(FIXTURES / "mla-deepseek2.gguf"))
SERVER = LaunchConfig()


def fields(rc, *names):
    return tuple(getattr(rc, n) for n in names)


@pytest.mark.parametrize(
    ("cfg", "engine", "build", "expected"),
    [
        # (n_ctx, n_ctx_seq, n_seq_max, n_stream, kv_unified, n_batch, n_ubatch, n_outputs_max,
        # n_swa_cells)
        (
            SERVER,
            "llama-server",
            None,
            (32768, 32768, 4, 1, True, 2048, 512, 4, 1024),
        ),  # np auto: 4 unified
        (
            replace(SERVER, n_ctx=8192, n_parallel=3),
            "llama-server",
            None,
            (8448, 2816, 3, 3, False, 2048, 512, 3, 768),
        ),
        (
            replace(SERVER, n_ctx=8192, n_parallel=3, kv_unified=True),
            "llama-server",
            None,
            (8192, 8192, 3, 1, True, 2048, 512, 3, 1024),
        ),
        (
            replace(SERVER, n_ctx=1000),
            "llama-server",
            None,
            (1024, 1024, 4, 1, True, 1000, 512, 4, 1024),
        ),
        (
            replace(SERVER, n_ctx=300, n_batch=4096, n_ubatch=1024),
            "llama-server",
            None,
            (512, 512, 4, 1, True, 300, 300, 4, 512),
        ),
        (
            with_given(SERVER, n_parallel=2),
            "llama-server",
            None,
            (65536, 32768, 2, 2, False, 2048, 512, 2, 768),
        ),
        (
            SERVER,
            "llama-server",
            9000,
            (32768, 32768, 4, 1, True, 2048, 512, 2048, 1024),
        ),  # before PR #23861
        (
            engine_defaults("llama-cpp-python"),
            "llama-cpp-python",
            None,
            (512, 512, 1, 1, False, 512, 512, 512, 512),
        ),
        # b6000: before PR #16736 one slot by default; SWA cache padded like n_ctx (32 without FA)
        (
            replace(SERVER, n_ctx=100, flash_attn="off"),
            "llama-server",
            6000,
            (128, 128, 1, 1, False, 100, 100, 100, 128),
        ),
    ],
    ids=[
        "server-defaults",
        "np3",
        "np3-kvu",
        "pad-1000",
        "batch-caps",
        "np2-no-c-fit",
        "build-9000",
        "llama-cpp-python",
        "build-6000-pad32",
    ],
)
def test_context_slots_batches(
    cfg: LaunchConfig, engine: str, build: int | None, expected: tuple
) -> None:
    rc = resolve(cfg, GEMMA, engine=engine, build=build)
    names = (
        "n_ctx",
        "n_ctx_seq",
        "n_seq_max",
        "n_stream",
        "kv_unified",
        "n_batch",
        "n_ubatch",
        "n_outputs_max",
        "n_swa_cells",
    )
    assert fields(rc, *names) == expected


@pytest.mark.parametrize(
    ("cfg", "facts", "flash_attn", "warning"),
    [
        (
            replace(SERVER, type_v="q8_0"),
            GEMMA,
            True,
            "enabling flash_attn since it is required for quantized V cache",
        ),
        (
            replace(SERVER, type_k="q8_0", flash_attn="off"),
            GEMMA,
            False,
            None,
        ),  # quantized K alone needs no FA
        (replace(SERVER, flash_attn="off"), GEMMA, False, None),
        (SERVER, GEMMA, True, None),  # auto: the CPU, CUDA, Metal and Vulkan backends support FA
    ],
)
def test_flash_attention_rules(
    cfg: LaunchConfig, facts, flash_attn: bool, warning: str | None
) -> None:
    rc = resolve(cfg, facts)
    assert rc.flash_attn is flash_attn
    assert rc.warnings == ((warning,) if warning else ())


@pytest.mark.parametrize(
    ("cfg", "facts", "message"),
    [
        (
            replace(SERVER, type_v="q4_0", flash_attn="off"),
            GEMMA,
            "quantized V cache requires flash_attn to be enabled; add -fa on",
        ),
        (
            replace(SERVER, type_k="q8_0", type_v="f16"),
            MLA,
            r"model does not support different K \(q8_0\) and V \(f16\)",
        ),
        (
            replace(SERVER, type_k="q9_9"),
            GEMMA,
            "unsupported cache type K 'q9_9'; allowed: f32, f16, bf16",
        ),
        (replace(SERVER, n_ctx=-5), GEMMA, "invalid context size -5"),
    ],
)
def test_rejected_like_llama_cpp(cfg: LaunchConfig, facts, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(cfg, facts)


def test_block_size_must_divide_the_head() -> None:
    tied = build_facts(read_model(FIXTURES / "tied-llama.gguf"))  # head dim 16
    with pytest.raises(
        ConfigError, match="K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"
    ):
        resolve(replace(SERVER, type_k="q8_0"), tied)


@pytest.mark.parametrize(("ngl", "expected"), [(-1, 8), (-2, 8), (0, 0), (3, 3), (99, 8)])
def test_gpu_layers_count_the_output_layer(ngl: int, expected: int) -> None:
    assert resolve(replace(SERVER, n_gpu_layers=ngl), GEMMA).n_gpu_layers == expected


def test_moe_shortcuts_expand_like_common_h() -> None:
    rc = resolve(
        replace(SERVER, override_tensor=(("blk\\.3\\.attn_q", "CUDA1"),), n_cpu_moe=2, n_cpu_ffn=1),
        GEMMA,
    )
    assert rc.all_overrides == (
        ("blk\\.3\\.attn_q", "CUDA1"),
        ("blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        ("blk\\.1\\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        ("blk\\.0\\.ffn_(up|down|gate)\\.", "CPU"),
    )


def test_explicit_c_0_with_slots_gets_the_trained_context_per_stream() -> None:
    f = build_facts(read_model(FIXTURES / "dense-llama.gguf"))
    rc = resolve(with_given(LaunchConfig(), n_ctx=0, n_parallel=2), f)
    assert (rc.n_ctx, rc.n_ctx_seq, rc.n_stream) == (8192, 4096, 2)


@pytest.mark.parametrize(
    ("arch", "build", "n_outputs_max"),
    [
        ("gemma3", None, 4),  # llama-server's slots (PR #23861)
        ("t5encoder", None, 2048),  # llama_model_has_encoder: n_batch
        ("t5", None, 2048),
        ("t5encoder", 9000, 2048),  # before PR #23861: n_batch for every arch
    ],
)
def test_a_model_with_an_encoder_keeps_n_batch_outputs(
    arch: str, build: int | None, n_outputs_max: int
) -> None:
    """src/llama-context.cpp llama_context: n_outputs_max is n_batch for a model with an
    encoder whatever llama-server passes."""
    rc = resolve(SERVER, replace(GEMMA, architecture=arch), engine="llama-server", build=build)
    assert rc.n_outputs_max == n_outputs_max


HYBRID = build_facts(read_model(FIXTURES / "hybrid-granite.gguf"))
DENSE = build_facts(read_model(FIXTURES / "dense-llama.gguf"))


@pytest.mark.parametrize(
    ("facts", "n_parallel", "unified", "build", "expected"),
    [
        # (n_ctx_seq, n_stream, kv_cells): before rule hybrid_kv_seq a hybrid's streams hold
        # cparams.n_ctx cells each (llama_model::create_memory's attn_kv_size)
        (HYBRID, 2, False, 7698, (2048, 2, 4096)),
        (HYBRID, 4, False, 8039, (1024, 4, 4096)),
        (HYBRID, 2, False, 8040, (2048, 2, 2048)),
        (HYBRID, 2, False, None, (2048, 2, 2048)),
        # one stream: the same either side
        (HYBRID, 2, True, 7698, (4096, 1, 4096)),
        (HYBRID, 1, False, 7698, (4096, 1, 4096)),
        # not hybrid: n_ctx_seq per stream at every build
        (DENSE, 2, False, 7698, (2048, 2, 2048)),
    ],
)
def test_a_hybrids_cache_streams_before_pr_19559(
    facts, n_parallel: int, unified: bool, build: int | None, expected: tuple[int, int, int]
) -> None:
    cfg = replace(SERVER, n_ctx=4096, n_parallel=n_parallel, kv_unified=unified)
    rc = resolve(cfg, facts, build=build)
    assert (rc.n_ctx_seq, rc.n_stream, rc.kv_cells) == expected


def test_a_hybrids_kv_and_compute_follow_its_cache_streams() -> None:
    """The granite hybrid fixture's two attention layers (K and V of 32 F16 values a cell), two
    streams of -c 4096 -np 2: 2 x 2048 cells each after rule hybrid_kv_seq, 2 x 4096 before, and
    the replay's CPU compute buffer over the larger cache (the real b7698 graph of
    jamba-3b-c4096-fa-off-np2 has it: tests/memory/graph/test_build_b7698.py)."""
    from llamafit.machine.devices import DeviceSpec
    from llamafit.memory.model import COMPUTE_GRAPH, MemoryModel

    host = DeviceSpec("CPU", "host", "cpu", 64 << 30, 64 << 30)
    cfg = replace(SERVER, n_ctx=4096, n_parallel=2)
    got = []
    for build in (7698, 8040):
        rc = resolve(cfg, HYBRID, build=build)
        (cpu,) = MemoryModel(HYBRID).estimate(rc, [], host, reserve_bytes=0).devices
        got.append((cpu.kv_bytes, cpu.compute_bytes, cpu.compute_source))
    assert got == [
        (2 * 2 * 4096 * 2 * 32 * 2, 12988448, COMPUTE_GRAPH),
        (2 * 2 * 2048 * 2 * 32 * 2, 6828064, COMPUTE_GRAPH),
    ]
