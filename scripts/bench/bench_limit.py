#!/usr/bin/env python3
"""How close llamafit's context comes to the largest that really fits, on a real Vulkan device.

For each model and margin M (the budget is 2048 - M MiB on Vulkan0, lavapipe):
  - `llamafit plan MODEL --reserve M` with the Vulkan llama-server on PATH (as a user has it: no
    --gpu, no --backend) chooses its flags;
  - keeping every other flag, `-c` is bisected (multiples of 256) by really starting llama-server
    (--no-warmup, -lv 4, --fit off) and reading Vulkan0's buffers: the largest -c whose buffers stay
    within the budget, capped at the trained context (the plan never asks for more);
  - prints llamafit's -c as a share of that largest one (target: at least 0.97, never over budget).

Each start costs seconds on a loaded machine: rows are written to --state as they finish and a run
resumes from it. By default the demo and one real shape at four margins; --all for every shape.

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench/bench_limit.py [--all] [--state FILE]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.bench import bench_fit
from scripts.calibration import device_lab

MARGINS = (1024, 1536, 1800, 1948)
STEP = 256


def _with_ctx(args: list[str], n_ctx: int) -> list[str]:
    out = list(args)
    out[out.index("-c") + 1] = str(n_ctx)
    return out


# a start that fails for another reason than memory (a port taken, a timeout under load) is retried
TRIES = 3


def _fits(model: Path, args: list[str], budget: int, cache: dict[int, bool]) -> bool:
    """Whether this -c really starts with Vulkan0's buffers within the budget. Over the budget is
    read from the buffers the server reports (lavapipe's 2 GiB hold more than any budget here), so
    a start that fails says nothing about the budget: it is tried again."""
    n_ctx = int(args[args.index("-c") + 1])
    for _ in range(TRIES if n_ctx not in cache else 0):
        side = bench_fit.start(model, args)
        if side.started and side.device_mib is not None:
            cache[n_ctx] = side.device_mib <= budget
            break
        print(
            f"  (-c {n_ctx}: the start failed: {side.failure}; again)", file=sys.stderr, flush=True
        )
    return cache.setdefault(n_ctx, False)


def largest(model: Path, args: list[str], budget: int, trained: int) -> tuple[int, int]:
    """(the largest -c, a multiple of STEP up to `trained`, that starts within the budget; starts
    made)."""
    cache: dict[int, bool] = {}
    ours = int(args[args.index("-c") + 1])
    lo = ours if _fits(model, args, budget, cache) else 0
    hi = trained
    if lo == 0:  # llamafit's own pick is over: find the largest below it
        hi = ours
    elif ours >= trained or _fits(model, _with_ctx(args, trained), budget, cache):
        return trained, len(cache)
    # invariant: lo fits (or 0), hi does not
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // STEP * STEP
        if mid <= lo:
            break
        if _fits(model, _with_ctx(args, mid), budget, cache):
            lo = mid
        else:
            hi = mid
    return lo, len(cache)


def trained_ctx(model: Path) -> int:
    import subprocess

    env = dict(bench_fit._env(), PYTHONPATH=str(device_lab.ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "llamafit", "inspect", str(model), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return int(json.loads(out.stdout)["n_ctx_train"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--all", action="store_true", help="every real shape of bench_fit, not just the first"
    )
    ap.add_argument("--only", help="one model: the demo's name or a shape key (implies --all)")
    ap.add_argument(
        "--margins", help="comma-separated margins in MiB (default: 1024,1536,1800,1948)"
    )
    ap.add_argument(
        "--state", type=Path, default=Path("bench_limit_state.json"), help="rows so far (resumable)"
    )
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    args = ap.parse_args(argv)
    device_lab.stop_on_signals()  # SIGTERM too stops the server being bisected
    if device_lab.bin_dir() is None:
        print(
            "the Vulkan/RPC llama.cpp build is absent (build/llama-vulkan-rpc/bin)", file=sys.stderr
        )
        return 2
    state: dict[str, dict] = json.loads(args.state.read_text()) if args.state.is_file() else {}
    margins = [int(m) for m in args.margins.split(",")] if args.margins else list(MARGINS)
    print(
        f"{'model':<20} {'margin':>6} {'budget':>6} | {'llamafit -c':>11} {'largest -c':>10} "
        f"{'share':>6} starts"
    )
    with tempfile.TemporaryDirectory(prefix="bench-limit-") as tmp:
        chosen = bench_fit.models(Path(tmp), quick=not (args.all or args.only))
        for name, path in chosen:
            if args.only and not name.startswith(args.only):
                continue
            trained = trained_ctx(path)
            for margin in margins:
                key = f"{name}|{margin}"
                if key not in state:
                    budget = bench_fit.DEVICE_MIB - margin
                    plan = bench_fit.llamafit_plan(path, margin)
                    if "-c" not in plan:
                        state[key] = {
                            "model": name,
                            "margin": margin,
                            "budget": budget,
                            "ours": None,
                            "largest": None,
                            "starts": 0,
                        }
                    else:
                        best, starts = largest(path, plan, budget, trained)
                        state[key] = {
                            "model": name,
                            "margin": margin,
                            "budget": budget,
                            "ours": int(plan[plan.index("-c") + 1]),
                            "largest": best,
                            "starts": starts,
                            "args": plan,
                        }
                    args.state.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
                r = state[key]
                share = (
                    "-" if not r["ours"] or not r["largest"] else f"{r['ours'] / r['largest']:.3f}"
                )
                print(
                    f"{name:<20} {margin:>6} {r['budget']:>6} | {r['ours'] or '-':>11} "
                    f"{r['largest'] or '-':>10} {share:>6} {r['starts']:>6}",
                    flush=True,
                )
    rows = list(state.values())
    shares = [r["ours"] / r["largest"] for r in rows if r["ours"] and r["largest"]]
    over = [r for r in rows if r["ours"] and r["largest"] is not None and r["ours"] > r["largest"]]
    if shares:
        print(
            f"\nlowest share {min(shares):.3f} over {len(shares)} rows; over the largest that "
            f"fits: {len(over)}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
