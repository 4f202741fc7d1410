"""Monotone searches over the memory model: does a config fit, the largest context, the most layers.

The memory model is monotone in the context (every term grows with n_ctx) and, on the GPUs, in
the number of offloaded layers, so bisection finds the exact boundary in O(log n) evaluations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import InputError
from ..frozen import replace
from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..memory.model import Breakdown, MemoryModel
from ..memory.resolve import ResolvedConfig, kv_streams, resolve
from ..memory.side_models import SidePlan, attach

STEP = 256  # llama.cpp pads the context to 256 cells
EVALUATED_SIZE = 8192  # Target.evaluate's results kept per target


@dataclass(frozen=True)
class Target:
    """Everything fixed during a search: the model, the engine's rules and the machine."""

    model: MemoryModel
    engine: str
    build: int | None
    gpus: tuple[DeviceSpec, ...]
    host: DeviceSpec
    reserve_bytes: int
    compute_scale: float = 1.0  # learned from earlier runs (calibration.py)
    # per device (the GPUs, then the host), on top: solver.exact_choice's ratios of the graph
    # replay to the hand-derived peaks; () for none
    compute_scales: tuple[float, ...] = ()
    # draft model, MTP context, projector: resident next to the main model
    side: SidePlan | None = None
    # (flash attention, K quantized, V quantized) where llama.cpp aborts reserving the graph
    # (MemoryModel.estimate's SchedulerOverflowError, found by solver.exact_choice): evaluate
    # rejects them as llama.cpp would
    refused: frozenset[tuple[bool, bool, bool]] = frozenset()
    # evaluate's results by LaunchConfig: a plan asks for the same config many times (searches,
    # trade-offs, marginal costs); each Target (dataclasses.replace makes a new one) starts empty
    _evaluated: dict[LaunchConfig, tuple[ResolvedConfig, Breakdown] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # max_context's bracket per config (n_ctx 0): (the largest n_ctx known to fit, the smallest
    # known not to); the model is monotone in the context, so what one search learned bounds every
    # later one
    _brackets: dict[LaunchConfig, tuple[int, int | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # evaluate's breakdowns by what they depend on (the resolved config and -dev): configs that
    # differ only where resolve makes them equal (-ub above a small -c, -fa auto) share one
    _by_rc: dict[tuple[ResolvedConfig, tuple[str, ...]], Breakdown] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def breakdown(self, cfg: LaunchConfig, rc: ResolvedConfig, *, replay: bool = True) -> Breakdown:
        """Bytes per device for a resolved config, side models included: compute buffers from the
        graph itself where the replay covers it (MemoryModel.estimate); `replay=False`: the
        hand-derived peaks the searches run on (evaluate)."""
        if self.side is not None:
            rc = self.side.main_rc(rc, build=self.build)
        gpus = self.devices_of(cfg)
        b = self.model.estimate(
            rc,
            gpus,
            self.host,
            reserve_bytes=self.reserve_bytes,
            compute_scale=self.compute_scale,
            replay=replay,
            compute_scales=self.compute_scales,
        )
        if self.side is None:
            return b
        return attach(
            b,
            self.side.usages(
                cfg,
                rc,
                self.model,
                b.layer_devices.layers,
                gpus,
                self.host,
                build=self.build,
                main_host_weights=b.devices[-1].weights_bytes - b.devices[-1].repack_bytes,
            ),
        )

    def device_indices(self, cfg: LaunchConfig) -> tuple[int, ...]:
        """The indices in `gpus` of the devices `cfg` runs on: those its -dev names
        (fit/devices.py: llama.cpp's parse_device_list), else every GPU."""
        from .devices import named_devices

        return named_devices(self.gpus, cfg.devices)

    def devices_of(self, cfg: LaunchConfig) -> tuple[DeviceSpec, ...]:
        """The GPUs `cfg` runs on (device_indices)."""
        if not cfg.devices:
            return self.gpus
        return tuple(self.gpus[i] for i in self.device_indices(cfg))

    def evaluate(self, cfg: LaunchConfig) -> tuple[ResolvedConfig, Breakdown] | None:
        """The resolved config and its breakdown, or None where llama.cpp would reject it. The
        searches' figures: compute from the hand-derived peaks (solver.exact_choice checks the
        chosen config against the graph replay)."""
        cache = self._evaluated
        if cfg in cache:
            return cache[cfg]
        try:
            rc = resolve(cfg, self.model.facts, engine=self.engine, build=self.build)
            # -fa auto by the backends' FA support (the scheduler's probe: the exact checks)
            rc = self.model.settle_flash_attn(rc, self.devices_of(cfg), self.host, exact=False)
            result: tuple[ResolvedConfig, Breakdown] | None = None
            if graph_kind(rc) not in self.refused:
                result = (rc, self._searched(cfg, rc))
        except InputError:
            result = None
        if len(cache) >= EVALUATED_SIZE:
            cache.clear()
            self._by_rc.clear()
        cache[cfg] = result
        return result

    def _searched(self, cfg: LaunchConfig, rc: ResolvedConfig) -> Breakdown:
        """breakdown(replay=False), once per resolved config and -dev (side models' usages
        depend on the whole config: those are not shared)."""
        if self.side is not None:
            return self.breakdown(cfg, rc, replay=False)
        key = (rc, cfg.devices)
        hit = self._by_rc.get(key)
        if hit is None:
            hit = self._by_rc[key] = self.breakdown(cfg, rc, replay=False)
        return hit

    def fits(self, cfg: LaunchConfig) -> bool:
        """Every device holds its share (Breakdown.fits: with GPUs, only the host's mmap'd weights
        may page; the plan warns when they would)."""
        result = self.evaluate(cfg)
        return result is not None and result[1].fits


def graph_kind(rc: ResolvedConfig) -> tuple[bool, bool, bool]:
    """What of a config decides whether its graph overflows llama.cpp's scheduler (Target.refused):
    flash attention, and whether K and V are quantized (each adds a rotation per layer). The
    scheduler's capacity also depends on the placement (MemoryModel.loaded_tensors) and, for the
    gated DeltaNet archs, on the ubatch: a kind refused at one placement is refused at all of them,
    the conservative side."""
    return (rc.flash_attn, rc.type_k.is_quantized, rc.type_v.is_quantized)


def largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest x in [lo, hi] with ok(x), for ok monotone (true then false); None if none."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def streams(target: Target, cfg: LaunchConfig) -> int:
    """How many per-slot streams -c is divided into: n_parallel without a unified KV cache, else
    1 (also where llama.cpp refuses cfg at the least context). One stream (a unified cache, one
    slot) needs no evaluation: the answer is 1 either way (resolve.kv_streams)."""
    try:
        if kv_streams(cfg, target.engine, target.build) == 1:
            return 1
    except InputError:
        return 1  # resolve refuses the slots: evaluate is None
    result = target.evaluate(replace(cfg, n_ctx=STEP))
    return result[0].n_stream if result is not None else 1


def max_context(target: Target, cfg: LaunchConfig, ctx_max: int, ctx_min: int = STEP) -> int | None:
    """Largest per-slot context (a multiple of 256, in [ctx_min, ctx_max]) that fits; None if none.

    With per-slot KV streams -c is the total, so -c = per-slot context x streams. The search is
    guided by each device's room (largest_guided): the bytes grow about linearly with the
    context, so a few evaluations find the boundary that bisection finds in log2 of the range."""
    mult = streams(target, cfg)
    lo, hi = -(-max(ctx_min, STEP) // STEP), ctx_max // STEP
    key = replace(cfg, n_ctx=0)
    brackets = target._brackets

    def look(k: int) -> tuple[bool, Room | None]:
        n_ctx = k * STEP * mult
        fit, fail = brackets.get(key, (0, None))
        if n_ctx <= fit:
            return True, None
        if fail is not None and n_ctx >= fail:
            return False, None
        result = target.evaluate(replace(cfg, n_ctx=n_ctx))
        found = result is not None and result[1].fits
        brackets[key] = (n_ctx, fail) if found else (fit, n_ctx)
        return found, room(result[1]) if result is not None else None

    best = largest_guided(lo, hi, look)
    return None if best is None else best * STEP


# per device of a breakdown, the bytes it has left (usable less what it must hold; negative where
# short), None where its memory is not known
Room = tuple[int | None, ...]
GUIDED_PROBES = 4  # largest_guided's probes by the rooms before it bisects what is left


def room(b: Breakdown) -> Room:
    """Each device's bytes left in `b` (Breakdown.short's figures, not negated)."""
    return tuple(
        None if d.usable_bytes is None else d.usable_bytes - b.hard_bytes(d) for d in b.devices
    )


def largest_guided(lo: int, hi: int, look: Callable[[int], tuple[bool, Room | None]]) -> int | None:
    """largest(lo, hi, ok) for ok monotone (true then false), where look(x) is (ok(x), the
    devices' room at x or None): the same answer, the largest x with ok(x), found in fewer
    calls where the room shrinks about linearly in x. Each probe lies strictly between the
    largest x known to be ok and the smallest known not to be, so the answer is where they
    meet, as in bisection. With the room at both ends known, the probe is the last x at which
    each device short at the upper end still has room on the line between the two (the
    tightest device's), else the upper end itself while only the lower end's room is known;
    after GUIDED_PROBES such probes, or where the rooms say nothing, the midpoint (bisection)."""
    if hi < lo:
        return None
    ok, good_room = look(lo)
    if not ok:
        return None
    good, bad, bad_room = lo, hi + 1, None
    guided = 0
    while bad - good > 1:
        k = (good + bad) // 2
        if guided < GUIDED_PROBES and good_room is not None:
            guess = (
                bad - 1
                if bad_room is None and bad == hi + 1
                else _crossing(good, good_room, bad, bad_room)
            )
            if guess is not None:
                k, guided = min(max(guess, good + 1), bad - 1), guided + 1
        ok, at = look(k)
        if ok:
            good, good_room = k, at
        else:
            bad, bad_room = k, at
    return good


def _crossing(good: int, good_room: Room, bad: int, bad_room: Room | None) -> int | None:
    """The largest x in [good, bad) at which every device short at `bad` has room on the line
    between its room at `good` and at `bad`; None where that is not known."""
    if bad_room is None or len(bad_room) != len(good_room):
        return None
    found = None
    for a, b in zip(good_room, bad_room, strict=True):
        if a is None or b is None or b >= 0 or a < 0:
            continue
        x = good + a * (bad - good) // (a - b)
        found = x if found is None else min(found, x)
    return found


def max_gpu_layers(target: Target, cfg: LaunchConfig) -> int | None:
    """Most -ngl (output layer counted) with cfg's context that fits; None if not even -ngl 0."""
    return largest(
        0, target.model.facts.n_layer_all + 1, lambda k: target.fits(replace(cfg, n_gpu_layers=k))
    )
