"""Time llamafit.memory.graph.sched.split_graph on the recorded reserves of
fixtures/graphs/sched-*.jsonl.gz, side by side: nodes in, nodes out, splits, and the best of N
calls in milliseconds, wall clock and this process's CPU time (the CPU figure is the one to read
on a shared, busy machine), with whether the split equals the allocator's graph that llama.cpp
built.

    python scripts/bench/bench_sched.py [N] [--live]

--live also records, and times, the Llama 3.1 8B shape (about 1000 nodes) on the CPU server and
on Vulkan0 with 8 of its 32 layers (scripts/graph_dump/record_sched.py's recorder; slow).
"""

from __future__ import annotations

import gzip
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.memory.graph.backends.cpu import cpu_backend  # noqa: E402
from llamafit.memory.graph.backends.rpc import rpc_backend  # noqa: E402
from llamafit.memory.graph.backends.vulkan import vulkan_backend  # noqa: E402
from llamafit.memory.graph.sched import Backend, split_graph  # noqa: E402
from tests.support.graph_compare import canonical  # noqa: E402
from tests.support.graph_dump import Event, parse  # noqa: E402

LAVAPIPE_MAX_TENSOR = 128 << 20


def backends_for(case: str, sched: Event) -> list[Backend]:
    if case == "cpu":
        return [cpu_backend("CPU")]
    if case.startswith("vk"):
        return [
            vulkan_backend("Vulkan0", max_tensor_bytes=LAVAPIPE_MAX_TENSOR),
            cpu_backend("Vulkan_Host"),
        ]
    names = [name for name, _ in sched.backends]
    return [rpc_backend(name) for name in names[:-1]] + [cpu_backend("CPU")]


def recorded() -> list[tuple[str, list[Event]]]:
    """The stored fixtures' events per case."""
    out = []
    for path in sorted((ROOT / "fixtures" / "graphs").glob("sched-*.jsonl.gz")):
        case = path.name.removeprefix("sched-").removesuffix(".jsonl.gz")
        out.append((case, parse(gzip.decompress(path.read_bytes()).decode())))
    return out


def live() -> list[tuple[str, list[Event]]]:
    """The Llama 3.1 8B shape recorded now: CPU only, and Vulkan0 with 8 layers."""
    import json

    from scripts.graph_dump import record_sched as rec

    cases = [
        rec.Case("cpu", "cpu", ("-c", "4096"), model="shape:llama3.1-8b"),
        rec.Case("vk", "vk", ("-c", "4096", "-ngl", "8"), model="shape:llama3.1-8b"),
    ]
    out = []
    for case in cases:
        pairs = rec.record_case(case)
        text = "".join(json.dumps(e) + "\n" for pair in pairs for e in pair)
        out.append((f"{case.name}-llama8b-live", parse(text)))
    return out


def main(argv: list[str]) -> int:
    numbers = [a for a in argv if a.isdigit()]
    reps = int(numbers[0]) if numbers else 20
    runs = recorded() + (live() if "--live" in argv else [])
    print(
        f"{'case':18} {'reserve':>7} {'nodes':>6} {'out':>6} {'splits':>6} {'wall ms':>8} "
        f"{'cpu ms':>7}  equal"
    )
    for case, events in runs:
        by_seq = {e.seq: e for e in events}
        k = 0
        for sched in (e for e in events if e.kind == "sched"):
            galloc = by_seq[sched.seq + 1]
            backends = backends_for(case, sched)
            best = cpu = float("inf")
            out = None
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                out = split_graph(sched.graph, backends, n_copies=sched.n_copies)
                best = min(best, time.perf_counter() - t0)
                cpu = min(cpu, time.process_time() - c0)
            assert out is not None
            same = canonical(out.graph) == canonical(galloc.graph)
            print(
                f"{case:18} {k:>7} {len(sched.graph.nodes):>6} {len(out.graph.nodes):>6} "
                f"{len(out.splits):>6} {best * 1000:>8.2f} {cpu * 1000:>7.2f}  "
                f"{'yes' if same else 'NO'}"
            )
            k += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
