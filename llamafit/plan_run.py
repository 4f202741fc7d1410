"""`llamafit plan` as a function: prepare like check, solve, report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import check_report, plan_report
from .check import flag_warnings, prepare
from .command import server_argv
from .plan import plan
from .solver import Policy


@dataclass(frozen=True)
class PlanReport:
    fits: bool
    json: dict[str, Any]
    text: str


def run_plan(policy: Policy, **kwargs: Any) -> PlanReport:
    p = prepare(**kwargs)
    result = plan(p.target, p.parsed.config, policy)
    c = result.choice
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    passthrough = (["--rpc", ",".join(rpc)] if rpc else []) + list(p.parsed.passthrough)
    argv = server_argv(p.facts.path, c.cfg, c.rc, passthrough=passthrough) if c else []
    hardware = plan_report.hardware_json(p.target.gpus, p.target.host)
    warnings = list(p.facts.warnings) + (list(c.rc.warnings) if c else []) + flag_warnings(p)
    result = type(result)(result.choice, result.tradeoffs, result.mib_per_1000_tokens, result.mib_per_layer,
                          result.verdict, tuple(warnings) + result.warnings)  # fmt: skip
    data = plan_report.to_json(p.facts, result, argv, hardware)
    device_lines = check_report.device_lines(c.breakdown) if c else []
    return PlanReport(c is not None, data, plan_report.to_text(p.facts, result, argv, hardware, device_lines))
