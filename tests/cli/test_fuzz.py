"""A small seeded subset of scripts/fuzz/fuzz.py (issue #16): no tracebacks, no exit codes beyond
0/1/2, every failure one line. Timing and RSS targets are the script's to print, not a unit
test's."""

from __future__ import annotations

import pytest

from tests.support.scripts import script

run = script("fuzz").run


@pytest.mark.parametrize("family", ["header-api", "header-cli", "cmdline"])
def test_seeded_fuzz_subset_meets_the_targets(
    family: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tally, _ = run(60, seed=16, only=family)
    assert sum(tally.cases.values()) > 0
    assert (tally.tracebacks, tally.bad_exits, tally.multi_line) == ([], [], [])
