"""Weights per device for one placement: the layer split, the -ot rules, the weights kept on the host
over a device's tensor limit, the tensor count llama.cpp reserves the scheduler for, and the bytes
each device reads per token.

src/llama-model.cpp load_tensors (0c1e570): each block's weights on its layer's device, the input
layer on the host, the output layer on lmap.output; --n-cpu-moe / --n-cpu-ffn keep a block's routed
experts / dense FFN on the host; select_weight_buft moves a weight whose probe op its device refuses
(tensors.op_probe_bytes) to the host; CUDA and ROCm pad each matrix's rows
(placement.cuda_alloc_size). Gemma 3n's and Gemma 4's per-layer token rows and projection go with
the output layer before their rules (tensors.PLE_TENSORS, ple_device)."""

from __future__ import annotations

from collections.abc import Sequence

from ..machine.devices import DeviceSpec
from ..reader.ggml_types import GGMLType
from .overrides import buffer_device, device_names, device_of, override_targets, probe_targets
from .placement import CPU, ROPE_FACTORS, LayerMap, layer_map, split_points
from .resolve import ConfigError, ResolvedConfig, since
from .tensors import (
    ALL,
    DENSE_FFN,
    EXPERTS,
    PADDED,
    PADDED_BACKENDS,
    PER_LAYER_TOKEN_EMBD,
    ModelTensors,
    ple_with_output,
)

# The weight types whose GGML_OP_GET_ROWS a GPU backend's supports_op takes at the builds before
# rules gemma3n_ple_expand / gemma4_ple_expand (the same in llama-cpp-python 0.3.17's and 0.3.20's
# trees): ggml-cuda.cu ggml_backend_cuda_device_supports_op (ROCm builds it too; 0.3.21's adds only
# Q1_0), ggml-vulkan.cpp ggml_backend_vk_device_supports_op; ggml-metal-device.m
# ggml_metal_device_supports_op takes every type but NVFP4. A backend not listed is taken to
# support it.
_CUDA_GET_ROWS = frozenset({"f32", "f16", "bf16", "i32", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
GET_ROWS_TYPES: dict[str, frozenset[str]] = {
    "cuda": _CUDA_GET_ROWS,
    "rocm": _CUDA_GET_ROWS,
    "vulkan": _CUDA_GET_ROWS
    | frozenset(
        "q2_k q3_k q4_k q5_k q6_k iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq4_xs iq4_nl"
        " mxfp4".split()
    ),
}
GET_ROWS_REFUSED: dict[str, frozenset[str]] = {"metal": frozenset({"nvfp4"})}

# what place_weights returns: the devices in use, the layer map, the weights per device, and the
# weights kept on the host over a device's tensor limit
Placed = tuple[Sequence[DeviceSpec], LayerMap, dict[int, int], tuple[str, ...]]


def is_mapped(rc: ResolvedConfig) -> bool:
    """The host's weights are mmap'd from the file (llama-model-loader.cpp: use_mmap)."""
    return rc.load_mode in ("auto", "mmap", "mmap+mlock")


def place_weights(m: ModelTensors, rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> Placed:
    """The devices in use, the layer map, the weights per device and the weights kept on the
    host over a device's tensor limit (keep_oversized_on_host), as MemoryModel.estimate places
    them."""
    gpus = active_gpus(rc, gpus)
    lmap = layer_map(
        m.facts.n_layer_all,
        rc.n_gpu_layers,
        _points(rc, gpus),
        since("ngl_output_first", rc.build),
    )
    weights = _weights(m, rc, lmap, gpus)
    moved = keep_oversized_on_host(m, weights, rc, lmap, gpus)
    return gpus, lmap, weights, moved


def active_gpus(rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> list[DeviceSpec]:
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


def _points(rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> tuple[float, ...]:
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
    m: ModelTensors, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> dict[int, int]:
    if rc.overrides:
        return _weights_by_tensor(m, rc, lmap, gpus)
    padded = [g.backend in PADDED_BACKENDS for g in gpus]
    out = dict.fromkeys([CPU, *range(len(gpus))], 0)
    out[CPU] += m.input_raw
    n_moe = m.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
    for dev, a, b in lmap.runs:
        pad = PADDED if dev != CPU and padded[dev] else 0
        out[dev] += m.sum_of(ALL + pad, a, b)
        if dev == CPU:
            continue
        moe_end, ffn_end = min(b, n_moe), min(b, rc.n_cpu_ffn)
        out[dev] -= m.sum_of(EXPERTS + pad, a, moe_end) + m.sum_of(DENSE_FFN + pad, a, ffn_end)
        out[CPU] += m.sum_of(EXPERTS, a, moe_end) + m.sum_of(DENSE_FFN, a, ffn_end)
    _add_output(m, out, lmap.output, lmap.output != CPU and padded[lmap.output])
    _add_rope_factors(m, out, lmap, None)
    if m.ple and ple_with_output(m.facts, rc.build):
        _move_ple(m, out, lmap, gpus)
    return out


def _move_ple(
    m: ModelTensors, out: dict[int, int], lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> None:
    """Move the PLE tensors that _weights counted where the current builds place them (the token
    rows on the host, the projection and its norm with block 0) to ple_device's."""
    for name, ggml_type, raw, padded in m.ple:
        was = CPU if name == PER_LAYER_TOKEN_EMBD else lmap.layers[0]
        dev = ple_device(name, ggml_type, lmap, gpus)
        if dev != was:
            out[was] -= _on(was, raw, padded, gpus)
            out[dev] += _on(dev, raw, padded, gpus)


def _on(dev: int, raw: int, padded: int, gpus: Sequence[DeviceSpec]) -> int:
    """A weight's bytes on device `dev`: CUDA's and ROCm's rows padded."""
    return padded if dev != CPU and gpus[dev].backend in PADDED_BACKENDS else raw


def ple_device(name: str, ggml_type: int, lmap: LayerMap, gpus: Sequence[DeviceSpec]) -> int:
    """The device of one of tensors.PLE_TENSORS at a build that places them with the output
    layer: the output layer's, but the token rows on the host where the output device's backend
    refuses their GGML_OP_GET_ROWS (GET_ROWS_TYPES: select_weight_buft, src/llama-model-loader.cpp,
    passes over a buffer type whose device's supports_op refuses the weight's op to the next of
    buft_list_output, the host's; CUDA takes no K-quant rows at these builds)."""
    dev = lmap.output
    if dev == CPU or name != PER_LAYER_TOKEN_EMBD:
        return dev
    backend = gpus[dev].backend
    type_name = GGMLType.of(ggml_type).name.lower()
    taken = GET_ROWS_TYPES.get(backend)
    if (taken is not None and type_name not in taken) or type_name in GET_ROWS_REFUSED.get(
        backend, frozenset()
    ):
        return CPU
    return dev


def _add_output(m: ModelTensors, out: dict[int, int], dev: int, pad: bool) -> None:
    out[dev] += m.output_padded if pad else m.output_raw
    if dev != CPU:  # a tied output is a second copy of token_embd on the output device
        out[dev] += m.tied_padded if pad else m.tied_raw


def _add_rope_factors(
    m: ModelTensors, out: dict[int, int], lmap: LayerMap, target: int | None
) -> None:
    """One copy of the RoPE factor tensors per device among the blocks that make them (F32:
    no padding), or one on an -ot rule's device (`target`: their name is the same in
    every block, so the rule meets every copy, and they are one tensor there)."""
    if not m.rope_raw:
        return
    devices = {target} if target is not None else {lmap.layers[il] for il in m.rope_layers}
    for dev in devices:
        out[dev] += m.rope_raw


def _weights_by_tensor(
    m: ModelTensors, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> dict[int, int]:
    """Slow path for user -ot rules: every tensor through the override list (once per
    placement)."""
    key = (
        "weights",
        lmap,
        rc.all_overrides,
        tuple((g.name, g.backend) for g in gpus),
        ple_with_output(m.facts, rc.build),
    )
    return dict(m.remember(key, lambda: _tensor_weights(m, rc, lmap, gpus)))


def _tensor_weights(
    m: ModelTensors, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> dict[int, int]:
    names = device_names(gpus)
    targets = override_targets(m, rc.all_overrides)
    out = dict.fromkeys([CPU, *range(len(gpus))], 0)
    rope_target: int | None = None
    ple = (
        {name: t for name, t, _, _ in m.ple} if m.ple and ple_with_output(m.facts, rc.build) else {}
    )
    for name, raw, padded in m.tensors:
        if m.rope_raw and name in ROPE_FACTORS:
            rule = targets[name]
            if rule is not None:
                rope_target = buffer_device(rule, names)
            continue
        if name in ple and targets.get(name) is None:
            dev = ple_device(name, ple[name], lmap, gpus)
        else:
            dev = device_of(m, name, lmap, targets, names)
        out[dev] += padded if dev != CPU and gpus[dev].backend in PADDED_BACKENDS else raw
    if lmap.output != CPU:
        out[lmap.output] += (
            m.tied_padded if gpus[lmap.output].backend in PADDED_BACKENDS else m.tied_raw
        )
    _add_rope_factors(m, out, lmap, rope_target)
    return out


def keep_oversized_on_host(
    m: ModelTensors,
    out: dict[int, int],
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
) -> tuple[str, ...]:
    """Move to the host each weight whose probe op exceeds its device's max_tensor_bytes; their
    names."""
    limits = [g.max_tensor_bytes for g in gpus if g.max_tensor_bytes is not None]
    moved: list[str] = []
    if not limits:
        return ()
    smallest = min(limits)
    rules = rc.all_overrides if rc.overrides else ()
    mapped = is_mapped(rc)
    targets = probe_targets(m, rules)[0] if rules else None
    for i, (probe, name, il, raw, padded) in enumerate(m.probes):
        if probe <= smallest:
            break
        if il is not None and il >= m.facts.n_layer_all:
            continue
        if targets is not None and targets[i] is not None:
            continue  # an override names its buffer type; llama.cpp does not probe it
        dev = _probe_device(m, i, rc, lmap, gpus)
        if dev == CPU:
            continue
        limit = gpus[dev].max_tensor_bytes
        if limit is None or probe <= limit:
            continue
        out[dev] -= padded if gpus[dev].backend in PADDED_BACKENDS else raw
        moved.append(name)
        if not (il is None and name.endswith("(tied)") and mapped):
            # a mapped tied copy shares token_embd's pages (one CPU_Mapped range)
            out[CPU] += raw
    return tuple(moved)


def _probe_device(
    m: ModelTensors, i: int, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> int:
    """The device of probe `i`'s weight before any tensor limit: its block's, the output layer's,
    or the host's (the input layer, and a block's routed experts / dense FFN that --n-cpu-moe /
    --n-cpu-ffn keep there); a PLE tensor's at a build that places them with the output layer
    (ple_device)."""
    _probe, name, il, _raw, _padded = m.probes[i]
    if m.ple and ple_with_output(m.facts, rc.build):
        for ple_name, ggml_type, _, _ in m.ple:
            if ple_name == name:
                return ple_device(name, ggml_type, lmap, gpus)
    expert, dense, _down, with_output = m.classes[i]
    if il is None:
        return lmap.output if with_output else CPU
    n_moe = m.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
    if (expert and il < n_moe) or (dense and il < rc.n_cpu_ffn):
        return CPU
    return lmap.layers[il]


def loaded_tensors(
    m: ModelTensors,
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
    n = len(m.tensors)
    targets = override_targets(m, rc.all_overrides) if rc.all_overrides else {}
    if m.tied_raw and m.facts.architecture in ("gemma4", "gemma3n"):
        n += 1  # token_embd is made without TENSOR_DUPLICATED: never the output's tensor
    elif (
        m.tied_raw
        and targets.get("token_embd.weight") is None
        and lmap is not None
        and lmap.output != CPU
        and gpus
        and "output.weight(tied)" not in moved
    ):
        n += 1
    if m.rope_raw and lmap is not None and not any(targets.get(r) for r in ROPE_FACTORS):
        copies = len({lmap.layers[il] for il in m.rope_layers})
        n += m.rope_names * (copies - 1)
    return n


def bytes_read_per_token(
    m: ModelTensors, rc: ResolvedConfig, lmap: LayerMap, n_gpu: int
) -> dict[int, int]:
    """Weight bytes each device reads per generated token: everything but token_embd (a lookup)
    and, of the routed experts, only the n_expert_used / n_expert share a token activates."""
    moe = m.facts.moe
    share = moe.n_expert_used / moe.n_expert if moe and moe.n_expert else 1.0
    n_moe = m.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
    out = dict.fromkeys([CPU, *range(n_gpu)], 0)
    for dev, a, b in lmap.runs:
        out[dev] += m.sum_of(ALL, a, b) - m.sum_of(EXPERTS, a, b)
        moved = m.sum_of(EXPERTS, a, min(b, n_moe)) if dev != CPU else 0
        out[dev] += int((m.sum_of(EXPERTS, a, b) - moved) * share)
        out[CPU] += int(moved * share)
    # a tied output reads token_embd as its matrix
    out[lmap.output] += m.output_raw + m.tied_raw
    return out
