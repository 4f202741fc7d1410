"""Model facts: a typed, frozen view of what llama.cpp derives from a GGUF header.

Mirrors llama_model::load_hparams (src/llama-model.cpp), llama_hparams (src/llama-hparams.cpp)
and the per-arch load_arch_hparams in src/models/*.cpp at llama.cpp 0c1e570. Per-layer values
are tuples indexed by layer `il` in [0, n_layer_all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ModelFactsError
from ..reader.ggml_types import GGMLType
from ..reader.header import TensorInfo
from ..reader.model import GGUFModel
from ..reader.names import ARCH_NAMES, FILE_TYPES
from . import arch_rules as R
from .metadata import Metadata
from .swa import SWAFacts, swa_facts
from .weights import WeightFacts, weight_facts


@dataclass(frozen=True, slots=True)
class MLAFacts:
    """Multi-head latent attention (src/models/deepseek2.cpp): the cache stores K only."""

    kv_lora_rank: int
    key_length_mla: int
    value_length_mla: int
    # {arch}.attention.q_lora_rank (hparams.n_lora_q); 0: Q without the low-rank pair
    q_lora_rank: int = 0


@dataclass(frozen=True, slots=True)
class RecurrentFacts:
    """Recurrent state sizes per sequence and layer, in F32 elements (llama_hparams::n_embd_r/s)."""

    n_embd_r: int
    n_embd_s: int
    d_conv: int = 0
    d_inner: int = 0
    d_state: int = 0
    n_group: int = 0
    dt_rank: int = 0
    # {arch}.ssm.dt_b_c_rms (FalconMamba): Mamba-1's dt, B and C RMS-normed without weights
    # (src/models/mamba-base.cpp build_mamba_layer)
    dt_b_c_rms: bool = False


@dataclass(frozen=True, slots=True)
class MoEFacts:
    """Mixture of experts: counts and the expert FFN size (first MoE layer's when per-layer)."""

    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    n_ff_exp: int
    n_ff_shexp: int
    n_layer_dense_lead: int


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """Everything the memory model needs to know about one model."""

    path: str
    architecture: str
    name: str
    file_type: str
    n_params: int
    file_size: int
    n_tensors: int
    n_shards: int
    n_layer_all: int  # {arch}.block_count, NextN/MTP blocks included
    n_layer_nextn: int  # {arch}.nextn_predict_layers
    n_ctx_train: int
    n_embd: int
    n_vocab: int
    n_merges: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    n_embd_head_k: int
    n_embd_head_v: int
    n_embd_head_k_swa: int
    n_embd_head_v_swa: int
    swa: SWAFacts
    mla: MLAFacts | None
    is_recurrent: tuple[bool, ...]
    recurrent: RecurrentFacts | None
    moe: MoEFacts | None
    n_layer_kv_from_start: int
    # layers in the main context's attention cache; a layer with n_head_kv 0 stays in it with
    # 0-wide K (and V padded to n_embd_v_gqa_max without FA), as llama_kv_cache does
    has_kv: tuple[bool, ...]
    tied_embeddings: bool
    causal: bool
    weights: WeightFacts
    warnings: tuple[str, ...]
    # for -ot rules and CUDA padding
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False)
    # attention and FFN read the same block input, their outputs summed (gptneox
    # use_parallel_residual)
    parallel_residual: bool = False
    # where the last shard's tensor data ends, summed over shards (0: unknown)
    data_end_bytes: int = 0
    has_chat_template: bool = True  # tokenizer.chat_template is set
    # <arch>.pooling_type (llama_hparams::pooling_type, enum llama_pooling_type): -1 unspecified, 0
    # none, 1 mean, 2 cls, 3 last, 4 rank; what llama_context uses when --pooling is not given
    pooling_type: int = -1
    # the graph's shape (memory/graph/build.py): Gemma 3's logit soft-capping
    # ({arch}.final_logit_softcapping, llm_build_gemma3) and the routed experts' weight scale
    # ({arch}.expert_weights_scale, build_moe_ffn); 0.0 when unset
    final_logit_softcapping: float = 0.0
    expert_weights_scale: float = 0.0
    # ({arch}.expert_weights_norm, {arch}.expert_gating_func: llama_expert_gating_func_type, 0
    # none (the arch's default), 1 softmax, 2 sigmoid, 3 softmax weight; build_moe_ffn)
    expert_weights_norm: bool = False
    expert_gating_func: int = 0
    # {arch}.rope.dimension_sections set (llama_hparams::use_mrope: the first two above 0)
    use_mrope: bool = False
    # Granite's scales ({arch}.embedding_scale, residual_scale, logit_scale; 0.0 when unset) and
    # {arch}.rope.scaling.finetuned (None when unset; granitehybrid's RoPE switch)
    embedding_scale: float = 0.0
    residual_scale: float = 0.0
    # {arch}.expert_group_count / expert_group_used_count (llama_hparams::n_expert_groups,
    # n_group_used; read for every arch by llama_model::load_hparams; 0 when unset)
    n_expert_groups: int = 0
    n_group_used: int = 0
    # {arch}.attention.temperature_scale (llama_hparams::f_attn_temp_scale; deepseek2's
    # temperature tuning, Mistral Large 3); 0.0 when unset
    attn_temp_scale: float = 0.0
    logit_scale: float = 0.0
    rope_finetuned: bool | None = None
    # {arch}.attention.layer_norm_rms_epsilon (llama_hparams::f_norm_rms_eps; 0.0 when unset:
    # cohere2moe.cpp's norms are LayerNorms then, RMS norms where it is set)
    norm_rms_eps: float = 0.0
    # {arch}.n_deepstack_layers (llama_hparams::n_deepstack_layers: Qwen3-VL's layers that add a
    # slice of the wider input embedding, n_embd_inp = n_embd * (1 + n); 0 when unset)
    n_deepstack_layers: int = 0
    # ModernBERT's FFN activation by name ({arch}.hidden_activation, llama_hparams::llm_ffn_op;
    # "" when unset) and decision head ({arch}.decision.block_count; 0 when unset)
    hidden_activation: str = ""
    n_layer_decision: int = 0
    # {arch}.classifier.pooling_type (llama_hparams::pooling_type_cls: how rank pooling pools
    # before the classifier head; -1 unspecified)
    pooling_type_cls: int = -1
    # {arch}.attention.clamp_kqv (llama_hparams::f_clamp_kqv: build_qkv clamps Q, K and V; mpt,
    # olmo, dbrx); 0.0 when unset
    clamp_kqv: float = 0.0
    # {arch}.rope.scaling.original_context_length (llama_hparams::n_ctx_orig_yarn; 0 when unset:
    # llama_model::load_hparams then takes n_ctx_train): LongRoPE's choice of factors
    n_ctx_orig: int = 0

    @property
    def n_ctx_orig_yarn(self) -> int:
        """llama_hparams::n_ctx_orig_yarn: the original context length, else n_ctx_train."""
        return self.n_ctx_orig or self.n_ctx_train

    @property
    def incomplete(self) -> str | None:
        """Why the file cannot be loaded: its tensor data is missing (a header-only file, an
        interrupted download). Planning still works; llama.cpp would fail to load it."""
        if self.file_size >= self.data_end_bytes:
            return None
        return (
            f"the file is {self.file_size:,} bytes but its tensors need "
            f"{self.data_end_bytes / 1e9:,.1f} GB: incomplete download?"
        )

    @property
    def n_layer(self) -> int:
        """Layers the main context runs: block_count minus NextN/MTP (llama_hparams::n_layer)."""
        return self.n_layer_all - self.n_layer_nextn

    def n_embd_k_gqa(self, il: int) -> int:
        """Key width of layer il (llama_hparams::n_embd_k_gqa)."""
        head = self.n_embd_head_k_swa if self.swa.is_swa[il] else self.n_embd_head_k
        return head * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        """Value width of layer il (llama_hparams::n_embd_v_gqa)."""
        head = self.n_embd_head_v_swa if self.swa.is_swa[il] else self.n_embd_head_v
        return head * self.n_head_kv[il]

    @property
    def n_embd_v_gqa_max(self) -> int:
        """The widest V over all layers: the transposed V cache pads to it when FA is off."""
        return max((self.n_embd_v_gqa(il) for il in range(self.n_layer_all)), default=0)


def _pooling_type(value: int | None) -> int:
    """llama_model::load_hparams reads <arch>.pooling_type into an enum whose -1 is "unspecified";
    an absent key (or a value outside the enum) leaves it unspecified."""
    return value if value is not None and 0 <= value <= 4 else -1


def _file_type_label(meta: Metadata, model: GGUFModel) -> str:
    """`general.file_type` as llama.cpp names it (LlamaFileType), else the dominant tensor type."""
    ft = meta.get_int("general.file_type")
    if ft is not None:
        return FILE_TYPES.get(ft, f"file_type {ft}")
    by_type: dict[int, int] = {}
    for t in model.tensors:
        by_type[t.ggml_type] = by_type.get(t.ggml_type, 0) + t.n_bytes
    if not by_type:
        return "unknown"
    return GGMLType.of(max(by_type, key=by_type.__getitem__)).name


def _recurrent_layers(
    meta: Metadata, n_layer_all: int, n_layer: int, kv: tuple[int, ...], ff: tuple[int, ...]
) -> tuple[bool, ...]:
    """is_recr per layer by the arch's rule (src/models/<arch>.cpp load_arch_hparams)."""
    arch = meta.arch
    layers = range(n_layer_all)
    if arch in R.RECURRENT_ARCHS or arch in R.RECR_AND_ATTENTION_EVERY_LAYER:
        return tuple(True for _ in layers)
    if arch in R.RECR_IF_NO_KV_HEADS:
        return tuple(kv[il] == 0 for il in layers)
    if arch in R.RECR_IF_NO_KV_HEADS_AND_NO_FFN:
        return tuple(il < n_layer and kv[il] == 0 and ff[il] == 0 for il in layers)
    if arch in R.RECR_BY_INTERVAL:
        explicit = meta.per_layer("{arch}.attention.recurrent_layers", n_layer_all, None)
        if explicit is not None:
            return tuple(bool(v) for v in explicit)
        interval = meta.get_int("{arch}.full_attention_interval", 4)
        if interval <= 0:
            key = meta.key("{arch}.full_attention_interval")
            raise ModelFactsError(f"{meta.path}: {key} must be positive, not {interval}")
        return tuple(il < n_layer and (il + 1) % interval != 0 for il in layers)
    return tuple(False for _ in layers)


def _recurrent_facts(meta: Metadata, n_embd: int, n_head0: int) -> RecurrentFacts:
    """n_embd_r / n_embd_s (src/llama-hparams.cpp), from the ssm.*, wkv.*, shortconv.* keys."""
    d_conv = meta.get_int("{arch}.ssm.conv_kernel", 0)
    d_inner = meta.get_int("{arch}.ssm.inner_size", 0)
    d_state = meta.get_int("{arch}.ssm.state_size", 0)
    n_group = meta.get_int("{arch}.ssm.group_count", 0)
    dt_rank = meta.get_int("{arch}.ssm.time_step_rank", 0)
    wkv_head = meta.get_int("{arch}.wkv.head_size", 0)
    l_cache = meta.get_int("{arch}.shortconv.l_cache", 0)
    kda_head = meta.get_int("{arch}.kda.head_dim", 0)
    if wkv_head:
        r, s = meta.get_int("{arch}.token_shift_count", 2) * n_embd, n_embd * wkv_head
    elif l_cache:
        r, s = n_embd * (l_cache - 1), d_state * d_inner
    elif kda_head:
        r = 3 * (d_conv - 1 if d_conv > 0 else 3) * n_head0 * kda_head
        s = kda_head * kda_head * n_head0
    else:
        r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        s = d_state * d_inner
    dt_b_c_rms = bool(meta.get_bool("{arch}.ssm.dt_b_c_rms", False))
    return RecurrentFacts(r, s, d_conv, d_inner, d_state, n_group, dt_rank, dt_b_c_rms)


def _moe_facts(meta: Metadata, n_layer_all: int) -> MoEFacts | None:
    n_expert = meta.get_int("{arch}.expert_count", 0)
    if not n_expert:
        return None
    used = meta.per_layer("{arch}.expert_used_count", n_layer_all, (0,)) or (0,)
    ff_exp = meta.per_layer("{arch}.expert_feed_forward_length", n_layer_all, (0,)) or (0,)
    return MoEFacts(
        n_expert=n_expert,
        n_expert_used=max(used),
        n_expert_shared=meta.get_int("{arch}.expert_shared_count", 0),
        n_ff_exp=max(ff_exp),
        n_ff_shexp=meta.get_int("{arch}.expert_shared_feed_forward_length", 0),
        n_layer_dense_lead=meta.get_int("{arch}.leading_dense_block_count", 0),
    )


def _mla_facts(meta: Metadata, warnings: list[str]) -> MLAFacts | None:
    """hparams.is_mla(): both key_length_mla and value_length_mla present
    (src/models/deepseek2.cpp)."""
    if meta.has("{arch}.attention.key_length_mla") and meta.has(
        "{arch}.attention.value_length_mla"
    ):
        return MLAFacts(
            kv_lora_rank=meta.get_int("{arch}.attention.kv_lora_rank", 0),
            key_length_mla=meta.required_int("{arch}.attention.key_length_mla"),
            value_length_mla=meta.required_int("{arch}.attention.value_length_mla"),
            q_lora_rank=meta.get_int("{arch}.attention.q_lora_rank", 0),
        )
    if meta.arch in R.MLA_CAPABLE_ARCHS and meta.has("{arch}.attention.kv_lora_rank"):
        warnings.append(
            "converted before llama.cpp's MLA support (no attention.key_length_mla): "
            "the KV cache is a full multi-head cache, far larger than MLA's"
        )
    return None


def _n_layer_kv_from_start(meta: Metadata, n_layer_all: int) -> int:
    """Layers at or after this index reuse an earlier layer's KV (src/models/gemma3n.cpp,
    gemma4.cpp)."""
    if meta.arch in R.KV_FROM_START_FIXED:
        return min(R.KV_FROM_START_FIXED[meta.arch], n_layer_all)
    if meta.arch in R.KV_FROM_START_SHARED_KEY:
        shared: int = meta.get_int("{arch}.attention.shared_kv_layers", 0)
        return n_layer_all - shared
    return n_layer_all


def _n_vocab(meta: Metadata, model: GGUFModel) -> int:
    """llama_vocab's token count; files without a vocabulary fall back to vocab_size or
    token_embd."""
    n = meta.count("tokenizer.ggml.tokens") or meta.get_int("{arch}.vocab_size", 0)
    if n:
        return int(n)
    embd = model.tensor("token_embd.weight")
    return embd.shape[1] if embd is not None and len(embd.shape) > 1 else 0


def build_facts(model: GGUFModel) -> ModelFacts:
    """Derive ModelFacts from a parsed GGUF model (all shards), as llama_model::load_hparams
    does."""
    warnings: list[str] = []
    arch = model.metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFactsError(f"{model.path}: no general.architecture key; not a llama.cpp model")
    meta = Metadata(model.path, arch, model.metadata)
    warnings += _arch_warnings(arch)
    n_layer_all, n_nextn = _layer_counts(meta)
    n_layer = n_layer_all - n_nextn
    n_embd = meta.required_int("{arch}.embedding_length")
    _check_counts(meta, n_layer_all)
    n_head = meta.per_layer("{arch}.attention.head_count", n_layer_all, None) or (0,) * n_layer_all
    n_head_kv = meta.per_layer("{arch}.attention.head_count_kv", n_layer_all, n_head) or n_head
    n_ff = meta.per_layer("{arch}.feed_forward_length", n_layer_all, None) or (0,) * n_layer_all
    head_k, head_v = _head_sizes(meta, n_embd, n_head[0])
    swa = swa_facts(meta, n_layer_all, n_layer)
    is_recr = _recurrent_layers(meta, n_layer_all, n_layer, n_head_kv, n_ff)
    causal = arch not in R.NO_MEMORY_ARCHS and meta.get_bool("{arch}.attention.causal", True)
    kv_from_start = _n_layer_kv_from_start(meta, n_layer_all)
    has_kv = _has_kv(arch, n_layer, min(kv_from_start, n_layer), is_recr, n_ff)
    any_recr = any(is_recr) and causal
    facts = ModelFacts(
        path=model.path,
        architecture=arch,
        name=meta.get_str("general.name", "") or "",
        file_type=_file_type_label(meta, model),
        n_params=sum(t.n_elements for t in model.tensors),
        file_size=model.file_size,
        n_tensors=len(model.tensors),
        n_shards=len(model.shards),
        n_layer_all=n_layer_all,
        n_layer_nextn=n_nextn,
        n_ctx_train=meta.required_int("{arch}.context_length"),
        n_embd=n_embd,
        n_vocab=_n_vocab(meta, model),
        n_merges=meta.count("tokenizer.ggml.merges"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_embd_head_k=head_k,
        n_embd_head_v=head_v,
        n_embd_head_k_swa=meta.get_int("{arch}.attention.key_length_swa", head_k),
        n_embd_head_v_swa=meta.get_int("{arch}.attention.value_length_swa", head_v),
        swa=swa,
        mla=_mla_facts(meta, warnings),
        is_recurrent=is_recr,
        recurrent=_recurrent_facts(meta, n_embd, n_head[0]) if any_recr else None,
        moe=_moe_facts(meta, n_layer_all),
        n_layer_kv_from_start=kv_from_start,
        has_kv=has_kv,
        tied_embeddings=model.tensor("output.weight") is None,
        causal=causal,
        weights=weight_facts(model.tensors, n_layer_all),
        warnings=tuple(warnings),
        tensors=model.tensors,
        parallel_residual=meta.get_bool("{arch}.use_parallel_residual", False),
        data_end_bytes=sum(sh.data_offset + sh.data_size for sh in model.shards),
        has_chat_template=bool(meta.get_str("tokenizer.chat_template", "")),
        pooling_type=_pooling_type(meta.get_int("{arch}.pooling_type")),
        final_logit_softcapping=float(meta.get_float("{arch}.final_logit_softcapping", 0.0) or 0.0),
        expert_weights_scale=float(meta.get_float("{arch}.expert_weights_scale", 0.0) or 0.0),
        expert_weights_norm=meta.get_bool("{arch}.expert_weights_norm", False),
        expert_gating_func=meta.get_int("{arch}.expert_gating_func", 0) or 0,
        use_mrope=_use_mrope(meta.kv.get(meta.key("{arch}.rope.dimension_sections"))),
        embedding_scale=float(meta.get_float("{arch}.embedding_scale", 0.0) or 0.0),
        residual_scale=float(meta.get_float("{arch}.residual_scale", 0.0) or 0.0),
        n_expert_groups=meta.get_int("{arch}.expert_group_count", 0) or 0,
        n_group_used=meta.get_int("{arch}.expert_group_used_count", 0) or 0,
        attn_temp_scale=float(meta.get_float("{arch}.attention.temperature_scale", 0.0) or 0.0),
        logit_scale=float(meta.get_float("{arch}.logit_scale", 0.0) or 0.0),
        rope_finetuned=meta.get_bool("{arch}.rope.scaling.finetuned", None),
        norm_rms_eps=float(meta.get_float("{arch}.attention.layer_norm_rms_epsilon", 0.0) or 0.0),
        n_deepstack_layers=_n_deepstack_layers(meta),
        hidden_activation=meta.get_str("{arch}.hidden_activation", "") or "",
        n_layer_decision=meta.get_int("{arch}.decision.block_count", 0) or 0,
        pooling_type_cls=_pooling_type(meta.get_int("{arch}.classifier.pooling_type")),
        clamp_kqv=float(meta.get_float("{arch}.attention.clamp_kqv", 0.0) or 0.0),
        n_ctx_orig=meta.get_int("{arch}.rope.scaling.original_context_length", 0) or 0,
    )
    _check_head_sizes(meta, facts)
    _check_recurrent(meta, facts)
    return facts


def _check_recurrent(meta: Metadata, f: ModelFacts) -> None:
    """The sizes the recurrent layers' graphs divide by, checked once here, where they are read
    (issue #37 F1: a time_step_rank of 0 was a ZeroDivisionError in the graph replay).
    llama_model::load_hparams (src/llama-model.cpp) requires ssm.conv_kernel, inner_size,
    state_size, time_step_rank and group_count for these archs; build_mamba2_layer
    (src/models/mamba-base.cpp) takes head_dim = d_inner / ssm_dt_rank and norms d_inner in
    ssm_n_group groups; the gated DeltaNet (src/models/qwen3next.cpp) has ssm_dt_rank value heads
    of d_inner / ssm_dt_rank each, repeated over ssm_n_group key heads."""
    rec = f.recurrent
    divides = R.RECURRENT_DIVISORS.get(f.architecture)
    if rec is None or divides is None:
        return
    names = {
        "d_conv": "{arch}.ssm.conv_kernel",
        "d_inner": "{arch}.ssm.inner_size",
        "d_state": "{arch}.ssm.state_size",
        "dt_rank": "{arch}.ssm.time_step_rank",
        "n_group": "{arch}.ssm.group_count",
    }
    for size, name in names.items():
        value = getattr(rec, size)
        if value >= 1:
            continue
        key = meta.key(name)
        why = (
            f"key {key} = {value} must be at least 1" if meta.has(name) else f"key {key} is missing"
        )
        raise ModelFactsError(f"{meta.path}: {why}; {f.architecture}'s recurrent layers need it")
    for numerator, denominator in divides:
        n, d = getattr(rec, numerator), getattr(rec, denominator)
        if n % d:
            raise ModelFactsError(
                f"{meta.path}: key {meta.key(names[denominator])} = {d} does not divide "
                f"{meta.key(names[numerator])} = {n}; {f.architecture}'s recurrent layers "
                "need it to"
            )


def _check_head_sizes(meta: Metadata, f: ModelFacts) -> None:
    """Every layer that attends (a KV cache, KV heads) needs key and value heads of at least one
    element: llama_model::load_hparams (src/llama-model.cpp) divides embedding_length by head_count
    of layer 0 (n_embd_head_k = n_embd / n_head()) unless attention.key_length / value_length say,
    and a width of 0 describes no model (a head_count of 0, missing, or larger than
    embedding_length)."""
    for il in range(f.n_layer_all):
        if not (f.has_kv[il] and f.n_head_kv[il]):
            continue
        swa = f.swa.is_swa[il]
        for what, size, key in (
            ("key", f.n_embd_head_k_swa if swa else f.n_embd_head_k, "key_length"),
            ("value", f.n_embd_head_v_swa if swa else f.n_embd_head_v, "value_length"),
        ):
            if size >= 1:
                continue
            named = f"{{arch}}.attention.{key}{'_swa' if swa else ''}"
            heads = meta.key("{arch}.attention.head_count")
            if not f.n_head[
                0
            ]:  # load_hparams reads key_length / value_length only when n_head() > 0
                why = (
                    f"key {heads} = 0 on layer 0 leaves no head size"
                    if meta.has("{arch}.attention.head_count")
                    else f"key {heads} is missing, which leaves no head size"
                )
            elif meta.has(named) or (swa and meta.has(f"{{arch}}.attention.{key}")):
                given = named if meta.has(named) else f"{{arch}}.attention.{key}"
                why = f"key {meta.key(given)} = {meta.get_int(given)} must be at least 1"
            else:
                why = (
                    f"key {heads} = {f.n_head[0]} with embedding_length {f.n_embd} gives a {what} "
                    "head size of 0"
                )
            raise ModelFactsError(
                f"{meta.path}: {why}, yet layer {il} has {f.n_head_kv[il]} KV head(s)"
            )


def _check_counts(meta: Metadata, n_layer_all: int) -> None:
    """The asserts of llama_model::load_hparams (src/llama-model.cpp) and the indexes our facts
    take: one error naming the key and its value, instead of a crash later."""

    def bad(name: str, value: int, why: str) -> ModelFactsError:
        return ModelFactsError(f"{meta.path}: key {meta.key(name)} = {value} {why}")

    for name in ("{arch}.embedding_length", "{arch}.context_length"):
        if meta.required_int(name) == 0:
            raise bad(name, 0, "must be at least 1")
    n_expert = meta.get_int("{arch}.expert_count", 0)
    if n_expert > LLAMA_MAX_EXPERTS:
        raise bad(
            "{arch}.expert_count", n_expert, f"exceeds LLAMA_MAX_EXPERTS ({LLAMA_MAX_EXPERTS})"
        )
    used = max(meta.per_layer("{arch}.expert_used_count", n_layer_all, (0,)) or (0,))
    if used > n_expert or (n_expert and not used):
        raise bad("{arch}.expert_used_count", used, f"must be 1..expert_count ({n_expert})")
    for name in ("{arch}.leading_dense_block_count", "{arch}.attention.shared_kv_layers"):
        value = meta.get_int(name, 0)
        if value > n_layer_all:
            raise bad(name, value, f"exceeds block_count ({n_layer_all})")


def _has_kv(
    arch: str,
    n_layer: int,
    kv_end: int,
    is_recr: tuple[bool, ...],
    n_ff: tuple[int, ...],
) -> tuple[bool, ...]:
    """Per layer: does it own a K/V cache in the main context (layers below kv_end, not recurrent
    unless the arch also attends there; nemotron-h: MLP layers hold none). llama_model::
    create_memory (src/llama-model.cpp) makes none for the archs of NO_MEMORY_ARCHS only: a
    decoder whose GGUF says attention.causal false (an embedding model on a decoder arch)
    still gets its cache (a Llama 3.2 1B shape made non-causal: "CPU KV buffer size = 128.00
    MiB" at -c 4096, b11434)."""
    if arch in R.NO_MEMORY_ARCHS or arch in R.RECURRENT_ARCHS:
        return (False,) * len(is_recr)
    return tuple(
        il < kv_end
        and (not is_recr[il] or arch in R.RECR_AND_ATTENTION_EVERY_LAYER)
        and (arch not in R.RECR_IF_NO_KV_HEADS_AND_NO_FFN or n_ff[il] == 0)
        for il in range(len(is_recr))
    )


def _arch_warnings(arch: str) -> list[str]:
    """What llamafit cannot model for this architecture."""
    warnings = []
    if arch not in _known_archs():
        warnings.append(
            f"architecture '{arch}' is unknown to this llamafit: facts come from the generic keys "
            "(full attention on every layer, no recurrent state)"
        )
    if arch in R.UNMODELLED_CACHES:
        cache = R.UNMODELLED_CACHES[arch]
        warnings.append(
            f"the {cache} of '{arch}' is not modelled: KV predictions are a lower bound"
        )
    return warnings


def _n_deepstack_layers(meta: Metadata) -> int:
    """llama_hparams::n_deepstack_layers: {arch}.n_deepstack_layers (qwen3vl.cpp), or the
    distinct non-negative entries of {arch}.deepstack_mapping (granite.cpp, Granite Vision)."""
    mapping = meta.kv.get(meta.key("{arch}.deepstack_mapping"))
    if isinstance(mapping, list):
        return len({v for v in mapping if isinstance(v, int) and v >= 0})
    return meta.get_int("{arch}.n_deepstack_layers", 0) or 0


def _use_mrope(sections: object) -> bool:
    """llama_hparams::use_mrope over {arch}.rope.dimension_sections (an array of 4 ints)."""
    if not isinstance(sections, (list, tuple)) or len(sections) < 2:
        return False
    first, second = sections[0], sections[1]
    return isinstance(first, int) and isinstance(second, int) and first > 0 and second > 0


def _layer_counts(meta: Metadata) -> tuple[int, int]:
    """(block_count, nextn_predict_layers), checked as llama_model::load_hparams does."""
    n_layer_all = meta.required_int("{arch}.block_count")
    if not 0 < n_layer_all <= LLAMA_MAX_LAYERS:
        raise ModelFactsError(
            f"{meta.path}: block_count {n_layer_all} is outside 1..{LLAMA_MAX_LAYERS}"
        )
    n_nextn = meta.get_int("{arch}.nextn_predict_layers", 0)
    if n_nextn >= n_layer_all:
        raise ModelFactsError(
            f"{meta.path}: key {meta.key('{arch}.nextn_predict_layers')} = {n_nextn} leaves no "
            f"layer of block_count {n_layer_all} to run"
        )
    return n_layer_all, n_nextn


def _head_sizes(meta: Metadata, n_embd: int, n_head0: int) -> tuple[int, int]:
    """key_length / value_length, defaulting to n_embd / n_head of layer 0 (0 without heads)."""
    default = n_embd // n_head0 if n_head0 else 0
    if not n_head0:
        return 0, 0
    return meta.get_int("{arch}.attention.key_length", default), meta.get_int(
        "{arch}.attention.value_length", default
    )


def _known_archs() -> frozenset[str]:
    """gguf's architecture names, plus the newer ones our per-arch tables name (llama.cpp
    0c1e570)."""
    ours = (
        R.RECURRENT_ARCHS
        | R.HYBRID_ARCHS
        | R.NO_MEMORY_ARCHS
        | R.MLA_CAPABLE_ARCHS
        | frozenset(R.SWA_RULES)
        | frozenset(R.UNMODELLED_CACHES)
    )
    return ARCH_NAMES | ours


LLAMA_MAX_LAYERS = 512  # src/llama-hparams.h
LLAMA_MAX_EXPERTS = 1024  # src/llama-hparams.h
