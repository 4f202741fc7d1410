"""The memory model against public llama.cpp logs from GPU machines (fixtures/calibration/gpu-corpus.jsonl).

Each row is one log (its URL, build, flags and the buffer sizes it printed per device); its model is
rebuilt as a header-only GGUF from fixtures/calibration/gpu-shapes.json (scripts/make_shape_header.py)
and run through resolve → estimate with the row's build (the --llama-build rules). Checks: KV per
device exact to the print precision; weights per device within 0.5 % where the log pins the tensor
types; compute per device within the corpus tolerance (COMPUTE_TOLERANCE), the figures of
scripts/bench_memory.py.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from conftest import FIXTURES

from llamafit.config import NGL_ALL, LaunchConfig
from llamafit.devices import DeviceSpec, host
from llamafit.facts import ModelFacts, build_facts
from llamafit.gguf_model import read_model
from llamafit.memory import Breakdown, MemoryModel
from llamafit.resolve import resolve

CORPUS = FIXTURES / "calibration" / "gpu-corpus.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
MIB = 1 << 20
PRINTED = 0.005 * MIB  # two decimals
COMPUTE_TOLERANCE = 0.20  # the worst-case target for compute buffers
HOST = host(256 << 30, 200 << 30)
_DIR = Path(tempfile.mkdtemp(prefix="llamafit-gpu-shapes-"))


@cache
def model(shape: str) -> MemoryModel:
    import make_shape_header  # scripts/, on sys.path via conftest

    return MemoryModel(build_facts(read_model(make_shape_header.write(shape, _DIR / f"{shape}.gguf"))))


@dataclass(frozen=True)
class Compared:
    """Predicted vs measured bytes for one buffer of one device."""

    kind: str  # model | kv | compute
    device: str  # the log's buffer name (CUDA0, CUDA_Host, ...)
    predicted: int
    measured: int

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else 0.0


def predicted(row: dict) -> Breakdown:
    mm = model(row["shape"])
    s = row["settings"]
    cfg = LaunchConfig(n_ctx=s["n_ctx"], flash_attn="on" if s["flash_attn"] else "off", type_k=s["type_k"],
                       type_v=s["type_v"], n_gpu_layers=NGL_ALL if s["n_gpu_layers"] < 0 else s["n_gpu_layers"],
                       n_batch=s["n_batch"], n_ubatch=s["n_ubatch"], n_parallel=s["n_seq_max"],
                       tensor_split=tuple(float(x) for x in s.get("tensor_split", ())), fit=False,
                       split_mode=s.get("split_mode", "layer"),
                       cache_ram_mib=0)  # fmt: skip
    rc = resolve(cfg, mm.facts, engine="llama-server", build=row["build"])
    gpus = [DeviceSpec(name, "gpu", row["backend"]) for name in row["gpus"]]
    return mm.estimate(rc, gpus, HOST, reserve_bytes=0)


def compared(row: dict) -> list[Compared]:
    """Every buffer the log printed, paired with the prediction for the same device."""
    bd = predicted(row)
    by_name = {d.name: d for d in bd.devices[:-1]}
    hostrow = bd.devices[-1]
    field = {"model": "weights_bytes", "kv": "kv_bytes", "compute": "compute_bytes"}
    out = []
    for kind in ("model", "kv", "compute"):
        for dev, mib in row["measured"].get(kind, {}).items():
            usage = by_name.get(dev, hostrow)
            out.append(Compared(kind, dev, getattr(usage, field[kind]), round(mib * MIB)))
    return out


def classes(row: dict, facts: ModelFacts | None = None) -> list[str]:
    return list(row["classes"])


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_kv_exact(row: dict) -> None:
    for c in compared(row):
        if c.kind == "kv":
            assert abs(c.predicted - c.measured) <= PRINTED, (c.device, c.predicted / MIB, c.measured / MIB)


@pytest.mark.parametrize("row", [r for r in ROWS if "model" in r["measured"]],
                         ids=[r["id"] for r in ROWS if "model" in r["measured"]])  # fmt: skip
def test_weights_within_half_percent(row: dict) -> None:
    for c in compared(row):
        if c.kind == "model":
            assert abs(c.error) <= 0.005, (c.device, c.predicted / MIB, c.measured / MIB)


def is_host(device: str) -> bool:
    return device == "CPU" or device.endswith("_Host")


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_gpu_compute_within_tolerance(row: dict) -> None:
    """GPU compute buffers. Host (pinned) compute buffers of builds before the set_rows KV writes hold
    no K/V index inputs, which the model (0c1e570's graph) counts: bench_memory reports them apart."""
    for c in compared(row):
        if c.kind == "compute" and not is_host(c.device):
            assert abs(c.error) <= COMPUTE_TOLERANCE, (c.device, c.predicted / MIB, c.measured / MIB)


def test_corpus_rows_name_their_source() -> None:
    """Every row carries a public URL, a build, a shape that exists and at least one KV line."""
    import make_shape_header

    shapes = make_shape_header.load_specs()
    for row in ROWS:
        assert row["url"].startswith("https://github.com/"), row["id"]
        assert isinstance(row["build"], int) and row["build"] > 0, row["id"]
        assert row["shape"] in shapes, row["id"]
        assert row["measured"]["kv"], row["id"]


@pytest.mark.parametrize(("cc_major", "expected_mib"), [(None, 260), (8, 260), (9, 288), (12, 288)])
def test_cuda_overhead_is_context_plus_cublas_workspace(cc_major: int | None, expected_mib: int) -> None:
    from llamafit.devices import cuda_overhead_bytes

    assert cuda_overhead_bytes(cc_major) == expected_mib * MIB  # 256 MiB context + 4 MiB (32 MiB Hopper on)


def test_overhead_is_a_term_apart_from_the_reserve() -> None:
    row = ROWS[0]
    mm = model(row["shape"])
    rc = resolve(LaunchConfig(n_ctx=4096, n_gpu_layers=NGL_ALL, fit=False), mm.facts, build=row["build"])
    plain = mm.estimate(rc, [DeviceSpec("CUDA0", "gpu", "cuda")], HOST, reserve_bytes=512 * MIB).devices[0]
    withctx = mm.estimate(rc, [DeviceSpec("CUDA0", "gpu", "cuda", overhead_bytes=260 * MIB)], HOST,
                          reserve_bytes=512 * MIB).devices[0]  # fmt: skip
    assert (plain.overhead_bytes, withctx.overhead_bytes) == (0, 260 * MIB)
    assert withctx.reserve_bytes == plain.reserve_bytes == 512 * MIB
    assert withctx.used_bytes - plain.used_bytes == 260 * MIB
