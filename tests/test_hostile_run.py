"""`llamafit run` against hostile servers (issue #16): a server that ignores SIGINT/SIGTERM, a
--help probe that hangs, another server already answering on the port. Stand-in servers are
Python scripts that answer --version/--help like llama-server; every process is checked gone."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest
from conftest import FIXTURES
from test_run_e2e import Run, gone
from test_server_find import NEW_HELP, NEW_VERSION

DENSE = str(FIXTURES / "dense-llama.gguf")

_SERVE = """
import signal, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
srv = HTTPServer(("127.0.0.1", port), H)
srv.timeout = 0.2
print(f"main: server is listening on http://127.0.0.1:{port} - starting the main loop", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    srv.handle_request()
"""
_HANG_HELP = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.environ["PROBE_PID_FILE"], "w").write(str(os.getpid()))
time.sleep(60)
"""
_SILENT = """
import time
time.sleep(60)
"""


def stand_in(where: Path, *, serve: str, on_help: str | None = None) -> Path:
    """A llama-server stand-in: --version and --help like the real one, anything else runs `serve`."""
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "llama-server"
    help_part = f"    exec({on_help!r})\n" if on_help else ""
    exe.write_text(f"#!{sys.executable}\nimport sys\n"
                   f"if sys.argv[1] == '--version':\n    sys.stderr.write({NEW_VERSION!r})\n"
                   f"elif sys.argv[1] == '--help':\n{help_part}    sys.stdout.write({NEW_HELP!r})\n"
                   f"else:\n    exec({serve!r})\n")  # fmt: skip
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(LLAMAFIT_CACHE_DIR=str(tmp_path / "cache"), LLAMAFIT_CALIBRATION=str(tmp_path / "calibration.jsonl"))
    e.pop("LLAMA_SERVER", None)
    return e


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_server_ignoring_stop_signals_is_killed_and_llamafit_exits(env: dict[str, str], tmp_path: Path,
                                                                     sig: int) -> None:  # fmt: skip
    exe = stand_in(tmp_path / "srv", serve=_SERVE)
    run = Run(DENSE, "--gpu", "cpu", "--ctx", "2048", "--port", "auto", "--server", str(exe), env=env)
    try:
        run.wait_for("Ready", timeout=60)
        pid = run.child_pid()
    finally:
        code = run.finish(sig, timeout=60)
    assert code in (0, 130, 143)
    assert gone(pid)


def test_sigterm_during_the_help_probe_kills_the_probe(env: dict[str, str], tmp_path: Path) -> None:
    exe = stand_in(tmp_path / "srv", serve=_SILENT, on_help=_HANG_HELP)
    pid_file = tmp_path / "probe.pid"
    env["PROBE_PID_FILE"] = str(pid_file)
    run = Run(DENSE, "--gpu", "cpu", "--ctx", "2048", "--dry-run", "--server", str(exe), env=env)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and run.proc.poll() is None
        time.sleep(0.05)
    run.finish(signal.SIGTERM)
    assert gone(int(pid_file.read_text()))


def test_another_server_on_the_port_is_not_taken_for_ours(env: dict[str, str], tmp_path: Path) -> None:
    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    other = ThreadingHTTPServer(("127.0.0.1", 0), Answer)  # any free port: test runs may overlap
    port = other.server_address[1]
    Thread(target=other.serve_forever, daemon=True).start()
    exe = stand_in(tmp_path / "srv", serve=_SILENT)
    try:
        out = subprocess.run([sys.executable, "-m", "llamafit", "run", DENSE, "--gpu", "cpu", "--ctx", "2048",
                              "--port", str(port), "--server", str(exe)], capture_output=True, text=True, env=env,
                             timeout=120)  # fmt: skip
    finally:
        other.shutdown()
        other.server_close()
    # the port is checked before the server starts (issue #10); the child's own log is the second line of defence
    assert out.returncode == 2
    assert "Ready" not in out.stderr and "Started" not in out.stderr
    assert not (tmp_path / "calibration.jsonl").exists()
    assert out.stderr.splitlines()[-1] == (f"Error: --port {port}: 127.0.0.1:{port} is already in use; stop what "
                                           "listens there or use --port auto")


_LOADING = """
import time
print("llama_model_loader: loaded meta data with 30 key-value pairs", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_orphan_when_llamafit_is_stopped_while_the_model_loads(env: dict[str, str], tmp_path: Path,
                                                                  sig: int) -> None:  # fmt: skip
    exe = stand_in(tmp_path / "srv", serve=_LOADING)
    run = Run(DENSE, "--gpu", "cpu", "--ctx", "2048", "--port", "auto", "--server", str(exe), env=env)
    try:
        run.wait_for("Started", timeout=60)
        pid = run.child_pid()
        time.sleep(0.5)  # inside the health wait
    finally:
        run.finish(sig, timeout=60)
    assert run.proc.poll() is not None
    assert gone(pid)


_OOM_THEN_WAIT = """
import time
print("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 46080000000", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_orphan_when_llamafit_is_stopped_during_an_oom_retry(env: dict[str, str], tmp_path: Path,
                                                                sig: int) -> None:  # fmt: skip
    exe = stand_in(tmp_path / "srv", serve=_OOM_THEN_WAIT)
    run = Run(DENSE, "--gpu", "cpu", "--port", "auto", "--server", str(exe), env=env)
    try:
        run.wait_for("Retry", timeout=60)
        run.wait_for("Started", timeout=60)
        pids = [int(x.split()[2].rstrip(";")) for x in run.lines if x.startswith("Started")]
    finally:
        run.finish(sig, timeout=60)
    assert len(pids) == 2
    assert all(gone(pid) for pid in pids)
