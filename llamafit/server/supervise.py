"""What happens to a server llamafit started, as typed events (an edge: processes and HTTP).

Supervision returns events; `report/run.py` words them. The events: `Started` (the pid), `Phase`
(the loading phase the log shows), `LoadTimedOut` (with the phase it was in), `VerifyProgress`
(tokens done of planned during `run --verify`, from the server's GET /slots), `Exited` (the exit
code, or the signal that killed it, with the last lines of its log) and `Stopped` (llamafit was
asked to stop: SIGINT or SIGTERM).
"""

from __future__ import annotations

import json
import signal as signals
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

TAIL_LINES = 12  # the server's last log lines shown when it fails


@dataclass(frozen=True, slots=True)
class Started:
    pid: int


@dataclass(frozen=True, slots=True)
class Phase:
    phase: str  # LogWatcher.progress: "loading model", "warming up", …
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class LoadTimedOut:
    timeout_s: float
    phase: str  # the phase the log showed when time ran out


@dataclass(frozen=True, slots=True)
class VerifyProgress:
    done: int  # prompt tokens evaluated plus tokens generated so far
    planned: int  # the prompt's tokens plus the generation asked for
    elapsed_s: float
    left_s: float | None  # at the rate so far; None before the first batch is done


@dataclass(frozen=True, slots=True)
class Exited:
    """The server exited on its own (no stop was asked for)."""

    code: int | None  # its exit status, or None when a signal killed it
    signal: int | None  # the signal that killed it
    ready: bool  # it had become healthy before it exited
    tail: tuple[str, ...] = ()  # its last log lines
    diagnosis: str | None = None  # the known failure its log shows (LogWatcher.failure), one line

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signals.Signals(self.signal).name
        except ValueError:
            return None

    @property
    def stopped_from_outside(self) -> bool:
        """SIGINT or SIGTERM sent to the server by someone else: a stop, not a failure."""
        return self.signal in (signals.SIGINT, signals.SIGTERM)


@dataclass(frozen=True, slots=True)
class Stopping:
    """A SIGINT/SIGTERM to llamafit, passed on to the server: said the moment it arrives. The
    server gets `grace_s` to exit before it is terminated, and is killed `kill_s` after that
    (server/launcher.py _escalate)."""

    signum: int
    grace_s: float
    kill_s: float


@dataclass(frozen=True, slots=True)
class Stopped:
    signum: int


Event = Started | Phase | LoadTimedOut | VerifyProgress | Exited | Stopping | Stopped


def exited(
    returncode: int, *, ready: bool, tail: Iterable[str] = (), diagnosis: str | None = None
) -> Exited:
    """Popen's returncode as an event: negative is the signal that killed the process."""
    lines = tuple(tail)[-TAIL_LINES:]
    if returncode < 0:
        return Exited(None, -returncode, ready, lines, diagnosis)
    return Exited(returncode, None, ready, lines, diagnosis)


class _Progress(Protocol):
    @property
    def progress(self) -> str: ...


PHASE_EVERY_S = 10.0  # a line at least this often while loading, so a slow load shows signs of life


def phase_events(
    watcher: _Progress, clock: Callable[[], float] = time.monotonic
) -> Callable[[], Phase | None]:
    """A tick for the wait on /health: the loading phase, with the time since the start, when it
    changes (and every PHASE_EVERY_S); None between."""
    start = clock()
    last: list[tuple[str, float]] = [("", start)]

    def tick() -> Phase | None:
        phase, now = watcher.progress, clock()
        if phase and (phase != last[0][0] or now - last[0][1] >= PHASE_EVERY_S):
            last[0] = (phase, now)
            return Phase(phase, now - start)
        return None

    return tick


# --- run --verify: progress from the server's GET /slots
# --------------------------------------------- tools/server/server-context.cpp
# server_slot::to_json: each slot's is_processing, n_prompt_tokens_processed (the prompt tokens
# whose batches are done) and next_token[0].n_decoded (tokens generated)


def slot_progress(slots: object) -> int | None:
    """Tokens done by the busiest processing slot of a /slots answer; None when none is processing
    or the answer is not llama-server's."""
    if not isinstance(slots, list):
        return None
    best: int | None = None
    for s in slots:
        if not isinstance(s, dict) or s.get("is_processing") is not True:
            continue
        prompt = s.get("n_prompt_tokens_processed")
        if not isinstance(prompt, int) or isinstance(prompt, bool):
            continue
        nxt = s.get("next_token")
        first = nxt[0] if isinstance(nxt, list) and nxt else nxt
        decoded = first.get("n_decoded", 0) if isinstance(first, dict) else 0
        done = prompt + (
            decoded if isinstance(decoded, int) and not isinstance(decoded, bool) else 0
        )
        best = done if best is None else max(best, done)
    return best


@dataclass(frozen=True, slots=True)
class Pace:
    """What the speed model expects of a verification: the whole request's seconds (None: no
    estimate), and how a token's time grows with the context already filled: the time of a token
    after n tokens is t0 * (1 + growth * n) (attention reads every filled cell: fit/speed.py
    _prompt_tps), 0 for a constant rate."""

    expected_s: float | None = None
    growth: float = 0.0


def verify_progress(
    done: int, planned: int, elapsed_s: float, pace: Pace | None = None
) -> VerifyProgress:
    """The progress event, with the time left: the time so far scaled by the work left, where a
    token's work grows with the fill as `pace` says (the rate so far alone would promise too little
    time, later batches being slower); before the first batch is done, the estimate less the time
    so far (None without one, or once it is spent)."""
    done = min(max(done, 0), planned)
    growth = pace.growth if pace is not None else 0.0

    def work(n: int) -> float:  # the integral of 1 + growth * x from 0 to n
        return n + growth * n * n / 2

    left: float | None = None
    if done > 0:
        left = elapsed_s * (work(planned) - work(done)) / work(done)
    elif pace is not None and pace.expected_s is not None and pace.expected_s > elapsed_s:
        left = pace.expected_s - elapsed_s
    return VerifyProgress(done, planned, elapsed_s, left)


VERIFY_EVERY_S = 10.0


class SlotsWatch:
    """While a long request runs, poll GET /slots and emit VerifyProgress every `every_s` (a
    thread)."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        planned: int,
        emit: Callable[[VerifyProgress], None],
        every_s: float = VERIFY_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        pace: Pace | None = None,
    ) -> None:
        self._url, self._headers, self._planned, self._emit = (
            url.rstrip("/") + "/slots",
            dict(headers),
            planned,
            emit,
        )
        self._every, self._clock, self._pace = every_s, clock, pace
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verify-progress", daemon=True)

    def __enter__(self) -> SlotsWatch:
        self._start = self._clock()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._done.wait(self._every):
            done = self._poll()
            if done is not None and not self._done.is_set():
                elapsed = self._clock() - self._start
                self._emit(verify_progress(done, self._planned, elapsed, self._pace))

    def _poll(self) -> int | None:
        try:
            req = urllib.request.Request(self._url, headers=self._headers)
            with urllib.request.urlopen(req, timeout=5.0) as r:  # noqa: S310 - loopback, our server
                return slot_progress(json.loads(r.read(4 << 20)))
        except (urllib.error.URLError, OSError, ValueError, RecursionError):
            return None  # an older build without /slots, or busy: no line this time
