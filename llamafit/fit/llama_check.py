"""llama.cpp's own estimate beside llamafit's, per device (pure): does llama_params_fit agree?

The estimate (server/fit_check.py) is printed in whole MiB, three columns per device, each rounded
down: up to 3 MiB below the true sum. Two figures agree when they differ by at most
max(PRINT_SLACK, TOLERANCE of the larger). Only GPU devices are judged: llama-fit-params' Host
compute figure is a documented overestimate (fit_check.py), so the host is shown, not judged.

The compute column is held to its print precision on every device (compute_checks): llamafit's
figure for llama-fit-params' own question (fit_params_rc: its graph reserves a logits row for every
token of the ubatch, the known quirk) must lie in the printed MiB, or within one MiB below it.
Where it does not, the larger figure wins on a GPU (Difference.room_bytes), and the difference is
recorded with the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..memory.model import Breakdown
from ..memory.resolve import ResolvedConfig
from ..units import MIB

PRINT_SLACK_MIB = 3.0
PRINT_SLACK_BYTES = MIB  # one printed column is whole MiB, rounded down
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
    compute_agrees: bool = True  # the compute column to its print precision (compute_checks)

    @property
    def close(self) -> bool:
        return abs(self.llama_mib - self.llamafit_mib) <= max(
            PRINT_SLACK_MIB, TOLERANCE * max(self.llama_mib, self.llamafit_mib)
        )

    @property
    def agrees(self) -> bool:
        over = self.llama_mib - self.llamafit_mib
        return (
            self.model_agrees
            and self.compute_agrees
            and (self.close or 0 <= over <= self.quirk_mib + PRINT_SLACK_MIB)
        )


def logits_quirk_bytes(n_vocab: int, n_ubatch: int, n_outputs: int) -> int:
    """What llama.cpp's own estimate adds on the device that computes the output layer: it measures
    the worst-case graph (llama_get_device_memory_data → llama_context::graph_reserve with
    n_outputs = n_ubatch), where llama-server reserves its graph for n_outputs_max rows: the F32
    logits of the difference (Gemma 3 270M at -ub 512 -np 4: 262,144 x 508 x 4 = 508 MiB)."""
    return n_vocab * max(n_ubatch - n_outputs, 0) * 4


def fit_params_rc(rc: ResolvedConfig) -> ResolvedConfig:
    """The config as llama-fit-params reserves its graph: common_context_params_to_llama
    (common/common.cpp) passes n_outputs_max 0, which llama_context's constructor
    (src/llama-context.cpp) makes n_batch, so sched_reserve's pp graph has a logits row for every
    ubatch token (n_outputs_pp = min(n_tokens, n_outputs_max)); llama-server passes its slots'
    outputs (server-context.cpp server_output_limits). Builds before that limit reserved n_batch
    in both."""
    return replace(rc, n_outputs_max=rc.n_batch)


@dataclass(frozen=True, slots=True)
class ComputeCheck:
    """One device's compute column beside llamafit's figure for the same question (fit_params_rc)."""

    device: str
    llama_mib: int  # as printed: whole MiB, rounded down (common_fit_print)
    llamafit_bytes: int
    source: str  # llamafit's figure: memory.model COMPUTE_GRAPH or COMPUTE_ESTIMATE

    @property
    def difference_bytes(self) -> int:
        """llama.cpp's printed figure less llamafit's: in (-1 MiB, 0] where llamafit's lies in the
        printed MiB."""
        return self.llama_mib * MIB - self.llamafit_bytes

    @property
    def agrees(self) -> bool:
        """llamafit's figure lies in the printed MiB, [llama_mib, llama_mib + 1) MiB, or at most
        PRINT_SLACK_BYTES below it (where Difference.room_bytes keeps no room either)."""
        return -MIB < self.difference_bytes <= PRINT_SLACK_BYTES


def compute_checks(
    rows: Sequence[tuple[str, int]], breakdown: Breakdown
) -> tuple[ComputeCheck, ...]:
    """llama.cpp's (device, compute MiB) rows beside llamafit's compute buffers per device in
    `breakdown`, llamafit's figures for llama-fit-params' own question (fit_params_rc); a device
    llamafit does not have is left out. The output buffer is not in the column
    (llama_context::memory_breakdown: model, memory, the scheduler's compute buffers)."""
    ours = {d.name: d for d in breakdown.devices}
    return tuple(
        ComputeCheck(name, mib, ours[name].compute_bytes, ours[name].compute_source)
        for name, mib in rows
        if name in ours
    )


def compare(
    estimates: Sequence[tuple[str, float, float]],
    breakdown: Breakdown,
    quirk_bytes: int = 0,
    compute_agrees: Mapping[str, bool] | None = None,
) -> tuple[DeviceCheck, ...]:
    """llama.cpp's (device, total MiB, model MiB) rows beside llamafit's total per device (weights,
    KV, recurrent state, compute, output); a device llama.cpp names that llamafit does not have is
    shown at 0. The model column must agree to its print precision (1 MiB, or 5 %), the compute
    column where `compute_agrees` says (ComputeCheck.agrees, per device); the total within 5 %, or
    over by at most `quirk_bytes` (logits_quirk_bytes) on any GPU."""
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
                compute_agrees=(compute_agrees or {}).get(name, True),
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
# exactly (llama_model_loader, llama_kv_cache), its scheduler the compute buffers
# (ggml_backend_sched_reserve); the compute difference is taken at llama-fit-params' own question
# (fit_params_rc), so its worst-case logits (logits_quirk_bytes) are no difference
ROOM_KINDS = ("model", "context", "compute")


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
    rows: Sequence[tuple[str, int, int, int]],
    breakdown: Breakdown,
    gpus: Sequence[str],
    asked: Breakdown | None = None,
) -> tuple[Difference, ...]:
    """Per GPU in `gpus` that llama.cpp printed, the difference per kind: its (device, model MiB,
    context MiB, compute MiB) rows against llamafit's weights, KV + recurrent state of the same
    question, and the compute buffers of `asked` (llamafit's breakdown for llama-fit-params' own
    graph, fit_params_rc; `breakdown` where not given)."""
    ours = {d.name: d for d in breakdown.devices}
    theirs_graph = {d.name: d for d in (asked or breakdown).devices}
    out = []
    for name, model, context, compute in rows:
        d = ours.get(name)
        if d is None or name not in gpus:
            continue
        mine = (d.weights_bytes, d.kv_bytes + d.recurrent_bytes, theirs_graph[name].compute_bytes)
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
