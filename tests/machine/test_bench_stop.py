"""Stopping a device benchmark stops the servers it started (scripts/calibration/device_lab.py
stop_on_signals): scripts/bench/bench_limit.py, killed with SIGTERM or interrupted (Ctrl-C) while a
llama-server it bisects with is loading, leaves no server behind. The server is a stand-in that
loads forever (a real one in its place behaves the same: each runs in a session of its own, out of
reach of the terminal's Ctrl-C)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT

CHILD = """
import signal
import sys
from pathlib import Path
# as in a terminal: a shell that starts jobs in the background (CI) leaves SIGINT ignored, and
# Python keeps an inherited SIG_IGN
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {root!r})
from scripts.bench import bench_fit, bench_limit
bench_fit.models = lambda tmp, quick: [("stand-in", Path("stand-in.gguf"))]
bench_fit.llamafit_plan = lambda model, margin: ["-c", "1024"]
bench_limit.trained_ctx = lambda model: 4096
sys.exit(bench_limit.main(["--margins", "1024", "--state", {state!r}]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_bench_limit_leaves_no_server_running(tmp_path: Path, sig: int) -> None:
    folder, started = tmp_path / "bin", tmp_path / "server.pid"
    folder.mkdir()
    server = folder / "llama-server"
    server.write_text(
        f"#!{sys.executable}\nimport os, time\n"
        f"open({str(started)!r}, 'w').write(str(os.getpid()))\n"
        "print('llama_model_loader: loaded meta data', flush=True)\ntime.sleep(600)\n"
    )
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    code = CHILD.format(root=str(ROOT), state=str(tmp_path / "state.json"))
    env = dict(os.environ, LLAMAFIT_VULKAN_RPC_BIN=str(folder))
    bench = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
    pid = 0
    try:
        deadline = time.monotonic() + 60
        while not (started.is_file() and started.read_text()) and time.monotonic() < deadline:
            assert bench.poll() is None, "the benchmark ended before it started the server"
            time.sleep(0.05)
        pid = int(started.read_text())
        bench.send_signal(sig)
        assert bench.wait(30) != 0
        assert not _alive(pid)
    finally:
        if bench.poll() is None:
            bench.kill()
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
