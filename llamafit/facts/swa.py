"""Sliding-window attention facts: swa_type, n_swa and which layers are SWA.

llama_model_base::load_swa_pattern (src/llama-model.cpp): a per-layer bool array in
`{arch}.attention.sliding_window_pattern` is used as is; else a uint period from that key or the
arch's default, applied by llama_hparams::set_swa_pattern (src/llama-hparams.cpp). NextN layers
are never SWA.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelFactsError
from . import arch_rules as R
from .metadata import Metadata


@dataclass(frozen=True, slots=True)
class SWAFacts:
    swa_type: str  # none | standard | chunked | symmetric (llama_swa_type)
    n_swa: int  # the window in tokens (0 without SWA)
    is_swa: tuple[bool, ...]  # per layer, n_layer_all entries

    @property
    def n_swa_layers(self) -> int:
        return sum(self.is_swa)


def _none(n_layer_all: int) -> SWAFacts:
    return SWAFacts("none", 0, (False,) * n_layer_all)


def _pattern(meta: Metadata, n_layer_all: int, n_layer: int, rule: R.SWARule) -> tuple[bool, ...]:
    key = meta.key("{arch}.attention.sliding_window_pattern")
    value = meta.kv.get(key)
    if isinstance(value, list):
        if len(value) > n_layer_all:
            raise ModelFactsError(
                f"{meta.path}: {key} has {len(value)} entries for {n_layer_all} layers"
            )
        flags = [bool(v) for v in value] + [False] * (n_layer_all - len(value))
        return tuple(flags)
    if value is None and rule.period is None:
        raise ModelFactsError(f"{meta.path}: key not found in model: {key}")
    period = int(value) if isinstance(value, int) else int(rule.period or 0)
    return tuple(
        il < n_layer and R.is_swa_layer(il, period, rule.dense_first) for il in range(n_layer_all)
    )


def swa_facts(meta: Metadata, n_layer_all: int, n_layer: int) -> SWAFacts:
    """The SWA layout llama.cpp builds for this model (src/models/<arch>.cpp)."""
    arch = meta.arch
    window = meta.get_int("{arch}.attention.sliding_window")
    rule = R.SWA_RULES.get(arch)
    if arch == "exaone4" and n_layer == R.EXAONE4_SWA_LAYERS:
        rule = R.SWARule(4, default_window=4096)
    if arch == "lfm2" or arch == "lfm2moe":
        return _lfm2(meta, n_layer_all, window)
    if rule is None or arch in R.SWA_DISABLED_ARCHS:
        return _none(n_layer_all)
    if arch == "llama4" and window == 0:
        return _none(n_layer_all)
    if rule.needs_window and not window:
        return _none(n_layer_all)
    n_swa = rule.forced_window or window or rule.default_window
    if not n_swa:
        raise ModelFactsError(
            f"{meta.path}: key not found in model: {meta.key('{arch}.attention.sliding_window')}"
        )
    return SWAFacts(rule.swa_type, int(n_swa), _pattern(meta, n_layer_all, n_layer, rule))


def _lfm2(meta: Metadata, n_layer_all: int, window: int | None) -> SWAFacts:
    """lfm2.cpp: with a window, every attention (non-recurrent) layer is SWA."""
    if not window:
        return _none(n_layer_all)
    kv = meta.per_layer("{arch}.attention.head_count_kv", n_layer_all, None) or (0,) * n_layer_all
    return SWAFacts("standard", window, tuple(h != 0 for h in kv))
