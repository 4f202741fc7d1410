"""`llamafit plan` as a function: prepare like check, solve once, report."""

from __future__ import annotations

from dataclasses import replace

from ..report import check as check_report, plan as plan_report
from ..server.argv import server_argv
from ..fit.explain import PlanResult, plan
from .llama_check import larger_wins, learn_tensor_limit, llama_cpp_check
from .prepare import Prepared, Report, Request, prepare, warnings_for
from ..report.layout import wrap_line
from ..fit.side_plan import launch_tokens
from ..fit.solver import Policy


def run_plan(request: Request, policy: Policy) -> Report:
    return render_plan(prepare(request), policy)[0]


def wrap_lines(lines: list[str]) -> list[str]:
    return [w for line in lines for w in wrap_line(line)]


def render_plan(p: Prepared, policy: Policy, *, with_command: bool = True) -> tuple[Report, PlanResult]:
    """Solve for a prepared model and machine; the report and the result (with every warning).
    `run` prints the command it runs itself (host, port and log flags added), so its text leaves
    the planned one out."""
    result = plan(p.target, p.parsed.config, policy, speed=p.speed)
    c = result.choice
    llama = llama_cpp_check(p, c.cfg, c.rc, c.breakdown) if c else None
    if c and llama and llama.get("agrees") is False and not p.llama_adjusted:
        learned = learn_tensor_limit(p, c.cfg, c.rc, llama) or larger_wins(p, c.cfg, c.rc, llama)
        if learned:  # planned again with llama.cpp's placement, or its larger weights and KV
            return render_plan(replace(learned[0], llama_adjusted=True), policy, with_command=with_command)
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
    if llama is not None:  # llama.cpp's own dry run of the chosen config (issue #28)
        data["llama_cpp_check"] = llama
        text = "\n".join([text, *wrap_lines(check_report.llama_check_lines(llama))])
    return Report(c is not None, data, text), result
