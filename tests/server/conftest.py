"""Fixtures of the tests that start `llamafit run` as a real process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a `llamafit run` child: a private cache and calibration file, and no
    $LLAMA_SERVER (each test names the server it wants)."""
    e = dict(os.environ)
    e.update(
        LLAMAFIT_CACHE_DIR=str(tmp_path / "cache"),
        LLAMAFIT_CALIBRATION=str(tmp_path / "calibration.jsonl"),
    )
    e.pop("LLAMA_SERVER", None)
    return e
