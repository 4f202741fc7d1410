"""Resolve a LaunchConfig the way llama-server and libllama do, for one model and llama.cpp build.

Mirrors llama_context::llama_context (src/llama-context.cpp: n_batch/n_ubatch caps, PAD(n_ctx,
256), n_ctx_seq and streams), llama_init_from_model (quantized V needs flash attention, MLA needs
type_k == type_v, block sizes dividing head sizes), tools/server (np auto = 4 unified slots,
n_outputs_max = n_parallel) and common/fit.cpp (non-unified -np without -c gets n_ctx_train per
stream). Every rejection raises ConfigError with llama.cpp's own wording where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..facts.hparams import ModelFacts
from ..facts.tensor_names import LLM_FFN_DENSE_REGEX, LLM_FFN_EXPS_REGEX
from ..reader.ggml_types import KV_CACHE_TYPES, GGMLType
from .config import N_PARALLEL_AUTO, NGL_ALL, NGL_AUTO, POOLING_TYPES, LaunchConfig
from .kv import pad, swa_cells

# llama.cpp: tools/server/server.cpp llama_server (n_parallel < 0: 4 slots, kv_unified = true)
SERVER_AUTO_SLOTS = 4
# ggml-cuda.cu / ggml-vulkan.cpp device init: the threshold without the env variable
OP_OFFLOAD_MIN_BATCH = 32
LLAMA_MAX_SEQ = 256  # src/llama-cparams.h


@dataclass(frozen=True, slots=True)
class BuildRule:
    """One memory-relevant behaviour of llama.cpp that changed, keyed by the first build with it."""

    key: str
    # first llama.cpp build (bNNNN) with the new behaviour; estimates are marked in `change`
    build: int
    pr: int  # ggml-org/llama.cpp pull request
    merged: str  # merge date
    change: str


# [ver] THE table of rules that changed over llama.cpp's history (--llama-build N and the detected
# server build select the side). Build numbers are dated from the PR's merge date against builds
# that public reports print with a date (b7079 2025-11-16, issue #17300; b8284 2026-03-11, #20431;
# b9425 2026-05-30, #23894): about ten builds a day, so a number is good to a few days' builds.
BUILD_RULES: tuple[BuildRule, ...] = (
    BuildRule(
        "pooling_per_seq",
        5700,
        14217,
        "2025-06 (b5700 estimate)",
        "embeddings pooling inputs are per sequence: inp_mean n_tokens x n_seqs F32, inp_cls "
        "n_seqs I32 (before: n_tokens x n_tokens and n_tokens; llm_graph_context::build_inp_mean, "
        "src/llama-graph.cpp)",
    ),
    BuildRule(
        "glu_op",
        5780,
        14158,
        "2025-06 (b5780 estimate: after 06-13, before the follow-ups of 06-30)",
        "a gate fused into ffn_up (glm4, phi3, chatglm: LLM_FFN_SWIGLU without ffn_gate) is one "
        "ggml_swiglu over up's [2 n_ff] output (before: two ggml_cont copies of its halves, "
        "[n_ff] each, live with up at the activation; build_ffn, src/llama-graph.cpp)",
    ),
    BuildRule(
        "kv_streams",
        5913,
        14363,
        "2025-07-16",
        "the KV cache can be split into one stream per sequence (kv_unified = false, the default "
        "of libllama and llama-server); before, every sequence shared one unified buffer of n_ctx "
        "cells and the reserve graph attends over all of them (b5913: issue #14847, its "
        "seq_to_stream assert)",
    ),
    BuildRule(
        "kv_set_rows",
        6090,
        14959,
        "2025-08 (after 08-01)",
        "KV writes through ggml_set_rows by default: K/V row-index graph inputs (before: views + "
        "ggml_cpy, no index inputs; PR #14285 added it behind LLAMA_SET_ROWS=1)",
    ),
    BuildRule(
        "fa_auto",
        6325,
        15434,
        "2025-08-30",
        "-fa on|off|auto with auto the default (before: a boolean "
        "-fa, off unless given) and -ngl defaults to all layers (before: 0)",
    ),
    BuildRule(
        "fused_qkv_views",
        6420,
        15662,
        "2025-09-08",
        "fused QKV weights are split into Q/K/V by views "
        "(before: contiguous copies of each, ggml_cont, in the compute buffer)",
    ),
    BuildRule(
        "no_ctx_padding",
        6890,
        16812,
        "2025-10-28",
        "the KV cache is no longer padded (before: n_ctx and the "
        "SWA cache padded to 256 with flash attention, 32 without: kv-cache get_padding, PR #7257)",
    ),
    BuildRule(
        "ctx_pad_256",
        6980,
        17046,
        "2025-11-06",
        "n_ctx, n_ctx_seq (per stream) and the SWA cache are padded to 256 again, for every "
        "backend (before #16812: n_ctx only, per stream n_ctx / n_seq unpadded)",
    ),
    BuildRule(
        "np_auto_unified",
        7000,
        16736,
        "2025-11 (estimate)",
        "llama-server -np defaults to auto = 4 slots with a unified KV cache (before: 1 slot)",
    ),
    BuildRule(
        "ngl_output_first",
        7400,
        18148,
        "2025-12-17",
        "-ngl N offloads the output layer first, then the "
        "last N-1 blocks (before: the last N blocks, the output layer only when N > n_layer)",
    ),
    BuildRule(
        "op_offload_env",
        7590,
        18535,
        "2026-01 (b7590 estimate)",
        "GGML_OP_OFFLOAD_MIN_BATCH sets the batch from which a GPU takes host-weight ops (before: "
        "32 hard-coded in each backend's offload_op)",
    ),
    BuildRule(
        "inp_embd_both",
        7750,
        18898,
        "2026-01-17",
        "the graph holds both the token-id and the embeddings "
        "input and selects one (ggml_build_forward_select; before: one of them)",
    ),
    BuildRule(
        "mla_v_less",
        7800,
        19067,
        "2026-01-24",
        "MLA models keep no V cache (V is a view of K); before, "
        "MLA GGUFs cached V (kv_lora_rank wide) besides K",
    ),
    BuildRule(
        "metal_reorder_64",
        8040,
        19555,
        "2026-02-12 (b8040 estimate: after b7960)",
        "Metal's graph_optimize reorder (ggml_metal_graph_optimize_reorder, ggml-metal-common.cpp) "
        "looks 64 nodes ahead over more safe ops (before: 8 nodes; CONT, SET, UNARY, SUB, REPEAT, "
        "CLAMP, L2_NORM, SSM_* not hoisted): where the F16 mask cast and the activations land in "
        "the Metal compute buffer",
    ),
    BuildRule(
        "attn_rot",
        8500,
        21038,
        "2026-04-01 (b8500 estimate)",
        "a quantized K (V) cache is stored Hadamard-rotated: F32 rotation matrices attn_inp_k_rot "
        "(n_rot_k^2) and attn_inp_v_rot (64^2) per cache are graph inputs "
        "(llama_kv_cache::build_input_k_rot)",
    ),
    BuildRule(
        "vk_reorder_ssm_conv",
        9040,
        22653,
        "2026-05 (b9040 estimate: opened 2026-05-03)",
        "Vulkan's graph_optimize reorder (ggml_vk_graph_optimize, ggml-vulkan.cpp) is no longer "
        "llama-cpp-python 0.3.17's (49bfddeca, 2026-03-22): PR #22653 (SSM_CONV + ADD + SILU) is "
        "the first change to it after that tree we found; #26124, #27220, #27812, #27301 and "
        "#28024 followed (kept fusion patterns, view-alias dependencies, alloc dependencies) up "
        "to b11434's. Where the activations land in the Vulkan compute buffer",
    ),
    BuildRule(
        "unified_draft",
        9100,
        22838,
        "2026-05-08 (b9100 estimate)",
        "one unified draft-model context "
        "(before: one per slot, n_ctx = -cd or the slot's cells, PR #10586; PR #22787/#22838)",
    ),
    BuildRule(
        "draft_mtp",
        9180,
        22673,
        "2026-05-16 (b9180 estimate)",
        "--spec-type draft-mtp: MTP "
        "self-speculation on the model's NextN blocks (before: NextN blocks never loaded)",
    ),
    BuildRule(
        "fa_mask_f16",
        9380,
        23764,
        "2026-05-27",
        "with flash attention the KQ mask input is reserved in "
        "F16 (before: an F32 input on the host, cast to F16 for the attention)",
    ),
    BuildRule(
        "cuda_fa_f16_in_buffer",
        9430,
        23907,
        "2026-05-30",
        "CUDA flash attention over a non-F16 K/V reserves "
        "its F16 copies in the compute buffer, sized by the whole cache (before: in the CUDA pool, "
        "outside every reported buffer)",
    ),
    BuildRule(
        "server_output_limit",
        9440,
        23861,
        "2026-06-01",
        "llama-server reserves n_parallel outputs (logits rows) instead of n_batch (issue #23527)",
    ),
    BuildRule(
        "cuda_no_split_buffers",
        9890,
        24216,
        "2026-07 (b9890, commit 74976e1)",
        "-sm row is refused on CUDA/ROCm ('device CUDA0 does not support split buffers', "
        "llama_model::load_tensors): PR #24216 'CUDA: remove -sm row' drops the CUDA split buffer "
        "type (before: matrices split by rows over the GPUs, KV and compute by layer); issue "
        "#25884 bisects the refusal to commit 74976e1 = b9890",
    ),
    BuildRule(
        "mixed_batch",
        11400,
        29622,
        "2026-10-05",
        "the graph also holds a third, mixed token/embedding input branch (inp_mixed_tokens, "
        "inp_mixed_slots, inp_mixed_embd, a second token lookup, a set_rows); on a GPU holding "
        "block 0 the scheduler copies three of them into its compute buffer",
    ),
)
_RULES = {r.key: r for r in BUILD_RULES}


# llama-cpp-python 0.3.36 (the embedded server) vendors llama.cpp 0c1e570 (LLAMA_CPP_COMMIT), build
# 9512
PINNED_BUILD = 9512


def build_of(key: str) -> int:
    """The first build with rule `key`."""
    return _RULES[key].build


def since(key: str, build: int | None) -> bool:
    """Whether llama.cpp build `build` (None: the current build) has the behaviour of rule `key`."""
    return build is None or build >= _RULES[key].build


# names kept for callers of the earlier constants
BUILD_SERVER_OUTPUT_LIMIT = _RULES["server_output_limit"].build
BUILD_NO_PADDING = _RULES["no_ctx_padding"].build
BUILD_PAD_256 = _RULES["ctx_pad_256"].build


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
    # the scheduler's op_offload pass (ggml-backend.cpp sched_backend_id_from_cur)
    op_offload: bool = True
    op_offload_min_batch: int = 32  # a GPU takes a host-weight op whose batch is at least this
    build: int | None = None  # the llama.cpp build whose rules apply (None: the current one)
    # cparams.embeddings (--embeddings): build_pooling adds the pooling layer
    embeddings: bool = False
    # cparams.pooling_type as POOLING_TYPES names it (the GGUF's when not given)
    pooling: str = "none"
    repack: bool = True  # the CPU's extra buffer types (CPU_REPACK) are in use (memory/repack.py)
    no_host: bool = False  # --no-host: GPUs' host buffer types are left out of the CPU's list

    @property
    def all_overrides(self) -> tuple[tuple[str, str], ...]:
        """Every tensor override in llama.cpp's order: -ot, then the MoE/FFN shortcuts
        (common/common.h)."""
        rules = list(self.overrides)
        if self.cpu_moe:
            rules.append((LLM_FFN_EXPS_REGEX, "CPU"))
        rules += [(rf"blk\.{i}{LLM_FFN_EXPS_REGEX}", "CPU") for i in range(self.n_cpu_moe)]
        rules += [(rf"blk\.{i}{LLM_FFN_DENSE_REGEX}", "CPU") for i in range(self.n_cpu_ffn)]
        return tuple(rules)


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
) -> tuple[bool, list[str]]:
    """-fa auto stays on where the backend supports it (CPU, CUDA, Metal, Vulkan);
    llama_init_from_model forces it off for Grok and on for a quantized V cache. Before PR #15434
    there was no auto: off."""
    notes = []
    mode = cfg.flash_attn
    if mode == "auto" and not since("fa_auto", build):
        mode = "off"
    if mode != "off" and facts.architecture == "grok":
        notes.append("flash_attn is not compatible with Grok - forcing off")
        mode = "off"
    if type_v.is_quantized and mode == "auto":
        notes.append("enabling flash_attn since it is required for quantized V cache")
    if type_v.is_quantized and mode == "off":
        raise ConfigError("quantized V cache requires flash_attn to be enabled; add -fa on")
    return mode != "off", notes


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


def _outputs(
    engine: str, build: int | None, n_batch: int, n_seq: int, *, embeddings: bool = False
) -> int:
    """n_outputs_max: llama-server and llama-cli (from PR #23861) min(n_batch, n_parallel);
    otherwise n_batch. server_output_limits (tools/server/server-context.cpp) keeps n_batch for
    embeddings (--embeddings, or a --pooling other than none): every token of the batch is an
    output."""
    # llama-cli at 0c1e570 runs llama_server in a thread (tools/cli/cli-server.h): the same limit
    if (
        engine in ("llama-server", "llama-cli")
        and since("server_output_limit", build)
        and not embeddings
    ):
        return min(n_batch, n_seq)
    return n_batch


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
    flash_attn, notes = _flash_attn(cfg, facts, type_v, build)
    _check_block_sizes(facts, type_k, type_v, flash_attn)
    n_seq, unified = _slots(cfg, engine, build)
    if cfg.n_batch < 1 or cfg.n_ubatch < 1:
        raise ConfigError("batch sizes must be at least 1")
    n_ctx = _context(cfg, facts, engine, n_seq, unified)
    n_batch = min(n_ctx, cfg.n_batch) if facts.causal else cfg.n_batch
    n_ubatch = min(n_batch, cfg.n_ubatch)
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
        n_outputs_max=_outputs(engine, build, n_batch, n_seq, embeddings=embeddings),
        flash_attn=flash_attn,
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
    )
