"""CPU_REPACK: the host copy of weights that llama.cpp's CPU backend repacks into interleaved blocks.

A weight that stays on the host goes into the first buffer type of the CPU's list whose device supports
the weight's op (src/llama-model.cpp make_cpu_buft_list, select_weight_buft / weight_buft_supported): the
accelerators' buffer types, then the host buffer type of the first GPU that has one (CUDA_Host,
Vulkan_Host, ...; skipped with --no-host), then the CPU's extra buffer types (--repack, the default; -nr
turns them off), then the CPU's own. The repack buffer type (ggml/src/ggml-cpu/repack.cpp,
extra_buffer_type::supports_op) takes a 2-D MUL_MAT weight or a 3-D MUL_MAT_ID weight (stacked experts)
whose type has an interleaved layout for this CPU (ggml_repack_get_optimal_repack_type). The weight is
then copied into a CPU_REPACK buffer (alignment TENSOR_ALIGNMENT = 32, alloc size ggml_nbytes) beside the
mapped file, whose pages llama.cpp keeps in its CPU_Mapped range: the repacked copy is extra, anonymous
host memory.

Which CPU features a repacked layout needs is a property of the host: `features` names them after
ggml's ggml_cpu_has_* functions (avx2, avx512, neon, matmul_int8, dotprod, sve); detection reads them
from the machine (machine/hardware.py), and a caller may pass its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..machine.devices import DeviceSpec
from ..reader.ggml_types import GGMLType
from ..units import pad
from .overrides import device_names, device_of, override_targets
from .placement import CPU, LayerMap
from .resolve import ResolvedConfig
from .tensors import ModelTensors

REPACK_ALIGNMENT = 32  # ggml_backend_cpu_repack_buffer_type_get_alignment: TENSOR_ALIGNMENT

# The tensor kinds whose op is GGML_OP_MUL_MAT in src/llama-arch.cpp LLM_TENSOR_INFOS, by their
# LLM_TENSOR_NAMES name without the "blk.%d." prefix; MUL_MAT_ID ones are the stacked experts.
MUL_MAT_WEIGHTS = frozenset(
    """
    altup_correct_coef altup_predict_coef altup_proj altup_router altup_unembd_proj
    attn_compressor_gate attn_compressor_kv attn_conv_proj attn_gate attn_k attn_k_b attn_kv
    attn_kv_a_mqa attn_kv_b attn_output attn_output_a attn_output_b attn_q attn_q_a attn_q_b
    attn_qkv attn_v attn_v_b channel_mix_key channel_mix_receptance channel_mix_value cls
    cls.output conf_proj convnext.pw1 convnext.pw2 dec.attn_k dec.attn_o dec.attn_q dec.attn_v
    dec.cross_attn_k dec.cross_attn_o dec.cross_attn_q dec.cross_attn_v dec.ffn_down
    dec.ffn_gate dec.ffn_up decision.proj_global decision.proj_memory
    decision.proj_option_context decision.proj_option_lexical decision.proj_option_question
    decision.proj_question decision.scorer decision.scorer_out dense_2 dense_3 enc.attn_k
    enc.attn_o enc.attn_q enc.attn_v enc.ffn_down enc.ffn_gate enc.ffn_up fc ffn_conv_proj
    ffn_down ffn_down_shexp ffn_gate ffn_gate_inp ffn_gate_inp_shexp ffn_gate_shexp
    ffn_latent_down ffn_latent_up ffn_routed_down ffn_routed_up ffn_up ffn_up_shexp hc_attn_down
    hc_attn_fn hc_attn_inject hc_attn_up hc_ffn_down hc_ffn_fn hc_ffn_inject hc_ffn_up
    indexer.attn_k indexer.attn_q_b indexer.k_proj indexer.proj indexer.q_proj
    indexer_compressor_gate indexer_compressor_kv inp_gate laurel_l laurel_r markov_w2
    nextn.eh_proj nextn.hc_head_down nextn.hc_head_up nextn.post_projection nextn.pre_projection
    nextn.shared_head_head output output_hc_down output_hc_fn output_hc_up per_layer_model_proj
    ple_key ple_value posnet.attn_k posnet.attn_output posnet.attn_q posnet.attn_v proj
    selector_hidden shortconv.in_proj shortconv.out_proj ssm_alpha ssm_ba ssm_beta ssm_dt
    ssm_f_a ssm_f_b ssm_g ssm_g_a ssm_g_b ssm_in ssm_out ssm_x time_mix_a1 time_mix_a2
    time_mix_decay_w1 time_mix_decay_w2 time_mix_g1 time_mix_g2 time_mix_gate time_mix_key
    time_mix_output time_mix_receptance time_mix_v1 time_mix_v2 time_mix_value time_mix_w1
    time_mix_w2 vis_attn_output vis_attn_qkv vis_down vis_gate vis_up
    """.split()
)
MUL_MAT_ID_WEIGHTS = frozenset(
    "ffn_down_exps ffn_gate_exps ffn_up_exps ffn_gate_up_exps ffn_down_chexps ffn_gate_chexps "
    "ffn_up_chexps".split()
)

# ggml_repack_get_optimal_repack_type (x86 and Arm branches; RISC-V's vector layouts are not modelled):
# per weight type, (the features a layout needs, the row count ne[1] must divide by), first match wins.
_LAYOUTS: dict[str, tuple[tuple[frozenset[str], int], ...]] = {
    "Q4_0": (
        (frozenset({"avx2"}), 8),
        (frozenset({"sve", "matmul_int8"}), 8),  # and an SVE width of 256 bits (sve_cnt == QK8_0)
        (frozenset({"neon", "matmul_int8"}), 4),
        (frozenset({"neon", "dotprod"}), 4),
    ),
    "Q4_K": (
        (frozenset({"avx2"}), 8),
        (frozenset({"neon", "matmul_int8"}), 8),
        (frozenset({"neon", "dotprod"}), 8),
    ),
    "Q2_K": ((frozenset({"avx512"}), 8),),
    "Q5_K": ((frozenset({"neon", "matmul_int8"}), 8), (frozenset({"neon", "dotprod"}), 8)),
    "Q6_K": ((frozenset({"neon", "matmul_int8"}), 8), (frozenset({"neon", "dotprod"}), 8)),
    "IQ4_NL": ((frozenset({"avx2"}), 8), (frozenset({"neon", "dotprod"}), 4)),
    "MXFP4": ((frozenset({"avx2"}), 8), (frozenset({"neon", "dotprod"}), 4)),
    "Q8_0": ((frozenset({"neon", "matmul_int8"}), 4), (frozenset({"neon", "dotprod"}), 4)),
    "Q1_0": ((frozenset({"neon", "matmul_int8"}), 4), (frozenset({"neon", "dotprod"}), 4)),
}


def _kind(name: str) -> str:
    """blk.3.attn_q.weight -> attn_q; output.weight -> output."""
    base = name.removesuffix(".weight")
    if base.startswith("blk."):
        base = base.split(".", 2)[2] if base.count(".") >= 2 else base
    return base


def _n_dims(shape: Sequence[int]) -> int:
    """ggml_n_dims: the index of the last dimension above 1, plus one (at least 1)."""
    for i in range(len(shape) - 1, 0, -1):
        if shape[i] > 1:
            return i + 1
    return 1


def has_layout(type_name: str, shape: Sequence[int], features: frozenset[str]) -> bool:
    """ggml_repack_get_optimal_repack_type(w) != NULL on a CPU with `features`."""
    if len(shape) < 2:
        return False
    for needs, rows in _LAYOUTS.get(type_name, ()):
        if needs <= features and shape[1] % rows == 0:
            return True
    return False


def repacked_bytes(
    name: str, type_name: str, shape: Sequence[int], n_bytes: int, features: frozenset[str]
) -> int:
    """The bytes `name` takes in a CPU_REPACK buffer when it is a host weight (0: it is not repacked).

    extra_buffer_type::supports_op: MUL_MAT of a 2-D weight or MUL_MAT_ID of a 3-D one, with a layout.
    """
    if not features:
        return 0
    kind = _kind(name)
    if kind in MUL_MAT_WEIGHTS:
        dims = 2
    elif kind in MUL_MAT_ID_WEIGHTS:
        dims = 3
    else:
        return 0
    if _n_dims(shape) != dims or not has_layout(type_name, shape, features):
        return 0
    return pad(n_bytes, REPACK_ALIGNMENT)


# backends whose devices have a host buffer type (ggml_backend_dev_host_buffer_type: ggml-cuda.cu,
# ggml-vulkan.cpp, ggml-sycl.cpp); Metal's and RPC's are NULL
HOST_BUFFER_BACKENDS = frozenset({"cuda", "rocm", "vulkan", "sycl"})


def _host_buffer_first(rc: ResolvedConfig, gpus: Sequence[DeviceSpec]) -> bool:
    """A GPU host buffer type heads the CPU's list (make_cpu_buft_list; not with --no-host)."""
    return not rc.no_host and any(g.backend in HOST_BUFFER_BACKENDS for g in gpus)


def repack_bytes(
    m: ModelTensors,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    features: frozenset[str],
    moved: tuple[str, ...],
) -> int:
    """The CPU_REPACK buffer: host weights with a repacked layout for this CPU.

    src/llama-model.cpp make_cpu_buft_list puts the first GPU host buffer type (CUDA_Host,
    Vulkan_Host, ...; not with --no-host) ahead of the CPU's extra buffer types, and
    select_weight_buft takes it for every host weight its GPU can run the op of; with mmap it then
    becomes the plain CPU buffer (llama-model-loader.cpp create_tensor: "avoid using a host buffer
    when using mmap"). So with such a GPU only the weights its device rejects (over its tensor
    limit: `moved`) are repacked; without one (CPU only, RPC, Metal) every host weight may be.
    An -ot rule to CPU considers the extra buffer types too (create_tensor's overrides)."""
    if not rc.repack or not features:
        return 0
    sizes = _repack_sizes(m, features)
    if not sizes:
        return 0
    if _host_buffer_first(rc, gpus):
        return sum(sizes.get(name, 0) for name in moved)
    key = ("repack", lmap, rc.all_overrides, tuple(g.name for g in gpus), features)
    return m.remember(key, lambda: _repack_on_host(m, rc, lmap, gpus, sizes))


def repacked_names(
    m: ModelTensors,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    features: frozenset[str],
    moved: tuple[str, ...],
) -> tuple[str, ...]:
    """The names of the host weights repack_bytes puts in CPU_REPACK (the tied output's copy left
    out: it is token_embd's tensor)."""
    if not rc.repack or not features:
        return ()
    sizes = _repack_sizes(m, features)
    if not sizes:
        return ()
    if _host_buffer_first(rc, gpus):
        return tuple(n for n in moved if n in sizes and not n.endswith("(tied)"))
    names = device_names(gpus)
    targets = override_targets(m, rc.all_overrides) if rc.all_overrides else {}
    return tuple(
        name
        for name in sizes
        if not name.endswith("(tied)") and device_of(m, name, lmap, targets, names) == CPU
    )


def _repack_sizes(m: ModelTensors, features: frozenset[str]) -> dict[str, int]:
    """Per weight name, its CPU_REPACK bytes on a CPU with `features` (only weights that repack);
    a tied output's copy of token_embd is "output.weight(tied)", probed as the output it is."""

    def make() -> dict[str, int]:
        types = {t.name: t for t in m.facts.tensors}
        out = {}
        for name, raw, _padded in m.tensors:
            t = types[name]
            size = repacked_bytes(name, GGMLType.of(t.ggml_type).name, t.shape, raw, features)
            if size:
                out[name] = size
        embd = types.get("token_embd.weight")
        if m.tied_raw and embd is not None:
            size = repacked_bytes(
                "output.weight", GGMLType.of(embd.ggml_type).name, embd.shape, m.tied_raw, features
            )
            if size:
                out["output.weight(tied)"] = size
        return out

    return m.remember(("repack sizes", features), make)


def _repack_on_host(
    m: ModelTensors,
    rc: ResolvedConfig,
    lmap: LayerMap,
    gpus: Sequence[DeviceSpec],
    sizes: dict[str, int],
) -> int:
    names = device_names(gpus)
    targets = override_targets(m, rc.all_overrides) if rc.all_overrides else {}
    total = 0
    for name, size in sizes.items():
        # a tied output's copy sits with the output layer; no rule names "(tied)"
        tied = name.endswith("(tied)")
        dev = lmap.output if tied else device_of(m, name, lmap, targets, names)
        total += size if dev == CPU else 0
    return total
