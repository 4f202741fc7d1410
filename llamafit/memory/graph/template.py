"""The graph llama.cpp builds for one reserve, `build_graph(facts, config)`, and its template cache.

Mirrors llama.cpp b11434: llama_model::build_graph (src/llama-model.cpp) runs the arch's graph
(models.MODELS: src/models/<arch>.cpp over build.GraphContext, the llm_graph_context helpers),
then llm_graph_result::set_outputs. The first call for a model and a config (cache sizes,
buffers and the norms' pins of full offload aside) builds it once; later calls at the same cache
sizes take its graph with their buffers and pins (~1-2 ms). Every shape is linear in the two
cache sizes (_Template): with one cache size (no iSWA pair) the second and third calls at other
sizes build directly, the two first builds give the template and the third checks it; with two,
the second call builds it three or four times to derive it. Later calls reuse it.

API: build_graph(facts, GraphConfig, GraphHParams) -> nodes.Graph; build_direct (one emulation
run, no template); clear_cache. Not modelled (GraphBuildError or not built): separate Q/K/V biases
beside a fused attn_qkv, merged gate_up experts (gemma4's and deepseek2's / mistral4's only) and
weight scales (".scale": gemma4's, nemotron_h_moe's, qwen3next's, qwen35moe's, and gemma3n's
attention and output ones only), M-RoPE outside qwen2vl, qwen3vl(moe), qwen35(moe) and
hunyuan_vl (ggml_rope_multi is a ROPE node as ggml_rope_ext's, over four positions a token;
glm4's declines), LongRoPE factors outside phi3,
phimoe, minicpm and apertus (GraphInputs.rope_factors), clamp_kqv (mpt, olmo), LoRA, control
vectors, a decoder's pooled graph (build_pooling over its result_norm; the encoders' is:
build.GraphContext.pooling), qwen3's reranker soft max, ModernBERT's decision head, backend
samplers, MTP/NextN graphs, recurrent
rollback (n_rs_seq), deepseek2 without MLA, nemotron_h_moe's latent MoE projections and per-layer
expert counts (Puzzle), nemotron_h's MLP biases, qwen3next's legacy ssm_in projection, gemma3n's
embeddings-only (multimodal) per-layer path, Granite Vision's deepstack inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...facts.hparams import ModelFacts
from .build import GraphContext
from .ggml import forget_frozen, nbytes_known
from .loader import kv_buffer, rope_factor_layers, rope_factors_name, tensor_map, weight_buffer
from .models import model_of, uses_iswa
from .nodes import TENSOR_FIELDS, Graph, Tensor, make_tensor, with_field
from .params import GraphBuildError, GraphConfig, GraphHParams
from .periodic import Shortened, first_named


def build_graph(facts: ModelFacts, config: GraphConfig, hp: GraphHParams | None = None) -> Graph:
    """The graph llama_model::build_graph (src/llama-model.cpp) hands the scheduler for this
    ubatch: nodes and leafs in ggml_visit_parents_graph order, with names, ops, types, shapes,
    views, input/output flags, and the weights and KV cache as tensors with data in their buffers.

    The first call for a model and a config (cache sizes and buffers aside) builds it directly;
    a later one at cache sizes built already takes that graph with its buffers (with the same
    tensors shared). Other cache sizes: a model of one cache size builds the second and third
    directly, the template (_Template) through the first two checked on the third, and reuses it
    from the fourth; a model of an iSWA pair makes the template on the second call (three or four
    builds). A plan asks two or three sizes of a config: the template would cost more there than
    it saves."""
    hp = hp or GraphHParams()
    key = _key(facts, config, hp)
    hit = _TEMPLATES.get(key)
    if hit is None or hit[0] is not facts:
        # the first call builds directly (one run, not the template's three or four): a check
        # replays each graph once
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        graph, rules, pins = _run(facts, config, hp)
        _TEMPLATES[key] = (facts, _Shape([_First(config, graph, rules, pins)]))
        return graph
    made = hit[1]
    if isinstance(made, _Template):
        return made.at(config)
    if made is None:
        return build_direct(facts, config, hp)
    if made.counted is not None:  # count_graph's build: converted now
        counted, ctx = made.counted
        graph, rules, pins = _converted(ctx)
        made.firsts.append(_First(counted, graph, rules, pins))
        made.counted = None
    return _again(facts, config, hp, key, made)


def count_graph(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> int:
    """len(build_graph(...).tensors): a graph of a shape not built yet is built and counted
    (count_direct) and kept unconverted for build_graph, which converts it when it is asked for
    that shape (the replay of the config counted: scheduler_overflow counts before it); where
    the replay does not follow, the conversion is not paid."""
    key = _key(facts, config, hp)
    hit = _TEMPLATES.get(key)
    if hit is None or hit[0] is not facts:
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        ctx = _built(facts, config, hp)
        _TEMPLATES[key] = (facts, _Shape([], counted=(config, ctx)))
        return ctx.b.n_tensors()
    return len(build_graph(facts, config, hp).tensors)


def _key(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> tuple[object, ...]:
    """The template cache's key: the model, the config but for cache sizes and buffers, how
    the buffers share tensors."""
    model_of(facts)
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
        # GraphContext.pin (a ubatch under 32 tokens or full offload pins the norms) changes
        # only the pins, which _Template.at applies per config
        full_offload=False,
    )
    # LongRoPE: the factors a block reads change with the cache size (rope_factors_name), a
    # tensor of its own: graphs that read other ones do not share a template
    factors = rope_factors_name(facts, config.kv_size)
    return (id(facts), shape, hp, _sharing(facts, config), factors)


def _again(
    facts: ModelFacts, config: GraphConfig, hp: GraphHParams, key: tuple[object, ...], made: _Shape
) -> Graph:
    """build_graph for a shape built directly before (made), without a template yet."""
    sizes = (config.kv_size, config.kv_size_swa)
    for first in made.firsts:  # these cache sizes were built: only the buffers differ
        if (first.config.kv_size, first.config.kv_size_swa) == sizes:
            return _Template(first.graph, first.config, first.rules, [], first.pins).at(config)
    if uses_iswa(facts):  # two cache sizes: the template from the first call's graph
        first = made.firsts[0]
        template = _Template.make(facts, first.config, hp, (first.graph, first.rules, first.pins))
        _TEMPLATES[key] = (facts, template)
        return build_direct(facts, config, hp) if template is None else template.at(config)
    # one cache size: this call's direct build is the template's second point, a third call's
    # the check (_Shape)
    graph, rules, pins = _run(facts, config, hp)
    if made.candidate is None:
        first = made.firsts[0]
        made.candidate = _Template.line(first, config, graph)
        if made.candidate is None:
            _TEMPLATES[key] = (facts, None)
            return graph
    elif made.candidate.matches(config, graph):
        _TEMPLATES[key] = (facts, made.candidate)
        return graph
    else:
        _TEMPLATES[key] = (facts, None)
        return graph
    made.firsts.append(_First(config, graph, rules, pins))
    return graph


def build_direct(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> Graph:
    """build_graph without the template: the ggml emulation run for this config."""
    return _run(facts, config, hp)[0]


_Rule = tuple[str, int]  # (model tensor name, layer it was made for) or ("", il) for the cache
# the fields _Template.at sets per config (nodes.with_field)
_BUFFER = TENSOR_FIELDS.index("buffer")
_PIN_LAYER = TENSOR_FIELDS.index("pin_layer")
_Pins = list[tuple[int, int]]  # (tensor index, layer) of the norms GraphContext.pin pins
_Run = tuple[Graph, list[tuple[int, _Rule]], _Pins]


def _built(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> GraphContext:
    """The builder's context once the model's graph is built (its tensors, not yet converted)."""
    model = model_of(facts)
    ctx = GraphContext(facts, config, hp)
    if not model.scales and any(n.endswith(".scale") for n in ctx.tensors):
        # llama_model::load_tensors loads a "<weight>.scale" for any arch and build_lora_mm
        # multiplies by it: a node per scaled weight that only some builders add
        raise GraphBuildError(
            f"{facts.path}: weight scales are not modelled for {facts.architecture}"
        )
    model.build(ctx)
    ctx.pooling()  # llama_model::build_graph: build_pooling, build_dense_out after the arch's
    return ctx


def _run(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> _Run:
    """The graph, for each tensor with data its index and buffer rule, and the pinnable norms."""
    return _converted(_built(facts, config, hp))


def _converted(ctx: GraphContext) -> _Run:
    """The built graph as nodes.Graph, for each tensor with data its index and buffer rule, and
    the norms GraphContext.pin pins (each once: the index and layer of a tensor whose pin is
    the layer's where the graph pins and none where it does not)."""
    graph = ctx.b.graph()
    pin = -1 if not ctx.pin else None
    pins: dict[int, int] = {}
    for t, il in ctx.pinnable:
        if t.idx >= 0 and t.pin_layer == (il if pin is None else pin):
            pins[t.idx] = il
    rules = [(t.idx, t.rule) for t in ctx.b.tensors if t.rule is not None]
    return graph, rules, sorted(pins.items())


def count_direct(facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> int:
    """len(build_direct(...).tensors) without converting the tensors (ggml.Builder.n_tensors): what
    the scheduler's hash set is sized by needs the count only."""
    return _built(facts, config, hp).b.n_tensors()


def count_short(
    facts: ModelFacts, config: GraphConfig, hp: GraphHParams, short: Shortened
) -> int | None:
    """count_direct of the full graph from its short one (periodic.Shortened): the short graph's
    tensors and, per cut, the units it leaves out times the tensors of unit L (those ggml visits
    from L's first node named for it to R's, with the view sources first seen there). None where
    unit L and unit R do not count alike."""
    ctx = _built(facts, replace(config, layers=short.layers), hp)
    tensors = ctx.b.tensors
    views: list[int] = []  # where each view source ggml never visits is first seen
    unvisited: set[int] = set()
    for k, t in enumerate(tensors):
        v = t.view_src
        if v is not None and v.idx < 0 and id(v) not in unvisited:
            unvisited.add(id(v))
            views.append(k)
    # per block: where its first tensor named for it was visited
    need = {il for c in short.cuts for il in (c.before, c.after, c.after + c.period)}
    first = first_named([t.name for t in tensors], need)

    def unit(start: int, end: int) -> int:
        return end - start + sum(1 for k in views if start <= k < end)

    n = len(tensors) + len(views)
    for c in short.cuts:
        ils = (c.before, c.after, c.after + c.period)
        if any(il not in first for il in ils):
            return None
        a, r, r1 = (first[il] for il in ils)
        if not a < r < r1:
            return None
        per_unit = unit(a, r)
        if unit(r, r1) != per_unit:
            return None
        n += c.skipped // c.period * per_unit
    return n


# one tensor's shapes as functions of the cache sizes: its index, its ne, nb and view offset
# (nine values) at kv_size 0 and kv_size_swa 0, and each value that changes as (its position, b,
# c): that value plus b * kv_size + c * kv_size_swa
_Varying = tuple[int, tuple[int, ...], tuple[tuple[int, int, int], ...]]


class _Template:
    """The graph of one model and config as a function of the two cache sizes and the buffers.

    Only shapes change with the cache sizes: every ne, nb and view offset of the graph llama.cpp
    builds is a + b * kv_size + c * kv_size_swa (views, reshapes and row sizes of the caches, the
    masks, KQ). `make` derives a, b, c from two or three builds and checks them on one more; a
    model or config where they do not hold (or where the structure changes) gets no template.
    Buffers change only the `buffer` of the tensors with data, each by its rule (weight_buffer,
    kv_buffer), as long as the same uses share one tensor (_sharing, part of the key); full
    offload only the pins of the norms GraphContext.pin pins (`pins`, _pins)."""

    STEP = 256  # llama_kv_cache sizes are multiples of 256 (n_pad)

    def __init__(
        self,
        graph: Graph,
        config: GraphConfig,
        rules: list[tuple[int, _Rule]],
        varying: list[_Varying],
        pins: _Pins,
    ) -> None:
        self.graph = graph
        self.config = config
        self.rules = rules
        self.varying = varying
        self.pins = pins

    @classmethod
    def make(
        cls,
        facts: ModelFacts,
        config: GraphConfig,
        hp: GraphHParams,
        built: _Run | None = None,
    ) -> _Template | None:
        """`built`: this config's graph and rules where they were built already (_run)."""
        kv, swa, step = config.kv_size, config.kv_size_swa, cls.STEP
        g0, rules, pins = built or _run(facts, config, hp)
        g1 = build_direct(facts, replace(config, kv_size=kv + step), hp)
        if uses_iswa(facts):  # an iSWA cache pair
            g2 = build_direct(facts, replace(config, kv_size_swa=swa + step), hp)
        else:  # kv_size_swa is not read
            g2 = g0
        if not (g0.nodes == g1.nodes == g2.nodes and g0.leafs == g1.leafs == g2.leafs):
            return None
        varying: list[_Varying] = []
        for i, (t0, t1, t2) in enumerate(zip(g0.tensors, g1.tensors, g2.tensors, strict=True)):
            if t0 is t1 and t1 is t2:  # interned by Builder.graph: the same tensor
                continue
            lin = _linear(t0, t1, t2, kv, swa, step)
            if lin is None:
                return None
            if lin[1]:  # else the same shapes at every size: at() takes t0 as it is
                varying.append((i, *lin))
        template = cls(g0, config, rules, varying, pins)
        check = replace(config, kv_size=kv + 2 * step, kv_size_swa=swa + 3 * step)
        got = template.at(check).tensors
        want = build_direct(facts, check, hp).tensors
        if len(got) != len(want):
            return None
        if not all(a is b or a == b for a, b in zip(got, want, strict=True)):
            return None
        return template

    @classmethod
    def line(cls, first: _First, config: GraphConfig, g1: Graph) -> _Template | None:
        """The template through the first build and a second one at another kv_size (the same
        kv_size_swa, which this model does not read), unchecked (matches); None where the
        structure differs or a shape is not a whole multiple of the step between them."""
        g0, kv = first.graph, first.config.kv_size
        step = config.kv_size - kv
        if step == 0:  # the same kv_size, another kv_size_swa (an encoder's 0 and 0): no line
            return None
        same = g0.nodes == g1.nodes and g0.leafs == g1.leafs
        if not same or len(g0.tensors) != len(g1.tensors):
            return None
        varying: list[_Varying] = []
        for i, (t0, t1) in enumerate(zip(g0.tensors, g1.tensors, strict=True)):
            if t0 is t1:  # interned by Builder.graph: the same tensor
                continue
            lin = _linear(t0, t1, t0, kv, first.config.kv_size_swa, step)
            if lin is None:
                return None
            if lin[1]:  # else the same shapes at every size: at() takes t0 as it is
                varying.append((i, *lin))
        return cls(g0, first.config, first.rules, varying, first.pins)

    def matches(self, config: GraphConfig, graph: Graph) -> bool:
        """Whether the template gives this direct build's graph at its config."""
        got = self.at(config)
        return (
            got.nodes == graph.nodes
            and got.leafs == graph.leafs
            and len(got.tensors) == len(graph.tensors)
            and all(a is b or a == b for a, b in zip(got.tensors, graph.tensors, strict=True))
        )

    def at(self, config: GraphConfig) -> Graph:
        """The graph for this config (the template's but for cache sizes and buffers)."""
        g, base = self.graph, self.config
        kv, swa = config.kv_size, config.kv_size_swa
        if config == base:
            return g
        tensors = list(g.tensors)
        if kv != base.kv_size or swa != base.kv_size_swa:
            for i, at0, changes in self.varying:
                t = tensors[i]
                v = list(at0)
                for k, b, c in changes:
                    v[k] += b * kv + c * swa
                ne = (v[0], v[1], v[2], v[3])
                nb = (v[4], v[5], v[6], v[7])
                # nodes.Tensor's fields in order (tuple.__new__: no keyword or default handling)
                tensors[i] = make_tensor(
                    Tensor,
                    (
                        t.name,
                        t.op,
                        t.type,
                        ne,
                        nb,
                        nbytes_known(t.type, ne, nb),
                        t.flags,
                        t.src,
                        t.view_src,
                        v[8],
                        t.data,
                        t.buffer,
                        t.desc,
                        t.pin_layer,
                        t.usage,
                        t.backend,
                    ),
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
                    tensors[i] = with_field(t, _BUFFER, buf)
        if _pins(config) != _pins(base):
            pin = -1 if not _pins(config) else None
            for i, il in self.pins:
                t = tensors[i]
                tensors[i] = with_field(t, _PIN_LAYER, il if pin is None else pin)
        return Graph(tensors=tuple(tensors), leafs=g.leafs, nodes=g.nodes)


def _pins(config: GraphConfig) -> bool:
    """Whether GraphContext.pin pins the norms for this config: a ubatch under 32 tokens or every
    layer offloaded (llama_context::graph_get_cb)."""
    return config.n_tokens < 32 or config.full_offload


def _linear(
    t0: Tensor, t1: Tensor, t2: Tensor, kv: int, swa: int, step: int
) -> tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]] | None:
    """ne, nb and view offset of one tensor as a + b * kv_size + c * kv_size_swa, from the
    tensor at (kv, swa), (kv + step, swa) and (kv, swa + step): the nine values at kv_size 0 and
    kv_size_swa 0, and (position, b, c) of each that changes (none: the same shapes at every
    size); None where it is not one tensor of the same structure or a shape is not linear in
    steps."""
    same = (t0.name, t0.op, t0.src, t0.view_src, t0.type)
    if same != (t1.name, t1.op, t1.src, t1.view_src, t1.type):
        return None
    if same != (t2.name, t2.op, t2.src, t2.view_src, t2.type):
        return None
    xs0 = (*t0.ne, *t0.nb, t0.view_offs)
    xs1 = (*t1.ne, *t1.nb, t1.view_offs)
    xs2 = (*t2.ne, *t2.nb, t2.view_offs)
    if xs0 == xs1 == xs2:
        return xs0, ()
    at0 = list(xs0)
    changes = []
    for k, (x0, x1, x2) in enumerate(zip(xs0, xs1, xs2, strict=True)):
        if x0 == x1 == x2:
            continue
        b, rb = divmod(x1 - x0, step)
        c, rc = divmod(x2 - x0, step)
        if rb or rc:
            return None
        at0[k] = x0 - b * kv - c * swa
        changes.append((k, b, c))
    return tuple(at0), tuple(changes)


@dataclass(frozen=True, slots=True)
class _First:
    """A shape built once, directly (no template yet): its config, graph and buffer rules."""

    config: GraphConfig
    graph: Graph
    rules: list[tuple[int, _Rule]]
    pins: _Pins


@dataclass(slots=True)
class _Shape:
    """A shape built directly so far: its builds (one per pair of cache sizes, the first first;
    count_graph's, counted, until build_graph converts it),
    and for a model of one cache size the template the first two give (_Template.line), which a
    third build checks before it is used."""

    firsts: list[_First]
    candidate: _Template | None = None
    # count_graph's build, not yet converted: its config and the builder's context
    counted: tuple[GraphConfig, GraphContext] | None = None


_TEMPLATES: dict[tuple[object, ...], tuple[ModelFacts, _Template | _Shape | None]] = {}


def clear_cache() -> None:
    """Forget the templates (and the converted tensors) of earlier calls."""
    _TEMPLATES.clear()
    forget_frozen()


def _sharing(facts: ModelFacts, config: GraphConfig) -> tuple[object, ...]:
    """Which uses of one model tensor are one ggml tensor (TENSOR_DUPLICATED in the same buffer
    type): the tied output with token_embd, rope_freqs across layers (gemma4: its full-attention
    layers). Graphs whose buffers differ but share alike have the same structure. Gemma 4 and
    Gemma 3n make their tied output before token_embd (gemma4.cpp, gemma3n.cpp
    load_arch_tensors), so token_embd is always a
    tensor of its own (llama_model_loader::create_tensor checks for a duplicate only when making
    the TENSOR_DUPLICATED one). LongRoPE's factors share as rope_freqs does."""
    tensors = tensor_map(facts)
    overrides = dict(config.overrides)
    tied = (
        not model_of(facts).tied_own
        and "output.weight" not in tensors
        and weight_buffer(config, overrides, "token_embd.weight", -1)
        == weight_buffer(config, overrides, "token_embd.weight", -2)
    )
    rope: tuple[int, ...] = ()
    factors = rope_factors_name(facts, config.kv_size)  # (GraphContext.rope_factors reads it)
    if factors is not None:
        seen: dict[str, int] = {}
        rope = tuple(
            seen.setdefault(weight_buffer(config, overrides, factors, il), len(seen))
            for il in rope_factor_layers(facts)
        )
    return (tied, rope)
