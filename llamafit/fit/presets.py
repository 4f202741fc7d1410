"""What the server is for (`--for chat|agent|long|serve[:N]`), as solver policy (pure).

A preset sets three things the default policy leaves to llama-server's defaults or to the largest
context: the context floor per slot (`min_ctx`, capped at the most asked for; `long` asks for the
trained maximum first, with --prefer context), the slots (`-np`:
llama-server's automatic setting makes 4 unified slots, whose SWA caches a single user pays for
without using them: llama_context, n_seq_max x n_swa cells per SWA layer), and the ubatches tried
(a larger `-ub` runs long prompts in fewer, bigger batches; the solver still takes a smaller one
when that buys context). Each also names a typical turn (`Turn`), the work the turn-time estimate
is for. Anything the user gives (`--min-ctx`, `--prefer`, `-np`, `-ub`) wins over the preset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import InputError
from ..memory.config import N_PARALLEL_AUTO, LaunchConfig, with_given
from ..memory.model import Breakdown
from ..memory.resolve import ResolvedConfig


@dataclass(frozen=True, slots=True)
class Turn:
    """One typical exchange: `context` tokens already in the slot, `prompt` new tokens read, then
    `generated` tokens written."""

    context: int
    prompt: int
    generated: int


@dataclass(frozen=True, slots=True)
class Preset:
    name: str  # chat | agent | long | serve
    min_ctx: int  # the context floor per slot (capped at the largest asked for)
    n_parallel: int  # -np
    prefer: str  # the solver's --prefer when the user gives none
    ubatches: tuple[int, ...]  # -ub values tried, preferred first
    turn: Turn

    @property
    def label(self) -> str:
        return f"serve:{self.n_parallel}" if self.name == "serve" else self.name


# The turns are assumptions, stated in the JSON (`speed.turn`): a chat reply to a short message deep
# in a conversation; an agent step reading a tool's output (a file, a test log) into a long session;
# a long document read whole and summarised.
PRESETS: dict[str, Preset] = {
    "chat": Preset("chat", 16384, 1, "speed", (512, 256, 128), Turn(4096, 200, 400)),
    "agent": Preset("agent", 65536, 1, "speed", (1024, 512, 256, 128), Turn(32768, 4000, 300)),
    # long: --prefer context, so the trained maximum first (layers move to the CPU for it), the
    # floor after that
    "long": Preset("long", 32768, 1, "context", (1024, 512, 256, 128), Turn(0, 32768, 500)),
    "serve": Preset("serve", 8192, 4, "speed", (512, 256, 128), Turn(2048, 200, 400)),
}
DEFAULT_TURN = PRESETS["chat"].turn  # the turn speed is estimated for without a preset
MAX_USERS = 256


def preset_named(spec: str) -> Preset:
    """`chat`, `agent`, `long`, `serve` or `serve:N` (N concurrent users, one slot each)."""
    name, _, users = spec.strip().lower().partition(":")
    preset = PRESETS.get(name)
    shown = (spec if len(spec) <= 40 else spec[:40] + "…") or "''"
    if preset is None:
        raise InputError(
            f"--for {shown}: one of {', '.join(PRESETS)} (serve:N for N concurrent users)"
        )
    if not users:
        return preset
    # ASCII digits, few enough for int(): `²` is a digit to str.isdigit, 5,000 digits int() refuses
    plain = users.isascii() and users.isdigit() and len(users) <= len(str(MAX_USERS))
    if name != "serve" or not plain or not 1 <= int(users) <= MAX_USERS:
        raise InputError(
            f"--for {shown}: only serve takes a number of users, 1-{MAX_USERS} (serve:8)"
        )
    return replace(preset, n_parallel=int(users))


def min_ctx_for(preset: Preset, wanted: int) -> int:
    """The floor per slot: the preset's, never above the largest context asked for (`wanted`)."""
    return min(preset.min_ctx, wanted)


def preset_config(preset: Preset, cfg: LaunchConfig) -> LaunchConfig:
    """The slots (-np) of the preset, unless the user gave them."""
    if "n_parallel" in cfg.given:
        return cfg
    return with_given(cfg, n_parallel=preset.n_parallel)


@dataclass(frozen=True, slots=True)
class PresetEffect:
    """What the preset did to the plan: its floor per slot, its slots, and the bytes its -np 1 saved
    against llama-server's automatic slots at the same context (None: -np was the user's, the preset
    serves several users, or the automatic setting does not resolve here; negative: it cost)."""

    preset: Preset
    min_ctx: int
    saved_bytes: int | None
    n_parallel_auto: int | None  # the slots -np auto would make (llama-server: 4)


def preset_effect(
    preset: Preset,
    min_ctx: int,
    cfg: LaunchConfig,
    user_cfg: LaunchConfig,
    evaluate: Callable[[LaunchConfig], tuple[ResolvedConfig, Breakdown] | None],
    chosen: Breakdown | None,
) -> PresetEffect:
    """`cfg` is the chosen config; `user_cfg` the user's flags (whether -np was theirs)."""
    if chosen is None or "n_parallel" in user_cfg.given or preset.n_parallel != 1:
        # serve's N slots are for N users: no saving to state
        return PresetEffect(preset, min_ctx, None, None)
    auto = replace(cfg, n_parallel=N_PARALLEL_AUTO, given=cfg.given - {"n_parallel"})
    evaluated = evaluate(auto)
    if evaluated is None:
        return PresetEffect(preset, min_ctx, None, None)
    rc, breakdown = evaluated
    used = sum(d.used_bytes for d in breakdown.devices) - sum(d.used_bytes for d in chosen.devices)
    return PresetEffect(preset, min_ctx, used, rc.n_seq_max)
