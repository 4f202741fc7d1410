"""`llamafit ls` over a Hugging Face hub cache of N models: cold and warm, above Python start-up.

The cache is built in a temp directory in the hub layout (`models--org--repo/{refs/main,
snapshots/<commit>/<file> -> ../../blobs/<etag>, blobs/<etag>}`), one repository per model,
from real-shape header-only GGUFs: every spec of fixtures/calibration/gpu-shapes.json
(scripts/fixtures/make_shape_header.py: real layer counts and tensor lists), the Qwen2.5-32B-like
Q4_K_M header with its 152k-token vocabulary (fixtures/header-only) and the small fixtures, in turn.

    python scripts/bench/bench_ls.py [N] [--gpu 24GiB] [--repeat 3]

Each figure is the whole command (`python -m llamafit ls --gpu … --json`, a fresh process, as a
user runs it) less bare Python start-up (`python -c pass`), best of --repeat, as wall time and as
the child's CPU time (which other load on the machine does not inflate): cold = an empty llamafit
cache (every header read, every model fitted) and the model files out of the page cache
(posix_fadvise DONTNEED on them), warm = the cache the cold run left.
Targets (issue #26): cold at most 3 s, warm at most 0.5 s above start-up, for 40 models.
Then, in this process, the measurement behind reading the headers one at a time: the N headers
read and digested (no fit) one at a time and on THREADS threads, the files out of the page cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "fixtures"
SMALL = ("dense-llama", "moe-qwen3", "swa-gemma3", "mla-deepseek2", "swa-gptoss", "hybrid-granite")
TARGETS = {"cold": 3.0, "warm": 0.5}  # seconds above Python start-up
THREADS = 4  # header reads on threads, measured against one at a time


def headers() -> list[tuple[str, bytes]]:
    """(name, GGUF header bytes): the real shapes, the 152k-vocabulary header, the fixtures."""
    from scripts.fixtures.make_shape_header import header, load_specs

    out = [(name, header(spec)) for name, spec in load_specs().items()]
    out.append(
        (
            "qwen2.5-32b-like",
            (FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf").read_bytes(),
        )
    )
    out += [(name, (FIXTURES / f"{name}.gguf").read_bytes()) for name in SMALL]
    return out


def build_hub(hub: Path, n: int) -> None:
    """N repositories `bench/<name>-<i>-GGUF` holding `<name>-Q4_K_M.gguf`, as huggingface_hub lays
    them out."""
    shapes = headers()
    for i in range(n):
        name, data = shapes[i % len(shapes)]
        repo = hub / f"models--bench--{name}-{i:02d}-GGUF"
        commit = hashlib.sha1(f"{name}{i}".encode()).hexdigest()
        etag = hashlib.sha256(data + bytes([i % 256])).hexdigest()
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
        (repo / "blobs").mkdir()
        (repo / "blobs" / etag).write_bytes(data)
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / f"{name}-Q4_K_M.gguf").symlink_to(Path("..", "..", "blobs", etag))


def evict(hub: Path) -> None:
    """Drop the models' pages from the page cache (POSIX_FADV_DONTNEED on these files only), so that
    a cold run reads them from the disk as after a reboot; a no-op where the OS has no fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return
    for blob in hub.glob("models--*/blobs/*"):
        fd = os.open(blob, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(
    cmd: list[str], env: dict[str, str]
) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """Wall and CPU (user + system of the child) seconds."""
    before = os.times()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = os.times()
    return (
        wall,
        (after.children_user - before.children_user)
        + (after.children_system - before.children_system),
        done,
    )


def seed_probe(cache: Path, env: dict[str, str]) -> float:
    """Measure the host once (machine/host_probe.py caches it per machine for every command, as a
    user's first `plan` or `run` would), so that `cold` is the listing's own cost. Its seconds."""
    code = (
        "import os, pathlib; from llamafit.machine.host_probe import host_rates; "
        "host_rates(os.environ, pathlib.Path(os.environ['LLAMAFIT_CACHE_DIR']))"
    )
    wall, _, done = timed([sys.executable, "-c", code], {**env, "LLAMAFIT_CACHE_DIR": str(cache)})
    if done.returncode:
        sys.exit(f"the host probe failed: {done.stderr.decode()[-2000:]}")
    return wall


def header_reads(hub: Path, work: Path, repeat: int) -> dict[int, float]:
    """Seconds to read and digest every header (ls's _prepare, no fit) one at a time (0) and on
    THREADS threads, an empty header cache each time, best of `repeat`."""
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(ROOT))
    from llamafit.commands import ls
    from llamafit.fetch.store_scan import root_for_path, scan

    found, _ = scan([root_for_path(str(hub))])
    out: dict[int, float] = {}
    for n in (0, THREADS):
        best = float("inf")
        for r in range(repeat):
            os.environ["LLAMAFIT_CACHE_DIR"] = str(work / f"headers-{n}-{r}")
            evict(hub)
            t0 = time.perf_counter()
            if n:
                with ThreadPoolExecutor(n) as pool:
                    list(pool.map(ls._prepare, found))
            else:
                list(map(ls._prepare, found))
            best = min(best, time.perf_counter() - t0)
        out[n] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=40)
    ap.add_argument("--gpu", default="24GiB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ls-"))
    try:
        hub = work / "hub"
        build_hub(hub, args.n)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HF_HUB_CACHE": str(hub),
            "HOME": str(work / "home"),
            "LLAMA_CACHE": str(work / "llama.cpp"),
            "OLLAMA_MODELS": str(work / "ollama"),
        }
        env.pop("XDG_CACHE_HOME", None)
        # bytecode compiled once, as `pip install` leaves it (not into the checkout)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(ROOT / "llamafit")], env=env, check=True
        )
        ls = [sys.executable, "-m", "llamafit", "ls", "--gpu", args.gpu, "--json"]
        probe_s = seed_probe(work / "probe", env)
        start, start_cpu = min(
            timed([sys.executable, "-c", "pass"], env)[:2] for _ in range(max(args.repeat, 3))
        )
        runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        rows = -1
        for r in range(args.repeat):
            cache = work / f"cache-{r}"
            shutil.copytree(work / "probe", cache)
            env["LLAMAFIT_CACHE_DIR"] = str(cache)
            for label in ("cold", "warm"):
                if label == "cold":
                    evict(hub)
                wall, cpu, done = timed(ls, env)
                if done.returncode not in (0, 1):
                    sys.exit(
                        f"llamafit ls failed ({done.returncode}): {done.stderr.decode()[-2000:]}"
                    )
                rows = len(json.loads(done.stdout)["models"])
                runs[label].append((wall - start, cpu - start_cpu))
        print(
            f"llamafit ls --gpu {args.gpu} over a hub cache of {args.n} models ({rows} listed), "
            f"{os.cpu_count()} CPUs; Python start-up {start * 1000:.0f} ms; best of {args.repeat}"
        )
        print(
            "  (the host probe, measured once per machine and shared by every command, took "
            f"{probe_s:.1f} s before these runs)"
        )
        print(f"  above start-up: {'wall':>9s} {'CPU':>9s} {'target':>8s} (wall)")
        for label, got in runs.items():
            wall, cpu = min(got)
            met = "met" if wall <= TARGETS[label] else "NOT met"
            print(f"  {label:15s} {wall:9.2f} s {cpu:7.2f} s {TARGETS[label]:6.1f} s  {met}")
        reads = header_reads(hub, work, args.repeat)
        print(
            f"  the {args.n} headers alone, read "
            + ", ".join(
                f"{f'on {n} threads' if n else 'one at a time'} {t:.2f} s" for n, t in reads.items()
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
