"""Real llama.cpp graphs: scripts/graph_dump/graph_dump.c, preloaded into a real llama-server,
records every graph llama.cpp reserves compute buffers for (the scheduler's input graph and the
allocator's split graph, with the real buffer sizes in bytes). This module builds the shim, runs
one start with it, and reads the records back as llamafit.memory.graph.nodes.Graph values.

Tests using `record` start llama.cpp: mark them slow.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamafit.memory.graph.nodes import Graph, Tensor
from tests.support import ROOT
from tests.support.server_probe import server_log

SOURCE = ROOT / "scripts" / "graph_dump" / "graph_dump.c"
DUMP_ENV = "LLAMAFIT_GRAPH_DUMP"


@dataclass(frozen=True)
class Event:
    """One recorded reserve: `sched` (ggml_backend_sched_reserve's input graph, with each
    backend's compute buffer size after it) or `galloc` (ggml_gallocr_reserve_n's split graph with
    buffer ids, and the allocator's buffer sizes after it: the running maximum per buffer id)."""

    kind: str
    seq: int
    graph: Graph
    sizes: tuple[int, ...] = ()  # galloc: per buffer id
    backends: tuple[tuple[str, int], ...] = ()  # sched: (backend name, buffer bytes)
    n_copies: int = 1


def shim() -> Path | None:
    """The shim built once per source version (in the temp folder); None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"llamafit-graph-dump-{digest}.so"
    if not out.is_file():
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"], check=True
        )
        partial.replace(out)
    return out


def _tensor(raw: dict) -> Tensor:
    return Tensor(
        name=raw["name"],
        op=raw["op"],
        type=raw["type"],
        ne=tuple(raw["ne"]),  # type: ignore[arg-type]
        nb=tuple(raw["nb"]),  # type: ignore[arg-type]
        nbytes=raw["nbytes"],
        flags=raw["flags"],
        src=tuple(raw["src"]),
        view_src=raw["view_src"],
        view_offs=raw["view_offs"],
        data=bool(raw["data"]),
        buffer=raw["buffer"],
        desc=raw["desc"],
        usage=raw.get("usage", 0),
        backend=raw.get("backend"),
    )


def parse(text: str) -> list[Event]:
    """The events of one dump file, in the order the calls started (seq)."""
    events = []
    for line in text.splitlines():
        raw = json.loads(line)
        leafs = [pair[0] for pair in raw["leafs"]]
        nodes = [pair[0] for pair in raw["nodes"]]
        galloc = raw["event"] == "galloc"
        graph = Graph(
            tensors=tuple(_tensor(t) for t in raw["tensors"]),
            leafs=tuple(leafs),
            nodes=tuple(nodes),
            leaf_buffer_ids=tuple(pair[1] for pair in raw["leafs"]) if galloc else None,
            node_buffer_ids=tuple(pair[1] for pair in raw["nodes"]) if galloc else None,
        )
        events.append(
            Event(
                kind=raw["event"],
                seq=raw["seq"],
                graph=graph,
                sizes=tuple(raw.get("sizes", ())),
                backends=tuple((b["name"], b["size"]) for b in raw.get("backends", ())),
                n_copies=raw.get("n_copies", 1),
            )
        )
    return sorted(events, key=lambda e: e.seq)


def record(
    binary: str | Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
    until: str = "listening on",
    preload: Sequence[str | Path] = (),
) -> tuple[list[Event], str]:
    """Start `binary` (a llama-server) with `args` and the shim preloaded until it listens (or
    until a log line holds `until`); its recorded events and its log. `preload`: more shared
    libraries to preload (tests/support/sparse_loads.py's no_populate for a sparse shape). `--fit
    off` is the caller's to pass (llama.cpp's fitter reserves graphs of its own first)."""
    text, log = record_text(binary, args, env=env, timeout=timeout, until=until, preload=preload)
    return parse(text), log


def record_text(
    binary: str | Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
    until: str = "listening on",
    preload: Sequence[str | Path] = (),
) -> tuple[str, str]:
    """`record`'s start: the shim's lines as it wrote them (one JSON object each), and the log."""
    lib = shim()
    if lib is None:
        raise RuntimeError("no C compiler (cc) to build scripts/graph_dump/graph_dump.c")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "graphs.jsonl"
        run_env = dict(os.environ if env is None else env)
        run_env["LD_PRELOAD"] = ":".join([str(lib), *map(str, preload)])
        run_env[DUMP_ENV] = str(dump)
        log = server_log(str(binary), list(args), timeout=timeout, env=run_env, until=until)
        text = dump.read_text() if dump.is_file() else ""
    return text, log
