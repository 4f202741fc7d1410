"""Resolve a LaunchConfig the way llama-server and libllama do, for one model and llama.cpp build.

Mirrors llama_context::llama_context (src/llama-context.cpp: n_batch/n_ubatch caps, PAD(n_ctx,
256), n_ctx_seq and streams), llama_init_from_model (quantized V needs flash attention, MLA needs
type_k == type_v, block sizes dividing head sizes), tools/server (np auto = 4 unified slots,
n_outputs_max = n_parallel) and common/fit.cpp (non-unified -np without -c gets n_ctx_train per
stream). Every rejection raises ConfigError with llama.cpp's own wording where it has one.
"""

from __future__ import annotations

from dataclasses import replace

from ..builds import BUILD_RULES as BUILD_RULES
from ..builds import BUILD_SERVER_OUTPUT_LIMIT as BUILD_SERVER_OUTPUT_LIMIT
from ..builds import PINNED_BUILD as PINNED_BUILD
from ..builds import BuildRule as BuildRule
from ..builds import build_of as build_of
from ..builds import since as since
from ..errors import InputError
from ..facts.arch_rules import HYBRID_ARCHS
from ..facts.hparams import ModelFacts
from ..reader.ggml_types import KV_CACHE_TYPES, GGMLType
from ..units import pad
from .config import N_PARALLEL_AUTO, NGL_ALL, NGL_AUTO, POOLING_TYPES, LaunchConfig
from .graph.cparams import LLAMA_MAX_SEQ, OP_OFFLOAD_MIN_BATCH
from .graph.cparams import ResolvedConfig as ResolvedConfig
from .kv import swa_cells

# llama.cpp: tools/server/server.cpp llama_server (n_parallel < 0: 4 slots, kv_unified = true)
SERVER_AUTO_SLOTS = 4


class ConfigError(InputError):
    """A configuration llama.cpp would reject."""


def _kv_type(name: str, which: str) -> GGMLType:
    if name.lower() not in KV_CACHE_TYPES:
        raise ConfigError(
            f"unsupported cache type {which} '{name}'; allowed: {', '.join(KV_CACHE_TYPES)}"
        )
    return GGMLType.named(name)


def _slots(cfg: LaunchConfig, engine: str, build: int | None = None) -> tuple[int, bool]:
    if cfg.n_parallel == N_PARALLEL_AUTO and engine == "llama-server":
        if not since("np_auto_unified", build):
            return 1, cfg.kv_unified  # PR #16736: before it, -np defaulted to one slot
        return SERVER_AUTO_SLOTS, True
    n_seq = max(1, cfg.n_parallel)
    if n_seq > LLAMA_MAX_SEQ:
        raise ConfigError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}")
    if not since("kv_streams", build):
        return n_seq, True  # PR #14363: before it, one unified stream for every sequence
    return n_seq, cfg.kv_unified


def kv_streams(cfg: LaunchConfig, engine: str, build: int | None = None) -> int:
    """The KV streams resolve gives cfg (ResolvedConfig.n_stream: n_seq_max without a unified
    cache, else 1), from the slots alone: the context, KV types, flash attention and batch play
    no part (ConfigError where _slots refuses the slots)."""
    n_seq, unified = _slots(cfg, engine, build)
    return 1 if unified else n_seq


def _padding(build: int | None, flash_attn: bool) -> int:
    """n_ctx padding by build: 256 (PR #17046), none (PR #16812), else 256 with FA and 32
    without."""
    if since("ctx_pad_256", build):
        return 256
    if since("no_ctx_padding", build):
        return 1
    return 256 if flash_attn else 32


def _context(cfg: LaunchConfig, facts: ModelFacts, engine: str, n_seq: int, unified: bool) -> int:
    """-c, with 0 = n_ctx_train; fit gives each non-unified stream n_ctx_train when -c is unset."""
    if cfg.n_ctx < 0:
        raise ConfigError(f"invalid context size {cfg.n_ctx}")
    if cfg.n_ctx:
        return cfg.n_ctx
    if engine == "llama-server" and cfg.fit and not unified:
        # common/fit.cpp step 0: n_ctx 0 (given or not) → n_ctx_train per stream
        return facts.n_ctx_train * n_seq
    return facts.n_ctx_train


def _flash_attn(
    cfg: LaunchConfig, facts: ModelFacts, type_v: GGMLType, build: int | None = None
) -> tuple[str, list[str]]:
    """-fa as llama_init_from_model (src/llama-context.cpp) leaves it: "on", "off" or "auto"
    (llama_context's device check decides it later: settle_flash_attn). It forces it off for Grok;
    a quantized V cache turns auto into on from rule fa_auto_quant_v (before, auto stayed auto and
    llama_context threw where the check turned it off). Before PR #15434 there was no auto: off."""
    notes = []
    mode = cfg.flash_attn
    if mode == "auto" and not since("fa_auto", build):
        mode = "off"
    if mode != "off" and facts.architecture == "grok":
        notes.append("flash_attn is not compatible with Grok - forcing off")
        mode = "off"
    if type_v.is_quantized and mode == "auto" and since("fa_auto_quant_v", build):
        notes.append("enabling flash_attn since it is required for quantized V cache")
        mode = "on"
    if type_v.is_quantized and mode == "off":
        raise ConfigError("quantized V cache requires flash_attn to be enabled; add -fa on")
    return mode, notes


def settle_flash_attn(rc: ResolvedConfig, mismatch: tuple[int, str, str] | None) -> ResolvedConfig:
    """-fa auto after llama_context's device check (replay.fa_auto_mismatch: the first layer
    whose FLASH_ATTN_EXT the scheduler put on another device, or None): flash attention off
    where there is one, with the cache as made for it (fa_auto_off), else on. llama_context then
    throws for a quantized V cache ("quantized V cache was requested, but this requires Flash
    Attention"; before rule fa_auto_quant_v only: after it a quantized V made -fa on)."""
    if not rc.fa_auto:
        return rc
    if mismatch is None:
        return replace(rc, fa_auto=False)
    if rc.type_v.is_quantized:
        il, layer, on = mismatch
        raise ConfigError(
            "quantized V cache was requested, but this requires Flash Attention (-fa auto "
            f"turned it off: layer {il}'s flash attention would run on {on}, not {layer}); "
            "use -ctv f16 or -fa on"
        )
    return replace(rc, flash_attn=False, fa_auto=False, fa_auto_off=mismatch)


_BLOCK_CHECKS: dict[tuple[int, GGMLType, GGMLType, bool], tuple[ModelFacts, str | None]] = {}


def _check_block_sizes(facts: ModelFacts, tk: GGMLType, tv: GGMLType, flash_attn: bool) -> None:
    """llama_init_from_model: with flash attention a quantized block must divide every head size;
    without it ggml_row_size still needs whole blocks in each K row. Once per model and KV
    choice."""
    key = (id(facts), tk, tv, flash_attn)
    hit = _BLOCK_CHECKS.get(key)
    if hit is None or hit[0] is not facts:
        if len(_BLOCK_CHECKS) >= 256:
            _BLOCK_CHECKS.clear()
        # keeps facts (its id) alive
        hit = _BLOCK_CHECKS[key] = (
            facts,
            _block_size_error(facts, tk, tv, flash_attn),
        )
    if hit[1] is not None:
        raise ConfigError(hit[1])


def _block_size_error(
    facts: ModelFacts, tk: GGMLType, tv: GGMLType, flash_attn: bool
) -> str | None:
    try:
        _check_each_block(facts, tk, tv, flash_attn)
    except ConfigError as e:
        return str(e)
    return None


def _check_each_block(facts: ModelFacts, tk: GGMLType, tv: GGMLType, flash_attn: bool) -> None:
    for il in range(facts.n_layer):
        swa = facts.swa.is_swa[il]
        heads = (
            ("K", tk, facts.n_embd_head_k_swa if swa else facts.n_embd_head_k),
            ("V", tv, facts.n_embd_head_v_swa if swa else facts.n_embd_head_v),
        )
        for which, t, head in heads:
            if flash_attn and t.is_quantized and head % t.block_size:
                raise ConfigError(
                    f"{which} cache type {t.name.lower()} with block size {t.block_size} "
                    f"does not divide n_embd_head_{which.lower()}={head}"
                )
        if not flash_attn and facts.has_kv[il] and facts.n_embd_k_gqa(il) % tk.block_size:
            raise ConfigError(
                f"K cache type {tk.name.lower()} does not divide the K row of layer {il}"
            )


def _n_gpu_layers(cfg: LaunchConfig, facts: ModelFacts, build: int | None = None) -> int:
    """llama_model::n_gpu_layers(): negative (auto, all) means every layer plus the output layer.
    Before PR #15434 an unset -ngl meant 0 (everything on the CPU)."""
    if (
        cfg.n_gpu_layers == NGL_AUTO
        and "n_gpu_layers" not in cfg.given
        and not since("fa_auto", build)
    ):
        return 0
    if cfg.n_gpu_layers in (NGL_AUTO, NGL_ALL) or cfg.n_gpu_layers < 0:
        return facts.n_layer_all + 1
    return min(cfg.n_gpu_layers, facts.n_layer_all + 1)


def _pooling(cfg: LaunchConfig, facts: ModelFacts) -> str:
    """llama_context::llama_context (src/llama-context.cpp): an unspecified pooling type takes the
    model's (llama_hparams::pooling_type), and none when the model has none either."""
    if cfg.pooling:
        return cfg.pooling
    return POOLING_TYPES[facts.pooling_type] if facts.pooling_type >= 0 else "none"


# llama_model_has_encoder (src/llama-model.cpp): the archs with an encoder graph
HAS_ENCODER = frozenset({"t5", "t5encoder", "eagle3", "dflash"})


def _outputs(
    engine: str,
    build: int | None,
    n_batch: int,
    n_seq: int,
    *,
    embeddings: bool = False,
    encoder: bool = False,
) -> int:
    """n_outputs_max: llama-server and llama-cli (from PR #23861) min(n_batch, n_parallel);
    otherwise n_batch. server_output_limits (tools/server/server-context.cpp) keeps n_batch for
    embeddings (--embeddings, or a --pooling other than none): every token of the batch is an
    output; so does llama_context's constructor for a model with an encoder (src/llama-context.cpp,
    llama_model_has_encoder, b11311 and b11434)."""
    # llama-cli at 0c1e570 runs llama_server in a thread (tools/cli/cli-server.h): the same limit
    if (
        engine in ("llama-server", "llama-cli")
        and since("server_output_limit", build)
        and not embeddings
        and not encoder
    ):
        return min(n_batch, n_seq)
    return n_batch


def hybrid_kv_whole(facts: ModelFacts, n_stream: int, build: int | None) -> bool:
    """Whether every stream of the attention cache holds the whole cparams.n_ctx (n_ctx_seq x
    the streams): before rule hybrid_kv_seq (PR #19559) llama_model::create_memory
    (src/llama-model.cpp) gave a hybrid model's llama_memory_hybrid that many cells per stream."""
    return n_stream > 1 and facts.architecture in HYBRID_ARCHS and not since("hybrid_kv_seq", build)


def resolve(
    cfg: LaunchConfig, facts: ModelFacts, *, engine: str = "llama-server", build: int | None = None
) -> ResolvedConfig:
    """The configuration llama.cpp would run, or ConfigError where it would refuse to start."""
    type_k, type_v = _kv_type(cfg.type_k, "K"), _kv_type(cfg.type_v, "V")
    if facts.mla is not None and type_k != type_v:
        raise ConfigError(
            f"model does not support different K ({type_k.name.lower()}) and V "
            f"({type_v.name.lower()}) cache types (MLA: give -ctk X -ctv X)"
        )
    fa_mode, notes = _flash_attn(cfg, facts, type_v, build)
    flash_attn = fa_mode != "off"  # auto counts as on until llama_context's check
    _check_block_sizes(facts, type_k, type_v, flash_attn)
    n_seq, unified = _slots(cfg, engine, build)
    if cfg.n_batch < 1 or cfg.n_ubatch < 1:
        raise ConfigError("batch sizes must be at least 1")
    n_ctx = _context(cfg, facts, engine, n_seq, unified)
    n_batch = min(n_ctx, cfg.n_batch) if facts.causal else cfg.n_batch
    n_ubatch = min(n_batch, cfg.n_ubatch)
    if cfg.embeddings and engine in ("llama-server", "llama-cli"):
        # embeddings need the whole batch in one ubatch: tools/server/server.cpp main (and
        # common_init_from_params, common/common.cpp) set n_batch = n_ubatch when it is larger
        n_batch = n_ubatch
    n_ctx = pad(n_ctx, _padding(build, flash_attn))
    # per-stream padding came with PR #17046; before, n_ctx_seq = n_ctx / n_seq_max
    n_ctx_seq = n_ctx
    if not unified:
        n_ctx_seq = pad(n_ctx // n_seq, 256) if since("ctx_pad_256", build) else n_ctx // n_seq
    if n_ctx_seq == 0:
        raise ConfigError("n_ctx_seq == 0: the context is smaller than one cell per slot")
    n_stream = 1 if unified else n_seq
    embeddings = cfg.embeddings or cfg.pooling not in ("", "none")  # server_output_limits' test
    swa = 0
    if facts.swa.swa_type != "none":
        swa = swa_cells(
            n_ctx_seq,
            facts.swa.n_swa,
            n_seq,
            n_ubatch,
            unified=unified,
            swa_full=cfg.swa_full,
            pad_to=_padding(build, flash_attn),
        )
    if n_ctx_seq > facts.n_ctx_train:
        notes.append(
            f"n_ctx_seq ({n_ctx_seq}) > n_ctx_train ({facts.n_ctx_train}): possible training "
            "context overflow"
        )
    return ResolvedConfig(
        engine=engine,
        n_ctx=n_ctx_seq * n_stream,
        n_ctx_seq=n_ctx_seq,
        n_seq_max=n_seq,
        n_stream=n_stream,
        kv_unified=unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_outputs_max=_outputs(
            engine,
            build,
            n_batch,
            n_seq,
            embeddings=embeddings,
            encoder=facts.architecture in HAS_ENCODER,
        ),
        flash_attn=flash_attn,
        fa_auto=fa_mode == "auto",
        type_k=type_k,
        type_v=type_v,
        n_gpu_layers=_n_gpu_layers(cfg, facts, build),
        n_swa_cells=swa,
        swa_full=cfg.swa_full,
        kv_offload=cfg.kv_offload,
        overrides=cfg.override_tensor,
        cpu_moe=cfg.cpu_moe,
        n_cpu_moe=min(cfg.n_cpu_moe, facts.n_layer_all),
        n_cpu_ffn=min(cfg.n_cpu_ffn, facts.n_layer_all),
        tensor_split=cfg.tensor_split,
        split_mode=cfg.split_mode,
        main_gpu=cfg.main_gpu,
        load_mode=cfg.load_mode,
        cache_ram_bytes=max(cfg.cache_ram_mib, 0) << 20,
        warnings=tuple(notes),
        op_offload=cfg.op_offload,
        repack=cfg.repack,
        no_host=cfg.no_host,
        op_offload_min_batch=cfg.op_offload_min_batch
        if since("op_offload_env", build)
        else OP_OFFLOAD_MIN_BATCH,
        build=build,
        embeddings=cfg.embeddings,
        pooling=_pooling(cfg, facts),
        kv_whole_ctx=hybrid_kv_whole(facts, n_stream, build),
    )
