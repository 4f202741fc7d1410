"""Start real llama.cpp processes (Vulkan0 on lavapipe, RPC workers on loopback) and read their
buffers.

Shared by tests/, scripts/calibration/calibrate.py --devices and scripts/bench/bench_fit.py.
Loopback only; every process started here is stopped here.

The binaries: $LLAMAFIT_VULKAN_RPC_BIN, else build/llama-vulkan-rpc/bin (what .ci/run unpacks).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from llamafit.server.log import LogWatcher  # noqa: E402
from tests.support.server_probe import stop_server  # noqa: E402

BIN_ENV = "LLAMAFIT_VULKAN_RPC_BIN"
PORTS = range(
    int(os.environ.get("LLAMAFIT_LAB_PORT_LO", "18100")),
    int(os.environ.get("LLAMAFIT_LAB_PORT_HI", "18200")),
)


_LIVE: set[subprocess.Popen[str]] = set()  # every process started here and not yet stopped


def stop_on_signals() -> None:
    """A script's main calls this: SIGTERM and SIGHUP end it as Ctrl-C does (an exception in the
    main thread), so the `finally` that started each server stops it; at exit, anything still
    running (started here, its stop interrupted) is killed. Without it, Python dies on SIGTERM
    without unwinding and the servers, each in a session of its own, keep running."""

    def leave(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends it at once
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)


def _kill_live() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


atexit.register(_kill_live)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop a started server (tests/support/server_probe.py stop_server: a second signal for one
    llama-server lost while it started listening) and forget it."""
    stop_server(proc, kill_after=10.0)
    _LIVE.discard(proc)


def bin_dir() -> Path | None:
    override = os.environ.get(BIN_ENV)
    folder = Path(override) if override else ROOT / "build" / "llama-vulkan-rpc" / "bin"
    return folder if (folder / "llama-server").is_file() else None


def vk_env(visible: str | None = "0") -> dict[str, str]:
    """lavapipe is a CPU-type Vulkan device: llama.cpp skips it unless GGML_VK_VISIBLE_DEVICES names
    it."""
    env = dict(os.environ)
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    if visible is not None:
        env["GGML_VK_VISIBLE_DEVICES"] = visible
    return env


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


@dataclass
class Loaded:
    """What one start of llama-server reported (MiB per buffer kind and buffer name)."""

    ok: bool
    buffers: dict[str, dict[str, float]]
    failure: str | None
    log: list[str] = field(repr=False, default_factory=list)

    def total(self, name: str) -> float:
        return round(sum(kinds.get(name, 0.0) for kinds in self.buffers.values()), 2)

    def get(self, kind: str, name: str) -> float:
        return self.buffers.get(kind, {}).get(name, 0.0)


def load(
    model: Path | str,
    flags: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 180,
    binary: str = "llama-server",
) -> Loaded:
    """Start llama-server (-lv 4, --no-warmup) on loopback, wait until it listens or fails, stop it.

    A start that fails on its port (another process took it between the probe and the bind) is
    retried."""
    for _ in range(3):
        with serve(model, flags, env=env, timeout_s=timeout_s, binary=binary) as (loaded, _port):
            pass
        if loaded.ok or not any(
            "bind" in ln or "address already in use" in ln.lower() for ln in loaded.log
        ):
            break
    return loaded


@contextmanager
def serve(
    model: Path | str,
    flags: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 180,
    binary: str = "llama-server",
) -> Iterator[tuple[Loaded, int]]:
    """llama-server (-lv 4, --no-warmup) on loopback, running while the block runs: (what it
    reported, port)."""
    folder = bin_dir()
    if folder is None:
        raise RuntimeError("the Vulkan/RPC llama.cpp build is absent")
    port = free_port()
    argv = [
        str(folder / binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        "--no-warmup",
        "--fit",
        "off",
        *flags,
    ]
    watcher = LogWatcher()
    lines: list[str] = []
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env if env is not None else vk_env(),
        start_new_session=True,
    )
    _LIVE.add(proc)
    done = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            watcher.feed(line)
            if watcher.ready or watcher.failure:
                done.set()
        done.set()

    t = threading.Thread(target=pump, daemon=True)
    try:
        t.start()
        done.wait(timeout_s)
        failure = watcher.failure or (None if watcher.ready else "did not start in time")
        yield Loaded(watcher.ready, watcher.buffers, failure, lines), port
    finally:
        _stop(proc)
        if t.is_alive():
            t.join(5)


def run_tool(
    args: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 300
) -> str:
    """Run a one-shot tool from the build (llama-fit-params, llama-server --list-devices): its
    output."""
    folder = bin_dir()
    if folder is None:
        raise RuntimeError("the Vulkan/RPC llama.cpp build is absent")
    proc = subprocess.run(
        [str(folder / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        env=env if env is not None else vk_env(),
        timeout=timeout_s,
        check=False,
    )
    return proc.stdout + proc.stderr


@contextmanager
def rpc_workers(n: int = 2, device: str = "CPU") -> Iterator[list[str]]:
    """Start n ggml-rpc-server workers on 127.0.0.1 serving `device` (CPU, or Vulkan0: lavapipe, 2
    GiB each); yield their host:port endpoints."""
    folder = bin_dir()
    if folder is None:
        raise RuntimeError("the Vulkan/RPC llama.cpp build is absent")
    procs: list[subprocess.Popen[str]] = []
    endpoints: list[str] = []
    try:
        for _ in range(n):
            port = free_port()
            argv = [
                str(folder / "ggml-rpc-server"),
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
                "-d",
                device,
            ]
            env = vk_env("0" if device.startswith("Vulkan") else None)
            procs.append(
                subprocess.Popen(
                    argv,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    text=True,
                )
            )
            _LIVE.add(procs[-1])
            endpoints.append(f"127.0.0.1:{port}")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
        yield endpoints
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            _stop(p)
