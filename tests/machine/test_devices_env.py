"""The real-device environment: the Vulkan/RPC build is found and Vulkan0 is listed (skips
otherwise)."""

from __future__ import annotations

from pathlib import Path


def test_vulkan_rpc_binaries_present(vk_rpc_bin: Path) -> None:
    for name in ("llama-server", "ggml-rpc-server", "llama-fit-params"):
        assert (vk_rpc_bin / name).is_file(), name


def test_vulkan0_listed(vulkan0: Path) -> None:
    assert (vulkan0 / "llama-server").is_file()
