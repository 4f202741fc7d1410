"""The pre-split graph llama.cpp builds for one reserve: `build_graph(facts, config)`.

Mirrors llama.cpp b11434: llama_model::build_graph (src/llama-model.cpp) runs the arch's graph
(src/models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp, gemma3.cpp, gemma4.cpp, gemma3n.cpp,
deci.cpp, openai-moe.cpp, glm4-moe.cpp, deepseek2.cpp, mamba.cpp, granite-hybrid.cpp,
nemotron-h.cpp, qwen3next.cpp, qwen35moe.cpp) over the helpers of llm_graph_context
(src/llama-graph.cpp: build_inp_embd, build_inp_pos, build_inp_out_ids, build_attn_inp_kv /
_iswa / _k, build_rs_inp, build_inp_mem_hybrid, build_norm, build_qkv, build_attn,
build_attn_mha, build_ffn, build_moe_ffn, build_rs; build_mamba2_layer of
src/models/mamba-base.cpp; build_conv_state, build_recurrent_attn and build_delta_net_fused of
src/models/delta-net-base.cpp) and the KV cache views of llama_kv_cache
(src/llama-kv-cache.cpp: get_k, get_v, cpy_k, cpy_v, build_input_k_idxs / v_idxs / k_rot /
v_rot), then llm_graph_result::set_outputs.
Tensor names are those llama_context::graph_get_cb (src/llama-context.cpp) gives ("name-il").

What llama_context::sched_reserve (src/llama-context.cpp) reserves: `reserves()` lists the
ubatches, each one graph_reserve(n_tokens, n_seqs, n_outputs): the prompt-sized graph ("pp"), the
one-token-per-sequence graph ("tg"), and the prompt-sized graph again. Reserving sees the whole
cache: llama_kv_cache_context(kv) sets n_kv = the cache size (src/llama-kv-cache.cpp).

API: build_graph(facts, GraphConfig, GraphHParams) -> nodes.Graph (templated: repeated calls that
differ in cache sizes or buffers cost ~1-2 ms); build_direct (one emulation run, no template);
graph_hparams(metadata, arch); reserves(n_ctx, n_ubatch, n_seq_max, n_outputs_max) and
reserve_configs(ResolvedConfig, **buffers); clear_cache.
Families: FAMILIES. Not modelled: fused QKV, merged gate_up experts (gemma4's only) and weight
scales (".scale": gemma4's, nemotron_h_moe's, qwen3next's, qwen35moe's, and gemma3n's attention
and output ones only), expert groups, M-RoPE (qwen35moe's IMRoPE aside: ggml_rope_multi is a ROPE
node as ggml_rope_ext's, over four positions a token), LoRA, control vectors, embeddings/pooling,
backend samplers, MTP/NextN graphs, recurrent rollback (n_rs_seq), deepseek2 without MLA,
nemotron_h_moe's latent MoE projections and per-layer expert counts (Puzzle), dense nemotron_h,
qwen3next's legacy ssm_in projection, gemma3n's embeddings-only (multimodal) per-layer path
(GraphBuildError or not built).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ...errors import LlamafitError
from ...facts.hparams import ModelFacts
from ..placement import rope_factor_layers
from ..resolve import ResolvedConfig, since
from .ggml import (
    TYPE_NAMES,
    TYPES,
    Builder,
    T,
    forget_frozen,
    is_contiguous,
    nbytes_of,
    nelements,
    row_size,
    set_output,
)
from .nodes import PIN_CPU, Graph, Tensor

# archs whose graph this module builds (src/models/<arch>.cpp)
FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "gemma4",
    "gemma3n",
    "deci",
    "gpt-oss",
    "glm4moe",
    "deepseek2",
    "mamba2",
    "granitehybrid",
    "granitemoe",
    "nemotron_h_moe",
    "qwen3next",
    "qwen35moe",
)


# the builders that apply every weight scale a file may carry (build_lora_mm's w_s)
SCALES_MODELLED = frozenset({"gemma4", "gemma3n"})


class GraphBuildError(LlamafitError):
    """The graph of this model or config is not modelled."""


@dataclass(frozen=True, slots=True)
class GraphConfig:
    """One reserve's ubatch and the context around it.

    n_tokens, n_seqs, n_outputs: llama_context::graph_reserve's arguments (n_tokens rounded up to
    a multiple of n_seqs there; `reserves` does it). kv_size / kv_size_swa: cells per stream of the
    non-SWA and SWA caches (llama_kv_cache_iswa; n_kv at reserve). Buffers are names as
    ggml_backend_buffer_name gives them: `weights` for every model tensor unless `layer_weights`
    (per layer), `input_weights` (token_embd), `output_weights` (output, output_norm) or
    `overrides` (by tensor name: -ot, CPU_REPACK) say otherwise; `kv` for the cache unless
    `layer_kv` (per layer) does.
    """

    n_tokens: int
    n_seqs: int
    n_outputs: int
    kv_size: int
    kv_size_swa: int = 0
    n_seq_max: int = 1
    kv_unified: bool = False
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    weights: str = "CPU_Mapped"
    layer_weights: tuple[str, ...] = ()
    input_weights: str | None = None
    output_weights: str | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    kv: str = "CPU"
    layer_kv: tuple[str, ...] = ()
    full_offload: bool = False  # n_gpu_layers > n_layer_all (llama_context::graph_get_cb)
    offload_kqv: bool = True  # -nkvo turns it off (llama_cparams::offload_kqv)
    # the V cache's layout, fixed when llama_context made the memory (attn_v_trans = !flash_attn
    # with -fa auto counting as on, llama_model::create_memory); None: not flash_attn. -fa auto
    # that resolve_fused_ops turns off later (llama_context::sched_reserve) leaves it False
    v_trans: bool | None = None
    # the llama.cpp build whose graph this is (resolve.py's build rules; None: the current one):
    # before `mixed_batch` no mixed token/embedding branch, before `fa_mask_f16` an F32 KQ mask
    # cast to F16 for flash attention, before `attn_rot` no Hadamard rotation of a quantized cache
    build: int | None = None

    @property
    def n_stream(self) -> int:
        """KV streams (llama_kv_cache: unified ? 1 : n_seq_max)."""
        return 1 if self.kv_unified else self.n_seq_max


# the archs whose graph soft-caps the logits (gemma3.cpp, gemma4.cpp, gemma3n.cpp)
SOFTCAPPED = frozenset({"gemma3", "gemma4", "gemma3n"})


@dataclass(frozen=True, slots=True)
class GraphHParams:
    """The few hyper-parameters that change the graph's shape and that ModelFacts does not hold
    (llama_hparams, src/llama-hparams.h; read by the arch's load_arch_hparams)."""

    final_logit_softcapping: float = 0.0  # SOFTCAPPED: {arch}.final_logit_softcapping
    expert_weights_scale: float = 0.0  # {arch}.expert_weights_scale


def graph_hparams(metadata: Mapping[str, object], arch: str) -> GraphHParams:
    """GraphHParams from a GGUF's key/values."""

    def num(key: str) -> float:
        v = metadata.get(f"{arch}.{key}")
        return float(v) if isinstance(v, (int, float)) else 0.0

    softcap = num("final_logit_softcapping") if arch in SOFTCAPPED else 0.0
    return GraphHParams(softcap, num("expert_weights_scale"))


@dataclass(frozen=True, slots=True)
class Reserve:
    """One llama_context::graph_reserve call of sched_reserve."""

    kind: str  # "pp" (prompt-sized) or "tg" (one token per sequence)
    n_tokens: int
    n_seqs: int
    n_outputs: int


def reserves(n_ctx: int, n_ubatch: int, n_seq_max: int, n_outputs_max: int) -> tuple[Reserve, ...]:
    """The graphs llama_context::sched_reserve (src/llama-context.cpp) reserves, in order: pp with
    n_tokens = min(n_ctx, n_ubatch) and n_outputs = min(n_tokens, n_outputs_max), tg with
    n_seq_max tokens and outputs, then pp again; graph_reserve rounds n_tokens up to a multiple of
    n_seqs. llama-server's n_outputs_max is n_parallel without speculative decoding
    (server_output_limits, tools/server/server-context.cpp)."""
    n_tokens = min(n_ctx, n_ubatch)
    n_out_pp = min(n_tokens, n_outputs_max)

    def one(kind: str, n: int, n_out: int) -> Reserve:
        n = -(-n // n_seq_max) * n_seq_max
        return Reserve(kind, n, n_seq_max, n_out)

    pp = one("pp", n_tokens, n_out_pp)
    return (pp, one("tg", n_seq_max, n_seq_max), pp)


def reserve_configs(
    rc: ResolvedConfig, **buffers: object
) -> tuple[tuple[Reserve, GraphConfig], ...]:
    """The reserves of llama_context::sched_reserve for a resolved llama-server config, each with
    its GraphConfig: cache cells per stream (n_ctx_seq; the SWA cache's n_swa_cells), streams,
    flash attention, cache types, -nkvo, full offload (n_gpu_layers > n_layer_all is the caller's
    `full_offload`). `buffers` are GraphConfig's buffer fields (from the placement)."""
    out = []
    for r in reserves(rc.n_ctx, rc.n_ubatch, rc.n_seq_max, rc.n_outputs_max):
        config = GraphConfig(
            n_tokens=r.n_tokens,
            n_seqs=r.n_seqs,
            n_outputs=r.n_outputs,
            kv_size=rc.n_ctx_seq,
            kv_size_swa=rc.n_swa_cells,
            n_seq_max=rc.n_seq_max,
            kv_unified=rc.kv_unified,
            flash_attn=rc.flash_attn,
            type_k=TYPE_NAMES[rc.type_k.id],
            type_v=TYPE_NAMES[rc.type_v.id],
            offload_kqv=rc.kv_offload,
            build=rc.build,
            **buffers,  # type: ignore[arg-type]
        )
        out.append((r, config))
    return tuple(out)


def build_graph(facts: ModelFacts, config: GraphConfig, hp: GraphHParams | None = None) -> Graph:
    """The graph llama_model::build_graph (src/llama-model.cpp) hands the scheduler for this
    ubatch: nodes and leafs in ggml_visit_parents_graph order, with names, ops, types, shapes,
    views, input/output flags, and the weights and KV cache as tensors with data in their buffers.

    The first call for a model and a config (cache sizes and buffers aside) builds it three or four
    times to derive its template (_Template); later calls that differ only in the cache sizes or
    in the buffers (with the same tensors shared) reuse it."""
    arch = facts.architecture
    if arch not in FAMILIES:
        raise GraphBuildError(
            f"no graph model for architecture '{arch}' (modelled: {', '.join(FAMILIES)})"
        )
    hp = hp or GraphHParams()
    shape = replace(
        config,
        kv_size=0,
        kv_size_swa=0,
        weights="",
        layer_weights=(),
        input_weights=None,
        output_weights=None,
        overrides=(),
        kv="",
        layer_kv=(),
    )
    key = (id(facts), shape, hp, _sharing(facts, config))
    hit = _TEMPLATES.get(key)
    if hit is None or hit[0] is not facts:
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        hit = _TEMPLATES[key] = (facts, _Template.make(facts, config, hp))
    template = hit[1]
    if template is None:
        return build_direct(facts, config, hp)
    return template.at(config)


def build_direct(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> Graph:
    """build_graph without the template: the ggml emulation run for this config."""
    return _run(facts, config, hp)[0]


_Rule = tuple[str, int]  # (model tensor name, layer it was made for) or ("", il) for the cache


def _run(
    facts: ModelFacts,
    config: GraphConfig,
    hp: GraphHParams,
) -> tuple[Graph, list[tuple[int, _Rule]]]:
    """The graph, and for each tensor with data its index and buffer rule."""
    ctx = _Context(facts, config, hp)
    ctx.build()
    graph = ctx.b.graph()
    return graph, [(t.idx, t.rule) for t in ctx.b.tensors if t.rule is not None]


_Lin = tuple[int, int, int]  # a + b * kv_size + c * kv_size_swa


class _Template:
    """The graph of one model and config as a function of the two cache sizes and the buffers.

    Only shapes change with the cache sizes: every ne, nb and view offset of the graph llama.cpp
    builds is a + b * kv_size + c * kv_size_swa (views, reshapes and row sizes of the caches, the
    masks, KQ). `make` derives a, b, c from two or three builds and checks them on one more; a
    model or config where they do not hold (or where the structure changes) gets no template.
    Buffers change only the `buffer` of the tensors with data, each by its rule (weight_buffer,
    kv_buffer), as long as the same uses share one tensor (_sharing, part of the key)."""

    STEP = 256  # llama_kv_cache sizes are multiples of 256 (n_pad)

    def __init__(
        self,
        graph: Graph,
        config: GraphConfig,
        rules: list[tuple[int, _Rule]],
        varying: list[tuple[int, tuple[_Lin, ...]]],
    ) -> None:
        self.graph = graph
        self.config = config
        self.rules = rules
        self.varying = varying

    @classmethod
    def make(cls, facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> _Template | None:
        kv, swa, step = config.kv_size, config.kv_size_swa, cls.STEP
        g0, rules = _run(facts, config, hp)
        g1 = build_direct(facts, replace(config, kv_size=kv + step), hp)
        if _iswa(facts):  # an iSWA cache pair
            g2 = build_direct(facts, replace(config, kv_size_swa=swa + step), hp)
        else:  # kv_size_swa is not read
            g2 = g0
        if not (g0.nodes == g1.nodes == g2.nodes and g0.leafs == g1.leafs == g2.leafs):
            return None
        varying: list[tuple[int, tuple[_Lin, ...]]] = []
        for i, (t0, t1, t2) in enumerate(zip(g0.tensors, g1.tensors, g2.tensors, strict=True)):
            if t0 is t1 and t1 is t2:  # interned by Builder.graph: the same tensor
                continue
            same = (t0.name, t0.op, t0.src, t0.view_src, t0.type)
            if same != (t1.name, t1.op, t1.src, t1.view_src, t1.type):
                return None
            if same != (t2.name, t2.op, t2.src, t2.view_src, t2.type):
                return None
            lins = []
            for x0, x1, x2 in zip(
                (*t0.ne, *t0.nb, t0.view_offs),
                (*t1.ne, *t1.nb, t1.view_offs),
                (*t2.ne, *t2.nb, t2.view_offs),
                strict=True,
            ):
                b, rb = divmod(x1 - x0, step)
                c, rc = divmod(x2 - x0, step)
                if rb or rc:
                    return None
                lins.append((x0 - b * kv - c * swa, b, c))
            varying.append((i, tuple(lins)))
        template = cls(g0, config, rules, varying)
        check = replace(config, kv_size=kv + 2 * step, kv_size_swa=swa + 3 * step)
        got = template.at(check).tensors
        want = build_direct(facts, check, hp).tensors
        if len(got) != len(want):
            return None
        if not all(a is b or a == b for a, b in zip(got, want, strict=True)):
            return None
        return template

    def at(self, config: GraphConfig) -> Graph:
        """The graph for this config (the template's but for cache sizes and buffers)."""
        g, base = self.graph, self.config
        kv, swa = config.kv_size, config.kv_size_swa
        if config == base:
            return g
        tensors = list(g.tensors)
        if kv != base.kv_size or swa != base.kv_size_swa:
            for i, lins in self.varying:
                t = tensors[i]
                v = [a + b * kv + c * swa for a, b, c in lins]
                ne = (v[0], v[1], v[2], v[3])
                nb = (v[4], v[5], v[6], v[7])
                tensors[i] = Tensor(
                    name=t.name,
                    op=t.op,
                    type=t.type,
                    ne=ne,
                    nb=nb,
                    nbytes=nbytes_of(t.type, ne, nb),
                    flags=t.flags,
                    src=t.src,
                    view_src=t.view_src,
                    view_offs=v[8],
                    data=t.data,
                    buffer=t.buffer,
                    desc=t.desc,
                    pin_layer=t.pin_layer,
                )
        if (
            config.weights,
            config.layer_weights,
            config.input_weights,
            config.output_weights,
            config.overrides,
            config.kv,
            config.layer_kv,
        ) != (
            base.weights,
            base.layer_weights,
            base.input_weights,
            base.output_weights,
            base.overrides,
            base.kv,
            base.layer_kv,
        ):
            overrides = dict(config.overrides)
            for i, (name, il) in self.rules:
                t = tensors[i]
                buf = weight_buffer(config, overrides, name, il) if name else kv_buffer(config, il)
                if buf != t.buffer:
                    tensors[i] = Tensor(
                        name=t.name,
                        op=t.op,
                        type=t.type,
                        ne=t.ne,
                        nb=t.nb,
                        nbytes=t.nbytes,
                        flags=t.flags,
                        src=t.src,
                        view_src=t.view_src,
                        view_offs=t.view_offs,
                        data=t.data,
                        buffer=buf,
                        desc=t.desc,
                        pin_layer=t.pin_layer,
                    )
        return Graph(tensors=tuple(tensors), leafs=g.leafs, nodes=g.nodes)


_TEMPLATES: dict[tuple[object, ...], tuple[ModelFacts, _Template | None]] = {}


def clear_cache() -> None:
    """Forget the templates (and the converted tensors) of earlier calls."""
    _TEMPLATES.clear()
    forget_frozen()


def weight_buffer(config: GraphConfig, overrides: Mapping[str, str], name: str, il: int) -> str:
    """The buffer of model tensor `name` made for layer il (-1: the input layer, -2: the output
    layer; llama_model_loader::create_tensor's buffer type list by llm_tensor_info layer)."""
    hit = overrides.get(name)
    if hit is not None:
        return hit
    if il >= 0:
        return config.layer_weights[il] if config.layer_weights else config.weights
    if il == -1:
        return config.input_weights or config.weights
    return config.output_weights or config.weights


def kv_buffer(config: GraphConfig, il: int) -> str:
    """The buffer of layer il's K and V cache (llama_kv_cache: the layer's device if offloaded)."""
    return config.layer_kv[il] if config.layer_kv else config.kv


def _sharing(facts: ModelFacts, config: GraphConfig) -> tuple[object, ...]:
    """Which uses of one model tensor are one ggml tensor (TENSOR_DUPLICATED in the same buffer
    type): the tied output with token_embd, rope_freqs across layers (gemma4: its full-attention
    layers). Graphs whose buffers differ but share alike have the same structure. Gemma 4 and
    Gemma 3n make their tied output before token_embd (gemma4.cpp, gemma3n.cpp
    load_arch_tensors), so token_embd is always a
    tensor of its own (llama_model_loader::create_tensor checks for a duplicate only when making
    the TENSOR_DUPLICATED one)."""
    tensors = _tensor_map(facts)
    overrides = dict(config.overrides)
    arch = facts.architecture
    tied = (
        arch not in ("gemma4", "gemma3n")
        and "output.weight" not in tensors
        and weight_buffer(config, overrides, "token_embd.weight", -1)
        == weight_buffer(config, overrides, "token_embd.weight", -2)
    )
    rope: tuple[int, ...] = ()
    if "rope_freqs.weight" in tensors:
        seen: dict[str, int] = {}
        rope = tuple(
            seen.setdefault(weight_buffer(config, overrides, "rope_freqs.weight", il), len(seen))
            for il in rope_factor_layers(facts)
        )
    return (tied, rope)


def _iswa(facts: ModelFacts) -> bool:
    """The arch builds llm_graph_input_attn_kv_iswa (gemma3.cpp, gemma4.cpp: swa_type standard)."""
    iswa_archs = ("gemma3", "gemma4", "gemma3n", "gpt-oss")
    return (
        facts.architecture in iswa_archs and facts.swa.swa_type != "none" and any(facts.swa.is_swa)
    )


_TENSORS: dict[int, tuple[ModelFacts, dict[str, tuple[str, tuple[int, ...]]]]] = {}


def _tensor_map(facts: ModelFacts) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (ggml type name, shape), once per facts object."""
    hit = _TENSORS.get(id(facts))
    if hit is not None and hit[0] is facts:
        return hit[1]
    m = {t.name: (TYPE_NAMES[t.ggml_type], t.shape) for t in facts.tensors}
    if len(_TENSORS) > 16:
        _TENSORS.clear()
    _TENSORS[id(facts)] = (facts, m)
    return m


# llama_expert_gating_func_type (src/llama-hparams.h) -> build_moe_ffn's gating
_GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


class _Cache:
    """One llama_kv_cache (the base or the SWA one of llama_kv_cache_iswa) as the graph sees it."""

    def __init__(self, ctx: _Context, layers: list[int], size: int) -> None:
        f, c = ctx.f, ctx.c
        self.size = size
        self.n_stream = c.n_stream
        self.v_trans = not c.flash_attn if c.v_trans is None else c.v_trans
        # [TAG_V_CACHE_VARIABLE]: a transposed V is as wide as the widest layer's
        self.v_width = f.n_embd_v_gqa_max
        self.k: dict[int, T] = {}
        self.v: dict[int, T] = {}
        heads_k = {ctx.head_k(il) for il in layers}
        heads_v = {ctx.head_v(il) for il in layers}
        for il in layers:
            buf = kv_buffer(c, il)
            wk = f.n_embd_k_gqa(il)
            wv = f.n_embd_v_gqa(il) if not self.v_trans else self.v_width
            k = Builder.weight(f"cache_k_l{il}", c.type_k, (wk, size, self.n_stream), buf)
            v = Builder.weight(f"cache_v_l{il}", c.type_v, (wv, size, self.n_stream), buf)
            k.rule = v.rule = ("", il)
            self.k[il], self.v[il] = k, v
        self.reuse(ctx)
        # llama_kv_cache::llama_kv_cache: Hadamard rotation of a quantized cache
        # (PR #21038, rule attn_rot: none before)
        self.n_rot_k = self.n_rot_v = 0
        if not since("attn_rot", c.build):
            return
        head_k_all = heads_k.pop() if len(heads_k) == 1 else -1
        head_v_all = heads_v.pop() if len(heads_v) == 1 else -1
        if head_k_all > 0 and _quantized(c.type_k) and f.n_embd_head_k % 64 == 0:
            n = 64
            while head_k_all % (2 * n) == 0:
                n *= 2
            self.n_rot_k = n
        if head_v_all > 0 and _quantized(c.type_v) and f.n_embd_head_v % 64 == 0:
            self.n_rot_v = 64

    def reuse(self, ctx: _Context) -> None:
        """The layers without a cache of their own read an earlier layer's
        (llama_model::create_memory's reuse callback for gemma3n / gemma4: from
        n_layer_kv_from_start on, the last SWA layer before it or the last full one; each
        llama_kv_cache maps the layers of its kind, map_layer_ids)."""
        f = ctx.f
        if f.architecture not in ("gemma4", "gemma3n") or not self.k:
            return
        start = f.n_layer_kv_from_start
        mine = next(iter(self.k))
        for il in range(start, ctx.n_layer):
            if f.swa.is_swa[il] != f.swa.is_swa[mine]:
                continue
            src = start - (2 if f.swa.is_swa[il] else 1)
            if src not in self.k:
                raise GraphBuildError(f"{f.path}: layer {il} reuses layer {src}'s cache: none")
            self.k[il], self.v[il] = self.k[src], self.v[src]


def _quantized(type_: str) -> bool:
    """ggml_is_quantized."""
    return TYPES[type_][0] > 1


class _Rs:
    """llm_graph_input_rs over llama_memory_recurrent as a reserve sees it
    (llama_memory_recurrent_context over the whole memory: n_rs = size, head 0, rs_z 0): the
    per-layer state rows (cache_r_l*, cache_s_l*: mem_size = max(1, n_seq_max) rows, n_rs_seq 0)
    and the copy indexes (build_rs_inp_impl)."""

    def __init__(self, ctx: _Context, layers: list[int]) -> None:
        f, c, b = ctx.f, ctx.c, ctx.b
        if f.recurrent is None:
            raise GraphBuildError(f"{f.path}: no recurrent state sizes (ssm.*) in the model")
        self.size = max(1, c.n_seq_max)
        self.r: dict[int, T] = {}
        self.s: dict[int, T] = {}
        for il in layers:
            buf = kv_buffer(c, il)
            r = Builder.weight(f"cache_r_l{il}", "f32", (f.recurrent.n_embd_r, self.size), buf)
            s = Builder.weight(f"cache_s_l{il}", "f32", (f.recurrent.n_embd_s, self.size), buf)
            r.rule = s.rule = ("", il)
            self.r[il], self.s[il] = r, s
        n_rs = self.size
        self.copy = b.new("i32", n_rs, name="rs_s_copy", inp=True)
        self.copy_main = b.view(self.copy, (c.n_seqs,), (), 0)
        self.copy_tail = b.view(self.copy, (n_rs - 1,), (), self.copy.nb[0])


class _Inp:
    """llm_graph_input_attn_kv for one cache: indexes, mask and rotations."""

    def __init__(self, ctx: _Context, cache: _Cache, swa: bool | None = None) -> None:
        """`swa`: None for llama_kv_cache's input, False / True for the base / SWA cache's of
        llama_kv_cache_iswa (build_attn_inp_kv_iswa)."""
        b, c = ctx.b, ctx.c
        n_tokens = c.n_tokens
        self.cache = cache
        # build_input_k_idxs / build_input_v_idxs (src/llama-kv-cache.cpp)
        self.k_idxs = b.new("i64", n_tokens, name="attn_inp_k_idxs", inp=True)
        n_v = n_tokens * cache.v_width if cache.v_trans else n_tokens
        self.v_idxs = b.new("i64", n_v, name="attn_inp_v_idxs", inp=True)
        n_stream = 1 if c.kv_unified else c.n_seqs
        ne = (cache.size, n_tokens // n_stream, 1, n_stream)
        if since("fa_mask_f16", c.build):
            # build_attn_inp_kq_mask (src/llama-graph.cpp): f16 for flash attention
            kind = "f16" if c.flash_attn else "f32"
            self.mask = b.new(kind, *ne, name="attn_inp_kq_mask", inp=True)
        else:
            # before PR #23764 (b7960-era src/llama-graph.cpp build_kq_mask and
            # build_attn_inp_kv_impl / build_attn_inp_kv_iswa): an F32 input, unnamed for the
            # plain cache, "self_kq_mask" / "self_kq_mask_swa" for iSWA; with flash attention the
            # attention reads self_kq_mask_cnv = ggml_cast(mask, F16), one per cache (iSWA names
            # it "<mask>_cnv", which renames the mask itself without flash attention)
            name = ""
            if swa is not None:
                name = "self_kq_mask_swa" if swa else "self_kq_mask"
            self.mask = b.new("f32", *ne, name=name, inp=True)
            if c.flash_attn:
                self.mask = b.cast(self.mask, "f16")
            if swa is not None:
                self.mask.name = name + "_cnv"
        self.k_rot: T | None = None
        self.v_rot: T | None = None

    def rotations(self, ctx: _Context) -> None:
        """build_input_k_rot / build_input_v_rot (made after both caches' masks for iSWA)."""
        n_k, n_v = self.cache.n_rot_k, self.cache.n_rot_v
        if n_k:
            self.k_rot = ctx.b.new("f32", n_k, n_k, name="attn_inp_k_rot", inp=True)
        if n_v:
            self.v_rot = ctx.b.new("f32", n_v, n_v, name="attn_inp_v_rot", inp=True)


class _Context:
    """llm_graph_context for one ubatch."""

    def __init__(self, facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> None:
        self.f = facts
        self.c = config
        self.hp = hp
        self.b = Builder()
        self.tensors = _tensor_map(facts)
        self.weights: dict[tuple[str, str], T] = {}
        self.overrides = dict(config.overrides)
        self.pin = config.n_tokens < 32 or config.full_offload
        self.n_layer = facts.n_layer

    # --- model tensors -------------------------------------------------------------------
    def head_k(self, il: int) -> int:
        return self.f.n_embd_head_k_swa if self.f.swa.is_swa[il] else self.f.n_embd_head_k

    def head_v(self, il: int) -> int:
        return self.f.n_embd_head_v_swa if self.f.swa.is_swa[il] else self.f.n_embd_head_v

    def no_long_rope(self) -> None:
        """llama_model::get_rope_factors picks rope_factors_long / _short by the context size:
        not modelled."""
        if (
            "rope_factors_long.weight" in self.tensors
            or "rope_factors_short.weight" in self.tensors
        ):
            raise GraphBuildError(f"{self.f.path}: LongRoPE factors are not modelled")

    def w(
        self, name: str, il: int = -1, *, as_name: str | None = None, own: bool = False
    ) -> T | None:
        """A model tensor if the file has it (TENSOR_NOT_REQUIRED), in the buffer of layer il
        (-1: input layer, -2: output layer). A tensor created again in another buffer type is a
        second tensor of the same name (llama_model_loader::create_tensor, TENSOR_DUPLICATED);
        `own`: a tensor of its own whatever the buffer (a duplicate made before the original)."""
        src = as_name or name
        info = self.tensors.get(src)
        if info is None:
            return None
        buf = weight_buffer(self.c, self.overrides, src, il)
        key = (src, f"{buf} (own)" if own else buf)
        t = self.weights.get(key)
        if t is None:
            t = self.weights[key] = Builder.weight(src, info[0], info[1], buf)
            t.rule = (src, il)
        return t

    def lw(self, il: int, part: str) -> T | None:
        return self.w(f"blk.{il}.{part}", il)

    def need(self, t: T | None, what: str) -> T:
        if t is None:
            raise GraphBuildError(f"{self.f.path}: tensor {what} is missing")
        return t

    # --- llm_graph_context helpers ----------------------------------------------------------
    def cb(self, t: T, name: str, il: int) -> T:
        """llama_context::graph_get_cb: "name-il" (or name), and the norm pin to layer il's
        device for small ubatches or full offload."""
        t.name = f"{name}-{il}" if il >= 0 else name
        if self.pin and il != -1 and (name == "norm" or name == "l_last"):
            t.pin_layer = il
        return t

    def norm(self, cur: T, mw: T | None, il: int) -> T:
        """build_norm, LLM_NORM_RMS."""
        cur = self.b.rms_norm(cur)
        if mw is not None:
            self.cb(cur, "norm", il)
            cur = self.b.mul(cur, mw)
        return cur

    def mm(self, w: T, cur: T) -> T:
        """build_lora_mm (no adapters, no scales)."""
        return self.b.mul_mat(w, cur)

    def inp_embd(self, tok_scale: float, embd_scale: float = 0.0) -> T:
        """build_inp_embd (src/llama-graph.cpp): the token, embedding and mixed paths, the token
        path selected (a reserve's ubatch has tokens), all rows scaled by f_embedding_scale
        (Granite), token rows scaled by an input."""
        b, n_tokens, n_embd = self.b, self.c.n_tokens, self.f.n_embd
        tok_embd = self.need(self.w("token_embd.weight", -1), "token_embd.weight")
        tokens = self.cb(b.new("i32", n_tokens), "inp_tokens", -1)
        tokens.flags |= 1
        embd = self.cb(b.new("f32", n_embd, n_tokens), "inp_embd", -1)
        embd.flags |= 1
        inps = [b.get_rows(tok_embd, tokens), embd]
        if since("mixed_batch", self.c.build):
            # llm_arch_supports_mixed_batch: every family here (PR #29622)
            inps.append(self.inp_mixed(tok_embd))
        cur = b.select(inps, 0)
        if embd_scale != 0.0:
            if not is_contiguous(cur):
                cur = b.cont(cur)
            cur = b.scale(cur)
        if tok_scale != 1.0:
            rows = self.cb(b.new("f32", 1, n_tokens), "inp_scale_rows", -1)
            rows.flags |= 1
            if not is_contiguous(cur):
                cur = b.cont(cur)
            cur = b.mul(cur, rows)
        self.cb(cur, "embd", -1)
        b.expand(cur)
        return cur

    def inp_mixed(self, tok_embd: T) -> T:
        """build_inp_embd's mixed token/embedding branch (PR #29622, rule mixed_batch): the token
        rows set into a copy of the embedding rows."""
        b, n_tokens, n_embd = self.b, self.c.n_tokens, self.f.n_embd
        mixed_tokens = self.cb(b.new("i32", n_tokens), "inp_mixed_tokens", -1)
        mixed_tokens.flags |= 1
        mixed_slots = self.cb(b.new("i64", n_tokens), "inp_mixed_slots", -1)
        mixed_slots.flags |= 1
        mixed_embd = self.cb(b.new("f32", n_embd, n_tokens), "inp_mixed_embd", -1)
        mixed_embd.flags |= 1
        dup = b.dup(mixed_embd)
        return b.set_rows(dup, b.get_rows(tok_embd, mixed_tokens), mixed_slots)

    def inp_pos(self) -> T:
        return self.cb(self.b.new("i32", self.c.n_tokens, inp=True), "inp_pos", -1)

    def inp_out_ids(self) -> T:
        return self.b.new("i32", self.c.n_outputs, name="out_ids", inp=True)

    def qkv(self, cur: T, il: int, scales: bool = False) -> tuple[T, T, T]:
        """build_qkv, separate Q/K/V with optional biases (the fused wqkv path is not modelled);
        scales: the weights' scales (attn_*.scale, build_lora_mm's w_s) where the arch's files may
        have them (gemma3n)."""
        b = self.b
        if self.lw(il, "attn_qkv.weight") is not None:
            raise GraphBuildError(f"{self.f.path}: fused attn_qkv is not modelled")
        out = []
        for part, n_head, head in (
            ("q", self.f.n_head[il], self.head_k(il)),
            ("k", self.f.n_head_kv[il], self.head_k(il)),
            ("v", self.f.n_head_kv[il], self.head_v(il)),
        ):
            name = part.upper() + "cur"
            w = self.need(self.lw(il, f"attn_{part}.weight"), part)
            w_s = self.lw(il, f"attn_{part}.scale") if scales else None
            t = self.cb(self.mm_s(w, cur, w_s), name, il)
            bias = self.lw(il, f"attn_{part}.bias")
            if bias is not None:
                t = self.cb(b.add(t, bias), name, il)
            out.append(b.reshape(t, head, n_head, self.c.n_tokens))
        q, k, v = out
        self.cb(q, "Qcur", il)
        self.cb(k, "Kcur", il)
        self.cb(v, "Vcur", il)
        return q, k, v

    def mm_s(self, w: T, cur: T, w_s: T | None) -> T:
        """build_lora_mm with a weight scale (the file's "<name>.scale": llama_model::load_tensors
        loads one for any arch; gemma4.cpp passes them)."""
        res = self.mm(w, cur)
        return res if w_s is None else self.b.mul(res, w_s)

    def mm_id(self, w: T, cur: T, ids: T, w_s: T | None) -> T:
        """build_lora_mm_id: MUL_MAT_ID, times the per-expert scales each token's experts pick."""
        b = self.b
        res = b.mul_mat_id(w, cur, ids)
        if w_s is None:
            return res
        n_expert, n_tokens = w_s.ne[0], cur.ne[2]
        s = b.reshape(w_s, 1, n_expert, 1)
        s = b.repeat_4d(s, 1, n_expert, n_tokens, 1)
        return b.mul(res, b.get_rows(s, ids))

    def hadamard(self, cur: T, rot: T) -> T:
        """llama_mul_mat_hadamard (src/llama-impl.h)."""
        b = self.b
        n = rot.ne[0]
        if not is_contiguous(cur):
            res = b.cont(cur, n, nelements(cur) // n)
        else:
            res = b.reshape(cur, n, nelements(cur) // n)
        res = b.mul_mat(rot, res)
        return b.reshape(res, *cur.ne)

    def cpy_k(self, cache: _Cache, k_cur: T, idxs: T, il: int) -> T:
        """llama_kv_cache::cpy_k."""
        b = self.b
        k = cache.k[il]
        n_embd_gqa = k_cur.ne[0] * k_cur.ne[1]
        k_cur = b.view(k_cur, (n_embd_gqa, k_cur.ne[2]), (k_cur.nb[2],), 0)
        if cache.n_stream > 1:
            k = b.reshape(k, n_embd_gqa, cache.size * cache.n_stream)
        return b.set_rows(k, k_cur, idxs)

    def cpy_v(self, cache: _Cache, v_cur: T, idxs: T, il: int) -> T:
        """llama_kv_cache::cpy_v: rows, or single elements into the transposed cache."""
        b = self.b
        v = cache.v[il]
        n_embd_gqa = v_cur.ne[0] * v_cur.ne[1]
        n_tokens = v_cur.ne[2]
        if not cache.v_trans:
            v_cur = b.view(v_cur, (n_embd_gqa, n_tokens), (v_cur.nb[2],), 0)
            if cache.n_stream > 1:
                v = b.reshape(v, n_embd_gqa, cache.size * cache.n_stream)
            return b.set_rows(v, v_cur, idxs)
        if row_size(v_cur.type, n_embd_gqa) == v_cur.nb[2]:
            v_cur = b.reshape(v_cur, n_embd_gqa, n_tokens)
        else:
            v_cur = b.cont(v_cur, n_embd_gqa, n_tokens)
        if n_embd_gqa < v.ne[0]:
            v_cur = b.pad(v_cur, v.ne[0] - n_embd_gqa)
        v_view = b.reshape(v, 1, nelements(v))
        v_cur = b.reshape(v_cur, 1, nelements(v_cur))
        return b.set_rows(v_view, v_cur, idxs)

    def get_k(self, cache: _Cache, il: int) -> T:
        """llama_kv_cache::get_k over every stream (the reserve's slot info spans them all)."""
        k = cache.k[il]
        head, n_head_kv = self.head_k(il), self.f.n_head_kv[il]
        wk = k.ne[0]
        return self.b.view(
            k,
            (head, n_head_kv, cache.size, cache.n_stream),
            (row_size(k.type, head), row_size(k.type, wk), row_size(k.type, wk * cache.size)),
            0,
        )

    def get_v(self, cache: _Cache, il: int) -> T:
        """llama_kv_cache::get_v."""
        v = cache.v[il]
        head, n_head_kv = self.head_v(il), self.f.n_head_kv[il]
        wv, size, ty = v.ne[0], cache.size, v.type
        if not cache.v_trans:
            return self.b.view(
                v,
                (head, n_head_kv, size, cache.n_stream),
                (row_size(ty, head), row_size(ty, wv), row_size(ty, wv * size)),
                0,
            )
        return self.b.view(
            v,
            (size, n_head_kv, head, cache.n_stream),
            (row_size(ty, size * head), row_size(ty, size), row_size(ty, size * wv)),
            0,
        )

    def attn_mha(
        self,
        q: T,
        k: T,
        v: T,
        mask: T,
        il: int,
        sinks: T | None = None,
        v_mla: T | None = None,
    ) -> T:
        """build_attn_mha (no KQ bias); sinks as ggml_flash_attn_ext_add_sinks /
        ggml_soft_max_add_sinks set them (src 4 / src 2); v_mla: MLA's decompression of the
        attention output (wv_b)."""
        b = self.b
        v_trans = v.nb[1] > v.nb[2]
        n_stream = k.ne[3]
        n2 = q.ne[2] // n_stream
        q = b.view(q, (q.ne[0], q.ne[1], n2, n_stream), (q.nb[1], q.nb[2], q.nb[2] * n2), 0)
        q = b.permute(q, 0, 2, 1, 3)
        k = b.permute(k, 0, 2, 1, 3)
        v = b.permute(v, 0, 2, 1, 3)
        if self.c.flash_attn:
            if v_trans:
                v = b.transpose(v)
            if k.type == "f32":
                k = b.cast(k, "f16")
            if v.type == "f32":
                v = b.cast(v, "f16")
            cur = b.flash_attn_ext(q, k, v, mask)
            if sinks is not None:
                cur.src = (*cur.src, sinks)
            if v_mla is not None:
                cur = b.permute(cur, 0, 2, 1, 3)
                cur = self.cb(b.mul_mat(v_mla, cur), "fattn_mla", il)
                cur = b.cont(b.permute(cur, 0, 2, 1, 3))
            cur = b.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        else:
            kq = self.cb(b.mul_mat(k, q), "kq", il)
            kq = b.soft_max(kq, mask)
            if sinks is not None:
                kq.src = (*kq.src, sinks)
            kq = self.cb(kq, "kq_soft_max", il)
            if not v_trans:
                v = self.cb(b.cont(b.transpose(v)), "v_cont", il)
            kqv = self.cb(b.mul_mat(v, kq), "kqv", il)
            if v_mla is not None:
                kqv = self.cb(b.mul_mat(v_mla, kqv), "kqv_mla", il)
            cur = b.permute(kqv, 0, 2, 1, 3)
            cur = b.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
            if not self.c.offload_kqv:
                cur.pin_layer = PIN_CPU  # the nodes from the KV store to here run on the CPU
        b.expand(cur)
        return cur

    def attn(
        self,
        inp: _Inp,
        wo: T | None,
        wo_b: T | None,
        q: T,
        k: T | None,
        v: T | None,
        il: int,
        iswa: bool,
        sinks: T | None = None,
        wo_s: T | None = None,
    ) -> T:
        """build_attn over llm_graph_input_attn_kv (iswa False) or _kv_iswa (True); k and v None:
        a layer that reads an earlier layer's cache and stores nothing (gemma4.cpp); wo None: no
        output projection (qwen3next.cpp, qwen35moe.cpp gate the attention first)."""
        b = self.b
        cache = inp.cache
        if inp.k_rot is not None:
            q = self.hadamard(q, inp.k_rot)
            if k is not None:
                k = self.hadamard(k, inp.k_rot)
        if inp.v_rot is not None and v is not None:
            v = self.hadamard(v, inp.v_rot)
        # the plain cache expands K last (rope fusion); the iSWA one Q, K, V
        for t in (q, k, v) if iswa else (q, v, k):
            if t is not None:
                b.expand(t)
        if k is not None:
            b.expand(self.cpy_k(cache, k, inp.k_idxs, il))
        if v is not None:
            b.expand(self.cpy_v(cache, v, inp.v_idxs, il))
        kc, vc = self.get_k(cache, il), self.get_v(cache, il)
        cur = self.attn_mha(q, kc, vc, inp.mask, il, sinks)
        self.cb(cur, "kqv_out", il)
        if inp.v_rot is not None:
            cur = self.hadamard(cur, inp.v_rot)
        if wo is None:
            return cur
        cur = self.mm_s(wo, cur, wo_s)
        if wo_b is not None:
            cur = b.add(cur, wo_b)
        return cur

    def ffn(
        self, cur: T, il: int, act: str, biases: bool, part: str = "", scales: bool = False
    ) -> T:
        """build_ffn with a parallel gate: SILU -> SWIGLU, GELU -> GEGLU; or, act "relu_sqr",
        without a gate: LLM_FFN_RELU_SQR (RELU, then SQR; nemotron-h.cpp); optional biases; part
        "_shexp": the shared experts' tensors; scales: the weights' scales (ffn_*.scale) the
        arch passes (gemma4, nemotron_h_moe)."""
        b = self.b
        up = self.need(self.lw(il, f"ffn_up{part}.weight"), "ffn_up")
        if act == "relu_sqr":
            return self.ffn_relu_sqr(cur, il, up, part, scales)
        gate = self.need(self.lw(il, f"ffn_gate{part}.weight"), "ffn_gate")
        down = self.need(self.lw(il, f"ffn_down{part}.weight"), "ffn_down")
        up_b = self.lw(il, "ffn_up.bias") if biases else None
        gate_b = self.lw(il, "ffn_gate.bias") if biases else None
        down_b = self.lw(il, "ffn_down.bias") if biases else None
        up_s = self.lw(il, f"ffn_up{part}.scale") if scales else None
        gate_s = self.lw(il, f"ffn_gate{part}.scale") if scales else None
        down_s = self.lw(il, f"ffn_down{part}.scale") if scales else None
        tmp = self.cb(self.mm(up, cur), "ffn_up", il)
        if up_b is not None:
            tmp = self.cb(b.add(tmp, up_b), "ffn_up_b", il)
        if up_s is not None:
            tmp = self.cb(b.mul(tmp, up_s), "ffn_up_s", il)
        cur = self.cb(self.mm(gate, cur), "ffn_gate", il)
        if gate_b is not None:
            cur = self.cb(b.add(cur, gate_b), "ffn_gate_b", il)
        if gate_s is not None:
            cur = self.cb(b.mul(cur, gate_s), "ffn_gate_s", il)
        if act == "silu":
            cur = self.cb(b.glu_split(cur, tmp, "SWIGLU"), "ffn_swiglu", il)
        else:
            cur = self.cb(b.glu_split(cur, tmp, "GEGLU"), "ffn_geglu", il)
        cur = self.mm(down, cur)
        if down_b is not None:
            self.cb(cur, "ffn_down", il)
            cur = b.add(cur, down_b)
        if down_s is not None:
            cur = self.cb(b.mul(cur, down_s), "ffn_down_s", il)
        return cur

    def ffn_relu_sqr(self, cur: T, il: int, up: T, part: str, scales: bool) -> T:
        """build_ffn without gate or biases, LLM_FFN_RELU_SQR: up (and its scale), RELU, SQR,
        down (and its scale)."""
        b = self.b
        down = self.need(self.lw(il, f"ffn_down{part}.weight"), "ffn_down")
        up_s = self.lw(il, f"ffn_up{part}.scale") if scales else None
        down_s = self.lw(il, f"ffn_down{part}.scale") if scales else None
        cur = self.cb(self.mm(up, cur), "ffn_up", il)
        if up_s is not None:
            cur = self.cb(b.mul(cur, up_s), "ffn_up_s", il)
        cur = self.cb(b.unary(cur, "RELU"), "ffn_relu", il)
        cur = self.cb(b.sqr(cur), "ffn_sqr(relu)", il)
        cur = self.mm(down, cur)
        if down_s is not None:
            cur = self.cb(b.mul(cur, down_s), "ffn_down_s", il)
        return cur

    def moe_ffn(
        self,
        cur: T,
        il: int,
        *,
        gating: str = "softmax",
        norm_w: bool = True,
        act: str = "silu",
        biases: bool = False,
        exp_probs_b: T | None = None,
        probs_in: T | None = None,
        w_scale: float | None = None,
    ) -> T:
        """build_moe_ffn (src/llama-graph.cpp): gating "softmax", "sigmoid" or "softmax_weight"
        (LLAMA_EXPERT_GATING_FUNC_TYPE_*), top-k by argsort over the probabilities (plus
        exp_probs_b, within the top expert groups), weights normalised (norm_w) and scaled
        (expert_weights_scale), act "silu"
        (SWIGLU, or SILU without gate experts), "gelu" (GEGLU, or GELU), "swiglu_oai"
        (LLM_FFN_SWIGLU_OAI_MOE) or "relu_sqr" (LLM_FFN_RELU_SQR, no gate experts); biases: the
        gate_inp and expert biases (ggml_add_id); probs_in: the router's logits made by the
        caller (gemma4.cpp, nemotron-h.cpp); w_scale: the weights' scale the arch passes (None:
        expert_weights_scale, GraphHParams). The merged ffn_gate_up_exps (one MUL_MAT_ID, gate and
        up as views of it) and the per-expert scales (ffn_*_exps.scale, llama_model::load_tensors'
        generic pass; build_lora_mm_id) are as build_moe_ffn has them for the archs that pass
        them: merged gate_up only gemma4 among FAMILIES, the scales gemma4 and nemotron_h_moe."""
        b, f = self.b, self.f
        assert f.moe is not None
        n_expert, n_used = f.moe.n_expert, f.moe.n_expert_used
        n_embd, n_tokens = cur.ne[0], cur.ne[1]
        gate_up_exps = self.lw(il, "ffn_gate_up_exps.weight")
        if gate_up_exps is not None and f.architecture != "gemma4":
            raise GraphBuildError(f"{f.path}: merged ffn_gate_up_exps is not modelled")
        if probs_in is not None:
            logits = probs_in
        else:
            logits = self.cb(
                self.mm(self.need(self.lw(il, "ffn_gate_inp.weight"), "gate_inp"), cur),
                "ffn_moe_logits",
                il,
            )
        gate_inp_b = self.lw(il, "ffn_gate_inp.bias") if biases else None
        if gate_inp_b is not None:
            logits = self.cb(b.add(logits, gate_inp_b), "ffn_moe_logits_biased", il)
        if gating == "softmax":
            probs = b.soft_max(logits)
        elif gating == "sigmoid":
            probs = b.unary(logits, "SIGMOID")
        else:  # softmax_weight: the logits themselves
            probs = logits
        self.cb(probs, "ffn_moe_probs", il)
        selection = probs
        if exp_probs_b is not None:
            selection = self.cb(b.add(probs, exp_probs_b), "ffn_moe_probs_biased", il)
        n_groups = f.n_expert_groups
        if n_groups > 1 and n_tokens > 0:  # the top n_group_used expert groups
            groups = b.reshape(selection, n_expert // n_groups, n_groups, n_tokens)
            scores = b.argsort_top_k(groups, 2)
            g4 = b.reshape(groups, 1, groups.ne[0], groups.ne[1], groups.ne[2])
            scores = b.get_rows(g4, scores)
            scores = b.sum_rows(b.reshape(scores, scores.ne[1], scores.ne[2], scores.ne[3]))
            scores = b.reshape(scores, scores.ne[1], scores.ne[2])
            top = self.cb(b.argsort_top_k(scores, f.n_group_used), "ffn_moe_group_topk", il)
            selection = b.get_rows(groups, top)
            selection = b.set_rows(b.fill(groups), selection, top)
            selection = b.reshape(selection, n_expert, n_tokens)
            self.cb(selection, "ffn_moe_probs_masked", il)
        selected = b.argsort_top_k(selection, n_used)
        assert selected.src[0] is not None
        self.cb(selected.src[0], "ffn_moe_argsort", il)
        self.cb(selected, "ffn_moe_topk", il)
        probs = b.reshape(probs, 1, n_expert, n_tokens)
        weights = self.cb(b.get_rows(probs, selected), "ffn_moe_weights", il)
        if gating == "softmax_weight":
            weights = b.soft_max(b.reshape(weights, n_used, n_tokens))
            weights = self.cb(
                b.reshape(weights, 1, n_used, n_tokens), "ffn_moe_weights_softmax", il
            )
        if norm_w:
            weights = b.reshape(weights, n_used, n_tokens)
            wsum = self.cb(b.sum_rows(weights), "ffn_moe_weights_sum", il)
            wsum = self.cb(b.clamp(wsum), "ffn_moe_weights_sum_clamped", il)
            weights = self.cb(b.div(weights, wsum), "ffn_moe_weights_norm", il)
            weights = b.reshape(weights, 1, n_used, n_tokens)
        scale = self.hp.expert_weights_scale if w_scale is None else w_scale
        if scale != 0.0 and scale != 1.0:
            weights = self.cb(b.scale(weights), "ffn_moe_weights_scaled", il)
        b.expand(weights)
        cur = b.reshape(cur, n_embd, 1, n_tokens)
        # the archs that pass the experts' scales (the other families' are not checked)
        scaled = f.architecture in ("gemma4", "nemotron_h_moe", "qwen3next", "qwen35moe")
        if gate_up_exps is not None:
            # ffn_up_exps.scale: loaded only beside a separate ffn_up_exps
            gate_up = self.mm_id(gate_up_exps, cur, selected, None)
            self.cb(gate_up, "ffn_moe_gate_up", il)
            n_ff = gate_up.ne[0] // 2
            shape, nbs = (n_ff, gate_up.ne[1], gate_up.ne[2]), (gate_up.nb[1], gate_up.nb[2])
            cur = self.cb(b.view(gate_up, shape, nbs, 0), "ffn_moe_gate", il)
            up = self.cb(b.view(gate_up, shape, nbs, n_ff * gate_up.nb[0]), "ffn_moe_up", il)
            gate_exps: T | None = gate_up_exps
        else:
            up_exps = self.need(self.lw(il, "ffn_up_exps.weight"), "ffn_up_exps")
            up_s = self.lw(il, "ffn_up_exps.scale") if scaled else None
            up = self.cb(self.mm_id(up_exps, cur, selected, up_s), "ffn_moe_up", il)
            if up_s is not None:
                self.cb(up, "ffn_moe_up_scaled", il)
            up_b = self.lw(il, "ffn_up_exps.bias") if biases else None
            if up_b is not None:
                up = self.cb(b.add_id(up, up_b, selected), "ffn_moe_up_biased", il)
            gate_exps = self.lw(il, "ffn_gate_exps.weight")
            if gate_exps is not None:
                gate_s = self.lw(il, "ffn_gate_exps.scale") if scaled else None
                cur = self.mm_id(gate_exps, cur, selected, gate_s)
                cur = self.cb(cur, "ffn_moe_gate", il)
                if gate_s is not None:
                    self.cb(cur, "ffn_moe_gate_scaled", il)
            else:
                cur = up
            gate_b = self.lw(il, "ffn_gate_exps.bias") if biases else None
            if gate_b is not None:
                cur = self.cb(b.add_id(cur, gate_b, selected), "ffn_moe_gate_biased", il)
        if act == "swiglu_oai":
            cur = self.cb(b.glu_split(cur, up, "SWIGLU_OAI"), "ffn_moe_swiglu_oai", il)
        elif act == "gelu" and gate_exps is not None:
            cur = self.cb(b.glu_split(cur, up, "GEGLU"), "ffn_moe_geglu", il)
        elif act == "gelu":
            cur = self.cb(b.unary(up, "GELU"), "ffn_moe_gelu", il)
        elif act == "relu_sqr":
            if gate_exps is not None:
                raise GraphBuildError(f"{f.path}: gated squared ReLU experts (llama.cpp aborts)")
            cur = self.cb(b.sqr(b.unary(up, "RELU")), "ffn_moe_relu_sqr", il)
        elif gate_exps is not None:
            cur = self.cb(b.glu_split(cur, up, "SWIGLU"), "ffn_moe_swiglu", il)
        else:
            cur = self.cb(b.unary(up, "SILU"), "ffn_moe_silu", il)
        down = self.need(self.lw(il, "ffn_down_exps.weight"), "ffn_down_exps")
        down_s = self.lw(il, "ffn_down_exps.scale") if scaled else None
        experts = self.cb(self.mm_id(down, cur, selected, down_s), "ffn_moe_down", il)
        if down_s is not None:
            self.cb(experts, "ffn_moe_down_scaled", il)
        down_b = self.lw(il, "ffn_down_exps.bias") if biases else None
        if down_b is not None:
            experts = self.cb(b.add_id(experts, down_b, selected), "ffn_moe_down_biased", il)
        experts = self.cb(b.mul(experts, weights), "ffn_moe_weighted", il)
        b.expand(experts)
        views = []
        for i in range(n_used):
            v = b.view(experts, (n_embd, n_tokens), (experts.nb[2],), i * experts.nb[1])
            b.expand(v)
            views.append(v)
        out = views[0]
        for v in views[1:]:
            out = b.add(out, v)
            b.expand(out)
        if n_used == 1:
            out = b.cont(out)
        return self.cb(out, "ffn_moe_out", il)

    # --- the arch graphs -------------------------------------------------------------------
    def lm_head(self, inpL: T) -> T:
        """The output norm and lm_head most archs end with (result_norm, result_output), and
        llm_graph_result::set_outputs; returns the logits for arch-specific tails."""
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        cur = self.cb(cur, "result_norm", -1)
        set_output(cur)
        output = self.w("output.weight", -2)
        if output is None:  # tied: token_embd again, in the output layer's buffer
            output = self.need(
                self.w("token_embd.weight", -2, as_name="token_embd.weight"), "token_embd.weight"
            )
        return self.mm(output, cur)

    def finish(self, logits: T) -> None:
        self.b.expand(self.cb(logits, "result_output", -1))
        set_output(logits)

    def build_deci(self) -> None:
        """src/models/deci.cpp llama_model_deci::graph: per-layer heads and FFN widths, layers
        without attention (n_head 0), "linear attention" (n_head_kv 0: wo alone) or without FFN
        (n_ff 0)."""
        f, b = self.f, self.b
        self.no_long_rope()
        inpL = self.inp_embd(1.0)
        inp_pos = self.inp_pos()
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        inp = _Inp(self, _Cache(self, layers, self.c.kv_size))
        inp.rotations(self)
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            inpSA = inpL
            n_head, n_head_kv, n_ff = f.n_head[il], f.n_head_kv[il], f.n_ff[il]
            if n_head == 0:
                cur = inpL
            else:
                cur = self.norm(inpL, self.lw(il, "attn_norm.weight"), il)
                cur = self.cb(cur, "attn_norm", il)
            if n_head > 0 and n_head_kv == 0:
                wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
                cur = self.cb(self.mm(wo, cur), "wo", il)
            elif n_head > 0:
                factors = self.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
                q, k, v = self.qkv(cur, il)
                q = self.cb(b.rope(q, inp_pos, factors), "Qcur", il)
                k = self.cb(b.rope(k, inp_pos, factors), "Kcur", il)
                self.cb(v, "Vcur", il)
                wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
                cur = self.attn(inp, wo, self.lw(il, "attn_output.bias"), q, k, v, il, False)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpSA = b.get_rows(inpSA, out_ids)
            if n_ff == 0:
                continue
            ffn_inp = cur
            if n_head > 0:
                ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
            cur = self.cb(self.norm(ffn_inp, self.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
            cur = self.cb(self.ffn(cur, il, "silu", True), "ffn_out", il)
            cur = self.cb(b.add(cur, ffn_inp), "ffn_out", il)
            inpL = self.cb(cur, "l_out", il)
        self.finish(self.lm_head(inpL))

    def build_gptoss(self) -> None:
        """src/models/openai-moe.cpp llama_model_openai_moe::graph: iSWA attention with biases
        and sinks, a post-attention norm, the biased softmax-weight MoE with SWIGLU_OAI; the
        output rows picked after the last layer (cparams.embeddings_nextn_masked is false), whose
        input is an output too (t_h_nextn, llm_graph_result::set_outputs)."""
        f, b = self.f, self.b
        inpL = self.inp_embd(1.0)
        inp_pos = self.inp_pos()
        base, swa = self.inp_iswa()
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            q, k, v = self.qkv(cur, il)
            q = self.cb(b.rope(q, inp_pos, None), "Qcur", il)
            k = self.cb(b.rope(k, inp_pos, None), "Kcur", il)
            self.cb(v, "Vcur", il)
            inp = swa if f.swa.is_swa[il] else base
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            wo_b = self.lw(il, "attn_output.bias")
            sinks = self.lw(il, "attn_sinks.weight")
            cur = self.attn(inp, wo, wo_b, q, k, v, il, True, sinks)
            cur = self.cb(cur, "attn_out", il)
            ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
            cur = self.norm(ffn_inp, self.lw(il, "post_attention_norm.weight"), il)
            cur = self.cb(cur, "attn_post_norm", il)
            cur = self.moe_ffn(
                cur, il, gating="softmax_weight", norm_w=False, act="swiglu_oai", biases=True
            )
            cur = self.cb(cur, "ffn_moe_out", il)
            inpL = self.cb(b.add(cur, ffn_inp), "l_out", il)
        set_output(inpL)  # res->t_h_nextn
        self.finish(self.lm_head(b.get_rows(inpL, out_ids)))

    def build_glm4moe(self) -> None:
        """src/models/glm4-moe.cpp llama_model_glm4_moe::graph: the trunk's layers (the NextN
        ones are graph_mtp's), optional Q/K norms, a post-attention norm, dense lead layers, then
        routed (sigmoid gating, exp_probs_b) plus shared experts; the output norm is h_nextn, an
        output too (cparams.embeddings_nextn is false: rows picked in the last layer)."""
        f, b = self.f, self.b
        if f.use_mrope:
            raise GraphBuildError(f"{f.path}: M-RoPE (rope_sections) is not modelled")
        assert f.moe is not None
        inpL = self.inp_embd(1.0)
        inp_pos = self.inp_pos()
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        inp = _Inp(self, _Cache(self, layers, self.c.kv_size))
        inp.rotations(self)
        out_ids = self.inp_out_ids()
        gating = _GATING.get(f.expert_gating_func, "sigmoid")
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            q, k, v = self.qkv(cur, il)
            q_norm, k_norm = self.lw(il, "attn_q_norm.weight"), self.lw(il, "attn_k_norm.weight")
            if q_norm is not None:
                q = self.cb(self.norm(q, q_norm, il), "Qcur_normed", il)
            if k_norm is not None:
                k = self.cb(self.norm(k, k_norm, il), "Kcur_normed", il)
            q = self.cb(b.rope(q, inp_pos, None), "Qcur", il)
            k = self.cb(b.rope(k, inp_pos, None), "Kcur", il)
            self.cb(v, "Vcur", il)
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            cur = self.attn(inp, wo, None, q, k, v, il, False)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpSA = b.get_rows(inpSA, out_ids)
            ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
            cur = self.norm(ffn_inp, self.lw(il, "post_attention_norm.weight"), il)
            cur = self.cb(cur, "post_attn_norm", il)
            if il < f.moe.n_layer_dense_lead:
                cur = self.cb(self.ffn(cur, il, "silu", False), "ffn_out", il)
            else:
                routed = self.moe_ffn(
                    cur,
                    il,
                    gating=gating,
                    norm_w=f.expert_weights_norm,
                    exp_probs_b=self.lw(il, "exp_probs_b.bias"),
                )
                routed = self.cb(routed, "ffn_moe_out", il)
                shared = self.ffn(cur, il, "silu", False, "_shexp")
                shared = self.cb(shared, "ffn_shexp_out", il)
                cur = self.cb(b.add(routed, shared), "ffn_out", il)
            inpL = self.cb(b.add(cur, ffn_inp), "l_out", il)
        self.finish(self.lm_head(inpL))  # h_nextn is result_norm: set_output(t_h_nextn) again

    def attn_k(self, inp: _Inp, wo: T, q: T, k: T, v: T, v_mla: T, il: int) -> T:
        """build_attn over llm_graph_input_attn_k (MLA: the cache holds K only; V is a view of
        it, the attention output decompressed by v_mla)."""
        b = self.b
        for t in (q, v, k):
            b.expand(t)
        b.expand(self.cpy_k(inp.cache, k, inp.k_idxs, il))
        kc = self.get_k(inp.cache, il)
        vc = b.view(kc, (v.ne[0], kc.ne[1], kc.ne[2], kc.ne[3]), kc.nb[1:], 0)
        cur = self.cb(self.attn_mha(q, kc, vc, inp.mask, il, None, v_mla), "kqv_out", il)
        return self.mm(wo, cur)

    def build_deepseek2(self) -> None:
        """src/models/deepseek2.cpp llama_model_deepseek2::graph with MLA (hparams.is_mla: the
        absorbed wk_b / wv_b path over build_attn_inp_k), Q through the q_a / q_b pair or wq
        (lite), dense lead layers, routed experts (the gating of expert_gating_func, softmax
        when unset) plus shared ones, attention temperature tuning (inp_attn_scale). Not
        modelled: the MHA path of GGUFs without wk_b."""
        f, c, b = self.f, self.c, self.b
        mla = f.mla
        if mla is None or self.lw(0, "attn_k_b.weight") is None:
            raise GraphBuildError(f"{f.path}: deepseek2 without MLA (wkv_b) is not modelled")
        assert f.moe is not None
        n_tokens, n_head0 = c.n_tokens, f.n_head[0]
        head_k, rank = mla.key_length_mla, mla.kv_lora_rank
        n_rot = f.n_embd_head_k - rank  # the cache row: kv_lora_rank, then the RoPE part
        nope = head_k - n_rot
        inpL = self.inp_embd(1.0)
        temp = None
        if f.attn_temp_scale != 0.0:  # build_inp_attn_scale
            temp = self.b.new("f32", 1, 1, n_tokens, name="inp_attn_scale", inp=True)
        inp_pos = self.inp_pos()
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        inp = _Inp(self, _Cache(self, layers, c.kv_size))  # build_attn_inp_k: no rotations
        out_ids = self.inp_out_ids()
        # llama_model_deepseek2::load_arch_hparams: unset is softmax (DeepSeek V2, V2.5) but
        # sigmoid for GLM 4.7 Lite (47 or 48 layers, 154880 tokens)
        glm_lite = self.n_layer in (47, 48) and f.n_vocab == 154880
        gating = _GATING.get(f.expert_gating_func, "sigmoid" if glm_lite else "softmax")
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            wq = self.lw(il, "attn_q.weight")
            if wq is None:
                q = self.cb(self.mm(self.need(self.lw(il, "attn_q_a.weight"), "q_a"), cur), "q", il)
                q = self.cb(self.norm(q, self.lw(il, "attn_q_a_norm.weight"), il), "q", il)
                q = self.cb(self.mm(self.need(self.lw(il, "attn_q_b.weight"), "q_b"), q), "q", il)
            else:
                q = self.cb(self.mm(wq, cur), "q", il)
            q = self.cb(b.reshape(q, head_k, n_head0, n_tokens), "q", il)
            wkv_a = self.need(self.lw(il, "attn_kv_a_mqa.weight"), "attn_kv_a_mqa")
            kv_pe = self.cb(self.mm(wkv_a, cur), "kv_cmpr_pe", il)
            row = row_size(kv_pe.type, rank + n_rot)
            kv = self.cb(b.view(kv_pe, (rank, n_tokens), (row,), 0), "kv_cmpr", il)
            k_pe = b.view(kv_pe, (n_rot, 1, n_tokens), (row, row), row_size(kv_pe.type, rank))
            k_pe = self.cb(k_pe, "k_pe", il)
            k_pe = self.cb(b.rope(k_pe, inp_pos, None), "k_pe", il)
            kv = self.cb(self.norm(kv, self.lw(il, "attn_kv_a_norm.weight"), il), "kv_cmpr", il)
            q_nope = b.view(q, (nope, n_head0, n_tokens), (q.nb[1], q.nb[2]), 0)
            q_nope = self.cb(q_nope, "q_nope", il)
            q_pe = b.view(q, (n_rot, n_head0, n_tokens), (q.nb[1], q.nb[2]), row_size(q.type, nope))
            q_pe = self.cb(q_pe, "q_pe", il)
            q_pe = self.cb(b.rope(q_pe, inp_pos, None), "q_pe", il)
            q_nope = self.cb(b.permute(q_nope, 0, 2, 1, 3), "q_nope_perm", il)
            wk_b = self.need(self.lw(il, "attn_k_b.weight"), "attn_k_b")
            q_abs = self.cb(b.mul_mat(wk_b, q_nope), "q_nope_absorbed", il)
            q_abs = self.cb(b.permute(q_abs, 0, 2, 1, 3), "q_nope_absorbed_perm", il)
            q = self.cb(b.concat(q_abs, q_pe, 0), "Qcur", il)
            kv = self.cb(b.reshape(kv, rank, 1, n_tokens), "kv_cmpr_reshape", il)
            k = self.cb(b.concat(kv, k_pe, 0), "Kcur", il)
            v = self.cb(kv, "Vcur", il)
            if temp is not None:
                q = self.cb(b.mul(q, temp), "Qcur_attn_temp_scaled", il)
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            wv_b = self.need(self.lw(il, "attn_v_b.weight"), "attn_v_b")
            cur = self.attn_k(inp, wo, q, k, v, wv_b, il)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpSA = b.get_rows(inpSA, out_ids)
            ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
            cur = self.cb(self.norm(ffn_inp, self.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
            if il < f.moe.n_layer_dense_lead:
                cur = self.cb(self.ffn(cur, il, "silu", False), "ffn_out", il)
            else:
                routed = self.moe_ffn(
                    cur,
                    il,
                    gating=gating,
                    norm_w=f.expert_weights_norm,
                    exp_probs_b=self.lw(il, "exp_probs_b.bias"),
                )
                routed = self.cb(routed, "ffn_moe_out", il)
                shared = self.cb(self.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
                cur = self.cb(b.add(routed, shared), "ffn_out", il)
            inpL = self.cb(b.add(cur, ffn_inp), "l_out", il)
        self.finish(self.lm_head(inpL))  # h_nextn is result_norm

    def build_rs(
        self, rs: _Rs, s: T, state_size: int, getter: Callable[[T, T], T] | None = None
    ) -> T:
        """llm_graph_context::build_rs for a reserve (rs_head 0, rs_z 0, n_rs = the size)."""
        b, n_seqs = self.b, self.c.n_seqs
        n_rs = rs.size
        state_copy = rs.copy_tail if getter is not None else rs.copy
        states = b.reshape(s, state_size, s.ne[1])
        b.expand(b.scale_inplace(b.view(states, (state_size,), (), 0)))
        i0 = n_rs - state_copy.ne[0]
        states_all = b.get_rows(states, state_copy)
        if getter is not None:
            out = getter(states, rs.copy_main)
        else:
            out = b.view(states_all, (state_size, n_seqs), (states_all.nb[1],), 0)
        b.expand(out)
        nb1 = states_all.nb[1]
        extra = b.view(states_all, (state_size, n_rs - n_seqs), (nb1,), (n_seqs - i0) * nb1)
        dest = b.view(s, (state_size, n_rs - n_seqs), (s.nb[1],), n_seqs * s.nb[1])
        b.expand(b.cpy(extra, dest))
        return out

    def mamba2_layer(self, rs: _Rs, cur: T, il: int) -> T:
        """llm_build_mamba_base::build_mamba2_layer (src/models/mamba-base.cpp), K = 1
        (cparams.n_rs_seq 0): the conv state, ssm_conv, ssm_scan over the states in place, the
        D skip, the z gate and the grouped RMS norm."""
        f, b, c = self.f, self.b, self.c
        rec = f.recurrent
        assert rec is not None
        d_conv, d_inner, d_state = rec.d_conv, rec.d_inner, rec.d_state
        n_head, n_group = rec.dt_rank, rec.n_group
        head_dim = d_inner // n_head
        n_seqs = c.n_seqs
        n_seq_tokens = c.n_tokens // n_seqs
        xbc_w = d_inner + 2 * n_group * d_state
        conv_all, ssm_all = rs.r[il], rs.s[il]
        state_slots = ssm_all.ne[1]
        conv = self.build_rs(rs, conv_all, rec.n_embd_r)
        conv = b.reshape(conv, d_conv - 1, xbc_w, n_seqs)
        zx = self.mm(self.need(self.lw(il, "ssm_in.weight"), "ssm_in"), cur)
        zx = b.reshape(zx, zx.ne[0], n_seq_tokens, n_seqs)
        nb0, nb1, nb2 = zx.nb[0], zx.nb[1], zx.nb[2]
        z = b.view(zx, (head_dim, n_head, n_seq_tokens, n_seqs), (head_dim * nb0, nb1, nb2), 0)
        xbc = b.view(zx, (xbc_w, n_seq_tokens, n_seqs), (nb1, nb2), d_inner * nb0)
        dt = b.view(zx, (n_head, n_seq_tokens, n_seqs), (nb1, nb2), (d_inner + xbc_w) * nb0)
        conv_x = b.concat(conv, b.transpose(xbc), 0)
        row_count = (d_conv - 1) * xbc_w
        last = b.view(
            conv_x,
            (d_conv - 1, xbc_w, n_seqs),
            (conv_x.nb[1], conv_x.nb[2]),
            n_seq_tokens * conv_x.nb[0],
        )
        b.expand(b.cpy(last, b.view(conv_all, (row_count, n_seqs), (conv_all.nb[1],), 0)))
        xbc = b.ssm_conv(conv_x, self.need(self.lw(il, "ssm_conv1d.weight"), "ssm_conv1d"))
        xbc = b.add(xbc, self.need(self.lw(il, "ssm_conv1d.bias"), "ssm_conv1d.bias"))
        xbc = b.unary(xbc, "SILU")
        e, n1, n2 = xbc.nb[0], xbc.nb[1], xbc.nb[2]
        x = b.view(xbc, (head_dim, n_head, n_seq_tokens, n_seqs), (head_dim * e, n1, n2), 0)
        gb = (d_state, n_group, n_seq_tokens, n_seqs)
        bm = b.view(xbc, gb, (d_state * e, n1, n2), d_inner * e)
        cm = b.view(xbc, gb, (d_state * e, n1, n2), (d_inner + n_group * d_state) * e)
        dt = b.add(b.cont(dt), self.need(self.lw(il, "ssm_dt.bias"), "ssm_dt.bias"))
        a = self.need(self.lw(il, "ssm_a"), "ssm_a")

        def ssm_rows(states: T, ids: T) -> T:
            ssm = b.reshape(states, d_state, head_dim, n_head, state_slots)
            return b.ssm_scan(ssm, x, dt, a, bm, cm, ids, 1)

        y_ssm = self.build_rs(rs, ssm_all, rec.n_embd_s, ssm_rows)
        big_d = d_state * d_inner
        y_row = row_size(y_ssm.type, big_d)
        s_row = row_size(ssm_all.type, big_d)
        offset = nelements(x) * TYPES[x.type][1]
        src = b.view(y_ssm, (big_d, n_seqs, 1), (y_row, y_row * n_seqs), offset)
        dst = b.view(ssm_all, (big_d, n_seqs, 1), (ssm_all.nb[1], rs.size * s_row), 0)
        b.expand(b.cpy(src, dst))
        xn1 = x.nb[1]
        y = b.view(
            y_ssm,
            (head_dim, n_head, n_seq_tokens, n_seqs),
            (xn1, n_head * xn1, n_seq_tokens * n_head * xn1),
            0,
        )
        y = b.add(y, b.mul(x, self.need(self.lw(il, "ssm_d"), "ssm_d")))
        self.cb(y, "mamba2_y_add_d", il)
        y = b.glu_split(b.cont(z), y, "SWIGLU")
        norm = self.lw(il, "ssm_norm.weight")
        if norm is not None:
            y = b.reshape(y, d_inner // n_group, n_group, n_seq_tokens, n_seqs)
            y = self.norm(y, norm, il)
        y = b.reshape(y, d_inner, n_seq_tokens * n_seqs)
        cur = self.mm(self.need(self.lw(il, "ssm_out.weight"), "ssm_out"), y)
        return self.cb(cur, "mamba_out", il)

    def build_mamba2(self) -> None:
        """src/models/mamba.cpp llama_model_mamba::graph for LLM_ARCH_MAMBA2: RMS norm, the
        Mamba-2 layer, the residual; no attention, no positions."""
        f, b = self.f, self.b
        inpL = self.inp_embd(1.0)
        rs = _Rs(self, list(range(f.n_layer_all)))
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            cur = self.mamba2_layer(rs, cur, il)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpL = b.get_rows(inpL, out_ids)
            inpL = self.cb(b.add(cur, inpL), "l_out", il)
        self.finish(self.lm_head(inpL))

    def build_granite(self) -> None:
        """src/models/granite.cpp llama_model_granite::graph (granitemoe's graph is this class,
        granite-moe.cpp; dense granite's too, not yet checked against a recorded graph, so not in
        FAMILIES) and src/models/granite-hybrid.cpp (granitehybrid): Granite's
        embedding, residual and logit scales around a llama layer with a dense or MoE FFN (shared
        experts when n_ff_shexp). The hybrid has Mamba-2 layers where n_head_kv is 0
        (build_inp_mem_hybrid: the recurrent inputs, then the KV cache's, then inp_pos); RoPE when
        llama_hparams::has_rope (granite and granitehybrid: rope.scaling.finetuned, default true;
        granitemoe: always); Granite Vision's deepstack inputs (dense granite only) are not."""
        f, b, c = self.f, self.b, self.c
        self.no_long_rope()
        hybrid = f.architecture == "granitehybrid"
        rope = f.architecture == "granitemoe" or f.rope_finetuned is not False
        inpL = self.inp_embd(1.0, f.embedding_scale)
        inp_pos = self.inp_pos() if rope and not hybrid else None
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        rs = (
            _Rs(self, [il for il in range(f.n_layer_all) if f.is_recurrent[il]]) if hybrid else None
        )
        inp = _Inp(self, _Cache(self, layers, c.kv_size))
        inp.rotations(self)
        out_ids = self.inp_out_ids()
        if rope and hybrid:
            inp_pos = self.inp_pos()
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            if rs is not None and f.is_recurrent[il]:
                cur = self.mamba2_layer(rs, cur, il)
            else:
                q, k, v = self.qkv(cur, il)
                if inp_pos is not None:
                    factors = self.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
                    q = b.rope(q, inp_pos, factors)
                    k = b.rope(k, inp_pos, factors)
                self.cb(q, "Qcur", il)
                self.cb(k, "Kcur", il)
                self.cb(v, "Vcur", il)
                wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
                cur = self.attn(inp, wo, self.lw(il, "attn_output.bias"), q, k, v, il, False)
                cur = self.cb(cur, "attn_out", il)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpSA = b.get_rows(inpSA, out_ids)
            # build_layer_ffn
            if f.residual_scale:
                cur = b.scale(cur)
            ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
            cur = self.cb(self.norm(ffn_inp, self.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
            if self.lw(il, "ffn_gate_inp.weight") is None:
                cur = self.cb(self.ffn(cur, il, "silu", True), "ffn_out", il)
            else:
                moe = self.cb(self.moe_ffn(cur, il), "ffn_moe_out", il)
                if f.moe is not None and f.moe.n_ff_shexp > 0:
                    shared = self.cb(self.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
                    cur = self.cb(b.add(moe, shared), "ffn_out", il)
                else:
                    cur = moe
            if f.residual_scale:
                cur = b.scale(cur)
            cur = self.cb(b.add(cur, ffn_inp), "ffn_out", il)
            inpL = self.cb(cur, "l_out", il)
        logits = self.lm_head(inpL)
        if f.logit_scale or not hybrid:  # granite.cpp scales by 1/f_logit_scale always
            logits = b.scale(logits)
        self.finish(logits)

    def inp_iswa(self) -> tuple[_Inp, _Inp]:
        """build_attn_inp_kv_iswa: the base cache's inputs, the SWA cache's, then the rotations
        of each (llama_kv_cache_iswa)."""
        f, c = self.f, self.c
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        base = _Inp(
            self, _Cache(self, [il for il in layers if not f.swa.is_swa[il]], c.kv_size), False
        )
        swa = _Inp(
            self, _Cache(self, [il for il in layers if f.swa.is_swa[il]], c.kv_size_swa), True
        )
        base.rotations(self)
        swa.rotations(self)
        return base, swa

    def inp_per_layer(self, inpL: T) -> T:
        """llama_model_gemma4::graph's build_inp_per_layer and project_per_layer_inputs: the
        per-layer token rows (their own token input), plus the projection of the scaled
        embeddings, normed; [n_embd_per_layer, n_tokens, n_layer]."""
        b, n_tokens = self.b, self.c.n_tokens
        table = self.need(self.w("per_layer_token_embd.weight", -1), "per_layer_token_embd")
        n_per_layer = table.ne[0] // self.n_layer
        tokens = b.new("i32", n_tokens, inp=True)
        sel = b.reshape(b.get_rows(table, tokens), n_per_layer, self.n_layer, n_tokens)
        sel = self.cb(b.scale(sel), "inp_per_layer_selected", -1)
        b.expand(sel)
        # per_layer_model_proj / _proj_norm: LLM_TENSOR_LAYER_REPEATING, made for layer 0
        proj_w = self.need(self.w("per_layer_model_proj.weight", 0), "per_layer_model_proj")
        proj = b.scale(self.mm(proj_w, inpL))
        proj = b.reshape(proj, n_per_layer, self.n_layer, n_tokens)
        proj = self.norm(proj, self.w("per_layer_proj_norm.weight", 0), -1)
        proj = self.cb(proj, "per_layer_proj", -1)
        out = self.cb(b.scale(b.add(proj, sel)), "inp_per_layer", -1)
        return b.cont(b.permute(out, 0, 2, 1, 3))

    def build_gemma4(self) -> None:
        """src/models/gemma4.cpp llama_model_gemma4::graph: the scaled embeddings and (E2B, E4B)
        the per-layer inputs; iSWA attention with Q/K norms, V RMS-normed, RoPE with rope_freqs in
        the full-attention layers, V = K where the file has no attn_v (attention_k_eq_v); the
        layers from n_layer_kv_from_start read an earlier layer's cache (Q only); a GELU FFN and,
        where ffn_gate_inp is, routed experts beside it (the router's logits from its own norm,
        merged gate_up experts); the per-layer embedding and the layer's output scale; the output
        rows picked after the output norm (h_nextn, an output: cparams.embeddings_nextn_masked
        is false), the tied output a tensor of its own (_sharing), logit soft-capping."""
        f, b = self.f, self.b
        inpL = self.cb(self.inp_embd(math.sqrt(f.n_embd)), "inp_scaled", -1)
        inp_pos = self.inp_pos()
        base, swa = self.inp_iswa()
        out_ids = self.inp_out_ids()
        per_layer = None
        if "per_layer_token_embd.weight" in self.tensors:
            per_layer = self.inp_per_layer(inpL)
        n_tokens = self.c.n_tokens

        def scale(il: int, part: str) -> T | None:
            return self.lw(il, f"{part}.scale")

        def mm(il: int, part: str, cur: T) -> T:
            w = self.need(self.lw(il, f"{part}.weight"), part)
            return self.mm_s(w, cur, scale(il, part))

        for il in range(self.n_layer):
            head, n_head, n_head_kv = self.head_k(il), f.n_head[il], f.n_head_kv[il]
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            factors = None if f.swa.is_swa[il] else self.w("rope_freqs.weight", il)
            if self.lw(il, "attn_qkv.weight") is not None:
                raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
            q = self.cb(mm(il, "attn_q", cur), "Qcur", il)
            q = b.reshape(q, head, n_head, n_tokens)
            q = self.cb(self.norm(q, self.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
            q = self.cb(b.rope(q, inp_pos, factors), "Qcur_pos", il)
            inp = swa if f.swa.is_swa[il] else base
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            wo_s = scale(il, "attn_output")
            if f.has_kv[il]:
                k = self.cb(mm(il, "attn_k", cur), "Kcur", il)
                v = mm(il, "attn_v", cur) if self.lw(il, "attn_v.weight") is not None else k
                self.cb(v, "Vcur", il)
                k = b.reshape(k, head, n_head_kv, n_tokens)
                v = b.reshape(v, head, n_head_kv, n_tokens)
                k = self.norm(k, self.lw(il, "attn_k_norm.weight"), il)
                v = b.rms_norm(v)
                self.cb(k, "Kcur_normed", il)
                self.cb(v, "Vcur_normed", il)
                k = self.cb(b.rope(k, inp_pos, factors), "Kcur_pos", il)
                cur = self.attn(inp, wo, None, q, k, v, il, True, wo_s=wo_s)
            else:
                cur = self.attn(inp, wo, None, q, None, None, il, True, wo_s=wo_s)
            cur = self.norm(cur, self.lw(il, "post_attention_norm.weight"), il)
            cur = self.cb(cur, "attn_post_norm", il)
            attn_out = self.cb(b.add(cur, inpL), "attn_out", il)
            if self.lw(il, "ffn_gate_inp.weight") is not None:
                mlp = self.norm(attn_out, self.lw(il, "ffn_norm.weight"), il)
                mlp = self.ffn(self.cb(mlp, "ffn_norm_1", il), il, "gelu", False, scales=True)
                mlp = self.norm(mlp, self.lw(il, "post_ffw_norm_1.weight"), il)
                mlp = self.cb(mlp, "ffn_mlp", il)
                moe = self.norm(attn_out, self.lw(il, "pre_ffw_norm_2.weight"), il)
                moe = self.cb(moe, "ffn_norm_2", il)
                tmp = b.scale(b.rms_norm(attn_out))
                tmp = b.mul(tmp, self.need(self.lw(il, "ffn_gate_inp.scale"), "ffn_gate_inp.scale"))
                router = self.need(self.lw(il, "ffn_gate_inp.weight"), "ffn_gate_inp")
                logits = self.cb(self.mm(router, tmp), "ffn_moe_logits", il)
                moe = self.moe_ffn(moe, il, act="gelu", probs_in=logits, w_scale=1.0)
                moe = self.norm(moe, self.lw(il, "post_ffw_norm_2.weight"), il)
                moe = self.cb(moe, "ffn_moe", il)
                cur = self.cb(b.add(mlp, moe), "ffn_moe_combined", il)
            else:
                cur = self.norm(attn_out, self.lw(il, "ffn_norm.weight"), il)
                cur = self.cb(cur, "ffn_norm", il)
                cur = self.cb(self.ffn(cur, il, "gelu", False, scales=True), "ffn_out", il)
            cur = self.norm(cur, self.lw(il, "post_ffw_norm.weight"), -1)
            cur = self.cb(cur, "ffn_post_norm", il)
            cur = b.add(cur, attn_out)
            if per_layer is not None:
                pe_in = self.cb(cur, "pe_in", il)
                gate = self.need(self.lw(il, "inp_gate.weight"), "inp_gate")
                cur = b.unary(self.mm(gate, cur), "GELU")
                this = self._slice_2d(per_layer, il)
                cur = self.mm(self.need(self.lw(il, "proj.weight"), "proj"), b.mul(cur, this))
                cur = self.norm(cur, self.lw(il, "post_norm.weight"), il)
                cur = self.cb(cur, "per_layer_embd_out", il)
                cur = b.add(pe_in, cur)
            out_scale = self.lw(il, "layer_output_scale.weight")
            if out_scale is not None:
                cur = self.cb(b.mul(cur, out_scale), "out_scaled", il)
            inpL = self.cb(cur, "l_out", il)
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        h_nextn = self.cb(cur, "h_nextn", -1)
        set_output(h_nextn)
        cur = self.cb(b.get_rows(cur, out_ids), "result_norm", -1)
        set_output(cur)
        self._gemma_logits(cur)

    # --- gemma3n (src/models/gemma3n.cpp) ------------------------------------------------------
    def _gemma_logits(self, cur: T) -> None:
        """The lm_head of gemma4.cpp and gemma3n.cpp: the tied output a tensor of its own (made
        before token_embd, _sharing), its scale for an NVFP4 output (llama_model::load_tensors
        loads output.scale for that type only), logit soft-capping."""
        b = self.b
        output = self.w("output.weight", -2)
        if output is None:
            output = self.w("token_embd.weight", -2, as_name="token_embd.weight", own=True)
        output = self.need(output, "token_embd.weight")
        out_s = self.w("output.scale", -2) if output.type == "nvfp4" else None
        cur = self.mm_s(output, cur, out_s)
        if self.hp.final_logit_softcapping:
            cur = b.unary(b.scale(cur), "TANH")
            cur = b.scale(cur)
        self.finish(cur)

    def _slice_2d(self, x: T, idx: int) -> T:
        """gemma3n_view_2d_slice: the idx-th [ne0, ne1] matrix of a 3-D tensor, as a view (gemma4's
        per-layer input of layer idx is the same view)."""
        ne0, ne1 = x.ne[0], x.ne[1]
        row = row_size(x.type, ne0)
        return self.b.view(x, (ne0, ne1), (row,), idx * ne1 * row)

    def _g3n_rest(self, x: T) -> T:
        """The view of every stream but the first (ggml_view_3d, skipping slice 0)."""
        ne0, ne1, ne2 = x.ne[0], x.ne[1], x.ne[2]
        row = row_size(x.type, ne0)
        return self.b.view(x, (ne0, ne1, ne2 - 1), (row, row * ne1), ne1 * row)

    def _g3n_magnitude(self, x: T) -> T:
        """calc_magnitude: sqrt(sum_rows(x^2))."""
        b = self.b
        return b.sqrt(b.sum_rows(b.sqr(x)))

    def _g3n_router(self, x: T, il: int) -> T:
        """altup_compute_router_modalities: normed, scaled, the router's matrix, TANH."""
        b = self.b
        cur = b.scale(self.norm(x, self.lw(il, "altup_router_norm.weight"), il))
        router = self.need(self.lw(il, "altup_router.weight"), "altup_router")
        return b.unary(b.mul_mat(router, cur), "TANH")

    def _g3n_predict(self, cur: T, il: int, act: int) -> T:
        """altup_predict: the streams mixed by the per-token coefficients the router picks, plus
        themselves; [n_embd, n_tokens, n_altup]."""
        b = self.b
        n_altup, n_tokens = cur.ne[2], cur.ne[1]
        modalities = self.cb(self._g3n_router(self._slice_2d(cur, act), il), "modalities", il)
        coef = self.need(self.lw(il, "altup_predict_coef.weight"), "altup_predict_coef")
        coefs = self.cb(self.mm(coef, modalities), "all_coefs", il)
        coefs = b.reshape(coefs, n_altup, n_altup, n_tokens)
        permuted = b.cont(b.permute(cur, 1, 2, 0, 3))
        pred = b.cont(b.permute(b.mul_mat(permuted, coefs), 0, 2, 1, 3))
        return self.cb(b.add(pred, cur), "predictions", il)

    def _g3n_correct(self, pred: T, activated: T, il: int, act: int) -> T:
        """altup_correct: the innovation (activated minus the active prediction) times 1 plus
        the router's coefficients, added to every stream's prediction."""
        b = self.b
        n_embd, n_tokens, n_altup = pred.ne[0], pred.ne[1], pred.ne[2]
        modalities = self.cb(self._g3n_router(activated, il), "modalities", il)
        innovation = b.sub(activated, self._slice_2d(pred, act))
        innovation = self.cb(innovation, "innovation", il)
        coef = self.need(self.lw(il, "altup_correct_coef.weight"), "altup_correct_coef")
        coefs = self.cb(b.scale(self.mm(coef, modalities)), "all_coefs", il)  # ggml_scale_bias
        coefs = b.cont(b.transpose(coefs), 1, n_tokens, n_altup)
        innovation = b.repeat_4d(innovation, n_embd, n_tokens, n_altup, 1)
        return self.cb(b.add(b.mul(innovation, coefs), pred), "corrected", il)

    def _g3n_laurel(self, cur: T, il: int) -> T:
        """laurel: a rank-laurel_rank low-rank update, normed, plus its input."""
        b = self.b
        tmp = self.mm(self.need(self.lw(il, "laurel_l.weight"), "laurel_l"), cur)
        tmp = self.mm(self.need(self.lw(il, "laurel_r.weight"), "laurel_r"), tmp)
        tmp = self.norm(tmp, self.lw(il, "laurel_post_norm.weight"), il)
        return self.cb(b.add(tmp, cur), "laurel_out", il)

    def _g3n_gaussian_topk(self, x: T) -> T:
        """gaussian_topk: RELU(x - (mean + std_mul * std)) over each row."""
        b = self.b
        mean = b.mean(x)
        std = b.sqrt(b.scale(b.sum_rows(b.sqr(b.sub(x, mean)))))
        return b.unary(b.sub(x, b.add(mean, b.scale(std))), "RELU")

    def build_gemma3n(self) -> None:
        """src/models/gemma3n.cpp llama_model_gemma3n::graph: the scaled embeddings, the per-layer
        inputs (build_inp_per_layer, project_per_layer_inputs: as gemma4's), the embeddings
        projected to n_altup streams (altup_proj, magnitudes matched); per layer AltUp's predict,
        the active stream through the attention norm, LAuReL beside iSWA attention (Q/K norms, V
        RMS-normed; the layers from n_layer_kv_from_start read an earlier layer's cache, Q only),
        a GELU FFN whose gate goes through gaussian_topk in the first n_layer_sparsity (10)
        layers, AltUp's correct and the per-layer input added to every stream but the first; then
        the streams merged (altup_unembd_proj), the output rows picked, the output norm, the
        tied output a tensor of its own (made before token_embd, _sharing), logit soft-capping.
        n_altup is altup_proj's third dimension plus one; i_altup_act is 0 (llama_hparams'
        default; load_arch_hparams reads neither)."""
        f, b = self.f, self.b
        act, n_layer_sparsity = 0, 10  # i_altup_act, llama_model_gemma3n::graph::n_layer_sparsity
        n_embd, n_tokens = f.n_embd, self.c.n_tokens
        inpL = self.cb(self.inp_embd(math.sqrt(n_embd)), "inp_scaled", -1)
        inp_pos = self.inp_pos()
        base, swa = self.inp_iswa()
        per_layer = self.inp_per_layer(inpL)
        altup_proj = self.need(self.w("altup_proj.weight", -2), "altup_proj")
        n_altup = altup_proj.ne[2] + 1
        target = self._g3n_magnitude(inpL)
        added = b.mul_mat(altup_proj, b.repeat_4d(inpL, n_embd, n_tokens, n_altup - 1, 1))
        new = self._g3n_magnitude(added)
        added = b.div(b.mul(added, target), new)
        inpL = self.cb(b.concat(inpL, added, 2), "inp_stacked", -1)
        for il in range(self.n_layer):
            head, n_head = self.head_k(il), f.n_head[il]
            pred = self._g3n_predict(inpL, il, act)
            active = self.cb(self._slice_2d(pred, act), "active_prediction", il)
            cur = self.cb(self.norm(active, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            laurel_out = self._g3n_laurel(cur, il)
            inp = swa if f.swa.is_swa[il] else base
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            wo_s = self.lw(il, "attn_output.scale")
            if f.has_kv[il]:
                q, k, v = self.qkv(cur, il, scales=True)
                q = self.norm(q, self.lw(il, "attn_q_norm.weight"), il)
                k = self.norm(k, self.lw(il, "attn_k_norm.weight"), il)
                v = b.rms_norm(v)
                self.cb(q, "Qcur_normed", il)
                self.cb(k, "Kcur_normed", il)
                self.cb(v, "Vcur_normed", il)
                q = self.cb(b.rope(q, inp_pos, None), "Qcur_pos", il)
                k = self.cb(b.rope(k, inp_pos, None), "Kcur_pos", il)
                cur = self.attn(inp, wo, None, q, k, v, il, True, wo_s=wo_s)
            else:
                if self.lw(il, "attn_qkv.weight") is not None:
                    raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
                wq = self.need(self.lw(il, "attn_q.weight"), "attn_q")
                q = self.cb(self.mm(wq, cur), "Qcur", il)
                q = b.reshape(q, head, n_head, n_tokens)
                q = self.cb(self.norm(q, self.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
                q = self.cb(b.rope(q, inp_pos, None), "Qcur_pos", il)
                cur = self.attn(inp, wo, None, q, None, None, il, True, wo_s=wo_s)
            cur = self.norm(cur, self.lw(il, "post_attention_norm.weight"), il)
            cur = self.cb(cur, "attn_post_norm", il)
            cur = self.cb(b.add(cur, active), "attn_gated", il)
            attn_laurel = self.cb(b.scale(b.add(cur, laurel_out)), "attn_laurel", il)
            cur = self.norm(attn_laurel, self.lw(il, "ffn_norm.weight"), il)
            cur = self.cb(cur, "ffn_norm", il)
            up = self.mm(self.need(self.lw(il, "ffn_up.weight"), "ffn_up"), cur)
            gate = self.mm(self.need(self.lw(il, "ffn_gate.weight"), "ffn_gate"), cur)
            if il < n_layer_sparsity:
                gate = self._g3n_gaussian_topk(gate)
            cur = b.mul(up, b.unary(gate, "GELU"))
            cur = self.mm(self.need(self.lw(il, "ffn_down.weight"), "ffn_down"), cur)
            cur = self.cb(cur, "ffn_out", il)
            cur = self.norm(cur, self.lw(il, "post_ffw_norm.weight"), -1)
            cur = self.cb(cur, "ffn_post_norm", il)
            gated = self.cb(b.add(cur, attn_laurel), "attn_ffw_laurel_gated", il)
            corrected = self._g3n_correct(pred, gated, il, act)
            scale = self.need(self.lw(il, "altup_correct_scale.weight"), "altup_correct_scale")
            first = b.mul(self._slice_2d(corrected, act), scale)
            first = self.mm(self.need(self.lw(il, "inp_gate.weight"), "inp_gate"), first)
            first = self.cb(b.unary(first, "GELU"), "first_prediction_gated", il)
            first = b.mul(first, self._slice_2d(per_layer, il))
            first = self.cb(first, "first_prediction_scaled", il)
            first = self.mm(self.need(self.lw(il, "proj.weight"), "proj"), first)
            first = self.norm(first, self.lw(il, "post_norm.weight"), il)
            first = self.cb(first, "first_prediction_out", il)
            rest = b.add(self._g3n_rest(corrected), first)
            corrected = b.concat(self._slice_2d(corrected, 0), rest, 2)
            inpL = self.cb(corrected, "l_out", il)
        cur = inpL
        target = self._g3n_magnitude(self._slice_2d(cur, act))
        unembd_proj = self.need(self.w("altup_unembd_proj.weight", -2), "altup_unembd_proj")
        unembd = b.mul_mat(unembd_proj, self._g3n_rest(cur))
        new = self._g3n_magnitude(unembd)
        unembd = self.cb(b.div(b.mul(unembd, target), new), "altup_unembd", -1)
        cur = self._slice_2d(cur, 0)
        for i in range(n_altup - 1):
            cur = b.add(cur, self._slice_2d(unembd, i))
        cur = self.cb(b.scale(cur), "unembd_merged", -1)
        cur = b.get_rows(cur, self.inp_out_ids())
        cur = self.norm(cur, self.w("output_norm.weight", -2), -1)
        cur = self.cb(cur, "result_norm", -1)
        set_output(cur)
        self._gemma_logits(cur)

    def build_nemotron_h(self) -> None:
        """src/models/nemotron-h.cpp llama_model_nemotron_h::graph, the class nemotron_h_moe's
        trunk builds too (nemotron-h-moe.cpp: `using graph = llama_model_nemotron_h::graph`; its
        graph_mtp is the MTP draft's). Per layer an RMS norm, then a Mamba-2 layer (is_recr), an
        attention layer (n_ff 0: no RoPE) or an FFN layer (build_ffn_layer: the router's logits,
        sigmoid-gated experts with exp_probs_b, RELU_SQR without gate, weights normalised and
        scaled by expert_weights_scale, then the shared experts), then the residual
        (nemotron_h_block_out). build_inp_mem_hybrid: the recurrent inputs, then the
        KV cache's; no positions. The output norm is h_nextn, an output, and the output rows are
        picked after it (cparams.embeddings_nextn_masked is false); no latent MoE projections
        (ffn_latent_down / _up) nor dense MLP layers (nemotron_h's): GraphBuildError."""
        f, b, c = self.f, self.b, self.c
        inpL = self.inp_embd(1.0)
        rs = _Rs(self, [il for il in range(f.n_layer_all) if f.is_recurrent[il]])
        inp = _Inp(
            self, _Cache(self, [il for il in range(f.n_layer_all) if f.has_kv[il]], c.kv_size)
        )
        inp.rotations(self)
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            if f.is_recurrent[il]:
                cur = self.mamba2_layer(rs, cur, il)
            elif f.n_ff[il] == 0:
                q, k, v = self.qkv(cur, il)
                wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
                wo_b, wo_s = self.lw(il, "attn_output.bias"), self.lw(il, "attn_output.scale")
                cur = self.attn(inp, wo, wo_b, q, k, v, il, False, wo_s=wo_s)
                cur = self.cb(cur, "attn_out", il)
            else:
                cur = self.nemotron_ffn(cur, il)
            inpL = self.cb(b.add(cur, inpSA), "nemotron_h_block_out", il)
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        set_output(self.cb(cur, "h_nextn", -1))
        cur = self.cb(b.get_rows(cur, out_ids), "result_norm", -1)
        set_output(cur)
        output = self.need(self.w("output.weight", -2), "output.weight")
        self.finish(self.mm_s(output, cur, self.w("output.scale", -2)))

    def nemotron_ffn(self, cur: T, il: int) -> T:
        """llama_model_nemotron_h::graph::build_ffn_layer (nemotron-h.cpp)."""
        f, b = self.f, self.b
        router = self.lw(il, "ffn_gate_inp.weight")
        if router is None:  # a dense MLP layer (nemotron_h: n_expert 0), with optional biases
            raise GraphBuildError(f"{f.path}: dense Nemotron-H MLP layers are not modelled")
        if self.lw(il, "ffn_latent_down.weight") is not None:
            raise GraphBuildError(f"{f.path}: latent MoE projections are not modelled")
        logits = self.cb(self.mm(router, cur), "ffn_moe_logits", il)
        moe = self.moe_ffn(
            cur,
            il,
            gating="sigmoid",
            norm_w=f.expert_weights_norm,
            act="relu_sqr",
            exp_probs_b=self.lw(il, "exp_probs_b.bias"),
            probs_in=logits,
        )
        moe = self.cb(moe, "ffn_moe_out", il)
        shared = self.ffn(cur, il, "relu_sqr", False, "_shexp", scales=True)
        shared = self.cb(shared, "ffn_shexp", il)
        cur = self.cb(b.add(moe, shared), "ffn_out", il)
        return self.cb(cur, "l_out", il)  # build_cvec: no control vector

    def build_qwen3next(self) -> None:
        """src/models/qwen3next.cpp and qwen35moe.cpp llama_model_<arch>::graph
        (llm_build_delta_net_base, src/models/delta-net-base.cpp): per layer an RMS norm, a gated
        DeltaNet layer (is_recr) or a gated full-attention layer, the residual, the post-attention
        norm, the softmax experts beside the sigmoid-gated shared expert, the residual.
        build_inp_mem_hybrid (the recurrent inputs, then the KV cache's), then inp_pos (4 per
        token for qwen35moe's IMRoPE, llama_hparams::n_pos_per_embd) and out_ids. The output norm
        is h_nextn, an output, and the output rows are picked after it
        (cparams.embeddings_nextn_masked is false)."""
        f, b, c = self.f, self.b, self.c
        q35 = f.architecture == "qwen35moe"
        inpL = self.cb(self.inp_embd(1.0), "model.input_embed" if q35 else "model.embed_tokens", -1)
        rs = _Rs(self, [il for il in range(f.n_layer_all) if f.is_recurrent[il]])
        inp = _Inp(
            self, _Cache(self, [il for il in range(f.n_layer_all) if f.has_kv[il]], c.kv_size)
        )
        inp.rotations(self)
        n_pos = 4 if q35 else 1
        inp_pos = self.cb(b.new("i32", c.n_tokens * n_pos, inp=True), "inp_pos", -1)
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            b.expand(cur)
            if f.is_recurrent[il]:
                cur = self.gdn_layer(rs, cur, il, q35)
            else:
                cur = self.gated_attn(inp, cur, inp_pos, il, q35)
            cur = self.cb(b.add(cur, inpSA), "attn_residual", il)
            ffn_residual = cur
            post = self.lw(il, "post_attention_norm.weight")
            cur = self.cb(self.norm(cur, post, il), "attn_post_norm", il)
            cur = self.cb(self.qwen3next_ffn(cur, il), "ffn_out", il)
            cur = self.cb(b.add(cur, ffn_residual), "post_moe", il)
            inpL = self.cb(cur, "l_out", il)  # build_cvec: no control vector
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        set_output(self.cb(cur, "h_nextn", -1))
        cur = self.cb(b.get_rows(cur, out_ids), "result_norm", -1)
        set_output(cur)
        output = self.w("output.weight", -2)
        if output is None:  # tied: token_embd again, in the output layer's buffer
            output = self.need(
                self.w("token_embd.weight", -2, as_name="token_embd.weight"), "token_embd.weight"
            )
        self.finish(self.mm_s(output, cur, self.w("output.scale", -2)))

    def gated_attn(self, inp: _Inp, cur: T, inp_pos: T, il: int, q35: bool) -> T:
        """build_layer_attn of qwen3next.cpp / qwen35moe.cpp: one projection for the query and
        its gate (build_qkv without reshape), Q and K RMS-normed, (partial) RoPE (ggml_rope_ext;
        qwen35moe: ggml_rope_multi), attention without an output projection, the sigmoid gate,
        then wo."""
        f, b, c = self.f, self.b, self.c
        n_tokens = c.n_tokens
        head, n_head, n_head_kv = f.n_embd_head_v, f.n_head[il], f.n_head_kv[il]
        if self.lw(il, "attn_qkv.weight") is not None:
            raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
        if self.lw(il, "attn_q.bias") is not None:
            raise GraphBuildError(f"{f.path}: attention biases are not modelled here")
        q_full = self.mm_s(
            self.need(self.lw(il, "attn_q.weight"), "attn_q"), cur, self.lw(il, "attn_q.scale")
        )
        k = self.mm_s(
            self.need(self.lw(il, "attn_k.weight"), "attn_k"), cur, self.lw(il, "attn_k.scale")
        )
        v = self.mm_s(
            self.need(self.lw(il, "attn_v.weight"), "attn_v"), cur, self.lw(il, "attn_v.scale")
        )
        self.cb(q_full, "Qcur_full", il)
        self.cb(k, "Kcur", il)
        self.cb(v, "Vcur", il)
        q_norm, k_norm = self.lw(il, "attn_q_norm.weight"), self.lw(il, "attn_k_norm.weight")
        if q35:
            e = TYPES[q_full.type][1]
            nbs3 = (e * head * 2, e * head * 2 * n_head)
            q = self.cb(b.view(q_full, (head, n_head, n_tokens), nbs3, 0), "Qcur_reshaped", il)
            q = self.cb(self.norm(q, q_norm, il), "Qcur_normed", il)
            k = b.reshape(k, head, n_head_kv, n_tokens)
            k = self.cb(self.norm(k, k_norm, il), "Kcur_normed", il)
            gate = b.view(q_full, (head, n_head, n_tokens), nbs3, e * head)
            gate = self.cb(b.cont(gate, head * n_head, n_tokens), "gate_reshaped", il)
            v = b.reshape(v, head, n_head_kv, n_tokens)
        else:
            q_full = b.reshape(q_full, head * 2, n_head, n_tokens, 1)
            nbs = (q_full.nb[1], q_full.nb[2], q_full.nb[3])
            shape = (head, n_head, n_tokens, 1)
            q = self.cb(b.view(q_full, shape, nbs, 0), "Qcur_view", il)
            gate = self.cb(b.view(q_full, shape, nbs, head * q_full.nb[0]), "gate", il)
            k = b.reshape(k, head, n_head_kv, n_tokens)
            v = b.reshape(v, head, n_head_kv, n_tokens)
            q = self.cb(self.norm(q, q_norm, il), "Qcur_normed", il)
            k = self.cb(self.norm(k, k_norm, il), "Kcur_normed", il)
        q = self.cb(b.rope(q, inp_pos, None), "Qcur", il)
        k = self.cb(b.rope(k, inp_pos, None), "Kcur", il)
        self.cb(v, "Vcur", il)
        cur = self.cb(self.attn(inp, None, None, q, k, v, il, False), "attn_pregate", il)
        if not q35:
            gate = b.cont(gate, head * n_head, n_tokens)
        gate = self.cb(b.unary(gate, "SIGMOID"), "gate_sigmoid", il)
        cur = self.cb(b.mul(cur, gate), "attn_gated", il)
        wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
        return self.cb(self.mm_s(wo, cur, self.lw(il, "attn_output.scale")), "attn_output", il)

    def gdn_layer(self, rs: _Rs, cur: T, il: int, q35: bool) -> T:
        """build_layer_attn_linear of qwen3next.cpp / qwen35moe.cpp, cparams.n_rs_seq 0: the
        qkv and z projections (qwen3next's legacy fused ssm_in is not modelled), beta and alpha
        (qwen3next: one ssm_ba projection split in views), the conv state (build_conv_state),
        ssm_conv, the L2 norms of q and k (build_gdn_l2_norm: RMS norm, scale), the heads
        repeated for qwen3next (qwen35moe: not with the fused op), the fused GATED_DELTA_NET (K
        1): llama_context sets cparams.fused_gdn_ar and fused_gdn_ch and auto_fgdn false, so
        build_delta_net_chunking / _autoregressive are never built in b11434; the new state
        copied back, the gated RMS norm and ssm_out."""
        f, b, c = self.f, self.b, self.c
        rec = f.recurrent
        assert rec is not None
        d_conv, d_inner, head_k = rec.d_conv, rec.d_inner, rec.d_state
        n_k, n_v = rec.n_group, rec.dt_rank
        head_v = d_inner // n_v
        n_seqs = c.n_seqs
        n_st = c.n_tokens // n_seqs
        wqkv = self.lw(il, "attn_qkv.weight")
        if wqkv is None:
            raise GraphBuildError(f"{f.path}: the legacy ssm_in projection is not modelled")
        qkv = self.mm_s(wqkv, cur, self.lw(il, "attn_qkv.scale") if q35 else None)
        qkv = self.cb(b.reshape(qkv, qkv.ne[0], n_st, n_seqs), "linear_attn_qkv_mixed", il)
        wz = self.need(self.lw(il, "attn_gate.weight"), "attn_gate")
        z = self.cb(self.mm_s(wz, cur, self.lw(il, "attn_gate.scale") if q35 else None), "z", il)
        ssm_dt = self.need(self.lw(il, "ssm_dt.bias"), "ssm_dt.bias")
        ssm_a = self.need(self.lw(il, "ssm_a"), "ssm_a")
        if q35:
            wb = self.need(self.lw(il, "ssm_beta.weight"), "ssm_beta")
            beta = self.mm_s(wb, cur, self.lw(il, "ssm_beta.scale"))
            beta = self.cb(b.reshape(beta, 1, n_v, n_st, n_seqs), "beta", il)
            beta = self.cb(b.unary(beta, "SIGMOID"), "beta_sigmoid", il)
            wa = self.need(self.lw(il, "ssm_alpha.weight"), "ssm_alpha")
            alpha = self.mm_s(wa, cur, self.lw(il, "ssm_alpha.scale"))
            alpha = self.cb(b.reshape(alpha, n_v, n_st, n_seqs), "alpha", il)
        else:
            wba = self.need(self.lw(il, "ssm_ba.weight"), "ssm_ba")
            ba = self.cb(self.mm(wba, cur), "linear_attn_mixed_ba", il)
            ba = b.reshape(ba, 2 * n_v // n_k, n_k, n_st, n_seqs)
            nbs = (ba.nb[1], ba.nb[2], ba.nb[3])
            shape = (n_v // n_k, n_k, n_st, n_seqs)
            beta = self.cb(b.view(ba, shape, nbs, 0), "b", il)
            a = self.cb(b.view(ba, shape, nbs, (n_v // n_k) * ba.nb[0]), "a", il)
            beta = b.unary(b.cont(beta), "SIGMOID")
            alpha = b.cont(a, n_v, n_st, n_seqs)
        alpha = self.cb(b.unary(b.add(alpha, ssm_dt), "SOFTPLUS"), "a_softplus", il)
        gate = self.cb(b.mul(alpha, ssm_a), "gate", il)
        if not q35:
            beta = b.reshape(beta, 1, n_v, n_st, n_seqs)
        gate = b.reshape(gate, 1, n_v, n_st, n_seqs)
        conv_all, ssm_all = rs.r[il], rs.s[il]
        kernel = self.need(self.lw(il, "ssm_conv1d.weight"), "ssm_conv1d")
        channels = d_inner + 2 * n_k * head_k
        # build_conv_state (delta-net-base.cpp), n_rs_seq 0
        conv = self.cb(self.build_rs(rs, conv_all, rec.n_embd_r), "conv_states", il)
        conv = self.cb(b.reshape(conv, d_conv - 1, channels, n_seqs), "conv_states_reshaped", il)
        qkv_t = self.cb(b.transpose(qkv), "qkv_mixed_transposed", il)
        conv_in = self.cb(b.concat(conv, qkv_t, 0), "conv_input", il)
        last = b.view(
            conv_in,
            (d_conv - 1, channels, n_seqs),
            (conv_in.nb[1], conv_in.nb[2]),
            row_size(conv_in.type, conv_in.ne[0] - conv.ne[0]),
        )
        self.cb(last, "conv_state_last", il)
        row_count = (d_conv - 1) * channels
        update = b.view(conv_all, (row_count, n_seqs), (conv_all.nb[1],), 0)
        b.expand(b.cpy(last, self.cb(update, "conv_state_update", il)))
        state = self.build_rs(rs, ssm_all, rec.n_embd_s)
        state = self.cb(b.reshape(state, head_v, head_v, n_v, n_seqs), "state_predelta", il)
        conv_out = self.cb(b.ssm_conv(conv_in, kernel), "conv_output_raw", il)
        mix = self.cb(b.unary(conv_out, "SILU"), "conv_output_silu", il)
        e = TYPES[mix.type][1]
        nb1 = row_size(mix.type, head_k * n_k * 2 + head_v * n_v)
        qk_shape = (head_k, n_k, n_st, n_seqs)
        qk_nbs = (row_size(mix.type, head_k), nb1, nb1 * n_st)
        q = self.cb(b.view(mix, qk_shape, qk_nbs, 0), "q_conv", il)
        k = self.cb(b.view(mix, qk_shape, qk_nbs, head_k * n_k * e), "k_conv", il)
        v_nbs = (row_size(mix.type, head_v), nb1, nb1 * n_st)
        v_off = row_size(mix.type, 2 * head_k * n_k)
        v = self.cb(b.view(mix, (head_v, n_v, n_st, n_seqs), v_nbs, v_off), "v_conv", il)
        q = b.scale(b.rms_norm(q))  # build_gdn_l2_norm
        k = b.scale(b.rms_norm(k))
        if n_k != n_v and not q35:  # qwen3next repeats whatever the op
            rf = n_v // n_k
            q = b.reshape(q, head_k, 1, n_k, n_st * n_seqs)
            k = b.reshape(k, head_k, 1, n_k, n_st * n_seqs)
            q = b.repeat_4d(q, head_k, rf, n_k, n_st * n_seqs)
            k = b.repeat_4d(k, head_k, rf, n_k, n_st * n_seqs)
            q = b.reshape(q, head_k, n_k * rf, n_st, n_seqs)
            k = b.reshape(k, head_k, n_k * rf, n_st, n_seqs)
        self.cb(q, "q_conv_predelta", il)
        self.cb(k, "k_conv_predelta", il)
        self.cb(v, "v_conv_predelta", il)
        # build_recurrent_attn -> build_delta_net_fused
        s_v, h_v = state.ne[0], state.ne[2]
        res = b.gated_delta_net(q, k, v, gate, beta, state, 1)
        out = b.view(
            res,
            (s_v, h_v, n_st, n_seqs),
            (
                row_size(res.type, s_v),
                row_size(res.type, s_v * h_v),
                row_size(res.type, s_v * h_v * n_st),
            ),
            0,
        )
        new_state = b.view(
            res,
            (s_v, s_v, h_v, n_seqs),
            (
                row_size(res.type, s_v),
                row_size(res.type, s_v * s_v),
                row_size(res.type, s_v * s_v * h_v),
            ),
            row_size(res.type, s_v * h_v * n_st * n_seqs),
        )
        self.cb(out, "attn_output", il)
        self.cb(new_state, "new_state", il)
        dst = b.view(ssm_all, (rec.n_embd_s, n_seqs), (ssm_all.nb[1],), 0)
        b.expand(b.cpy(new_state, dst))
        z = b.reshape(z, head_v, n_v, n_st, n_seqs)
        norm_w = self.need(self.lw(il, "ssm_norm.weight"), "ssm_norm")
        y = b.mul(self.norm(out, norm_w, il), b.unary(z, "SILU"))  # build_norm_gated
        y = self.cb(b.reshape(y, head_v * n_v, n_st, n_seqs), "final_output", il)
        w_out = self.need(self.lw(il, "ssm_out.weight"), "ssm_out")
        cur = self.mm_s(w_out, y, self.lw(il, "ssm_out.scale") if q35 else None)
        cur = self.cb(cur, "linear_attn_out", il)
        return b.reshape(cur, f.n_embd, n_st * n_seqs)

    def qwen3next_ffn(self, cur: T, il: int) -> T:
        """build_layer_ffn of qwen3next.cpp / qwen35moe.cpp: softmax experts (weights
        normalised), the shared expert times the sigmoid of its one-row gate
        (ffn_gate_inp_shexp); qwen3next's dense FFN where a layer has no router."""
        b = self.b
        if self.lw(il, "ffn_gate_inp.weight") is None:
            if self.f.architecture == "qwen35moe":
                raise GraphBuildError(f"{self.f.path}: a qwen35moe layer without experts")
            return self.ffn(cur, il, "silu", False)
        moe = self.cb(self.moe_ffn(cur, il), "ffn_moe_out", il)
        if self.lw(il, "ffn_up_shexp.weight") is None:
            return moe
        shared = self.cb(self.ffn(cur, il, "silu", False, "_shexp", scales=True), "ffn_shexp", il)
        gate_w = self.need(self.lw(il, "ffn_gate_inp_shexp.weight"), "ffn_gate_inp_shexp")
        gate = self.cb(self.mm(gate_w, cur), "shared_expert_gate", il)
        gate = self.cb(b.unary(gate, "SIGMOID"), "shared_expert_gate_sigmoid", il)
        shared = self.cb(b.mul(shared, gate), "ffn_shexp_gated", il)
        return self.cb(b.add(moe, shared), "ffn_out", il)

    def build(self) -> None:
        f, c, b = self.f, self.c, self.b
        arch = f.architecture
        if arch not in SCALES_MODELLED and any(n.endswith(".scale") for n in self.tensors):
            # llama_model::load_tensors loads a "<weight>.scale" for any arch and build_lora_mm
            # multiplies by it: a node per scaled weight that only these builders add
            raise GraphBuildError(f"{f.path}: weight scales are not modelled for {arch}")
        if arch in ("qwen3next", "qwen35moe"):
            return self.build_qwen3next()
        if arch == "nemotron_h_moe":
            return self.build_nemotron_h()
        if arch == "gemma4":
            return self.build_gemma4()
        if arch == "gemma3n":
            return self.build_gemma3n()
        if arch == "deci":
            return self.build_deci()
        if arch == "gpt-oss":
            return self.build_gptoss()
        if arch == "glm4moe":
            return self.build_glm4moe()
        if arch == "deepseek2":
            return self.build_deepseek2()
        if arch == "mamba2":
            return self.build_mamba2()
        if arch in ("granitemoe", "granitehybrid"):
            return self.build_granite()
        gemma = arch == "gemma3"
        iswa = _iswa(f)
        qk_norm = arch in ("qwen3", "qwen3moe", "gemma3")
        inpL = self.inp_embd(math.sqrt(f.n_embd) if gemma else 1.0)
        if gemma:
            self.cb(inpL, "inp_scaled", -1)
        inp_pos = self.inp_pos()
        # build_attn_inp_kv / build_attn_inp_kv_iswa
        layers = [il for il in range(f.n_layer_all) if f.has_kv[il]]
        if iswa:
            base, swa = self.inp_iswa()
        else:
            base = swa = _Inp(self, _Cache(self, layers, c.kv_size))
            base.rotations(self)
        out_ids = self.inp_out_ids()
        for il in range(self.n_layer):
            inpSA = inpL
            cur = self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)
            q, k, v = self.qkv(cur, il)
            factors = None
            if arch == "llama":
                # llama_model::get_rope_factors: rope_freqs, one tensor per buffer type
                factors = self.w("rope_freqs.weight", il)
            if qk_norm:
                q = self.cb(self.norm(q, self.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
                q = b.rope(q, inp_pos, None)
                k = self.cb(self.norm(k, self.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
                k = b.rope(k, inp_pos, None)
            else:
                q = b.rope(q, inp_pos, factors)
                k = b.rope(k, inp_pos, factors)
            self.cb(q, "Qcur", il)
            self.cb(k, "Kcur", il)
            self.cb(v, "Vcur", il)
            if gemma:
                q = b.scale(q)  # f_attention_scale
            inp = swa if f.swa.is_swa[il] else base
            wo = self.need(self.lw(il, "attn_output.weight"), "attn_output")
            wo_b = None if gemma else self.lw(il, "attn_output.bias")
            cur = self.attn(inp, wo, wo_b, q, k, v, il, iswa)
            if arch == "llama":
                self.cb(cur, "attn_out", il)
            if il == self.n_layer - 1:
                cur = b.get_rows(cur, out_ids)
                inpSA = b.get_rows(inpSA, out_ids)
            if gemma:
                cur = self.norm(cur, self.lw(il, "post_attention_norm.weight"), il)
                self.cb(cur, "attn_post_norm", il)
                sa_out = self.cb(b.add(cur, inpSA), "sa_out", il)
                cur = self.cb(self.norm(sa_out, self.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
                cur = self.cb(self.ffn(cur, il, "gelu", False), "ffn_out", il)
                cur = self.norm(cur, self.lw(il, "post_ffw_norm.weight"), -1)
                self.cb(cur, "ffn_post_norm", il)
                cur = b.add(cur, sa_out)
            else:
                ffn_inp = self.cb(b.add(cur, inpSA), "ffn_inp", il)
                cur = self.norm(ffn_inp, self.lw(il, "ffn_norm.weight"), il)
                cur = self.cb(cur, "ffn_norm", il)
                if self.lw(il, "ffn_gate_inp.weight") is not None:
                    cur = self.cb(self.moe_ffn(cur, il), "ffn_moe_out", il)
                else:
                    cur = self.cb(self.ffn(cur, il, "silu", arch == "llama"), "ffn_out", il)
                cur = b.add(cur, ffn_inp)
                if arch == "llama":
                    self.cb(cur, "ffn_out", il)
            inpL = self.cb(cur, "l_out", il)
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        cur = self.cb(cur, "result_norm", -1)
        t_embd = cur
        output = self.w("output.weight", -2)
        if output is None:  # tied: token_embd again, in the output layer's buffer
            output = self.need(
                self.w("token_embd.weight", -2, as_name="token_embd.weight"), "token_embd.weight"
            )
        cur = self.mm(output, cur)
        if arch == "qwen2":
            out_b = self.w("output.bias", -2)
            if out_b is not None:
                cur = b.add(cur, out_b)
        if gemma and self.hp.final_logit_softcapping:
            cur = b.scale(cur)
            cur = b.unary(cur, "TANH")
            cur = b.scale(cur)
        cur = self.cb(cur, "result_output", -1)
        b.expand(cur)
        # llm_graph_result::set_outputs
        set_output(cur)
        set_output(t_embd)
