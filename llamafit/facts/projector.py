"""What an mmproj header says (`general.architecture` = clip): the projector type, its encoder's
shape and token limits (llama.cpp tools/mtmd/clip.cpp clip_model_loader::load_hparams, clip-impl.h
KEY_*), and its tensors' bytes. Its memory is memory/projector.py. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..reader.header import TensorInfo


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
    "qwen2.5vl_merger": TokenLimits(
        n_merge=2, warmup_tokens=46 * 46, min_tokens=8, max_tokens=4096
    ),
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
        """clip_hparams.warmup_image_size after load_hparams (set_warmup_n_tokens where the type
        sets it)."""
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


def projector_facts(
    path: str, metadata: Mapping[str, Any], tensors: Sequence[TensorInfo]
) -> ProjectorFacts:
    """The facts of an mmproj header (clip.cpp clip_model_loader::load_hparams)."""
    ptype = str(
        metadata.get("clip.projector_type")
        or metadata.get("clip.vision.projector_type")
        or "unknown"
    )
    modalities = tuple(
        m for m in ("vision", "audio") if metadata.get(f"clip.has_{m}_encoder") is True
    )
    prefix = "vision" if "vision" in modalities or not modalities else "audio"
    limits = TOKEN_LIMITS.get(ptype, TokenLimits())
    n_merge = _u32(metadata, "clip.vision.projector.scale_factor", limits.n_merge)
    n_merge = 4 if ptype == "gemma3" else _u32(metadata, "clip.vision.spatial_merge_size", n_merge)
    return ProjectorFacts(
        path=path,
        projector_type=ptype,
        modalities=modalities or ("vision",),
        image_size=_u32(metadata, "clip.vision.image_size"),
        patch_size=_u32(metadata, "clip.vision.patch_size", 1),
        n_embd=_u32(metadata, f"clip.{prefix}.embedding_length"),
        n_ff=_u32(metadata, f"clip.{prefix}.feed_forward_length"),
        n_layer=_u32(metadata, f"clip.{prefix}.block_count"),
        n_head=_u32(metadata, f"clip.{prefix}.attention.head_count"),
        projection_dim=_u32(metadata, f"clip.{prefix}.projection_dim"),
        n_merge=n_merge,
        weights_bytes=sum(t.n_bytes for t in tensors),
        n_tensors=len(tensors),
    )
