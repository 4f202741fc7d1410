"""Op offload: the hand-derived rules for what a GPU's compute buffer takes over when ops read
weights that live in host memory (the estimate's side of MemoryModel; the replay, graph/replay.py,
runs ggml_backend_sched_split_graph itself).

ggml/src/ggml-backend.cpp ggml_backend_sched_backend_id_from_cur (pass 1 of
ggml_backend_sched_split_graph): an op reading a weight in a host buffer goes to the first backend
that supports it and whose offload_op accepts its batch (at least op_offload_min_batch_size, 32
unless GGML_OP_OFFLOAD_MIN_BATCH); pass 2 expands it over the neighbours; pass 5 copies each host
weight in as a split input. add_op_offload sizes the GPU's and the host's buffers for that;
add_host_ops_of_gpu_layers the host's when no GPU takes those ops. No new rule is derived here from
a replay run: where the replay covers a config, MemoryModel uses it instead."""

from __future__ import annotations

from collections.abc import Sequence

from ..facts.hparams import ModelFacts
from ..frozen import replace
from ..machine.devices import DeviceSpec
from ..reader.ggml_types import GGMLType
from .compute import backend_kind, base_settings, kq_fits, output_refused_host, predict_compute
from .overrides import Rules, probe_targets
from .placement import CPU, LayerMap
from .resolve import ResolvedConfig
from .tensors import ModelTensors

# (largest host weight op offload copies, smallest routed ffn_down among them, host layers, refused,
# output)
_OffloadScan = tuple[int, int | None, tuple[int, ...], bool, int]
# per block, op offload's kinds of weights (_offload_parts, _host_ffn_kinds)
FIXED, FREE, EXP, DENSE, BOTH = range(5)
# one kind's (largest bytes, smallest routed ffn_down or None), None for no such weight
_Part = tuple[int, int | None] | None
_OffloadParts = tuple[tuple[tuple[_Part, ...], ...], frozenset[int], int, int]


def _ffn_kind(expert: bool, dense: bool) -> int | None:
    """The part of a layer's FFN weights: BOTH, EXP or DENSE; None for a layer with neither."""
    if expert and dense:
        return BOTH
    if expert:
        return EXP
    return DENSE if dense else None


def add_op_offload(
    m: ModelTensors,
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
    n_moe = m.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
    rules = rc.all_overrides if rc.overrides else ()
    n_tokens = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch)  # llama_context::sched_reserve
    n_out = min(n_tokens, rc.n_outputs_max)
    layers_on = n_tokens >= threshold
    key = ("offload", lmap, n_moe, rc.n_cpu_ffn, rules, limit, layers_on, n_out >= threshold)
    weight, down, host_layers, refused, output = m.remember(
        key,
        lambda: _offload_scan(
            m, lmap, n_moe, rc.n_cpu_ffn, rules, limit, layers_on, n_out >= threshold
        ),
    )
    product = _displaced(m, down, n_tokens)
    need = compute[b]
    e_rows = 2 * 4 * m.facts.n_embd * n_tokens
    attention = kq_fits(m.facts, rc, limit)
    if host_layers:
        layers = host_layers
        views = 0
        if attention:  # the K/V views of one layer's cache, copied in for its attention
            deltas = _cell_deltas(m, layers, rc.type_k, rc.type_v, rc.flash_attn)
            views = max(f * rc.n_ctx_seq + w * rc.n_swa_cells for f, w in deltas) * rc.n_stream
        need = max(
            need,
            op_offload_compute(m.facts, rc, layers, gpus[b].backend, attention=attention)
            + weight
            + views
            + e_rows,
        )
    elif weight:  # the GPU's own layers read the copy (-ot exps=CPU, --n-cpu-moe)
        need += weight + product + e_rows
    if (
        output
    ):  # at the lm_head: the matrix's copy, result_norm and the logits [n_vocab, n_outputs] F32
        need = max(need, output + 4 * n_out * (m.facts.n_vocab + 2 * m.facts.n_embd))
    compute[b] = need
    cpu_layers = CPU in lmap.layers[: m.facts.n_layer]
    if (
        (weight or output)
        and not refused
        and (not cpu_layers or (layers_on and attention and host_layers))
    ):
        # nothing but inputs (and an lm_head the GPU does not take) is left to run on the host
        keep = lmap.output == CPU and not output
        host = op_offload_host_compute(m.facts, rc, gpus[b].backend, output=keep)
        if host_layers:  # the SET_ROWS into the host cache read copies of one layer's Kcur and Vcur
            host += max(_kv_row_copies(m, n_tokens, il) for il in _kv_widths(m, host_layers))
        compute[CPU] = max(min(compute[CPU], host), output_refused_host(m.facts, rc, lmap, gpus))


def _offload_scan(
    m: ModelTensors,
    lmap: LayerMap,
    n_moe: int,
    n_cpu_ffn: int,
    rules: Rules,
    limit: int | None,
    layers_on: bool,
    outputs_on: bool,
) -> _OffloadScan:
    """The weights op offload copies to the GPU, for one placement: (the largest host weight a
    GPU op reads, the smallest routed ffn_down among them or None, the host layers whose ops the
    GPU runs, whether a host layer's weight is refused by the GPU (too large), the host output
    matrix's bytes)."""
    parts, refused_layers, out_fixed, out_free = m.remember(
        ("offload_parts", rules, limit), lambda: _offload_parts(m, rules, limit)
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


def _offload_parts(m: ModelTensors, rules: Rules, limit: int | None) -> _OffloadParts:
    """The weights a GPU's ops may read (probe op within `limit`), once per rule set and limit:
    per block (up to n_layer_all), (largest bytes, smallest routed ffn_down bytes or None) of
    those an -ot rule puts on the CPU, of those no rule places (on the host with a host layer),
    and of these the routed experts, the dense FFN matrices, and the ones that are both; the
    blocks (< n_layer) with a weight over the limit; the largest output matrix an -ot rule puts
    on the CPU, and the largest no rule places."""
    targets = probe_targets(m, rules)[1] if rules else None
    parts: list[list[_Part]] = [[None] * 5 for _ in range(m.facts.n_layer_all)]
    refused: set[int] = set()
    out_fixed = out_free = 0
    for i, (probe, name, il, raw, _padded) in enumerate(m.probes):
        if limit is not None and probe > limit:  # supports_op refuses it: the op stays on the host
            if il is not None and il < m.facts.n_layer:
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
        if il >= m.facts.n_layer_all or (target is not None and not on_cpu):
            continue
        expert, dense, expert_down, _with_output = m.classes[i]
        small = raw if expert_down else None
        for kind in _kinds(expert, dense, on_cpu=on_cpu):
            parts[il][kind] = _merged(parts[il][kind], raw, small)
    return tuple(tuple(p) for p in parts), frozenset(refused), out_fixed, out_free


def _kinds(expert: bool, dense: bool, *, on_cpu: bool) -> list[int]:
    """The parts of a block a weight counts in: FIXED when a rule puts it on the CPU, else FREE
    and its FFN kind."""
    if on_cpu:
        return [FIXED]
    ffn = _ffn_kind(expert, dense)
    return [FREE] if ffn is None else [FREE, ffn]


def _merged(part: _Part, raw: int, small: int | None) -> tuple[int, int | None]:
    """`part` (largest bytes, smallest routed ffn_down or None) with one more weight."""
    if part is None:
        return raw, small
    if small is None:
        least = part[1]
    elif part[1] is None:
        least = small
    else:
        least = min(part[1], small)
    return max(part[0], raw), least


def _cell_deltas(
    m: ModelTensors, layers: tuple[int, ...], type_k: GGMLType, type_v: GGMLType, flash_attn: bool
) -> tuple[tuple[int, int], ...]:
    """The distinct (full-attention, SWA) KV bytes per cell of these layers."""

    def make() -> tuple[tuple[int, int], ...]:
        full, swa = m.cell_prefix(type_k, type_v, flash_attn)
        return tuple(
            dict.fromkeys((full[il + 1] - full[il], swa[il + 1] - swa[il]) for il in layers)
        )

    return m.remember(("cells", layers, type_k, type_v, flash_attn), make)


def _kv_widths(m: ModelTensors, layers: tuple[int, ...]) -> tuple[int, ...]:
    """One layer of each distinct (n_embd_k_gqa, n_embd_v_gqa) among these layers."""

    def make() -> tuple[int, ...]:
        first: dict[tuple[int, int], int] = {}
        for il in layers:
            first.setdefault((m.facts.n_embd_k_gqa(il), m.facts.n_embd_v_gqa(il)), il)
        return tuple(first.values())

    return m.remember(("kv_widths", layers), make)


def _kv_row_copies(m: ModelTensors, n_tokens: int, il: int) -> int:
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
    hole, grow = 4 * n_tokens * m.facts.n_embd, 0
    for rows in (
        4 * n_tokens * m.facts.n_embd_k_gqa(il),
        4 * n_tokens * m.facts.n_embd_v_gqa(il),
    ):
        if rows <= hole:
            hole -= rows
        else:
            grow += rows
    return grow


def add_host_ops_of_gpu_layers(
    m: ModelTensors,
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
    n_moe = m.facts.n_layer_all if rc.cpu_moe else rc.n_cpu_moe
    rules = rc.all_overrides if rc.overrides else ()
    n_tokens = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch)
    b = next((i for i, g in enumerate(gpus) if g.backend in OP_OFFLOAD_BACKENDS), None)
    taken = rc.op_offload and b is not None and n_tokens >= max(rc.op_offload_min_batch, 1)
    limit = gpus[b].max_tensor_bytes if b is not None else None
    key = ("host_ffn", lmap.layers, n_moe, rc.n_cpu_ffn, rules, taken, limit)
    layers = m.remember(
        key, lambda: _host_ffn_layers(m, lmap, n_moe, rc.n_cpu_ffn, rules, taken, limit)
    )
    if layers:
        compute[CPU] = max(compute[CPU], host_ffn_compute(m.facts, rc, layers))


def _host_ffn_layers(
    m: ModelTensors,
    lmap: LayerMap,
    n_moe: int,
    n_cpu_ffn: int,
    rules: Rules,
    taken: bool,
    limit: int | None,
) -> tuple[int, ...]:
    """The GPU layers whose host-resident FFN weights' ops stay on the CPU."""
    kinds = m.remember(
        ("host_ffn_kinds", rules, taken, limit),
        lambda: _host_ffn_kinds(m, rules, taken, limit),
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
    m: ModelTensors, rules: Rules, taken: bool, limit: int | None
) -> tuple[frozenset[int], ...]:
    """Per block (< n_layer): the kinds (FIXED: an -ot rule puts it on the CPU; else EXP, DENSE,
    BOTH) of its weights whose ops no GPU takes (all of them unless `taken`; then those whose
    probe op is over `limit`)."""
    targets = probe_targets(m, rules)[0] if rules else None
    kinds: list[set[int]] = [set() for _ in range(m.facts.n_layer)]
    for i, (probe, _name, il, _raw, _padded) in enumerate(m.probes):
        if il is None or il >= m.facts.n_layer or (taken and (limit is None or probe <= limit)):
            continue
        target = targets[i] if targets is not None else None
        expert, dense, _down, _with_output = m.classes[i]
        if target is not None and target.upper().startswith("CPU"):
            kinds[il].add(FIXED)
        elif target is None and (ffn := _ffn_kind(expert, dense)) is not None:
            kinds[il].add(ffn)
    return tuple(frozenset(k) for k in kinds)


def _displaced(m: ModelTensors, raw: int | None, n_tokens: int) -> int:
    """`raw`: the smallest host-resident routed ffn_down op offload copies (None: none).
    A routed expert's ffn_down copy is allocated at the start of its split, when the gate and up
    products [n_ff_exp, n_expert_used, n_tokens] F32 are freed: best-fit
    (ggml_dyn_tallocr_alloc) puts a copy no larger than that block into it, and the down product
    [n_embd, n_expert_used, n_tokens], which would have reused the block (compute._moe_ffn),
    lands on top instead."""
    moe = m.facts.moe
    if moe is None or raw is None:
        return 0
    freed = 2 * 4 * n_tokens * moe.n_expert_used * moe.n_ff_exp
    down = 4 * n_tokens * moe.n_expert_used * m.facts.n_embd
    return down if raw <= freed and down <= freed else 0


# Backends whose device has an offload_op hook that takes host-weight ops of a large batch:
# ggml_backend_cuda_device_offload_op (ggml-cuda.cu, HIP too), ggml_backend_vk_device_offload_op
# (ggml-vulkan.cpp), ggml_backend_sycl_device_offload_op. RPC has none (ggml-rpc.cpp: NULL); Metal
# reads host buffers in place (unified memory), so nothing is copied.
OP_OFFLOAD_BACKENDS = frozenset({"cuda", "rocm", "vulkan", "sycl"})


def op_offload_compute(
    f: ModelFacts,
    rc: ResolvedConfig,
    layers: tuple[int, ...],
    backend: str,
    *,
    attention: bool = True,
) -> int:
    """The activations a GPU needs to run the host layers that op offload hands it.

    ggml-backend.cpp ggml_backend_sched_backend_id_from_cur (pass 1): an op whose weight lives in a
    host buffer goes to the first backend whose offload_op accepts it (batch >= the device's
    op_offload_min_batch_size, 32 unless GGML_OP_OFFLOAD_MIN_BATCH); pass 2 expands that backend
    over the whole layer, attention included (FLASH_ATTN_EXT, or KQ and soft_max, read no weight and
    follow their neighbours; GGML_SCHED_DEBUG=2 on Vulkan0 shows only the SET_ROWS into the host cache
    left on the CPU). The weights and the K/V views arrive as split inputs: the caller adds those.
    `attention` False: the device refuses the KQ product (too large), so attention stays on the host."""
    s = replace(
        base_settings(f, rc),
        backend=backend_kind(backend),
        layers=layers,
        holds_output=False,
        holds_input=False,
        kv_on_device=attention,
    )
    return predict_compute(f, s).device


def op_offload_host_compute(
    f: ModelFacts, rc: ResolvedConfig, backend: str, *, output: bool
) -> int:
    """The host's compute buffer once op offload has handed every host layer to a GPU: the graph inputs
    and the embedding rows (input leafs and GET_ROWS stay on the CPU, ggml_backend_sched_split_graph),
    and with `output` the lm_head the GPU does not take (its batch, n_outputs, is under the threshold)."""
    base = base_settings(f, rc)
    host = predict_compute(
        f, replace(base, backend=backend_kind(backend), layers=(), holds_output=False)
    ).host
    if output:
        host = max(host, predict_compute(f, replace(base, layers=(), holds_output=True)).device)
    return host


def host_ffn_compute(f: ModelFacts, rc: ResolvedConfig, layers: tuple[int, ...]) -> int:
    """The CPU backend's buffer when it runs the FFN of GPU layers whose weights stay on the host: the graph
    inputs and those layers' peaks without attention (it runs on the GPU with the cache)."""
    s = replace(base_settings(f, rc), layers=layers, holds_output=False, kv_on_device=False)
    return predict_compute(f, s).device
