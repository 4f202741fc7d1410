"""llama.cpp's tensor-name rules, in one place: the block a tensor belongs to (`blk.N.`, the names
of LLM_TENSOR_NAMES in src/llama-arch.cpp) and the FFN tensors that --cpu-moe, --n-cpu-moe and
--n-cpu-ffn move to the CPU (LLM_FFN_EXPS_REGEX and LLM_FFN_DENSE_REGEX in common/common.h, which
llama.cpp searches for anywhere in the tensor name)."""

from __future__ import annotations

import re

# llama.cpp: common/common.h LLM_FFN_EXPS_REGEX (routed experts; the router ffn_gate_inp and the
# shared experts *_shexp do not match) and LLM_FFN_DENSE_REGEX, as -ot patterns.
LLM_FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
LLM_FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."

_EXPERTS = re.compile(LLM_FFN_EXPS_REGEX)
_DENSE_FFN = re.compile(LLM_FFN_DENSE_REGEX)
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)\Z", re.DOTALL)


def is_expert(name: str) -> bool:
    """A routed-expert matrix (what --cpu-moe moves)."""
    return _EXPERTS.search(name) is not None


def is_dense_ffn(name: str) -> bool:
    """A dense FFN matrix (what --n-cpu-ffn moves)."""
    return _DENSE_FFN.search(name) is not None


def split_block(name: str) -> tuple[int, str] | None:
    """`blk.N.rest` → (N, rest); None for tensors outside the blocks (token_embd, output, …)."""
    m = _BLOCK.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def block_index(name: str) -> int | None:
    """N of `blk.N.…`; None outside the blocks."""
    found = split_block(name)
    return found[0] if found else None
