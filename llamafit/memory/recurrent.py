"""Recurrent state bytes per device (Mamba, RWKV, the recurrent layers of hybrids).

src/llama-memory-recurrent.cpp llama_memory_recurrent (0c1e570): each recurrent layer gets
R = ggml_new_tensor_1d(type_r, n_embd_r * mem_size) and S likewise with n_embd_s, F32, with
mem_size = max(1, n_seq_max), on its layer's device unless offload_kqv is off."""

from __future__ import annotations

from ..facts.hparams import ModelFacts
from .placement import CPU, LayerMap
from .resolve import ResolvedConfig


def recurrent_bytes(
    facts: ModelFacts, layer_prefix: list[int], rc: ResolvedConfig, lmap: LayerMap, n_gpu: int
) -> dict[int, int]:
    """R and S states, F32, mem_size = max(1, n_seq_max) rows each; `layer_prefix`: prefix sums
    over blocks of 1 per recurrent layer (ModelTensors.recurrent_prefix)."""
    out = dict.fromkeys([CPU, *range(n_gpu)], 0)
    rec = facts.recurrent
    if rec is None:
        return out
    per_layer = 4 * (rec.n_embd_r + rec.n_embd_s) * max(1, rc.n_seq_max)
    p = layer_prefix
    for dev, a, b in lmap.runs:
        out[dev if rc.kv_offload else CPU] += (p[b] - p[a]) * per_layer
    return out
