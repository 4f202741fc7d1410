#!/usr/bin/env python3
"""Memory and time of hostile remote reads, this tree side by side with an earlier commit (issue
#16).

    python scripts/bench/bench_hostile.py           # 10 reads of each hostile mode, vs 4aee539
    python scripts/bench/bench_hostile.py --reads 30 --before main

Each side runs in a fresh process with that side's llamafit first on sys.path (the earlier commit is
unpacked with `git archive`); the hostile servers are this tree's scripts/fuzz/hostile_http.py, each
in a process of its own so that their memory is not counted. Every read goes through the CLI
(`inspect URL` under click's CliRunner), as scripts/fuzz/fuzz.py's http family does.

Printed per side and mode (each in a process of its own): RSS after the first and the last read,
peak RSS of the process (its high-water mark, imports included), and the median and slowest read
time.
  long-vocab  a plausible vocabulary of 1,000-byte tokens: the read stops at the 64 MiB header
              budget
  huge-vocab  a 2**40-token vocabulary: refused before reading (now) or after walking 64 MiB
              (before)
  empty-vocab 8,000,000 empty tokens inside the budget: the most strings a read can make llamafit
              walk
Then the time of `plan` for the slow case of issue #16 (mamba2 on two GPUs) and two others.
Target (issue #16): peak RSS < 200 MB however many reads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = ("long-vocab", "huge-vocab", "empty-vocab")
# the last commit before the fix (the reference cycle, the copies, the late refusal)
BEFORE = "4aee539"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def worker(mode: str, reads: int) -> None:
    """Runs in a process of its own per side and mode: llamafit comes from BENCH_CODE (first on
    sys.path)."""
    import resource

    sys.path.insert(0, os.environ["BENCH_CODE"])
    from click.testing import CliRunner

    from llamafit.cli import cli

    out = {}
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "fuzz" / "hostile_http.py"), mode, "0", "600"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        rss, times, codes = [], [], set()
        for _ in range(reads):
            t0 = time.perf_counter()
            codes.add(CliRunner().invoke(cli, ["inspect", url]).exit_code)
            times.append(time.perf_counter() - t0)
            rss.append(_rss_mb())
    finally:
        server.kill()
        server.wait()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out[mode] = {
        "first": rss[0],
        "last": rss[-1],
        "peak": peak,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "exit_codes": sorted(codes),
    }
    print(json.dumps(out))


PLANS = (
    ("recurrent-mamba2.gguf", "24GiB,12GiB"),
    ("recurrent-mamba2.gguf", "8GiB"),
    ("dense-llama.gguf", "8GiB"),
)


def plan_worker(reads: int) -> None:
    """The time of `plan` (after one untimed warm-up plan per model) for PLANS, median and
    slowest."""
    sys.path.insert(0, os.environ["BENCH_CODE"])
    from click.testing import CliRunner

    from llamafit.cli import cli

    out = {}
    for name, gpu in PLANS:
        args = ["plan", str(ROOT / "fixtures" / name), "--gpu", gpu]
        CliRunner().invoke(cli, args)
        times = []
        for _ in range(reads):
            t0 = time.perf_counter()
            code = CliRunner().invoke(cli, args).exit_code
            times.append(time.perf_counter() - t0)
        out[f"{name} --gpu {gpu}"] = {
            "median_s": statistics.median(times),
            "max_s": max(times),
            "exit": code,
        }
    print(json.dumps(out))


def side(code: Path, reads: int, cache: Path) -> dict:
    env = {
        **os.environ,
        "BENCH_CODE": str(code),
        "LLAMAFIT_CACHE_DIR": str(cache),
        "PYTHONPATH": str(code),
    }
    out = {}
    for mode in MODES:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", mode, "--reads", str(reads)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        out.update(json.loads(done.stdout.strip().splitlines()[-1]))
    done = subprocess.run(
        [sys.executable, __file__, "--worker", "plan", "--reads", str(reads)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    out["plans"] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def unpack(rev: str, into: Path) -> Path:
    archive = into / "src.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "llamafit"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into / "code")
    return into / "code"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--reads", type=int, default=10, help="reads of each hostile mode in one process"
    )
    ap.add_argument(
        "--before", default=BEFORE, help="the commit to compare with (default %(default)s)"
    )
    ap.add_argument("--worker", choices=[*MODES, "plan"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        plan_worker(a.reads) if a.worker == "plan" else worker(a.worker, a.reads)
        return 0
    with tempfile.TemporaryDirectory(prefix="llamafit-bench-hostile-") as tmp:
        sides = {
            f"before ({a.before})": side(
                unpack(a.before, Path(tmp)), a.reads, Path(tmp) / "cache-before"
            ),
            "after (this tree)": side(ROOT, a.reads, Path(tmp) / "cache-after"),
        }
    print(f"{a.reads} hostile remote reads per mode in one process (`inspect URL`), RSS in MB")
    print(
        f"{'side':<20} {'mode':<11} {'first':>6} {'last':>6} {'peak':>6} {'median':>8} "
        f"{'slowest':>8}  exit"
    )
    ok = True
    for name, result in sides.items():
        for mode in MODES:
            r = result[mode]
            print(
                f"{name:<20} {mode:<11} {r['first']:6.0f} {r['last']:6.0f} {r['peak']:6.0f} "
                f"{r['median_s']:7.2f}s {r['max_s']:7.2f}s  {r['exit_codes']}"
            )
        ok = all(result[m]["peak"] < 200 for m in MODES)  # the last side: this tree
    print(f"\n`plan` time, {a.reads} runs after a warm-up, in one process")
    print(f"{'side':<20} {'plan':<44} {'median':>8} {'slowest':>8}")
    for name, result in sides.items():
        for what, r in result["plans"].items():
            print(f"{name:<20} {what:<44} {r['median_s']:7.3f}s {r['max_s']:7.3f}s")
    print("target (after: peak < 200 MB) " + ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
