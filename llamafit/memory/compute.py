"""Compute buffers: the bytes llama.cpp's graph allocator reserves per backend.

llama_context::sched_reserve (src/llama-context.cpp) builds the worst-case graph for
n_tokens = min(n_ctx, n_ubatch) tokens over the whole KV cache (n_kv = cache size) and lets
ggml_gallocr (ggml/src/ggml-alloc.c) place it: graph inputs first (alive until their last
reader), then every node in graph order, best-fit into freed holes, in place for SOFT_MAX, ADD,
MUL, RMS_NORM, ... (never through a view: ROPE of a reshaped Q allocates a new tensor). A backend's
buffer is that allocation's high-water mark, the largest over the pp/tg/pp reserves.

Model: compute = inputs + max over the device's layers of the candidate peaks, or the output
peak if larger. Inputs: token ids, the never-read inp_embd (n_embd x T F32), positions, output
ids, per cache the K/V row indices and the KQ mask (n_kv x T, F16 with FA, F32 without).
Candidates, each the tensors alive at one node plus the holes the best-fit allocator leaves below
them (E = n_embd, Q = n_head * head_k rows of T F32 values):
  attention  2E + 2Q, + KQ (n_kv x T x n_head F32) without FA; CUDA FA + F16 copies of K/V
  dense FFN  hole + E + 3 n_ff           MoE  hole + E + 3 n_ff_exp n_used (+ n_used E down)
  SSM        (2.75 E + in_proj + 2 conv + d_inner) T + states       output  2E + n_vocab n_out
The tensor lists were read off llama.cpp's reserve graphs (GGML_SCHED_DEBUG=2) and replayed through
a copy of ggml-alloc.c's allocator (not shipped) at real model sizes; the hole rules and the SSM
slack are fitted to the measured table fixtures/calibration/llama-cpp-0c1e570-cpu.json
(tests/memory/test_compute.py). Known limits: the logits can land a few E rows higher when the last FFN
fits a low hole (Mistral-Nemo shapes with n_outputs = n_ubatch: about -13 %); with 1 < n_outputs <
n_tokens (speculative decoding) the logits land above the last FFN's base (_logits_on_top); SSM layers +-5 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..facts.hparams import ModelFacts
from ..facts.tensor_names import block_index
from ..frozen import replace
from ..units import pad as _pad
from .kv import layer_cell_bytes
from .placement import CPU
from .resolve import since

if TYPE_CHECKING:
    from ..machine.devices import DeviceSpec
    from .placement import LayerMap
    from .resolve import ResolvedConfig

Backend = Literal["cpu", "cuda", "metal", "vulkan", "rocm"]
F32 = 4
# ggml_backend_buft_get_alignment per backend. llama.cpp: ggml/src/ggml-impl.h TENSOR_ALIGNMENT (CPU, 32);
# ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alignment (CUDA and HIP, 128);
# ggml/src/ggml-metal/ggml-metal.cpp ggml_backend_metal_buffer_type_shared_get_alignment (32);
# ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_backend_vk_buffer_type_get_alignment: the device's
# minStorageBufferOffsetAlignment, at most 256 by the Vulkan spec; 128 is a common value (a device parameter).
ALIGNMENT = {"cpu": 32, "cuda": 128, "rocm": 128, "metal": 32, "vulkan": 128}
# Relative-position-bias attention (a KQ bias): build_attn_mha in src/llama-graph.cpp runs it without flash
# attention whatever cparams.flash_attn says (use_flash_attn = flash_attn && kq_b == nullptr), so the KQ
# product is in the compute buffer even with -fa on.
KQ_BIAS_ARCHS = frozenset({"t5", "t5encoder"})
# Allocator holes around the SSM scan that shift with tiny state-size changes, in n_embd rows,
# fitted to the mamba2 / granite-hybrid rows of the calibration table (they spread about +-1 row).
SSM_SLACK = 0.75


@dataclass(frozen=True, slots=True)
class ComputeSettings:
    """The resolved context settings that shape the reserve graph of one backend."""

    n_ctx_seq: int  # cells per stream of the full-attention cache (n_kv of the reserve graph)
    n_ubatch: int
    n_outputs: int  # n_outputs_max: logits rows the graph reserves (min'd with n_ubatch)
    flash_attn: bool
    n_swa_seq: int = 0  # cells per stream of the SWA cache; 0 = no SWA cache
    n_stream: int = 1  # KV streams: 1 when unified, else n_seq_max
    n_seq_max: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    backend: Backend = "cpu"
    holds_output: bool = True  # this device runs the output layer (logits)
    layers: tuple[int, ...] | None = None  # layer indices on this device; None = all
    kv_on_device: bool = True  # offload_kqv: attention (and its mask copy) runs here
    kq_on_device: bool = (
        True  # without FA: the device takes the KQ product (not over its tensor limit)
    )
    fa_f16_in_buffer: bool = (
        True  # CUDA FA's F16 K/V copies live in the compute buffer (PR #23907 on)
    )
    kv_idxs: bool = True  # K/V row-index inputs of the set_rows KV writes (PR #14959 on)
    inp_embd_input: bool = True  # the embeddings input exists beside the token ids (PR #18898 on)
    qkv_views: bool = (
        True  # fused QKV split by views (PR #15662 on); before, contiguous Q/K/V copies
    )
    mask_f16_input: bool = (
        True  # with FA the KQ mask input is F16 (PR #23764 on); before, F32 + an F16 cast
    )
    mixed_input: bool = (
        True  # the mixed token/embedding input branch (PR #29622 on, most architectures)
    )
    attn_rot: bool = True  # Hadamard rotation inputs for a quantized K/V cache (PR #21038 on)
    glu_op: bool = True  # a fused-up gate is one ggml_swiglu (PR #14158 on); before, two conts
    holds_input: bool = True  # this backend runs block 0 (the mixed branch's DUP lands here)
    pooling: str = (
        "none"  # the pooling layer build_pooling adds with embeddings on (none: no layer)
    )
    pooling_per_seq: bool = (
        True  # pooling inputs sized by n_seqs (PR #14217 on); before, by n_tokens
    )

    @property
    def n_tokens(self) -> int:
        """llama_context::sched_reserve: n_tokens = min(n_ctx, n_ubatch)."""
        return min(self.n_ctx_seq * self.n_stream, self.n_ubatch)

    @property
    def n_out(self) -> int:
        return min(self.n_tokens, self.n_outputs)


@dataclass(frozen=True, slots=True)
class ComputeEstimate:
    """Predicted compute buffers: `device` for the backend asked about, `host` for the CPU-side
    buffer it implies (CUDA_Host etc.; 0 when the backend is the CPU itself)."""

    device: int
    host: int
    peak: str  # the candidate that set the device peak
    host_inputs: int = 0  # the part of `host` that is graph inputs (kept once per pipeline copy)


@dataclass(frozen=True, slots=True)
class _Shape:
    """Per-model facts the formulas need on every call, computed once per ModelFacts object."""

    reps: tuple[
        int, ...
    ]  # for each layer, the first layer of identical shape (same candidate peaks)
    gated: frozenset[
        int
    ]  # layers whose dense FFN has a gate (build_ffn: GLU); else up + in-place activation
    fused_qkv: dict[int, bool]  # layers with one attn_qkv matrix -> True when the model has no RoPE
    caches: tuple[bool, bool]  # a full-attention cache and an SWA cache with layers (iSWA)
    v_gqa_max: int
    range_reps: dict[tuple[int, int], frozenset[int]]  # memo: block range -> its distinct shapes
    rot: dict[tuple[str, str], dict[str, int]]  # memo: (type_k, type_v) -> _rot_inputs
    predicted: dict[ComputeSettings, ComputeEstimate]  # memo: settings -> predict_compute
    layers_on: dict[tuple[tuple[int, ...], int], tuple[int, ...]]  # memo: _layers_on
    fused_up: frozenset[int] = frozenset()  # gated layers whose gate is fused into ffn_up

    def reps_in(self, a: int, b: int) -> frozenset[int]:
        key = (a, b)
        if key not in self.range_reps:
            self.range_reps[key] = frozenset(self.reps[a:b])
        return self.range_reps[key]


_SHAPES: dict[int, tuple[ModelFacts, _Shape]] = {}


def _shape(f: ModelFacts) -> _Shape:
    hit = _SHAPES.get(id(f))
    if hit is not None and hit[0] is f:
        return hit[1]
    first: dict[tuple[object, ...], int] = {}
    gated, fused_up = _gated_layers(f)
    reps = tuple(
        first.setdefault((*_signature(f, il), il in gated), il) for il in range(f.n_layer_all)
    )
    kv = [il for il in range(f.n_layer) if f.has_kv[il]]
    caches = (any(not f.swa.is_swa[il] for il in kv), any(f.swa.is_swa[il] for il in kv))
    shape = _Shape(
        reps, gated, _fused_qkv_layers(f), caches, f.n_embd_v_gqa_max, {}, {}, {}, {}, fused_up
    )
    if len(_SHAPES) > 32:
        _SHAPES.clear()
    _SHAPES[id(f)] = (f, shape)  # keeps f alive, so its id cannot be reused while cached
    return shape


def _gated_layers(f: ModelFacts) -> tuple[frozenset[int], frozenset[int]]:
    """Blocks with an ffn_gate tensor (build_ffn in src/llama-graph.cpp multiplies by the gate only when
    the model has one). A header without tensor infos counts every layer as gated (the larger FFN).
    A gate fused into ffn_up (2 x n_ff wide, no ffn_gate: glm4, phi3) is gated too: build_ffn's
    LLM_FFN_SWIGLU without a gate splits up's output in two halves (ggml_swiglu), and the up [2 n_ff]
    plus the GLU output [n_ff] take what gate + up + activation take (audit_families.py, glm4).
    Returns the gated layers and, among them, those whose gate is fused into ffn_up."""
    if not f.tensors:
        return frozenset(range(f.n_layer_all)), frozenset()
    out = set()
    fused = set()
    for t in f.tensors:
        if (
            il := block_index(t.name)
        ) is None:  # outside the blocks, or `blk.x.…`: no layer llama.cpp loads
            continue
        fused_up = (
            t.name.endswith(".ffn_up.weight")
            and len(t.shape) == 2
            and il < len(f.n_ff)
            and f.n_ff[il] > 0
            and t.shape[1] == 2 * f.n_ff[il]
        )
        if fused_up or t.name.endswith((".ffn_gate.weight", ".ffn_gate_up.weight")):
            out.add(il)
        if fused_up:
            fused.add(il)
    return frozenset(out), frozenset(fused)


def _fused_qkv_layers(f: ModelFacts) -> dict[int, bool]:
    """Blocks with a fused attn_qkv matrix, each mapped to "no RoPE" (a learned position_embd, as gpt2 and
    starcoder load, or ALiBi: bloom, mpt) — build_qkv in src/llama-graph.cpp."""
    no_rope = f.architecture in ("bloom", "mpt", "jais") or any(
        t.name == "position_embd.weight" for t in f.tensors
    )
    return {
        il: no_rope
        for t in f.tensors
        if t.name.endswith(".attn_qkv.weight") and (il := block_index(t.name)) is not None
    }


def _signature(f: ModelFacts, il: int) -> tuple[object, ...]:
    """Everything a layer's candidate peaks depend on (see _layer_peak)."""
    return (
        f.n_head[il],
        f.n_head_kv[il],
        f.n_ff[il],
        f.swa.is_swa[il],
        f.is_recurrent[il],
        f.has_kv[il],
        il < f.n_layer,
        _is_moe(f, il),
        f.n_embd_k_gqa(il),
        f.n_embd_v_gqa(il),
    )


def _on_device(f: ModelFacts, s: ComputeSettings) -> list[int]:
    """Main-context layers this backend runs (NextN/MTP blocks are not in the graph), one per shape."""
    layers = range(f.n_layer) if s.layers is None else s.layers
    reps = _shape(f).reps
    return sorted({reps[il] for il in layers if il < f.n_layer})


def _cells(f: ModelFacts, s: ComputeSettings, il: int) -> int:
    """n_kv of layer il in the reserve graph: its cache's size per stream (init_full)."""
    return s.n_swa_seq if f.swa.is_swa[il] and s.n_swa_seq else s.n_ctx_seq


def _caches(f: ModelFacts, s: ComputeSettings) -> list[int]:
    """Cells per stream of each attention cache with layers (llama_kv_cache_iswa: base, SWA)."""
    full, swa = _shape(f).caches
    return ([s.n_ctx_seq] if full else []) + ([s.n_swa_seq or s.n_ctx_seq] if swa else [])


def input_bytes(f: ModelFacts, s: ComputeSettings) -> dict[str, int]:
    """Graph inputs (ggml_set_input), allocated before any node (llm_graph_context::build_inp_*,
    llama_kv_cache::build_input_{k,v}_idxs, build_attn_inp_kq_mask in src/llama-graph.cpp)."""
    t, a = s.n_tokens, ALIGNMENT[s.backend]
    out = {"inp_tokens": 4 * t, "inp_pos": 4 * t, "out_ids": 4 * s.n_out}
    if s.inp_embd_input:  # before PR #18898 the graph had either token ids or embeddings
        out["inp_embd"] = F32 * f.n_embd * t
    mask_elt = (
        2 if s.flash_attn and s.mask_f16_input else 4
    )  # F16 mask for flash attention, F32 otherwise
    v_rows = t if s.flash_attn else t * _shape(f).v_gqa_max  # transposed V: one index per element
    for i, cells in enumerate(_caches(f, s)):
        if s.kv_idxs:  # before PR #14959 the KV writes were views + ggml_cpy, without index inputs
            out[f"k_idxs{i}"] = 8 * t
            if f.mla is None:  # MLA caches hold no V (has_v = !is_mla)
                out[f"v_idxs{i}"] = 8 * v_rows
        out[f"kq_mask{i}"] = mask_elt * cells * t
        if s.flash_attn and not s.mask_f16_input:  # the ggml_cast to F16 that FLASH_ATTN_EXT reads
            out[f"kq_mask_f16_{i}"] = 2 * cells * t
    if s.pooling in (
        "mean",
        "cls",
        "last",
        "rank",
    ):  # build_inp_mean / build_inp_cls, read by build_pooling
        n_seqs = s.n_seq_max if s.pooling_per_seq else t
        out["inp_mean" if s.pooling == "mean" else "inp_cls"] = (
            F32 * t if s.pooling == "mean" else 4
        ) * n_seqs
    if s.attn_rot:
        out.update(_rot_inputs(f, s))
    if f.recurrent is not None:
        out["rs_s_copy"] = 4 * max(1, s.n_seq_max)
    return {k: _pad(v, a) for k, v in out.items()}


UNQUANTIZED_KV = frozenset({"f32", "f16", "bf16"})


def _rot_inputs(f: ModelFacts, s: ComputeSettings) -> dict[str, int]:
    """The Hadamard rotation inputs of each attention cache (PR #21038): llama_kv_cache's constructor
    (src/llama-kv-cache.cpp) sets n_rot_k when type_k is quantized and every layer of the cache has one
    key head size that is a multiple of 64 (n_rot_k: 64 doubled while it still divides the head), n_rot_v = 64
    likewise for V (none for MLA); build_input_k_rot / build_input_v_rot make F32 n_rot x n_rot inputs,
    read by every layer's attention (so alive until the last one). Depends on the K and V types alone:
    computed once per model and pair."""
    memo = _shape(f).rot
    key = (s.type_k, s.type_v)
    if key not in memo:
        memo[key] = _rot_inputs_of(f, s)
    return memo[key]


def _rot_inputs_of(f: ModelFacts, s: ComputeSettings) -> dict[str, int]:
    out: dict[str, int] = {}
    full, swa = _shape(f).caches
    for i, is_swa in enumerate(([False] if full else []) + ([True] if swa else [])):
        kv = [
            il
            for il in range(f.n_layer)
            if f.has_kv[il] and f.swa.is_swa[il] == is_swa and f.n_head_kv[il]
        ]
        heads_k = {f.n_embd_k_gqa(il) // f.n_head_kv[il] for il in kv}
        heads_v = {f.n_embd_v_gqa(il) // f.n_head_kv[il] for il in kv}
        if (
            s.type_k not in UNQUANTIZED_KV
            and len(heads_k) == 1
            and (head := heads_k.pop()) % 64 == 0
        ):
            n = 64
            while head % (2 * n) == 0:
                n *= 2
            out[f"k_rot{i}"] = F32 * n * n
        if (
            s.type_v not in UNQUANTIZED_KV
            and f.mla is None
            and len(heads_v) == 1
            and heads_v.pop() % 64 == 0
        ):
            out[f"v_rot{i}"] = F32 * 64 * 64
    return out


def _attention(f: ModelFacts, s: ComputeSettings, il: int, *, with_kq: bool = True) -> int:
    """At ROPE(Q) (and, without FA, at the KQ product): residual + attn_norm + Q + roped Q, plus
    KQ = n_kv x n_tokens x n_head F32 (soft_max runs in place) — build_attn_mha, llama-graph.cpp."""
    t = s.n_tokens
    e, q = F32 * f.n_embd * t, F32 * f.n_head[il] * f.n_embd_head_k * t
    if s.flash_attn and f.architecture not in KQ_BIAS_ARCHS:
        at_fa = 2 * e + q + F32 * f.n_head[il] * f.n_embd_head_v * t + fa_f16_extra(f, s, il)
        return max(2 * e + (_mla_q(f, s, il) if f.mla else 2 * q), at_fa)
    kq = F32 * _cells(f, s, il) * t * f.n_head[il] if with_kq else 0
    # MLA without FA: V is a view of the K cache, made contiguous (ggml_cont of its transpose)
    elt = 4 if s.type_k == "f32" else 2
    v_cont = elt * _cells(f, s, il) * f.mla.kv_lora_rank * s.n_stream if f.mla and with_kq else 0
    fused = _shape(f).fused_qkv
    if il in fused:
        # build_qkv's fused path: Q/K/V are views of one qkv tensor. With RoPE the roped Q replaces it
        # (qkv is freed once K and V are stored); without (learned positions, ALiBi) the Q view is
        # read by the KQ product itself, so all of qkv stays alive (audit_families.py: gptneox, gpt2)
        kv = F32 * (f.n_embd_k_gqa(il) + f.n_embd_v_gqa(il)) * t
        conts = 0 if s.qkv_views else q + kv  # before PR #15662: ggml_cont of each view
        return 2 * e + q + (kv if fused[il] else 0) + conts + kq
    return 2 * e + 2 * q + kq + v_cont


def fa_f16_extra(f: ModelFacts, s: ComputeSettings, il: int) -> int:
    """CUDA/HIP only: FLASH_ATTN_EXT's allocation also holds F16 copies of a non-F16 K and V view
    (ggml_cuda_flash_attn_ext_get_alloc_size in ggml/src/ggml-cuda/fattn.cu, layout from
    ggml_cuda_flash_attn_ext_get_f16_extra_data in fattn-common.cuh). The n_ubatch-token reserve
    graph picks the MMA/TILE kernels, which need F16; for MLA, V is a view of K (one copy)."""
    if s.backend not in ("cuda", "rocm") or not s.flash_attn or not s.fa_f16_in_buffer:
        return 0  # before PR #23907 the copies came from the CUDA pool (inside the margin)
    n_kv = _cells(f, s, il) * s.n_stream
    out = F32 * f.n_head[il] * f.n_embd_head_v * s.n_tokens  # ggml_nbytes(dst)
    end = out
    if s.type_k != "f16":
        end = _pad(end, 128) + 2 * f.n_embd_k_gqa(il) * n_kv
    if s.type_v != "f16" and f.mla is None:
        end = _pad(end, 128) + 2 * f.n_embd_v_gqa(il) * n_kv
    return end - out


def _mla_q(f: ModelFacts, s: ComputeSettings, il: int) -> int:
    """src/models/deepseek2.cpp, absorbed MLA: at CONCAT(q_nope_absorbed, roped q_pe) -> Qcur
    [kv_lora + n_rot, n_head, T]; q itself is freed once both of its views are consumed."""
    assert f.mla is not None
    t, h, lora = s.n_tokens, f.n_head[il], f.mla.kv_lora_rank
    rope = f.n_embd_head_k - lora
    return F32 * h * t * (lora + rope + (lora + rope))


def _hole(f: ModelFacts, s: ComputeSettings, il: int, *, small: bool) -> int:
    """Free space the attention block leaves below the FFN input (ffn_inp lands above it).
    With FA or a KQ product no larger than n_embd + Q rows, attn_norm's and Q's slots stay free
    (one n_embd row when the FFN tensors are small enough to fill them); after a larger KQ, its
    region takes the FFN and one n_embd row stays (Q narrower than n_embd: also two Q rows)."""
    t = s.n_tokens
    e, q = F32 * f.n_embd * t, F32 * f.n_head[il] * f.n_embd_head_k * t
    kq = (
        0
        if s.flash_attn and f.architecture not in KQ_BIAS_ARCHS
        else F32 * _cells(f, s, il) * t * f.n_head[il]
    )
    # MLA with a low-rank Q (src/models/deepseek2.cpp: q = wq_a x cur [q_lora_rank, T], normed in place, then
    # wq_b): q_a is freed once wq_b has read it and its rows stay a hole below the FFN input (exact on the
    # mla-deepseek2 rows of the CPU table, which were q_lora_rank x T x 4 under without it)
    q_a = F32 * f.mla.q_lora_rank * t if f.mla else 0
    if kq <= e + q:
        return (e if small else e + q) + q_a
    return (e if q >= e else e + 2 * q) + q_a


def _dense_ffn(f: ModelFacts, s: ComputeSettings, il: int) -> int:
    """At the GLU (build_ffn, LLM_FFN_PAR): ffn_inp + gate + up + activation above the hole.
    Without a gate (gptneox, gpt2, phi2, starcoder...: LLM_FFN_SEQ with GELU/RELU) there is one n_ff
    tensor: at the up matmul three n_embd rows (the block input or ffn_inp, the attention output or
    the residual, the normed input) and up; the bias add and the activation then run in place, and
    the freed attention slots leave no hole below (scripts/audit/audit_families.py, CPU at 0c1e570:
    gptneox with a parallel residual and gpt2 with a sequential one, exact with flash attention)."""
    t = s.n_tokens
    e, q, ff = F32 * f.n_embd * t, F32 * f.n_head[il] * f.n_embd_head_k * t, F32 * f.n_ff[il] * t
    shape = _shape(f)
    if il in shape.gated:
        # before ggml_swiglu (PR #14158) a fused up's halves were two ggml_cont copies, live with
        # up [2 n_ff] when the second is made: one n_ff more at the FFN (GLM-Z1 32B's 45 MiB over
        # on CUDA at b5274 is the output's instead: _logits_above_mask_hole)
        old_split = ff if not s.glu_op and il in shape.fused_up else 0
        return _hole(f, s, il, small=ff <= e + q) + e + 3 * ff + old_split
    return 3 * e + ff


def _moe_ffn(f: ModelFacts, s: ComputeSettings, il: int) -> int:
    """build_moe_ffn: ffn_inp + gate/up/act [n_ff_exp, n_used, T]; the down projection
    [n_embd, n_used, T] lands on top when it does not fit where gate and up were."""
    assert f.moe is not None
    t, used = s.n_tokens, f.moe.n_expert_used
    e, q = F32 * f.n_embd * t, F32 * f.n_head[il] * f.n_embd_head_k * t
    u = F32 * f.moe.n_ff_exp * used * t
    hole = _hole(f, s, il, small=2 * u <= e + q)  # the router's small tensors split the hole
    down = used * e if used * e > 2 * u else 0  # else it reuses gate's and up's space
    # shared experts run after the routed ones (build_ffn on the same normed input)
    shared = F32 * (f.moe.n_ff_shexp or f.moe.n_ff_exp * f.moe.n_expert_shared) * t
    return max(hole + e + 3 * u + down, hole + 3 * e + 3 * shared)


def _ssm(f: ModelFacts, s: ComputeSettings) -> int:
    """build_mamba2_layer (src/models/mamba-base.cpp) at SSM_SCAN: residual + in_proj output zxBCdt
    (its z/dt views keep it alive), the conv input (concat with the d_conv-1 state rows, freed
    just before: a hole) and output, the scan's y plus the final states [d_state, d_inner, n_seqs].
    Measured for Mamba-2 layers only; other recurrent blocks (Mamba-1, RWKV, gated delta net)
    get the same shape from their ssm.* sizes, unverified."""
    assert f.recurrent is not None
    r, t = f.recurrent, s.n_tokens
    conv = r.d_inner + 2 * r.n_group * r.d_state
    in_proj = 2 * r.d_inner + 2 * r.n_group * r.d_state + r.dt_rank
    per_token = (2 + SSM_SLACK) * f.n_embd + in_proj + 2 * conv + r.d_inner
    return int(F32 * (t * per_token + r.d_state * r.d_inner * max(1, s.n_seq_max)))


def _is_moe(f: ModelFacts, il: int) -> bool:
    return f.moe is not None and il >= f.moe.n_layer_dense_lead


def _has_attention(f: ModelFacts, il: int) -> bool:
    return bool(f.n_head[il] and f.n_head_kv[il]) and (f.has_kv[il] or not f.is_recurrent[il])


# Gemma 3n (src/models/gemma3n.cpp): llama_hparams::n_altup and n_embd_altup (src/llama-hparams.h), read from no
# GGUF key: the AltUp parallel hidden states and the per-layer input width
GEMMA3N_ALTUP, GEMMA3N_EMBD_ALTUP = 4, 256


def _gemma3n_extra(f: ModelFacts, s: ComputeSettings) -> tuple[int, int]:
    """What Gemma 3n keeps alive through every block besides the llama-style candidates: (at attention, at FFN).

    build_inp_per_layer + project_per_layer_inputs make inp_per_layer [n_embd_altup, n_tokens, n_layer] (a
    ggml_cont, read by every block's view: alive to the last block); altup_predict makes `predictions`
    [n_embd, n_tokens, n_altup], read by altup_correct at the block's end, whose active slice is the
    attention's residual (counted once by the attention candidate). At the FFN the temporaries of the
    per-layer projection (mul_mat, norm, add over [n_embd_altup x n_layer, n_tokens]), freed before the
    first block, leave a hole of that size below, too small for the n_ff-wide gate/up. Measured on the real
    CPU llama-server (b11434, scripts/audit/audit_gemma3n.py): Gemma 3n E2B exact to 0.02 MiB over 8 settings
    (FA on/off, -ub 128..1024, q8_0 cache, embeddings); E4B (n_ff 16384) 2-3 n_embd rows over with the FFN
    as the peak, where part of the holes below does take a gate/up tensor (the hole term is the least
    certain part: a best-fit placement read off E2B, not replayed through ggml-alloc)."""
    if f.architecture != "gemma3n":
        return 0, 0
    t = s.n_tokens
    per_layer, e = F32 * GEMMA3N_EMBD_ALTUP * f.n_layer * t, F32 * f.n_embd * t
    hole = per_layer if F32 * max(f.n_ff) * t > per_layer else 0
    return per_layer + (GEMMA3N_ALTUP - 1) * e, per_layer + GEMMA3N_ALTUP * e + hole


def _layer_peak(
    f: ModelFacts, s: ComputeSettings, il: int, *, with_kq: bool = True
) -> tuple[int, str]:
    """The largest candidate of one layer (the allocator reuses the same space layer after layer)."""
    cands = [(0, "none")]
    at_attn, at_ffn = _gemma3n_extra(f, s)
    if _has_attention(f, il):
        cands.append((_attention(f, s, il, with_kq=with_kq) + at_attn, "attention"))
    if f.is_recurrent[il] and f.recurrent is not None:
        cands.append((_ssm(f, s), "ssm"))
    if _is_moe(f, il):
        cands.append((_moe_ffn(f, s, il), "moe"))
    elif f.n_ff[il]:
        cands.append((_dense_ffn(f, s, il) + at_ffn, "ffn"))
    return max(cands)


def _output(f: ModelFacts, s: ComputeSettings) -> int:
    """At the lm_head: by then the mask, positions and indices are freed; inp_tokens' slot, the
    never-read inp_embd, result_norm (in place over the last layer's output) and the logits
    [n_vocab, n_outputs] (a graph output: never freed) stay — llm_graph_context::build_output.
    On a GPU backend the two graph inputs are not there: ggml_backend_sched assigns input leafs to
    the last backend (the CPU) and copies into a split only what a GPU op reads."""
    t, n = s.n_tokens, s.n_out
    inputs = 4 * t + F32 * f.n_embd * t * s.inp_embd_input if s.backend == "cpu" else 0
    return inputs + F32 * f.n_embd * n + F32 * f.n_vocab * n


def _logits_on_top(f: ModelFacts, s: ComputeSettings) -> int:
    """More outputs than one per sequence but fewer than the batch (speculative decoding's main context:
    n_parallel x (1 + n_draft), tools/server/server-context.cpp server_output_limits, reserved by
    llama_context::sched_reserve as n_outputs_pp = min(n_tokens, n_outputs_max)): the last layer
    gathers its n_out rows (ggml_get_rows of inp_out_ids, e.g. src/models/gemma3.cpp), and those small
    tensors land at the base of the freed FFN intermediates, so the logits [n_vocab, n_out], too large
    for any hole, go above them (ggml_dyn_tallocr_alloc, ggml/src/ggml-alloc.c: best fit, else the
    last free block). Measured on the CPU (Gemma 3 270M, -np 1 and 4, 16 to 64 outputs): reported -
    n_vocab x n_out x 4 is the FFN candidate minus its intermediates. With n_out = n_tokens there is
    no gather and the logits land low (the `_output` rule; fixtures/calibration out512 rows)."""
    il = f.n_layer - 1
    if not 1 < s.n_out < s.n_tokens or il < 0 or not f.n_ff[il] or _is_moe(f, il):
        return 0
    if s.layers is not None and _shape(f).reps[il] not in s.layers:
        return 0
    t = s.n_tokens
    e, q, ff = F32 * f.n_embd * t, F32 * f.n_head[il] * f.n_embd_head_k * t, F32 * f.n_ff[il] * t
    base = _hole(f, s, il, small=ff <= e + q) + e if il in _shape(f).gated else 3 * e
    return base + F32 * f.n_vocab * s.n_out


# Backends whose layout _logits_above_mask_hole follows: their buffer takes copies of the host's graph
# inputs (the scheduler's split inputs) and they run every op of the glm4 graph of those builds in graph
# order (ggml-cuda.cu, HIP too). Metal copies the inputs in as well (ggml_backend_metal_device_supports_buft
# takes only Metal's buffer types) but reorders its splits (ggml_graph_optimize): not replayed for glm4
SPLIT_INPUT_COPY_BACKENDS = frozenset({"cuda", "rocm"})


def _logits_above_mask_hole(f: ModelFacts, s: ComputeSettings, inputs: dict[str, int]) -> int:
    """glm4 on a GPU with flash attention before PR #23764: the logits above the last FFN's activation.

    ggml_backend_sched_split_graph (ggml/src/ggml-backend.cpp) allocates a split's input copies at its
    start ("add inputs to the graph copy so that they are allocated by ggml-alloc at the start of the
    split"), in the order the split's nodes read them: the embeddings lookup (block 0's norm), inp_pos
    (the ropes), k_idxs/v_idxs (the set_rows KV writes, PR #14959 on), the F32 KQ mask (its ggml_cast
    to F16, build_attn_inp_kv_unified, src/llama-graph.cpp) and inp_out_ids (the last block's
    get_rows). They lie at the bottom of the GPU buffer; the F32 mask is freed after its cast and the
    lookup after block 0 (ggml_gallocr_alloc_graph_impl, ggml/src/ggml-alloc.c), the small ones in the
    last block before its FFN, so the bottom is then one free block of all of them. In the last block
    of llm_build_glm4 (src/llama-model.cpp at b5274) the fused up [2 n_ff] does not fit it (ffn_norm's
    row lies in it) and goes above; its SWIGLU half [n_ff] (two ggml_cont + silu + mul in place
    before PR #14158, one ggml_swiglu after) takes it best fit (ggml_dyn_tallocr_alloc: the best-fitting
    block besides the last), ffn_down [n_embd] the rest of it right above, and the post-FFN norm, the
    residual add and result_norm run in place there, so the logits [n_vocab, n_tokens], too large for
    any hole, start at n_ff + n_embd rows. The F16 cast is made after block 0's attn_norm and Q are
    freed: larger than the two n_embd rows they leave, it goes above block 0's tensors; smaller, it
    sits in that hole with a remainder beside it, and in the replay the last block's attention
    tensors then take the bottom (GLM-Z1 at -c 23552: the logits above two n_embd rows).

    scripts/audit/audit_glm4_b5274.py replays llm_build_glm4's reserve graph, the scheduler's split and
    ggml-alloc as llama.cpp 8733e0c has them (llama-cpp-python 0.3.9's vendor tree, a few days after
    b5274): GLM-Z1 32B, -c 32768, 512 tokens gives CUDA0 353.00 MiB and CUDA_Host 76.01, as
    ik_llama.cpp#370 and #344 print, and b5192's CPU run (-c 5120) 308.00 (there the lookup lies above
    the mask and the mask hole is too small). In the 1488 configurations of its --grid where these
    conditions hold (n_embd 2048..6144, n_ff 5632..27648, 64..2048 tokens, 1k..128k cells, both SWIGLU
    forms, ggml_cpy or set_rows KV writes) the replay's logits end exactly here. Where the
    activation does not fit the bottom, or the cast sits low, the layout differs and is not modelled
    (the plain _output stands; GLM-Z1 at -c 16384: 320.00 replayed, 308.00 here; at -c 24576, a cast
    of exactly two rows, 353.00 replayed, 308.00 here)."""
    il = f.n_layer - 1
    if not (
        s.backend in SPLIT_INPUT_COPY_BACKENDS
        and f.architecture == "glm4"
        and s.flash_attn
        and not s.mask_f16_input
        and s.holds_input
        and s.holds_output
        and s.kv_on_device
        and s.n_out == s.n_tokens
        and il >= 0
        and il in _shape(f).fused_up
        and il not in _shape(f).fused_qkv
        and (s.layers is None or _shape(f).reps[il] in s.layers)
    ):
        return 0
    a = ALIGNMENT[s.backend]
    e = _pad(F32 * f.n_embd * s.n_tokens, a)
    ff = _pad(F32 * f.n_ff[il] * s.n_tokens, a)
    copies = ("inp_pos", "k_idxs0", "v_idxs0", "kq_mask0", "out_ids")
    bottom = e + sum(inputs.get(k, 0) for k in copies)
    if not (inputs["kq_mask_f16_0"] > 2 * e and ff + e <= bottom < 2 * ff + e):
        return 0
    return ff + e + F32 * f.n_vocab * s.n_out


PREDICTED_SIZE = 4096  # predict_compute's and _layers_on's memos per model: cleared when full


def predict_compute(f: ModelFacts, s: ComputeSettings) -> ComputeEstimate:
    """The compute buffer llama.cpp reserves on the backend described by `s`, in bytes
    (_predict_compute), once per model and settings: a plan asks the same settings again (the
    host's buffer of every config with the same context, op offload's host figure)."""
    memo = _shape(f).predicted
    hit = memo.get(s)
    if hit is None:
        if len(memo) >= PREDICTED_SIZE:
            memo.clear()
        hit = memo[s] = _predict_compute(f, s)
    return hit


def _predict_compute(f: ModelFacts, s: ComputeSettings) -> ComputeEstimate:
    """The compute buffer llama.cpp reserves on the backend described by `s`, in bytes.

    CPU backend: one buffer holds the inputs and every activation. GPU backend: its buffer holds
    the activations of its layers plus the scheduler's copies of the split inputs (mask, positions,
    indices, the incoming hidden state; ggml_backend_sched_split_graph, ggml/src/ggml-backend.cpp);
    the inputs themselves, the embedding GET_ROWS (token_embd stays on the CPU) and, with
    `kv_on_device` false (-nkvo), the KQ product live in the host buffer (`host`).
    Pipeline parallelism's copies of the split inputs are added by compute_for_devices (_copies_extra)."""
    inputs = input_bytes(f, s)
    layers = _on_device(f, s)
    peak, name = max(
        (_layer_peak(f, s, il, with_kq=s.kv_on_device and s.kq_on_device) for il in layers),
        default=(0, "none"),
    )
    host_inputs = 0
    mixed = _mixed_inputs(f, s) if s.mixed_input else (0, 0, 0)
    dup, copies = (mixed[1], mixed[2]) if s.holds_input else (0, 0)
    if s.backend == "cpu":
        dev_inputs, host = sum(inputs.values()) + dup, 0
    else:
        # token ids and the never-read inp_embd stay in the host buffer (input leafs go to the CPU
        # backend, ggml_backend_sched_split_graph); the embedding GET_ROWS output is copied in as
        # the first split's input, which the layer candidates count as their residual row
        # before PR #23764 the F32 mask stays on the host and its F16 cast is made on the GPU (ROCm log of
        # issue #13545: host 64 MiB F32 mask, device the F16 one)
        casted = any(k.startswith("kq_mask_f16") for k in inputs)
        attn_inputs = ("k_idxs", "v_idxs", "kq_mask")
        dev_inputs = sum(
            v
            for k, v in inputs.items()
            if k not in ("inp_tokens", "inp_embd")
            and (s.kv_on_device or not k.startswith(attn_inputs))
            and not (casted and k.startswith("kq_mask") and not k.startswith("kq_mask_f16"))
            and (s.kq_on_device or not k.startswith("kq_mask"))
            and (s.holds_output or k not in ("inp_mean", "inp_cls"))
        )
        host_inputs = sum(v for k, v in inputs.items() if not k.startswith("kq_mask_f16"))
        lookups = _pad(F32 * f.n_embd * s.n_tokens, ALIGNMENT["cpu"])  # the token_embd GET_ROWS
        if s.mixed_input:
            host_inputs += mixed[0] - lookups  # the mixed branch's own lookup: a second GET_ROWS
            lookups *= 2
        # the copies of the mixed branch's sources, freed after its DUP/SET_ROWS: counted whole, they bound the
        # DUP that stays and the holes they leave below the layers (Vulkan0 grid: exact to one n_embd row over;
        # Gemma 3 1B 0.4% under, tests/memory/test_device_calibration.py)
        dev_inputs += copies
        host = host_inputs + lookups
        if not s.kv_on_device:
            host += max((_attention(f, s, il) for il in layers if _has_attention(f, il)), default=0)
    split_inputs = dev_inputs + _f32_mask_copies(inputs, s)
    device, peak_name = dev_inputs + peak, name
    if s.holds_output and _output(f, s) > device:
        device, peak_name = _output(f, s), "output"
    if s.holds_output and (above_hole := _logits_above_mask_hole(f, s, inputs)) > device:
        device, peak_name = above_hole, "output"
    if s.holds_output and dev_inputs + _logits_on_top(f, s) > device:
        device, peak_name = dev_inputs + _logits_on_top(f, s), "output"
    if s.holds_output and (pinned := _pinned_output(f, s, split_inputs, mixed[0])) > device:
        device, peak_name = pinned, "output"
    return ComputeEstimate(device=device, host=host, peak=peak_name, host_inputs=host_inputs)


def _f32_mask_copies(inputs: dict[str, int], s: ComputeSettings) -> int:
    """What the split's input copies hold beyond `dev_inputs` before PR #23764: the F32 mask's copy instead
    of its F16 cast (0 on the CPU, with an F16 mask input, or with attention off this backend).

    llm_graph_context::build_attn_inp_kv_unified (src/llama-graph.cpp at b5618, llama-cpp-python 0.3.9/0.3.10's
    vendored tree) makes one ggml_cast of the F32 mask input per graph, first read by block 0's FLASH_ATTN_EXT
    and added to the graph there, after build_attn's K/V stores. ggml_backend_sched_split_graph
    (ggml/src/ggml-backend.cpp): the input leaf goes to the CPU backend (ggml_backend_sched_backend_id_from_cur,
    "1.inp"), the cast reads no weight and pass 2 (expand gpu down) gives it the GPU of the CPY before it, so
    pass 5 copies the F32 mask in as a split input; the split's input copies are allocated at its start in
    the order its nodes first read them ("add inputs to the graph copy so that they are allocated by ggml-alloc
    at the start of the split"). The F32 copy is freed after the cast, and the cast, a node of block 0 above the
    split inputs, after the last attention (ggml_gallocr_alloc_graph_impl, ggml/src/ggml-alloc.c): so the
    pooling input's copy, the split's last input (read by build_pooling), lies above the F32 copy, and the
    logits above it (_pinned_output) have the copy's bytes below them, not the cast's. The layer peaks are left
    with the cast (how the layers fill the copy's freed slot is not replayed)."""
    if s.backend == "cpu":
        return 0
    return sum(
        inputs[f"kq_mask{key.removeprefix('kq_mask_f16_')}"] - v
        for key, v in inputs.items()
        if key.startswith("kq_mask_f16") and s.kv_on_device and s.kq_on_device
    )


def _pinned_output(f: ModelFacts, s: ComputeSettings, dev_inputs: int, mixed_host: int) -> int:
    """The logits [n_vocab, n_outputs] above a tensor that stays alive from the start of the graph to its end.

    With every token an output (n_out = n_tokens: no gather at the last layer) nothing but small tensors is
    alive at the lm_head, so the logits, too large for any hole, go at the start of the last free block
    (ggml_dyn_tallocr_alloc, ggml/src/ggml-alloc.c): just above the highest tensor still alive. Two such
    tensors are allocated early and read last:
      - the mixed branch's DUP (PR #29622; see _mixed_inputs), which no node reads: on the CPU backend it lies
        above every graph input, the mixed inputs and the two token lookups (freed early, their holes are
        below it: the logits cannot use them);
      - the pooling input inp_mean / inp_cls (build_pooling, src/llama-graph.cpp, with --embeddings): a graph
        input read by the last node, allocated last of the inputs (ggml_gallocr_alloc_graph_impl allocates the
        inputs in the order nodes read them) on the CPU; on a GPU its copy is a split input, allocated with
        the other split inputs at the start of the split (ggml_backend_sched_split_graph).
    Measured on the CPU llama-server (b11434, Gemma 3 270M --embeddings,
    scripts/audit/audit_embeddings.py): the buffer is exactly that base plus the logits; with a
    pooling input result_norm (t_embd, a graph output) and the pooling's small tensors fit in holes
    below, without one (--pooling none, or no embeddings) result_norm lies above the DUP too (one
    n_embd x n_outputs row more: measured, the hole it misses by the pooling input's 32 bytes not
    derived)."""
    if s.n_out != s.n_tokens:
        return 0
    pooled = s.pooling != "none"
    logits = F32 * f.n_vocab * s.n_out
    if s.backend == "cpu":
        if s.mixed_input and s.holds_input:
            t_embd = 0 if pooled else _pad(F32 * f.n_embd * s.n_out, ALIGNMENT["cpu"])
            # below the DUP: the graph inputs, the mixed branch's three inputs and both token lookups (mixed_host)
            return (
                dev_inputs
                + mixed_host
                + _pad(F32 * f.n_embd * s.n_tokens, ALIGNMENT["cpu"])
                + t_embd
                + logits
            )
        return dev_inputs + logits if pooled else 0
    # a GPU: the split's input copies, the incoming hidden state among them, lie below the pooling input's copy
    # (before PR #23764 the F32 mask's copy among them, not its F16 cast: the caller passes _f32_mask_copies in)
    return (
        dev_inputs + _pad(F32 * f.n_embd * s.n_tokens, ALIGNMENT[s.backend]) + logits
        if pooled
        else 0
    )


# llm_arch_supports_mixed_batch (src/llama-arch.cpp): the architectures without the mixed input branch
NO_MIXED_BATCH_ARCHS = frozenset(
    {"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash", "gemma4-assistant"}
)


def _mixed_inputs(f: ModelFacts, s: ComputeSettings) -> tuple[int, int, int]:
    """The mixed token/embedding branch of llm_graph_context::build_inp_embd (src/llama-graph.cpp, PR #29622):
    inputs inp_mixed_tokens (I32) and inp_mixed_slots (I64) of T rows and inp_mixed_embd (n_embd x T F32), a
    second token lookup (GET_ROWS on the host's token_embd) and ggml_set_rows into ggml_dup(inp_mixed_embd).
    The branch is never selected in a text-only reserve, but it is allocated. The SET_ROWS result is a view of
    the DUP that no node reads, so ggml_gallocr_alloc_graph_impl (ggml/src/ggml-alloc.c) never frees the DUP:
    one n_embd x T F32 tensor stays for the whole graph on the backend running block 0. On a GPU there,
    ggml_backend_sched_split_graph (ggml-backend.cpp) copies inp_mixed_embd, the lookup and the slots in as
    split inputs: freed after the DUP/SET_ROWS with one copy, kept with pipeline copies (input + output).
    Returns (host bytes when block 0 is on a GPU: the three inputs and the lookup, the DUP on the backend
    running block 0, the split-input copies on a GPU running block 0)."""
    t, e = s.n_tokens, F32 * f.n_embd * s.n_tokens
    a, c = ALIGNMENT[s.backend], ALIGNMENT["cpu"]
    host = _pad(4 * t, c) + _pad(8 * t, c) + 2 * _pad(e, c)
    return host, _pad(e, a), 2 * _pad(e, a) + _pad(8 * t, a)


def backend_kind(backend: str) -> Backend:
    """DeviceSpec.backend as a compute backend kind (RPC and others: a generic GPU)."""
    return backend if backend in ALIGNMENT else "vulkan"  # type: ignore[return-value]


def _layers_on(f: ModelFacts, lmap: LayerMap, dev: int) -> tuple[int, ...]:
    """One layer per distinct shape among the blocks on `dev` (enough for the peak); once per
    model, placement and device (a plan's configs of one placement differ in context, KV types,
    -ub)."""
    shape = _shape(f)
    key = (lmap.layers, dev)
    hit = shape.layers_on.get(key)
    if hit is None:
        if len(shape.layers_on) >= PREDICTED_SIZE:
            shape.layers_on.clear()
        reps: set[int] = set()
        for d, a, b in lmap.runs:
            if d == dev:
                reps |= shape.reps_in(a, b)
        hit = shape.layers_on[key] = tuple(sorted(reps))
    return hit


PIPELINE_COPIES = 4  # GGML_SCHED_MAX_COPIES (ggml/src/ggml-backend.cpp)


def _pipeline_copies(
    f: ModelFacts, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> int:
    """llama_context's pipeline parallelism (src/llama-context.cpp): several GPUs, -sm layer, every layer
    and the output offloaded, KV offloaded, no tensor overrides — then the scheduler keeps 4 copies of
    every split input. Not measured here (no multi-GPU machine); the copies follow the source."""
    full = rc.n_gpu_layers > f.n_layer_all and lmap.output != CPU
    plain = not (rc.overrides or rc.cpu_moe or rc.n_cpu_moe or rc.n_cpu_ffn)
    return (
        PIPELINE_COPIES
        if len(gpus) > 1 and rc.split_mode == "layer" and full and rc.kv_offload and plain
        else 1
    )


def kq_fits(f: ModelFacts, rc: ResolvedConfig, limit: int | None) -> bool:
    """Without flash attention the KQ product [n_kv, n_tokens, n_head] F32 is one tensor; a device that limits
    tensor sizes (ggml_backend_vk_device_supports_op: maxStorageBufferRange) refuses it, and the scheduler runs
    it, soft_max and KQV on the CPU (ggml_backend_sched_split_graph pass 1 falls back to the CPU backend)."""
    if rc.flash_attn or limit is None:
        return True
    n_tokens = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch)
    n_kv = max(rc.n_ctx_seq, rc.n_swa_cells) * rc.n_stream
    return 4 * n_kv * n_tokens * max(f.n_head) <= limit


def _logits_fit(f: ModelFacts, rc: ResolvedConfig, limit: int | None) -> bool:
    """The lm_head's product [n_vocab, n_outputs] F32 is one tensor: a device that limits tensor sizes
    (ggml_backend_vk_device_supports_op: maxStorageBufferRange / maxBufferSize) refuses the MUL_MAT and the
    scheduler runs it on the CPU. It matters with many outputs (embeddings mode: n_outputs = n_ubatch)."""
    if limit is None:
        return True
    n_out = min(rc.n_ctx_seq * rc.n_stream, rc.n_ubatch, rc.n_outputs_max)
    return F32 * f.n_vocab * n_out <= limit


def output_refused_host(
    f: ModelFacts, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> int:
    """The host's output peak when the GPU holding the output layer refuses the lm_head (_logits_fit), else 0."""
    if (
        lmap.output == CPU
        or lmap.output >= len(gpus)
        or _logits_fit(f, rc, gpus[lmap.output].max_tensor_bytes)
    ):
        return 0
    return _output_on_host(f, base_settings(f, rc))


def _output_on_host(f: ModelFacts, base: ComputeSettings) -> int:
    """The host's buffer when the GPU holding the output layer refuses the lm_head (_logits_fit): the CPU's
    output peak, where result_norm's rows arrive as a split input copy below the logits (with a pooling input
    pinned too, compute._pinned_output leaves them out). Measured on Vulkan0 (lavapipe, b11434, Gemma 3 270M
    --embeddings, 512 outputs: tests/machine/test_vulkan_devices.py); the output weight, if on the GPU, is not
    counted."""
    s = replace(base, layers=(), holds_output=True, holds_input=False)
    rows = _pad(F32 * f.n_embd * s.n_out, ALIGNMENT["cpu"]) if s.pooling != "none" else 0
    return predict_compute(f, s).device + rows


def _vk_refuses_quantized_k(f: ModelFacts, rc: ResolvedConfig, backend: str) -> bool:
    """Vulkan without flash attention over a quantized K cache. The KQ product reads K through a permuted view
    [head_k, n_kv, n_head_kv] whose rows lie n_embd_k_gqa apart: not dim01-contiguous unless n_head_kv == 1, and
    ggml_backend_vk_device_supports_op (ggml/src/ggml-vulkan/ggml-vulkan.cpp, MUL_MAT) takes a quantized src0
    only when ggml_vk_dim01_contiguous. So the scheduler runs KQ on the CPU (with copies of Q and of the layer's
    K view) and copies the product back as the input of the GPU's soft_max, a KQ-sized tensor where the KQ
    product was: the device buffer keeps its KQ term, the host gains the attention's share (_kq_on_host, an
    upper bound). Measured on Vulkan0 (lavapipe, b11434, Llama 3.2 1B shape, -c 1024 -fa off -ctk q8_0):
    Vulkan_Host 20.01 -> 76.03 MiB (llamafit 101.56), Vulkan0 84.01 -> 82.03 (llamafit 92.03);
    tests/machine/test_vulkan_devices.py. llama.cpp#12728 (b5040 era, DeepSeek-V2) reports Vulkan0 growing by one
    more KQ there (2066 MiB asked vs 1174 with f16): soft_max not in place over the copy at that build,
    not modelled (no source of that build at hand)."""
    if backend != "vulkan" or rc.flash_attn or not rc.type_k.is_quantized:
        return False
    return any(f.n_head_kv[il] > 1 for il in range(f.n_layer) if _has_attention(f, il))


def _kq_on_host(f: ModelFacts, rc: ResolvedConfig, s: ComputeSettings) -> int:
    """The host's share when a GPU's KQ product stays on the CPU: that attention (Q, KQ, the KQV output) and
    copies of the layer's K and V cache views (split inputs from the GPU's KV buffer), for the largest layer."""
    return max(
        (
            _attention(f, s, il)
            + layer_cell_bytes(f, il, rc.type_k, rc.type_v, flash_attn=False)
            * _cells(f, s, il)
            * s.n_stream
            for il in _on_device(f, s)
            if _has_attention(f, il)
        ),
        default=0,
    )


def _copies_extra(f: ModelFacts, s: ComputeSettings, copies: int) -> int:
    """Pipeline parallelism: with n_copies > 1 every split input gets `copies` copies flagged input + output
    (pass 5 of ggml_backend_sched_split_graph), all allocated first as leafs and never freed. So the incoming
    hidden state's copy no longer frees for the layer's own residual (one more n_embd row), and on the GPU
    running block 0 the mixed branch's three copies are kept once per copy, and its DUP too (_mixed_inputs)."""
    e = _pad(F32 * f.n_embd * s.n_tokens, ALIGNMENT[s.backend])
    extra = (copies - 1) * _split_inputs(f, s) + e
    if s.holds_input and s.mixed_input:
        _, dup, mixed_copies = _mixed_inputs(f, s)
        extra += (copies - 1) * mixed_copies + dup
    return extra


def _split_inputs(f: ModelFacts, s: ComputeSettings) -> int:
    """What a GPU's split copies in: the KQ masks, positions and K/V row indices, the output ids where it
    runs the output layer, and the incoming hidden state."""
    inputs = input_bytes(f, s)
    copied = ("kq_mask", "k_idxs", "v_idxs", "k_rot", "v_rot", "inp_pos") + (
        ("out_ids",) if s.holds_output else ()
    )
    return sum(v for k, v in inputs.items() if k.startswith(copied)) + _pad(
        F32 * f.n_embd * s.n_tokens, ALIGNMENT[s.backend]
    )


def base_settings(f: ModelFacts, rc: ResolvedConfig) -> ComputeSettings:
    return ComputeSettings(
        n_ctx_seq=rc.n_ctx_seq,
        n_ubatch=rc.n_ubatch,
        n_outputs=rc.n_outputs_max,
        flash_attn=rc.flash_attn,
        n_swa_seq=rc.n_swa_cells,
        n_stream=rc.n_stream,
        n_seq_max=rc.n_seq_max,
        type_k=rc.type_k.name.lower(),
        type_v=rc.type_v.name.lower(),
        kv_on_device=rc.kv_offload,
        fa_f16_in_buffer=since("cuda_fa_f16_in_buffer", rc.build),
        kv_idxs=since("kv_set_rows", rc.build),
        inp_embd_input=since("inp_embd_both", rc.build),
        qkv_views=since("fused_qkv_views", rc.build),
        mask_f16_input=since("fa_mask_f16", rc.build),
        mixed_input=since("mixed_batch", rc.build) and f.architecture not in NO_MIXED_BATCH_ARCHS,
        attn_rot=since("attn_rot", rc.build),
        glu_op=since("glu_op", rc.build),
        pooling=rc.pooling if rc.embeddings else "none",
        pooling_per_seq=since("pooling_per_seq", rc.build),
    )


def compute_for_devices(
    f: ModelFacts, rc: ResolvedConfig, lmap: LayerMap, gpus: Sequence[DeviceSpec]
) -> dict[int, int]:
    """Compute-buffer bytes per device index (GPUs 0.., the host CPU = -1) for a resolved config."""
    base = base_settings(f, rc)
    out: dict[int, int] = {}
    host = 0
    copies = _pipeline_copies(f, rc, lmap, gpus)
    for d, spec in enumerate(gpus):
        layers = _layers_on(f, lmap, d)
        if not layers and lmap.output != d:
            # no node of the graph runs here (graph inputs go to the CPU backend: ggml-backend.cpp
            # ggml_backend_sched_backend_id_from_cur), so ggml_gallocr_reserve_n sizes this backend's
            # buffer 0; op offload of host weights may still use it (op_offload.add_op_offload adds that)
            out[d] = 0
            continue
        refused = lmap.output == d and not _logits_fit(f, rc, spec.max_tensor_bytes)
        s = replace(
            base,
            backend=backend_kind(spec.backend),
            layers=layers,
            holds_output=lmap.output == d and not refused,
            holds_input=bool(lmap.layers) and lmap.layers[0] == d,
        )
        if not kq_fits(f, rc, spec.max_tensor_bytes):
            s = replace(s, kq_on_device=False)
        est = predict_compute(f, s)
        out[d], host = (
            est.device,
            max(host, est.host + (0 if s.kq_on_device else _kq_on_host(f, rc, s))),
        )
        if refused:
            host = max(host, _output_on_host(f, base))
        if s.kq_on_device and _vk_refuses_quantized_k(f, rc, spec.backend):
            host = max(host, est.host + _kq_on_host(f, rc, replace(s, kq_on_device=False)))
        if copies > 1:
            out[d] += _copies_extra(f, s, copies)
            # before b11258 (sched_all_inputs) only the inputs a node reads get copies: not inp_embd
            unread = (
                0 if since("sched_all_inputs", rc.build) else input_bytes(f, s).get("inp_embd", 0)
            )
            host = max(host, est.host + (copies - 1) * (est.host_inputs - unread))
    cpu_layers = _layers_on(f, lmap, CPU)
    if not gpus or cpu_layers or lmap.output == CPU:
        first_on_cpu = not gpus or not lmap.layers or lmap.layers[0] == CPU
        cpu = predict_compute(
            f,
            replace(
                base, layers=cpu_layers, holds_output=lmap.output == CPU, holds_input=first_on_cpu
            ),
        ).device
        host = max(host, cpu)
    out[CPU] = host
    return out


def nextn_compute(f: ModelFacts, s: ComputeSettings) -> int:
    """The MTP context's compute buffer (one backend holding it all): its reserve graph runs only the
    first NextN block (e.g. llama_model_glm4_moe::graph_mtp, src/models/glm4-moe.cpp) over a cache of
    the NextN layers. Inputs as the main graph's plus the target's hidden state `mtp_h_input`
    (n_embd x T F32); then enorm/hnorm, their concat (2 n_embd) and eh_proj before the block's own
    peak. Unmeasured on the allocator; checked against llama-server's reported buffer (tests)."""
    if f.n_layer_nextn == 0:
        return 0
    t, e = s.n_tokens, F32 * f.n_embd * s.n_tokens
    inputs = input_bytes(f, s)
    n_caches = len(_caches(f, s))
    if (
        n_caches != 1
    ):  # the MTP cache is one plain cache of the NextN layers: count one mask and index set
        inputs = {k: v for k, v in inputs.items() if not k[-1].isdigit() or k.endswith("0")}
        inputs["kq_mask0"] = _pad(
            (2 if s.flash_attn else 4) * s.n_ctx_seq * t, ALIGNMENT[s.backend]
        )
    il = f.n_layer
    peak, _ = _layer_peak(f, s, il)
    before_block = 4 * e  # tok_embd rows, e_norm, h_norm, concat (2E) alive at eh_proj
    head = (
        _output(f, s) - 4 * t - e
    )  # result norm + logits (inp_tokens and inp_embd are inputs here)
    return sum(inputs.values()) + _pad(e, ALIGNMENT[s.backend]) + max(peak, before_block, head)
