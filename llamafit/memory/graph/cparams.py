"""The values libllama runs with (src/llama-cparams.h llama_cparams), plus llama-server's own
settings: memory/resolve.py resolves a LaunchConfig into a ResolvedConfig; the graph reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...facts.tensor_names import LLM_FFN_DENSE_REGEX, LLM_FFN_EXPS_REGEX
from ...reader.ggml_types import GGMLType

LLAMA_MAX_SEQ = 256  # src/llama-cparams.h
# ggml-cuda.cu / ggml-vulkan.cpp device init: the threshold without GGML_OP_OFFLOAD_MIN_BATCH
OP_OFFLOAD_MIN_BATCH = 32


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
    op_offload_min_batch: int = (
        OP_OFFLOAD_MIN_BATCH  # a GPU takes a host-weight op whose batch is at least this
    )
    build: int | None = None  # the llama.cpp build whose rules apply (None: the current one)
    # cparams.embeddings (--embeddings): build_pooling adds the pooling layer
    embeddings: bool = False
    # cparams.pooling_type as POOLING_TYPES names it (the GGUF's when not given)
    pooling: str = "none"
    repack: bool = True  # the CPU's extra buffer types (CPU_REPACK) are in use (memory/repack.py)
    no_host: bool = False  # --no-host: GPUs' host buffer types are left out of the CPU's list
    # -fa auto still to be decided by llama_context's device check (replay.fa_auto_mismatch;
    # MemoryModel.settle_flash_attn settles it)
    fa_auto: bool = False
    # the check turned flash attention off: (layer, its device, the device its FLASH_ATTN_EXT
    # landed on); the cache was made for flash attention (V not transposed: attn_v_trans)
    fa_auto_off: tuple[int, str, str] | None = None
    # every stream of the full-attention cache holds the whole n_ctx: a hybrid model's before
    # rule hybrid_kv_seq (resolve.hybrid_kv_whole)
    kv_whole_ctx: bool = False

    @property
    def kv_cells(self) -> int:
        """The full-attention cache's cells per stream (llama_kv_cache's kv_size): n_ctx_seq, or
        n_ctx where llama_model::create_memory gave each stream the whole context."""
        return self.n_ctx if self.kv_whole_ctx else self.n_ctx_seq

    @property
    def fa_flag(self) -> str:
        """The -fa value that runs this config as counted: "auto" where it is -fa auto still to
        settle, or settled off by llama_context's device check (fa_auto_off: the cache made for
        flash attention, which -fa off would make transposed, with another graph), else "on" or
        "off"."""
        if self.fa_auto or self.fa_auto_off is not None:
            return "auto"
        return "on" if self.flash_attn else "off"

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
