"""Host memory bandwidth and matrix throughput, measured once and cached (an edge: numpy, threads,
files).

Generation on the CPU is memory-bound, so the speed model needs the host's bandwidth; assuming one
(DDR5 dual channel: 60 GB/s) is wrong by 2-10x between a laptop and a server. The probe reads a
buffer much larger than the last-level cache with 1, 2, 4, … threads up to one per CPU (numpy
releases the GIL): a max-reduction over int64 reads each byte once, as a token's matrix-vector
products do; the best of a few rounds is kept per thread count, because one core cannot reach the
bandwidth of all of them and llama.cpp may run on fewer threads than cores. Throughput: float32
matrix products (BLAS, all CPUs), best of a few rounds. Then llama.cpp's own kernels
(kernel_probe.py, a child process), in the caches and streaming 256 MiB from memory per weight type
and thread count: a few seconds to twenty on a busy 2-core machine, up to 512 MiB of memory for a
moment. The result is cached per machine in the cache directory. `$LLAMAFIT_HOST_BANDWIDTH` / `$LLAMAFIT_HOST_FLOPS`
(numbers, e.g. `51.2e9`) replace the probe (the bandwidth then holds for every thread count).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kernel_probe import thread_counts as thread_counts  # the child measures them too
from .rates import AttentionRate, KernelRate, Rate

PROBE_BYTES = 256 << 20  # per round, over all threads: far beyond any last-level cache
ROUNDS = 5
KERNEL_PROBE_TIMEOUT_S = 120
# /3: the bandwidth without BLAS threads; /4: flash attention measured; /5: each weight type's
# kernel streaming from memory (kernel_probe.measure_streams)
SCHEMA = "llamafit.host-probe/5"


@dataclass(frozen=True, slots=True)
class HostRates:
    """What the probe measured (or the environment gave): SpeedInputs' host fields."""

    bandwidth: Rate  # every CPU reading
    flops: Rate
    bandwidth_by_threads: tuple[tuple[int, float], ...] = ()  # (threads, bytes/s), ascending
    flops_threads: int = 0  # the threads `flops` was measured with (0: unknown)
    kernels: tuple[
        KernelRate, ...
    ] = ()  # llama.cpp's matrix kernels per weight type (kernel_probe.py)
    attention: AttentionRate | None = None  # llama.cpp's flash attention kernel (kernel_probe.py)


def llama_threads(sys_root: str = "/sys/devices/system/cpu") -> int:
    """The threads llama.cpp computes with by default (-t): common_cpu_get_num_math → on Linux the
    physical cores, counted as distinct topology/thread_siblings (common/common.cpp,
    common_cpu_get_num_physical_cores); elsewhere hardware_concurrency, halved above 4. Hybrid
    Intel CPUs (efficiency cores left out) are not told apart here."""
    siblings = set()
    cpu = 0
    while True:
        try:
            with open(
                f"{sys_root}/cpu{cpu}/topology/thread_siblings", encoding="ascii", errors="replace"
            ) as f:
                siblings.add(f.readline().strip())
        except OSError:
            break
        cpu += 1
    if siblings:
        return len(siblings)
    n = os.cpu_count() or 0
    if n <= 0:
        return 4
    return n if n <= 4 else n // 2


def machine_key() -> str:
    """Identifies this machine for the cache: host name, CPU model, logical CPUs, RAM."""
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None
            )
    except OSError:
        pass
    if cpu is None:  # asked only here: on Linux it runs `uname -p` (a process, milliseconds)
        cpu = platform.processor()
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 0
    return f"{platform.node()}|{cpu}|{os.cpu_count()}|{ram}"


def measure_bandwidth(n_threads: int | None = None) -> float:
    """Bytes/s read by n_threads (default: every CPU) reducing PROBE_BYTES, best of ROUNDS.

    Only numpy's own loops, one part per thread (an integer max-reduction releases the GIL and runs
    on the calling thread). Not a BLAS dot product: BLAS runs it on its own thread pool, so a "1
    thread" figure read every core's bandwidth (on a 2-core VM 36 GB/s where one thread reads
    23)."""
    from concurrent.futures import ThreadPoolExecutor  # the probe's only: not for reading its cache

    import numpy as np

    n = max(1, n_threads or os.cpu_count() or 1)
    per = PROBE_BYTES // n // 8
    parts = [np.arange(per, dtype=np.int64) for _ in range(n)]
    best = 0.0

    def part(i: int) -> float:
        """Reduce part i: the CPU seconds this thread spent on it."""
        c0 = time.thread_time()
        np.maximum.reduce(parts[i])
        return time.thread_time() - c0

    with ThreadPoolExecutor(n) as pool:
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            used = max(pool.map(part, range(n)))
            # one thread: the wall time, or its CPU time where that is less (on a busy machine it
            # waits for a core, which the plan, for free cores, must not count). More threads: the
            # wall time, as they read at once only when they run at once (time-sliced, each
            # would read alone and the sum would exceed what the memory gives them together)
            seconds = time.perf_counter() - t0
            if n == 1 and used > 0:
                seconds = min(seconds, used)
            best = max(best, per * 8 * n / seconds)
    return best


def measure_flops() -> float:
    """FLOP/s of float32 matrix products (BLAS, its own threads), best of ROUNDS."""
    import numpy as np

    m = 1024
    a = np.ones((m, m), dtype=np.float32)
    b = np.ones((m, m), dtype=np.float32)
    a @ b  # warm up the BLAS threads
    best = 0.0
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        a @ b
        best = max(best, 2 * m**3 / (time.perf_counter() - t0))
    return best


def _env_rate(env: Mapping[str, str], name: str) -> Rate | None:
    value = env.get(name)
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return Rate(number, f"${name}") if 0 < number < 1e16 else None


def probe() -> dict[str, object]:
    """Measure this host: bandwidth at each of thread_counts(CPUs), and the FLOP rate (all CPUs)."""
    n_cpu = max(os.cpu_count() or 1, 1)
    by_threads: list[list[float]] = []
    for n in thread_counts(n_cpu):  # more threads never read slower: a count that did was disturbed
        by_threads.append([n, max(measure_bandwidth(n), by_threads[-1][1] if by_threads else 0.0)])
    from .kernel_probe import STREAMS

    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kernels = measure_kernels()
    return {
        "kernels": {k: v for k, v in kernels.items() if k != STREAMS},
        "streams": kernels.get(STREAMS, {}),
        "schema": SCHEMA,
        "machine": machine_key(),
        "time": when,
        "bandwidth_bytes_per_s": max(v for _, v in by_threads),
        "bandwidth_by_threads": by_threads,
        "flops": measure_flops(),
        "flops_threads": n_cpu,
    }


def measure_kernels() -> dict[str, Any]:
    """{type name or ATTENTION: [decode, prompt] FLOP/s per thread, STREAMS: {type name: [[threads,
    bytes/s], …]}} from kernel_probe, run as a child process (a ggml abort or hang costs only the
    kernel figures); empty when it fails."""
    import subprocess
    import sys

    from .kernel_probe import PARENT_ENV, STREAMS

    try:
        out = subprocess.run(
            [sys.executable, "-m", "llamafit.machine.kernel_probe"],
            capture_output=True,
            timeout=KERNEL_PROBE_TIMEOUT_S,
            check=False,
            env={**os.environ, PARENT_ENV: str(os.getpid())},
        )
        found = json.loads(out.stdout.decode("utf-8", "replace") or "{}")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    if not isinstance(found, dict) or out.returncode != 0:
        return {}
    figures: dict[str, Any] = {
        k: v
        for k, v in found.items()
        if isinstance(v, list) and len(v) == 2 and all(_rate(x) for x in v)
    }
    streams = found.get(STREAMS)
    if isinstance(streams, dict):
        figures[STREAMS] = {k: v for k, v in streams.items() if isinstance(k, str) and _curve(v)}
    return figures


def needs_probe(env: Mapping[str, str], cache: Path) -> bool:
    """host_rates will run the probe (seconds of work): neither the environment nor the cache has
    the rates."""
    if _env_rate(env, "LLAMAFIT_HOST_BANDWIDTH") and _env_rate(env, "LLAMAFIT_HOST_FLOPS"):
        return False
    record = _read(cache / "host-probe.json")
    return record is None or record.get("machine") != machine_key()


def host_rates(env: Mapping[str, str], cache: Path) -> HostRates:
    """Memory bandwidth (per thread count) and float32 throughput of this host: from the
    environment, the cache, or the probe."""
    bw, flops = _env_rate(env, "LLAMAFIT_HOST_BANDWIDTH"), _env_rate(env, "LLAMAFIT_HOST_FLOPS")
    if bw and flops:
        return HostRates(bw, flops)
    path, fallback = cache / "host-probe.json", _fallback()
    record = _read(path)
    if (
        (record is None or record.get("machine") != machine_key())
        and fallback is not None
        and _unwritable(cache)
    ):
        # kept there by an earlier run that could not write the cache either
        record = _read(fallback)
    if record is None or record.get("machine") != machine_key():
        record = probe()
        problem = _write(path, record)
        if (
            problem is not None
            and fallback is not None
            and _write(fallback, record, owned=True) is None
        ):
            import sys

            # once: later runs read them there
            sys.stderr.write(
                f"Note: cannot write the cache {cache} ({problem}): the host probe's figures are "
                f"kept in {fallback.parent}\n"
            )
    source = f"measured by the host probe ({record.get('time', '?')})"
    curve = () if bw else tuple((int(n), float(v)) for n, v in record["bandwidth_by_threads"])  # type: ignore[attr-defined]
    return HostRates(
        bw or Rate(_number(record["bandwidth_bytes_per_s"]), source),
        flops or Rate(_number(record["flops"]), source),
        curve,
        0 if flops else int(_number(record["flops_threads"])),
        _kernels(record.get("kernels"), record.get("streams")),
        _attention(record.get("kernels"), record.get("streams")),
    )


def _kernels(value: object, streams: object = None) -> tuple[KernelRate, ...]:
    from .kernel_probe import TYPES

    if not isinstance(value, dict):
        return ()
    streams = streams if isinstance(streams, dict) else {}
    return tuple(
        KernelRate(
            TYPES[name],
            float(r[0]),
            float(r[1]),
            tuple((int(n), float(v)) for n, v in streams[name])
            if _curve(streams.get(name))
            else (),
        )
        for name, r in sorted(value.items())
        if name in TYPES and isinstance(r, list) and len(r) == 2 and _rate(r[0]) and _rate(r[1])
    )


def _attention(value: object, streams: object = None) -> AttentionRate | None:
    from .kernel_probe import ATTENTION

    r = value.get(ATTENTION) if isinstance(value, dict) else None
    curve = streams.get(ATTENTION) if isinstance(streams, dict) else None
    if isinstance(r, list) and len(r) == 2 and _rate(r[0]) and _rate(r[1]):
        return AttentionRate(
            float(r[0]),
            float(r[1]),
            tuple((int(n), float(v)) for n, v in curve) if _curve(curve) else (),  # type: ignore[union-attr]
        )
    return None


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _read(path: Path) -> dict[str, object] | None:
    from ..safe_io import read_regular

    try:  # a small regular file only: never a link, FIFO or device
        record = json.loads(
            read_regular(path, 16384).decode("utf-8"), parse_constant=lambda c: None
        )
    except (OSError, ValueError, RecursionError):
        return None
    ok = (
        isinstance(record, dict)
        and record.get("schema") == SCHEMA
        and all(_rate(record.get(k)) for k in ("bandwidth_bytes_per_s", "flops"))
        and _count(record.get("flops_threads"))
        and _curve(record.get("bandwidth_by_threads"))
        and isinstance(record.get("kernels"), dict)
        and isinstance(record.get("streams"), dict)
    )
    return record if ok else None


def _rate(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e16


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16


def _curve(v: object) -> bool:
    """[[threads, bytes/s], …]: at least one pair, thread counts ascending."""
    if not isinstance(v, list) or not 0 < len(v) <= 64:
        return False
    pairs = [p for p in v if isinstance(p, list) and len(p) == 2 and _count(p[0]) and _rate(p[1])]
    return len(pairs) == len(v) and all(a[0] < b[0] for a, b in zip(pairs, pairs[1:], strict=False))


def _unwritable(cache: Path) -> bool:
    from ..safe_io import private_dir

    try:
        private_dir(cache)
    except OSError:
        return True
    return False


def _fallback() -> Path | None:
    """Where the probe's figures go when the cache cannot be written: a private directory of this
    user under the system's temporary directory (POSIX only)."""
    import tempfile

    getuid = getattr(os, "getuid", None)
    return (
        None
        if getuid is None
        else Path(tempfile.gettempdir()) / f"llamafit-{getuid()}" / "host-probe.json"
    )


def _write(path: Path, record: dict[str, object], owned: bool = False) -> str | None:
    """Best effort, through safe_io (0700 directory, atomic replace, no link followed): why it could
    not be written, or None. `owned`: the directory must also be this user's alone (a shared
    /tmp)."""
    import stat

    from ..safe_io import private_dir, write_atomic

    try:
        private_dir(path.parent)
        st = os.lstat(path.parent)
        if owned and (st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077):
            return "not this user's private directory"
        write_atomic(path, json.dumps(record).encode())
    except OSError as e:
        return e.strerror or str(e)
    return None
