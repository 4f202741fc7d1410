"""Resolve a LaunchConfig the way llama-server and libllama do, for one model and llama.cpp build.

Mirrors llama_context::llama_context (src/llama-context.cpp: n_batch/n_ubatch caps, PAD(n_ctx,
256), n_ctx_seq and streams), llama_init_from_model (quantized V needs flash attention, MLA needs
type_k == type_v, block sizes dividing head sizes), tools/server (np auto = 4 unified slots,
n_outputs_max = n_parallel) and common/fit.cpp (non-unified -np without -c gets n_ctx_train per
stream). Every rejection raises ConfigError with llama.cpp's own wording where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import N_PARALLEL_AUTO, NGL_ALL, NGL_AUTO, LaunchConfig
from .errors import InputError
from .facts import ModelFacts
from .ggml_types import KV_CACHE_TYPES, GGMLType
from .kv import pad, swa_cells
from .tensor_names import LLM_FFN_DENSE_REGEX, LLM_FFN_EXPS_REGEX

# llama.cpp: tools/server/server.cpp llama_server (n_parallel < 0: 4 slots, kv_unified = true)
SERVER_AUTO_SLOTS = 4
LLAMA_MAX_SEQ = 256  # src/llama-cparams.h

# [ver] llama.cpp build numbers where memory-relevant behaviour changed (estimates where noted).
# PR #23861 "llama: limit max outputs of llama_context" (merged 2026-06-01): llama-server then
# reserves n_parallel outputs instead of n_batch. Releases b9315 (late May 2026) and b9623
# (2026-06-13) bracket the merge; b9400 is our estimate of the first build with it.
BUILD_SERVER_OUTPUT_LIMIT = 9400
# PR #16812 (2025-10-28) dropped the context padding; PR #17046 (2025-11-06) restored PAD 256 for
# everything. Before: 256 with flash attention, 32 without (kv-cache get_padding, PR #7257).
# Build numbers are estimates from the release dates (b6860 ≈ 2025-10-28, b6980 ≈ 2025-11-06).
BUILD_NO_PADDING = 6860
BUILD_PAD_256 = 6980


class ConfigError(InputError):
    """A configuration llama.cpp would reject."""


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """The values libllama actually runs with (cparams), plus server-side settings."""

    engine: str
    n_ctx: int  # total KV cells over all streams (padded)
    n_ctx_seq: int  # cells per stream: the context one slot can hold
    n_seq_max: int  # slots / sequences
    n_stream: int  # KV streams: 1 when unified, else n_seq_max
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_outputs_max: int  # outputs the context reserves (logits rows)
    flash_attn: bool
    type_k: GGMLType
    type_v: GGMLType
    n_gpu_layers: int  # llama.cpp's count, output layer included: 0 … n_layer_all + 1
    n_swa_cells: int  # SWA cache cells per stream (0 without SWA)
    swa_full: bool
    kv_offload: bool
    overrides: tuple[tuple[str, str], ...]  # the user's -ot rules: regex → buffer type
    cpu_moe: bool  # --cpu-moe: every block's expert matrices on the CPU
    n_cpu_moe: int  # --n-cpu-moe N: the first N blocks' experts on the CPU
    n_cpu_ffn: int  # --n-cpu-ffn N: the first N blocks' dense FFN on the CPU
    tensor_split: tuple[float, ...]
    split_mode: str
    main_gpu: int
    load_mode: str
    cache_ram_bytes: int
    warnings: tuple[str, ...]

    @property
    def all_overrides(self) -> tuple[tuple[str, str], ...]:
        """Every tensor override in llama.cpp's order: -ot, then the MoE/FFN shortcuts (common/common.h)."""
        rules = list(self.overrides)
        if self.cpu_moe:
            rules.append((LLM_FFN_EXPS_REGEX, "CPU"))
        rules += [(rf"blk\.{i}{LLM_FFN_EXPS_REGEX}", "CPU") for i in range(self.n_cpu_moe)]
        rules += [(rf"blk\.{i}{LLM_FFN_DENSE_REGEX}", "CPU") for i in range(self.n_cpu_ffn)]
        return tuple(rules)


def _kv_type(name: str, which: str) -> GGMLType:
    if name.lower() not in KV_CACHE_TYPES:
        raise ConfigError(f"unsupported cache type {which} '{name}'; allowed: {', '.join(KV_CACHE_TYPES)}")
    return GGMLType.named(name)


def _slots(cfg: LaunchConfig, engine: str) -> tuple[int, bool]:
    if cfg.n_parallel == N_PARALLEL_AUTO and engine == "llama-server":
        return SERVER_AUTO_SLOTS, True
    n_seq = max(1, cfg.n_parallel)
    if n_seq > LLAMA_MAX_SEQ:
        raise ConfigError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}")
    return n_seq, cfg.kv_unified


def _padding(build: int | None, flash_attn: bool) -> int:
    if build is None or build >= BUILD_PAD_256:
        return 256
    if build >= BUILD_NO_PADDING:
        return 1
    return 256 if flash_attn else 32


def _context(cfg: LaunchConfig, facts: ModelFacts, engine: str, n_seq: int, unified: bool) -> int:
    """-c, with 0 = n_ctx_train; fit gives each non-unified stream n_ctx_train when -c is unset."""
    if cfg.n_ctx < 0:
        raise ConfigError(f"invalid context size {cfg.n_ctx}")
    if cfg.n_ctx:
        return cfg.n_ctx
    if engine == "llama-server" and cfg.fit and not unified:
        return facts.n_ctx_train * n_seq  # common/fit.cpp step 0: n_ctx 0 (given or not) → n_ctx_train per stream
    return facts.n_ctx_train


def _flash_attn(cfg: LaunchConfig, facts: ModelFacts, type_v: GGMLType) -> tuple[bool, list[str]]:
    """-fa auto stays on where the backend supports it (CPU, CUDA, Metal, Vulkan); llama_init_from_model
    forces it off for Grok and on for a quantized V cache."""
    notes = []
    mode = cfg.flash_attn
    if mode != "off" and facts.architecture == "grok":
        notes.append("flash_attn is not compatible with Grok - forcing off")
        mode = "off"
    if type_v.is_quantized and mode == "auto":
        notes.append("enabling flash_attn since it is required for quantized V cache")
    if type_v.is_quantized and mode == "off":
        raise ConfigError("quantized V cache requires flash_attn to be enabled; add -fa on")
    return mode != "off", notes


def _check_block_sizes(facts: ModelFacts, tk: GGMLType, tv: GGMLType, flash_attn: bool) -> None:
    """llama_init_from_model: with flash attention a quantized block must divide every head size;
    without it ggml_row_size still needs whole blocks in each K row."""
    for il in range(facts.n_layer):
        swa = facts.swa.is_swa[il]
        heads = (("K", tk, facts.n_embd_head_k_swa if swa else facts.n_embd_head_k),
                 ("V", tv, facts.n_embd_head_v_swa if swa else facts.n_embd_head_v))  # fmt: skip
        for which, t, head in heads:
            if flash_attn and t.is_quantized and head % t.block_size:
                raise ConfigError(f"{which} cache type {t.name.lower()} with block size {t.block_size} "
                                  f"does not divide n_embd_head_{which.lower()}={head}")  # fmt: skip
        if not flash_attn and facts.has_kv[il] and facts.n_embd_k_gqa(il) % tk.block_size:
            raise ConfigError(f"K cache type {tk.name.lower()} does not divide the K row of layer {il}")


def _n_gpu_layers(cfg: LaunchConfig, facts: ModelFacts) -> int:
    """llama_model::n_gpu_layers(): negative (auto, all) means every layer plus the output layer."""
    if cfg.n_gpu_layers in (NGL_AUTO, NGL_ALL) or cfg.n_gpu_layers < 0:
        return facts.n_layer_all + 1
    return min(cfg.n_gpu_layers, facts.n_layer_all + 1)


def _outputs(engine: str, build: int | None, n_batch: int, n_seq: int) -> int:
    """n_outputs_max: llama-server and llama-cli (from PR #23861) min(n_batch, n_parallel); otherwise n_batch."""
    # llama-cli at 0c1e570 runs llama_server in a thread (tools/cli/cli-server.h): the same limit
    if engine in ("llama-server", "llama-cli") and (build is None or build >= BUILD_SERVER_OUTPUT_LIMIT):
        return min(n_batch, n_seq)
    return n_batch


def resolve(cfg: LaunchConfig, facts: ModelFacts, *, engine: str = "llama-server",
            build: int | None = None) -> ResolvedConfig:  # fmt: skip
    """The configuration llama.cpp would run, or ConfigError where it would refuse to start."""
    type_k, type_v = _kv_type(cfg.type_k, "K"), _kv_type(cfg.type_v, "V")
    if facts.mla is not None and type_k != type_v:
        raise ConfigError(f"model does not support different K ({type_k.name.lower()}) and V "
                          f"({type_v.name.lower()}) cache types (MLA: give -ctk X -ctv X)")
    flash_attn, notes = _flash_attn(cfg, facts, type_v)
    _check_block_sizes(facts, type_k, type_v, flash_attn)
    n_seq, unified = _slots(cfg, engine)
    if cfg.n_batch < 1 or cfg.n_ubatch < 1:
        raise ConfigError("batch sizes must be at least 1")
    n_ctx = _context(cfg, facts, engine, n_seq, unified)
    n_batch = min(n_ctx, cfg.n_batch) if facts.causal else cfg.n_batch
    n_ubatch = min(n_batch, cfg.n_ubatch)
    n_ctx = pad(n_ctx, _padding(build, flash_attn))
    n_ctx_seq = n_ctx if unified else pad(n_ctx // n_seq, 256)
    if n_ctx_seq == 0:
        raise ConfigError("n_ctx_seq == 0: the context is smaller than one cell per slot")
    n_stream = 1 if unified else n_seq
    swa = 0
    if facts.swa.swa_type != "none":
        swa = swa_cells(n_ctx_seq, facts.swa.n_swa, n_seq, n_ubatch, unified=unified, swa_full=cfg.swa_full)
    if n_ctx_seq > facts.n_ctx_train:
        notes.append(f"n_ctx_seq ({n_ctx_seq}) > n_ctx_train ({facts.n_ctx_train}): possible training context overflow")
    return ResolvedConfig(
        engine=engine, n_ctx=n_ctx_seq * n_stream, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq, n_stream=n_stream,
        kv_unified=unified, n_batch=n_batch, n_ubatch=n_ubatch,
        n_outputs_max=_outputs(engine, build, n_batch, n_seq), flash_attn=flash_attn, type_k=type_k,
        type_v=type_v, n_gpu_layers=_n_gpu_layers(cfg, facts), n_swa_cells=swa, swa_full=cfg.swa_full,
        kv_offload=cfg.kv_offload, overrides=cfg.override_tensor, cpu_moe=cfg.cpu_moe,
        n_cpu_moe=cfg.n_cpu_moe, n_cpu_ffn=cfg.n_cpu_ffn, tensor_split=cfg.tensor_split,
        split_mode=cfg.split_mode, main_gpu=cfg.main_gpu, load_mode=cfg.load_mode,
        cache_ram_bytes=max(cfg.cache_ram_mib, 0) << 20, warnings=tuple(notes),
    )  # fmt: skip
