"""`llamafit run` glue: prepare like plan, print the plan, then dry-run or launch."""

from __future__ import annotations

import json
from typing import Any

import click

from .check import prepare, with_calibration
from .command import display
from .launcher import free_port
from .errors import InputError
from .plan_run import render_plan
from .run import RunOptions, build_launch, for_server, launch_and_watch, parse_load_timeout, server_for
from .solver import Policy


def run_command(policy: Policy, common: dict[str, Any], *, host: str, port: int | None, server: str | None,
                dry_run: bool, api_key_file: str | None, verbose: bool, as_json: bool,
                load_timeout: str | None = None) -> int:  # fmt: skip
    opts = RunOptions(host=host, port=port, server=server, dry_run=dry_run, api_key_file=api_key_file, verbose=verbose,
                      load_timeout_s=parse_load_timeout(load_timeout))  # fmt: skip
    server = server_for(opts, common["env"])
    p, note = with_calibration(for_server(prepare(**common), server), common["env"])
    if not dry_run and p.facts.incomplete and not p.facts.path.startswith(("http://", "https://")):
        raise InputError(f"{p.facts.path}: {p.facts.incomplete}")
    if not dry_run and p.facts.path.startswith(("http://", "https://")) and server[0] != "llama-server":
        raise InputError(f"{p.facts.path} is remote and the embedded server cannot download it: download it first "
                         "(e.g. `huggingface-cli download`) and run the local file, or install llama-server, "
                         "which downloads it with -mu")  # fmt: skip
    report, result = render_plan(p, policy, note, with_command=False)
    if dry_run:
        if result.choice is not None:
            launch = build_launch(p, result.choice, opts, server, port if port is not None else free_port(host))
            report.json["server"] = launch.server_info | {"why": launch.why}
            report.json["run_command"] = launch.argv
        click.echo(json.dumps(report.json, indent=2) if as_json else _dry_text(report.text, launch if result.choice else None))
        return 0 if result.choice else 1
    if as_json:
        raise InputError("--json needs --dry-run (a running server prints its progress as text)")
    click.echo(report.text, err=True)
    return launch_and_watch(p, policy, opts, common["env"], server, lambda line: click.echo(line, err=True))


def _dry_text(plan_text: str, launch: Any) -> str:
    if launch is None:
        return plan_text
    return f"{plan_text}\nServer     {launch.why}\nCommand    {display(launch.argv)}"


