"""Solver speed: a full plan (every variable free) for a 64-layer and a 100-layer model.

    python scripts/bench/bench_solver.py [--repeat N]

Prints the time of solve() alone and of plan() (solve + trade-off table + marginal costs),
best of N, and how many memory-model evaluations each took. Target (issue 4): <= 100 ms for a
full plan of a 100-layer model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.facts.hparams import build_facts  # noqa: E402
from llamafit.fit.explain import plan  # noqa: E402
from llamafit.fit.search import Target  # noqa: E402
from llamafit.fit.solver import Policy, solve  # noqa: E402
from llamafit.machine.devices import host  # noqa: E402
from llamafit.machine.hardware import gpu_specs  # noqa: E402  # noqa: E402
from llamafit.memory.config import LaunchConfig  # noqa: E402
from llamafit.memory.model import MemoryModel  # noqa: E402
from llamafit.reader.model import read_model  # noqa: E402
from scripts.bench.bench_memory import synthetic_100_layers  # noqa: E402


class Counting(MemoryModel):
    calls = 0

    def estimate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        Counting.calls += 1
        return super().estimate(*args, **kwargs)


def best(fn, new_target, repeat: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Best time of fn(target), each run on a fresh target and memory model (nothing memoized
    yet)."""
    times = []
    for _ in range(repeat):
        target = new_target()
        Counting.calls = 0
        t = time.perf_counter()
        fn(target)
        times.append(time.perf_counter() - t)
    return min(times), Counting.calls


def bench(path: Path, gpu: str, repeat: int) -> None:
    facts = build_facts(read_model(path))

    def new_target() -> Target:
        return Target(
            Counting(facts),
            "llama-server",
            None,
            gpu_specs(gpu),
            host(128 << 30, 96 << 30),
            1 << 30,
        )

    cfg, policy = LaunchConfig(), Policy()
    t_solve, n_solve = best(lambda t: solve(t, cfg, policy), new_target, repeat)
    t_plan, n_plan = best(lambda t: plan(t, cfg, policy), new_target, repeat)
    print(
        f"{path.name:<36} --gpu {gpu:<12} solve {t_solve * 1e3:7.1f} ms ({n_solve:4d} "
        f"evaluations)   plan {t_plan * 1e3:7.1f} ms ({n_plan:4d} evaluations)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = synthetic_100_layers(Path(tmp))
        for path, gpu in (
            (ROOT / "fixtures" / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf", "24GiB"),
            (ROOT / "fixtures" / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf", "16GiB"),
            (synthetic, "24GiB,24GiB"),
        ):
            bench(path, gpu, args.repeat)


if __name__ == "__main__":
    main()
