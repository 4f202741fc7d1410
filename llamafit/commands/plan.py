"""`llamafit plan` as a function: prepare like check, solve once, report."""

from __future__ import annotations

from dataclasses import replace

from ..report import check as check_report, plan as plan_report
from ..server.argv import server_argv
from ..fit.explain import PlanResult, plan
from .prepare import Prepared, Report, Request, prepare, warnings_for
from ..fit.side_plan import launch_tokens
from ..fit.solver import Policy


def run_plan(request: Request, policy: Policy) -> Report:
    return render_plan(prepare(request), policy)[0]


def render_plan(p: Prepared, policy: Policy, *, with_command: bool = True) -> tuple[Report, PlanResult]:
    """Solve for a prepared model and machine; the report and the result (with every warning).
    `run` prints the command it runs itself (host, port and log flags added), so its text leaves
    the planned one out."""
    result = plan(p.target, p.parsed.config, policy, speed=p.speed)
    c = result.choice
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    side_flags = launch_tokens(p.parsed.passthrough, c.breakdown.side_models if c else ())
    passthrough = (["--rpc", ",".join(rpc)] if rpc and not p.parsed.config.rpc else []) + side_flags
    argv = server_argv(p.facts.path, c.cfg, c.rc, passthrough=passthrough) if c else []
    hardware = plan_report.hardware_json(p.target.gpus, p.target.host)
    warnings = warnings_for(p, c.rc if c else None)
    result = replace(result, warnings=tuple(warnings) + result.warnings)
    data = plan_report.to_json(p.facts, result, argv, hardware)
    device_lines = check_report.device_lines(c.breakdown) if c else []
    text = plan_report.to_text(p.facts, result, argv if with_command else [], hardware, device_lines)
    return Report(c is not None, data, text), result
