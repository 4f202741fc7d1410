"""Compute buffers from the graph itself: the graph llama.cpp reserves (template.py), placed on the
backends by the scheduler's split (sched.py; all on the CPU for a CPU-only server), allocated by a
replay of ggml-alloc (alloc.py). Where the replay covers a model and a config, its figure is the
compute buffer llama.cpp allocates, to the byte; elsewhere it returns None and the hand-derived
peaks of memory/compute.py stand.

With GPUs (`device_compute_bytes`) the replay covers Vulkan devices and RPC workers: their
supports_op, offload_op and graph_optimize are ported (backends/). Metal is covered on one device
at any offload for every family from its first replayed build, with its alloc sizes, supports_op
and reorder by build (metal_graph_ok). CUDA and ROCm (backends/cuda.py) are covered for every
family from its first replayed build where cuda_graph_ok takes the graph (supports_op ported for
every node; a node it refuses, as a FLASH_ATTN_EXT without a kernel under -fa on, runs on the CPU
where the scheduler puts it; flash attention over a non-F16 cache from rule cuda_fa_f16_in_buffer
on adds F16 copies by the kernel the device's compute capability picks, DeviceSpec.cc, an unknown
one taken as copying), MoE included (MUL_MAT_ID, expert offload by offload_op, the fusion alloc
deps and the shared-expert move of ggml_backend_cuda_graph_optimize by build:
backends/cuda_optimize.py, which raises UnplacedRule where a rule's outcome is not known, as for a
shared expert of a 4-to-8-token ubatch on a device of unknown compute capability from rule
cuda_shared_expert to cuda_shared_expert_any_batch), any offload and any number of devices of one
backend, -sm row included (before rule cuda_no_split_buffers). Elsewhere the hand model stays.

llama_context::sched_reserve (src/llama-context.cpp) reserves the prompt-sized graph, the
one-token graph and the prompt-sized one again (reserve.reserves), each through
ggml_backend_sched_reserve into one ggml_gallocr per scheduler, whose buffer grows to the largest;
ggml_backend_sched_get_buffer_size reports it after the last (alloc.Gallocr.reserve_n). Two of
them are known without an allocation: the second prompt-sized one allocates what the first did
(Gallocr.again: it regrows a chunked buffer the one-token graph shrank), and the one-token graph
is not allocated where its tensors' sizes on each buffer sum to no more than the buffer has
(Gallocr.holds: it then reallocates nothing; it is still built and split for those sizes).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial, wraps
from typing import ParamSpec, TypeVar

from ...builds import since
from ...facts.hparams import ModelFacts
from ...machine.devices import DeviceSpec
from ...reader.ggml_types import GGML_TYPE_NAMES
from .alloc import Allocation, AllocError, AllocRecord, BufferType, Gallocr
from .backends.blas import blas_backend
from .backends.cpu import CPU, cpu_backend
from .backends.cuda import (
    cuda_backend,
    cuda_buffer_type,
    cuda_graph_ok,
    cuda_host_buffer_type,
)
from .backends.cuda_fattn import CUDA_FA_HEADS, FA_KV_ANY, FA_KV_SAME
from .backends.cuda_optimize import UnplacedRule
from .backends.metal import metal_backend, metal_buffer_type, metal_graph_ok
from .backends.rpc import RPC_ALIGNMENT_DEFAULT, rpc_backend
from .backends.vulkan import (
    VK_MAP_ALIGNMENT_DEFAULT,
    VK_STORAGE_ALIGNMENT_BOUND,
    UnknownDeviceLimit,
    suballocation_block,
    vulkan_backend,
    vulkan_buffer_type,
    vulkan_host_buffer_type,
)
from .cparams import ResolvedConfig
from .models import MODELS, REPLAY_SINCE, Model, graph_hparams_of
from .nodes import PIN_CPU, TENSOR_FIELDS, USAGE_WEIGHTS, Graph, Tensor, with_field
from .params import GraphBuildError, GraphConfig
from .periodic import Shortened, cut_marks, left_out_bytes, marks, proves, shorten, unproven
from .reserve import Reserve, reserve_configs
from .sched import (
    GGML_SCHED_MAX_COPIES,
    HOST_BUFTS,
    Backend,
    SchedError,
    SplitGraph,
    SplitRecord,
    resplit,
    split_graph,
)
from .template import build_graph, count_graph, count_short


def covers_model(facts: ModelFacts, build: int | None) -> bool:
    """Whether the replay models this model's graphs at this build (CPU only; most configs):
    the architecture is in models.MODELS, and its builder follows the build (Model.covers:
    from Model.since, outside Model.gap)."""
    model = MODELS.get(facts.architecture)
    return model is not None and model.covers(build)


def _checked_0317(facts: ModelFacts) -> bool:
    """models.Model.checked_0317 of this model's architecture."""
    model: Model | None = MODELS.get(facts.architecture)
    return model is not None and model.checked_0317


def covers(facts: ModelFacts, rc: ResolvedConfig) -> bool:
    """Whether the replay models this model's graph under this config and build (CPU only):
    with --embeddings the encoders' (models.Model.encoder: build_pooling over their t_embd)."""
    if not covers_model(facts, rc.build):
        return False
    return not rc.embeddings or MODELS[facts.architecture].encoder


# ggml.c ggml_hash_size: the primes after the powers of two it picks the size of a hash set from
_HASH_PRIMES = tuple(
    int(p)
    for p in (
        "2 3 5 11 17 37 67 131 257 521 1031 2053 4099 8209 16411 32771 65537 131101 262147 524309 "
        "1048583 2097169 4194319 8388617 16777259 33554467 67108879 134217757 268435459 536870923 "
        "1073741827 2147483659"
    ).split()
)


def ggml_hash_size(min_sz: int) -> int:
    """ggml.c ggml_hash_size: the smallest of its primes at least min_sz (min_sz | 1 past them)."""
    return next((p for p in _HASH_PRIMES if p >= min_sz), min_sz | 1)


def graph_max_nodes(facts: ModelFacts, n_tokens: int, n_tensors: int | None = None) -> int:
    """llama_context::graph_max_nodes (src/llama-context.cpp) for the archs of models.MODELS,
    n_tokens = min(n_ctx, n_ubatch) (sched_reserve): qwen3next and qwen35moe get
    max(40 x n_tokens, 32 x llama_model::n_tensors()), the others the default branch,
    max(1024, 8 x n_tensors()). n_tensors is the model's tensors as loaded (MemoryModel.
    loaded_tensors: a TENSOR_DUPLICATED tensor in a second buffer type adds one); None: one per
    GGUF tensor. No backend samplers, no LoRA."""
    n = len(facts.tensors) if n_tensors is None else n_tensors
    model = MODELS.get(facts.architecture)
    if model is not None and model.nodes_per_token:
        return max(40 * n_tokens, 32 * n)
    return max(1024, 8 * n)


@dataclass(frozen=True, slots=True)
class SchedOverflow:
    """The reserve graph has more tensors than ggml_backend_sched's hash set holds: llama.cpp
    aborts ("fatal error" in ggml_hash_find_or_insert, from ggml_backend_sched_split_graph) while
    reserving, before anything runs."""

    n_tensors: int  # the prompt-sized graph's tensors (nodes and leafs)
    capacity: int  # ggml_hash_size(graph_max_nodes)
    max_nodes: int  # llama_context::graph_max_nodes


def scheduler_overflow(
    facts: ModelFacts, rc: ResolvedConfig, n_tensors: int | None = None
) -> SchedOverflow | None:
    """Whether this config's graph overflows the scheduler's hash set, where the replay covers it.

    ggml_backend_sched_new (ggml/src/ggml-backend.cpp) sizes its hash set by
    ggml_hash_size(graph_max_nodes), and ggml_backend_sched_split_graph puts every tensor of the
    graph it splits in it (hash_id: nodes, leafs, their sources); ggml_hash_find_or_insert aborts
    when it is full. llama_context::graph_reserve's split-only probes (resolve_fused_ops) split
    before sched_reserve's own GGML_ASSERT on the size is reached. The prompt-sized reserve is the
    largest graph (the one-token graph drops the output-row selection). A quantized K or V cache
    adds a Hadamard rotation to every attention layer (llama_kv_cache: attn_rot_k / attn_rot_v;
    two MUL_MATs and four RESHAPEs per layer and cache): Granite 3.0 1B-A400M (242 tensors, a hash
    set of 2053) has 1775 tensors with an f16 cache, 1920 with one of K or V quantized and 2065
    with both, where llama-server b11434 aborts."""
    n = reserve_graph_tensors(facts, rc)
    return None if n is None else overflow_of(facts, rc, n, n_tensors)


def reserve_graph_tensors(facts: ModelFacts, rc: ResolvedConfig) -> int | None:
    """The prompt-sized reserve graph's tensors (nodes and leafs), where the replay covers it:
    template.count_graph: the build that the replay of this config then takes with its buffers
    (count_direct would build it once more); for a model with long runs of alike blocks, the
    short graph's count with the units it leaves out (template.count_short)."""
    if not covers(facts, rc):
        return None
    # full offload only moves pins (GraphContext.pin), never a tensor: as the replay's config
    pp = reserve_configs(rc, full_offload=rc.n_gpu_layers > facts.n_layer_all)[0][1]
    hp = graph_hparams_of(facts)
    try:
        short = shorten(facts, pp)
        n = None if short is None else count_short(facts, pp, hp, short)
        return count_graph(facts, pp, hp) if n is None else n
    except GraphBuildError:
        return None


def overflow_of(
    facts: ModelFacts, rc: ResolvedConfig, n_graph: int, n_tensors: int | None = None
) -> SchedOverflow | None:
    """scheduler_overflow for a graph of n_graph tensors and a model of n_tensors loaded."""
    max_nodes = graph_max_nodes(facts, min(rc.n_ctx, rc.n_ubatch), n_tensors)
    capacity = ggml_hash_size(max_nodes)
    return SchedOverflow(n_graph, capacity, max_nodes) if n_graph > capacity else None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was after): a replay makes
    hundreds of thousands of tensors, none in a cycle, and each full collection walks every
    object alive (a plan of the 94-layer MoE spent about 15% of its time in them). What the block
    made and kept then joins the oldest generation, as a long-lived cache would. Nothing is
    lost: objects are freed by reference counting as before, and a cycle at the next full
    collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not gc.get_freeze_count():
                # what the block made joins the oldest generation (frozen, then unfrozen: both
                # only move lists), which only a full collection reads; in the youngest, the
                # first collection after the block would read every object it made
                gc.freeze()
                gc.unfreeze()
            gc.enable()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _gc_paused(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """fn, run with paused_gc."""

    @wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with paused_gc():
            return fn(*args, **kwargs)

    return run


@_gc_paused
def cpu_compute_bytes(facts: ModelFacts, rc: ResolvedConfig) -> int | None:
    """The CPU backend's compute buffer of a CPU-only llama-server, or None where the graph is not
    modelled (GraphBuildError: an architecture or a variant models/ does not build). A model
    with long runs of alike blocks is replayed as its short graph where that proves the full
    one's buffer (periodic.py)."""
    if not covers(facts, rc):
        return None
    configs = reserve_configs(rc)
    short = shorten(facts, configs[0][1])
    return _short_then_full(facts, short, partial(_cpu_reserves, facts, configs))


def _cpu_reserves(
    facts: ModelFacts,
    configs: Sequence[tuple[Reserve, GraphConfig]],
    short: Shortened | None,
) -> int | None | _Unproven:
    """cpu_compute_bytes' reserves of the full graph (short None) or of the short one, which
    must prove the full one's (_UNPROVEN where it does not)."""
    hp = graph_hparams_of(facts)
    gallocr = Gallocr((CPU,))
    sizes: tuple[int, ...] = (0,)
    made: dict[GraphConfig, Allocation] = {}
    try:
        for reserve, config in configs:
            if short is not None:
                config = replace(config, layers=short.layers)
            if config in made:
                sizes = gallocr.again(made[config])  # the prompt-sized graph again
                continue
            graph = build_graph(facts, config, hp)
            graph = replace(
                graph,
                node_buffer_ids=(0,) * len(graph.nodes),
                leaf_buffer_ids=(0,) * len(graph.leafs),
            )
            got = _reserve(gallocr, reserve.kind == "tg", graph, None, short)
            if got is None:
                continue  # the one-token graph cannot grow a buffer (Gallocr.holds)
            if isinstance(got, _Unproven):
                return got
            sizes = got
            assert gallocr.last is not None
            made[config] = gallocr.last
    except GraphBuildError:
        return None if short is None else _UNPROVEN
    except AllocError:
        if short is None:
            raise
        return _UNPROVEN
    return sizes[0]


class _Unproven:
    """_device_reserves' and _cpu_reserves' answer where the short graph proves nothing (the
    full one is replayed)."""


_UNPROVEN = _Unproven()


def _short_then_full(
    facts: ModelFacts, short: Shortened | None, run: Callable[[Shortened | None], _R | _Unproven]
) -> _R | None:
    """run(short) where the short graph proves the full one's buffers; else (the model then
    periodic.unproven) run(None), the full graph."""
    if short is not None:
        out = run(short)
        if not isinstance(out, _Unproven):
            return out
        unproven(facts)
    out = run(None)
    return None if isinstance(out, _Unproven) else out


def _reserve(
    gallocr: Gallocr,
    one_token: bool,
    graph: Graph,
    steps: AllocRecord | None,
    short: Shortened | None,
) -> tuple[int, ...] | None | _Unproven:
    """Gallocr.reserve_n of one reserve's (split) graph and its sizes after; None where it is the
    one-token graph and cannot grow a buffer (Gallocr.holds, with the bytes of the units a short
    graph leaves out); _UNPROVEN where a short graph does not prove the full one's buffers
    (periodic.marks, periodic.proves)."""
    if short is None:
        if one_token and gallocr.holds(graph):
            return None
        return gallocr.reserve_n(graph, steps)
    at = marks(graph, short)
    if at is None:
        return _UNPROVEN
    if one_token and gallocr.holds(graph, partial(left_out_bytes, gallocr, graph, short, at)):
        return None
    sizes = gallocr.reserve_n(graph, steps, at)
    return sizes if proves(gallocr.marked, short, graph) else _UNPROVEN


# the backends whose scheduler rules backends/ ports (see the module's docstring)
DEVICE_BACKENDS = frozenset({"vulkan", "rpc", "metal", "cuda", "rocm"})
# CUDA and ROCm (backends/cuda.py): every arch from the build its graph is replayed from
# (models.Model.since), devices of one backend, the graphs cuda_graph_ok takes
CUDA_BACKENDS = frozenset({"cuda", "rocm"})
# Vulkan before REPLAY_SINCE: the checked_0317 archs until the reorder changed after 0.3.17
# (backends.vulkan_optimize.vk_graph_optimize_for). 0.3.17's ggml_backend_vk_device_supports_op
# and offload_op
# take these graphs' ops as b11434's does (vk_supports_op) with caches of VK_OLD_KV and, with
# flash attention, K and V of one type; not with others: its FLASH_ATTN_EXT refused K and V of
# two types and took q4_1, q5_0, q5_1 and iq4_nl only with coopmat2 (a device feature the
# DeviceSpec does not record), its CPY no BF16 to F32. RPC is not covered there: 0.3.17's RPC
# device had no async compute or events (ggml_backend_rpc_device_get_props), so no pipeline
# parallelism.
VK_OLD_UNTIL = "vk_reorder_ssm_conv"
VK_OLD_KV = frozenset({"f16", "f32", "q4_0", "q8_0"})
CPU_DEVICE = -1  # placement.CPU: the host's index in a LayerMap and in the result


@dataclass(frozen=True, slots=True)
class DevicePlacement:
    """Where llama.cpp puts the model's tensors (memory/model.py decides it): the device of each
    block and of the output layer (indexes into the GPUs; CPU_DEVICE the host), the buffer type of
    host weights (CPU_Mapped with mmap, else the first GPU's host buffer type or CPU) and the
    per-tensor buffer types that differ from their layer's (-ot rules, --n-cpu-moe, CPU_REPACK,
    weights kept on the host over a device's tensor limit)."""

    layers: tuple[int, ...]
    output: int
    host_weights: str
    overrides: tuple[tuple[str, str], ...] = ()


def covers_backends(facts: ModelFacts, build: int | None, backends: Sequence[str]) -> bool:
    """Whether the replay models this model's graphs at this build on GPUs of these backends
    (none: CPU only): Vulkan and RPC from REPLAY_SINCE on (b11434's rules); Vulkan alone also
    for the checked_0317 archs before VK_OLD_UNTIL (0.3.17's ggml_vk_graph_optimize,
    backends.vulkan_optimize.vk_graph_optimize_0317; a b8121 Vulkan log of TinyLlama prints
    66.50 MiB, b11434's reorder gives 70.50); Metal, CUDA or ROCm alone (one backend) for every
    arch from its Model.since (Metal's rules by build: backends/metal.py)."""
    if not covers_model(facts, build) or not all(b in DEVICE_BACKENDS for b in backends):
        return False
    if ("vulkan" in backends or "rpc" in backends) and not since(REPLAY_SINCE, build):
        old_vulkan = _checked_0317(facts) and not since(VK_OLD_UNTIL, build)
        if "rpc" in backends or not old_vulkan:
            return False
    if "metal" in backends or CUDA_BACKENDS & set(backends):
        return len(set(backends)) == 1
    return True


def covers_every_config(facts: ModelFacts, build: int | None, backends: Sequence[str]) -> bool:
    """Whether the replay gives the compute buffers of every config (split modes aside) of this
    model and build on GPUs of these backends: the CPU, and Vulkan and RPC from REPLAY_SINCE. Metal,
    CUDA, ROCm, and Vulkan before REPLAY_SINCE, cover some configs only (covers_devices,
    metal_graph_ok, cuda_graph_ok, UnknownDeviceLimit): a calibration record still corrects the
    hand peaks of the others."""
    old_vulkan = "vulkan" in backends and not since(REPLAY_SINCE, build)
    partial = "metal" in backends or bool(CUDA_BACKENDS & set(backends))
    return covers_backends(facts, build, backends) and not partial and not old_vulkan


def covers_devices(facts: ModelFacts, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> bool:
    """Whether the replay models this config on these devices (Vulkan and RPC; Metal on one
    device, any offload: Apple builds add the BLAS backend, backends/blas.py, and arm64's CPU
    backend differs from x86's only in the weights CPU_REPACK takes, memory/repack.py;
    Vulkan before REPLAY_SINCE with caches of
    VK_OLD_KV only, of one type with flash attention; CUDA and ROCm with -sm layer, none or row).
    -sm row on CUDA / ROCm before rule cuda_no_split_buffers: the matrices of a layer lie in its
    device's CUDA<i>_Split buffer (llama-model.cpp make_gpu_buft_list), which only that device's
    backend takes (ggml_backend_cuda_device_supports_buft) and only for MUL_MAT (supports_op):
    every op runs where -sm layer runs it, the rows' partial products in the CUDA pool, and
    without pipeline parallelism (n_copies: -sm layer only)."""
    backends = [g.backend for g in gpus]
    if "metal" in backends and len(gpus) != 1:
        return False
    if "vulkan" in backends and not since(REPLAY_SINCE, rc.build):
        kv = {rc.type_k.name.lower(), rc.type_v.name.lower()}
        if not kv <= VK_OLD_KV or (rc.flash_attn and len(kv) > 1):
            return False
    row = (
        rc.split_mode == "row"
        and set(backends) <= CUDA_BACKENDS
        and not since("cuda_no_split_buffers", rc.build)
    )
    return (
        covers(facts, rc)
        and covers_backends(facts, rc.build, backends)
        and (rc.split_mode in ("layer", "none") or row)
    )


def unknown_cc_devices(rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> tuple[str, ...]:
    """The CUDA / ROCm devices whose compute capability is unknown where it may size their compute
    buffers: flash attention over a non-F16 cache from rule cuda_fa_f16_in_buffer, with a reserve
    graph of at most 2 query rows per KV stream (the prompt's min(n_ctx, n_ubatch), the one-token
    graph's n_seq_max): only there may a device's vector kernel read the cache without the F16
    copies (cuda_fattn.fattn_uses_vec), which cuda_fattn then counts, the most llama.cpp
    allocates."""
    quantized = rc.type_k.name.lower() != "f16" or rc.type_v.name.lower() != "f16"
    if not (rc.flash_attn and quantized and since("cuda_fa_f16_in_buffer", rc.build)):
        return ()
    rows = min(min(rc.n_ctx, rc.n_ubatch), rc.n_seq_max) // max(1, rc.n_stream)
    if rows > 2:
        return ()
    return tuple(g.name for g in gpus if g.backend in CUDA_BACKENDS and g.cc is None)


def scheduler_backends(
    rc: ResolvedConfig, gpus: Sequence[DeviceSpec]
) -> tuple[list[Backend], list[BufferType]]:
    """llama_context's backends in the scheduler's order (src/llama-context.cpp llama_context:
    model.devices, then the CPU) and the buffer type of each one's compute buffer (the CPU's: the
    first device's host buffer type where it has one, Vulkan_Host; RPC has none). They depend on
    the build, the op offload batch and the devices only (_backends)."""
    backends, bufts = _backends(rc.build, rc.op_offload_min_batch, tuple(gpus))
    return list(backends), list(bufts)


def _backends(
    build: int | None, op_offload_min_batch: int, gpus: tuple[DeviceSpec, ...]
) -> tuple[tuple[Backend, ...], tuple[BufferType, ...]]:
    """scheduler_backends of a config with this build and op offload batch on these devices."""
    backends: list[Backend] = []
    bufts: list[BufferType] = []
    for g in gpus:
        if g.backend == "vulkan":
            backends.append(
                vulkan_backend(
                    g.name,
                    max_tensor_bytes=g.max_tensor_bytes,
                    op_offload_min_batch=op_offload_min_batch,
                    build=build,
                    strict_limit=not since(REPLAY_SINCE, build),
                )
            )
            align = g.buffer_alignment or VK_STORAGE_ALIGNMENT_BOUND
            bufts.append(vulkan_buffer_type(g.name, align, suballocation_block(g)))
        elif g.backend == "metal":
            backends.append(metal_backend(g.name, build, op_offload_min_batch=op_offload_min_batch))
            bufts.append(metal_buffer_type(g.name, build))
        elif g.backend in CUDA_BACKENDS:
            peers = frozenset(o.name for o in gpus if o.backend == g.backend) - {g.name}
            backends.append(
                cuda_backend(
                    g.name,
                    peers=peers,
                    op_offload_min_batch=op_offload_min_batch,
                    build=build,
                    cc=g.cc,
                )
            )
            bufts.append(cuda_buffer_type(g.name, g.cc, build))
        else:
            backends.append(rpc_backend(g.name))
            bufts.append(BufferType(g.name, g.buffer_alignment or RPC_ALIGNMENT_DEFAULT))
    first = gpus[0] if gpus else None
    if first is not None and first.backend == "metal":
        # Apple builds: the BLAS (Accelerate) device between the GPUs and the CPU (backends/blas.py)
        backends.append(blas_backend(build))
        bufts.append(CPU)
    if first is not None and first.backend == "vulkan":
        backends.append(cpu_backend("Vulkan_Host"))
        map_align = first.host_alignment or VK_MAP_ALIGNMENT_DEFAULT
        bufts.append(vulkan_host_buffer_type(map_align, suballocation_block(first)))
    elif first is not None and first.backend in CUDA_BACKENDS:
        host = cuda_host_buffer_type(first.backend)
        backends.append(cpu_backend(host.name))
        bufts.append(host)
    else:
        backends.append(cpu_backend("CPU"))
        bufts.append(CPU)
    return tuple(backends), tuple(bufts)


def n_copies(facts: ModelFacts, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> int:
    """src/llama-context.cpp llama_context: pipeline parallelism (GGML_SCHED_MAX_COPIES copies of
    every split input) with several devices, every layer and the output offloaded, -sm layer, the
    KV cache offloaded and no tensor overrides, when every device has async compute and events
    (Vulkan, RPC and CUDA do: ggml_backend_vk_device_get_props, ggml_backend_rpc_device_get_props,
    ggml_backend_cuda_device_get_props unless built with GGML_CUDA_NO_PEER_COPY)."""
    parallel = (
        len(gpus) > 1
        and rc.n_gpu_layers > facts.n_layer_all
        and rc.split_mode == "layer"
        and rc.kv_offload
        and not rc.all_overrides
    )
    return GGML_SCHED_MAX_COPIES if parallel else 1


_USAGE = TENSOR_FIELDS.index("usage")
_BACKEND = TENSOR_FIELDS.index("backend")


# _placed's tensors: (the tensor it came from, field, value) -> (that tensor, the changed one)
_PLACED: dict[tuple[int, int, object], tuple[Tensor, Tensor]] = {}
_PLACED_KEPT = 100_000


def _placed(
    graph: Graph,
    backends: Sequence[Backend],
    device_of_layer: Sequence[str],
) -> Graph:
    """The graph as the scheduler receives it: weights flagged USAGE_WEIGHTS (the model's buffers,
    llama_model::load_tensors), the KV cache ANY, and the pins of llama_context::graph_get_cb (a
    "norm" of layer il to that layer's device where its backend supports the op) and of
    build_attn_mha (PIN_CPU: the CPU backend). A tensor changed here is made once per tensor it
    comes from and change (_PLACED): the graphs of one config at other cache sizes share them, as
    they share the rest (sched.resplit tells them apart by identity first)."""
    tensors = list(graph.tensors)
    index = {b.name: b for b in backends}
    cpu = backends[-1].name
    made = _PLACED
    if len(made) > _PLACED_KEPT:
        made.clear()

    def placed(t: Tensor, k: int, value: object) -> Tensor:
        key = (id(t), k, value)
        hit = made.get(key)
        if hit is None or hit[0] is not t:
            hit = made[key] = (t, with_field(t, k, value))
        return hit[1]

    # the tensors to change, found by comprehensions (a plain loop over every tensor costs more)
    weights = [
        i
        for i, t in enumerate(tensors)
        if t.data and t.buffer is not None and not t.name.startswith("cache_")
    ]
    for i in weights:
        tensors[i] = placed(tensors[i], _USAGE, USAGE_WEIGHTS)
    for i in [i for i, t in enumerate(tensors) if t.pin_layer != -1]:
        t = tensors[i]
        if t.pin_layer == PIN_CPU:
            tensors[i] = placed(t, _BACKEND, cpu)
            continue
        name = device_of_layer[t.pin_layer]
        if index[name].supports_op(tensors, i):
            tensors[i] = placed(t, _BACKEND, name)
    return replace(graph, tensors=tuple(tensors))


class Splits:
    """The scheduler's backends for one build, op offload batch and set of devices, and the
    splits of the last few graphs replayed on them (split_graph's SplitRecord), newest last: a graph of
    the same structure (one config at other cache sizes: solver._exact_boundary,
    explain.marginal_costs) is split from them (sched.resplit), and allocated by the steps its
    split graph took (alloc.AllocRecord). The caller keeps one per model and key
    (MemoryModel.remember: gone with the model's memo)."""

    KEPT = 8

    def __init__(
        self, build: int | None, op_offload_min_batch: int, gpus: tuple[DeviceSpec, ...]
    ) -> None:
        self.key = (build, op_offload_min_batch, gpus)
        self.backends, self.bufts = _backends(build, op_offload_min_batch, gpus)
        self.records: list[tuple[object, SplitRecord, AllocRecord]] = []

    def split(
        self, graph: Graph, n_copies: int, op_offload: bool, like: object
    ) -> tuple[SplitGraph, AllocRecord]:
        """split_graph(graph, self.backends, n_copies=n_copies, op_offload=op_offload): through
        resplit from the split of an earlier graph made `like` this one (the same config but for
        the cache sizes), where resplit answers for it; with the AllocRecord to reserve the split
        graph with (Gallocr.reserve_n: that earlier split graph's steps, where they fit)."""
        all_inputs = since("sched_all_inputs", self.key[0])
        options = (n_copies, op_offload, HOST_BUFTS, 0, all_inputs)
        records = self.records
        for k in range(len(records) - 1, -1, -1):
            made, rec, steps = records[k]
            if made == like and rec.options == options:
                out = resplit(rec, graph)
                if out is not None:
                    records.append(records.pop(k))
                    return out, steps
        rec = SplitRecord()
        out = split_graph(
            graph,
            self.backends,
            n_copies=n_copies,
            op_offload=op_offload,
            all_inputs=all_inputs,
            record=rec,
        )
        steps = AllocRecord()
        records.append((like, rec, steps))
        del records[: -self.KEPT]
        return out, steps


def splits_key(
    rc: ResolvedConfig, gpus: Sequence[DeviceSpec]
) -> tuple[int | None, int, tuple[DeviceSpec, ...]]:
    """What the scheduler's backends depend on: Splits(*splits_key(rc, gpus)) fits this config."""
    return (rc.build, rc.op_offload_min_batch, tuple(gpus))


@dataclass(frozen=True, slots=True)
class _Setup:
    """What the scheduler of llama_context gets for one placement: its backends and their compute
    buffer types, the GraphConfig buffer fields and each layer's device."""

    backends: list[Backend]
    bufts: list[BufferType]
    buffers: Mapping[str, object]
    device_of_layer: list[str]


def _setup(
    facts: ModelFacts,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    placement: DevicePlacement,
    splits: Splits | None = None,
) -> _Setup:
    backends, bufts = (
        scheduler_backends(rc, gpus)
        if splits is None
        else (list(splits.backends), list(splits.bufts))
    )
    names = [g.name for g in gpus]

    def device(dev: int) -> str:
        return backends[-1].name if dev == CPU_DEVICE else names[dev]

    def buffer(dev: int) -> str:
        return placement.host_weights if dev == CPU_DEVICE else names[dev]

    layers = placement.layers
    kv = tuple(
        names[d] if d != CPU_DEVICE and rc.kv_offload else "CPU" for d in layers[: facts.n_layer]
    )
    buffers: Mapping[str, object] = {
        "weights": placement.host_weights,
        "layer_weights": tuple(buffer(d) for d in layers),
        "input_weights": placement.host_weights,
        "output_weights": buffer(placement.output),
        "overrides": placement.overrides,
        "kv": "CPU",
        "layer_kv": kv,
        "full_offload": rc.n_gpu_layers > facts.n_layer_all,
    }
    return _Setup(backends, bufts, buffers, [device(d) for d in layers])


# the cells per stream of fa_auto_mismatch's probe graph: one FATTN_KQ_STRIDE (with flash attention
# every build pads the cache to 256 cells, so the sizes the backends' FLASH_ATTN_EXT checks read,
# K's rows modulo 256 on CUDA, are those of any context)
FA_PROBE_CELLS = 256
_LAYER_OF = re.compile(r"^(?:cache_[kv]_l(\d+)|.*-(\d+))(?: \(.*)?$")


def _layer_of(tensors: Sequence[Tensor], i: int) -> int | None:
    """The layer of FLASH_ATTN_EXT node i: the first of its sources' ancestors (Q, K, V, in
    that order, breadth first) named for a layer, "<name>-<il>" by llm_graph_context::cb or the
    layer's cache_k_l<il> (llama.cpp's own check reads the node's name, "__fattn__-<il>" at b8470,
    the fused node's il from b11434)."""
    queue = [s for s in tensors[i].src[:3] if s is not None]
    seen: set[int] = set()
    while queue:
        j = queue.pop(0)
        if j in seen:
            continue
        seen.add(j)
        m = _LAYER_OF.match(tensors[j].name)
        if m:
            return int(m.group(1) or m.group(2))
        t = tensors[j]
        queue += [s for s in t.src if s is not None]
        if t.view_src is not None:
            queue.append(t.view_src)
    return None


def _fa_probe(rc: ResolvedConfig) -> ResolvedConfig:
    """rc as the Flash Attention probe reserves it: with flash attention, FA_PROBE_CELLS cells per
    stream."""
    return replace(
        rc,
        flash_attn=True,
        n_ctx=FA_PROBE_CELLS * rc.n_stream,
        n_ctx_seq=FA_PROBE_CELLS,
        n_swa_cells=FA_PROBE_CELLS if rc.n_swa_cells else 0,
    )


def _cuda_fa_heads_taken(facts: ModelFacts, rc: ResolvedConfig) -> bool:
    """Whether CUDA takes every FLASH_ATTN_EXT of this model without looking at the graph
    (cuda_fattn.fattn_supported): K and V heads of one size with a kernel (CUDA_FA_HEADS, no GQA
    condition), in every layer (the SWA layers' sizes too), no MLA, and cache types it takes
    (an F32 cache reaches the node cast to F16)."""
    if facts.mla is not None:
        return False
    heads = {(facts.n_embd_head_k, facts.n_embd_head_v)}
    if any(facts.swa.is_swa):
        heads.add((facts.n_embd_head_k_swa, facts.n_embd_head_v_swa))
    if not all(k == v and k in CUDA_FA_HEADS for k, v in heads):
        return False
    k, v = (
        ("f16" if t == "f32" else t)
        for t in (GGML_TYPE_NAMES[rc.type_k.id], GGML_TYPE_NAMES[rc.type_v.id])
    )
    if since("cuda_fa_any_kv", rc.build):
        return k in FA_KV_ANY and v in FA_KV_ANY
    return k == v and k in FA_KV_SAME


def fa_refused_layers(
    facts: ModelFacts, rc: ResolvedConfig, gpu: DeviceSpec
) -> tuple[int, ...] | None:
    """The layers whose FLASH_ATTN_EXT node this device's backend refuses (supports_op: CUDA's
    ggml_cuda_get_best_fattn_kernel has no kernel for a 32-wide head; Vulkan's and Metal's their
    head-size and type lists) in the one-token graph with flash attention, every layer on it;
    None where the replay does not cover the device. What decides it is the model's head sizes
    and GQA, the cache types and the build: one answer per device for every placement."""
    probe = replace(_fa_probe(rc), n_gpu_layers=facts.n_layer_all + 1, kv_offload=True)
    if not covers_devices(facts, probe, [gpu]):
        return None
    if gpu.backend == "rpc":
        return ()  # ggml_backend_rpc_device_supports_op takes every op (backends/rpc.py)
    if gpu.backend in CUDA_BACKENDS and _cuda_fa_heads_taken(facts, rc):
        return ()  # no graph needed: every node's heads and types have a kernel
    n = facts.n_layer_all
    placement = DevicePlacement(layers=(0,) * n, output=0, host_weights="CPU")
    s = _setup(facts, probe, [gpu], placement)
    try:
        (_r, config) = reserve_configs(probe, **s.buffers)[1]  # the "tg" reserve
        graph = build_graph(facts, config, graph_hparams_of(facts))
    except GraphBuildError:
        return None
    refused = []
    for i, il in _fa_nodes(graph):
        if il is None:
            return None
        if not s.backends[0].supports_op(graph.tensors, i):
            refused.append(il)
    return tuple(sorted(set(refused)))


def _fa_nodes(graph: Graph) -> Iterator[tuple[int, int | None]]:
    """Each FLASH_ATTN_EXT node of the graph, in graph order, with its layer (_layer_of: None
    where it is not known, which the -fa probes take as no answer)."""
    ts = graph.tensors
    for i in graph.nodes:
        if ts[i].op == "FLASH_ATTN_EXT":
            yield i, _layer_of(ts, i)


def fa_auto_mismatch(
    facts: ModelFacts,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    placement: DevicePlacement,
) -> tuple[int, str, str] | None:
    """-fa auto, as llama_context decides it (src/llama-context.cpp: sched_reserve's "resolve
    automatic Flash Attention use" block at b8470, resolve_fused_ops' Flash Attention probe at
    b11434): it reserves the one-token-per-sequence graph with flash attention and turns it off
    where a FLASH_ATTN_EXT node was placed by the scheduler on another device than its layer's
    (model.dev_layer(il)): a backend whose supports_op refuses the node's head sizes or cache
    types (CUDA's ggml_cuda_get_best_fattn_kernel has no kernel for a 32-wide head), or the
    scheduler's expansion carrying a host layer's node onto a GPU. The first such (layer, the
    layer's device, the node's device), as llama.cpp logs it; None where every node stays with
    its layer, or where the replay does not cover these devices (covers_devices): flash
    attention then stays on, as before this check was ported.

    The probe graph has FA_PROBE_CELLS cells per stream: what the backends check does not depend
    on the context, except Vulkan's size limit on a cache view (DeviceSpec.max_tensor_bytes),
    which is left out here."""
    if not gpus:
        return None  # the CPU backend takes every FLASH_ATTN_EXT: its layers' own device
    probe = _fa_probe(rc)
    if not covers_devices(facts, probe, gpus):
        return None
    s = _setup(facts, probe, gpus, placement)
    try:
        (_r, config) = reserve_configs(probe, **s.buffers)[1]  # the "tg" reserve
    except GraphBuildError:
        return None
    copies = n_copies(facts, probe, gpus)
    return _short_then_full(
        facts, shorten(facts, config), partial(_fa_moved, facts, probe, s, config, copies)
    )


def _fa_moved(
    facts: ModelFacts,
    probe: ResolvedConfig,
    s: _Setup,
    config: GraphConfig,
    copies: int,
    short: Shortened | None,
) -> tuple[int, str, str] | None | _Unproven:
    """fa_auto_mismatch's answer from the full graph (short None) or the short one, which
    answers for the blocks it leaves out where the scheduler placed unit L-1's, L's and R's
    nodes alike at every cut (_placed_alike: the blocks between L and R, alike, are placed as
    they are); _UNPROVEN where it did not."""
    if short is not None:
        config = replace(config, layers=short.layers)
    try:
        graph = _placed(
            build_graph(facts, config, graph_hparams_of(facts)), s.backends, s.device_of_layer
        )
        split = split_graph(graph, s.backends, n_copies=copies, op_offload=probe.op_offload)
    except (GraphBuildError, SchedError):
        return None
    if short is not None and not _placed_alike(graph, split.tensor_backend, short):
        return _UNPROVEN
    for i, il in _fa_nodes(graph):
        if il is None:
            return None
        b = split.tensor_backend[i]
        on = s.backends[b].name if b >= 0 else "none"
        layer = s.device_of_layer[il]
        if on != layer:
            cpu = s.backends[-1].name
            return il, "CPU" if layer == cpu else layer, "CPU" if on == cpu else on
    return None


def _placed_alike(graph: Graph, backend_of: Sequence[int], short: Shortened) -> bool:
    """Whether the short graph's units L-1, L and R (periodic.marks) have their nodes, op for
    op, on the same backends at every cut: the scheduler's passes carry a backend along the
    graph's order, forward and back, so the units left out between L and R, alike, are placed
    as those are."""
    at = marks(graph, short)
    if at is None:
        return False
    ts, nodes = graph.tensors, graph.nodes

    def unit(a: int, b: int) -> list[tuple[str, int]]:
        return [(ts[i].op, backend_of[i]) for i in nodes[a:b]]

    for s_prev, s_l, s_r, s_next in cut_marks(at):
        left = unit(s_l, s_r)
        if left != unit(s_prev, s_l) or left != unit(s_r, s_next):
            return False
    return True


@_gc_paused
def device_compute_bytes(
    facts: ModelFacts,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    placement: DevicePlacement,
    splits: Splits | None = None,
) -> dict[int, int] | None:
    """Each backend's compute buffer (ggml_backend_sched_get_buffer_size after sched_reserve) of a
    llama-server on these GPUs (Vulkan devices, RPC workers) and the CPU: GPU index → bytes, and
    CPU_DEVICE → the CPU backend's (Vulkan_Host with a Vulkan device first). None where the replay
    does not cover the model, the config or the devices (covers_devices, GraphBuildError, a split
    or an allocation llama.cpp would abort on). `splits`: the Splits of splits_key(rc, gpus) that
    earlier replays on these devices kept, to split from (None: split anew).

    A model with long runs of alike blocks is replayed as its short graph (periodic.py) where
    that graph proves the full one's buffers; elsewhere as the full graph."""
    if not gpus or not covers_devices(facts, rc, gpus):
        return None
    if splits is not None and splits.key != splits_key(rc, gpus):
        raise ValueError("device_compute_bytes: splits of other backends")
    s = _setup(facts, rc, gpus, placement, splits)
    configs = reserve_configs(rc, **s.buffers)
    short = shorten(facts, configs[0][1])
    return _short_then_full(
        facts, short, partial(_device_reserves, facts, rc, gpus, s, splits, configs)
    )


def _device_reserves(  # noqa: C901 (one loop over the reserves, its exits kept in it)
    facts: ModelFacts,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    s: _Setup,
    splits: Splits | None,
    configs: Sequence[tuple[Reserve, GraphConfig]],
    short: Shortened | None,
) -> dict[int, int] | None | _Unproven:
    """device_compute_bytes' reserves, of the full graph (short None) or of the short one, whose
    every reserve must prove the full graph's buffers (_UNPROVEN where one does not, or where it
    fails: the full graph then answers)."""
    backends, bufts, device_of_layer = s.backends, s.bufts, s.device_of_layer
    copies = n_copies(facts, rc, gpus)
    metal = any(g.backend == "metal" for g in gpus)
    cuda = any(g.backend in CUDA_BACKENDS for g in gpus)
    hp = graph_hparams_of(facts)
    gallocr = Gallocr(bufts)
    sizes: tuple[int, ...] = ()
    made: dict[GraphConfig, Allocation] = {}
    no = None if short is None else _UNPROVEN
    try:
        for reserve, config in configs:
            if short is not None:
                config = replace(config, layers=short.layers)
            if config in made:
                sizes = gallocr.again(made[config])  # the prompt-sized graph again
                continue
            graph = _placed(build_graph(facts, config, hp), backends, device_of_layer)
            if metal and not metal_graph_ok(graph, rc.build):
                return no
            if cuda and not cuda_graph_ok(graph, rc.build):
                return no
            if splits is None:
                split = split_graph(
                    graph,
                    backends,
                    n_copies=copies,
                    op_offload=rc.op_offload,
                    all_inputs=since("sched_all_inputs", rc.build),
                )
                steps: AllocRecord | None = None
            else:
                like = replace(config, kv_size=0, kv_size_swa=0)
                split, steps = splits.split(graph, copies, rc.op_offload, like)
            got = _reserve(gallocr, reserve.kind == "tg", split.graph, steps, short)
            if got is None:
                continue  # the one-token graph cannot grow a buffer (Gallocr.holds)
            if isinstance(got, _Unproven):
                return got
            sizes = got
            assert gallocr.last is not None
            made[config] = gallocr.last
    except (GraphBuildError, SchedError, AllocError, UnknownDeviceLimit, UnplacedRule):
        return no
    out = {d: sizes[d] for d in range(len(gpus))}
    # the host's: the CPU backend's buffer, which an Apple build's BLAS backend shares (reported
    # under the first of their ids, ggml_gallocr_get_buffer_size)
    out[CPU_DEVICE] = sum(sizes[len(gpus) :])
    return out
