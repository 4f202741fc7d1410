"""The command line: thin click commands over the core; LlamafitError → `Error: …`, exit 2."""

from __future__ import annotations

import json
from typing import Any

import click

from . import __version__
from .errors import LlamafitError

EXIT_BAD_INPUT = 2


class _Group(click.Group):
    """Turns any LlamafitError into a one-line `Error: …` and exit code 2 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LlamafitError as e:
            err = click.ClickException(" ".join(str(e).split()))
            err.exit_code = EXIT_BAD_INPUT
            raise err from e


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llamafit")
def cli() -> None:
    """Fit llama.cpp to the memory you have: read a GGUF, predict every buffer, pick a config."""


def model_argument(f: Any) -> Any:
    """MODEL (a GGUF path, any shard of a split model, or `demo`) plus --demo."""
    f = click.option("--demo", is_flag=True, help="Use the bundled Gemma 3 270M demo model.")(f)
    return click.argument("model", required=False)(f)


def json_option(f: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object (stable keys).")(f)


def _load_facts(model: str | None, demo: bool) -> Any:
    from .demo import resolve_model_arg
    from .facts import build_facts
    from .gguf_model import read_model

    return build_facts(read_model(resolve_model_arg(model, demo=demo)))


@cli.command()
@model_argument
@json_option
def inspect(model: str | None, demo: bool, as_json: bool) -> None:
    """What a GGUF file says about its model: layers, heads, SWA/MLA/recurrent/MoE, weights, KV cost.

    \b
    llamafit inspect model.gguf
    llamafit inspect --demo --json
    """
    from .inspect_report import to_json, to_text

    facts = _load_facts(model, demo)
    if as_json:
        click.echo(json.dumps(to_json(facts), indent=2))
    else:
        click.echo(to_text(facts))


EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1


def _engine_options(f: Any) -> Any:
    """Options shared by check and plan: the machine and whose rules apply."""
    options = [
        click.option("--demo", is_flag=True, help="Use the bundled Gemma 3 270M demo model."),
        click.option("--gpu", "gpu_spec", metavar="SPEC",
                     help="Instead of detection: sizes (24GiB,12G), catalog names (rtx4090, 2xh100) or cpu."),
        click.option("--engine", type=click.Choice(["llama-server", "llama-cpp-python", "llama-cli"]),
                     default="llama-server", show_default=True, help="Whose defaults and rules apply."),
        click.option("--llama-build", type=int, help="Behave as llama.cpp build N where it changed (default: current)."),
        click.option("--backend", type=click.Choice(["cuda", "rocm", "vulkan", "metal"]), default="cuda",
                     show_default=True, help="How GPUs given by size are named and which backend rules apply."),
        click.option("--reserve", "reserve_mib", type=click.IntRange(0), default=1024, show_default=True,
                     help="MiB kept free per GPU for what llama.cpp does not report (CUDA context, pools)."),
        click.option("--use", type=click.Choice(["free", "total"]), default="free", show_default=True,
                     help="For detected GPUs: plan with the memory free now, or the whole card."),
        click.option("--rpc", metavar="HOST:PORT=SIZE,...", help="llama.cpp RPC workers and their memory."),
        click.option("--cmd", "command_line", metavar="TEXT", help="A whole pasted llama-server command line."),
        json_option,
        click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[MODEL] [-- LLAMA-SERVER FLAGS]"),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def _common(demo: bool, gpu_spec: str | None, engine: str, llama_build: int | None, backend: str, reserve_mib: int,
            use: str, rpc: str | None, command_line: str | None, args: tuple[str, ...]) -> dict[str, Any]:  # fmt: skip
    import os

    from .check import split_model_argument

    model, server_args = split_model_argument(args)
    return dict(model=model, demo=demo, gpu_spec=gpu_spec, engine=engine, build=llama_build, backend=backend,
                reserve_bytes=reserve_mib << 20, command_line=command_line, server_args=server_args,
                env=dict(os.environ), use=use, rpc=rpc)  # fmt: skip


@cli.command(context_settings={"ignore_unknown_options": True})
@_engine_options
def check(as_json: bool, **common: Any) -> None:
    """Dry run: would llama-server fit with these flags? Exit 0 fits, 1 does not, 2 bad input.

    \b
    llamafit check model.gguf --gpu 24GiB -- -c 32768 -fa on -ctk q8_0 -ctv q8_0
    llamafit check --gpu 24GiB -- llama-server -m model.gguf -c 65536 -ngl 99
    llamafit check --gpu 24GiB --cmd "llama-server -m model.gguf -c 65536"
    """
    from .check import run_check

    report = run_check(**_common(**common))
    click.echo(json.dumps(report.json, indent=2) if as_json else report.text)
    raise SystemExit(EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--prefer", type=click.Choice(["speed", "context", "quality"]), default="speed", show_default=True,
              help="speed: all layers on the GPU first; context: the longest context first; quality: f16 KV first.")
@click.option("--ctx-max", type=click.IntRange(256), help="Largest context per slot to aim for (default: trained).")
@click.option("--min-ctx", type=click.IntRange(256), help="Fail unless at least this context per slot fits.")
@click.option("--ctx", "fixed_ctx", type=click.IntRange(256), help="A fixed context per slot.")
@click.option("--kv", type=click.Choice(["f16", "q8_0", "q4_0", "q5_0", "q5_1", "q4_1", "iq4_nl", "bf16", "f32"]),
              help="A fixed KV cache type for K and V.")
@click.option("--fa", type=click.Choice(["on", "off"]), help="Flash attention fixed on or off.")
@_engine_options
def plan(prefer: str, ctx_max: int | None, min_ctx: int | None, fixed_ctx: int | None, kv: str | None,
         fa: str | None, as_json: bool, **common: Any) -> None:  # fmt: skip
    """The best llama-server config that fits: largest context, explained. Exit 0 found, 1 none fits.

    Flags after -- are pinned; the rest (-c, -fa, -ctk/-ctv, -ngl, --n-cpu-moe, -ub) is solved.

    \b
    llamafit plan model.gguf --gpu 24GiB
    llamafit plan model.gguf --gpu 24GiB,12GiB --prefer context -- -np 2
    """
    from .plan_run import run_plan
    from .solver import Policy

    policy = Policy(prefer=prefer, ctx_max=ctx_max, min_ctx=min_ctx, ctx=fixed_ctx, kv=kv, fa=fa)
    report = run_plan(policy, **_common(**common))
    click.echo(json.dumps(report.json, indent=2) if as_json else report.text)
    raise SystemExit(EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT)


@cli.command()
@json_option
def gpus(as_json: bool) -> None:
    """What hardware detection finds: GPUs (NVML, AMD sysfs, Apple sysctl) and host RAM, and from where."""
    from .gpus_report import gpus_json, gpus_text
    from .hardware import detect

    hw = detect()
    click.echo(json.dumps(gpus_json(hw), indent=2) if as_json else gpus_text(hw))


def main() -> None:
    cli(prog_name="llamafit")
