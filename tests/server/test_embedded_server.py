"""llama-cpp-python's own server as the engine: the exact command, and one real start."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.memory.config import engine_defaults, with_given
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server.embedded import embedded_argv, embedded_notes
from llamafit.server.log import LogWatcher
from tests.support import FIXTURES

DENSE = FIXTURES / "dense-llama.gguf"
FACTS = build_facts(read_model(DENSE))
ENGINE = "llama-cpp-python"


def resolved(**values: object):  # noqa: ANN201
    return resolve(with_given(engine_defaults(ENGINE), **values), FACTS, engine=ENGINE)


def test_exact_argv() -> None:
    rc = resolved(
        n_ctx=4096, flash_attn="on", type_k="bf16", type_v="f32", n_gpu_layers=3, n_batch=1024
    )
    assert embedded_argv(str(DENSE), rc, host="127.0.0.1", port=8123, python="py") == [
        "py",
        "-m",
        "llamafit.server.embedded_main",
        "--model",
        str(DENSE),
        "--n_ctx",
        "4096",
        "--n_gpu_layers",
        "3",
        "--flash_attn",
        "true",
        "--type_k",
        "30",
        "--type_v",
        "0",
        "--n_batch",
        "1024",
        "--n_ubatch",
        "512",
        "--offload_kqv",
        "true",
        "--use_mmap",
        "true",
        "--use_mlock",
        "false",
        "--logits_all",
        "false",
        "--verbose",
        "true",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    assert embedded_notes(rc) == []


def test_split_load_mode_and_offload() -> None:
    rc = replace(
        resolved(n_ctx=1000, kv_offload=False, load_mode="mlock"),
        split_mode="row",
        main_gpu=1,
        tensor_split=(3.0, 1.0),
    )
    argv = embedded_argv("m.gguf", rc, host="h", port=1, python="py")
    assert argv[argv.index("--n_ctx") + 1] == "1024"  # resolved: PAD(1000, 256)
    pairs = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--")}
    assert (pairs["--offload_kqv"], pairs["--use_mmap"], pairs["--use_mlock"]) == (
        "false",
        "false",
        "true",
    )
    assert (pairs["--split_mode"], pairs["--main_gpu"]) == ("2", "1")
    i = argv.index("--tensor_split")
    assert argv[i + 1 : i + 3] == ["3", "1"]


def test_settings_without_equivalent() -> None:
    rc = replace(
        resolved(n_ctx=4096),
        n_seq_max=4,
        swa_full=False,
        cpu_moe=True,
        load_mode="dio",
        cache_ram_bytes=8192 << 20,
    )
    notes = embedded_notes(rc)
    assert len(notes) == 5 and notes[0].startswith("4 slots: the embedded server has one sequence")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(
    proc: subprocess.Popen[bytes], log: Path, watcher: LogWatcher, timeout: float
) -> None:
    seen = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not watcher.ready and proc.poll() is None:
        text = log.read_text(errors="replace")
        done = text.rfind("\n") + 1
        for line in text[seen:done].splitlines():
            watcher.feed(line)
        seen = max(seen, done)
        time.sleep(0.1)


@pytest.mark.slow
def test_real_start(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn", reason="llama-cpp-python[server] is not installed")
    port = _free_port()
    rc = resolved(n_ctx=4096, flash_attn="on")
    log = tmp_path / "server.log"
    watcher = LogWatcher()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            embedded_argv(str(DENSE), rc, host="127.0.0.1", port=port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_ready(proc, log, watcher, timeout=25)
        assert watcher.ready, watcher.failure or log.read_text()[-2000:]
        assert watcher.url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
            models = json.load(r)
        assert models["data"][0]["id"] == str(DENSE)
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/health", timeout=5
        ) as r:  # llama-swap's check
            assert (r.status, json.load(r)) == (200, {"status": "ok"})
        assert watcher.buffers["KV"] == {"CPU": 2.0}
        assert watcher.kv_caches[0].cells == 4096 and watcher.kv_caches[0].seqs == 1
        assert "(load_mode = mmap)" in log.read_text()  # not the server's default mmap+mlock
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_no_llama_cpp_import() -> None:
    """The mapping is pure: importing it loads neither llama_cpp nor subprocess."""
    code = (
        "import sys, llamafit.server.embedded, llamafit.server.log; "
        "print(sorted(m for m in ('llama_cpp', 'subprocess', 'click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
