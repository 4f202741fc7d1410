"""The model's tensors as the memory model reads them, computed once per model: each tensor's bytes
raw and with CUDA's row padding, prefix sums per block (all weights, routed experts, dense FFN), the
output and tied-output bytes, the RoPE factor copies, and the probe op of every weight
(src/llama-model-loader.cpp weight_buft_supported). `ModelTensors.remember` memoizes what depends
on the placement and the flags, not on the context. Sources at llama.cpp 0c1e570: src/llama-model.cpp
load_tensors, ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alloc_size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TypeVar

from ..builds import since
from ..facts.hparams import ModelFacts
from ..facts.tensor_names import is_dense_ffn, is_expert, is_output_layer
from ..reader.ggml_types import GGMLType
from ..reader.header import TensorInfo
from .kv import layer_cell_bytes
from .placement import ROPE_FACTORS, cuda_alloc_size, is_skipped, rope_factor_layers, tensor_layer

_T = TypeVar("_T")
MEMO_SIZE = 4096  # ModelTensors.remember: entries per model before it starts over
# ggml-cuda (HIP too): row padding + 128-byte alignment
PADDED_BACKENDS = frozenset({"cuda", "rocm"})
# The prefix-sum columns of ModelTensors.prefix, per block: all weights, routed experts, dense FFN,
# each raw and with CUDA row padding (column + 1).
ALL, EXPERTS, DENSE_FFN = 0, 2, 4
PADDED = 1
OP_PROBE_TOKENS = 512  # src/llama-model-loader.cpp weight_buft_supported: the probe op's batch
# (probe op bytes, name, block or None, raw bytes, padded bytes) of one weight
Probe = tuple[int, str, int | None, int, int]
# Gemma 3n's and Gemma 4's per-layer token rows, their projection and its norm: before the arch's
# rule (builds.py gemma3n_ple_expand, gemma4_ple_expand) llama.cpp placed all three with the output
# layer (LLM_TENSOR_LAYER_OUTPUT in LLM_TENSOR_INFOS, src/llama-arch.cpp of llama-cpp-python
# 0.3.16, 0.3.17 and 0.3.20; llama_model_loader::create_tensor takes buft_list_output for them),
# from it the token rows with the input layer and the other two with block 0 (0.3.21:
# LLM_TENSOR_LAYER_INPUT / LLM_TENSOR_LAYER_REPEATING, made with tn(..., 0) in load_tensors)
PER_LAYER_TOKEN_EMBD = "per_layer_token_embd.weight"
PLE_TENSORS = (PER_LAYER_TOKEN_EMBD, "per_layer_model_proj.weight", "per_layer_proj_norm.weight")
PLE_RULES = {"gemma3n": "gemma3n_ple_expand", "gemma4": "gemma4_ple_expand"}
# (name, ggml type id, raw bytes, padded bytes) of one of PLE_TENSORS
PleTensor = tuple[str, int, int, int]


def op_probe_bytes(shape: Sequence[int], n_bytes: int, n_expert_used: int, experts: bool) -> int:
    """The largest tensor of the op llama.cpp builds to decide where a weight may live.

    src/llama-model-loader.cpp weight_buft_supported (0c1e570): a matrix is probed with
    ggml_mul_mat(w, b[ne0, 512, ne2, ne3]) (dst [ne1, 512, ne2, ne3] F32), a stacked expert
    tensor with ggml_mul_mat_id(w, b[ne0, n_expert_used, 512]) (dst [ne1, n_expert_used, 512]);
    select_weight_buft takes the first buffer type whose device supports that op. A device that
    limits tensor sizes (Vulkan: ggml_backend_vk_device_supports_op rejects any src or dst larger
    than maxStorageBufferRange or maxBufferSize) thus leaves the weight on the next buffer type
    in the list: the host's.
    """
    if len(shape) < 2:
        return n_bytes
    ne0, ne1 = shape[0], shape[1]
    rest = 1
    for d in shape[2:]:
        rest *= d
    if experts:
        rows = max(n_expert_used, 1) * OP_PROBE_TOKENS
        return max(n_bytes, ne0 * rows * 4, ne1 * rows * 4)
    return max(n_bytes, ne0 * OP_PROBE_TOKENS * rest * 4, ne1 * OP_PROBE_TOKENS * rest * 4)


def get_rows_probe_bytes(shape: Sequence[int], n_bytes: int) -> int:
    """The largest tensor of the probe op of a weight read by GGML_OP_GET_ROWS
    (src/llama-model-loader.cpp weight_buft_supported: ggml_get_rows(w, b[512] I32), dst
    [ne0, 512] F32)."""
    return max(n_bytes, shape[0] * OP_PROBE_TOKENS * 4)


def ple_with_output(facts: ModelFacts, build: int | None) -> bool:
    """Whether this build places the model's PLE_TENSORS with the output layer (before the
    arch's rule in PLE_RULES)."""
    rule = PLE_RULES.get(facts.architecture)
    return rule is not None and not since(rule, build)


def prefix_sums(values: Sequence[int]) -> list[int]:
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def _tensor_sizes(facts: ModelFacts) -> list[tuple[str, int, int]]:
    """(name, raw bytes, CUDA-padded bytes) for every tensor llama.cpp loads."""
    out = []
    for t in facts.tensors:
        if not is_skipped(facts, t.name):
            out.append(
                (t.name, t.n_bytes, cuda_alloc_size(GGMLType.of(t.ggml_type), t.shape, t.n_bytes))
            )
    return out


class ModelTensors:
    """Per-model precomputation of the tensors' bytes; MemoryModel builds on it."""

    def __init__(self, facts: ModelFacts) -> None:
        self.facts = facts
        self.tensors = _tensor_sizes(facts)
        self.input_raw = self.output_raw = self.output_padded = 0
        # the RoPE factor tensors made per block (placement.rope_factor_layers): bytes of one copy
        # of each, and the blocks whose buffer types hold a copy
        self.rope_layers = rope_factor_layers(facts)
        self.rope_raw = self.rope_names = 0
        self.prefix = [prefix_sums(column) for column in self._block_sums()]
        self.tied_raw, self.tied_padded = self._tied(facts)
        # the PLE_TENSORS the model has (where the build places them: weights.ple_device)
        self.ple: list[PleTensor] = []
        if facts.architecture in PLE_RULES:
            types = {t.name: t.ggml_type for t in facts.tensors}
            self.ple = [(n, types[n], raw, pad) for n, raw, pad in self.tensors if n in PLE_TENSORS]
        # weights whose probe op is large, largest first (only these can meet a device's tensor
        # limit)
        self.probes = self._probes(facts)
        # per probe, its name's classes (the tensor-name regexes run once per model, not per
        # estimate): routed expert, dense FFN, an expert's ffn_down (op_offload.displaced), placed
        # with the output layer
        self.classes = [
            (
                is_expert(name),
                is_dense_ffn(name),
                is_expert(name) and "down" in name,
                is_output_layer(name) or name.endswith("(tied)"),
            )
            for _, name, *_ in self.probes
        ]
        # what depends on the placement, not on the context
        self._memo: dict[tuple[object, ...], object] = {}
        probe_names = [
            n for _, name, *_ in self.probes for n in (name, name.removesuffix("(tied)"))
        ]
        # what -ot rules meet
        self.names = tuple(dict.fromkeys([n for n, _, _ in self.tensors] + probe_names))
        self.recurrent_prefix = prefix_sums(
            [int(il < facts.n_layer and r) for il, r in enumerate(facts.is_recurrent)]
        )

    def _block_sums(self) -> list[list[int]]:
        """The columns ALL, EXPERTS and DENSE_FFN per block, raw and + PADDED (NextN blocks stay
        0); the input, output and RoPE factor bytes on the way."""
        n_layer_all = self.facts.n_layer_all
        sums = [[0] * 6 for _ in range(n_layer_all)]
        for name, raw, padded in self.tensors:
            il = tensor_layer(name)
            if self.rope_layers and name in ROPE_FACTORS:
                self.rope_raw += raw
                self.rope_names += 1
            elif il is not None and il < n_layer_all:
                _add_block(sums[il], name, raw, padded)
            elif is_output_layer(name):
                self.output_raw += raw
                self.output_padded += padded
            else:
                self.input_raw += raw
        return [[row[col] for row in sums] for col in range(6)]

    @staticmethod
    def _tied(facts: ModelFacts) -> tuple[int, int]:
        """A tied output's copy of token_embd: (raw, CUDA-padded) bytes, 0 without one."""
        embd = _embd(facts)
        if not facts.tied_embeddings or embd is None:
            return 0, 0
        return embd.n_bytes, cuda_alloc_size(GGMLType.of(embd.ggml_type), embd.shape, embd.n_bytes)

    def _probes(self, facts: ModelFacts) -> list[Probe]:
        used = facts.moe.n_expert_used if facts.moe else 1
        shapes = {t.name: t.shape for t in facts.tensors}
        probes: list[Probe] = []
        for name, raw, padded in self.tensors:
            if name == "token_embd.weight" and not self.tied_raw:
                continue  # the input layer lives on the host
            il = tensor_layer(name)
            if name == PER_LAYER_TOKEN_EMBD:
                probe = get_rows_probe_bytes(shapes[name], raw)
            else:
                probe = op_probe_bytes(shapes[name], raw, used, is_expert(name))
            if name == "token_embd.weight":
                # the tied output's copy, probed as a matmul on the output layer
                name, il, raw, padded = "output.weight(tied)", None, self.tied_raw, self.tied_padded
            probes.append((probe, name, il, raw, padded))
        return sorted(probes, reverse=True)

    @lru_cache(maxsize=64)  # noqa: B019 - one model object lives as long as its plans
    def cell_prefix(
        self, type_k: GGMLType, type_v: GGMLType, flash_attn: bool, v_less_mla: bool = True
    ) -> tuple[list[int], list[int]]:
        """Prefix sums over blocks of KV bytes per cell: (full-attention layers, SWA layers)."""
        cells = [
            layer_cell_bytes(
                self.facts, il, type_k, type_v, flash_attn=flash_attn, v_less_mla=v_less_mla
            )
            for il in range(self.facts.n_layer_all)
        ]
        swa = self.facts.swa.is_swa
        return (
            prefix_sums([b if not swa[il] else 0 for il, b in enumerate(cells)]),
            prefix_sums([b if swa[il] else 0 for il, b in enumerate(cells)]),
        )

    def sum_of(self, col: int, a: int, b: int) -> int:
        """Column `col` of the prefix sums over blocks [a, b)."""
        p = self.prefix[col]
        return p[b] - p[a] if b > a else 0

    def remember(self, key: tuple[object, ...], make: Callable[[], _T]) -> _T:
        """A per-model memo of what depends on the placement and the flags, not on the context."""
        memo = self._memo
        if key in memo:
            return memo[key]  # type: ignore[return-value]
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        value = memo[key] = make()
        return value


def _add_block(row: list[int], name: str, raw: int, padded: int) -> None:
    row[ALL] += raw
    row[ALL + PADDED] += padded
    for part, matches in ((EXPERTS, is_expert), (DENSE_FFN, is_dense_ffn)):
        if matches(name):
            row[part] += raw
            row[part + PADDED] += padded
            break


def _embd(facts: ModelFacts) -> TensorInfo | None:
    return next((t for t in facts.tensors if t.name == "token_embd.weight"), None)
