"""The whole memory model (resolve → estimate) against every measured llama.cpp load in
fixtures/calibration (scripts/calibration/calibrate.py): weights within 0.5 %, KV and recurrent
state exact to the precision llama.cpp prints (0.01 MiB per number), compute within 5 %, output
exact."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from llamafit.machine.devices import host
from llamafit.memory.config import engine_defaults
from llamafit.memory.model import Breakdown
from llamafit.memory.resolve import PINNED_BUILD, resolve
from llamafit.server.flags import parse_server_args
from tests.support import FIXTURES, needs_demo
from tests.support.loads import table_model

ROWS = json.loads((FIXTURES / "calibration" / "llama-cpp-0c1e570-cpu.json").read_text())["rows"]
MIB = 1 << 20
PRINTED = 0.005 * MIB  # llama.cpp prints MiB with two decimals
HOST = host(64 << 30, 48 << 30, frozenset({"avx2", "avx512"}))  # the CPU the table was measured on


memory_model = table_model


def predicted(row: dict) -> Breakdown:
    mm = memory_model(row["model"])
    s = row["settings"]
    if row["engine"] == "llama-server":
        cfg = parse_server_args(row["flags"], {}).config
        rc = resolve(cfg, mm.facts, engine="llama-server", build=PINNED_BUILD)
    else:
        cfg = replace(
            engine_defaults("llama-cpp-python"),
            n_ctx=s["n_ctx"],
            n_batch=s["n_batch"],
            n_ubatch=s["n_ubatch"],
            n_parallel=s["n_seq_max"],
            kv_unified=s["kv_unified"],
            flash_attn="on" if s["flash_attn"] else "off",
            type_k=s["type_k"],
            type_v=s["type_v"],
            swa_full=s["swa_full"],
        )
        rc = replace(
            resolve(cfg, mm.facts, engine="llama-cpp-python", build=PINNED_BUILD),
            n_outputs_max=s["n_outputs_max"],
        )
    for key in (
        "n_ctx",
        "n_ctx_seq",
        "n_batch",
        "n_ubatch",
        "n_seq_max",
        "kv_unified",
        "n_outputs_max",
    ):
        # the resolution itself matches what llama.cpp logged
        assert getattr(rc, key) == s[key], key
    return mm.estimate(rc, (), HOST)


def row_id(i: int, row: dict) -> str:
    s = row["settings"]
    name = row["model"].rsplit("/", 1)[-1].removesuffix(".gguf")
    return (
        f"{i:03d}-{row['engine']}-{name}-c{s['n_ctx']}-fa{int(s['flash_attn'])}-np{s['n_seq_max']}"
    )


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, marks=needs_demo) if r["model"].startswith("demo:") else r for r in ROWS],
    ids=[row_id(i, r) for i, r in enumerate(ROWS)],
)
def test_row(row: dict) -> None:
    (cpu,) = predicted(row).devices
    m = row["measured"]
    # The mapped buffer spans the file from its first to its last CPU tensor; tensors the CPU
    # backend repacks (Q4_0, MXFP4 … on AVX2) get an anonymous CPU_REPACK copy, and the mapped span
    # skips them only where they lie at its ends. So mapped <= loaded weights <= mapped + repack.
    mapped = m["model_buffers"]["CPU_Mapped"] * MIB
    repack = m["model_buffers"].get("CPU_REPACK", 0.0) * MIB
    assert abs(cpu.repack_bytes - repack) <= PRINTED  # memory/repack.py: exact to print precision
    # a line per shard
    slack = max(0.005 * mapped, PRINTED * memory_model(row["model"]).facts.n_shards)
    file_weights = cpu.weights_bytes - cpu.repack_bytes
    assert mapped - slack <= file_weights <= mapped + repack + slack
    if not repack:
        assert abs(file_weights - mapped) <= slack
    kv_lines = [c[k] for c in m["kv_caches"] for k in ("k_mib", "v_mib")]
    assert abs(cpu.kv_bytes - sum(kv_lines) * MIB) <= PRINTED * len(kv_lines) + 1
    rs_lines = [r[k] for r in m["rs"] for k in ("r_mib", "s_mib")]
    assert abs(cpu.recurrent_bytes - sum(rs_lines) * MIB) <= PRINTED * len(rs_lines) + 1
    compute = m["compute_buffers"]["CPU"] * MIB
    assert abs(cpu.compute_bytes - compute) <= 0.05 * compute
    assert abs(cpu.output_bytes - m["output_buffers"]["CPU"] * MIB) <= PRINTED
