"""machine/bounded.py ask_tools: the programs asked together run at once, each answer read within
its own deadline (a cold plan's `llama-server --version` and `--help`)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from llamafit.machine import bounded

PATH = {"PATH": "/usr/bin:/bin"}


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_programs_asked_together_run_at_once(tmp_path: Path) -> None:
    """The first waits for a file only the second writes: read in turn after starting each, the
    first would wait out its deadline; started together, both answer."""
    flag = tmp_path / "flag"
    first = _script(tmp_path / "a", f'while [ ! -e "{flag}" ]; do sleep 0.01; done\necho first\n')
    second = _script(tmp_path / "b", f'touch "{flag}"\necho second >&2\nexit 3\n')
    got = bounded.ask_tools([([first], 20.0), ([second], 20.0)], PATH)
    assert [(a.stdout, a.stderr, a.returncode, a.failure) for a in got] == [
        ("first\n", "", 0, None),
        ("", "second\n", 3, None),
    ]


def test_each_answer_keeps_its_own_failure(tmp_path: Path) -> None:
    """One that cannot run, one past its deadline (killed, its group too), one that answers."""
    hangs = _script(tmp_path / "hangs", "sleep 30\n")
    fine = _script(tmp_path / "fine", "echo fine\n")
    got = bounded.ask_tools(
        [([str(tmp_path / "missing"), "--version"], 5.0), ([hangs, "--help"], 0.2), ([fine], 5.0)],
        PATH,
    )
    assert [(a.stdout, a.returncode) for a in got] == [("", None), ("", None), ("fine\n", 0)]
    assert got[0].failure is not None and got[0].failure.startswith(
        "missing --version cannot be run"
    )
    assert got[1].failure == "hangs --help gave no answer within 0.2 s"
    assert got[2].failure is None


def test_a_hung_program_costs_the_next_no_answer(tmp_path: Path) -> None:
    """Each deadline counts from when its reading begins: the second's answer, long printed,
    is read after the first is given up on."""
    hangs = _script(tmp_path / "hangs", "sleep 30\n")
    fine = _script(tmp_path / "fine", "echo fine\n")
    got = bounded.ask_tools([([hangs, "--version"], 0.3), ([fine, "--help"], 0.3)], PATH)
    assert [(a.stdout, a.returncode, a.failure) for a in got] == [
        ("", None, "hangs --version gave no answer within 0.3 s"),
        ("fine\n", 0, None),
    ]


def test_an_interrupt_leaves_none_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted while the first answer is read, the runs not read yet are killed and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    start, collect = bounded._start, bounded._collect

    def recorded(argv: Sequence[str], env: Mapping[str, str]) -> object:
        run = start(argv, env)
        assert isinstance(run, subprocess.Popen)
        started.append(run)
        return run

    def interrupted(proc: subprocess.Popen[bytes], *args: object) -> bounded.ToolAnswer:
        collect(proc, *args)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(bounded, "_start", recorded)
    monkeypatch.setattr(bounded, "_collect", interrupted)
    fine = _script(tmp_path / "fine", "echo fine\n")
    hangs = _script(tmp_path / "hangs", "sleep 30\n")
    with pytest.raises(KeyboardInterrupt):
        bounded.ask_tools([([fine], 5.0), ([hangs], 5.0)], PATH)
    assert [p.returncode for p in started] == [0, -signal.SIGKILL]
