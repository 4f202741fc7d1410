"""Where llamafit keeps its files (an edge: reads the environment), and whether a model is a URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def cache_dir() -> Path:
    """$LLAMAFIT_CACHE_DIR, else $XDG_CACHE_HOME/llamafit, else ~/.cache/llamafit."""
    explicit = os.environ.get("LLAMAFIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llamafit"


def calibration_path(env: Mapping[str, str]) -> str:
    """Where `llamafit run` records predicted vs reported buffers: $LLAMAFIT_CALIBRATION, else the
    cache."""
    return env.get("LLAMAFIT_CALIBRATION") or os.path.join(cache_dir(), "calibration.jsonl")


def is_url(model_path: str) -> bool:
    """An http(s) URL: a remote model (only its header is read; llama-server downloads it with -mu),
    or a running server's address (`check --verify`)."""
    return model_path.startswith(("http://", "https://"))
