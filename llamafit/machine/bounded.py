"""Every run of a program llamafit only asks a question (an edge module): `llama-server --version`,
`--help`, `--list-devices`, `llama-fit-params -fitp on`, vulkaninfo.

Such a program is trusted for nothing (issue #37 F4): a broken build, a hung GPU driver or a
planted binary may print without end, hang, print one endless line, absurd digits or terminal
escapes. So each run here

- reads stdout and stderr as they come, and stops at OUTPUT_CAP bytes in all;
- has a deadline, after which its whole process group (it runs in a session of its own, so any
  child it started goes too) is killed with SIGKILL;
- hands back text with every control character but the newline and the tab escaped
  (safe_text.printable_lines), so nothing of it acts on a terminal;
- says on any failure why, in one line (ToolAnswer.failure): the caller notes it and falls back
  as for a missing tool.

Numbers in the text are the caller's to parse with bounds (bounded_int).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..safe_text import printable, printable_lines

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGKILL it when llamafit dies, however it dies (a
    server that ignores SIGTERM too: llamafit's own SIGINT/SIGTERM are forwarded, then
    escalated)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_parent() -> Callable[[], None] | None:
    """preexec_fn for any child llamafit starts (servers, --help probes): on Linux, dies with
    llamafit."""
    return _die_with_parent if sys.platform.startswith("linux") else None


# a real `llama-server --help` is about 40 KiB, `--list-devices` under 1 KiB, vulkaninfo's full
# report some 200 KiB per device: 4 MiB is far above any honest answer
OUTPUT_CAP = 4 << 20
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What one run printed (escaped), its exit status, and why it is not an answer (or None)."""

    stdout: str
    stderr: str
    returncode: int | None  # None when it was killed or never started
    failure: str | None = None

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def escaped_lines(data: bytes) -> str:
    """Bytes a program printed as text: UTF-8 (invalid bytes replaced), every control character
    but the newline and the tab escaped."""
    return printable_lines(data.decode("utf-8", "replace"))


def bounded_int(digits: str, limit: int) -> int | None:
    """A number a program printed, or None when it has more digits than `limit` has or exceeds it
    (int() of a 5,000-digit string raises; a device of 10^20 MiB is not a device)."""
    if not digits.isascii() or not digits.isdigit() or len(digits) > len(str(limit)):
        return None
    value = int(digits)
    return value if value <= limit else None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (its session: everything it started) while the child is
    not yet reaped, so the group id cannot belong to anyone else."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, without reaping it (its group id stays ours)."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # macOS: reaping is the only way to ask
        return proc.poll() is not None
    try:
        return waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _read_bounded(
    proc: subprocess.Popen[bytes],
    out: dict[int, bytearray],
    end: float,
    cap_bytes: int,
    question: str,
    deadline_s: float,
) -> str | None:
    """Read the child's stdout and stderr into `out` as they come until both close: None, or why
    it stopped early (the deadline `end` passed, or more than `cap_bytes` in all)."""
    assert proc.stdout is not None and proc.stderr is not None
    total = 0
    with selectors.DefaultSelector() as sel:
        for stream in (proc.stdout, proc.stderr):
            sel.register(stream, selectors.EVENT_READ)
        while sel.get_map():
            left = end - time.monotonic()
            if left <= 0:
                return f"{question} gave no answer within {deadline_s:g} s"
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                out[key.fd] += chunk
                total += len(chunk)
                if total > cap_bytes:
                    return f"{question} printed more than {cap_bytes >> 20} MiB"
    return None


def ask_tool(
    argv: Sequence[str],
    env: Mapping[str, str],
    deadline_s: float,
    cap_bytes: int = OUTPUT_CAP,
) -> ToolAnswer:
    """Run `argv` with no input, read what it prints for at most `deadline_s` seconds and
    `cap_bytes` bytes, and leave nothing of it running."""
    return ask_tools([(argv, deadline_s)], env, cap_bytes)[0]


def ask_tools(
    asked: Sequence[tuple[Sequence[str], float]],
    env: Mapping[str, str],
    cap_bytes: int = OUTPUT_CAP,
) -> list[ToolAnswer]:
    """ask_tool for each (argv, deadline_s), the programs started together (their answers come
    in the time of the slowest, not of all in turn: `llama-server --version` and `--help`) and
    read in turn, each for at most its deadline once its reading begins (a hung first program
    costs the others no answer). Interrupted, none is left running."""
    started: list[tuple[subprocess.Popen[bytes] | ToolAnswer, Sequence[str], float]] = []
    answers: list[ToolAnswer] = []
    try:
        for argv, deadline_s in asked:
            started.append((_start(argv, env), argv, deadline_s))
        for run, argv, deadline_s in started:
            if not isinstance(run, ToolAnswer):
                end = time.monotonic() + deadline_s
                run = _collect(run, _question(argv), end, cap_bytes, deadline_s)
            answers.append(run)
    finally:  # interrupted: the runs not read yet go too
        for run, _, _ in started[len(answers) :]:
            if not isinstance(run, ToolAnswer) and run.returncode is None:
                _kill_group(run)
                run.wait()
                for stream in (run.stdout, run.stderr):
                    if stream is not None:
                        stream.close()
    return answers


def _question(argv: Sequence[str]) -> str:
    """What a run asks, for its failure line: the program's name and its --flag."""
    name = os.path.basename(argv[0]) if argv else "?"
    flag = [a for a in argv[1:2] if a.startswith("--")]  # --version, --help, --list-devices
    return printable(" ".join([name, *flag]))


def _start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes] | ToolAnswer:
    """The child running `argv` in a session of its own, or the answer saying it cannot run."""
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    except (OSError, ValueError) as e:
        return ToolAnswer("", "", None, f"{_question(argv)} cannot be run ({printable(str(e))})")


def _collect(
    proc: subprocess.Popen[bytes], question: str, end: float, cap_bytes: int, deadline_s: float
) -> ToolAnswer:
    """What the child prints until `end` (at most `cap_bytes`), its exit status; nothing of it
    left running."""
    assert proc.stdout is not None and proc.stderr is not None
    out: dict[int, bytearray] = {
        proc.stdout.fileno(): bytearray(),
        proc.stderr.fileno(): bytearray(),
    }
    failure = _read_bounded(proc, out, end, cap_bytes, question, deadline_s)
    pause = 0.0005  # a child that closed its output mostly exits at once: ask again soon, then less
    while failure is None and not _exited(proc):
        if time.monotonic() >= end:
            failure = f"{question} gave no answer within {deadline_s:g} s"
        else:
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
    if proc.returncode is None:  # not reaped: the group id is still the child's
        _kill_group(proc)
    returncode = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    stdout, stderr = (escaped_lines(bytes(b)) for b in out.values())
    return ToolAnswer(stdout, stderr, None if failure else returncode, failure)
