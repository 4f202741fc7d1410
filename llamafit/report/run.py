"""`llamafit run`'s words for what happened to the server (server/supervise.py's events)."""

from __future__ import annotations

import signal

from ..fit.retreat import Retreat
from ..server.supervise import (
    Event,
    Exited,
    LoadTimedOut,
    Phase,
    Started,
    Stopped,
    Stopping,
    VerifyProgress,
)
from ..units import MIB

# Why a server dies of a signal, for people (signal(7)); the ones llama.cpp's users meet
SIGNAL_CAUSES = {
    "SIGKILL": "the kernel's out-of-memory killer does this when host RAM runs out (see `dmesg`), "
    "as does `kill -9`",
    "SIGSEGV": "a crash (segmentation fault) in llama-server or a backend driver",
    "SIGABRT": "llama-server aborted (a failed assertion or GGML_ABORT; its last lines say where)",
    "SIGBUS": "a memory-mapped model file became unreadable (truncated, or its disk went away)",
    "SIGILL": "this build uses CPU instructions this machine lacks",
    "SIGFPE": "a crash (arithmetic error) in llama-server",
}


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def exit_lines(e: Exited, server: str = "llama-server") -> list[str]:
    """The server's last log lines, then one line naming how it ended: what its log diagnosed
    (unless SIGKILL ended it), else its exit code or the signal that killed it (and why that signal
    happens)."""
    when = "after it was ready" if e.ready else "before it was healthy"
    if (
        e.diagnosis is not None and e.signal != signal.SIGKILL
    ):  # SIGKILL comes from outside: no log explains it
        head = f"Failed     {e.diagnosis}"
    elif e.signal is not None:
        name = e.signal_name
        what = f"{server} was killed by signal {e.signal}" + (f" ({name})" if name else "")
        if e.stopped_from_outside:
            return [f"Stopped    {what} from outside llamafit"]
        cause = SIGNAL_CAUSES.get(name or "")
        head = f"Failed     {what} {when}" + (f": {cause}" if cause else "")
    elif e.code in (
        0,
        130,
        143,
    ):  # what llama-server's (and a wrapper's) exit after SIGINT/SIGTERM looks like
        return [f"Stopped    {server} exited with code {e.code} (stopped from outside llamafit)"]
    else:
        head = f"Failed     {server} exited with code {e.code} {when}"
    return (["Log        " + "\n           ".join(e.tail)] if e.tail else []) + [head]


def retry_lines(back: Retreat, failure: str, *, at_full_context: bool) -> list[str]:
    """After out of memory: the next, strictly smaller try (fit/retreat.py) and what it changes."""
    changes = ", ".join(f"{flag} {a} → {b}" for flag, a, b in back.changes)
    where = (
        f"at full context on {back.device}"
        if at_full_context
        else f"on {back.device} while loading"
    )
    return [
        f"Retry      out of memory {where} ({failure}); next try uses "
        f"{(back.before_bytes - back.after_bytes) / MIB:,.1f} MiB less there: {changes}"
    ]


def given_up_lines(failure: str | None, *, smaller_tried: bool) -> list[str]:
    """Out of memory and no retry left: no smaller plan fits, or the tries ran out."""
    return [f"Failed     {failure}" + ("; no smaller configuration fits" if smaller_tried else "")]


def timeout_lines(e: LoadTimedOut) -> list[str]:
    shown = f"{e.timeout_s:g}"
    line = f"Failed     the server was not healthy after {shown} s (--load-timeout {shown})"
    if e.phase == "warming up":
        return [
            line,
            "Hint       it was still warming up (a first run compiles the backend's kernels): "
            "skip the warm-up with `-- --no-warmup`, or wait longer with --load-timeout SECONDS",
        ]
    return [line]


def progress_line(e: VerifyProgress) -> str:
    share = 100 * e.done / e.planned if e.planned else 0.0
    # a slow start shows tenths (a long verification used to say 0% for minutes)
    pct = f"{share:.1f}" if 0 < share < 10 else f"{int(share)}"
    left = f", about {_duration(e.left_s)} left" if e.left_s is not None else ""
    return (
        f"Verifying  {e.done:,} of {e.planned:,} tokens ({pct}%) in {_duration(e.elapsed_s)}{left}"
    )


def event_lines(e: Event, server: str = "llama-server") -> list[str]:
    """Lines for people (80 columns after wrap_text) for one supervision event."""
    if isinstance(e, Started):
        return [f"Started    pid {e.pid}; loading (Ctrl-C stops it)"]
    if isinstance(e, Phase):
        return [f"Loading    {e.phase} ({e.elapsed_s:.0f} s)"]
    if isinstance(e, LoadTimedOut):
        return timeout_lines(e)
    if isinstance(e, VerifyProgress):
        return [progress_line(e)]
    if isinstance(e, Exited):
        return exit_lines(e, server)
    if isinstance(e, Stopping):
        # llama-server exits at once on a second signal (server.cpp signal_handler)
        again = "; Ctrl-C again stops it now" if server == "llama-server" else ""
        limit = e.grace_s + e.kill_s
        return [f"Stopping   {server}… (up to {limit:.0f} s, then it is killed{again})"]
    if isinstance(e, Stopped):
        return ["Stopped."]
    raise TypeError(e)


def ready_lines(url: str, *, chat_template: bool, llama_server: bool) -> list[str]:
    """Ready, and what to call when the model brings no chat template."""
    lines = [f"Ready      {url}  (OpenAI-compatible API under /v1)"]
    if not chat_template:
        fix = ", or pass --chat-template (e.g. -- --chat-template chatml)" if llama_server else ""
        lines.append(f"Note       the model has no chat template: use /v1/completions{fix}")
    return lines


def not_recorded_line(reason: str, what: tuple[str, ...]) -> str:
    """Why the load's predicted-vs-reported rows are not calibration
    (memory/calibration.incomplete)."""
    if reason == "nothing_on_gpu":
        return (
            f"Warning    the server put nothing on {what[0]}, which the plan used: is this a "
            "CPU-only build? (not recorded for calibration)"
        )
    return f"Note       not recorded for calibration: the server did not report {', '.join(what)}"


def unplanned_devices_line(devices: list[str], planned: list[str]) -> str:
    """The server put buffers on devices the plan did not have (issue #28): its figures are not
    calibration."""
    return (
        f"Mismatch   the server put buffers on {', '.join(devices)}, which the plan did not have "
        f"(planned: {', '.join(planned) or 'CPU only'}); not recorded for calibration"
    )


def devices_mismatch_line(why: str) -> str:
    """The server lists other local devices than the plan has (issue #28)."""
    return f"Mismatch   {why}; not recorded for calibration"


def verify_start_line(n_ctx_slot: int, expected_s: float | None = None) -> str:
    about = (
        f": about {_duration(expected_s)} at the plan's estimated speed"
        if expected_s is not None
        else ""
    )
    return (
        f"Verify     a {n_ctx_slot:,}-token prompt (the planned context per slot) and a short "
        f"generation{about}"
    )


def long_verify_line(expected_s: float) -> str:
    return (
        f"Warning    the verification may take {_duration(expected_s)}; Ctrl-C stops it (and the "
        "server); run without --verify to skip it"
    )


def verify_error_line(error: str) -> str:
    return f"Warning    could not verify: {error}"


def recorded_line(what: str, path: str) -> str:
    return f"Recorded   {what} in {path}"


def record_error_line(path: str, error: OSError) -> str:
    """A calibration file that cannot be written is a warning: it never stops a healthy server."""
    return f"Warning    could not record to {path}: {error.strerror or error}"


def served_what(speed: dict[str, float]) -> str:
    """What a "serve" record holds, for its Recorded line."""
    return (
        f"{speed['requests']:.0f} request(s) generating ~{speed['generation_tps']:.1f} tokens/s "
        f"(estimated ~{speed['estimated_generation_tps']:.1f})"
    )


HOST_PROBE_LINE = (
    "Measuring  this machine's memory bandwidth and CPU throughput for the speed estimate "
    "(once: later runs read it from the cache)"
)
