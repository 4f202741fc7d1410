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
    llama_mib: float
    llamafit_mib: float
    judged: bool  # a GPU device; the host is shown only

    @property
    def agrees(self) -> bool:
        return abs(self.llama_mib - self.llamafit_mib) <= max(PRINT_SLACK_MIB,
                                                               TOLERANCE * max(self.llama_mib, self.llamafit_mib))


def compare(estimates: Sequence[tuple[str, float]], breakdown: Breakdown) -> tuple[DeviceCheck, ...]:
    """llama.cpp's (device, MiB) rows beside llamafit's total per device (weights, KV, recurrent
    state, compute, output); a device llama.cpp names that llamafit does not have is shown at 0."""
    ours = {d.name: d for d in breakdown.devices}
    out = []
    for name, mib in estimates:
        mine = "CPU" if name == "Host" else name
        d = ours.get(mine)
        used = 0.0 if d is None else (d.weights_bytes + d.kv_bytes + d.recurrent_bytes + d.compute_bytes
                                      + d.output_bytes) / MIB  # fmt: skip
        out.append(DeviceCheck(mine, float(mib), round(used, 2), judged=mine != "CPU"))
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
