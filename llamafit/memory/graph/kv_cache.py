"""llama_kv_cache (src/llama-kv-cache.cpp) and llama_memory_recurrent
(src/llama-memory-recurrent.cpp) as a reserve's graph sees them: the cache tensors per layer,
their views (get_k, get_v) and stores (cpy_k, cpy_v), and the recurrent state rows with their
copy indexes.
"""

from __future__ import annotations

from ...builds import since
from ...facts.hparams import ModelFacts
from ...reader.ggml_types import GGML_TYPE_SIZES
from .ggml import Builder, T, nelements, row_size
from .loader import kv_buffer
from .params import GraphBuildError, GraphConfig


def head_k(f: ModelFacts, il: int) -> int:
    """Layer il's K head size (the SWA one on SWA layers)."""
    return f.n_embd_head_k_swa if f.swa.is_swa[il] else f.n_embd_head_k


def head_v(f: ModelFacts, il: int) -> int:
    """Layer il's V head size (the SWA one on SWA layers)."""
    return f.n_embd_head_v_swa if f.swa.is_swa[il] else f.n_embd_head_v


def has_swa(f: ModelFacts) -> bool:
    """The model has SWA layers (swa_type standard): an iSWA arch's graph reads both caches."""
    return f.swa.swa_type != "none" and any(f.swa.is_swa)


def _quantized(type_: str) -> bool:
    """ggml_is_quantized."""
    return GGML_TYPE_SIZES[type_][0] > 1


class KvCache:
    """One llama_kv_cache (the base or the SWA one of llama_kv_cache_iswa) as the graph sees it."""

    def __init__(
        self, f: ModelFacts, c: GraphConfig, layers: list[int], size: int, reuse: bool = False
    ) -> None:
        """`reuse`: the layers from n_layer_kv_from_start on read an earlier layer's cache
        (llama_model::create_memory's reuse callback: gemma3n, gemma4)."""
        self.f = f
        self.size = size
        self.n_stream = c.n_stream
        self.v_trans = not c.flash_attn if c.v_trans is None else c.v_trans
        # [TAG_V_CACHE_VARIABLE]: a transposed V is as wide as the widest layer's
        self.v_width = f.n_embd_v_gqa_max
        self.k: dict[int, T] = {}
        self.v: dict[int, T] = {}
        heads_k = {head_k(f, il) for il in layers}
        heads_v = {head_v(f, il) for il in layers}
        for il in layers:
            buf = kv_buffer(c, il)
            wk = f.n_embd_k_gqa(il)
            wv = f.n_embd_v_gqa(il) if not self.v_trans else self.v_width
            k = Builder.weight(f"cache_k_l{il}", c.type_k, (wk, size, self.n_stream), buf)
            v = Builder.weight(f"cache_v_l{il}", c.type_v, (wv, size, self.n_stream), buf)
            k.rule = v.rule = ("", il)
            self.k[il], self.v[il] = k, v
        if reuse:
            self.reuse(f)
        # llama_kv_cache::llama_kv_cache: Hadamard rotation of a quantized cache
        # (PR #21038, rule attn_rot: none before)
        self.n_rot_k = self.n_rot_v = 0
        if not since("attn_rot", c.build):
            return
        head_k_all = heads_k.pop() if len(heads_k) == 1 else -1
        head_v_all = heads_v.pop() if len(heads_v) == 1 else -1
        if not since("attn_rot_per_cache", c.build):
            # before: off wherever the model's K (V) rows differ between layers
            # (llama_hparams::is_n_embd_k_gqa_variable over every layer)
            every = range(f.n_layer_all)
            if len({f.n_embd_k_gqa(il) for il in every}) != 1:
                head_k_all = -1
            if len({f.n_embd_v_gqa(il) for il in every}) != 1:
                head_v_all = -1
        if head_k_all > 0 and _quantized(c.type_k) and f.n_embd_head_k % 64 == 0:
            n = 64
            while head_k_all % (2 * n) == 0:
                n *= 2
            self.n_rot_k = n
        if head_v_all > 0 and _quantized(c.type_v) and f.n_embd_head_v % 64 == 0:
            self.n_rot_v = 64

    def reuse(self, f: ModelFacts) -> None:
        """The layers without a cache of their own read an earlier layer's
        (llama_model::create_memory's reuse callback for gemma3n / gemma4: from
        n_layer_kv_from_start on, the last SWA layer before it or the last full one; each
        llama_kv_cache maps the layers of its kind, map_layer_ids)."""
        if not self.k:
            return
        start = f.n_layer_kv_from_start
        mine = next(iter(self.k))
        for il in range(start, f.n_layer):
            if f.swa.is_swa[il] != f.swa.is_swa[mine]:
                continue
            src = start - (2 if f.swa.is_swa[il] else 1)
            if src not in self.k:
                raise GraphBuildError(f"{f.path}: layer {il} reuses layer {src}'s cache: none")
            self.k[il], self.v[il] = self.k[src], self.v[src]

    def cpy_k(self, b: Builder, k_cur: T, idxs: T, il: int) -> T:
        """llama_kv_cache::cpy_k."""
        k = self.k[il]
        n_embd_gqa = k_cur.ne[0] * k_cur.ne[1]
        k_cur = b.view(k_cur, (n_embd_gqa, k_cur.ne[2]), (k_cur.nb[2],), 0)
        if self.n_stream > 1:
            k = b.reshape(k, n_embd_gqa, self.size * self.n_stream)
        return b.set_rows(k, k_cur, idxs)

    def cpy_v(self, b: Builder, v_cur: T, idxs: T, il: int) -> T:
        """llama_kv_cache::cpy_v: rows, or single elements into the transposed cache."""
        v = self.v[il]
        n_embd_gqa = v_cur.ne[0] * v_cur.ne[1]
        n_tokens = v_cur.ne[2]
        if not self.v_trans:
            v_cur = b.view(v_cur, (n_embd_gqa, n_tokens), (v_cur.nb[2],), 0)
            if self.n_stream > 1:
                v = b.reshape(v, n_embd_gqa, self.size * self.n_stream)
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

    def get_k(self, b: Builder, il: int) -> T:
        """llama_kv_cache::get_k over every stream (the reserve's slot info spans them all)."""
        k = self.k[il]
        head, n_head_kv = head_k(self.f, il), self.f.n_head_kv[il]
        wk = k.ne[0]
        return b.view(
            k,
            (head, n_head_kv, self.size, self.n_stream),
            (row_size(k.type, head), row_size(k.type, wk), row_size(k.type, wk * self.size)),
            0,
        )

    def get_v(self, b: Builder, il: int) -> T:
        """llama_kv_cache::get_v."""
        v = self.v[il]
        head, n_head_kv = head_v(self.f, il), self.f.n_head_kv[il]
        wv, size, ty = v.ne[0], self.size, v.type
        if not self.v_trans:
            return b.view(
                v,
                (head, n_head_kv, size, self.n_stream),
                (row_size(ty, head), row_size(ty, wv), row_size(ty, wv * size)),
                0,
            )
        return b.view(
            v,
            (size, n_head_kv, head, self.n_stream),
            (row_size(ty, size * head), row_size(ty, size), row_size(ty, size * wv)),
            0,
        )


class RecurrentState:
    """llm_graph_input_rs over llama_memory_recurrent as a reserve sees it
    (llama_memory_recurrent_context over the whole memory: n_rs = size, head 0, rs_z 0): the
    per-layer state rows (cache_r_l*, cache_s_l*: mem_size = max(1, n_seq_max) rows, n_rs_seq 0;
    before rule rs_state_2d 1D tensors)
    and the copy indexes (build_rs_inp_impl: s_copy_main and s_copy_tail, before rule
    rs_gather_once s_copy_extra in copy_tail's place)."""

    def __init__(self, f: ModelFacts, c: GraphConfig, b: Builder, layers: list[int]) -> None:
        if f.recurrent is None:
            raise GraphBuildError(f"{f.path}: no recurrent state sizes (ssm.*) in the model")
        self.size = max(1, c.n_seq_max)
        self.r: dict[int, T] = {}
        self.s: dict[int, T] = {}
        rows = since("rs_state_2d", c.build)
        n_r, n_s = f.recurrent.n_embd_r, f.recurrent.n_embd_s
        # before rule rs_state_2d one 1D tensor of n_embd_r x mem_size elements a state
        ne_r = (n_r, self.size) if rows else (n_r * self.size,)
        ne_s = (n_s, self.size) if rows else (n_s * self.size,)
        for il in layers:
            buf = kv_buffer(c, il)
            r = Builder.weight(f"cache_r_l{il}", "f32", ne_r, buf)
            s = Builder.weight(f"cache_s_l{il}", "f32", ne_s, buf)
            r.rule = s.rule = ("", il)
            self.r[il], self.s[il] = r, s
        n_rs = self.size
        self.copy = b.new("i32", n_rs, name="rs_s_copy", inp=True)
        self.copy_main = b.view(self.copy, (c.n_seqs,), (), 0)
        if since("rs_gather_once", c.build):
            self.copy_tail = b.view(self.copy, (n_rs - 1,), (), self.copy.nb[0])
        else:  # s_copy_extra: the states after the ubatch's, gathered on their own
            nb0 = self.copy.nb[0]
            self.copy_tail = b.view(self.copy, (n_rs - c.n_seqs,), (), c.n_seqs * nb0)
