"""`python -m llamafit run …` as a real process for the end-to-end tests: its stderr read line by
line until a prefix appears, stopped by a signal; `gone` waits until a pid has exited."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time


class Run:
    """`python -m llamafit run …` as a real process, its stderr read until a line appears."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llamafit", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []

    def wait_for(self, prefix: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.rstrip("\n")
        raise AssertionError(f"no line starting {prefix!r}; got:\n" + "\n".join(self.lines[-40:]))

    def child_pid(self) -> int:
        return int(next(x for x in self.lines if x.startswith("Started")).split()[2].rstrip(";"))

    def finish(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


# a `Check` table row
CHECK_ROW = re.compile(r" {11}\S+ +(model|KV|RS|compute|output) +[\d,.]+ +[\d,.]+$")


def unwrapped(lines: list[str]) -> list[str]:
    """llamafit's lines with each 80-column continuation (11 spaces) joined back onto its line."""
    out: list[str] = []
    for line in lines:
        if out and line.startswith(" " * 11) and line.strip() and not CHECK_ROW.match(line):
            out[-1] = out[-1].removesuffix(" \\") + " " + line.strip()
        else:
            out.append(line)
    return out


def gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
