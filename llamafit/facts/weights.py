"""Weight bytes by role and layer, from tensor names (llama.cpp's LLM_TENSOR_NAMES,
src/llama-arch.cpp).

The memory model places these per device: token_embd stays on the CPU, the output layer goes to
a GPU first, each block follows its layer, routed experts can be moved with --cpu-moe / -ot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..reader.header import TensorInfo
from .tensor_names import is_expert, split_block

ROLES = ("attention", "ffn", "experts", "recurrent", "norms", "other")

# Routed expert matrices (tensor_names.is_expert) are exactly what --cpu-moe / --n-cpu-moe move to
# the CPU. The router (ffn_gate_inp, exp_probs_b) and shared experts (*_shexp) stay with their layer
# as `ffn`.
_RECURRENT = re.compile(r"^(ssm_|time_mix_|channel_mix_|shortconv|conv1d|kda_|linear_attn)")
_INPUT = re.compile(r"^(token_embd|per_layer_token_embd|token_types|position_embd)\.")
_OUTPUT = re.compile(r"^(output|output_norm)\.")


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """Bytes of one block's tensors by role."""

    attention: int = 0
    ffn: int = 0
    experts: int = 0
    recurrent: int = 0
    norms: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.attention + self.ffn + self.experts + self.recurrent + self.norms + self.other


@dataclass(frozen=True, slots=True)
class WeightFacts:
    """All weight bytes: per block (index = layer), input, output layer and the rest."""

    layers: tuple[LayerWeights, ...]
    token_embd_bytes: int  # input layer: always on the CPU (src/llama-model.cpp load_tensors)
    output_bytes: int  # output.weight + output_norm: the first thing offloaded to a GPU
    output_norm_bytes: int
    other_bytes: int  # tensors outside blocks that are neither input nor output
    total_bytes: int = field(default=0)

    def by_role(self, layer_range: Iterable[int]) -> dict[str, int]:
        """Sum of each role over the given layers."""
        sums = dict.fromkeys(ROLES, 0)
        for il in layer_range:
            for role in ROLES:
                sums[role] += getattr(self.layers[il], role)
        return sums


def block_role(suffix: str) -> str:
    """Role of a tensor inside a block from its name after `blk.N.`."""
    if is_expert("." + suffix):
        return "experts"
    if "norm" in suffix.split(".")[0]:
        return "norms"
    if _RECURRENT.search(suffix):
        return "recurrent"
    if suffix.startswith(("attn_", "wq", "wk", "wv", "wo")):
        return "attention"
    if suffix.startswith("ffn_"):
        return "ffn"  # dense FFN and shared experts (*_shexp) stay with their layer
    return "other"


def weight_facts(tensors: Iterable[TensorInfo], n_layer_all: int) -> WeightFacts:
    """Sum tensor bytes into roles; blocks past n_layer_all count as `other`."""
    per_layer = [dict.fromkeys(ROLES, 0) for _ in range(n_layer_all)]
    embd = output = output_norm = other = total = 0
    for t in tensors:
        total += t.n_bytes
        block = split_block(t.name)
        if block and block[0] < n_layer_all:
            per_layer[block[0]][block_role(block[1])] += t.n_bytes
        elif _INPUT.match(t.name):
            embd += t.n_bytes
        elif _OUTPUT.match(t.name):
            output += t.n_bytes
            output_norm += t.n_bytes if t.name.startswith("output_norm.") else 0
        else:
            other += t.n_bytes
    layers = tuple(LayerWeights(**d) for d in per_layer)
    return WeightFacts(layers, embd, output, output_norm, other, total)
