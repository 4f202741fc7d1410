"""Multimodal projectors (mmproj GGUFs, `general.architecture` = clip): facts and memory (which
file llama.cpp would pick is fetch/stores.py best_sibling). Pure. Sources at llama.cpp 0c1e570, tools/mtmd:

- Weights (clip.cpp clip_model_loader::load_tensors): every tensor in one buffer on the clip
  backend: the first GPU (ggml_backend_init_by_type GPU, else IGPU; -mmdev picks one) unless
  --no-mmproj-offload, else the CPU (clip_ctx::clip_ctx). `load_hparams: model size` is their sum.
- Encoder compute (clip.cpp warmup → reserve_compute_meta): one graph reserved for a dummy image of
  `warmup_image_size` px (load_hparams: image_size by default; set_warmup_n_tokens(n) gives
  sqrt(n) x patch_size x n_merge per side for the dynamic-resolution projectors, which then can
  take larger images than the warmup reserved: the buffer grows at the first such image). Flash
  attention: -fa auto tries it and keeps it where the backend supports it (clip.cpp warmup).
- llama-server (tools/server/server-context.cpp load_model) adds mtmd_get_memory_usage (weights
  + warmup compute per device) to --fit's margin of that device, so llama.cpp's own fit leaves it free.

Encoder compute, for the standard ViT layout (separate Q/K/V with biases, GELU FFN: SigLIP,
CLIP; clip_graph::build_vit): with n_pos patches, E = n_embd x n_pos and F = n_ff x n_pos F32 rows,
the reserve's peak is at the FFN up-projection, 3E + F (layer input, attention residual, normed
input, FFN activations), and without flash attention at the attention soft_max, 6E + the KQ
matrix (n_pos² x n_head F32). Both measured exact (121.25 and 1132.00 MiB) on a Gemma 3 4B-shape
projector with the real llama-server (tests/memory/test_side_models.py); other layouts (Qwen-VL window
attention, pixel shuffles, audio encoders) are estimated with the same formula, unverified.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..machine.devices import DeviceSpec
    from ..reader.header import TensorInfo
    from .resolve import ResolvedConfig
    from .side_models import SideFlags, SideUsage

F32 = 4


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """clip.cpp load_hparams per projector type: spatial merge, warmup tokens, (min, max) tokens."""

    n_merge: int = 1
    warmup_tokens: int | None = None  # None: the warmup image is image_size x image_size
    min_tokens: int | None = None
    max_tokens: int | None = None


# tools/mtmd/clip.cpp load_hparams, `case PROJECTOR_TYPE_*` (n_merge may be overridden by the
# clip.vision.spatial_merge_size / projector.scale_factor keys where the loader reads them)
TOKEN_LIMITS: dict[str, TokenLimits] = {
    "gemma3": TokenLimits(n_merge=4),
    "gemma4v": TokenLimits(n_merge=3, warmup_tokens=256, min_tokens=70, max_tokens=1120),
    "pixtral": TokenLimits(n_merge=1, warmup_tokens=256, min_tokens=8, max_tokens=1024),
    "kimivl": TokenLimits(n_merge=2, warmup_tokens=256, min_tokens=8, max_tokens=1024),
    "qwen2vl_merger": TokenLimits(n_merge=2, warmup_tokens=46 * 46, min_tokens=8, max_tokens=4096),
    "qwen2.5vl_merger": TokenLimits(n_merge=2, warmup_tokens=46 * 46, min_tokens=8, max_tokens=4096),
    "qwen3vl_merger": TokenLimits(n_merge=2, warmup_tokens=46 * 46, min_tokens=8, max_tokens=4096),
    "glm4v": TokenLimits(n_merge=2, warmup_tokens=46 * 46, min_tokens=8, max_tokens=4096),
    "minimax_m3": TokenLimits(n_merge=2, warmup_tokens=16 * 16, min_tokens=8, max_tokens=576),
    "phi4": TokenLimits(n_merge=1, warmup_tokens=16 * 16),
    "hunyuanvl": TokenLimits(n_merge=2, warmup_tokens=32 * 32, min_tokens=256, max_tokens=16384),
    "paddleocr": TokenLimits(n_merge=2, warmup_tokens=28 * 28),
    "lfm2": TokenLimits(n_merge=2, min_tokens=64, max_tokens=256),
}


@dataclass(frozen=True)
class ProjectorFacts:
    """What an mmproj header says (clip.* keys, clip-impl.h KEY_*) and its tensors' bytes."""

    path: str
    projector_type: str
    modalities: tuple[str, ...]  # "vision", "audio"
    image_size: int
    patch_size: int
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    projection_dim: int
    n_merge: int
    weights_bytes: int
    n_tensors: int

    @property
    def limits(self) -> TokenLimits:
        return TOKEN_LIMITS.get(self.projector_type, TokenLimits(n_merge=self.n_merge))

    def warmup_image_size(self) -> int:
        """clip_hparams.warmup_image_size after load_hparams (set_warmup_n_tokens where the type sets it)."""
        lim = self.limits
        if lim.warmup_tokens is None:
            return self.image_size
        return math.isqrt(lim.warmup_tokens) * self.patch_size * self.n_merge

    def max_image_tokens(self, custom_max: int | None) -> int | None:
        """The most output tokens one image may give (--image-max-tokens overrides the type's)."""
        if custom_max and self.limits.max_tokens is not None:
            return custom_max
        return self.limits.max_tokens

    def patches(self, image_px: int) -> int:
        """n_pos of the encoder graph for a square image: (image / patch)²."""
        return (image_px // max(self.patch_size, 1)) ** 2


def _u32(meta: Mapping[str, Any], key: str, default: int = 0) -> int:
    v = meta.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else default


def is_projector(metadata: Mapping[str, Any]) -> bool:
    return metadata.get("general.architecture") == "clip"


def projector_facts(path: str, metadata: Mapping[str, Any], tensors: Sequence[TensorInfo]) -> ProjectorFacts:
    """The facts of an mmproj header (clip.cpp clip_model_loader::load_hparams)."""
    ptype = str(metadata.get("clip.projector_type") or metadata.get("clip.vision.projector_type") or "unknown")
    modalities = tuple(m for m in ("vision", "audio") if metadata.get(f"clip.has_{m}_encoder") is True)
    prefix = "vision" if "vision" in modalities or not modalities else "audio"
    limits = TOKEN_LIMITS.get(ptype, TokenLimits())
    n_merge = _u32(metadata, "clip.vision.projector.scale_factor", limits.n_merge)
    n_merge = 4 if ptype == "gemma3" else _u32(metadata, "clip.vision.spatial_merge_size", n_merge)
    return ProjectorFacts(
        path=path, projector_type=ptype, modalities=modalities or ("vision",),
        image_size=_u32(metadata, "clip.vision.image_size"), patch_size=_u32(metadata, "clip.vision.patch_size", 1),
        n_embd=_u32(metadata, f"clip.{prefix}.embedding_length"),
        n_ff=_u32(metadata, f"clip.{prefix}.feed_forward_length"),
        n_layer=_u32(metadata, f"clip.{prefix}.block_count"),
        n_head=_u32(metadata, f"clip.{prefix}.attention.head_count"),
        projection_dim=_u32(metadata, f"clip.{prefix}.projection_dim"), n_merge=n_merge,
        weights_bytes=sum(t.n_bytes for t in tensors), n_tensors=len(tensors),
    )  # fmt: skip


# Backends whose graph_optimize reorders the encoder graph so that one more n_embd x n_pos F32 tensor
# is alive at the flash-attention peak: ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_vk_graph_optimize
# groups each node with the independent nodes among the next 20 (NUM_TO_CHECK) to run them together,
# which starts tensors earlier than the graph's own order and lengthens their lifetime in the
# allocator (measured on Vulkan0: 139.25 MiB, and 121.25 MiB, the CPU figure, with
# GGML_VK_DISABLE_GRAPH_OPTIMIZE=1). ggml-cuda.cu ggml_backend_cuda_graph_optimize only moves
# MoE shared-expert matmuls (none in a ViT), and Metal's reorder (ggml-metal-common.cpp
# ggml_graph_optimize) printed the CPU figure in PR 16837's log: both keep the CPU rule, as the
# public CUDA and Metal logs of fixtures/calibration/mmproj-corpus.jsonl show (121.25 MiB).
REORDERING_BACKENDS = frozenset({"vulkan"})


def encoder_compute(p: ProjectorFacts, *, image_px: int, flash_attn: bool, backend: str = "cpu") -> int:
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
    """The square image side that gives `tokens` output tokens (tokens = (side / (patch x merge))²)."""
    return math.isqrt(tokens) * p.patch_size * p.n_merge


def projector_usage(p: ProjectorFacts, flags: SideFlags, rc: ResolvedConfig, gpus: Sequence[DeviceSpec],
                    host: DeviceSpec) -> SideUsage:  # fmt: skip
    """Weights and the warmup compute buffer on the clip backend; details carry the worst case."""
    from .side_models import SideDeviceUsage, SideUsage

    on_gpu = flags.mmproj_offload and bool(gpus)
    device = gpus[0].name if on_gpu else host.name
    warm = p.warmup_image_size()
    backend = gpus[0].backend if on_gpu else host.backend
    compute = encoder_compute(p, image_px=warm, flash_attn=rc.flash_attn, backend=backend)
    max_tokens = p.max_image_tokens(flags.image_max_tokens)
    worst_px = image_px_for_tokens(p, max_tokens) if max_tokens else warm
    worst = encoder_compute(p, image_px=worst_px, flash_attn=rc.flash_attn, backend=backend)
    details: tuple[tuple[str, int | str], ...] = (
        ("projector_type", p.projector_type), ("device", device), ("offload", "on" if flags.mmproj_offload else "off"),
        ("flash_attn", "on" if rc.flash_attn else "off"),
        ("warmup_image_px", warm), ("worst_image_px", worst_px), ("worst_compute_bytes", worst),
        ("image_max_tokens", max_tokens or 0),
    )  # fmt: skip
    rows = [SideDeviceUsage(device, p.weights_bytes, 0, compute, 0)]
    if on_gpu:
        rows.append(SideDeviceUsage(host.name, 0, 0, encoder_host_input(p, image_px=warm), 0))
    return SideUsage("mmproj", p.path, tuple(rows), 0, details)
