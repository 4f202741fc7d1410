"""The CPU's matrix throughput per quantization type, measured with llama.cpp's own kernels (an
edge: ctypes into the ggml libraries llama-cpp-python ships; cached with the host probe).

A float32 BLAS product says little about how fast llama.cpp multiplies by Q4_K or Q8_0 weights: each
type has its own dot-product kernel, and on x86 with AVX2 (ARM with i8mm/dotprod) Q4_0 and Q4_K
weights are repacked into interleaved blocks with their own matrix kernels
(ggml/src/ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type). So, per type, one thread
computes ggml_mul_mat of a weight of that type (zeros: integer kernels do not care) with
- one float32 column, the matrix-vector product of generating a token (`decode`), and
- a 512-column batch, the matrix product of a prompt ubatch (`prompt`),
with the weight placed as llama.cpp places it: in the first of the CPU device's extra buffer types
that supports the product (the repack buffer; llama-model-loader.cpp, select_weight_buft), else the
plain CPU buffer. The figure kept is the best of a few rounds, in FLOP/s per thread (2 x N x K x
columns / seconds). The weight (a few MiB) stays in the caches: this measures arithmetic.

Generating a token streams every weight from memory through the same kernel, and that is neither
the bandwidth probe's pure read nor the kernel's in-cache arithmetic: one core running
ggml_vec_dot_q8_0_q8_0 over a weight in DRAM reached 0.44-0.48 of what the same core's numpy
max-reduction read, and ggml_vec_dot_q5_0_q8_0 0.22-0.29 (a 2-core Xeon VM, AVX2 build), where the
larger of the two (read or arithmetic) would say 1.0 and 0.78; the core's loads wait on the
dequantize-and-dot work ahead of them. So each type is also measured `stream`ing: the
matrix-vector product with a weight of STREAM_BYTES (far beyond the last-level cache, as the
bandwidth probe's buffer), written once (a page never written maps to one zero page, which the
caches hold), at 1, 2, 4, … threads up to one per CPU, in bytes of weight per second.

Attention over the cache is its own kernel: ggml_flash_attn_ext with F16 K and V (llama.cpp's
default cache type; ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16: one query row per
head runs ggml_compute_forward_flash_attn_ext_f16_one_chunk, a dot product with each cached K row,
an online softmax and a multiply-add of each V row; a batch of queries takes the tiled path). Its
speed per cell depends on the CPU far more than a matrix product's (expf per cell, F16 V accumulated
in F16), so it is measured too, at one GQA shape (head size 128, 8 query heads over 2 KV heads):
`decode` one query over 4096 cells, `prompt` 512 queries over 512 cells, in FLOP/s per thread
counted as the speed model counts them (2 x n_head x (head_k + head_v) per cell and query).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# ggml_type values (ggml/include/ggml.h, enum ggml_type) of the types measured
TYPES: dict[str, int] = {
    "f16": 1,
    "q4_0": 2,
    "q5_0": 6,
    "q8_0": 8,
    "q4_K": 12,
    "q5_K": 13,
    "q6_K": 14,
    "bf16": 30,
    "mxfp4": 39,
}
# decode: a 2048 x 4096 weight (a few MiB: in the caches); prompt: 128 x 4096 by 512 columns; the
# best of several rounds, so that on a busy machine one that ran undisturbed counts. Every row
# length is a multiple of 256, as every type's block needs (ggml aborts otherwise)
K_DECODE, N_DECODE, K_PROMPT, N_PROMPT, BATCH = 4096, 2048, 4096, 128, 512
ROUNDS_DECODE, ROUNDS_PROMPT = 12, 8
# flash attention: head size, query heads, KV heads; cells for one query / for a 512-query batch
FA_HEAD, FA_N_HEAD, FA_N_HEAD_KV, FA_CELLS_DECODE, FA_CELLS_PROMPT = 128, 8, 2, 4096, 512
ATTENTION = "flash_attn_ext"  # its key next to the weight types' in the probe's figures
# streaming: a weight of this many bytes (as host_probe.PROBE_BYTES), rows of K_DECODE; the best of
# ROUNDS_STREAM after a warm-up, per thread count
STREAM_BYTES, ROUNDS_STREAM = 256 << 20, 3
STREAMS = "streams"  # its key in the probe's figures: {type: [[threads, bytes/s], ...]}

_vp, _i64, _int, _sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_size_t


class _InitParams(ctypes.Structure):
    # ggml_init_params
    _fields_ = [
        ("mem_size", _sz),
        ("mem_buffer", _vp),
        ("no_alloc", ctypes.c_bool),
    ]


class ProbeUnavailable(Exception):
    """The ggml libraries are missing or lack a function: the speed model falls back to the BLAS
    rate."""


def thread_counts(n_cpu: int) -> list[int]:
    """The thread counts the probe measures: 1, 2, 4, … below n_cpu, and n_cpu."""
    counts, n = [], 1
    while n < n_cpu:
        counts.append(n)
        n *= 2
    return [*counts, max(n_cpu, 1)]


def _libs() -> tuple[Any, Any]:
    try:
        import llama_cpp
    except ImportError as e:
        raise ProbeUnavailable(f"llama-cpp-python is not installed ({e})") from e
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    try:
        base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        cpu = ctypes.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise ProbeUnavailable(f"ggml libraries not found in {libdir} ({e})") from e
    sigs: list[tuple[Any, str, Any, list[Any]]] = [
        (base, "ggml_init", _vp, [_InitParams]),
        (base, "ggml_free", None, [_vp]),
        (base, "ggml_new_tensor_2d", _vp, [_vp, _int, _i64, _i64]),
        (base, "ggml_mul_mat", _vp, [_vp, _vp, _vp]),
        (base, "ggml_new_tensor_3d", _vp, [_vp, _int, _i64, _i64, _i64]),
        (
            base,
            "ggml_flash_attn_ext",
            _vp,
            [_vp, _vp, _vp, _vp, _vp, ctypes.c_float, ctypes.c_float, ctypes.c_float],
        ),
        (base, "ggml_new_graph", _vp, [_vp]),
        (base, "ggml_build_forward_expand", None, [_vp, _vp]),
        (base, "ggml_nbytes", _sz, [_vp]),
        (base, "ggml_row_size", _sz, [_int, _i64]),
        (base, "ggml_tensor_overhead", _sz, []),
        (base, "ggml_graph_overhead", _sz, []),
        (base, "ggml_backend_alloc_ctx_tensors_from_buft", _vp, [_vp, _vp]),
        (base, "ggml_backend_buffer_free", None, [_vp]),
        (base, "ggml_backend_tensor_set", None, [_vp, _vp, _sz, _sz]),
        (base, "ggml_backend_reg_dev_get", _vp, [_vp, _sz]),
        (base, "ggml_backend_reg_get_proc_address", _vp, [_vp, ctypes.c_char_p]),
        (base, "ggml_backend_dev_supports_op", ctypes.c_bool, [_vp, _vp]),
        (base, "ggml_backend_free", None, [_vp]),
        (base, "ggml_backend_graph_compute", _int, [_vp, _vp]),
        (cpu, "ggml_backend_cpu_init", _vp, []),
        (cpu, "ggml_backend_cpu_set_n_threads", None, [_vp, _int]),
        (cpu, "ggml_backend_cpu_reg", _vp, []),
        (cpu, "ggml_backend_cpu_buffer_type", _vp, []),
    ]
    for lib, name, restype, argtypes in sigs:
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise ProbeUnavailable(f"ggml lacks {name}") from e
        fn.restype, fn.argtypes = restype, argtypes
    return base, cpu


def _extra_bufts(base: Any, cpu: Any, dev: int) -> list[int]:
    """The CPU device's extra buffer types (repack, AMX, KleidiAI), NULL-terminated, in llama.cpp's
    order."""
    addr = base.ggml_backend_reg_get_proc_address(
        cpu.ggml_backend_cpu_reg(), b"ggml_backend_dev_get_extra_bufts"
    )
    if not addr:
        return []
    fn = ctypes.CFUNCTYPE(ctypes.POINTER(_vp), _vp)(addr)
    arr = fn(dev)
    out, i = [], 0
    while arr and arr[i]:
        out.append(int(arr[i]))
        i += 1
    return out


def _best_seconds(
    base: Any,
    cpu: Any,
    backend: int,
    ctx: int,
    out: int,
    inputs: Sequence[int],
    threads: int,
    rounds: int,
) -> float:
    """Zero `inputs` (a repack buffer repacks a weight as it is set), build the graph of `out` in
    ctx, then compute it on `threads` threads: a warm-up, then the fastest of `rounds`, in
    seconds."""
    for t in inputs:
        n = base.ggml_nbytes(t)
        base.ggml_backend_tensor_set(t, ctypes.create_string_buffer(n), 0, n)
    graph = base.ggml_new_graph(ctx)
    base.ggml_build_forward_expand(graph, out)
    return _timed(base, cpu, backend, graph, threads, rounds)


def _timed(base: Any, cpu: Any, backend: int, graph: int, threads: int, rounds: int) -> float:
    """The fastest of `rounds` computations of `graph` on `threads` threads, after a warm-up, in
    seconds. One thread: each round's wall time, or its CPU time where that is less: on a busy
    machine the thread waits for a core (the wall time grows, the CPU time does not), and the
    figures are kept for every later plan, which is for free cores. More threads: the wall time,
    as they share the memory only when they run at once."""
    cpu.ggml_backend_cpu_set_n_threads(backend, threads)
    base.ggml_backend_graph_compute(backend, graph)  # warm up
    best = float("inf")
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        base.ggml_backend_graph_compute(backend, graph)
        wall, used = time.perf_counter() - t0, time.process_time() - c0
        best = min(best, wall, used if threads == 1 and used > 0 else wall)
    return best


def measure(
    type_id: int, columns: int, rows: int, k: int, threads: int = 1, rounds: int = 3
) -> float:
    """FLOP/s of ggml_mul_mat(weight rows x k of type_id, columns float32 columns) on `threads`
    threads."""
    (seconds,) = _mul_mat_seconds(type_id, columns, rows, k, (threads,), rounds)
    return 2 * k * rows * columns / seconds


def measure_stream(type_id: int, counts: Sequence[int], rounds: int = ROUNDS_STREAM) -> list[float]:
    """Bytes of weight per second the matrix-vector product (one token) reads from memory, at each
    thread count of `counts`: a weight of STREAM_BYTES in K_DECODE-long rows, as llama.cpp places
    it."""
    base, _ = _libs()
    rows = max(STREAM_BYTES // base.ggml_row_size(type_id, K_DECODE), 1)
    size = base.ggml_row_size(type_id, K_DECODE) * rows
    return [size / t for t in _mul_mat_seconds(type_id, 1, rows, K_DECODE, counts, rounds)]


def _mul_mat_seconds(
    type_id: int, columns: int, rows: int, k: int, counts: Sequence[int], rounds: int
) -> list[float]:
    """Seconds of ggml_mul_mat(weight rows x k of type_id, columns float32 columns) at each thread
    count of `counts`, the weight written once."""
    base, cpu = _libs()
    dev = base.ggml_backend_reg_dev_get(cpu.ggml_backend_cpu_reg(), 0)
    meta = base.ggml_tensor_overhead() * 8 + base.ggml_graph_overhead()
    plain = cpu.ggml_backend_cpu_buffer_type()
    backend = cpu.ggml_backend_cpu_init()
    ctxs: list[int] = []
    buffers: list[int] = []
    try:
        for buft in [
            *_extra_bufts(base, cpu, dev),
            plain,
        ]:  # a fresh context per try: tensors keep their data
            ctx_w, ctx_io = (
                base.ggml_init(_InitParams(meta, None, True)),
                base.ggml_init(_InitParams(meta, None, True)),
            )
            ctxs += [ctx_w, ctx_io]
            w = base.ggml_new_tensor_2d(ctx_w, type_id, k, rows)
            x = base.ggml_new_tensor_2d(ctx_io, 0, k, columns)
            y = base.ggml_mul_mat(ctx_io, w, x)
            wbuf = base.ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, buft)
            if wbuf:
                buffers.append(wbuf)
                if buft == plain or base.ggml_backend_dev_supports_op(dev, y):
                    break
        else:
            raise ProbeUnavailable("could not allocate the weight")
        io = base.ggml_backend_alloc_ctx_tensors_from_buft(ctx_io, plain)
        if not io:
            raise ProbeUnavailable("could not allocate the activations")
        buffers.append(io)
        for t in (w, x):  # zeros, written once (a repack buffer repacks the weight as it is set)
            n = base.ggml_nbytes(t)
            base.ggml_backend_tensor_set(t, ctypes.create_string_buffer(n), 0, n)
        graph = base.ggml_new_graph(ctx_io)
        base.ggml_build_forward_expand(graph, y)
        return [_timed(base, cpu, backend, graph, n, rounds) for n in counts]
    finally:
        for b in buffers:
            base.ggml_backend_buffer_free(b)
        base.ggml_backend_free(backend)
        for c in ctxs:
            base.ggml_free(c)


def measure_attention(queries: int, cells: int, threads: int = 1, rounds: int = 3) -> float:
    """FLOP/s of ggml_flash_attn_ext (F32 queries, F16 K and V, no mask) over `cells` cached cells
    for `queries` query rows per head, at the FA_* shape, on `threads` threads."""
    (rate,) = _attention_rates(queries, cells, (threads,), rounds)
    return rate


def _attention_rates(queries: int, cells: int, counts: Sequence[int], rounds: int) -> list[float]:
    """measure_attention at each thread count of `counts`, the tensors written once."""
    base, cpu = _libs()
    meta = base.ggml_tensor_overhead() * 8 + base.ggml_graph_overhead()
    plain = cpu.ggml_backend_cpu_buffer_type()
    backend = cpu.ggml_backend_cpu_init()
    ctx = base.ggml_init(_InitParams(meta, None, True))
    buf = None
    try:
        q = base.ggml_new_tensor_3d(ctx, 0, FA_HEAD, queries, FA_N_HEAD)  # ggml_type F32
        k = base.ggml_new_tensor_3d(ctx, 1, FA_HEAD, cells, FA_N_HEAD_KV)  # F16
        v = base.ggml_new_tensor_3d(ctx, 1, FA_HEAD, cells, FA_N_HEAD_KV)
        y = base.ggml_flash_attn_ext(ctx, q, k, v, None, FA_HEAD**-0.5, 0.0, 0.0)
        buf = base.ggml_backend_alloc_ctx_tensors_from_buft(ctx, plain)
        if not buf:
            raise ProbeUnavailable("could not allocate the attention tensors")
        for t in (q, k, v):
            n = base.ggml_nbytes(t)
            base.ggml_backend_tensor_set(t, ctypes.create_string_buffer(n), 0, n)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, y)
        flops = 2 * FA_N_HEAD * 2 * FA_HEAD * cells * queries
        return [flops / _timed(base, cpu, backend, graph, n, rounds) for n in counts]
    finally:
        if buf:
            base.ggml_backend_buffer_free(buf)
        base.ggml_backend_free(backend)
        base.ggml_free(ctx)


@contextmanager
def _quiet(base: Any) -> Iterator[None]:
    """ggml's own log (it reports each repack) silenced meanwhile and restored after."""
    log_fn = ctypes.CFUNCTYPE(None, _int, ctypes.c_char_p, _vp)
    old_cb, old_ud = _vp(), _vp()
    base.ggml_log_get.argtypes, base.ggml_log_set.argtypes = (
        [ctypes.POINTER(_vp), ctypes.POINTER(_vp)],
        [_vp, _vp],
    )
    base.ggml_log_get(ctypes.byref(old_cb), ctypes.byref(old_ud))
    quiet = log_fn(lambda level, text, ud: None)
    base.ggml_log_set(ctypes.cast(quiet, _vp), None)
    try:
        yield
    finally:
        base.ggml_log_set(old_cb, old_ud)


def measure_types(
    types: Sequence[str] = tuple(TYPES), progress: Callable[[str], None] | None = None
) -> dict[str, dict[str, float]]:
    """{type: {"decode": FLOP/s, "prompt": FLOP/s}} per thread, and the same for ATTENTION (flash
    attention over an F16 cache); types ggml cannot multiply are left out."""
    base, _ = _libs()
    out: dict[str, dict[str, float]] = {}
    with _quiet(base):
        for name in types:
            if progress:
                progress(name)
            try:
                out[name] = {
                    "decode": measure(TYPES[name], 1, N_DECODE, K_DECODE, 1, ROUNDS_DECODE),
                    "prompt": measure(TYPES[name], BATCH, N_PROMPT, K_PROMPT, 1, ROUNDS_PROMPT),
                }
            except ProbeUnavailable:
                if not out and name == types[0]:
                    raise
        if progress:
            progress(ATTENTION)
        try:
            out[ATTENTION] = {
                "decode": measure_attention(1, FA_CELLS_DECODE, 1, ROUNDS_DECODE),
                "prompt": measure_attention(BATCH, FA_CELLS_PROMPT, 1, ROUNDS_PROMPT),
            }
        except ProbeUnavailable:
            pass
    return out


def measure_streams(
    counts: Sequence[int], types: Sequence[str] = tuple(TYPES)
) -> dict[str, list[list[float]]]:
    """{type: [[threads, bytes/s], …]}: the matrix-vector product streaming a weight of that type
    from memory (measure_stream) at each thread count of `counts`; types ggml cannot multiply are
    left out. ATTENTION: [[threads, FLOP/s], …] of flash attention for one query over a cache of
    STREAM_BYTES (far past the caches, as a deep context is), at the FA_* shape."""
    base, _ = _libs()
    out: dict[str, list[list[float]]] = {}
    # flash attention over a cache of STREAM_BYTES (K and V) for one query, as a token at depth
    fa_cells = STREAM_BYTES // (2 * FA_N_HEAD_KV * FA_HEAD * 2)
    with _quiet(base):
        for name in [*types, ATTENTION]:
            try:
                rates = (
                    _attention_rates(1, fa_cells, counts, ROUNDS_STREAM)
                    if name == ATTENTION
                    else measure_stream(TYPES[name], counts)
                )
            except ProbeUnavailable:
                continue
            # more threads never stream slower (llama.cpp splits the rows among them): a count
            # that did was disturbed, as host_probe.probe's bandwidth curve says
            best = 0.0
            out[name] = []
            for n, r in zip(counts, rates, strict=True):
                best = max(best, r)
                out[name].append([n, best])
    return out


PR_SET_PDEATHSIG = 1  # linux/prctl.h
# host_probe's pid, to catch a parent that died before prctl ran
PARENT_ENV = "LLAMAFIT_PROBE_PARENT"


def die_with_parent() -> None:
    """On Linux: SIGKILL this probe when llamafit dies, however it dies (SIGTERM during the
    first-run host probe left it running); exit now if llamafit is already gone (its pid is in
    $LLAMAFIT_PROBE_PARENT)."""
    import ctypes
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and os.getppid() != int(parent):
        raise SystemExit(1)


def main() -> int:
    """`python -m llamafit.machine.kernel_probe`: the figures as JSON on stdout (host_probe runs
    this in a child process, so that a ggml abort cannot take llamafit down; it dies with
    llamafit)."""
    import json
    import sys

    die_with_parent()

    try:
        rates = measure_types()
        streams = measure_streams(thread_counts(max(os.cpu_count() or 1, 1)))
    except ProbeUnavailable as e:
        print(json.dumps({"error": str(e)}))
        return 1
    figures: dict[str, object] = {name: [r["decode"], r["prompt"]] for name, r in rates.items()}
    print(json.dumps({**figures, STREAMS: streams}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
