"""src/models/refact.cpp: llama_model_refact::graph (Refact 1.6B)."""

from __future__ import annotations

from ..build import GraphContext
from . import baichuan


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without positions (ALiBi: load_arch_hparams sets f_max_alibi_bias 8,
    the softmax's max_bias; no inp_pos, no RoPE) and without biases (build_attn and build_ffn
    get none: the optional wo_b and FFN biases load_arch_tensors makes are not read), a SwiGLU
    FFN."""
    baichuan.graph(ctx, rope=False)
