"""The memory model: what llama.cpp allocates on each device for one resolved configuration.

`MemoryModel(facts)` precomputes per-layer sums once (tensors.py: weights by device kind, expert
and dense FFN parts, KV bytes per cell for each cache-type pair), so that `estimate()` is plain
arithmetic: the solver calls it thousands of times. Each part has its module, after llama.cpp's
own: weights and their placement weights.py (src/llama-model.cpp load_tensors), -ot overrides.py,
CPU_REPACK repack.py, KV kv.py (src/llama-kv-cache.cpp + -iswa), recurrent state recurrent.py
(src/llama-memory-recurrent.cpp), the output buffer here (src/llama-context.cpp output_reserve).
Compute buffers come from the replay of the graph (graph/replay.py) or from the estimate
(compute.py with op_offload.py, scaled by calibration.py): MemoryModel._compute says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import NamedTuple

from ..facts.hparams import ModelFacts
from ..machine.devices import DeviceSpec
from ..units import MIB
from .calibration import scaled_compute
from .compute import compute_for_devices
from .graph.replay import (
    DevicePlacement,
    SchedOverflow,
    Splits,
    cpu_compute_bytes,
    device_compute_bytes,
    fa_auto_mismatch,
    fa_refused_layers,
    overflow_of,
    reserve_graph_tensors,
    splits_key,
)
from .kv import kv_bytes
from .op_offload import add_host_ops_of_gpu_layers, add_op_offload
from .overrides import Rules, buffer_device, device_names, override_targets
from .placement import CPU, LayerMap
from .recurrent import recurrent_bytes
from .repack import repack_bytes, repacked_names
from .resolve import ConfigError, ResolvedConfig, settle_flash_attn, since
from .tensors import PADDED_BACKENDS, ModelTensors, ple_with_output
from .usage import Breakdown as Breakdown  # re-exported: the type estimate returns
from .usage import DeviceUsage as DeviceUsage
from .weights import bytes_read_per_token, is_mapped, loaded_tensors, place_weights, ple_device

DEFAULT_RESERVE_BYTES = 1024 * MIB  # common/fit.cpp: --fit-target default, 1024 MiB per device
# DeviceUsage.compute_source: the graph replay's figure, or the hand-derived peaks'
COMPUTE_GRAPH, COMPUTE_ESTIMATE = "graph", "estimate"
# MemoryModel.estimate's hand-derived parts kept per model (apart from remember's memo, which
# holds the replays: these must not push them out)
HAND_SIZE = 8192


class SchedulerOverflowError(ConfigError):
    """llama.cpp would abort while reserving this config's graph: more tensors than its
    scheduler's hash set holds (replay.scheduler_overflow)."""

    def __init__(self, overflow: SchedOverflow) -> None:
        self.overflow = overflow
        super().__init__(
            f"llama.cpp would abort reserving this graph: {overflow.n_tensors} tensors, more than "
            f"the scheduler's hash set of {overflow.capacity} holds (graph_max_nodes "
            f"{overflow.max_nodes}); a quantized KV cache adds a rotation per layer: use f16 for K "
            "or V"
        )


class MemoryModel(ModelTensors):
    """Per-model precomputation; `estimate` turns a resolved config and devices into a Breakdown."""

    def __init__(self, facts: ModelFacts) -> None:
        super().__init__(facts)
        # estimate's hand-derived parts (replay=False) by config and devices, before scaling
        self._hand: dict[tuple[ResolvedConfig, tuple[DeviceSpec, ...], DeviceSpec], _Placed] = {}

    def estimate(
        self,
        rc: ResolvedConfig,
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        *,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
        compute_scale: float = 1.0,
        replay: bool = True,
        compute_scales: Sequence[float] = (),
    ) -> Breakdown:
        """Bytes per device for this configuration (GPUs in order, then the host).

        Compute buffers come from the graph itself (memory/graph/replay.py) where it covers the
        model and the placement; `replay=False` keeps to the hand-derived peaks of compute.py (about
        a hundred times faster: the solver's searches), which `compute_scale` then scales, and
        `compute_scales` per device (the GPUs in order, then the host; solver.exact_choice's
        per-device ratios of the replay to the hand-derived peaks). -fa auto is settled first
        (settle_flash_attn)."""
        rc = self.settle_flash_attn(rc, gpus, host, exact=replay)
        scales = (compute_scale, compute_scales)
        if replay:
            placed, lmap, parts = self._parts(rc, gpus, host, True, scales)
        else:
            # the hand-derived parts depend on the config and the devices only, not on the
            # scales: a plan's searches under other scales (solver.exact_choice's second
            # solve, the trade-offs with the learned ratios) ask the same configs again
            key = (rc, tuple(gpus), host)
            hand = self._hand
            found = hand.get(key)
            if found is None:
                if len(hand) >= HAND_SIZE:
                    hand.clear()
                found = hand[key] = self._parts(rc, gpus, host, False, (1.0, ()))
            placed, lmap, parts = found
            compute = scaled_compute(parts.compute, *scales, n_gpu=len(placed))
            parts = parts._replace(compute=compute)
        output = output_bytes(self.facts.n_vocab, self.facts.n_embd, rc)
        return _breakdown(output, rc, lmap, placed, host, parts, reserve_bytes)

    def _parts(
        self,
        rc: ResolvedConfig,
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        replay: bool,
        scales: tuple[float, Sequence[float]],
    ) -> _Placed:
        """estimate's devices in use, layer map and bytes per device index (the estimate's compute
        scaled by `scales`)."""
        gpus, lmap, weights, moved = place_weights(self, rc, gpus)
        if replay:  # the exact figures: llama.cpp's own graph, which it may refuse to reserve
            overflow = self.scheduler_overflow(rc, lmap, gpus, moved)
            if overflow is not None:
                raise SchedulerOverflowError(overflow)
        repack = repack_bytes(self, rc, lmap, gpus, host.cpu_features, moved)
        weights[CPU] += repack
        # the cache's layout as llama_context made it: -fa auto counts as on there
        made_fa = rc.flash_attn or rc.fa_auto_off is not None
        cells = self.cell_prefix(rc.type_k, rc.type_v, made_fa, since("mla_v_less", rc.build))
        per_stream = (rc.kv_cells * rc.n_stream, rc.n_swa_cells * rc.n_stream)
        parts = _Parts(
            weights,
            kv_bytes(cells, per_stream, lmap, len(gpus), offload=rc.kv_offload),
            recurrent_bytes(self.facts, self.recurrent_prefix, rc, lmap, len(gpus)),
            *self._compute(rc, lmap, gpus, host, moved, replay, scales),
            repack,
        )
        return gpus, lmap, parts

    def settle_flash_attn(
        self,
        rc: ResolvedConfig,
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        *,
        exact: bool = True,
    ) -> ResolvedConfig:
        """rc with -fa auto settled as llama_context settles it on these devices
        (resolve.settle_flash_attn; ConfigError where llama.cpp would then refuse a quantized V
        cache): off at the first layer on a GPU whose backend refuses that layer's
        FLASH_ATTN_EXT (replay.fa_refused_layers: one answer per device, whatever the placement
        and context); where none refuses and the offload is partial, `exact` runs the probe
        through the scheduler (replay.fa_auto_mismatch: its expansion may carry a host layer's
        node onto a GPU), once per placement (the solver's searches leave it out: their
        figures are the hand-derived proxy; its exact checks run it)."""
        if not rc.fa_auto:
            return rc
        placed, lmap, _weights, moved = place_weights(self, rc, gpus)
        key = (
            rc.build,
            rc.type_k,
            rc.type_v,
            rc.n_seq_max,
            rc.n_stream,
            rc.kv_unified,
            rc.embeddings,
            rc.pooling,
            rc.n_swa_cells > 0,
        )
        refused: dict[int, tuple[int, ...] | None] = {}
        for il, d in enumerate(lmap.layers):
            if d == CPU:
                continue
            if d not in refused:
                # what the backend checks: its kind and features, not its name or size
                kind = replace(placed[d], name="GPU", total_bytes=None, free_bytes=None)
                refused[d] = self.remember(
                    ("fa_refused", key, kind),
                    partial(fa_refused_layers, self.facts, rc, kind),
                )
            layers = refused[d]
            if layers is None:  # not covered: flash attention stays on, as it did before
                return settle_flash_attn(rc, None)
            if il in layers:
                return settle_flash_attn(rc, (il, placed[d].name, "CPU"))
        mismatch = None
        on_host = CPU in lmap.layers[: self.facts.n_layer]
        if exact and refused and on_host:
            placement = _device_placement(self, rc, lmap, placed, host.cpu_features, moved)
            mismatch = self.remember(
                ("fa_auto", key, rc.n_gpu_layers, tuple(placed), placement, rc.kv_offload),
                partial(fa_auto_mismatch, self.facts, rc, placed, placement),
            )
        return settle_flash_attn(rc, mismatch)

    def _compute(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        moved: tuple[str, ...],
        replay: bool,
        scales: tuple[float, Sequence[float]],
    ) -> tuple[dict[int, int], str]:
        """Compute-buffer bytes per device index and whose figure they are (COMPUTE_GRAPH or
        COMPUTE_ESTIMATE: DeviceUsage.compute_source): the one place that decides it.

        The replay's (graph/replay.py: llama.cpp's reserve graph through ggml's scheduler and
        allocator) when `replay` and the replay covers this model and placement: the CPU alone, or
        GPUs it models (replay.covers_devices: Vulkan devices, RPC workers, Metal, CUDA and ROCm
        where covered); then nothing is scaled.
        The estimate's otherwise: compute.py's hand-derived peaks plus op offload's
        (op_offload.py), times a correction learned from earlier runs (calibration.scaled_compute:
        `scales` is (one factor, one per device))."""
        if replay and not gpus:
            replayed = self.remember(("replay", rc), partial(cpu_compute_bytes, self.facts, rc))
            if replayed is not None:
                return {CPU: replayed}, COMPUTE_GRAPH
        elif replay:
            placement = _device_placement(self, rc, lmap, gpus, host.cpu_features, moved)
            # the splits of earlier replays on these backends, which later ones split from
            key = splits_key(rc, gpus)
            splits = self.remember(("splits", *key), partial(Splits, *key))
            compute = self.remember(
                ("replay", rc, tuple(gpus), placement),
                partial(device_compute_bytes, self.facts, rc, gpus, placement, splits),
            )
            if compute is not None:
                return compute, COMPUTE_GRAPH
        estimated = compute_for_devices(self.facts, rc, lmap, gpus)
        add_op_offload(self, estimated, rc, lmap, gpus)
        add_host_ops_of_gpu_layers(self, estimated, rc, lmap, gpus)
        return scaled_compute(estimated, *scales, n_gpu=len(gpus)), COMPUTE_ESTIMATE

    def scheduler_overflow(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap | None = None,
        gpus: Sequence[DeviceSpec] = (),
        moved: tuple[str, ...] = (),
    ) -> SchedOverflow | None:
        """replay.scheduler_overflow for this placement (`lmap` None: CPU only): the reserve
        graph's tensor count (one graph built, 10-140 ms) memoized by what shapes it, not by the
        context; estimate asks it for the exact figures only (a plan's chosen config, check),
        never in the searches."""
        shape = (
            rc.flash_attn,
            rc.type_k.is_quantized,
            rc.type_v.is_quantized,
            rc.n_stream,
            rc.kv_unified,
            min(rc.n_ubatch, rc.n_outputs_max) < rc.n_ubatch,
            rc.n_swa_cells > 0,
            rc.kv_offload,
            rc.embeddings,
            rc.build,
        )
        n_graph = self.remember(("sched", shape), partial(reserve_graph_tensors, self.facts, rc))
        if n_graph is None:
            return None
        return overflow_of(self.facts, rc, n_graph, self.loaded_tensors(rc, lmap, gpus, moved))

    def n_tensors(self, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> int:
        """llama_model::n_tensors() for this config on these devices (weights.loaded_tensors, with
        the placement estimate makes)."""
        gpus, lmap, _weights, moved = place_weights(self, rc, gpus)
        return self.loaded_tensors(rc, lmap, gpus, moved)

    def loaded_tensors(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap | None,
        gpus: Sequence[DeviceSpec] = (),
        moved: tuple[str, ...] = (),
    ) -> int:
        """llama_model::n_tensors() for this placement (weights.loaded_tensors)."""
        return loaded_tensors(self, rc, lmap, gpus, moved)

    def override_targets(self, rules: Rules) -> dict[str, str | None]:
        """The -ot buffer type of every tensor name under these rules (overrides.override_targets)."""
        return override_targets(self, rules)

    def bytes_read_per_token(
        self, rc: ResolvedConfig, lmap: LayerMap, n_gpu: int
    ) -> dict[int, int]:
        """Weight bytes each device reads per generated token (weights.bytes_read_per_token)."""
        return bytes_read_per_token(self, rc, lmap, n_gpu)


class _Parts(NamedTuple):
    """What estimate found per device index before it writes the rows."""

    weights: dict[int, int]
    kv: dict[int, int]
    recurrent: dict[int, int]
    compute: dict[int, int]
    compute_source: str  # COMPUTE_GRAPH or COMPUTE_ESTIMATE
    repack: int


# MemoryModel._parts: the devices in use, the layer map and the bytes per device index
_Placed = tuple[Sequence[DeviceSpec], LayerMap, _Parts]


def output_bytes(n_vocab: int, n_embd: int, rc: ResolvedConfig) -> int:
    """llama_context::output_reserve's buffer (src/llama-context.cpp): F32 logits for every
    output row (has_logits is always set, an encoder's too) and, with embeddings, n_embd more a
    row; reserved for n_seq_max rows when the context is made. With embeddings every token of a
    batch is an output (llama_context::decode: output_reserve(n_outputs_all)), so the first full
    batch grows it to n_batch rows, and it never shrinks: that size is the one to plan for (a
    449-token request to BGE small's b11434 llama-server grew its anonymous memory by 62 MB,
    (30522 + 384) x 449 x 4 = 55.5 MB of it this buffer, the rest its compute buffer first
    touched)."""
    if rc.embeddings:
        return (n_vocab + n_embd) * max(rc.n_batch, rc.n_seq_max, 1) * 4
    return n_vocab * max(rc.n_seq_max, 1) * 4


def _breakdown(
    output: int,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    host: DeviceSpec,
    p: _Parts,
    reserve_bytes: int,
) -> Breakdown:
    """The rows: each GPU, then the host with the output buffer (output_bytes) and what the GPU
    backend pins of it."""
    rows = [
        DeviceUsage(
            spec.name,
            "gpu",
            spec.total_bytes,
            spec.usable_bytes,
            p.weights[d],
            p.kv[d],
            p.recurrent[d],
            p.compute[d],
            0,
            reserve_bytes,
            spec.overhead_bytes,
            compute_source=p.compute_source,
        )
        for d, spec in enumerate(gpus)
    ]
    host_usable = host.usable_bytes
    if host_usable is not None and any(g.backend == "metal" for g in gpus):
        # unified memory: the GPU's share is host RAM too
        host_usable -= sum(r.used_bytes for r in rows)
    mapped = is_mapped(rc)
    pinned = 0
    if any(g.backend in PADDED_BACKENDS for g in gpus):
        # the CPU backend's compute buffer and the output buffer use the first GPU's host buffer
        # type (llama_context ctor / output_reserve, src/llama-context.cpp); unmapped CPU
        # weights go there too (load_tensors: cpu_buft_list starts with the host buffer type of
        # the first device)
        pinned = p.compute[CPU] + output + (0 if mapped else p.weights[CPU])
    rows.append(
        DeviceUsage(
            host.name,
            "host",
            host.total_bytes,
            host_usable,
            p.weights[CPU],
            p.kv[CPU],
            p.recurrent[CPU],
            p.compute[CPU],
            output,
            0 if gpus else reserve_bytes,
            0,
            pinned,
            repack_bytes=p.repack,
            compute_source=p.compute_source,
        )
    )
    return Breakdown(tuple(rows), lmap, mapped, rc.cache_ram_bytes)


def _device_placement(
    m: ModelTensors,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    features: frozenset[str],
    moved: tuple[str, ...],
) -> DevicePlacement:
    """The buffer types the replay with GPUs needs (graph/replay.DevicePlacement): host
    weights in CPU_Mapped with mmap (llama-model-loader.cpp create_tensor), else in the first
    GPU's host buffer type (make_cpu_buft_list; not with --no-host) or CPU; the -ot rules'
    buffer types, CPU_REPACK where repack_bytes repacks, the host for weights over a device's
    tensor limit (`moved`); before rule gemma3n_ple_expand / gemma4_ple_expand, the per-layer
    token rows on the host where weights.ple_device keeps them there (the graph builds them with
    the output layer: the output device's backend refuses their GET_ROWS)."""
    if is_mapped(rc):
        host_weights = "CPU_Mapped"
    elif gpus and gpus[0].backend == "vulkan" and not rc.no_host:
        host_weights = "Vulkan_Host"
    elif gpus and gpus[0].backend in ("cuda", "rocm") and not rc.no_host:
        host_weights = "CUDA_Host" if gpus[0].backend == "cuda" else "ROCm_Host"
    else:
        host_weights = "CPU"
    names = device_names(gpus)
    out = _ple_buffers(m, rc, lmap, gpus, host_weights)
    if rc.all_overrides:
        for name, buft in override_targets(m, rc.all_overrides).items():
            if buft is None or name.endswith("(tied)"):
                continue
            dev = buffer_device(buft, names)
            out[name] = host_weights if dev == CPU else gpus[dev].name
    for name in moved:  # a tied output's copy is token_embd's tensor
        out["token_embd.weight" if name.endswith("(tied)") else name] = host_weights
    for name in repacked_names(m, rc, lmap, gpus, features, moved):
        out[name] = "CPU_REPACK"
    return DevicePlacement(lmap.layers, lmap.output, host_weights, tuple(sorted(out.items())))


def _ple_buffers(
    m: ModelTensors, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec], host: str
) -> dict[str, str]:
    """The buffers of the PLE tensors (tensors.PLE_TENSORS) that weights.ple_device places off
    the output layer's device, where the graph builds them, at a build before their rule: the
    per-layer token rows on the host (`host`: the host weights' buffer) where the output device's
    backend refuses their GET_ROWS (select_weight_buft, src/llama-model-loader.cpp)."""
    out: dict[str, str] = {}
    if m.ple and ple_with_output(m.facts, rc.build):
        for name, ggml_type, _raw, _padded in m.ple:
            dev = ple_device(name, ggml_type, lmap, gpus)
            if dev != lmap.output:
                out[name] = host if dev == CPU else gpus[dev].name
    return out
