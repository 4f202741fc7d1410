"""llama.cpp's tensor-name rules, in one place: the block a tensor belongs to (`blk.N.`, the names
of LLM_TENSOR_NAMES in src/llama-arch.cpp) and the FFN tensors that --cpu-moe, --n-cpu-moe and
--n-cpu-ffn move to the CPU (LLM_FFN_EXPS_REGEX and LLM_FFN_DENSE_REGEX in common/common.h, which
llama.cpp searches for anywhere in the tensor name)."""

from __future__ import annotations

import re
from functools import lru_cache

# llama.cpp: common/common.h LLM_FFN_EXPS_REGEX (routed experts; the router ffn_gate_inp and the
# shared experts *_shexp do not match) and LLM_FFN_DENSE_REGEX, as -ot patterns.
LLM_FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
LLM_FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."

_EXPERTS = re.compile(LLM_FFN_EXPS_REGEX)
_DENSE_FFN = re.compile(LLM_FFN_DENSE_REGEX)
_BLOCK = re.compile(r"^blk\.([0-9]+)\.(.+)\Z", re.DOTALL)  # ASCII digits: llama.cpp formats them
# the answers per name, memoized: a plan asks them of every tensor name several times (the
# facts, MemoryModel's sums and probes, the speed estimate), a regex each time (issue #36 item 5);
# large enough for the names of a few models
NAMES_MEMO = 16384


@lru_cache(maxsize=NAMES_MEMO)
def is_expert(name: str) -> bool:
    """A routed-expert matrix (what --cpu-moe moves)."""
    return _EXPERTS.search(name) is not None


@lru_cache(maxsize=NAMES_MEMO)
def is_dense_ffn(name: str) -> bool:
    """A dense FFN matrix (what --n-cpu-ffn moves)."""
    return _DENSE_FFN.search(name) is not None


@lru_cache(maxsize=NAMES_MEMO)
def split_block(name: str) -> tuple[int, str] | None:
    """`blk.N.rest` → (N, rest); None for tensors outside the blocks (token_embd, output, …)."""
    m = _BLOCK.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def block_index(name: str) -> int | None:
    """N of `blk.N.…`; None outside the blocks."""
    found = split_block(name)
    return found[0] if found else None


# Tensors outside the blocks that llama.cpp loads with the output layer (LLM_TENSOR_LAYER_OUTPUT in
# LLM_TENSOR_INFOS, src/llama-arch.cpp; llama_model_loader::create_tensor takes buft_list_output for
# them): besides output and output_norm, Gemma 3n's AltUp projections, classifier heads, the
# embedding models' dense layers, encoder/decoder output norms.
OUTPUT_LAYER_TENSORS = frozenset(
    {
        "output",
        "output_norm",
        "altup_proj",
        "altup_unembd_proj",
        "cls",
        "cls.norm",
        "cls.output",
        "dense_2",
        "dense_3",
        "enc.output_norm",
        "dec.output_norm",
        "output_res_score",
        "output_hc_base",
        "output_hc_down",
        "output_hc_fn",
        "output_hc_norm",
        "output_hc_scale",
        "output_hc_up",
    }
)
# LLM_TENSOR_LAYER_REPEATING tensors named without a block number but created for block 0, so they
# live on layer 0's device (src/models/gemma3n.cpp: tn(LLM_TENSOR_PER_LAYER_MODEL_PROJ, "weight",
# 0); the per-layer buffer list is pimpl->dev_layer.at(tn.bid) in llama_model::create_tensor,
# src/llama-model.cpp).
BLOCK0_TENSORS = frozenset({"per_layer_model_proj", "per_layer_proj_norm"})


def _base(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name


def is_output_layer(name: str) -> bool:
    """A tensor llama.cpp places with the output layer (the device -ngl gives the output first)."""
    return split_block(name) is None and _base(name) in OUTPUT_LAYER_TENSORS


def layer_of(name: str) -> int | None:
    """The block whose device holds the tensor: N of `blk.N.…`, 0 for block-0 tensors, None
    otherwise."""
    found = split_block(name)
    if found:
        return found[0]
    return 0 if _base(name) in BLOCK0_TENSORS else None
