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


# --- Real devices (issue #11): llama.cpp with the Vulkan and RPC backends ---------------------------
# The binaries: $LLAMAFIT_VULKAN_RPC_BIN (a folder), else build/llama-vulkan-rpc/bin (what .ci/run
# unpacks from ../shared/llama-vulkan-rpc/). Vulkan0 is Mesa's lavapipe, made visible with
# GGML_VK_VISIBLE_DEVICES=0. Tests that need either skip with the reason when it is absent.
VK_RPC_BIN_ENV = "LLAMAFIT_VULKAN_RPC_BIN"


def vulkan_rpc_bin_dir() -> Path | None:
    import os

    override = os.environ.get(VK_RPC_BIN_ENV)
    folder = Path(override) if override else ROOT / "build" / "llama-vulkan-rpc" / "bin"
    return folder if (folder / "llama-server").is_file() else None


@pytest.fixture(scope="session")
def vk_rpc_bin() -> Path:
    """The folder with llama-server, ggml-rpc-server and llama-fit-params built with Vulkan + RPC."""
    folder = vulkan_rpc_bin_dir()
    if folder is None:
        pytest.skip(f"llama.cpp Vulkan/RPC build absent (set {VK_RPC_BIN_ENV} or unpack it into build/llama-vulkan-rpc)")
    return folder


@pytest.fixture(scope="session")
def vulkan0(vk_rpc_bin: Path) -> Path:
    """The Vulkan/RPC bin folder, once `llama-server --list-devices` really lists Vulkan0."""
    import os
    import subprocess

    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    try:
        out = subprocess.run([str(vk_rpc_bin / "llama-server"), "--list-devices"], capture_output=True, text=True,
                             env=env, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"llama-server --list-devices failed: {exc}")
    if "Vulkan0:" not in out.stdout + out.stderr:
        pytest.skip("no Vulkan0 device (install mesa-vulkan-drivers libvulkan1 for lavapipe)")
    return vk_rpc_bin


@pytest.fixture(scope="session")
def shapes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where tests write real-shape models (scripts/make_shapes.py: sparse files, no disk)."""
    return tmp_path_factory.mktemp("shapes")
