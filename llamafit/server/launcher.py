"""Run a server as a child process (an edge: subprocess, signals, sockets, HTTP).

Process hygiene: the child gets PR_SET_PDEATHSIG (Linux), so it dies with llamafit even when
llamafit is killed with SIGKILL; SIGINT/SIGTERM are forwarded; every exit path stops the child.
The child's log (stdout and stderr together) is read line by line on a thread and fed to a
watcher that reports progress, readiness and failures.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InputError
from ..machine.bounded import die_with_parent

STOP_GRACE_S = 10.0
KILL_GRACE_S = 5.0


class Watcher(Protocol):
    def feed(self, line: str) -> None: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (`--port auto`)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    except OSError as e:
        raise InputError(f"--host {host}: cannot listen there ({e.strerror or e})") from e


def ensure_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on: a server already there would answer /health for
    ours. SO_REUSEADDR as cpp-httplib and uvicorn set it, so a port in TIME_WAIT still counts as
    free."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            if e.errno == errno.EADDRINUSE:
                raise InputError(
                    f"--port {port}: {where} is already in use; stop what listens there or use "
                    "--port auto"
                ) from e
            raise InputError(f"--port {port}: cannot listen on {where} ({e.strerror or e})") from e


@dataclass
class Child:
    """A running server process and the last lines of its log."""

    proc: subprocess.Popen[str]
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    reader: threading.Thread | None = None
    # a SIGINT/SIGTERM to llamafit was forwarded (and may be escalated)
    stop_requested: bool = False

    def stop(self) -> int:
        """SIGINT (twice), then SIGTERM, then SIGKILL: the child is gone when this returns."""
        # llama-server sometimes ignores a SIGINT that arrives just as it starts listening: ask
        # twice
        for sig, wait in (
            (signal.SIGINT, 5.0),
            (signal.SIGINT, STOP_GRACE_S),
            (signal.SIGTERM, 5.0),
            (signal.SIGKILL, 5.0),
        ):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        if self.reader is not None:
            self.reader.join(2.0)
        return self.proc.wait()


def start(
    argv: Sequence[str],
    env: Mapping[str, str],
    watcher: Watcher,
    echo: Callable[[str], None] | None = None,
) -> Child:
    """Start the server; its log lines go to the watcher (and `echo`, for --verbose)."""
    use_deathsig = sys.platform.startswith("linux")
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        env=dict(env),
        preexec_fn=die_with_parent() if use_deathsig else None,
    )
    child = Child(proc)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            child.tail.append(line)
            watcher.feed(line)
            if echo:
                echo(line)

    child.reader = threading.Thread(target=pump, name="server-log", daemon=True)
    child.reader.start()
    return child


def healthy(url: str, timeout: float = 2.0, headers: Mapping[str, str] | None = None) -> bool:
    import urllib.request  # the HTTP stack loads with a server to ask, not for `plan` (issue #34)

    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout
        ) as r:  # noqa: S310 - our own loopback server
            return bool(r.status == 200)
    except (OSError, ValueError):  # urllib.error.URLError is an OSError
        return False


PROPS_LIMIT = 4 << 20  # bytes of a /props answer read at most (chat templates run to tens of KiB)


def server_props(
    url: str, headers: Mapping[str, str] | None = None, timeout: float = 2.0
) -> dict[str, Any] | None:
    """A llama-server's GET /props as a JSON object; None when it does not answer with one."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout
        ) as r:  # noqa: S310 - loopback, our port
            data = json.loads(r.read(PROPS_LIMIT + 1)[:PROPS_LIMIT]) if r.status == 200 else None
    except (OSError, ValueError, RecursionError):  # URLError is an OSError
        return None
    return data if isinstance(data, dict) else None


def wait_healthy(
    child: Child,
    url: str,
    *,
    timeout_s: float,
    failed: Callable[[], bool],
    headers: Mapping[str, str] | None = None,
    tick: Callable[[], None] | None = None,
) -> bool:
    """Poll `url` until it answers 200; False when the child exits, the log shows a failure, or time
    runs out. `tick` runs between polls (progress reporting)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tick:
            tick()
        if child.proc.poll() is not None or failed():
            return False
        if healthy(url, headers=headers):
            return True
        time.sleep(0.25)
    return False


@dataclass
class StopRequest:
    """Set when llamafit got SIGINT or SIGTERM: whoever waits on the child stops waiting."""

    signum: int | None = None


@contextlib.contextmanager
def forwarding_signals(
    child: Child, on_stop: Callable[[int], None] | None = None
) -> Iterator[StopRequest]:
    """While inside, SIGINT and SIGTERM to llamafit are passed to the child and recorded in the
    StopRequest yielded; leaving stops the child (llama-server loading a model only notes a first
    signal, so the waits must end on the request, not on the child's exit). `on_stop` hears the
    first signal the moment it arrives (a busy server may take seconds to exit)."""
    stop = StopRequest()

    escalating: list[threading.Thread] = []

    def forward(signum: int, _frame: Any) -> None:
        first = stop.signum is None
        stop.signum = signum
        child.stop_requested = True
        with contextlib.suppress(ProcessLookupError):
            child.proc.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        if first and on_stop is not None:
            # the handler runs between two bytecodes of the main thread, which may be writing
            # to the same stream: a reentrant write is refused, and then the line is skipped
            with contextlib.suppress(RuntimeError):
                on_stop(signum)
        if not escalating:  # a server that ignores it is killed after the grace period
            escalating.append(
                threading.Thread(target=_escalate, args=(child.proc,), name="stop", daemon=True)
            )
            escalating[0].start()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        child.stop()


def _escalate(proc: subprocess.Popen[str]) -> None:
    """After a forwarded stop: SIGTERM after STOP_GRACE_S, SIGKILL 5 s later, unless it has
    exited."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def child_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def read_api_key(path: str) -> str:
    """The key from --api-key-file (first line), so it never appears on a command line in `ps`."""
    from ..safe_io import SMALL_FILE, read_regular

    try:  # a regular file, bounded: never /dev/zero or a FIFO that blocks
        key = read_regular(path, SMALL_FILE, follow=True).decode("utf-8").partition("\n")[0].strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--api-key-file {path}: {getattr(e, 'strerror', None) or e}") from e
    if not key:
        raise InputError(f"--api-key-file {path} holds no API key")
    return key
