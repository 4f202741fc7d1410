"""`llamafit plan` as a function: prepare like check, solve, report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import check_report, plan_report
from .check import Prepared, flag_warnings, prepare, with_calibration
from .command import server_argv
from .plan import PlanResult, plan
from .solver import Policy
from .speed import SpeedInputs


@dataclass(frozen=True)
class PlanReport:
    fits: bool
    json: dict[str, Any]
    text: str


def run_plan(policy: Policy, **kwargs: Any) -> PlanReport:
    p, note = with_calibration(prepare(**kwargs), kwargs["env"])
    return render_plan(p, policy, note, speed=machine_speed(p, kwargs["env"]))[0]


def machine_speed(p: Prepared, env: Mapping[str, str], calibrated: bool = True) -> SpeedInputs:
    """The speed model's inputs for this machine: device rates, the host probe, earlier runs' timings."""
    from .paths import cache_dir
    from .speed_inputs import speed_inputs

    inputs = speed_inputs(p.target.gpus, p.hardware.gpus, env, cache_dir())
    if not calibrated:
        return inputs
    from .host_probe import machine_key
    from .paths import calibration_path
    from .speed_calibration import calibrate

    return calibrate(inputs, _records(calibration_path(env)), machine=machine_key(),
                     architecture=p.facts.architecture)  # fmt: skip


def render_plan(p: Prepared, policy: Policy, note: str | None = None,
                speed: SpeedInputs | None = None) -> tuple[PlanReport, PlanResult]:  # fmt: skip
    """Solve for a prepared model and machine; the report and the raw result."""
    result = plan(p.target, p.parsed.config, policy, speed=speed)
    c = result.choice
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    passthrough = (["--rpc", ",".join(rpc)] if rpc and not p.parsed.config.rpc else []) + list(p.parsed.passthrough)
    argv = server_argv(p.facts.path, c.cfg, c.rc, passthrough=passthrough) if c else []
    hardware = plan_report.hardware_json(p.target.gpus, p.target.host)
    warnings = list(p.facts.warnings) + (list(c.rc.warnings) if c else []) + flag_warnings(p)
    warnings += [f"calibration: {note}"] if note else []
    result = replace(result, warnings=tuple(warnings) + result.warnings)
    data = plan_report.to_json(p.facts, result, argv, hardware)
    device_lines = check_report.device_lines(c.breakdown) if c else []
    return PlanReport(c is not None, data, plan_report.to_text(p.facts, result, argv, hardware, device_lines)), result


def _records(path: str, limit: int = 16 << 20) -> list[dict[str, Any]]:
    """The calibration file's records: a regular file only, at most `limit` bytes; none when unreadable."""
    import os
    import stat

    from .calibration import parse_records

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return []
        data = f.read(limit)
    return parse_records(data.decode("utf-8", "replace").splitlines())
