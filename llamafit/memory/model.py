"""The memory model: what llama.cpp allocates on each device for one resolved configuration.

`MemoryModel(facts)` precomputes per-layer sums once (weights by device kind, expert and dense
FFN parts, KV bytes per cell for each cache-type pair), so that `estimate()` is plain
arithmetic: the solver calls it thousands of times. Sources at llama.cpp 0c1e570:
weights src/llama-model.cpp load_tensors; KV src/llama-kv-cache.cpp (+ -iswa); recurrent
state src/llama-memory-recurrent.cpp; output buffer src/llama-context.cpp output_reserve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, TypeVar

from ..errors import InputError
from ..facts.hparams import ModelFacts
from ..facts.tensor_names import is_dense_ffn, is_expert, is_output_layer
from ..machine.devices import DeviceSpec
from ..reader.ggml_types import GGMLType
from ..units import MIB
from .compute import (
    OP_OFFLOAD_BACKENDS,
    compute_for_devices,
    host_ffn_compute,
    kq_fits,
    op_offload_compute,
    op_offload_host_compute,
    output_refused_host,
)
from .graph.replay import (
    DevicePlacement,
    SchedOverflow,
    cpu_compute_bytes,
    device_compute_bytes,
    overflow_of,
    reserve_graph_tensors,
)
from .kv import layer_cell_bytes
from .placement import (
    CPU,
    ROPE_FACTORS,
    LayerMap,
    block_index,
    block_rule,
    checked_regex,
    cuda_alloc_size,
    is_skipped,
    layer_map,
    rope_factor_layers,
    split_points,
    tensor_layer,
)
from .repack import repacked_bytes
from .resolve import ConfigError, ResolvedConfig, since

if TYPE_CHECKING:
    from .side_models import SideUsage

_T = TypeVar("_T")
# (largest host weight op offload copies, smallest routed ffn_down among them, host layers, refused,
# output)
_OffloadScan = tuple[int, int | None, tuple[int, ...], bool, int]
# per block, op offload's kinds of weights (MemoryModel._offload_parts, _host_ffn_kinds)
FIXED, FREE, EXP, DENSE, BOTH = range(5)


def _ffn_kind(expert: bool, dense: bool) -> int | None:
    """The part of a layer's FFN weights: BOTH, EXP or DENSE; None for a layer with neither."""
    if expert and dense:
        return BOTH
    if expert:
        return EXP
    return DENSE if dense else None


_OffloadParts = tuple[
    tuple[tuple[tuple[int, int | None] | None, ...], ...], frozenset[int], int, int
]
MEMO_SIZE = 4096  # MemoryModel._remember: entries per model before it starts over

DEFAULT_RESERVE_BYTES = 1024 * MIB  # common/fit.cpp: --fit-target default, 1024 MiB per device
# ggml-cuda (HIP too): row padding + 128-byte alignment
PADDED_BACKENDS = frozenset({"cuda", "rocm"})
# backends whose devices have a host buffer type (ggml_backend_dev_host_buffer_type: ggml-cuda.cu,
# ggml-vulkan.cpp, ggml-sycl.cpp); Metal's and RPC's are NULL
HOST_BUFFER_BACKENDS = frozenset({"cuda", "rocm", "vulkan", "sycl"})


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """Predicted bytes on one device; `usable_bytes` is what it may use (free memory), if known."""

    name: str
    kind: str
    total_bytes: int | None
    usable_bytes: int | None
    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    output_bytes: int
    reserve_bytes: int
    # CUDA context + cuBLAS workspace (DeviceSpec.overhead_bytes), apart from the reserve
    overhead_bytes: int = 0
    # host only: the part in the GPU backend's pinned host buffers (CUDA_Host, ROCm_Host)
    pinned_bytes: int = 0
    side_bytes: int = 0  # draft model, MTP context, projector on this device (side_models.py)
    repack_bytes: int = (
        0  # host only: the part of weights_bytes in the CPU_REPACK buffer (repack.py)
    )

    @property
    def used_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.recurrent_bytes
            + self.compute_bytes
            + self.output_bytes
            + self.reserve_bytes
            + self.overhead_bytes
            + self.side_bytes
        )

    @property
    def free_after_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return self.usable_bytes is None or self.used_bytes <= self.usable_bytes


@dataclass(frozen=True, slots=True)
class Breakdown:
    devices: tuple[DeviceUsage, ...]  # GPUs in order, then the host ("CPU")
    layer_devices: LayerMap
    host_weights_mapped: bool  # CPU weights are mmap'd from the file (page cache), not anonymous
    cache_ram_bytes: int  # llama-server's prompt cache limit in host RAM (grows with use)
    side_models: tuple[SideUsage, ...] = ()  # their bytes are in the rows' side_bytes too

    def hard_bytes(self, d: DeviceUsage) -> int:
        """What `d` must hold in memory. With GPUs, the host's memory-mapped weights may page from
        disk (slow, but it runs); KV, recurrent state, compute and output buffers are allocated and
        cannot. Without a GPU everything counts: paging weights per token would not be a plan."""
        paged = (
            d.kind == "host"
            and self.host_weights_mapped
            and any(x.kind == "gpu" for x in self.devices)
        )
        return d.used_bytes - (d.weights_bytes if paged else 0)

    @property
    def short(self) -> tuple[tuple[DeviceUsage, int], ...]:
        """(device, bytes short) for every device that cannot hold what it must."""
        return tuple(
            (d, self.hard_bytes(d) - d.usable_bytes)
            for d in self.devices
            if d.usable_bytes is not None and self.hard_bytes(d) > d.usable_bytes
        )

    @property
    def fits(self) -> bool:
        return not self.short

    @property
    def host_pages(self) -> bool:
        """It fits, but only because the host's mapped weights page from disk."""
        host = self.devices[-1]
        return self.fits and not host.fits


OP_PROBE_TOKENS = 512  # src/llama-model-loader.cpp weight_buft_supported: the probe op's batch


def op_probe_bytes(shape: Sequence[int], n_bytes: int, n_expert_used: int, experts: bool) -> int:
    """The largest tensor of the op llama.cpp builds to decide where a weight may live.

    src/llama-model-loader.cpp weight_buft_supported (0c1e570): a matrix is probed with
    ggml_mul_mat(w, b[ne0, 512, ne2, ne3]) (dst [ne1, 512, ne2, ne3] F32), a stacked expert
    tensor with ggml_mul_mat_id(w, b[ne0, n_expert_used, 512]) (dst [ne1, n_expert_used, 512]);
    select_weight_buft takes the first buffer type whose device supports that op. A device that
    limits tensor sizes (Vulkan: ggml_backend_vk_device_supports_op rejects any src or dst larger
    than maxStorageBufferRange or maxBufferSize) thus leaves the weight on the next buffer type
    in the list: the host's.
    """
    if len(shape) < 2:
        return n_bytes
    ne0, ne1 = shape[0], shape[1]
    rest = 1
    for d in shape[2:]:
        rest *= d
    if experts:
        rows = max(n_expert_used, 1) * OP_PROBE_TOKENS
        return max(n_bytes, ne0 * rows * 4, ne1 * rows * 4)
    return max(n_bytes, ne0 * OP_PROBE_TOKENS * rest * 4, ne1 * OP_PROBE_TOKENS * rest * 4)


def _tensor_sizes(facts: ModelFacts) -> list[tuple[str, int, int]]:
    """(name, raw bytes, CUDA-padded bytes) for every tensor llama.cpp loads."""
    out = []
    for t in facts.tensors:
        if not is_skipped(facts, t.name):
            out.append(
                (t.name, t.n_bytes, cuda_alloc_size(GGMLType.of(t.ggml_type), t.shape, t.n_bytes))
            )
    return out


# The prefix-sum columns of MemoryModel.prefix, per block: all weights, routed experts, dense FFN,
# each raw and with CUDA row padding (column + 1).
ALL, EXPERTS, DENSE_FFN = 0, 2, 4
PADDED = 1


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


class MemoryModel:
    """Per-model precomputation; `estimate` turns a resolved config and devices into a Breakdown."""

    def __init__(self, facts: ModelFacts) -> None:
        self.facts = facts
        self.tensors = _tensor_sizes(facts)
        # per block, the columns ALL, EXPERTS and DENSE_FFN, raw and + PADDED (NextN blocks stay 0)
        sums = [[0] * 6 for _ in range(facts.n_layer_all)]
        self.input_raw = self.output_raw = self.output_padded = 0
        # the RoPE factor tensors made per block (placement.rope_factor_layers): bytes of one copy
        # of each, and the blocks whose buffer types hold a copy
        self.rope_layers = rope_factor_layers(facts)
        self.rope_raw = self.rope_names = 0
        for name, raw, padded in self.tensors:
            il = tensor_layer(name)
            if self.rope_layers and name in ROPE_FACTORS:
                self.rope_raw += raw
                self.rope_names += 1
            elif il is not None and il < facts.n_layer_all:
                sums[il][ALL] += raw
                sums[il][ALL + PADDED] += padded
                for part, matches in ((EXPERTS, is_expert), (DENSE_FFN, is_dense_ffn)):
                    if matches(name):
                        sums[il][part] += raw
                        sums[il][part + PADDED] += padded
                        break
            elif is_output_layer(name):
                self.output_raw += raw
                self.output_padded += padded
            else:
                self.input_raw += raw
        self.prefix = [_prefix([row[col] for row in sums]) for col in range(6)]
        embd = next((t for t in facts.tensors if t.name == "token_embd.weight"), None)
        tied = facts.tied_embeddings and embd is not None
        self.tied_raw = embd.n_bytes if tied and embd else 0
        self.tied_padded = 0
        if tied and embd:
            self.tied_padded = cuda_alloc_size(
                GGMLType.of(embd.ggml_type), embd.shape, embd.n_bytes
            )
        # weights whose probe op is large, largest first (only these can meet a device's tensor
        # limit)
        used = facts.moe.n_expert_used if facts.moe else 1
        shapes = {t.name: t.shape for t in facts.tensors}
        probes = []
        for name, raw, padded in self.tensors:
            if name == "token_embd.weight" and not self.tied_raw:
                continue  # the input layer lives on the host
            il = tensor_layer(name)
            probe = op_probe_bytes(shapes[name], raw, used, is_expert(name))
            if (
                name == "token_embd.weight"
            ):  # the tied output's copy, probed as a matmul on the output layer
                name, il, raw, padded = "output.weight(tied)", None, self.tied_raw, self.tied_padded
            probes.append((probe, name, il, raw, padded))
        self.probes = sorted(probes, reverse=True)
        # per probe, its name's classes (the tensor-name regexes run once per model, not per
        # estimate): routed expert, dense FFN, an expert's ffn_down (_displaced), placed with the
        # output layer
        self._classes = [
            (
                is_expert(name),
                is_dense_ffn(name),
                is_expert(name) and "down" in name,
                is_output_layer(name) or name.endswith("(tied)"),
            )
            for _, name, *_ in self.probes
        ]
        self._memo: dict[
            tuple[object, ...], object
        ] = {}  # what depends on the placement, not on the context
        probe_names = [
            n for _, name, *_ in self.probes for n in (name, name.removesuffix("(tied)"))
        ]
        # what -ot rules meet
        self._names = tuple(dict.fromkeys([n for n, _, _ in self.tensors] + probe_names))
        self.recurrent_prefix = _prefix(
            [int(il < facts.n_layer and r) for il, r in enumerate(facts.is_recurrent)]
        )

    @lru_cache(maxsize=64)  # noqa: B019 - one model object lives as long as its plans
    def cell_prefix(
        self, type_k: GGMLType, type_v: GGMLType, flash_attn: bool, v_less_mla: bool = True
    ) -> tuple[list[int], list[int]]:
        """Prefix sums over blocks of KV bytes per cell: (full-attention layers, SWA layers)."""
        cells = [
            layer_cell_bytes(
                self.facts, il, type_k, type_v, flash_attn=flash_attn, v_less_mla=v_less_mla
            )
            for il in range(self.facts.n_layer_all)
        ]
        swa = self.facts.swa.is_swa
        return (
            _prefix([b if not swa[il] else 0 for il, b in enumerate(cells)]),
            _prefix([b if swa[il] else 0 for il, b in enumerate(cells)]),
        )

    def _sum(self, col: int, a: int, b: int) -> int:
        p = self.prefix[col]
        return p[b] - p[a] if b > a else 0

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
        per-device ratios of the replay to the hand-derived peaks)."""
        gpus, lmap, weights, moved = self._placement(rc, gpus)
        if replay:  # the exact figures: llama.cpp's own graph, which it may refuse to reserve
            overflow = self.scheduler_overflow(rc, lmap, gpus, moved)
            if overflow is not None:
                raise SchedulerOverflowError(overflow)
        repack = self._repack(rc, lmap, gpus, host.cpu_features, moved)
        weights[CPU] += repack
        kv, rs = self._kv(rc, lmap, len(gpus)), self._recurrent(rc, lmap, len(gpus))
        compute: dict[int, int] | None = None
        if replay and not gpus:
            replayed = self.remember(("replay", rc), partial(cpu_compute_bytes, self.facts, rc))
            compute = {CPU: replayed} if replayed is not None else None
        elif replay:  # Vulkan devices and RPC workers (replay.covers_devices)
            placement = self._device_placement(rc, lmap, gpus, host.cpu_features, moved)
            compute = self.remember(
                ("replay", rc, tuple(gpus), placement),
                partial(device_compute_bytes, self.facts, rc, gpus, placement),
            )
        if compute is None:
            compute = compute_for_devices(self.facts, rc, lmap, gpus)
            self._op_offload(compute, rc, lmap, gpus)
            self._host_ops_of_gpu_layers(compute, rc, lmap, gpus)
            if compute_scale != 1.0:  # a correction learned from earlier runs (calibration.py)
                compute = {d: int(v * compute_scale) for d, v in compute.items()}
            if len(compute_scales) == len(gpus) + 1:  # per device, for these devices only
                n = len(gpus)
                compute = {
                    d: int(v * compute_scales[n if d == CPU else d]) for d, v in compute.items()
                }
        # output_reserve(n_seq_max): F32 logits
        output = self.facts.n_vocab * max(rc.n_seq_max, 1) * 4
        rows = []
        for d, spec in enumerate(gpus):
            rows.append(
                DeviceUsage(
                    spec.name,
                    "gpu",
                    spec.total_bytes,
                    spec.usable_bytes,
                    weights[d],
                    kv[d],
                    rs[d],
                    compute[d],
                    0,
                    reserve_bytes,
                    spec.overhead_bytes,
                )
            )
        host_reserve = 0 if gpus else reserve_bytes
        host_usable = host.usable_bytes
        if host_usable is not None and any(g.backend == "metal" for g in gpus):
            # unified memory: the GPU's share is host RAM too
            host_usable -= sum(r.used_bytes for r in rows)
        mapped = rc.load_mode in ("auto", "mmap", "mmap+mlock")
        pinned = 0
        if any(g.backend in PADDED_BACKENDS for g in gpus):
            # the CPU backend's compute buffer and the output buffer use the first GPU's host buffer
            # type (llama_context ctor / output_reserve, src/llama-context.cpp); unmapped CPU
            # weights go there too (load_tensors: cpu_buft_list starts with the host buffer type of
            # the first device)
            pinned = compute[CPU] + output + (0 if mapped else weights[CPU])
        rows.append(
            DeviceUsage(
                host.name,
                "host",
                host.total_bytes,
                host_usable,
                weights[CPU],
                kv[CPU],
                rs[CPU],
                compute[CPU],
                output,
                host_reserve,
                0,
                pinned,
                repack_bytes=repack,
            )
        )
        return Breakdown(tuple(rows), lmap, mapped, rc.cache_ram_bytes)

    def _points(self, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> tuple[float, ...]:
        if not gpus:
            return ()
        if rc.tensor_split and any(rc.tensor_split):
            fractions = [
                rc.tensor_split[i] if i < len(rc.tensor_split) else 0.0 for i in range(len(gpus))
            ]
        else:  # llama.cpp splits by each device's free memory
            fractions = [float(g.usable_bytes or 1) for g in gpus]
        return split_points(fractions)

    def _weights(
        self, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
    ) -> dict[int, int]:
        if rc.overrides:
            return self._weights_by_tensor(rc, lmap, gpus)
        padded = [g.backend in PADDED_BACKENDS for g in gpus]
        out = dict.fromkeys([CPU, *range(len(gpus))], 0)
        out[CPU] += self.input_raw
        n_moe = self.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
        for dev, a, b in lmap.runs:
            pad = PADDED if dev != CPU and padded[dev] else 0
            out[dev] += self._sum(ALL + pad, a, b)
            if dev == CPU:
                continue
            moe_end, ffn_end = min(b, n_moe), min(b, rc.n_cpu_ffn)
            out[dev] -= self._sum(EXPERTS + pad, a, moe_end) + self._sum(
                DENSE_FFN + pad, a, ffn_end
            )
            out[CPU] += self._sum(EXPERTS, a, moe_end) + self._sum(DENSE_FFN, a, ffn_end)
        self._add_output(out, lmap.output, lmap.output != CPU and padded[lmap.output])
        self._add_rope_factors(out, lmap, None)
        return out

    def _add_rope_factors(self, out: dict[int, int], lmap: LayerMap, target: int | None) -> None:
        """One copy of the RoPE factor tensors per device among the blocks that make them (F32:
        no padding), or one on an -ot rule's device (`target`: their name is the same in
        every block, so the rule meets every copy, and they are one tensor there)."""
        if not self.rope_raw:
            return
        devices = {target} if target is not None else {lmap.layers[il] for il in self.rope_layers}
        for dev in devices:
            out[dev] += self.rope_raw

    def _keep_oversized_on_host(
        self, out: dict[int, int], rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
    ) -> tuple[str, ...]:
        """Move to the host each weight whose probe op exceeds its device's max_tensor_bytes; their names."""
        limits = [g.max_tensor_bytes for g in gpus if g.max_tensor_bytes is not None]
        moved: list[str] = []
        if not limits:
            return ()
        smallest = min(limits)
        n_moe = self.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
        rules = rc.all_overrides if rc.overrides else ()
        mapped = rc.load_mode in ("auto", "mmap", "mmap+mlock")
        targets = self._targets(rules)[0] if rules else None
        for i, (probe, name, il, raw, padded) in enumerate(self.probes):
            if probe <= smallest:
                break
            if il is not None and il >= self.facts.n_layer_all:
                continue
            if targets is not None and targets[i] is not None:
                continue  # an override names its buffer type; llama.cpp does not probe it
            expert, dense, _down, with_output = self._classes[i]
            if il is not None:
                dev = lmap.layers[il]
            else:
                dev = lmap.output if with_output else CPU
            if dev == CPU or (
                il is not None and ((expert and il < n_moe) or (dense and il < rc.n_cpu_ffn))
            ):
                continue
            limit = gpus[dev].max_tensor_bytes
            if limit is None or probe <= limit:
                continue
            out[dev] -= padded if gpus[dev].backend in PADDED_BACKENDS else raw
            moved.append(name)
            if not (il is None and name.endswith("(tied)") and mapped):
                out[CPU] += (
                    raw  # a mapped tied copy shares token_embd's pages (one CPU_Mapped range)
                )
        return tuple(moved)

    def _repack(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
        features: frozenset[str],
        moved: tuple[str, ...],
    ) -> int:
        """The CPU_REPACK buffer (memory/repack.py): host weights with a repacked layout for this CPU.

        src/llama-model.cpp make_cpu_buft_list puts the first GPU host buffer type (CUDA_Host,
        Vulkan_Host, ...; not with --no-host) ahead of the CPU's extra buffer types, and
        select_weight_buft takes it for every host weight its GPU can run the op of; with mmap it then
        becomes the plain CPU buffer (llama-model-loader.cpp create_tensor: "avoid using a host buffer
        when using mmap"). So with such a GPU only the weights its device rejects (over its tensor
        limit: `moved`) are repacked; without one (CPU only, RPC, Metal) every host weight may be.
        An -ot rule to CPU considers the extra buffer types too (create_tensor's overrides)."""
        if not rc.repack or not features:
            return 0
        sizes = self._repack_sizes(features)
        if not sizes:
            return 0
        host_buft = not rc.no_host and any(g.backend in HOST_BUFFER_BACKENDS for g in gpus)
        if host_buft:
            return sum(sizes.get(name, 0) for name in moved)
        key = ("repack", lmap, rc.all_overrides, tuple(g.name for g in gpus), features)
        return self.remember(key, lambda: self._repack_on_host(rc, lmap, gpus, sizes))

    def _device_placement(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
        features: frozenset[str],
        moved: tuple[str, ...],
    ) -> DevicePlacement:
        """The buffer types the replay with GPUs needs (graph/replay.DevicePlacement): host
        weights in CPU_Mapped with mmap (llama-model-loader.cpp create_tensor), else in the first
        GPU's host buffer type (make_cpu_buft_list; not with --no-host) or CPU; the -ot rules'
        buffer types, CPU_REPACK where _repack repacks, the host for weights over a device's
        tensor limit (`moved`)."""
        mapped = rc.load_mode in ("auto", "mmap", "mmap+mlock")
        if mapped:
            host_weights = "CPU_Mapped"
        elif gpus and gpus[0].backend == "vulkan" and not rc.no_host:
            host_weights = "Vulkan_Host"
        else:
            host_weights = "CPU"
        names = {g.name.lower(): i for i, g in enumerate(gpus)}
        out: dict[str, str] = {}
        if rc.all_overrides:
            for name, buft in self.override_targets(rc.all_overrides).items():
                if buft is None or name.endswith("(tied)"):
                    continue
                dev = _buffer_device(buft, names)
                out[name] = host_weights if dev == CPU else gpus[dev].name
        for name in moved:  # a tied output's copy is token_embd's tensor
            out["token_embd.weight" if name.endswith("(tied)") else name] = host_weights
        for name in self._repacked(rc, lmap, gpus, features, moved):
            out[name] = "CPU_REPACK"
        return DevicePlacement(lmap.layers, lmap.output, host_weights, tuple(sorted(out.items())))

    def _repacked(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
        features: frozenset[str],
        moved: tuple[str, ...],
    ) -> tuple[str, ...]:
        """The names of the host weights _repack puts in CPU_REPACK (the tied output's copy left
        out: it is token_embd's tensor)."""
        if not rc.repack or not features:
            return ()
        sizes = self._repack_sizes(features)
        if not sizes:
            return ()
        if not rc.no_host and any(g.backend in HOST_BUFFER_BACKENDS for g in gpus):
            return tuple(n for n in moved if n in sizes and not n.endswith("(tied)"))
        names = {g.name.lower(): i for i, g in enumerate(gpus)}
        targets = self.override_targets(rc.all_overrides) if rc.all_overrides else {}
        out = []
        for name in sizes:
            if name.endswith("(tied)"):
                continue
            il = tensor_layer(name)
            if il is not None and il < self.facts.n_layer_all:
                dev = lmap.layers[il]
            elif is_output_layer(name):
                dev = lmap.output
            else:
                dev = CPU
            target = targets.get(name)
            if target is not None:
                dev = _buffer_device(target, names)
            if dev == CPU:
                out.append(name)
        return tuple(out)

    def _repack_sizes(self, features: frozenset[str]) -> dict[str, int]:
        """Per weight name, its CPU_REPACK bytes on a CPU with `features` (only weights that repack);
        a tied output's copy of token_embd is "output.weight(tied)", probed as the output it is."""

        def make() -> dict[str, int]:
            types = {t.name: t for t in self.facts.tensors}
            out = {}
            for name, raw, _padded in self.tensors:
                t = types[name]
                size = repacked_bytes(name, GGMLType.of(t.ggml_type).name, t.shape, raw, features)
                if size:
                    out[name] = size
            embd = types.get("token_embd.weight")
            if self.tied_raw and embd is not None:
                size = repacked_bytes(
                    "output.weight",
                    GGMLType.of(embd.ggml_type).name,
                    embd.shape,
                    self.tied_raw,
                    features,
                )
                if size:
                    out["output.weight(tied)"] = size
            return out

        return self.remember(("repack sizes", features), make)

    def _repack_on_host(
        self, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec], sizes: dict[str, int]
    ) -> int:
        names = {g.name.lower(): i for i, g in enumerate(gpus)}
        targets = self.override_targets(rc.all_overrides) if rc.all_overrides else {}
        total = 0
        for name, size in sizes.items():
            tied = name.endswith("(tied)")
            il = None if tied else tensor_layer(name)
            if il is not None and il < self.facts.n_layer_all:
                dev = lmap.layers[il]
            elif tied or is_output_layer(name):
                dev = lmap.output
            else:
                dev = CPU
            target = None if tied else targets.get(name)
            if target is not None:
                dev = _buffer_device(target, names)
            total += size if dev == CPU else 0
        return total

    def _op_offload(
        self,
        compute: dict[int, int],
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
    ) -> None:
        """Room in the first offloading GPU's compute buffer for the host-weight ops it takes over.

        ggml/src/ggml-backend.cpp ggml_backend_sched_backend_id_from_cur (pass 1 of
        ggml_backend_sched_split_graph): an op reading a weight in a host buffer goes to the first
        backend that supports it (supports_op: Vulkan rejects a src or dst over
        maxStorageBufferRange) and whose offload_op accepts its batch
        (ggml_backend_{cuda,vk}_device_offload_op: get_op_batch_size = ne[1] of MUL_MAT, ne[2] of
        MUL_MAT_ID, rows otherwise, 0 for GET_ROWS; at least op_offload_min_batch_size, 32 unless
        GGML_OP_OFFLOAD_MIN_BATCH). Pass 2 expands the GPU over the neighbours (norms, RoPE,
        FLASH_ATTN_EXT or the KQ product and soft_max), so a host layer runs on the GPU whole; only
        the SET_ROWS into the host KV cache stays (its destination is pre-allocated). Pass 5 copies
        each host weight in as a split input at the start of its own split (need_new_split) and
        ggml-alloc frees the copy after its one reader; the layer's K/V cache views are copied in
        for the attention the same way, and with them, once, the KQ mask's copy, which later layers
        reuse and so stays alive to the last attention. ggml_dyn_tallocr_alloc places blocks
        best-fit and grows only the last one: when no hole below fits the mask, it lands above the
        first layer's K/V views and their space stays a hole under it, below every later weight copy
        that does not fit there. So the GPU's buffer holds: the activations of one host layer (run
        on the GPU, attention included unless its KQ product is over the device's tensor limit), its
        largest weight copy, its K/V views, and two n_embd x n_tokens F32 rows of the holes those
        short-lived copies leave between the activations. An upper bound, not the allocator's
        replay: measured on Vulkan0 (scripts/bench/bench_op_offload.py, 25 starts) never under,
        median +14 %; the Granite 1B-A400M shape stacks copy and views (-ngl 0 -ub 32: 22.00 MiB
        real, 23.50 predicted), the Llama 3.2 1B shape finds the mask a lower hole (+45 %). The
        output layer on the host: the lm_head matmul (batch = the reserve graph's n_outputs) is
        taken the same way, with the output matrix's copy, the normed rows and the logits in the
        GPU's buffer.
        """
        if not rc.op_offload or not (
            rc.overrides
            or rc.cpu_moe
            or rc.n_cpu_moe
            or rc.n_cpu_ffn
            or lmap.output == CPU
            or CPU in lmap.layers
        ):
            return  # every weight is on a GPU: nothing to offload
        threshold = max(rc.op_offload_min_batch, 1)
        b = next((i for i, g in enumerate(gpus) if g.backend in OP_OFFLOAD_BACKENDS), None)
        if b is None:
            return
        limit = gpus[b].max_tensor_bytes
        n_moe = self.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
        rules = rc.all_overrides if rc.overrides else ()
        n_tokens = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch)  # llama_context::sched_reserve
        n_out = min(n_tokens, rc.n_outputs_max)
        layers_on = n_tokens >= threshold
        key = ("offload", lmap, n_moe, rc.n_cpu_ffn, rules, limit, layers_on, n_out >= threshold)
        weight, down, host_layers, refused, output = self.remember(
            key,
            lambda: self._offload_scan(
                lmap, n_moe, rc.n_cpu_ffn, rules, limit, layers_on, n_out >= threshold
            ),
        )
        product = self._displaced(down, n_tokens)
        need = compute[b]
        e_rows = 2 * 4 * self.facts.n_embd * n_tokens
        attention = kq_fits(self.facts, rc, limit)
        if host_layers:
            layers = host_layers
            views = 0
            if attention:  # the K/V views of one layer's cache, copied in for its attention
                deltas = self._cell_deltas(layers, rc.type_k, rc.type_v, rc.flash_attn)
                views = max(f * rc.n_ctx_seq + w * rc.n_swa_cells for f, w in deltas) * rc.n_stream
            need = max(
                need,
                op_offload_compute(self.facts, rc, layers, gpus[b].backend, attention=attention)
                + weight
                + views
                + e_rows,
            )
        elif weight:  # the GPU's own layers read the copy (-ot exps=CPU, --n-cpu-moe)
            need += weight + product + e_rows
        if (
            output
        ):  # at the lm_head: the matrix's copy, result_norm and the logits [n_vocab, n_outputs] F32
            need = max(need, output + 4 * n_out * (self.facts.n_vocab + 2 * self.facts.n_embd))
        compute[b] = need
        cpu_layers = any(d == CPU for d in lmap.layers[: self.facts.n_layer])
        if (
            (weight or output)
            and not refused
            and (not cpu_layers or (layers_on and attention and host_layers))
        ):
            # nothing but inputs (and an lm_head the GPU does not take) is left to run on the host
            keep = lmap.output == CPU and not output
            host = op_offload_host_compute(self.facts, rc, gpus[b].backend, output=keep)
            if (
                host_layers
            ):  # the SET_ROWS into the host cache read copies of one layer's Kcur and Vcur
                host += max(
                    self._kv_row_copies(n_tokens, il) for il in self._kv_widths(host_layers)
                )
            compute[CPU] = max(
                min(compute[CPU], host), output_refused_host(self.facts, rc, lmap, gpus)
            )

    def _offload_scan(
        self,
        lmap: LayerMap,
        n_moe: int,
        n_cpu_ffn: int,
        rules: tuple[tuple[str, str], ...],
        limit: int | None,
        layers_on: bool,
        outputs_on: bool,
    ) -> _OffloadScan:
        """The weights op offload copies to the GPU, for one placement: (the largest host weight a
        GPU op reads, the smallest routed ffn_down among them or None, the host layers whose ops the
        GPU runs, whether a host layer's weight is refused by the GPU (too large), the host output
        matrix's bytes)."""
        parts, refused_layers, out_fixed, out_free = self.remember(
            ("offload_parts", rules, limit), lambda: self._offload_parts(rules, limit)
        )
        # a host layer's weight whose op the GPU cannot take: the host keeps that op's activations
        refused = any(lmap.layers[il] == CPU for il in refused_layers)
        output = 0
        if outputs_on:
            output = max(out_fixed, out_free if lmap.output == CPU else 0)
        weight, down, host_layers = 0, None, []
        found: tuple[tuple[int, int | None] | None, ...]
        if layers_on:
            for il, (fixed, free, exp, dense, both) in enumerate(parts):
                if lmap.layers[il] == CPU:
                    found = (fixed, free)
                    if fixed or free:
                        host_layers.append(il)
                else:
                    found = (
                        fixed,
                        exp if il < n_moe else None,
                        dense if il < n_cpu_ffn else None,
                        both if il < n_moe or il < n_cpu_ffn else None,
                    )
                for part in found:
                    if part:
                        weight = max(weight, part[0])
                        if part[1] is not None:
                            down = part[1] if down is None else min(down, part[1])
        return weight, down, tuple(host_layers), refused, output

    def _offload_parts(
        self, rules: tuple[tuple[str, str], ...], limit: int | None
    ) -> _OffloadParts:
        """The weights a GPU's ops may read (probe op within `limit`), once per rule set and limit:
        per block (up to n_layer_all), (largest bytes, smallest routed ffn_down bytes or None) of
        those an -ot rule puts on the CPU, of those no rule places (on the host with a host layer),
        and of these the routed experts, the dense FFN matrices, and the ones that are both; the
        blocks (< n_layer) with a weight over the limit; the largest output matrix an -ot rule puts
        on the CPU, and the largest no rule places."""
        targets = self._targets(rules)[1] if rules else None
        parts: list[list[tuple[int, int | None] | None]] = [
            [None] * 5 for _ in range(self.facts.n_layer_all)
        ]
        refused: set[int] = set()
        out_fixed = out_free = 0
        for i, (probe, name, il, raw, _padded) in enumerate(self.probes):
            if (
                limit is not None and probe > limit
            ):  # supports_op refuses it: the op stays on the host
                if il is not None and il < self.facts.n_layer:
                    refused.add(il)
                continue
            target = targets[i] if targets is not None else None
            on_cpu = target is not None and target.upper().startswith("CPU")
            if il is None:
                if name.startswith("output.weight"):  # token_embd is read by GET_ROWS (batch 0)
                    if on_cpu:
                        out_fixed = max(out_fixed, raw)
                    elif target is None:
                        out_free = max(out_free, raw)
                continue
            if il >= self.facts.n_layer_all or (target is not None and not on_cpu):
                continue
            expert, dense, expert_down, _with_output = self._classes[i]
            kinds = [FIXED]
            if not on_cpu:
                ffn = _ffn_kind(expert, dense)
                kinds = [FREE] if ffn is None else [FREE, ffn]
            for kind in kinds:
                part = parts[il][kind]
                small = raw if expert_down else None
                if part is None:
                    parts[il][kind] = (raw, small)
                else:
                    if small is None:
                        least = part[1]
                    elif part[1] is None:
                        least = small
                    else:
                        least = min(part[1], small)
                    parts[il][kind] = (max(part[0], raw), least)
        return tuple(tuple(p) for p in parts), frozenset(refused), out_fixed, out_free

    def _targets(
        self, rules: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
        """The -ot buffer type of each probe's tensor, by its name and by its name without
        "(tied)"."""

        def make() -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
            found = self.override_targets(rules)
            names = [name for _, name, *_ in self.probes]
            return tuple(found[n] for n in names), tuple(
                found[n.removesuffix("(tied)")] for n in names
            )

        return self.remember(("targets", rules), make)

    def override_targets(self, rules: tuple[tuple[str, str], ...]) -> dict[str, str | None]:
        """placement.override_target for every tensor name (and each probe's name, with and without
        "(tied)") under these rules, once per rule set: each rule's matches are found once per model
        (the rules that --n-cpu-moe / --n-cpu-ffn write, one per block, from an index of the block
        numbers in the names)."""

        def make() -> dict[str, str | None]:
            out: dict[str, str | None] = dict.fromkeys(self._names)
            left = set(self._names)
            for (
                rx,
                buft,
            ) in (
                rules
            ):  # every rule is checked (InputError for the first bad one), as _compiled does
                hit = self.remember(("rule", rx), partial(self._rule_matches, rx)) & left
                for n in hit:
                    out[n] = buft
                left -= hit
            return out

        return self.remember(("override_targets", rules), make)

    def _rule_matches(self, rx: str) -> frozenset[str]:
        """The names an -ot regex is found in (std::regex_search)."""
        generated = block_rule(rx)
        if generated is not None:
            suffix, block = generated
            index = self.remember(("blocks", suffix), lambda: block_index(self._names, suffix))
            return index.get(block, frozenset())
        found = checked_regex(rx)
        return frozenset(n for n in self._names if found.search(n))

    def _cell_deltas(
        self, layers: tuple[int, ...], type_k: GGMLType, type_v: GGMLType, flash_attn: bool
    ) -> tuple[tuple[int, int], ...]:
        """The distinct (full-attention, SWA) KV bytes per cell of these layers."""

        def make() -> tuple[tuple[int, int], ...]:
            full, swa = self.cell_prefix(type_k, type_v, flash_attn)
            return tuple(
                dict.fromkeys((full[il + 1] - full[il], swa[il + 1] - swa[il]) for il in layers)
            )

        return self.remember(("cells", layers, type_k, type_v, flash_attn), make)

    def _kv_widths(self, layers: tuple[int, ...]) -> tuple[int, ...]:
        """One layer of each distinct (n_embd_k_gqa, n_embd_v_gqa) among these layers."""

        def make() -> tuple[int, ...]:
            first: dict[tuple[int, int], int] = {}
            for il in layers:
                first.setdefault((self.facts.n_embd_k_gqa(il), self.facts.n_embd_v_gqa(il)), il)
            return tuple(first.values())

        return self.remember(("kv_widths", layers), make)

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

    def _placement(
        self, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]
    ) -> tuple[Sequence[DeviceSpec], LayerMap, dict[int, int], tuple[str, ...]]:
        """The devices in use, the layer map, the weights per device and the weights kept on the
        host over a device's tensor limit (_keep_oversized_on_host), as estimate places them."""
        gpus = _active_gpus(rc, gpus)
        lmap = layer_map(
            self.facts.n_layer_all,
            rc.n_gpu_layers,
            self._points(rc, gpus),
            since("ngl_output_first", rc.build),
        )
        weights = self._weights(rc, lmap, gpus)
        moved = self._keep_oversized_on_host(weights, rc, lmap, gpus)
        return gpus, lmap, weights, moved

    def n_tensors(self, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> int:
        """llama_model::n_tensors() for this config on these devices (loaded_tensors, with the
        placement estimate makes)."""
        gpus, lmap, _weights, moved = self._placement(rc, gpus)
        return self.loaded_tensors(rc, lmap, gpus, moved)

    def loaded_tensors(
        self,
        rc: ResolvedConfig,
        lmap: LayerMap | None,
        gpus: Sequence[DeviceSpec] = (),
        moved: tuple[str, ...] = (),
    ) -> int:
        """llama_model::n_tensors() (src/llama-model.cpp: every tensor of every buffer type's
        context, tensors_by_name) for this placement: the tensors loaded (NextN blocks skipped),
        plus a TENSOR_DUPLICATED tensor's copy in each further buffer type
        (llama_model_loader::create_tensor returns the one already made only within the same
        buffer type's context):
          - a tied output (token_embd as the output matrix) on another device than token_embd,
            which stays on the host; Gemma 4 and Gemma 3n make the tied output first and
            token_embd after it as a tensor of its own, wherever each goes (gemma4.cpp,
            gemma3n.cpp load_arch_tensors);
          - the RoPE factors (placement.rope_factor_layers): one per device among their blocks.
        An -ot rule that names the tensor puts every copy in its one buffer type.
        Measured with llama-server -v ("sched_reserve: max_nodes = ", 8 x n_tensors): Gemma 4 E2B
        542 on the CPU (541 in the GGUF), 543 at -ngl 2 on Vulkan0 (layer 34's RoPE factors)."""
        n = len(self.tensors)
        targets = self.override_targets(rc.all_overrides) if rc.all_overrides else {}
        if self.tied_raw and self.facts.architecture in ("gemma4", "gemma3n"):
            n += 1  # token_embd is made without TENSOR_DUPLICATED: never the output's tensor
        elif (
            self.tied_raw
            and targets.get("token_embd.weight") is None
            and lmap is not None
            and lmap.output != CPU
            and gpus
            and "output.weight(tied)" not in moved
        ):
            n += 1
        if self.rope_raw and lmap is not None and not any(targets.get(r) for r in ROPE_FACTORS):
            copies = len({lmap.layers[il] for il in self.rope_layers})
            n += self.rope_names * (copies - 1)
        return n

    def remember(self, key: tuple[object, ...], make: Callable[[], _T]) -> _T:
        """A per-model memo of what depends on the placement and the flags, not on the context."""
        memo = self._memo
        if key in memo:
            return memo[key]  # type: ignore[return-value]
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        value = memo[key] = make()
        return value

    def _kv_row_copies(self, n_tokens: int, il: int) -> int:
        """What the host's buffer grows by for the copies of a host layer's Kcur and Vcur (F32,
        n_tokens rows) that the SET_ROWS into its host cache reads, once a GPU runs the rest of the
        layer (op offload).

        ggml_backend_sched_split_graph (ggml/src/ggml-backend.cpp) adds each split input to the
        graph copy as a view of its source (input_dep, "so that it is not freed before the copy is
        done") followed by the copy: the token rows' GET_ROWS result on the host (n_embd x n_tokens
        F32) is freed once the first GPU split has copied it in, and the later host split that
        writes the cache allocates its two copies at its start, best-fit into that hole
        (ggml_dyn_tallocr_alloc); only a copy that no longer fits grows the buffer. Measured: the
        host buffer is the inputs alone whenever n_embd_k + n_embd_v <= n_embd (Qwen3-4B b5285,
        Mistral-Nemo b8133 on CUDA; Qwen3-235B b5398, Qwen2.5-3B b8179, Llama 3.2 1B b8319 on
        Vulkan; the 23 host-layer lavapipe starts of scripts/bench/bench_op_offload.py, 1..8 MiB
        over before), and one V row more for Qwen3-0.6B (k = v = n_embd, the Jetson row)."""
        hole, grow = 4 * n_tokens * self.facts.n_embd, 0
        for rows in (
            4 * n_tokens * self.facts.n_embd_k_gqa(il),
            4 * n_tokens * self.facts.n_embd_v_gqa(il),
        ):
            if rows <= hole:
                hole -= rows
            else:
                grow += rows
        return grow

    def _host_ops_of_gpu_layers(
        self,
        compute: dict[int, int],
        rc: ResolvedConfig,
        lmap: LayerMap,
        gpus: Sequence[DeviceSpec],
    ) -> None:
        """GPU layers whose FFN weights stay in host memory (-ot ...=CPU, --n-cpu-moe, --n-cpu-ffn)
        when no GPU takes their ops (--no-op-offload, a batch under the threshold, no offloading
        backend): pass 1 of ggml_backend_sched_split_graph leaves each such op on the CPU with its
        weight, and the expansion passes give the CPU the unassigned ops between them (the GLU), so
        the host's compute buffer holds that FFN's activations besides the graph inputs (granite3
        shape, -ot exps=CPU --no-op-offload -ub 2048 on Vulkan0: 128.07 MiB Vulkan_Host, the inputs
        alone 32)."""
        if not gpus or not (rc.overrides or rc.cpu_moe or rc.n_cpu_moe or rc.n_cpu_ffn):
            return
        n_moe = self.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
        rules = rc.all_overrides if rc.overrides else ()
        n_tokens = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch)
        b = next((i for i, g in enumerate(gpus) if g.backend in OP_OFFLOAD_BACKENDS), None)
        taken = rc.op_offload and b is not None and n_tokens >= max(rc.op_offload_min_batch, 1)
        limit = gpus[b].max_tensor_bytes if b is not None else None
        key = ("host_ffn", lmap.layers, n_moe, rc.n_cpu_ffn, rules, taken, limit)
        layers = self.remember(
            key, lambda: self._host_ffn_layers(lmap, n_moe, rc.n_cpu_ffn, rules, taken, limit)
        )
        if layers:
            compute[CPU] = max(compute[CPU], host_ffn_compute(self.facts, rc, layers))

    def _host_ffn_layers(
        self,
        lmap: LayerMap,
        n_moe: int,
        n_cpu_ffn: int,
        rules: tuple[tuple[str, str], ...],
        taken: bool,
        limit: int | None,
    ) -> tuple[int, ...]:
        """The GPU layers whose host-resident FFN weights' ops stay on the CPU."""
        kinds = self.remember(
            ("host_ffn_kinds", rules, taken, limit),
            lambda: self._host_ffn_kinds(rules, taken, limit),
        )
        return tuple(
            il
            for il, k in enumerate(kinds)
            if k
            and lmap.layers[il] != CPU
            and (
                FIXED in k
                or (EXP in k and il < n_moe)
                or (DENSE in k and il < n_cpu_ffn)
                or (BOTH in k and (il < n_moe or il < n_cpu_ffn))
            )
        )

    def _host_ffn_kinds(
        self, rules: tuple[tuple[str, str], ...], taken: bool, limit: int | None
    ) -> tuple[frozenset[int], ...]:
        """Per block (< n_layer): the kinds (FIXED: an -ot rule puts it on the CPU; else EXP, DENSE,
        BOTH) of its weights whose ops no GPU takes (all of them unless `taken`; then those whose
        probe op is over `limit`)."""
        targets = self._targets(rules)[0] if rules else None
        kinds: list[set[int]] = [set() for _ in range(self.facts.n_layer)]
        for i, (probe, _name, il, _raw, _padded) in enumerate(self.probes):
            if (
                il is None
                or il >= self.facts.n_layer
                or (taken and (limit is None or probe <= limit))
            ):
                continue
            target = targets[i] if targets is not None else None
            expert, dense, _down, _with_output = self._classes[i]
            if target is not None and target.upper().startswith("CPU"):
                kinds[il].add(FIXED)
            elif target is None and (ffn := _ffn_kind(expert, dense)) is not None:
                kinds[il].add(ffn)
        return tuple(frozenset(k) for k in kinds)

    def _displaced(self, raw: int | None, n_tokens: int) -> int:
        """`raw`: the smallest host-resident routed ffn_down op offload copies (None: none).
        A routed expert's ffn_down copy is allocated at the start of its split, when the gate and up
        products [n_ff_exp, n_expert_used, n_tokens] F32 are freed: best-fit
        (ggml_dyn_tallocr_alloc) puts a copy no larger than that block into it, and the down product
        [n_embd, n_expert_used, n_tokens], which would have reused the block (compute._moe_ffn),
        lands on top instead."""
        moe = self.facts.moe
        if moe is None or raw is None:
            return 0
        freed = 2 * 4 * n_tokens * moe.n_expert_used * moe.n_ff_exp
        down = 4 * n_tokens * moe.n_expert_used * self.facts.n_embd
        return down if raw <= freed and down <= freed else 0

    def bytes_read_per_token(
        self, rc: ResolvedConfig, lmap: LayerMap, n_gpu: int
    ) -> dict[int, int]:
        """Weight bytes each device reads per generated token: everything but token_embd (a lookup)
        and, of the routed experts, only the n_expert_used / n_expert share a token activates."""
        moe = self.facts.moe
        share = moe.n_expert_used / moe.n_expert if moe and moe.n_expert else 1.0
        n_moe = self.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
        out = dict.fromkeys([CPU, *range(n_gpu)], 0)
        for dev, a, b in lmap.runs:
            out[dev] += self._sum(ALL, a, b) - self._sum(EXPERTS, a, b)
            moved = self._sum(EXPERTS, a, min(b, n_moe)) if dev != CPU else 0
            out[dev] += int((self._sum(EXPERTS, a, b) - moved) * share)
            out[CPU] += int(moved * share)
        # a tied output reads token_embd as its matrix
        out[lmap.output] += self.output_raw + self.tied_raw
        return out

    def _add_output(self, out: dict[int, int], dev: int, pad: bool) -> None:
        out[dev] += self.output_padded if pad else self.output_raw
        if dev != CPU:  # a tied output is a second copy of token_embd on the output device
            out[dev] += self.tied_padded if pad else self.tied_raw

    def _weights_by_tensor(
        self, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
    ) -> dict[int, int]:
        """Slow path for user -ot rules: every tensor through the override list (once per
        placement)."""
        key = ("weights", lmap, rc.all_overrides, tuple((g.name, g.backend) for g in gpus))
        return dict(self.remember(key, lambda: self._tensor_weights(rc, lmap, gpus)))

    def _tensor_weights(
        self, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
    ) -> dict[int, int]:
        names = {g.name.lower(): i for i, g in enumerate(gpus)}
        targets = self.override_targets(rc.all_overrides)
        out = dict.fromkeys([CPU, *range(len(gpus))], 0)
        rope_target: int | None = None
        for name, raw, padded in self.tensors:
            il = tensor_layer(name)
            if self.rope_raw and name in ROPE_FACTORS:
                rule = targets[name]
                if rule is not None:
                    rope_target = _buffer_device(rule, names)
                continue
            if il is not None and il < self.facts.n_layer_all:
                dev = lmap.layers[il]
            elif is_output_layer(name):
                dev = lmap.output
            else:
                dev = CPU
            target = targets[name]
            if target is not None:
                dev = _buffer_device(target, names)
            out[dev] += padded if dev != CPU and gpus[dev].backend in PADDED_BACKENDS else raw
        if lmap.output != CPU:
            out[lmap.output] += (
                self.tied_padded if gpus[lmap.output].backend in PADDED_BACKENDS else self.tied_raw
            )
        self._add_rope_factors(out, lmap, rope_target)
        return out

    def _kv(self, rc: ResolvedConfig, lmap: LayerMap, n_gpu: int) -> dict[int, int]:
        out = dict.fromkeys([CPU, *range(n_gpu)], 0)
        full, swa = self.cell_prefix(
            rc.type_k, rc.type_v, rc.flash_attn, since("mla_v_less", rc.build)
        )
        cells_full, cells_swa = rc.n_ctx_seq * rc.n_stream, rc.n_swa_cells * rc.n_stream
        for dev, a, b in lmap.runs:
            out[dev if rc.kv_offload else CPU] += (full[b] - full[a]) * cells_full + (
                swa[b] - swa[a]
            ) * cells_swa
        return out

    def _recurrent(self, rc: ResolvedConfig, lmap: LayerMap, n_gpu: int) -> dict[int, int]:
        """R and S states, F32, mem_size = max(1, n_seq_max) rows each (llama_memory_recurrent)."""
        out = dict.fromkeys([CPU, *range(n_gpu)], 0)
        rec = self.facts.recurrent
        if rec is None:
            return out
        per_layer = 4 * (rec.n_embd_r + rec.n_embd_s) * max(1, rc.n_seq_max)
        p = self.recurrent_prefix
        for dev, a, b in lmap.runs:
            out[dev if rc.kv_offload else CPU] += (p[b] - p[a]) * per_layer
        return out


def _prefix(values: Sequence[int]) -> list[int]:
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def _buffer_device(buft: str, names: dict[str, int]) -> int:
    """An -ot buffer type name → device index (CPU buffer types, or a GPU by its name)."""
    key = buft.lower()
    if key.startswith("cpu"):
        return CPU
    for name, i in names.items():
        if key == name or key.startswith(name + "_"):
            return i
    raise InputError(
        f"unknown buffer type '{buft}' in --override-tensor (devices: CPU, "
        f"{', '.join(names) or 'none'})"
    )


def check_override_devices(rules: Sequence[tuple[str, str]], gpus: Sequence[DeviceSpec]) -> None:
    """Every -ot buffer type names a device of this machine (arg.cpp: "unknown buffer type")."""
    names = {g.name.lower(): i for i, g in enumerate(gpus)}
    for _, buft in rules:
        _buffer_device(buft, names)


def _active_gpus(rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> list[DeviceSpec]:
    """-sm none uses only the main GPU; -sm row is unsupported by CUDA at 0c1e570 (issue #27366) and
    from b9890 on (BUILD_RULES cuda_no_split_buffers); older builds split the matrices by rows and
    KV and compute by layer, as -sm layer does (PR #10026)."""
    if rc.split_mode == "none" and gpus:
        if not 0 <= rc.main_gpu < len(gpus):
            raise ConfigError(f"--main-gpu {rc.main_gpu} is not one of the {len(gpus)} GPU(s)")
        return [gpus[rc.main_gpu]]
    if (
        rc.split_mode == "row"
        and any(g.backend in ("cuda", "rocm") for g in gpus)
        and since("cuda_no_split_buffers", rc.build)
    ):  # ROCm builds ggml-cuda (HIP): the same buffer types
        raise ConfigError("device CUDA0 does not support split buffers (-sm row); use -sm layer")
    if rc.split_mode == "tensor":
        raise ConfigError("-sm tensor (experimental Meta device) is not modelled; use -sm layer")
    return list(gpus)
