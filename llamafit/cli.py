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


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--demo", is_flag=True, help="Use the bundled Gemma 3 270M demo model.")
@click.option("--gpu", "gpu_spec", metavar="SPEC", help="GPU memory: 24GiB | 24GiB,12GiB | cpu (host RAM only).")
@click.option("--engine", type=click.Choice(["llama-server", "llama-cpp-python", "llama-cli"]),
              default="llama-server", show_default=True, help="Whose defaults and rules apply.")  # fmt: skip
@click.option("--llama-build", type=int, help="Behave as llama.cpp build N where it changed (default: current).")
@click.option("--backend", type=click.Choice(["cuda", "rocm", "vulkan", "metal"]), default="cuda",
              show_default=True, help="How GPUs given by size are named and which backend rules apply.")  # fmt: skip
@click.option("--reserve", "reserve_mib", type=click.IntRange(0), default=1024, show_default=True,
              help="MiB kept free per GPU for what llama.cpp does not report (CUDA context, pools).")  # fmt: skip
@click.option("--cmd", "command_line", metavar="TEXT", help="A whole pasted llama-server command line.")
@json_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[MODEL] [-- LLAMA-SERVER FLAGS]")
def check(demo: bool, gpu_spec: str | None, engine: str, llama_build: int | None, backend: str,
          reserve_mib: int, command_line: str | None, as_json: bool, args: tuple[str, ...]) -> None:  # fmt: skip
    """Dry run: would llama-server fit with these flags? Exit 0 fits, 1 does not, 2 bad input.

    \b
    llamafit check model.gguf --gpu 24GiB -- -c 32768 -fa on -ctk q8_0 -ctv q8_0
    llamafit check --gpu 24GiB -- llama-server -m model.gguf -c 65536 -ngl 99
    llamafit check --gpu 24GiB --cmd "llama-server -m model.gguf -c 65536"
    """
    import os

    from .check import run_check, split_model_argument

    model, server_args = split_model_argument(args)
    report = run_check(model=model, demo=demo, gpu_spec=gpu_spec, engine=engine, build=llama_build,
                       backend=backend, reserve_bytes=reserve_mib << 20, command_line=command_line,
                       server_args=server_args, env=dict(os.environ))  # fmt: skip
    click.echo(json.dumps(report.json, indent=2) if as_json else report.text)
    raise SystemExit(EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT)


def main() -> None:
    cli(prog_name="llamafit")
