"""Where llamafit keeps its files (an edge: reads the environment)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$LLAMAFIT_CACHE_DIR, else $XDG_CACHE_HOME/llamafit, else ~/.cache/llamafit."""
    explicit = os.environ.get("LLAMAFIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llamafit"
