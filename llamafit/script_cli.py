"""`llamafit script`: the planned launch as a reusable config (sh, systemd, llama-swap, models.ini, docker)."""

from __future__ import annotations

import os
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


def script_text(policy: Policy, common: dict[str, Any], *, kind: str, host: str, port: int, name: str | None,
                server: str | None, guard: bool) -> str:  # fmt: skip
    if (models := many_models(common, kind)) is not None:
        return script_many(policy, common, models, kind=kind, host=host, server=server)
    p = prepare(**common)
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
    )  # fmt: skip
    return render(kind, spec, guard=guard) if kind == "sh" else render(kind, spec)


MANY_KINDS = ("llama-swap", "models-ini")


def many_models(common: dict[str, Any], kind: str) -> list[str] | None:
    """MODEL… (and directories) for the multi-model configs; None for one plain model."""
    if kind not in MANY_KINDS or common["model"] is None:
        return None
    extra = []
    rest = list(common["server_args"])
    while rest and not rest[0].startswith("-"):
        extra.append(rest.pop(0))
    models = [common["model"], *extra]
    if len(models) == 1 and not os.path.isdir(models[0]):
        return None
    common["server_args"] = rest
    return models


def script_many(policy: Policy, common: dict[str, Any], models: list[str], *, kind: str, host: str,
                server: str | None) -> str:  # fmt: skip
    from .many import Entry, plan_many, render_llama_swap_many, render_models_ini_many
    from .store_scan import root_for_path, scan

    named: list[tuple[str, str]] = []
    for m in models:
        if os.path.isdir(m):
            found, _ = scan([root_for_path(m)])
            named += [(f.name, f.ref) for f in found]
        else:
            named.append((m.split(":", 1)[1] if m.startswith(("ollama:", "lmstudio:", "hf:")) else
                          Path(m).name.removesuffix(".gguf"), m))  # fmt: skip
    preps = [prepare(**{**common, "model": ref}) for _, ref in named]
    packing = plan_many([n for n, _ in named], [p.target for p in preps], [p.parsed.config for p in preps], policy)
    by_name = dict(zip((n for n, _ in named), preps))
    entries = []
    for s in packing.sets:
        for m in s:
            p = by_name[m.name]
            argv = server_argv(os.path.abspath(p.facts.path), m.choice.cfg, m.choice.rc,
                               passthrough=p.parsed.passthrough, server=server or "llama-server")  # fmt: skip
            gpus = [d for d in m.choice.breakdown.devices if d.kind == "gpu"]
            entries.append(Entry(m.name, tuple(argv), tuple((d.name, d.used_bytes // MIB) for d in gpus),
                                 m.choice.rc.n_ctx))  # fmt: skip
    sets = [[m.name for m in s] for s in packing.sets]
    if packing.unfit:
        raise NoFit(f"nothing fits for {', '.join(packing.unfit)} on this machine")
    if kind == "llama-swap":
        return render_llama_swap_many(entries, sets, host=host)
    return render_models_ini_many(entries, sets)
