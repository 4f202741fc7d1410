"""scripts/bench/bench_plan.py --guard: plan and check stay cheap next to Python's own start-up
(issue #26).

The guard's limits are ratios measured within one run (CPU time above an imports-only child / that
child's own), generous enough for a busy machine (main before #26: a plan at ~7x, the limit is
1.5x); the test runs the script (best of 2 per figure: the limits leave room for the noise) and
checks its exit code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT


@pytest.mark.slow
def test_bench_plan_guard_holds() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench" / "bench_plan.py"),
            "--guard",
            "--repeat",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    guards = [line for line in out.stdout.splitlines() if line.startswith("guard: ")]
    assert [g.split()[1] for g in guards] == ["plan", "check"], out.stdout
