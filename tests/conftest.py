from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
BROKEN = FIXTURES / "broken"
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.fixture(scope="session")
def demo_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Gemma 3 270M Q4_K_M (the `demo` extra), assembled into a private cache."""
    from llamafit.demo import demo_model_path

    return demo_model_path(tmp_path_factory.mktemp("demo-cache"))


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Never touch the developer's cache directory."""
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "llamafit-cache"))
    monkeypatch.setenv("LLAMAFIT_HOST_BANDWIDTH", "50e9")  # the speed model's host probe, pinned (host_probe.py)
    monkeypatch.setenv("LLAMAFIT_HOST_FLOPS", "200e9")
