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


def main() -> None:
    cli(prog_name="llamafit")
