"""KV cache bytes per cell (one token position in one stream), per layer.

llama_kv_cache::llama_kv_cache (src/llama-kv-cache.cpp): each layer that owns a cache gets
K = ggml_new_tensor_3d(type_k, n_embd_k_gqa(il), kv_size, n_stream) and V likewise with
n_embd_v_gqa(il) — padded to the widest layer (n_embd_v_gqa_max) when V is transposed, i.e.
without flash attention — and no V at all for MLA (has_v = !is_mla).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..facts.hparams import ModelFacts
from ..reader.ggml_types import GGMLType
from ..units import pad
from .placement import CPU, LayerMap


@dataclass(frozen=True, slots=True)
class KVCellCost:
    """Bytes per cell summed over full-attention layers and over SWA layers."""

    full_bytes: int
    swa_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.full_bytes + self.swa_bytes


def layer_cell_bytes(
    facts: ModelFacts,
    il: int,
    type_k: GGMLType,
    type_v: GGMLType,
    *,
    flash_attn: bool,
    v_less_mla: bool = True,
) -> int:
    """K + V bytes of one cell of layer il (0 for layers without their own cache). `v_less_mla`
    False: builds before PR #19067 also cached V (kv_lora_rank wide) for MLA models."""
    if not facts.has_kv[il]:
        return 0
    k = type_k.row_size(facts.n_embd_k_gqa(il))
    if facts.mla is not None and v_less_mla:
        return k
    v_width = facts.n_embd_v_gqa(il) if flash_attn else _v_width_max(facts)
    return k + type_v.row_size(v_width)


_widest: list[tuple[ModelFacts, int]] = []  # the last facts asked, with its n_embd_v_gqa_max


def _v_width_max(facts: ModelFacts) -> int:
    """facts.n_embd_v_gqa_max (a max over every layer), kept for the last facts asked: the
    callers ask it once per layer."""
    last = _widest[-1] if _widest else None  # read once: another thread may replace it
    if last is not None and last[0] is facts:
        return last[1]
    width = facts.n_embd_v_gqa_max
    _widest[:] = [(facts, width)]
    return width


def kv_cell_cost(
    facts: ModelFacts, type_k: GGMLType, type_v: GGMLType, *, flash_attn: bool
) -> KVCellCost:
    """Per-cell bytes of the non-SWA cache and of the SWA cache (llama_kv_cache_iswa splits
    them)."""
    full = swa = 0
    for il in range(facts.n_layer_all):
        b = layer_cell_bytes(facts, il, type_k, type_v, flash_attn=flash_attn)
        if facts.swa.is_swa[il]:
            swa += b
        else:
            full += b
    return KVCellCost(full, swa)


def swa_cells(
    n_ctx_seq: int,
    n_swa: int,
    n_seq: int,
    n_ubatch: int,
    *,
    unified: bool,
    swa_full: bool,
    pad_to: int = 256,
) -> int:
    """SWA cache size per stream (src/llama-kv-cache-iswa.cpp):
    PAD(min(n_ctx_seq, n_swa * (unified ? n_seq : 1) + n_ubatch), 256), or n_ctx_seq with
    --swa-full. `pad_to` is the build's padding (resolve.BUILD_RULES: 256 now, none or 32/256 in
    older builds)."""
    if swa_full:
        return n_ctx_seq
    return pad(min(n_ctx_seq, n_swa * (n_seq if unified else 1) + n_ubatch), pad_to)


def kv_bytes(
    cell_prefix: tuple[list[int], list[int]],
    cells: tuple[int, int],
    lmap: LayerMap,
    n_gpu: int,
    *,
    offload: bool,
) -> dict[int, int]:
    """KV bytes per device: each layer's cache on its layer's device, or all on the host when
    `offload` is off (-nkvo: llama_kv_cache, offload_kqv). `cell_prefix`: prefix sums over blocks
    of bytes per cell, full-attention and SWA (ModelTensors.cell_prefix); `cells`: the cells of
    each kind of cache, all streams."""
    out = dict.fromkeys([CPU, *range(n_gpu)], 0)
    full, swa = cell_prefix
    cells_full, cells_swa = cells
    for dev, a, b in lmap.runs:
        out[dev if offload else CPU] += (full[b] - full[a]) * cells_full + (
            swa[b] - swa[a]
        ) * cells_swa
    return out
