"""Read a starting server's log, line by line: buffer sizes, KV caches, progress, readiness,
failure.

Understands llama-server (llama.cpp 0c1e570 and later: `M.SS.mmm.uuu L ` prefix from common/log.cpp,
libllama INFO lines only at `-lv 4`; `--log-jsonl` objects on stdout; older builds' plain lines and
spellings such as `llama_kv_cache_unified:` / `init:`) and llama-cpp-python's server (plain libllama
lines on stderr, then uvicorn's `INFO:     Uvicorn running on http://…`). Pure: no I/O.

Formats (llama.cpp 0c1e570): src/llama-model.cpp `load_tensors: %12s model buffer size = %8.2f MiB`,
src/llama-context.cpp `llama_context: %10s  output buffer size = …` and `sched_reserve: %10s compute
buffer size = …`, src/llama-kv-cache.cpp `llama_kv_cache: %10s KV buffer size = …` and
`llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s):
%7.2f MiB`, src/llama-memory-recurrent.cpp `… RS buffer size = …`, tools/server/server.cpp
`listening on %s`, common/fit.cpp `common_memory_breakdown_print` and its `fit_memory_breakdown`
JSON twin.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# `0.01.012.510 I ` (common/log.cpp: minutes.seconds.millis.micros, then the level letter)
_PREFIX = re.compile(r"^\d+\.\d{2}\.\d{3}\.\d{3} ([IWEDT]) ")
_BUFFER = re.compile(r"(\S+)\s+(model|KV|RS|compute|output) buffer size = +([0-9.]+) MiB")
_KV = re.compile(
    r"size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)(?:/(\d+))? seqs\), "
    r"K \((\w+)\): +([0-9.]+) MiB, V \((\w+)\): +([0-9.]+) MiB"
)
_RS = re.compile(r"size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs")
# the server's module tag after the prefix: `srv    load_model: …`, `cmn  common_init_: …`
_MODULE = re.compile(r"^[a-z]{3,4} +(?=[\w()]+: )")
_ISWA = re.compile(r"llama_kv_cache_iswa: creating +(non-SWA|SWA) KV cache")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# tools/server: `listening on http://…` (2026), `server is listening on http://… - starting the main
# loop` (2024-25); uvicorn: `Uvicorn running on http://… (Press CTRL+C to quit)`
_READY = re.compile(r"(?:listening on|Uvicorn running on) (\S+)")
_TABLE_DEVICE = re.compile(
    r"\|\s+- (?P<name>.+?)\s+\|\s+(?P<total>\d+) = +(?P<free>\d+) \+ \((?P<self>\d+) = "
    r"+(?P<model>\d+) \+ +(?P<context>\d+) \+ +(?P<compute>\d+)\) \+ +(?P<unaccounted>-?\d+) *\|"
)
_TABLE_HOST = re.compile(
    r"\|\s+- (?P<name>.+?)\s+\|\s+(?P<self>\d+) = +(?P<model>\d+) \+ +(?P<context>\d+) \+ "
    r"+(?P<compute>\d+) *\|"
)

# One-line failure diagnoses, most specific first; the rank lets a specific cause found later
# (e.g. the cudaMalloc line) win over a generic "failed to load model" found earlier.
_OOM = re.compile(
    r"out of memory|OutOfMemory|out of device memory|ErrorOutOf(?:Device|Host)Memory|insufficient "
    r"memory|(?:cuda|hip)Malloc failed|std::bad_alloc|Device memory allocation of size \d+ "
    r"failed|failed to allocate (?:\S+ )?(?:buffer|compute|memory)|unable to allocate \S+ buffer",
    re.IGNORECASE,
)
_MISSING = re.compile(
    r"failed to open .*No such file|No such file or directory|Model path does not exist"
)
_BAD_FLAG = re.compile(
    r"error: invalid argument: (\S+)|unknown argument:? (\S+)|unrecognized arguments?: (\S+)"
)
# common/arg.cpp: `error while handling argument "-fa": error: unknown value for --flash-attn: 'xx'`
_BAD_VALUE = re.compile(
    r"error while handling argument \"([^\"]+)\": (?:error: )?(.*)", re.IGNORECASE
)
_PORT = re.compile(r"couldn't bind|address already in use|EADDRINUSE|\[Errno 98\]", re.IGNORECASE)
_LOAD = re.compile(
    r"error loading model|failed to load model|exiting due to model loading error"
    r"|failed to initialize the context|Failed to create llama_context"
)

# (pattern in the message, phase shown to people); the last match so far is the current phase
_PHASES = (
    ("fitting params to device memory", "fitting to device memory"),
    ("load_model: loading model", "loading model"),
    ("llama_model_loader: loaded meta data", "loading model"),
    ("load_tensors: loading model tensors", "loading model"),
    ("constructing llama_context", "creating context"),
    ("KV buffer size", "creating KV cache"),
    ("RS buffer size", "creating recurrent state"),
    ("sched_reserve: reserving", "reserving compute buffers"),
    ("warming up the model", "warming up"),
)


@dataclass(frozen=True, slots=True)
class KvCache:
    """One `llama_kv_cache: size = …` line: per-stream cells, attention layers,
    sequences/streams."""

    size_mib: float
    cells: int
    layers: int
    seqs: int
    streams: int | None  # the `/N` after seqs (0c1e570); None in older spellings
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float
    # "non-SWA" / "SWA" inside an iSWA cache (llama_kv_cache_iswa), else None
    role: str | None = None


@dataclass(frozen=True, slots=True)
class RecurrentCache:
    """One `llama_memory_recurrent: size = …` line (Mamba/RWKV/hybrid state)."""

    size_mib: float
    cells: int
    layers: int
    seqs: int


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    """A row of common_memory_breakdown_print (MiB, truncated); free/total/unaccounted for devices
    only."""

    kind: str  # "device" | "host" | "buffer_type"
    name: str
    model: int
    context: int
    compute: int
    self_mib: int
    free: int | None = None
    total: int | None = None
    unaccounted: int | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # "oom" | "model_missing" | "bad_flag" | "port_in_use" | "load_failed"
    message: str  # one line for people
    line: str  # the log line it came from, prefix removed


# common/log.cpp
_JSON_LEVELS = {
    "info": "I",
    "warn": "W",
    "error": "E",
    "debug": "D",
    "trace": "T",
}
# failures are logged as E (or W), or without a prefix (argument errors)
_QUIET_LEVELS = (
    "I",
    "D",
    "T",
)
_RANK = {"oom": 2, "model_missing": 2, "bad_flag": 2, "port_in_use": 2, "load_failed": 1}


# tools/server/server-context.cpp, server_slot::print_timings and the slot's release ("stop
# processing")
_TIMING = re.compile(r"\btask (\d+) \| +(prompt eval|eval) time = +([\d.]+) ms / +(\d+) tokens")
MAX_PENDING, MAX_SERVED = 64, 4096  # a long-running server keeps only its latest requests' timings
_RELEASE = re.compile(r"\btask (\d+) \| stop processing: n_tokens = (\d+)")


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """One request's timings as llama-server logs them when the slot finishes it."""

    task: int
    prompt_tokens: int  # evaluated (a cached prefix is not)
    prompt_ms: float
    generated_tokens: int
    generation_ms: float
    n_tokens: int  # the slot's context fill when it stopped


def split_prefix(line: str) -> tuple[str | None, str]:
    """(level letter or None, message) for one plain log line."""
    m = _PREFIX.match(line)
    return (m.group(1), line[m.end() :]) if m else (None, line)


def diagnose(msg: str) -> Failure | None:
    """The known failure one log message shows, if any."""
    text = _MODULE.sub("", msg.strip())
    if _OOM.search(text):
        return Failure("oom", f"out of memory: {text}", text)
    if m := _BAD_VALUE.search(text):
        return Failure("bad_flag", f"{m.group(1)}: {m.group(2)}", text)
    if m := _BAD_FLAG.search(text):
        flag = next(g for g in m.groups() if g)
        return Failure("bad_flag", f"this server does not accept {flag}", text)
    if _MISSING.search(text):
        return Failure("model_missing", f"model file not found: {text}", text)
    if _PORT.search(text):
        return Failure("port_in_use", f"port already in use: {text}", text)
    if _LOAD.search(text):
        return Failure("load_failed", f"model failed to load: {text}", text)
    return None


def _row(data: dict[str, object]) -> BreakdownRow:
    def num(key: str) -> int | None:
        value = data.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    return BreakdownRow(
        kind=str(data.get("kind", "")),
        name=str(data.get("name", "")),
        model=num("model") or 0,
        context=num("context") or 0,
        compute=num("compute") or 0,
        self_mib=num("self") or 0,
        free=num("free"),
        total=num("total"),
        unaccounted=num("unaccounted"),
    )


def _table_row(msg: str) -> BreakdownRow | None:
    if m := _TABLE_DEVICE.search(msg):
        g = {k: int(v) for k, v in m.groupdict().items() if k != "name"}
        return BreakdownRow(
            "device",
            m["name"],
            g["model"],
            g["context"],
            g["compute"],
            g["self"],
            g["free"],
            g["total"],
            g["unaccounted"],
        )
    if m := _TABLE_HOST.search(msg):
        kind = "host" if m["name"] == "Host" else "buffer_type"
        return BreakdownRow(
            kind, m["name"], int(m["model"]), int(m["context"]), int(m["compute"]), int(m["self"])
        )
    return None


class LogWatcher:
    """Feed it log lines as they arrive (stdout and stderr alike); read what is known so far."""

    def __init__(self) -> None:
        self._buffers: dict[str, dict[str, float]] = {}
        self._kv: list[KvCache] = []
        self._rs: list[RecurrentCache] = []
        self._tables: list[tuple[BreakdownRow, ...]] = []
        self._table: list[BreakdownRow] | None = None
        self._role: str | None = None
        self._jsonl = False
        self._progress = "starting"
        self._url: str | None = None
        self._failure: Failure | None = None
        self._timing: dict[int, dict[str, float]] = {}  # task → what its timing lines said so far
        self._served: list[ServedRequest] = []

    # -- input -----------------------------------------------------------------------------
    def feed(self, line: str) -> None:
        """One line of output; a `--log-jsonl` object is recognised by its leading `{`."""
        text = line.rstrip("\r\n")
        if text.lstrip().startswith("{") and self._feed_json(text.strip()):
            return
        level, msg = split_prefix(text)
        self._message(msg, level)

    def _feed_json(self, text: str) -> bool:
        try:
            obj = json.loads(text)
        except ValueError:
            return False
        if not isinstance(obj, dict) or "type" not in obj:
            return False
        self._jsonl = True
        if obj["type"] == "log":
            level = _JSON_LEVELS.get(str(obj.get("level", "")))
            for msg in str(obj.get("msg", "")).splitlines():
                self._message(msg, level)
        elif obj["type"] == "fit_memory_breakdown":
            rows = obj.get("data", {}).get("rows", [])
            self._tables.append(tuple(_row(r) for r in rows if isinstance(r, dict)))
        return True

    def _message(self, msg: str, level: str | None) -> None:
        # D lines come from --fit's dry-run probes (common/fit.cpp demotes them); they would count
        # twice
        if level != "D":
            self._sizes(msg)
        self._phase(msg)
        self._breakdown(msg)
        if (m := _READY.search(msg)) and self._url is None:
            self._url = m.group(1)
            self._progress = f"listening on {self._url}"
        if level not in _QUIET_LEVELS and (found := diagnose(msg)) and self._outranks(found):
            self._failure = found
        if "| " in msg:
            self._timings(msg)

    def _timings(self, msg: str) -> None:
        if m := _TIMING.search(msg):
            part = self._timing.setdefault(int(m.group(1)), {})
            key = "prompt" if m.group(2) == "prompt eval" else "gen"
            part[f"{key}_ms"], part[f"{key}_n"] = float(m.group(3)), float(m.group(4))
        elif m := _RELEASE.search(msg):
            part = self._timing.setdefault(int(m.group(1)), {})
            part["n_tokens"] = float(m.group(2))
        else:
            return
        task = int(m.group(1))
        part = self._timing[task]
        if (
            len(self._timing) > MAX_PENDING
        ):  # tasks that never finish (cancelled): forget the oldest
            del self._timing[next(iter(self._timing))]
        if {"prompt_ms", "gen_ms", "n_tokens"} <= part.keys():
            del self._timing[task]
            del self._served[: max(len(self._served) - MAX_SERVED + 1, 0)]
            self._served.append(
                ServedRequest(
                    task,
                    int(part["prompt_n"]),
                    part["prompt_ms"],
                    int(part["gen_n"]),
                    part["gen_ms"],
                    int(part["n_tokens"]),
                )
            )

    def _outranks(self, found: Failure) -> bool:
        return self._failure is None or _RANK[found.kind] > _RANK[self._failure.kind]

    def _sizes(self, msg: str) -> None:
        if m := _ISWA.search(msg):
            self._role = m.group(1)
        if m := _BUFFER.search(msg):
            kind = self._buffers.setdefault(m.group(2), {})
            kind[m.group(1)] = round(kind.get(m.group(1), 0.0) + float(m.group(3)), 2)
        elif m := _KV.search(msg):
            size, cells, layers, seqs, streams, tk, k, tv, v = m.groups()
            n_stream = int(streams) if streams else None
            self._kv.append(
                KvCache(
                    float(size),
                    int(cells),
                    int(layers),
                    int(seqs),
                    n_stream,
                    tk,
                    float(k),
                    tv,
                    float(v),
                    self._role,
                )
            )
        elif "recurrent" in msg and (m := _RS.search(msg)):
            self._rs.append(
                RecurrentCache(float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
            )

    def _phase(self, msg: str) -> None:
        if self._url is not None:
            return
        if m := _OFFLOADED.search(msg):
            self._progress = f"{m.group(1)}/{m.group(2)} layers offloaded"
            return
        for needle, phase in _PHASES:
            if needle in msg:
                self._progress = phase

    def _breakdown(self, msg: str) -> None:
        """Text tables (common_memory_breakdown_print); with --log-jsonl the JSON twin is used
        instead."""
        if "memory_breakdown_print" not in msg or self._jsonl:
            return
        if "memory breakdown [MiB]" in msg:
            self._table = []
            self._tables.append(())
        elif self._table is not None and (row := _table_row(msg)):
            self._table.append(row)
            self._tables[-1] = tuple(self._table)

    # -- what is known ---------------------------------------------------------------------
    @property
    def buffers(self) -> dict[str, dict[str, float]]:
        """kind (model/KV/RS/compute/output) → buffer name → MiB, summed over repeated lines."""
        return {kind: dict(names) for kind, names in self._buffers.items()}

    def total_mib(self, name: str) -> float:
        """Every buffer of one buffer type (`CUDA0`, `CPU_Mapped`, …) over all kinds."""
        return round(sum(names.get(name, 0.0) for names in self._buffers.values()), 2)

    @property
    def kv_caches(self) -> tuple[KvCache, ...]:
        return tuple(self._kv)

    @property
    def recurrent_caches(self) -> tuple[RecurrentCache, ...]:
        return tuple(self._rs)

    @property
    def breakdowns(self) -> tuple[tuple[BreakdownRow, ...], ...]:
        """Each memory-breakdown table seen: fit probes first (projections), the exit table last."""
        return tuple(self._tables)

    @property
    def served(self) -> tuple[ServedRequest, ...]:
        """The requests the server finished so far, with its own timings."""
        return tuple(self._served)

    @property
    def progress(self) -> str:
        return self._progress

    @property
    def ready(self) -> bool:
        return self._url is not None

    @property
    def url(self) -> str | None:
        """The address the server said it listens on."""
        return self._url

    @property
    def failure(self) -> str | None:
        """One line saying what went wrong, when the log shows a known failure."""
        return self._failure.message if self._failure else None

    @property
    def failure_kind(self) -> str | None:
        return self._failure.kind if self._failure else None

    @property
    def failure_line(self) -> str | None:
        return self._failure.line if self._failure else None

    @property
    def is_oom(self) -> bool:
        return self._failure is not None and self._failure.kind == "oom"
