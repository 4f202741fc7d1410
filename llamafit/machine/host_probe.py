"""Host memory bandwidth and matrix throughput, measured once and cached (an edge: numpy, threads, files).

Generation on the CPU is memory-bound, so the speed model needs the host's bandwidth; assuming one
(DDR5 dual channel: 60 GB/s) is wrong by 2-10x between a laptop and a server. The probe copies a
buffer much larger than the last-level cache with one thread per core (numpy releases the GIL): a
max-reduction over int64 reads each byte once, as a token's matrix-vector products do; the best of a
few rounds is kept. Throughput: float32 matrix products
(BLAS, all cores), best of a few rounds. Together about half a second; the result is cached per
machine in the cache directory. `$LLAMAFIT_HOST_BANDWIDTH` / `$LLAMAFIT_HOST_FLOPS` (numbers, e.g.
`51.2e9`) replace the probe.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..fit.speed import Rate

PROBE_BYTES = 256 << 20  # per round, over all threads: far beyond any last-level cache
ROUNDS = 5
SCHEMA = "llamafit.host-probe/1"


def machine_key() -> str:
    """Identifies this machine for the cache: host name, CPU model, logical CPUs, RAM."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 0
    return f"{platform.node()}|{cpu}|{os.cpu_count()}|{ram}"


def measure_bandwidth(n_threads: int | None = None) -> float:
    """Bytes/s read by n_threads (default: every CPU) reducing PROBE_BYTES, best of ROUNDS."""
    import numpy as np

    n = max(1, n_threads or os.cpu_count() or 1)
    per = PROBE_BYTES // n // 8
    parts = [np.arange(per, dtype=np.int64) for _ in range(n)]
    floats = [p.view(np.float64) for p in parts]
    best = 0.0
    with ThreadPoolExecutor(n) as pool:
        for _ in range(ROUNDS):  # integer max-reduction, one part per thread; and BLAS dot products
            t0 = time.perf_counter()
            list(pool.map(lambda i: np.maximum.reduce(parts[i]), range(n)))
            best = max(best, per * 8 * n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            list(pool.map(lambda i: floats[i] @ floats[i], range(n)))
            best = max(best, per * 8 * n / (time.perf_counter() - t0))
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


def host_rates(env: Mapping[str, str], cache: Path) -> tuple[Rate, Rate]:
    """(memory bandwidth, float32 throughput) of this host: from the environment, the cache, or the probe."""
    bw, flops = _env_rate(env, "LLAMAFIT_HOST_BANDWIDTH"), _env_rate(env, "LLAMAFIT_HOST_FLOPS")
    if bw and flops:
        return bw, flops
    path = cache / "host-probe.json"
    key = machine_key()
    record = _read(path)
    if record is None or record.get("machine") != key:
        record = {"schema": SCHEMA, "machine": key, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "bandwidth_bytes_per_s": measure_bandwidth(), "flops": measure_flops()}  # fmt: skip
        _write(path, record)
    when = record.get("time", "?")
    bw = bw or Rate(_number(record["bandwidth_bytes_per_s"]), f"measured by the host probe ({when})")
    flops = flops or Rate(_number(record["flops"]), f"measured by the host probe ({when})")
    return bw, flops


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _read(path: Path) -> dict[str, object] | None:
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 4096:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(record, dict) and record.get("schema") == SCHEMA
          and all(isinstance(record.get(k), (int, float)) and 0 < record[k] < 1e16
                  for k in ("bandwidth_bytes_per_s", "flops")))  # fmt: skip
    return record if ok else None


def _write(path: Path, record: dict[str, object]) -> None:
    """Best effort: a cache that cannot be written only means the probe runs again next time."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".host-probe.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass
