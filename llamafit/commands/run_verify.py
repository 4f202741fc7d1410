"""`run --verify` glue: after Ready, fill the planned context (verify.py), report, record the
timings for the speed model, and say whether an out-of-memory means retrying with a safer plan."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..report.run import (
    long_verify_line,
    verify_error_line,
    verify_start_line,
)
from ..server.supervise import Pace, VerifyProgress
from ..server.verify import N_PREDICT, VerifyError, VerifyResult, speed_lines, verify, verify_lines
from .prepared import Prepared
from .records import record_verify, try_record

if TYPE_CHECKING:
    from ..fit.solver import Choice
    from ..server.launcher import Child
    from ..server.log import LogWatcher, ServedRequest
    from .launch import Launch


@dataclass(frozen=True)
class Outcome:
    result: VerifyResult | None
    retry: bool  # out of memory at full context (the server said so): plan a smaller footprint
    failure: str | None


def speed_record(
    p: Prepared, choice: Choice, env: Mapping[str, str], result: VerifyResult
) -> dict[str, Any] | None:
    """What the speed model predicted at this fill next to what the server measured."""
    from ..fit.speed import estimate_at
    from ..machine.host_probe import machine_key
    from .speed_inputs import machine_speed

    if not result.generation_tps:
        return None
    inputs = machine_speed(
        p.target.gpus,
        p.hardware.gpus,
        p.facts.architecture,
        env,
        calibrated=False,
        passthrough=p.parsed.passthrough,
    )
    est = estimate_at(
        p.target.model,
        choice.rc,
        p.target.gpus,
        inputs,
        result.n_prompt,
        choice.breakdown.layer_devices,
    )
    if est is None:
        return None
    slowest = _slowest(p, choice)
    return {
        "machine": machine_key(),
        "architecture": p.facts.architecture,
        "backend": slowest,
        "fill": result.n_prompt,
        "generation_tps": result.generation_tps,
        "prompt_tps": result.prompt_tps,
        "estimated_generation_tps": est[0],
        "efficiency": inputs.efficiency_for(slowest).generation,
        **machine_load(),
    }


def planned_range(
    p: Prepared, choice: Choice, result: VerifyResult
) -> tuple[tuple[float, float, float] | None, int]:
    """The plan's generation range (low, estimate, high) where the verification generated: its
    prompt plus half its tokens; and that fill. The plan's own inputs (calibration included)."""
    from ..fit.speed import generation_range_at

    fill = result.n_prompt + result.n_predicted // 2
    if p.speed is None:
        return None, fill
    expected = generation_range_at(
        p.target.model, choice.rc, p.target.gpus, p.speed, fill, choice.breakdown.layer_devices
    )
    return expected, fill


def machine_load() -> dict[str, Any]:
    """The 1-minute load average and the CPU count when a run is recorded: a run on an overloaded
    machine (load above the CPUs) does not calibrate the speed model (speed_calibration.py). None
    where unknown."""
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # Windows; no /proc/loadavg
        load = None
    return {"load_average": load, "cpus": os.cpu_count()}


def served_speed(served: Sequence[ServedRequest], min_tokens: int = 8) -> dict[str, Any] | None:
    """What the server's own timings of the requests it served say: generation tokens/s over every
    request that generated at least `min_tokens` (total tokens over total time), prompt tokens/s
    likewise over prompts of at least `min_tokens` evaluated tokens, and the average fill a
    generated token saw."""
    gen = [r for r in served if r.generated_tokens >= min_tokens and r.generation_ms > 0]
    if not gen:
        return None
    n_gen = sum(r.generated_tokens for r in gen)
    fill = sum((r.n_tokens - r.generated_tokens / 2) * r.generated_tokens for r in gen) / n_gen
    prompts = [r for r in served if r.prompt_tokens >= min_tokens and r.prompt_ms > 0]
    prompt_tps = (
        (sum(r.prompt_tokens for r in prompts) / sum(r.prompt_ms for r in prompts) * 1e3)
        if prompts
        else None
    )
    return {
        "generation_tps": n_gen / sum(r.generation_ms for r in gen) * 1e3,
        "prompt_tps": prompt_tps,
        "fill": max(round(fill), 0),
        "requests": len(gen),
        "generated_tokens": n_gen,
    }


def served_record(
    p: Prepared, choice: Choice, env: Mapping[str, str], served: Sequence[ServedRequest]
) -> dict[str, Any] | None:
    """The speed record of a server's whole run (kind "serve"): its timings next to the estimate at
    their fill."""
    from ..fit.speed import estimate_at
    from ..machine.host_probe import machine_key
    from .speed_inputs import machine_speed

    measured = served_speed(served)
    if measured is None:
        return None
    inputs = machine_speed(
        p.target.gpus,
        p.hardware.gpus,
        p.facts.architecture,
        env,
        calibrated=False,
        passthrough=p.parsed.passthrough,
    )
    est = estimate_at(
        p.target.model,
        choice.rc,
        p.target.gpus,
        inputs,
        int(measured["fill"]),
        choice.breakdown.layer_devices,
    )
    if est is None:
        return None
    backend = _slowest(p, choice)
    return {
        "machine": machine_key(),
        "architecture": p.facts.architecture,
        "backend": backend,
        "fill": int(measured["fill"]),
        "requests": int(measured["requests"]),
        "generated_tokens": int(measured["generated_tokens"]),
        "generation_tps": measured["generation_tps"],
        "prompt_tps": measured["prompt_tps"],
        "estimated_generation_tps": est[0],
        "efficiency": inputs.efficiency_for(backend).generation,
        "source": "the server's log: print_timings of each finished request",
        **machine_load(),
    }


def _slowest(p: Prepared, choice: Choice) -> str:
    backends = [d.backend for d in p.target.gpus] or ["cpu"]
    return (
        "cpu"
        if choice.rc.n_gpu_layers < p.facts.n_layer_all + 1 or not p.target.gpus
        else backends[0]
    )


# a verification expected to take this long or more is announced with a warning (and how to stop
# it) before it starts
LONG_VERIFY_S = 600.0


def verify_pace(p: Prepared, choice: Choice, n_prompt: int, n_predict: int) -> Pace | None:
    """How long the full-context request should take by the plan's speed estimate (fit/speed.py
    estimate_at, calibrated as the plan is): the prompt's batches at the prompt rate after 0 and
    after n_prompt - PP_TOKENS cells (a token's time is linear in the fill, so the mean of the two
    ends is the mean over the batches), then n_predict tokens at the generation rate of a full
    context; None without a prompt rate (a GPU of unknown throughput)."""
    from ..fit.speed import PP_TOKENS, estimate_at

    if p.speed is None:
        return None
    last = max(n_prompt - PP_TOKENS, 0)
    first, end = (
        estimate_at(
            p.target.model, choice.rc, p.target.gpus, p.speed, fill, choice.breakdown.layer_devices
        )
        for fill in (0, last)
    )
    if first is None or end is None or not first[1] or not end[1] or not end[0]:
        return None
    t0, t1 = 1 / first[1], 1 / end[1]
    growth = (t1 / t0 - 1) / last if last else 0.0
    return Pace(n_prompt * (t0 + t1) / 2 + n_predict / end[0], max(growth, 0.0))


def request_timeout(n_ctx: int, pace: Pace | None) -> float:
    """How long the full-context request may take: verify.py's default (300 s, or 10 tokens/s), and
    at least twice the estimate (a slow device is not cut off an hour into a verification)."""
    default = max(300.0, n_ctx / 10)
    if pace is None or pace.expected_s is None:
        return default
    return max(default, 2 * pace.expected_s)


def verify_running(
    child: Child,
    watcher: LogWatcher,
    launch: Launch,
    p: Prepared,
    env: Mapping[str, str],
    say: Callable[[str], None],
    path: str,
    stopped: Callable[[], bool] = lambda: False,
    emit: Callable[[VerifyProgress], None] | None = None,
) -> Outcome:
    """Send the full-context request to the server we started. Only out of memory (the server's own
    out-of-memory line, or its answer saying so) asks for a retry; a stop (`stopped()`) is a stop:
    no retry and no record; a server that died otherwise is left to the caller to report."""
    key = next(iter(launch.env.values()), None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    n_ctx = launch.choice.rc.n_ctx_seq
    pace = verify_pace(p, launch.choice, max(n_ctx - N_PREDICT, 1), N_PREDICT)
    say(verify_start_line(n_ctx, pace.expected_s if pace else None))
    if pace is not None and pace.expected_s is not None and pace.expected_s >= LONG_VERIFY_S:
        say(long_verify_line(pace.expected_s))
    result: VerifyResult | None = None
    failure: str | None = None
    try:
        result = verify(
            launch.url,
            headers=headers,
            pid=child.proc.pid,
            n_ctx_slot=n_ctx,
            progress=emit,
            pace=pace,
            timeout_s=request_timeout(n_ctx, pace),
        )
        failure = result.failure
    except VerifyError as e:
        if stopped():
            return Outcome(None, False, None)
        say(verify_error_line(str(e)))
        return Outcome(None, False, str(e))
    except OSError as e:
        failure = f"no answer from the server ({e})"
    if failure is not None:
        _settle(child)
    if stopped():
        # the request failed because the server was asked to stop
        return Outcome(result, False, None)
    died = child.proc.poll() is not None
    oom = watcher.is_oom or (result is not None and result.oom)
    if died or oom:
        failure = (
            watcher.failure or failure or f"the server exited with code {child.proc.returncode}"
        )
    if result is not None:
        judged = (
            speed_lines(result, *planned_range(p, launch.choice, result))
            if result.ok and not (died or oom)
            else []
        )
        for line in [*verify_lines(result, busy_note=not judged), *judged]:
            say(line)
        speed = speed_record(p, launch.choice, env, result) if result.ok and not died else None
        shown = result if not (died or oom) else _failed(result, failure, oom)
        try_record(
            path,
            partial(record_verify, p=p, launch=launch, result=shown, speed=speed),
            "the verification",
            say,
        )
    return Outcome(result, oom, failure if (died or oom or (result and not result.ok)) else None)


def _settle(child: Child, grace_s: float = 3.0) -> None:
    """After a failed request, let a dying server finish: wait for it to exit (a bounded grace),
    then for the log reader to reach the end of its output, so that the watcher has seen the
    out-of-memory line before it is asked (the connection can close before the server's last log
    line is read)."""
    import subprocess

    try:
        child.proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return  # still serving: it did not die of this request
    if child.reader is not None:
        child.reader.join(grace_s)


def _failed(result: VerifyResult, failure: str | None, oom: bool) -> VerifyResult:
    from dataclasses import replace

    return replace(result, ok=False, failure=failure, oom=oom)
