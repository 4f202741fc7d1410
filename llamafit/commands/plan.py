"""`llamafit plan` as a function: prepare like check, solve once, report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import InputError
from ..facts.arch_rules import EMBEDDING_ARCHS
from ..findings import Notice
from ..fit.explain import PlanResult, plan
from ..fit.plan_speed import speed_band
from ..fit.presets import DEFAULT_TURN, PresetEffect, min_ctx_for, preset_config, preset_effect
from ..fit.solver import Policy
from ..memory.config import LaunchConfig
from ..report import check as check_report
from ..report import plan as plan_report
from ..report.bars import bar_lines
from ..report.layout import wrap_line
from ..server.argv import server_argv
from ..server.side_flags import launch_tokens
from .llama_check import compute_notices, larger_wins, learn_tensor_limit, llama_cpp_check
from .prepare import prepare, warnings_for
from .prepared import Prepared, Report, Request

if TYPE_CHECKING:
    from ..machine.gpu_processes import GpuProcess


def run_plan(
    request: Request,
    policy: Policy,
    *,
    html_path: str | None = None,
    processes: tuple[GpuProcess, ...] | None = None,
) -> Report:
    """Plan for the request. On detected GPUs with `--use free`, other processes' GPU memory (NVML;
    `processes` given: those) is named, with the context closing them would give. `html_path`: the
    page too (report/html.py)."""
    p = prepare(request)
    inputs = _local_inputs(p)
    if html_path is not None:  # refused before the solve: nothing is planned for a page not kept
        _html_target(html_path, inputs, lambda: None)
    if processes is None:
        processes = _detected_processes(p, request)
    report, result = render_plan(p, policy, processes=processes)
    if html_path is not None:
        from ..report.html import plan_page
        from ..safe_io import write_output
        from .plan_curves import curves

        page = plan_page(report.json, curves(p, result, policy)).encode()
        _html_target(html_path, inputs, lambda: write_output(html_path, page, inputs))
    return report


def _local_inputs(p: Prepared) -> list[str]:
    """The model's files here (every shard): a page written over one would destroy it."""
    from ..paths import is_url
    from ..reader.model import shard_paths

    if is_url(p.facts.path):
        return []
    try:
        return shard_paths(p.facts.path)
    except (OSError, ValueError):
        return [p.facts.path]


def _html_target(path: str, inputs: list[str], write: Callable[[], None]) -> None:
    """Check (write: a no-op) or write the page; one line naming the page when it cannot be."""
    from ..safe_io import check_output

    try:
        check_output(path, inputs)
        write()
    except OSError as e:  # a link, a FIFO or device, an input, no directory, no permission
        raise InputError(f"--html {path}: {e.strerror or e}") from e


def _detected_processes(p: Prepared, request: Request) -> tuple[GpuProcess, ...]:
    if (
        request.machine.gpu_spec is not None
        or request.machine.use != "free"
        or p.hardware.source != "nvml"
    ):
        return ()
    from ..machine.gpu_processes import gpu_processes

    return gpu_processes(p.hardware.gpus)


def with_preset(p: Prepared, policy: Policy) -> tuple[Prepared, Policy]:
    """The preset's floor (unless --min-ctx) and slots (unless -np) applied to the problem."""
    preset = policy.preset
    if preset is None:
        return p, policy
    wanted = policy.ctx_max or p.facts.n_ctx_train
    policy = replace(policy, min_ctx=policy.min_ctx or min_ctx_for(preset, wanted))
    return replace(
        p, parsed=replace(p.parsed, config=preset_config(preset, p.parsed.config))
    ), policy


def with_embeddings(p: Prepared) -> Prepared:
    """An embedding model (facts.arch_rules.EMBEDDING_ARCHS) is planned for llama-server
    --embedding (pooled by the model's type) unless the flags say how it runs."""
    cfg = p.parsed.config
    if p.facts.architecture not in EMBEDDING_ARCHS or {"embeddings", "pooling"} & cfg.given:
        return p
    return replace(p, parsed=replace(p.parsed, config=replace(cfg, embeddings=True)))


def wrap_lines(lines: list[str]) -> list[str]:
    return [w for line in lines for w in wrap_line(line)]


def render_plan(
    p: Prepared,
    policy: Policy,
    *,
    with_command: bool = True,
    processes: tuple[GpuProcess, ...] = (),
    user_cfg: LaunchConfig | None = None,
) -> tuple[Report, PlanResult]:
    """Solve for a prepared model and machine; the report and the result (with every warning).
    `run` prints the command it runs itself (host, port and log flags added), so its text leaves
    the planned one out."""
    user_cfg = user_cfg or p.parsed.config  # the user's flags (a preset's -np is not theirs)
    asked = policy
    p, policy = with_preset(p, policy)
    p = with_embeddings(p)
    result = plan(p.target, p.parsed.config, policy, speed=p.speed)
    c = result.choice
    llama = llama_cpp_check(p, c.cfg, c.rc, c.breakdown) if c else None
    if c and llama and llama.get("agrees") is False and not p.llama_adjusted:
        learned = learn_tensor_limit(p, c.cfg, c.rc, llama) or larger_wins(p, c.cfg, c.rc, llama)
        if learned:  # planned again with llama.cpp's placement, or its larger weights and KV
            return render_plan(
                replace(learned[0], llama_adjusted=True),
                asked,
                with_command=with_command,
                processes=processes,
                user_cfg=user_cfg,
            )
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    side_flags = launch_tokens(p.parsed.passthrough, c.breakdown.side_models if c else ())
    passthrough = (["--rpc", ",".join(rpc)] if rpc and not p.parsed.config.rpc else []) + side_flags
    argv = server_argv(p.facts.path, c.cfg, c.rc, passthrough=passthrough) if c else []
    hardware = plan_report.hardware_json(p.target.gpus, p.target.host)
    warnings = warnings_for(p, c.rc if c else None) + _others(processes, result)
    warnings += compute_notices(llama, [g.name for g in p.target.gpus])
    result = replace(result, warnings=tuple(warnings) + result.warnings)
    effect: PresetEffect | None = None
    if policy.preset is not None:
        effect = preset_effect(
            policy.preset,
            policy.min_ctx or 0,
            c.cfg if c else user_cfg,
            user_cfg,
            p.target.evaluate,
            c.breakdown if c else None,
        )
    turn = policy.preset.turn if policy.preset else DEFAULT_TURN
    band = speed_band(p.target, c, p.speed, turn) if c and p.speed and result.speed else None
    data = plan_report.to_json(p.facts, result, argv, hardware, band=band, preset=effect)
    device_lines = check_report.device_lines(c.breakdown) + bar_lines(c.breakdown) if c else []
    text = plan_report.to_text(
        p.facts,
        result,
        argv if with_command else [],
        hardware,
        device_lines,
        band=band,
        preset=effect,
    )
    if p.llama_recorded:  # llama.cpp's earlier estimate for this build, applied (llama_record.py)
        data["llama_cpp_recorded"] = p.llama_recorded
    if llama is not None:  # llama.cpp's own dry run of the chosen config (issue #28)
        data["llama_cpp_check"] = llama
        text = "\n".join([text, *wrap_lines(check_report.llama_check_lines(llama))])
    return Report(c is not None, data, text), result


def _others(processes: tuple[GpuProcess, ...], result: PlanResult) -> list[Notice | str]:
    """gpu_in_use {device, used_bytes, processes [{pid, name, used_bytes}], tokens}: other processes
    hold memory on a GPU planned with what is free; `tokens`: the context per slot closing them
    would add."""
    if not processes:  # given devices, or NVML found none: gpu_processes is not loaded
        return []
    from ..machine.gpu_processes import others_in_use, tokens_for

    c = result.choice
    room = max(result.verdict.ctx_wanted - c.ctx, 0) if c else 0
    out: list[Notice | str] = []
    for o in others_in_use(processes):
        procs = [{"pid": q.pid, "name": q.name, "used_bytes": q.used_bytes} for q in o.processes]
        tokens = tokens_for(o.used_bytes, result.mib_per_1000_tokens, room) if c else None
        out.append(
            Notice(
                "gpu_in_use",
                {
                    "device": o.device,
                    "used_bytes": o.used_bytes,
                    "processes": procs,
                    "tokens": tokens,
                },
            )
        )
    return out
