"""`--verify`: prove a running llama-server survives a prompt that fills the planned context (an
edge: HTTP to the server on loopback, NVML/sysfs for device memory).

After the server is Ready, one request sends a prompt of exactly `n_ctx_slot - n_predict` tokens
(token ids from the server's own /tokenize of generated text, so no tokenizer guesswork) and asks
for `n_predict` more. This is when llama.cpp first uses the whole KV cache and its largest attention
buffers: allocation failures the load did not show (the CUDA pool, cuBLAS workspaces, a driver that
overcommitted) appear here. Measured: the server's timings (time to first token = its prompt time,
prompt and generation tokens/s), the device memory in use where the driver tells (NVML per process,
amdgpu sysfs per card), the server's resident host memory, and whether it is still alive and
healthy.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .supervise import Pace, SlotsWatch, VerifyProgress

N_PREDICT = 16
_WORDS = (
    "memory",
    "context",
    "layer",
    "token",
    "river",
    "mountain",
    "quiet",
    "number",
    "seven",
    "green",
    "window",
    "system",
    "because",
    "although",
    "answer",
    "question",
    "garden",
    "engine",
    "paper",
    "light",
    "under",
    "between",
    "simple",
    "history",
    "market",
    "winter",
    "signal",
    "travel",
    "doctor",
    "music",
)


@dataclass(frozen=True)
class DeviceMemory:
    device: str
    used_bytes: int
    source: str  # "NVML (this process)" | "amdgpu sysfs (whole card)"


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    n_ctx_slot: int
    n_prompt: int  # tokens the server evaluated
    n_predicted: int
    ttft_s: float | None  # the server's prompt time: time to first token
    prompt_tps: float | None
    generation_tps: float | None
    wall_s: float
    device_memory: tuple[DeviceMemory, ...]
    device_memory_note: str | None  # why there is no device reading
    host_rss_bytes: int | None
    failure: str | None = None  # what went wrong (one line)
    oom: bool = False
    timings: dict[str, Any] = field(default_factory=dict)
    # the machine while the request ran: the 1-minute load average at its end, and the CPUs; a load
    # above the CPUs means other work held the cores (None: unknown)
    load_average: float | None = None
    cpus: int | None = None

    @property
    def busy(self) -> bool:
        """Other work held the cores while the server computed: more runnable threads than CPUs."""
        return (
            self.load_average is not None
            and self.cpus is not None
            and (self.load_average > self.cpus)
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n_ctx_slot": self.n_ctx_slot,
            "n_prompt": self.n_prompt,
            "n_predicted": self.n_predicted,
            "ttft_s": self.ttft_s,
            "prompt_tps": self.prompt_tps,
            "generation_tps": self.generation_tps,
            "wall_s": round(self.wall_s, 3),
            "device_memory": [
                {"device": d.device, "used_bytes": d.used_bytes, "source": d.source}
                for d in self.device_memory
            ],
            "device_memory_note": self.device_memory_note,
            "host_rss_bytes": self.host_rss_bytes,
            "failure": self.failure,
            "oom": self.oom,
            "load_average": self.load_average,
            "cpus": self.cpus,
        }


class VerifyError(Exception):
    """The server did not answer the way llama-server does (one line)."""


def _post(
    url: str, body: dict[str, Any], headers: Mapping[str, str], timeout: float
) -> dict[str, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = json.loads(r.read(64 << 20))
    if not isinstance(data, dict):
        raise VerifyError(f"{url} answered {type(data).__name__}, not an object")
    return data


def _get(url: str, headers: Mapping[str, str], timeout: float = 10.0) -> dict[str, Any]:
    req = urllib.request.Request(url, headers=dict(headers))
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = json.loads(r.read(16 << 20))
    if not isinstance(data, dict):
        raise VerifyError(f"{url} answered {type(data).__name__}, not an object")
    return data


def server_slots(url: str, headers: Mapping[str, str]) -> tuple[int, int]:
    """(context per slot, slots) from llama-server's /props."""
    try:
        props = _get(url + "/props", headers)
        n_ctx = int(props["default_generation_settings"]["n_ctx"])
        return n_ctx, int(props.get("total_slots") or 1)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise VerifyError(
            f"{url}/props: not a llama-server that reports its context ({e})"
        ) from None


def generated_text(n_words: int, seed: int = 0) -> str:
    """Plain generated prose (no network, no files): varied words so tokens are realistic."""
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return " ".join(w + ("." if i % 12 == 11 else "") for i, w in enumerate(words))


def filler_tokens(url: str, n: int, headers: Mapping[str, str]) -> list[int]:
    """n token ids from the server's /tokenize of generated text (repeated when short)."""
    text = generated_text(max(64, min(n, 200_000)))
    tokens = _post(url + "/tokenize", {"content": text}, headers, 60.0).get("tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise VerifyError(f"{url}/tokenize returned no tokens")
    return (tokens * (n // len(tokens) + 1))[:n]


def device_memory(
    pid: int | None, sysfs: str = "/sys/class/drm"
) -> tuple[tuple[DeviceMemory, ...], str | None]:
    """Device memory in use: NVML's per-process figure for `pid`, else amdgpu's per card; (readings,
    why none)."""
    found: list[DeviceMemory] = []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if pid is None or proc.pid == pid:
                        found.append(
                            DeviceMemory(
                                f"CUDA{i}", int(proc.usedGpuMemory or 0), "NVML (this process)"
                            )
                        )
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library: no reading
        found = []
    for card in (
        sorted(Path(sysfs).glob("card[0-9]*")) if not found and os.path.isdir(sysfs) else []
    ):
        used = card / "device" / "mem_info_vram_used"
        try:
            found.append(
                DeviceMemory(card.name, int(used.read_text().strip()), "amdgpu sysfs (whole card)")
            )
        except (OSError, ValueError):
            continue
    if found:
        return tuple(found), None
    return (
        (),
        "no GPU memory reading: neither NVML nor amdgpu sysfs reports a device (CPU only or "
        "another driver)",
    )


def host_rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001 - gone, or no psutil
        return None


def verify(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    pid: int | None = None,
    n_ctx_slot: int | None = None,
    n_predict: int = N_PREDICT,
    timeout_s: float | None = None,
    progress: Callable[[VerifyProgress], None] | None = None,
    pace: Pace | None = None,
) -> VerifyResult:
    """Fill one slot's context and generate; never raises for a server that fails (the result says).
    `progress` gets the server's progress (GET /slots) every 10 s while the request runs, its time
    left shaped by `pace` (the speed model's expectation)."""
    headers = dict(headers or {})
    n_ctx = n_ctx_slot or server_slots(url, headers)[0]
    n_prompt = max(n_ctx - n_predict, 1)
    tokens = filler_tokens(url, n_prompt, headers)
    t0 = time.monotonic()
    body = {
        "prompt": tokens,
        "n_predict": n_predict,
        "cache_prompt": False,
        "ignore_eos": True,
        "temperature": 0,
    }
    failure = None
    data: dict[str, Any] = {}
    watch = (
        SlotsWatch(url, headers, n_prompt + n_predict, progress, pace=pace)
        if progress
        else contextlib.nullcontext()
    )
    try:
        with watch:
            data = _post(url + "/completion", body, headers, timeout_s or max(300.0, n_prompt / 10))
    except urllib.error.HTTPError as e:
        failure = (
            f"the server answered HTTP {e.code}: "
            f"{e.read(2000).decode('utf-8', 'replace').strip()[:300]}"
        )
    except (OSError, ValueError) as e:
        failure = f"no answer to the full-context request ({e})"
    wall = time.monotonic() - t0
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    assert isinstance(timings, dict)
    devices, note = device_memory(pid)
    oom = failure is not None and any(
        w in failure.lower() for w in ("out of memory", "oom", "failed to allocate")
    )

    def num(key: str) -> float | None:
        v = timings.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    prompt_ms = num("prompt_ms")
    load, cpus = machine_load()
    return VerifyResult(
        failure is None,
        n_ctx,
        int(num("prompt_n") or 0) + int(num("cache_n") or 0),
        int(num("predicted_n") or 0),
        None if prompt_ms is None else prompt_ms / 1000,
        num("prompt_per_second"),
        num("predicted_per_second"),
        wall,
        devices,
        note,
        host_rss(pid),
        failure,
        oom,
        dict(timings),
        load,
        cpus,
    )


def machine_load() -> tuple[float | None, int | None]:
    """(1-minute load average, CPUs) of this machine now; None where unknown (Windows)."""
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    return load, os.cpu_count()


BUSY_WHY = (
    "llama.cpp's threads wait for one another at every step of a token, so a thread that "
    "loses its core stalls them all"
)


def speed_lines(
    r: VerifyResult, expected: tuple[float, float, float] | None, fill: int
) -> list[str]:
    """The measured generation speed against the plan's range at that fill (speed.
    generation_range_at: low, estimate, high), and why where it lies outside."""
    m = r.generation_tps
    if not r.ok or not m or expected is None:
        return []
    low, mid, high = expected
    at = f"at {fill:,} tokens of context"
    if low <= m <= high:
        return _wrap("Speed", f"as planned: {m:,.1f} tokens/s {at}, in {_tps(low, high)}")
    where = "below" if m < low else "above"
    text = f"generation {m:,.1f} tokens/s {at} is {where} the plan's {_tps(low, high)}"
    if m < low and r.busy:
        why = (
            f"the machine was busy (load average {r.load_average:,.1f} on {r.cpus} CPUs): "
            f"{BUSY_WHY}; the plan is for free cores, and on a busy machine fewer threads "
            "(llama-server -t) lose less"
        )
    elif m < low:
        why = "the estimate is too high for this machine; runs like this one calibrate later plans"
    else:
        why = "the estimate is too low for this machine; runs like this one calibrate later plans"
    return _wrap("Warning", f"{text}: {why}")


def _tps(low: float, high: float) -> str:
    return f"{low:,.1f}-{high:,.1f} tokens/s"


def verify_lines(r: VerifyResult, *, busy_note: bool = True) -> list[str]:
    """The verification for people (MiB only here). `busy_note`: say under the timings when the
    machine was busy (False where a speed judgment, speed_lines, says it)."""
    lines = []
    if r.ok:
        lines.append(
            f"Verified   {r.n_prompt:,} prompt tokens + {r.n_predicted} generated in a "
            f"{r.n_ctx_slot:,}-token slot"
        )
        if r.ttft_s is not None and r.prompt_tps and r.generation_tps:
            lines += _wrap(
                "",
                f"time to first token {r.ttft_s:,.1f} s ({r.prompt_tps:,.1f} tokens/s prompt); "
                f"generation {r.generation_tps:,.1f} tokens/s at a full context",
            )
    else:
        lines.append(f"Failed     the full-context request: {r.failure}")
    for d in r.device_memory:
        lines.append(f"           {d.device}: {d.used_bytes / 2**20:,.0f} MiB in use ({d.source})")
    if r.device_memory_note:
        lines += _wrap("", r.device_memory_note)
    if r.host_rss_bytes:
        lines.append(f"           server resident host memory {r.host_rss_bytes / 2**20:,.0f} MiB")
    if r.ok and r.busy and busy_note:
        lines += _wrap(
            "",
            f"the machine was busy (load average {r.load_average:,.1f} on {r.cpus} CPUs): "
            "these speeds are not what it gives with its cores free",
        )
    return lines


def _wrap(label: str, text: str) -> list[str]:
    """`label` in the 11-column label field, `text` wrapped at 80 columns under it."""
    import textwrap

    return textwrap.wrap(
        text,
        80,
        initial_indent=f"{label:<11}",
        subsequent_indent=" " * 11,
        break_long_words=False,
        break_on_hyphens=False,
    )
