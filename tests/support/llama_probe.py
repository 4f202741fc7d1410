"""Load a model with real llama.cpp (llama-cpp-python, CPU) in a child process and return its log.

A child process, because llama.cpp logs from C to file descriptor 2, which pytest's capture of
sys.stderr does not see, and because each load should start from a clean process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass

_CHILD = r"""
import json, sys
import llama_cpp
configs = json.loads(sys.argv[2])
for kwargs in configs:
    print("=== CONFIG " + json.dumps(kwargs), file=sys.stderr, flush=True)
    llm = llama_cpp.Llama(model_path=sys.argv[1], verbose=True, **kwargs)
    llm.close()
"""

_KV = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
_RS = re.compile(
    r"llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs "
    r"+(\d+) rs_seq\), R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB"
)


@dataclass(frozen=True)
class KVLine:
    cells: int
    layers: int
    k_mib: float
    v_mib: float


@dataclass(frozen=True)
class RSLine:
    cells: int
    r_mib: float
    s_mib: float


def load_logs(model: str, configs: list[dict]) -> list[str]:
    """The llama.cpp log of each load, in order (one child process for all of them)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, model, json.dumps(configs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp failed to load {model}:\n{proc.stderr[-3000:]}")
    return proc.stderr.split("=== CONFIG ")[1:]


def kv_lines(log: str) -> list[KVLine]:
    return [KVLine(int(m[2]), int(m[3]), float(m[7]), float(m[9])) for m in _KV.finditer(log)]


def rs_lines(log: str) -> list[RSLine]:
    return [RSLine(int(m[2]), float(m[6]), float(m[7])) for m in _RS.finditer(log)]
