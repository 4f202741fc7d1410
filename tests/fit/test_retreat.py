"""OOM retries retreat (issue #16): each try strictly smaller on the device that failed, and says
what it gave up."""

from __future__ import annotations

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.explain import plan
from llamafit.fit.retreat import failed_device, retreat
from llamafit.fit.search import Target
from llamafit.fit.solver import Policy
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import engine_defaults
from llamafit.memory.model import MemoryModel
from llamafit.reader.model import read_model
from tests.support import FIXTURES

NAMES = ["CUDA0", "CUDA1", "CPU"]


@pytest.mark.parametrize(
    ("line", "device"),
    [
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 1: "
            "cudaMalloc failed: out of memory",
            "CUDA1",
        ),
        ("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 123", "CUDA0"),
        ("ggml_aligned_malloc: insufficient memory (attempted to allocate 43945.31 MB)", "CPU"),
        (
            "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size "
            "46080000000",
            "CPU",
        ),
        ("failed to initialize the context", None),
        (None, None),
    ],
)
def test_failed_device_from_the_log_line(line: str | None, device: str | None) -> None:
    assert failed_device(line, NAMES) == device


@pytest.mark.parametrize(
    ("fixture", "fa"),
    [
        # CUDA has no flash-attention kernel for dense-llama's 16-wide heads: with it on, the CPU
        # runs the attention and the GPU holds under a MiB after one retreat
        ("dense-llama.gguf", "off"),
        ("moe-qwen3.gguf", None),
        ("swa-gemma3.gguf", None),
    ],
)
def test_three_retreats_each_strictly_smaller_on_the_failed_gpu(
    fixture: str, fa: str | None
) -> None:
    facts = build_facts(read_model(str(FIXTURES / fixture)))
    gpu = DeviceSpec("CUDA0", "gpu", "cuda", 64 << 20, 64 << 20)
    target = Target(
        MemoryModel(facts), "llama-server", None, (gpu,), host(16 << 30, 16 << 30), 8 << 20
    )
    cfg, policy = engine_defaults("llama-server"), Policy(fa=fa)
    last = plan(target, cfg, policy).choice
    assert last is not None
    used = []
    for _ in range(3):
        back = retreat(target, cfg, policy, last, "CUDA0")
        assert back is not None and back.after_bytes < back.before_bytes and back.changes
        used.append(back.before_bytes)
        last = back.result.choice
    assert used == sorted(used, reverse=True) and len(set(used)) == 3


def test_nothing_smaller_is_none() -> None:
    facts = build_facts(read_model(str(FIXTURES / "dense-llama.gguf")))
    target = Target(MemoryModel(facts), "llama-server", None, (), host(16 << 30, 16 << 30), 0)
    cfg, policy = engine_defaults("llama-server"), Policy(ctx=256, kv="f16", fa="on")
    last = plan(target, cfg, policy).choice
    assert last is not None
    back = retreat(target, cfg, policy, last, "CPU")
    while back is not None:
        last = back.result.choice
        back = retreat(target, cfg, policy, last, "CPU")
    assert back is None
