"""Multimodal projectors (mmproj GGUFs, `general.architecture` = clip): their memory (the header's
facts are facts/projector.py; which file llama.cpp would pick is fetch/stores.py best_sibling; the
usage as a side model is side_models.projector_usage). Pure. Sources at llama.cpp 0c1e570,
tools/mtmd:

- Weights (clip.cpp clip_model_loader::load_tensors): every tensor in one buffer on the clip
  backend: the first GPU (ggml_backend_init_by_type GPU, else IGPU; -mmdev picks one) unless
  --no-mmproj-offload, else the CPU (clip_ctx::clip_ctx). `load_hparams: model size` is their sum.
- Encoder compute (clip.cpp warmup → reserve_compute_meta): one graph reserved for a dummy image of
  `warmup_image_size` px (load_hparams: image_size by default; set_warmup_n_tokens(n) gives
  sqrt(n) x patch_size x n_merge per side for the dynamic-resolution projectors, which then can
  take larger images than the warmup reserved: the buffer grows at the first such image). Flash
  attention: -fa auto tries it and keeps it where the backend supports it (clip.cpp warmup).
- llama-server (tools/server/server-context.cpp load_model) adds mtmd_get_memory_usage (weights
  + warmup compute per device) to --fit's margin of that device, so llama.cpp's own fit leaves it
    free.

Encoder compute, for the standard ViT layout (separate Q/K/V with biases, GELU FFN: SigLIP,
CLIP; clip_graph::build_vit): with n_pos patches, E = n_embd x n_pos and F = n_ff x n_pos F32 rows,
the reserve's peak is at the FFN up-projection, 3E + F (layer input, attention residual, normed
input, FFN activations), and without flash attention at the attention soft_max, 6E + the KQ
matrix (n_pos² x n_head F32). Both measured exact (121.25 and 1132.00 MiB) on a Gemma 3 4B-shape
projector with the real llama-server (tests/memory/test_side_models.py); other layouts (Qwen-VL
window attention, pixel shuffles, audio encoders) are estimated with the same formula, unverified.
"""

from __future__ import annotations

import math

from ..facts.projector import ProjectorFacts

F32 = 4


# Backends whose graph_optimize reorders the encoder graph so that one more n_embd x n_pos F32
# tensor is alive at the flash-attention peak: ggml/src/ggml-vulkan/ggml-vulkan.cpp
# ggml_vk_graph_optimize groups each node with the independent nodes among the next 20
# (NUM_TO_CHECK) to run them together, which starts tensors earlier than the graph's own order and
# lengthens their lifetime in the allocator (measured on Vulkan0: 139.25 MiB, and 121.25 MiB, the
# CPU figure, with GGML_VK_DISABLE_GRAPH_OPTIMIZE=1). ggml-cuda.cu ggml_backend_cuda_graph_optimize
# only moves MoE shared-expert matmuls (none in a ViT), and Metal's reorder (ggml-metal-common.cpp
# ggml_graph_optimize) printed the CPU figure in PR 16837's log: both keep the CPU rule, as the
# public CUDA and Metal logs of fixtures/calibration/mmproj-corpus.jsonl show (121.25 MiB).
REORDERING_BACKENDS = frozenset({"vulkan"})


def encoder_compute(
    p: ProjectorFacts, *, image_px: int, flash_attn: bool, backend: str = "cpu"
) -> int:
    """The encoder's compute buffer for one square image of `image_px` on `backend` (see the module
    doc): with flash attention the FFN peak 3E + F, plus one E on a REORDERING_BACKENDS backend;
    without flash attention the KQ product's placement depends on the device's largest allocation,
    not modelled (CPU rule)."""
    n_pos = p.patches(image_px)
    e, f = F32 * p.n_embd * n_pos, F32 * p.n_ff * n_pos
    ffn = 3 * e + f
    if flash_attn:
        return ffn + (e if backend in REORDERING_BACKENDS else 0)
    return max(ffn, 6 * e + F32 * n_pos * n_pos * p.n_head)


def encoder_host_input(p: ProjectorFacts, *, image_px: int) -> int:
    """On a GPU backend the graph's input image (image_px² x 3 F32) stays in a CPU compute buffer
    (`reserve_compute_meta: CPU compute buffer size`, 9.19 MiB at 896 px on Vulkan)."""
    return F32 * 3 * image_px * image_px


def image_px_for_tokens(p: ProjectorFacts, tokens: int) -> int:
    """The square image side that gives `tokens` output tokens (tokens = (side / (patch x
    merge))²)."""
    return math.isqrt(tokens) * p.patch_size * p.n_merge
