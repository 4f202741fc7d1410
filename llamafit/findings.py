"""What the logic concludes, as data: codes and numbers, no English.

`Verdict` (plan), `WayOut` (check, when a config does not fit) and `Notice` (warnings) are built by
plan.py, ways_out.py and prepare.py; check_report.py and plan_report.py write the sentences, and
`--json` carries these values under the keys documented in docs/check.md and docs/plan.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Notice:
    """A warning: a stable `code` and its values (check_report.NOTICE_TEXT renders each code).

    Codes: unknown_flag {flag}; unmodelled_model {flag, what}; devices_not_modelled;
    cc_unknown {devices} (CUDA/ROCm devices whose compute capability, which sizes the flash-
    attention copies of a quantized cache, is unknown: the larger figure is taken);
    fa_auto_off {layer, device, fa_device} (-fa auto turned off by llama_context's device check:
    the first layer whose FLASH_ATTN_EXT lands on another device than the layer's);
    ngl_without_gpu; from_environment {names}; calibration {compute_scale, runs, architecture,
    devices, source}; calibration_skipped {path, count, reason}; calibration_unread {path, reason};
    small_reserve {reserve_bytes}; host_ram_short {used_bytes, usable_bytes}; server_devices
    {message} (the server's device list against detection and vulkaninfo); server_unanswered
    {message} (a llama-server found that hung, printed without end or was not believed);
    llama_compute_differs {device, llama_mib, llamafit_bytes, difference_bytes, compute_source,
    taken} (commands/llama_check.compute_notices); and model / config
    {message}, the model's and llama.cpp's own warnings, passed on as text.
    """

    code: str
    data: Mapping[str, Any] = field(default_factory=dict)


def as_notice(warning: Notice | str, code: str = "note") -> Notice:
    """A Notice for a warning given as text (the facts' and the resolver's warnings)."""
    return warning if isinstance(warning, Notice) else Notice(code, {"message": warning})


@dataclass(frozen=True)
class WayOut:
    """A config that the memory model says fits, when the given one does not.

    Codes: kv_full (this KV type, flash attention on, fits the whole n_ctx); kv (this KV type fits
    ctx_per_slot); context (ctx_per_slot fits with the current settings); gpu_layers (n_gpu_layers
    fits n_ctx, the other layers on the CPU).
    """

    code: str
    type_kv: str | None = None
    n_ctx: int | None = None
    ctx_per_slot: int | None = None
    n_gpu_layers: int | None = None


@dataclass(frozen=True)
class SpeedOption:
    """Another offload and its generation speed (plan_speed.py). Codes: fewer_gpu_layers (the wanted
    context with n_gpu_layers on the GPU, the rest on the CPU); all_gpu (every layer on the GPU, at
    the context per slot that allows)."""

    code: str
    n_gpu_layers: int
    ctx_per_slot: int
    generation_tps: tuple[float, float]  # full, empty context


@dataclass(frozen=True)
class Verdict:
    """plan's conclusion. `fits`: a config was found; then `ctx_per_slot` is what it reaches, with
    `placement` (cpu | all_gpu | layers_on_cpu | experts_on_cpu). Otherwise `cause` says why:
    pinned_ngl (nothing fits at the pinned -ngl), offloaded (not even with layers on the CPU and
    the smallest KV cache) or none (no candidate reached the minimum)."""

    fits: bool
    ctx_min: int  # per slot: the least context the policy accepts
    ctx_wanted: int  # per slot: the context aimed for
    trained_max: bool  # ctx_wanted is the model's trained context
    ctx_per_slot: int | None = None
    placement: str | None = None
    n_layer: int = 0  # blocks + the output layer, as -ngl counts them
    n_gpu_layers: int = 0
    n_cpu_moe: int = 0
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: bool = False
    more_gpu_mib: float | None = None  # GPU memory the missing context would need
    mib_per_layer: float | None = None  # freed per block moved to the CPU
    blocks_to_cpu: int | None = None  # blocks to move for more_gpu_mib
    # the choice's speed: full, empty context (speed.py)
    generation_tps: tuple[float, float] | None = None
    speed_options: tuple[SpeedOption, ...] = ()  # other offloads and their speed
    # the catalog card that would hold ctx_wanted (or ctx_min, no fit)
    smallest_gpu: str | None = None
    # with no fit: the cache (type_k, type_v) smallest_gpu holds ctx_min with (flash attention on)
    smallest_gpu_cache: tuple[str, str] | None = None
    cause: str | None = None
    pinned_ngl: int | None = None
