"""How fast a configuration will run: generation and prompt tokens/s (pure; docs/speed.md).

Generation (one token at a time) runs the whole graph once per token
(ggml_backend_sched_graph_compute: one split per device, one after another). Per device, time
per token = the bytes it reads / (its bandwidth x the share its backend reaches on that memory
class) + a fixed cost per layer it computes (kernel launches, synchronisation, the graph's own work:
Efficiency.layer_seconds). Bytes read per token:
- every weight tensor the graph uses, except token_embd (a row lookup; a tied output reads it as the
  output matrix), on the device that holds it (placement.py, -ot rules included);
- of the routed experts (`*_exps`) only n_expert_used / n_expert; shared experts (`*_shexp`) fully;
- the KV cache in use: K and V of every filled cell of every layer (SWA layers at most n_swa cells),
  padded to 256 cells as llama_kv_cache::get_n_kv does; recurrent state read and written once;
- the range: an empty context (fastest) to a full slot (slowest).
The CPU's part of a partial offload reads at the host probe's bandwidth and is also bound by its
arithmetic (llama.cpp's kernels, timed by the kernel probe).

Prompt processing at large batches is compute-bound (rough): 2 FLOPs per active weight per token
plus attention (2 x n_head x (head_k + head_v) per cell in use), over the device's throughput x a
measured efficiency. With a GPU, llama.cpp runs large batches of host-resident weights on the GPU
too (ggml_backend_sched op offload, ggml/src/ggml-backend.cpp: batch >= 32), copying those weights
over PCIe once per ubatch. Figures are for a 512-token prompt into an empty context (llama-bench's
pp512).

Efficiency factors and their sources live in EFFICIENCY; `scripts/bench/bench_speed.py` measures
them (llama-bench on this machine) and fits them (the public llama-bench results of
fixtures/speed/train.csv), and checks them on the held-out rows of fixtures/speed/heldout.csv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..facts.tensor_names import is_expert
from ..machine.devices import DeviceSpec
from ..machine.rates import AttentionRate, KernelRate, Rate
from ..memory.kv import layer_cell_bytes
from ..memory.model import MemoryModel
from ..memory.overrides import Rules
from ..memory.overrides import buffer_device as _buffer_device
from ..memory.placement import CPU, LayerMap, tensor_layer
from ..memory.resolve import ResolvedConfig
from ..memory.weights import active_gpus as _active_gpus
from ..units import pad

KV_PAD = 256  # llama_kv_cache::get_padding → n_kv is a multiple of 256 cells
PP_TOKENS = 512  # prompt figures are for llama-bench's pp512


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achieved / roofline, per backend: generation (of the memory bandwidth) and prompt (of the
    FLOP rate). On the CPU a token is also bounded by arithmetic: `decode` is the share of the
    host's FLOP rate its matrix-vector products reach, `attention` the share attention over the
    cache reaches (F16 K/V, softmax: far below matrix speed). None: not modelled (GPUs:
    memory-bound). With the kernel probe's figures the CPU uses those instead of `decode`, and
    `attention_kernel` / `prompt_attention_kernel` (shares of the flash attention kernel's measured
    rate) instead of `attention`."""

    generation: float
    prompt: float
    source: str
    decode: float | None = None
    attention: float | None = None
    # with llama.cpp's kernels measured (kernel_probe.py): the share of the flash attention kernel's
    # rate (ggml_flash_attn_ext, one query / a 512-query batch, in the caches) that attention over
    # the cache reaches in a real run, generating a token and in a prompt
    attention_kernel: float | None = None
    prompt_attention_kernel: float | None = None
    # the fixed cost of a token, per layer on the device: kernel launches, synchronisation and the
    # graph's overhead, which bandwidth does not explain (seconds; token_seconds)
    layer_seconds: float = 0.0
    # how far a measurement may lie from the estimate, as a share of it: the printed range. From
    # the fit's residuals (scripts/bench/bench_speed.py), wider where its rows were few
    band: float = 0.2
    # the CPU with the kernel probe's streaming figures (KernelRate.stream): the share of them a
    # token's weights are read at. 1: the probe runs llama.cpp's own matrix-vector kernel over a
    # weight in memory, which is what a token does; this machine's runs scale it (calibration)
    stream: float = 1.0


def token_seconds(read_bytes: float, layers: int, bandwidth: float, eff: Efficiency) -> float:
    """Seconds one device spends on a generated token: its reads at the achieved bandwidth, plus
    the fixed cost of its layers (kernel launches and synchronisation: ggml_backend_graph_compute
    runs each layer's ops one after another, which a small model cannot hide behind reads)."""
    return read_bytes / (bandwidth * eff.generation) + layers * eff.layer_seconds


def efficiency_key(table: Mapping[str, Efficiency], backend: str, memory: str | None) -> str:
    """The EFFICIENCY entry of a backend on a memory class: `cuda-hbm`, `metal`, … (the backend's
    own where its class has none)."""
    key = f"{backend}-{memory}" if memory else backend
    if key in table:
        return key
    if backend in table:
        return backend
    return "cpu" if backend == "cpu" else "vulkan"


# cpu: with the kernel probe's streaming figures (KernelRate.stream, AttentionRate.stream:
# llama.cpp's own kernels reading a weight, and a deep cache, from memory) a token's weights and
# attention go at those rates x `stream` (1: the probe runs what a token runs; docs/speed.md, "The
# CPU"). The rest is for what they do not cover (a type not measured, the cache's reads, a host
# without the probe): measured by scripts/bench/bench_speed.py: llama-bench (Gemma 3 270M Q4_K_M,
# 1 and 2 threads, depths 0/1024/4096) on two shared 2-core x86 VMs (Intel Ice Lake; AMD EPYC Zen
# 4), against the host probe read at the same thread count around each run. generation: the
# achieved share of the probe's bandwidth at depth 0 ("mem"): 0.40-0.67 over 12 runs, median 0.50
# (the public CPU row implies 0.61; 0.54 held); a third VM (Xeon, AVX2 build) reached 0.33-0.42,
# which the per-type streaming rates explain (its Q5_0 and Q8_0 kernels read slower than numpy).
# attention_kernel (without the deep-cache figure): the share of the probe's flash attention rate
# that attention reached between depth 0 and depths 1024/4096: 0.33-2.0 over 13 runs, median 0.6
# (the Intel VM about 0.45, the AMD one mostly above 1); prompt_attention_kernel likewise
# for pp512: 0.33-0.98 over 8 runs, median 0.6. decode / attention / prompt are for a host without
# the kernel probe (BLAS fallback).
# GPUs: `bench_speed.py --public-only` fits t = layers x layer_seconds + bytes / (bandwidth x
# generation) per backend and memory class to the public llama-bench results of
# fixtures/speed/train.csv (least squares on the relative error; docs/speed.md), and checks them on
# fixtures/speed/heldout.csv, which none of these numbers comes from. band: the 90th percentile of
# the leave-one-device-out errors (at least 10%, at most 40%); a class with one device takes 30%.
# prompt: the median share of the maker's FP16 TFLOPS that pp512 reached over the rows of train.csv
# with a pp figure (CUDA 0.29 over 23 rows, 0.09-0.59; Metal 0.63 over 10); Vulkan and ROCm, with
# one row or none, take CUDA's.
_FIT = "public llama-bench results (fixtures/speed/train.csv; scripts/bench/bench_speed.py)"
EFFICIENCY: dict[str, Efficiency] = {
    # prompt > 1 and decode: llama.cpp's int8 dot products beat the probe's float32 numpy matmul;
    # attention (F16 K/V, softmax, one token) reaches a tenth of it
    "cpu": Efficiency(
        0.54,
        3.0,
        "llama-bench vs the host probe on two 2-core x86 VMs (scripts/bench/bench_speed.py)",
        decode=0.74,
        attention=0.09,
        attention_kernel=0.6,
        prompt_attention_kernel=0.6,
    ),
    # 28 rows, 12 GDDR cards (Pascal to Blackwell), 1B-70B, builds of 2023-2026
    "cuda": Efficiency(0.79, 0.29, f"CUDA, GDDR: {_FIT}", layer_seconds=43e-6, band=0.25),
    # A100 80GB PCIe and H100 PCIe, 7B and 70B: launches and synchronisation weigh more at HBM speed
    "cuda-hbm": Efficiency(0.80, 0.29, f"CUDA, HBM: {_FIT}", layer_seconds=153e-6, band=0.15),
    # a class whose rows come from one device takes its parent's constants (one device is no
    # evidence for a class) and a wider band: GB10 (DGX Spark) CUDA's
    "cuda-unified": Efficiency(
        0.79, 0.29, f"CUDA, unified memory: CUDA's ({_FIT})", layer_seconds=43e-6, band=0.3
    ),
    # ROCm is ggml-cuda built with HIP: CUDA's (its rows: one RX 6700 XT)
    "rocm": Efficiency(0.79, 0.29, f"ROCm: CUDA's ({_FIT})", layer_seconds=43e-6, band=0.3),
    "rocm-hbm": Efficiency(
        0.80, 0.29, f"ROCm, HBM: CUDA's on HBM ({_FIT})", layer_seconds=153e-6, band=0.3
    ),
    # 16 rows, 8 chips from M1 to M5: unified memory
    "metal": Efficiency(0.84, 0.63, f"Metal: {_FIT}", layer_seconds=144e-6, band=0.35),
    # 5 rows, 4 cards (RTX 2080 Ti, 4090, 5090, RX 7900 XTX) of builds from 2025: the 5090 reaches
    # half its bandwidth, the others three quarters
    "vulkan": Efficiency(0.75, 0.29, f"Vulkan: {_FIT}", layer_seconds=29e-6, band=0.4),
}
DEFAULT_PCIE = Rate(25e9, "PCIe 4.0 x16, about 25 GB/s achieved (assumed)")


@dataclass(frozen=True)
class SpeedInputs:
    """The machine side, one entry per device of Target.gpus (None: unknown), then the host.

    host_bandwidth is what every core reads together; host_bandwidth_by_threads the probe's figures
    at some thread counts ((threads, bytes/s), ascending): one core cannot reach all of the memory
    bandwidth, so the CPU's reads use the figure at n_threads, the threads llama.cpp computes with
    (0: every core). host_flops was measured with host_flops_threads threads (0: as many as
    n_threads) and scales with the thread count."""

    gpu_bandwidth: tuple[Rate | None, ...]
    gpu_flops: tuple[Rate | None, ...]
    host_bandwidth: Rate
    host_flops: Rate
    pcie: Rate = DEFAULT_PCIE
    efficiency: Mapping[str, Efficiency] = None  # type: ignore[assignment]  # default: EFFICIENCY
    calibrated: str | None = None  # what earlier runs changed (speed_calibration.py)
    host_bandwidth_by_threads: tuple[tuple[int, float], ...] = ()
    n_threads: int = 0
    host_flops_threads: int = 0
    cpu_kernels: tuple[
        KernelRate, ...
    ] = ()  # llama.cpp's matrix kernels per weight type, one thread each
    cpu_attention: AttentionRate | None = None  # llama.cpp's flash attention kernel, one thread
    # per GPU, (low, high) bytes/s and FLOP/s where the rate is an assumption rather than known (a
    # GPU given by size: the catalog cards of that size); the point rates above lie between them
    gpu_bandwidth_range: tuple[tuple[float, float] | None, ...] = ()
    gpu_flops_range: tuple[tuple[float, float] | None, ...] = ()
    # per GPU, its memory class (catalog.CatalogEntry.memory: gddr, hbm, unified, host); None or
    # missing: the backend's usual one
    gpu_memory: tuple[str | None, ...] = ()

    def efficiency_for(self, backend: str, memory: str | None = None) -> Efficiency:
        table = self.efficiency if self.efficiency is not None else EFFICIENCY
        return table.get(efficiency_key(table, backend, memory)) or EFFICIENCY["vulkan"]

    def memory_of(self, gpu: int) -> str | None:
        return self.gpu_memory[gpu] if gpu < len(self.gpu_memory) else None

    def host_bandwidth_at(self) -> Rate:
        """The host's bandwidth with n_threads threads reading: the probe's figure at that count,
        linear between two measured counts, the last one past them (saturated); every core's without
        a curve."""
        points, n = self.host_bandwidth_by_threads, self.n_threads
        if not points or n <= 0:
            return self.host_bandwidth
        value = bandwidth_at(points, n)
        return Rate(value, f"{self.host_bandwidth.source}, {n} thread{'s' if n > 1 else ''}")

    def host_flops_at(self) -> Rate:
        """The host's FLOP rate with n_threads threads: the measured rate x n_threads / its
        threads."""
        n, measured = self.n_threads, self.host_flops_threads
        if n <= 0 or measured <= 0 or n == measured:
            return self.host_flops
        value = self.host_flops.value * min(n, measured) / measured
        return Rate(value, f"{self.host_flops.source}, x {min(n, measured)}/{measured} threads")


def bandwidth_at(points: Sequence[tuple[int, float]], threads: int) -> float:
    """Bytes/s at `threads` from figures measured at some thread counts: the measured figure, linear
    between the two nearest counts, the first below them (one thread reads no faster than the first
    count measured) and the last one above them (more threads than measured: saturated)."""
    pts = sorted(points)
    if threads <= pts[0][0]:
        return pts[0][1]
    for (n0, v0), (n1, v1) in zip(pts, pts[1:], strict=False):
        if threads <= n1:
            return v0 + (v1 - v0) * (threads - n0) / (n1 - n0)
    return pts[-1][1]


@dataclass(frozen=True, slots=True)
class DeviceRead:
    """What one device reads per generated token, and how fast."""

    device: str
    backend: str
    weight_bytes: int
    kv_bytes_empty: int  # at the first token (one 256-cell block of KV)
    kv_bytes_full: int  # with the slot's context full
    bandwidth: Rate
    efficiency: float
    efficiency_source: str
    seconds: tuple[float, float] = (0.0, 0.0)  # per token: empty, full context
    bound: str = "memory"  # memory | compute (at an empty context)
    # FLOP/s attention over the cache runs at (CPU); None: memory-bound only
    attention_rate: float | None = None
    # the fixed cost of its layers per token (Efficiency.layer_seconds x its layers), in seconds
    fixed_seconds: float = 0.0
    band: float = 0.2  # the share a measurement may lie from its estimate (Efficiency.band)
    # the CPU: the weights charged at llama.cpp's kernels streaming them (KernelRate.stream), and
    # the rate they come to together (bytes / their seconds); 0: none
    streamed_bytes: int = 0
    streamed_rate: float = 0.0


@dataclass(frozen=True)
class SpeedEstimate:
    generation_tps: tuple[float, float]  # (full context, empty context): low, high
    prompt_tps: float | None  # pp512 into an empty context; rough
    bytes_per_token: tuple[int, int]  # (empty, full)
    flops_per_token: int  # weights only, at an empty context
    n_ctx_seq: int  # the fill of "full"
    devices: tuple[DeviceRead, ...]
    prompt_source: str
    calibrated: str | None = None  # set when earlier runs' timings replaced the efficiency
    n_threads: int = 0  # the host threads the CPU figures are for (0: every core)

    @property
    def band(self) -> float:
        """The generation range's half-width: the widest of its devices' (Efficiency.band)."""
        return max((d.band for d in self.devices), default=GENERATION_BAND)


# How far a measured speed may lie from the estimate, as a share of it: generation, each
# backend's Efficiency.band (GENERATION_BAND where no device says: +-20 %, the target the CPU runs
# met at every depth); prompt +-40 %, rough: the CPU's pp512 came within -5 % to +37 %, and a GPU's from its
# spec-sheet TFLOPS.
GENERATION_BAND = 0.2
PROMPT_BAND = 0.4


@dataclass(frozen=True, slots=True)
class SpeedBand:
    """[low, high] of each figure: the model's error (GENERATION_BAND, PROMPT_BAND) around the
    estimate at the lowest and the highest assumed rates. `turn_seconds`: one turn (presets.Turn) —
    its prompt read at the prompt rate after `context` cells, its tokens generated at the fill they
    end at."""

    generation_empty: tuple[float, float]
    generation_full: tuple[float, float]
    prompt: tuple[float, float] | None
    turn_seconds: tuple[float, float] | None
    turn: tuple[int, int, int]  # (context, prompt, generated) of the turn, clamped to the slot
    assumed: bool  # a rate is an assumption (SpeedInputs.gpu_bandwidth_range)
    share: float = GENERATION_BAND  # the model's error on these devices (Efficiency.band)
    calibrated: bool = False  # this machine's runs scaled the estimate and narrowed the share


def with_rates(inputs: SpeedInputs, end: int) -> SpeedInputs:
    """`inputs` with each assumed GPU rate at the low (end 0) or the high (end 1) end of its
    range."""
    bws = tuple(
        Rate(r[end], bw.source) if bw is not None and r is not None else bw
        for bw, r in zip(
            inputs.gpu_bandwidth,
            _ranges(inputs.gpu_bandwidth_range, inputs.gpu_bandwidth),
            strict=True,
        )
    )
    flops = tuple(
        Rate(r[end], f.source) if f is not None and r is not None else f
        for f, r in zip(
            inputs.gpu_flops, _ranges(inputs.gpu_flops_range, inputs.gpu_flops), strict=True
        )
    )
    return replace(inputs, gpu_bandwidth=bws, gpu_flops=flops)


def _ranges(
    ranges: Sequence[tuple[float, float] | None], rates: Sequence[object]
) -> list[tuple[float, float] | None]:
    return [ranges[i] if i < len(ranges) else None for i in range(len(rates))]


def band(low: float, high: float, share: float) -> tuple[float, float]:
    return low * (1 - share), high * (1 + share)


@dataclass(frozen=True, slots=True)
class _Reads:
    weights: dict[int, int]
    flops: dict[int, int]  # 2 x active weight elements, per device holding them
    flops_by_type: dict[int, dict[int, int]]  # the same, per device and ggml type
    bytes_by_type: dict[int, dict[int, int]]  # the weights' bytes, per device and ggml type
    # the output matrix's share: only tokens with logits compute it
    output_by_type: dict[int, dict[int, int]]
    kv_cell: dict[int, int]  # bytes per filled cell, full-attention layers
    swa_cell: dict[int, int]
    state: dict[int, int]  # recurrent state bytes (read + written)
    attn_flops_cell: int  # attention FLOPs per token per filled cell (all layers)
    # attention FLOPs per filled cell, full-attention layers, by the KV's device
    attn_cell: dict[int, int]
    attn_swa_cell: dict[int, int]
    layers: dict[int, int]  # the layers (blocks) each device computes


def _reads(
    model: MemoryModel, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> _Reads:
    """What each device reads per token, once per placement and KV choice (memoized on the model;
    read only)."""
    key = (
        "speed_reads",
        lmap,
        rc.all_overrides,
        rc.type_k,
        rc.type_v,
        rc.flash_attn,
        rc.kv_offload,
        tuple(g.name for g in gpus),
    )
    return model.remember(key, lambda: _count_reads(model, rc, lmap, gpus))


def _read_tensors(model: MemoryModel) -> tuple[tuple[str, int | None, int, int, int], ...]:
    """(name, block or None for the output layer, bytes read, elements, ggml type) of each weight a
    token reads (of the routed experts the n_expert_used / n_expert share), once per model.
    token_embd and the other inputs are left out: a lookup of one row per token."""
    facts = model.facts
    moe = facts.moe
    share = (moe.n_expert_used, moe.n_expert) if moe and moe.n_expert else (1, 1)
    elements = {t.name: t.n_elements for t in facts.tensors}
    types = {t.name: t.ggml_type for t in facts.tensors}
    out = []
    for name, raw, _padded in model.tensors:
        il = tensor_layer(name)
        if il is not None and il < facts.n_layer_all:
            block: int | None = il
        elif name.startswith(("output.", "output_norm.")):
            block = None
        else:
            continue
        n = elements.get(name, 0)
        if is_expert(name):
            raw, n = raw * share[0] // share[1], n * share[0] // share[1]
        out.append((name, block, raw, n, types.get(name, 0)))
    return tuple(out)


def _count_reads(
    model: MemoryModel, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> _Reads:
    facts = model.facts
    devs = [CPU, *range(len(gpus))]
    kv, swa, state = dict.fromkeys(devs, 0), dict.fromkeys(devs, 0), dict.fromkeys(devs, 0)
    # the weights' part depends on the placement alone, not on the KV choice (read only)
    key = ("speed_weight_reads", lmap, rc.all_overrides, tuple(g.name for g in gpus))
    weights, flops, by_type, bytes_by_type, output = model.remember(
        key, lambda: _count_weight_reads(model, rc.all_overrides, lmap, gpus)
    )
    attn = 0
    attn_cell, attn_swa = dict.fromkeys(devs, 0), dict.fromkeys(devs, 0)
    for il in range(facts.n_layer):
        dev = lmap.layers[il] if rc.kv_offload else CPU
        cell = layer_cell_bytes(facts, il, rc.type_k, rc.type_v, flash_attn=rc.flash_attn)
        (swa if facts.swa.is_swa[il] else kv)[dev] += cell
        if facts.has_kv[il]:
            head_k = facts.n_embd_head_k_swa if facts.swa.is_swa[il] else facts.n_embd_head_k
            head_v = facts.n_embd_head_v_swa if facts.swa.is_swa[il] else facts.n_embd_head_v
            per_cell = 2 * facts.n_head[il] * (head_k + head_v)
            attn += per_cell
            (attn_swa if facts.swa.is_swa[il] else attn_cell)[dev] += per_cell
        if facts.is_recurrent[il] and facts.recurrent:
            state[lmap.layers[il]] += 2 * 4 * (facts.recurrent.n_embd_r + facts.recurrent.n_embd_s)
    layers = dict.fromkeys(devs, 0)
    for il in range(facts.n_layer_all):
        layers[lmap.layers[il]] += 1
    return _Reads(
        weights,
        flops,
        by_type,
        bytes_by_type,
        output,
        kv,
        swa,
        state,
        attn,
        attn_cell,
        attn_swa,
        layers,
    )


# _count_weight_reads: per device, the weights' bytes, their FLOPs, both by ggml type, and the
# output matrix's FLOPs by type
_WeightReads = tuple[
    dict[int, int],
    dict[int, int],
    dict[int, dict[int, int]],
    dict[int, dict[int, int]],
    dict[int, dict[int, int]],
]


def _count_weight_reads(
    model: MemoryModel, rules: Rules, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> _WeightReads:
    """_Reads' weight fields, once per placement (-ot rules, devices): what each device reads of
    the weights per token (_read_tensors), and a tied output's token_embd on the output device."""
    facts = model.facts
    devs = [CPU, *range(len(gpus))]
    weights, flops = dict.fromkeys(devs, 0), dict.fromkeys(devs, 0)
    names = {g.name.lower(): i for i, g in enumerate(gpus)}
    targets = model.override_targets(rules)
    types = {t.name: t.ggml_type for t in facts.tensors}
    by_type: dict[int, dict[int, int]] = {d: {} for d in devs}
    bytes_by_type: dict[int, dict[int, int]] = {d: {} for d in devs}
    output: dict[int, dict[int, int]] = {d: {} for d in devs}
    for name, il, raw, n, kind in model.remember(("speed_tensors",), lambda: _read_tensors(model)):
        dev = lmap.layers[il] if il is not None else lmap.output
        target = targets[name]
        if target is not None:
            dev = _buffer_device(target, names)
        weights[dev] += raw
        flops[dev] += 2 * n
        by_type[dev][kind] = by_type[dev].get(kind, 0) + 2 * n
        bytes_by_type[dev][kind] = bytes_by_type[dev].get(kind, 0) + raw
        if name.startswith("output."):
            output[dev][kind] = output[dev].get(kind, 0) + 2 * n
    if model.tied_raw:  # a tied output multiplies by token_embd on the output device
        n = 2 * facts.n_embd * facts.n_vocab
        weights[lmap.output] += model.tied_raw
        flops[lmap.output] += n
        kind = types.get("token_embd.weight", 0)
        by_type[lmap.output][kind] = by_type[lmap.output].get(kind, 0) + n
        tied = bytes_by_type[lmap.output]
        tied[kind] = tied.get(kind, 0) + model.tied_raw
        output[lmap.output][kind] = output[lmap.output].get(kind, 0) + n
    return weights, flops, by_type, bytes_by_type, output


def _cells(n: int, n_swa: int, swa: bool, padding: int = KV_PAD) -> int:
    """KV cells a token attends over at fill n: llama_kv_cache::get_n_kv pads the used cells to 256.
    The CPU's flash attention skips the masked ones (ggml-cpu/ops.cpp,
    ggml_compute_forward_flash_attn_ext_f16_one_chunk: `if (mv == -INFINITY) continue;`), so there
    padding=1: only the filled cells (an SWA layer's window)."""
    return pad(max(min(n, n_swa) if swa else n, 1), padding)


def _padding(dev: int, flash_attn: bool) -> int:
    return 1 if dev == CPU and flash_attn else KV_PAD


def _device_rows(
    r: _Reads,
    gpus: Sequence[DeviceSpec],
    inputs: SpeedInputs,
    fills: tuple[int, int],
    n_swa: int,
    flash_attn: bool,
) -> list[DeviceRead] | None:
    rows = []
    for dev in [*range(len(gpus)), CPU]:
        p = _padding(dev, flash_attn)
        kv = [
            r.kv_cell[dev] * _cells(n, n_swa, False, p)
            + r.swa_cell[dev] * _cells(n, n_swa, True, p)
            for n in fills
        ]
        w = r.weights[dev] + r.state[dev]
        if not (w or kv[1]):
            continue
        bw: Rate | None
        if dev == CPU:
            bw, backend = inputs.host_bandwidth_at(), "cpu"
        else:
            bw, backend = (
                (inputs.gpu_bandwidth[dev] if dev < len(inputs.gpu_bandwidth) else None),
                gpus[dev].backend,
            )
        if bw is None:
            return None
        eff = inputs.efficiency_for(backend, None if dev == CPU else inputs.memory_of(dev))
        fixed = r.layers[dev] * eff.layer_seconds if dev != CPU else 0.0
        memory = [token_seconds(w + k, 0, bw.value, eff) + fixed for k in kv]
        seconds, bound, charged = memory, "memory", None
        streamed_bytes, streamed = 0, 0.0
        attn_rate = _attention_rate(
            inputs, eff.attention_kernel, stream=eff.stream
        ) or inputs.host_flops_at().value * (eff.attention or 0)
        if (
            dev == CPU and (eff.decode or inputs.cpu_kernels) and attn_rate
        ):  # arithmetic bounds a token too
            rate = inputs.host_flops_at().value
            # the weight types whose kernel was measured streaming from memory (kernel_probe.
            # measure_streams): their bytes at that rate, which holds the kernel's arithmetic and
            # its reads together (a core that dequantizes and dots reads slower than one that only
            # reads: the reads wait on the work ahead of them, so neither the bandwidth nor the
            # arithmetic alone, nor the larger of the two, is a token's time)
            streams = _stream_rates(inputs, r.bytes_by_type[dev])
            streamed = sum(r.bytes_by_type[dev][k] / (v * eff.stream) for k, v in streams.items())
            streamed_bytes = sum(r.bytes_by_type[dev][k] for k in streams)
            flops_rest = {k: n for k, n in r.flops_by_type[dev].items() if k not in streams}
            matmul = _matmul_seconds(flops_rest, inputs, "decode", rate * (eff.decode or 0))
            weights = (w - streamed_bytes) / (bw.value * eff.generation)
            reads = [k / (bw.value * eff.generation) for k in kv]  # the cache's filled cells
            attn = [_attn_flops(r, dev, n, n_swa, p) / attn_rate for n in fills]
            # each op is bound by its own resource: without a streaming figure, the matrix
            # products stream the weights while the kernel computes, so they take the longer of
            # the two; attention (ggml_flash_attn_ext, its own op) reads the cache's filled cells
            # while it computes over them, the longer of the two again
            seconds = [
                streamed + max(weights, matmul) + max(k, a)
                for k, a in zip(reads, attn, strict=True)
            ]
            bound = "compute" if matmul > weights else "memory"
            charged = attn_rate
        rows.append(
            DeviceRead(
                "CPU" if dev == CPU else gpus[dev].name,
                backend,
                w,
                kv[0],
                kv[1],
                bw,
                eff.generation,
                eff.source,
                (seconds[0], seconds[1]),
                bound,
                charged,
                fixed,
                eff.band,
                streamed_bytes,
                streamed_bytes / streamed if streamed else 0.0,
            )
        )
    return rows


def _attn_flops(r: _Reads, dev: int, fill: int, n_swa: int, padding: int = KV_PAD) -> int:
    """Attention FLOPs of one token that sees `fill` cells (SWA layers at most their window)."""
    return r.attn_cell[dev] * _cells(fill, n_swa, False, padding) + r.attn_swa_cell[dev] * _cells(
        fill, n_swa, True, padding
    )


def _attention_rate(
    inputs: SpeedInputs, share: float | None, kind: str = "decode", stream: float = 1.0
) -> float | None:
    """FLOP/s of attention over the cache on the CPU: `share` of what llama.cpp's flash attention
    kernel reached in the probe (ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16: one
    query per head while generating, the tiled path for a prompt batch) x the threads; None without
    that figure. Generating, where the probe measured the kernel over a cache far past the caches
    (AttentionRate.stream): that rate at n_threads x `stream` (Efficiency.stream) instead: a deep
    cache is read from memory, which the in-cache figure does not see (here 9-12 GFLOP/s a
    thread from memory against 19-23 in the caches)."""
    fa = inputs.cpu_attention
    if fa is not None and kind == "decode" and fa.stream:
        return bandwidth_at(fa.stream, inputs.n_threads or inputs.host_flops_threads or 1) * stream
    if fa is None or not share:
        return None
    return (
        (fa.decode if kind == "decode" else fa.prompt)
        * (inputs.n_threads or inputs.host_flops_threads or 1)
        * share
    )


def _stream_rates(inputs: SpeedInputs, types: Mapping[int, int]) -> dict[int, float]:
    """{ggml type: bytes/s} of the types in `types` whose kernel the probe measured streaming a
    weight from memory, at n_threads (bandwidth_at: linear between measured counts, saturated past
    the last)."""
    n = inputs.n_threads or inputs.host_flops_threads or 1
    return {
        k.ggml_type: bandwidth_at(k.stream, n)
        for k in inputs.cpu_kernels
        if k.stream and k.ggml_type in types
    }


def _matmul_seconds(
    flops_by_type: Mapping[int, int], inputs: SpeedInputs, kind: str, fallback: float
) -> float:
    """Seconds the CPU's matrix products take: per weight type, its FLOPs over the kernel's measured
    rate x the threads; a type the kernel probe did not measure at `fallback` FLOP/s (the BLAS rate
    x an efficiency; 0: not counted)."""
    rates = {k.ggml_type: k.decode if kind == "decode" else k.prompt for k in inputs.cpu_kernels}
    threads = inputs.n_threads or inputs.host_flops_threads or 1
    t = 0.0
    for kind_id, n in flops_by_type.items():
        rate = rates.get(kind_id)
        if rate:
            t += n / (rate * threads)
        elif fallback:
            t += n / fallback
    return t


def _seconds(rows: Sequence[DeviceRead], full: bool) -> float:
    return sum(d.seconds[1] if full else d.seconds[0] for d in rows)


def estimate(
    model: MemoryModel,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    inputs: SpeedInputs,
) -> SpeedEstimate | None:
    """Tokens/s for one resolved configuration, from an empty context to a full slot; None when a
    device that holds data has no known bandwidth (an RPC worker)."""
    gpus = _active_gpus(rc, gpus)
    r = _reads(model, rc, lmap, gpus)
    rows = _device_rows(r, gpus, inputs, (0, rc.n_ctx_seq), model.facts.swa.n_swa, rc.flash_attn)
    if not rows:
        return None
    t_empty, t_full = _seconds(rows, False), _seconds(rows, True)
    prompt, source = _prompt_tps(r, rc, gpus, inputs, n_swa=model.facts.swa.n_swa)
    total_empty = sum(d.weight_bytes + d.kv_bytes_empty for d in rows)
    total_full = sum(d.weight_bytes + d.kv_bytes_full for d in rows)
    return SpeedEstimate(
        (1 / t_full, 1 / t_empty),
        prompt,
        (total_empty, total_full),
        sum(r.flops.values()),
        rc.n_ctx_seq,
        tuple(rows),
        source,
        inputs.calibrated,
        inputs.n_threads,
    )


def estimate_turn(
    model: MemoryModel,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    inputs: Sequence[SpeedInputs],
    gen_fill: int,
    prompt_depth: int,
) -> list[tuple[SpeedEstimate, float, float | None] | None]:
    """For each of `inputs`: the estimate (as `estimate`), generation tokens/s at `gen_fill` cells
    and prompt tokens/s after `prompt_depth` (as `estimate_at`), reading the model's tensors
    once."""
    gpus = _active_gpus(rc, gpus)
    r = _reads(model, rc, lmap, gpus)
    n_swa = model.facts.swa.n_swa
    out: list[tuple[SpeedEstimate, float, float | None] | None] = []
    for i in inputs:
        rows = _device_rows(r, gpus, i, (0, rc.n_ctx_seq), n_swa, rc.flash_attn)
        at = _device_rows(r, gpus, i, (gen_fill, gen_fill), n_swa, rc.flash_attn)
        if not rows or not at:
            out.append(None)
            continue
        prompt, source = _prompt_tps(r, rc, gpus, i, n_swa=n_swa)
        est = SpeedEstimate(
            (1 / _seconds(rows, True), 1 / _seconds(rows, False)),
            prompt,
            (
                sum(d.weight_bytes + d.kv_bytes_empty for d in rows),
                sum(d.weight_bytes + d.kv_bytes_full for d in rows),
            ),
            sum(r.flops.values()),
            rc.n_ctx_seq,
            tuple(rows),
            source,
            i.calibrated,
            i.n_threads,
        )
        out.append(
            (
                est,
                1 / _seconds(at, False),
                _prompt_tps(r, rc, gpus, i, depth=prompt_depth, n_swa=n_swa)[0],
            )
        )
    return out


def estimate_at(
    model: MemoryModel,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    inputs: SpeedInputs,
    fill: int,
    lmap: LayerMap | None = None,
) -> tuple[float, float | None, int] | None:
    """(generation tokens/s, prompt tokens/s, bytes per generated token) with `fill` cells in use —
    what llama-bench's tgN at -d D measures with fill = D + N/2. Without lmap: everything on the
    CPU."""
    from ..memory.placement import layer_map

    gpus = _active_gpus(rc, gpus)
    lmap = lmap or layer_map(model.facts.n_layer_all, 0, ())
    r = _reads(model, rc, lmap, gpus)
    rows = _device_rows(r, gpus, inputs, (fill, fill), model.facts.swa.n_swa, rc.flash_attn)
    if not rows:
        return None
    prompt = _prompt_tps(r, rc, gpus, inputs, depth=fill, n_swa=model.facts.swa.n_swa)[0]
    return 1 / _seconds(rows, False), prompt, sum(d.weight_bytes + d.kv_bytes_empty for d in rows)


def generation_range_at(
    model: MemoryModel,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    inputs: SpeedInputs,
    fill: int,
    lmap: LayerMap | None = None,
) -> tuple[float, float, float] | None:
    """(low, estimate, high) generation tokens/s with `fill` cells in use: the range the plan prints
    (every assumed rate at its low and its high end, the model's error, Efficiency.band, around
    them), which a measurement is judged against (`--verify`). None: no estimate."""
    from ..memory.placement import layer_map

    gpus = _active_gpus(rc, gpus)
    lmap = lmap or layer_map(model.facts.n_layer_all, 0, ())
    r = _reads(model, rc, lmap, gpus)
    n_swa = model.facts.swa.n_swa
    ends = [
        _device_rows(r, gpus, i, (fill, fill), n_swa, rc.flash_attn)
        for i in (with_rates(inputs, 0), inputs, with_rates(inputs, 1))
    ]
    if any(not rows for rows in ends):
        return None
    low, mid, high = (1 / _seconds(rows or [], False) for rows in ends)
    share = max(d.band for rows in ends for d in rows or [])
    return low * (1 - share), mid, high * (1 + share)


def _prompt_tps(
    r: _Reads,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    inputs: SpeedInputs,
    depth: int = 0,
    n_swa: int = 0,
) -> tuple[float | None, str]:
    """pp512 after `depth` cells: FLOPs over throughput, plus PCIe copies of host weights per
    ubatch."""
    attn = r.attn_flops_cell * (depth + PP_TOKENS // 2)  # the average token sees half the prompt
    if not gpus:
        eff = inputs.efficiency_for("cpu")
        flops = inputs.host_flops_at()
        if not inputs.cpu_kernels:
            t = (sum(r.flops.values()) + attn) / (flops.value * eff.prompt)
            return 1 / t, f"host throughput {flops.source} x {eff.prompt:.2f} ({eff.source})"
        # a prompt computes logits for its last token only (llama_batch_allocr; llm_graph_context::
        # build_inp_out_ids): the output matrix is not part of a prompt token's work
        out = r.output_by_type[CPU]
        weights = {kind: n - out.get(kind, 0) for kind, n in r.flops_by_type[CPU].items()}
        t = _matmul_seconds(weights, inputs, "prompt", flops.value * eff.prompt)
        attn_rate = _attention_rate(inputs, eff.prompt_attention_kernel, "prompt")
        if attn_rate:
            t += (
                _attn_flops(r, CPU, depth + PP_TOKENS // 2, n_swa, _padding(CPU, rc.flash_attn))
                / attn_rate
            )
        else:
            t += attn / (flops.value * eff.prompt)
        n = inputs.n_threads or inputs.host_flops_threads or 1
        return 1 / t, (
            f"llama.cpp's matrix kernels per weight type, measured here x {n} "
            f"thread{'s' if n > 1 else ''} ({eff.source})"
        )
    flops0 = inputs.gpu_flops[0] if inputs.gpu_flops else None
    if flops0 is None or any(f is None for f in inputs.gpu_flops):
        return None, "GPU throughput unknown"
    t = 0.0
    for dev, spec in enumerate(gpus):
        f = inputs.gpu_flops[dev] if dev < len(inputs.gpu_flops) else None
        if f is None:
            return None, "GPU throughput unknown"
        eff = inputs.efficiency_for(spec.backend, inputs.memory_of(dev))
        work = r.flops[dev] + (r.flops[CPU] if dev == 0 else 0) + attn * (dev == 0)
        t += work / (f.value * eff.prompt)
    ub = max(min(rc.n_ubatch, PP_TOKENS), 1)
    # op offload: host weights cross PCIe once per ubatch
    copy = r.weights[CPU] / inputs.pcie.value / ub
    t += copy
    eff0 = inputs.efficiency_for(gpus[0].backend, inputs.memory_of(0))
    note = f"; host weights over PCIe ({inputs.pcie.source})" if r.weights[CPU] else ""
    return 1 / t, f"GPU throughput {flops0.source} x {eff0.prompt:.2f} ({eff0.source}){note}"


def with_efficiency(inputs: SpeedInputs, backend: str, eff: Efficiency) -> SpeedInputs:
    table = dict(inputs.efficiency if inputs.efficiency is not None else EFFICIENCY)
    table[backend] = eff
    return replace(inputs, efficiency=table)
