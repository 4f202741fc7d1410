"""`llamafit plan` as a function: prepare like check, solve, report."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import check_report, plan_report
from .check import Prepared, flag_warnings, prepare, with_calibration
from .command import server_argv
from .plan import PlanResult, plan
from .solver import Policy


@dataclass(frozen=True)
class PlanReport:
    fits: bool
    json: dict[str, Any]
    text: str


def run_plan(policy: Policy, **kwargs: Any) -> PlanReport:
    p, note = with_calibration(prepare(**kwargs), kwargs["env"])
    return render_plan(p, policy, note)[0]


def render_plan(p: Prepared, policy: Policy, note: str | None = None, *,
                with_command: bool = True) -> tuple[PlanReport, PlanResult]:  # fmt: skip
    """Solve for a prepared model and machine; the report and the raw result. `run` prints the
    command it runs itself (with host, port and log flags), so its text leaves the planned one out."""
    result = plan(p.target, p.parsed.config, policy, bandwidths=p.bandwidths)
    c = result.choice
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    passthrough = (["--rpc", ",".join(rpc)] if rpc and not p.parsed.config.rpc else []) + list(p.parsed.passthrough)
    argv = server_argv(p.facts.path, c.cfg, c.rc, passthrough=passthrough) if c else []
    hardware = plan_report.hardware_json(p.target.gpus, p.target.host)
    warnings = list(p.facts.warnings) + (list(c.rc.warnings) if c else []) + flag_warnings(p)
    result = replace(result, warnings=tuple(warnings) + result.warnings)
    data = plan_report.to_json(p.facts, result, argv, hardware)
    data["calibration"] = {"compute_scale": p.target.compute_scale, "note": note}
    device_lines = check_report.device_lines(c.breakdown) if c else []
    text = plan_report.to_text(p.facts, result, argv if with_command else [], hardware, device_lines) + (f"\nNote       {note}" if note else "")
    return PlanReport(c is not None, data, text), result
