"""What one graph is built for (src/llama-graph.h llm_graph_params): the reserve's ubatch and the
context around it (GraphConfig), the few hyper-parameters that shape it (GraphHParams).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import LlamafitError


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
    # cparams.embeddings: llama_model::build_graph adds build_pooling's layer by `pooling`
    # (cparams.pooling_type: none, mean, cls, last or rank), read by the encoders' builders
    embeddings: bool = False
    pooling: str = "none"
    # the blocks built, by their own index, in order (() every block): the replay's short graph
    # of a model whose runs of alike blocks it shortens (periodic.py), the rest as llama.cpp's
    layers: tuple[int, ...] = ()

    @property
    def n_stream(self) -> int:
        """KV streams (llama_kv_cache: unified ? 1 : n_seq_max)."""
        return 1 if self.kv_unified else self.n_seq_max


@dataclass(frozen=True, slots=True)
class GraphHParams:
    """The few hyper-parameters that change the graph's shape and that ModelFacts does not hold
    (llama_hparams, src/llama-hparams.h; read by the arch's load_arch_hparams)."""

    final_logit_softcapping: float = 0.0  # models.Model.softcapped: {arch}.final_logit_softcapping
    expert_weights_scale: float = 0.0  # {arch}.expert_weights_scale
