"""llama.cpp's own estimate beside llamafit's, per device (pure): does llama_params_fit agree?

The estimate (server/fit_check.py) is printed in whole MiB, three columns per device, each rounded
down: up to 3 MiB below the true sum. Two figures agree when they differ by at most
max(PRINT_SLACK, TOLERANCE of the larger). Only GPU devices are judged: llama-fit-params' Host
compute figure is a documented overestimate (fit_check.py), so the host is shown, not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..memory.model import Breakdown
from ..units import MIB

PRINT_SLACK_MIB = 3.0
TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    device: str  # llamafit's name (CPU for llama.cpp's Host)
    llama_mib: float  # model + context + compute, as printed
    llamafit_mib: float  # weights + KV + recurrent state + compute + output
    judged: bool  # a GPU device; the host is shown only
    # how far llama.cpp's compute may exceed ours on the device that runs the output layer: its
    # estimate reserves logits for every ubatch token (quirk_bytes below); 0 where it does not apply
    quirk_mib: float = 0.0
    model_agrees: bool = True  # the model column against llamafit's weights

    @property
    def close(self) -> bool:
        return abs(self.llama_mib - self.llamafit_mib) <= max(
            PRINT_SLACK_MIB, TOLERANCE * max(self.llama_mib, self.llamafit_mib)
        )

    @property
    def agrees(self) -> bool:
        over = self.llama_mib - self.llamafit_mib
        return self.model_agrees and (self.close or 0 <= over <= self.quirk_mib + PRINT_SLACK_MIB)


def logits_quirk_bytes(n_vocab: int, n_ubatch: int, n_outputs: int) -> int:
    """What llama.cpp's own estimate adds on the device that computes the output layer: it measures
    the worst-case graph (llama_get_device_memory_data → llama_context::graph_reserve with
    n_outputs = n_ubatch), where llama-server reserves its graph for n_outputs_max rows: the F32
    logits of the difference (Gemma 3 270M at -ub 512 -np 4: 262,144 x 508 x 4 = 508 MiB)."""
    return n_vocab * max(n_ubatch - n_outputs, 0) * 4


def compare(
    estimates: Sequence[tuple[str, float, float]], breakdown: Breakdown, quirk_bytes: int = 0
) -> tuple[DeviceCheck, ...]:
    """llama.cpp's (device, total MiB, model MiB) rows beside llamafit's total per device (weights,
    KV, recurrent state, compute, output); a device llama.cpp names that llamafit does not have is
    shown at 0. The model column must agree to its print precision (1 MiB, or 5 %); the total
    within 5 %, or over by at most `quirk_bytes` (logits_quirk_bytes) on any GPU."""
    ours = {d.name: d for d in breakdown.devices}
    out = []
    for name, mib, model_mib in estimates:
        d = ours.get(name)
        used = (
            0.0
            if d is None
            else (
                d.weights_bytes + d.kv_bytes + d.recurrent_bytes + d.compute_bytes + d.output_bytes
            )
            / MIB
        )
        weights = 0.0 if d is None else d.weights_bytes / MIB
        model_ok = abs(model_mib - weights) <= max(1.0, TOLERANCE * max(model_mib, weights))
        out.append(
            DeviceCheck(
                name,
                float(mib),
                round(used, 2),
                judged=name != "CPU",
                quirk_mib=round(quirk_bytes / MIB, 2),
                model_agrees=model_ok,
            )
        )
    return tuple(out)


def agrees(checks: Sequence[DeviceCheck]) -> bool:
    return all(c.agrees for c in checks if c.judged)


def tensor_limit_candidates(tensor_bytes: Sequence[int], limit: int = 8) -> tuple[int, ...]:
    """Tensor-size limits to try, largest first, when a Vulkan device's limit is unknown (no
    vulkaninfo) and llama.cpp kept weights off it: for each of the `limit` largest distinct tensor
    sizes, the power of two below it. Vulkan drivers report maxStorageBufferRange as a power of two
    (lavapipe 2^27 = 128 MiB; RADV, NVIDIA 2^32 - 1, treated as 2^31 here, a bound that only moves
    tensors over 2 GiB), so the limit that keeps a tensor of size S off the device is below S and
    the power of two below S is the largest such driver value."""
    out: list[int] = []
    for size in sorted(set(tensor_bytes), reverse=True)[:limit]:
        if size > 1:
            bound = 1 << ((size - 1).bit_length() - 1)
            if bound not in out:
                out.append(bound)
    return tuple(out)


# ---- the difference, recorded per build and device (issue #28) ----

KINDS = ("model", "context", "compute")  # the columns of llama.cpp's estimate (common_fit_print)
# the kinds where llama.cpp's larger figure wins: its loader sizes weights and KV/recurrent state
# exactly (llama_model_loader, llama_kv_cache); its compute is the worst-case graph of
# llama_get_device_memory_data, which no llama-server reserves (logits_quirk_bytes)
ROOM_KINDS = ("model", "context")
PRINT_SLACK_BYTES = MIB  # one printed column is whole MiB, rounded down


@dataclass(frozen=True, slots=True)
class Difference:
    """llama.cpp's figure less llamafit's for one buffer kind on one device (bytes; negative where
    llamafit's is the larger)."""

    device: str
    kind: str  # one of KINDS
    bytes: int

    @property
    def room_bytes(self) -> int:
        """The room a plan keeps for it: llama.cpp's larger figure, in a kind where it wins, beyond
        the print precision of one column; 0 otherwise."""
        return self.bytes if self.kind in ROOM_KINDS and self.bytes > PRINT_SLACK_BYTES else 0


def differences(
    rows: Sequence[tuple[str, int, int, int]], breakdown: Breakdown, gpus: Sequence[str]
) -> tuple[Difference, ...]:
    """Per GPU in `gpus` that llama.cpp printed, the difference per kind: its (device, model MiB,
    context MiB, compute MiB) rows against llamafit's weights, KV + recurrent state, and compute +
    output of the same question."""
    ours = {d.name: d for d in breakdown.devices}
    out = []
    for name, model, context, compute in rows:
        d = ours.get(name)
        if d is None or name not in gpus:
            continue
        mine = (d.weights_bytes, d.kv_bytes + d.recurrent_bytes, d.compute_bytes + d.output_bytes)
        for kind, theirs, own in zip(KINDS, (model, context, compute), mine, strict=True):
            out.append(Difference(name, kind, theirs * MIB - own))
    return tuple(out)


def room_per_device(diffs: Sequence[Difference]) -> dict[str, int]:
    """The room each device keeps for llama.cpp's larger figures (Difference.room_bytes, summed)."""
    out: dict[str, int] = {}
    for d in diffs:
        if d.room_bytes:
            out[d.device] = out.get(d.device, 0) + d.room_bytes
    return out
