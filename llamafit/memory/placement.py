"""Which device holds each layer and each weight tensor (llama_model_base::load_tensors).

src/llama-model.cpp at 0c1e570: the input layer (token_embd) always stays on the CPU; with
-ngl N the output layer counts as one layer and is offloaded first (i_gpu_start =
max(n_layer_all + 1 - N, 0)); GPU layers are spread over devices by cumulative tensor-split
fractions (upper_bound of (il - i_gpu_start) / act_gpu_layers); a tied output duplicates
token_embd on the output device; NextN/MTP blocks are skipped (TENSOR_SKIP); -ot rules
(std::regex_search, first match wins) move tensors to another buffer type.
"""

from __future__ import annotations

import bisect
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import InputError
from ..facts.hparams import ModelFacts
from ..facts.tensor_names import LLM_FFN_DENSE_REGEX, LLM_FFN_EXPS_REGEX, layer_of
from ..reader.ggml_types import GGMLType
from ..units import pad
from .graph.loader import ROPE_FACTORS as ROPE_FACTORS
from .graph.loader import rope_factor_layers as rope_factor_layers

CPU = -1  # device index of the host
_MAXREPEAT = int(re._constants.MAXREPEAT)  # type: ignore[attr-defined]
CUDA_ROW_PADDING = 512  # ggml/src/ggml-cuda/ggml-cuda.cu MATRIX_ROW_PADDING
CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment


@dataclass(frozen=True, slots=True)
class LayerMap:
    """Device index per block (CPU = -1), of the output layer, and the contiguous runs of blocks."""

    layers: tuple[int, ...]
    output: int

    @property
    def runs(self) -> tuple[tuple[int, int, int], ...]:
        """(device, first block, end block) for each run of consecutive blocks on one device."""
        return _runs(self.layers)


@lru_cache(maxsize=1024)
def _runs(layers: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    runs: list[tuple[int, int, int]] = []
    for il, dev in enumerate(layers):
        if runs and runs[-1][0] == dev:
            runs[-1] = (dev, runs[-1][1], il + 1)
        else:
            runs.append((dev, il, il + 1))
    return tuple(runs)


def _f32(x: float) -> float:
    """Round to single precision: llama.cpp computes the split points and positions in float."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def split_points(fractions: Sequence[float]) -> tuple[float, ...]:
    """Cumulative, normalised tensor-split fractions (load_tensors "calculate the split points")."""
    total, cumulative = 0.0, []
    for f in fractions:
        total = _f32(total + _f32(f))
        cumulative.append(total)
    if total <= 0:
        raise InputError("tensor split fractions must not all be zero")
    return tuple(_f32(c / total) for c in cumulative)


@lru_cache(maxsize=1024)
def layer_map(
    n_layer_all: int, n_gpu_layers: int, points: tuple[float, ...], output_first: bool = True
) -> LayerMap:
    """get_layer_buft_list for every block and the output layer (index n_layer_all). `output_first`
    False: builds before PR #18148 started at n_layer - ngl, so the output layer went last (ngl >
    n_layer)."""
    if not points:
        return LayerMap((CPU,) * n_layer_all, CPU)
    i_gpu_start = max(n_layer_all + int(output_first) - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer_all + 1)

    def dev(il: int) -> int:
        if il < i_gpu_start or il - i_gpu_start >= act:
            return CPU
        return min(bisect.bisect_right(points, _f32((il - i_gpu_start) / act)), len(points) - 1)

    return LayerMap(tuple(dev(il) for il in range(n_layer_all)), dev(n_layer_all))


def cuda_alloc_size(t_type: GGMLType, shape: Sequence[int], n_bytes: int) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size: quantized rows padded to 512, then 128
    alignment."""
    size = n_bytes
    ne0 = shape[0] if shape else 1
    if t_type.is_quantized and ne0 % CUDA_ROW_PADDING:
        size += t_type.row_size(CUDA_ROW_PADDING - ne0 % CUDA_ROW_PADDING)
    return pad(size, CUDA_ALIGNMENT)


# std::regex's ECMAScript grammar (llama.cpp's -ot uses std::regex) is the contract. Python's re
# reads the common part the same way; what only Python accepts is refused rather than silently
# reinterpreted.
_PY_ONLY = re.compile(r"\\[AZzGNpPUaeEgkK]|\(\?[^:=!]|[*+?}]\+")
_ESCAPE_PAIRS = re.compile(r"\\.")
# `.*` and friends per pattern: tensor names are short, 4 already costs ms each
MAX_UNBOUNDED_REPEATS = 3


def _repeats(tree: Any, inside: bool) -> tuple[int, str | None]:
    """(unbounded repeats, why the pattern may backtrack exponentially or None) for a parsed
    pattern."""
    count, why = 0, None
    for op, arg in tree:
        name = str(op)
        if name.endswith("REPEAT"):
            _lo, hi, sub = arg
            if inside and hi > 1:
                return count, "a quantifier inside a quantified group"
            n, w = _repeats(sub, inside or hi > 1)
            count, why = count + n + (hi == _MAXREPEAT), why or w
        elif name == "BRANCH" and inside:
            return count, "alternatives inside a quantified group"
        elif name in ("SUBPATTERN", "BRANCH", "ASSERT", "ASSERT_NOT", "ATOMIC_GROUP"):
            subs = [arg[-1]] if name != "BRANCH" else arg[1]
            for sub in subs:
                n, w = _repeats(sub, inside)
                count, why = count + n, why or w
    return count, why


def check_override_regex(rx: str) -> re.Pattern[str]:
    """An -ot regex compiled, or InputError naming it: invalid, not std::regex syntax, or too
    expensive."""
    from re import _parser  # type: ignore[attr-defined]

    shown = rx if len(rx) <= 60 else rx[:59] + "…"
    bare = _ESCAPE_PAIRS.sub(
        lambda m: m.group(0) if m.group(0)[1] in "AZzGNpPUaeEgkK" else "__", rx
    )
    found = _PY_ONLY.search(bare)
    if found:
        raise InputError(
            f"-ot regex '{shown}': '{found.group(0)}' is not std::regex (ECMAScript) syntax"
        )
    try:
        compiled = re.compile(rx)
        count, why = _repeats(_parser.parse(rx), False)
    except (re.error, RecursionError, OverflowError) as e:
        raise InputError(f"-ot regex '{shown}' is invalid: {e}") from None
    if why:
        raise InputError(
            f"-ot regex '{shown}' is too expensive to match ({why}: exponential backtracking)"
        )
    if count > MAX_UNBOUNDED_REPEATS:
        raise InputError(
            f"-ot regex '{shown}' is too expensive to match ({count} unbounded repeats; "
            f"at most {MAX_UNBOUNDED_REPEATS})"
        )
    return compiled


@lru_cache(maxsize=1024)
def checked_regex(rx: str) -> re.Pattern[str]:
    """check_override_regex, once per pattern (an InputError is raised again on every call)."""
    return check_override_regex(rx)


@lru_cache(maxsize=64)
def _compiled(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((checked_regex(rx), buft) for rx, buft in rules)


# The per-block rules --n-cpu-moe and --n-cpu-ffn add (resolve.ResolvedConfig.all_overrides,
# common/common.h): rf"blk\.{i}{suffix}". Each suffix starts with a literal "\.", so such a rule is
# found in a name exactly where "blk." is followed by a maximal digit run equal to i and then the
# suffix: block_index finds those runs once.
BLOCK_RULE_SUFFIXES = (LLM_FFN_EXPS_REGEX, LLM_FFN_DENSE_REGEX)


def block_rule(rx: str) -> tuple[str, str] | None:
    r"""(suffix, block digits) for an -ot regex of the form blk\.DIGITS + one of
    BLOCK_RULE_SUFFIXES, else None."""
    if not rx.startswith("blk\\."):
        return None
    for suffix in BLOCK_RULE_SUFFIXES:
        digits = rx[5 : -len(suffix)] if rx.endswith(suffix) else ""
        if digits.isascii() and digits.isdigit():
            return suffix, digits
    return None


def block_index(names: Sequence[str], suffix: str) -> dict[str, frozenset[str]]:
    r"""For each digit run N: the names in which re.search(rf"blk\.{N}{suffix}") finds a match."""
    finder = re.compile(rf"(?=blk\.(\d+){suffix})")
    index: dict[str, set[str]] = {}
    for name in names:
        for m in finder.finditer(name):
            index.setdefault(m.group(1), set()).add(name)
    return {k: frozenset(v) for k, v in index.items()}


def override_target(name: str, rules: tuple[tuple[str, str], ...]) -> str | None:
    """The buffer type of the first -ot rule whose regex is found in the tensor name."""
    for rx, buft in _compiled(rules):
        if rx.search(name):
            return buft
    return None


def tensor_layer(name: str) -> int | None:
    return layer_of(name)


def is_skipped(facts: ModelFacts, name: str) -> bool:
    """NextN/MTP blocks are not loaded in the main context (TENSOR_SKIP unless MTP drafting)."""
    il = tensor_layer(name)
    return il is not None and facts.n_layer <= il < facts.n_layer_all
