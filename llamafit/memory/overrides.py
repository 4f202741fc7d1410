"""-ot / --override-tensor: the buffer type each tensor's name meets, and the device it names.

common/arg.cpp parses the rules (an unknown buffer type is an error: "unknown buffer type");
src/llama-model-loader.cpp create_tensor gives a tensor the buffer type of the first rule whose
regex std::regex_search finds in its name. --n-cpu-moe / --n-cpu-ffn write one rule per block
(placement.block_rule), matched here from an index of the block numbers in the names."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ..errors import InputError
from ..facts.tensor_names import is_output_layer
from ..machine.devices import DeviceSpec
from .placement import CPU, LayerMap, block_index, block_rule, checked_regex, tensor_layer
from .tensors import ModelTensors

Rules = tuple[tuple[str, str], ...]


def override_targets(m: ModelTensors, rules: Rules) -> dict[str, str | None]:
    """placement.override_target for every tensor name (and each probe's name, with and without
    "(tied)") under these rules, once per rule set: each rule's matches are found once per model
    (the rules that --n-cpu-moe / --n-cpu-ffn write, one per block, from an index of the block
    numbers in the names)."""

    def make() -> dict[str, str | None]:
        out: dict[str, str | None] = dict.fromkeys(m.names)
        left = set(m.names)
        # every rule is checked (InputError for the first bad one), as _compiled does
        for rx, buft in rules:
            hit = m.remember(("rule", rx), partial(_rule_matches, m, rx)) & left
            for n in hit:
                out[n] = buft
            left -= hit
        return out

    return m.remember(("override_targets", rules), make)


def probe_targets(
    m: ModelTensors, rules: Rules
) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    """The -ot buffer type of each probe's tensor, by its name and by its name without
    "(tied)"."""

    def make() -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
        found = override_targets(m, rules)
        names = [name for _, name, *_ in m.probes]
        return tuple(found[n] for n in names), tuple(found[n.removesuffix("(tied)")] for n in names)

    return m.remember(("targets", rules), make)


def _rule_matches(m: ModelTensors, rx: str) -> frozenset[str]:
    """The names an -ot regex is found in (std::regex_search)."""
    generated = block_rule(rx)
    if generated is not None:
        suffix, block = generated
        index = m.remember(("blocks", suffix), lambda: block_index(m.names, suffix))
        return index.get(block, frozenset())
    found = checked_regex(rx)
    return frozenset(n for n in m.names if found.search(n))


def device_of(
    m: ModelTensors,
    name: str,
    lmap: LayerMap,
    targets: dict[str, str | None],
    names: dict[str, int],
) -> int:
    """The device a tensor goes to: an -ot rule's (`targets`, by buffer_device), else its block's,
    the output layer's, or the host's (the input layer)."""
    target = targets.get(name)
    if target is not None:
        return buffer_device(target, names)
    il = tensor_layer(name)
    if il is not None and il < m.facts.n_layer_all:
        return lmap.layers[il]
    return lmap.output if is_output_layer(name) else CPU


def buffer_device(buft: str, names: dict[str, int]) -> int:
    """An -ot buffer type name → device index (CPU buffer types, or a GPU by its name)."""
    key = buft.lower()
    if key.startswith("cpu"):
        return CPU
    for name, i in names.items():
        if key == name or key.startswith(name + "_"):
            return i
    raise InputError(
        f"unknown buffer type '{buft}' in --override-tensor (devices: CPU, "
        f"{', '.join(names) or 'none'})"
    )


def device_names(gpus: Sequence[DeviceSpec]) -> dict[str, int]:
    """Each GPU's name, lower case, → its index: what buffer_device reads."""
    return {g.name.lower(): i for i, g in enumerate(gpus)}


def check_override_devices(rules: Sequence[tuple[str, str]], gpus: Sequence[DeviceSpec]) -> None:
    """Every -ot buffer type names a device of this machine (arg.cpp: "unknown buffer type")."""
    names = device_names(gpus)
    for _, buft in rules:
        buffer_device(buft, names)
