"""The compute buffers of public 2026 llama.cpp logs (CUDA, ROCm, Metal) against the prediction.

    python scripts/bench/bench_public_compute.py [--corpus FILE ...] [--id TEXT] [--min-build N]

The corpora (held out: logs this project did not calibrate on), one JSON object a line in the
format of fixtures/calibration/gpu-corpus.jsonl (url, build, build_note, hardware, shape,
settings, measured; a row's `shape` is one of fixtures/calibration/gpu-shapes.json, or with
`shape_from` "shapes" one of fixtures/shapes/shapes.json, "public-shapes" one of
fixtures/calibration/public-shapes.json, which scripts/fixtures/make_shapes.py writes, with
`shape_overrides` changing keys of that spec: the logged file's quantization):

- fixtures/calibration/gpu-corpus-2026.jsonl: single logs of builds b7600 and later;
- fixtures/calibration/gpu-sweep-b10687.jsonl: the public CUDA sweep of gguf-parser-go
  (testdata/llamacpp_compute_buffer_sweep.json: llama.cpp c841aeeb8, one model per architecture,
  -ngl 4 and full offload), the rows whose model has a shape here; each row names the sweep's
  `architecture`, and fixtures/calibration/gpu-sweep-b10687-architectures.json lists them all;
- fixtures/calibration/gpu-sweep-b10687-pending.jsonl: more sweep rows, not read by default: their
  shape is one that make_shapes.py cannot write on this branch yet (a family or a shapes.json
  entry that another branch adds); once it can, they move to gpu-sweep-b10687.jsonl (run them
  with --corpus).

Per row and compute buffer: the logged MiB, the predicted MiB, the error and whose figure it is
(compute_source: "graph", the replay of llama.cpp's reserve graph, or "estimate", the
hand-derived peaks), and for an estimate the rule the replay declines (`declined`); a row whose
shape only approximates the logged model (its `approximate` says how) is marked `~`. Then per
corpus, over the GPU buffers (the pinned host buffers apart): the median |error|, the worst, the
worst under-prediction, the 90th percentile of |error| and the share of figures from the graph,
against the targets of issue #36, and the same without the approximate rows. For a corpus whose
rows name their `architecture` (the sweep): how many of the sweep's architectures have rows, and
how many of those have every GPU figure from the graph.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.builds import build_of, since  # noqa: E402
from llamafit.facts.hparams import build_facts  # noqa: E402
from llamafit.machine.devices import DeviceSpec, host  # noqa: E402
from llamafit.memory.graph.models import MODELS, REPLAY_SINCE  # noqa: E402
from llamafit.memory.graph.replay import (  # noqa: E402
    CUDA_BACKENDS,
    VK_OLD_KV,
    VK_OLD_UNTIL,
    covers_devices,
)
from llamafit.memory.model import MemoryModel  # noqa: E402
from llamafit.memory.resolve import ResolvedConfig  # noqa: E402
from llamafit.reader.model import read_model  # noqa: E402

CALIBRATION = ROOT / "fixtures" / "calibration"
CORPORA = (CALIBRATION / "gpu-corpus-2026.jsonl", CALIBRATION / "gpu-sweep-b10687.jsonl")
# sweep rows whose shape make_shapes.py cannot write yet (not read by default)
SWEEP_PENDING = CALIBRATION / "gpu-sweep-b10687-pending.jsonl"
# every architecture of the public sweep (the file the sweep rows come from)
SWEEP_ARCHITECTURES = CALIBRATION / "gpu-sweep-b10687-architectures.json"
# a row's shape_from: the make_shapes.py spec files (default: gpu-shapes.json, make_shape_header.py)
SHAPE_FILES = {
    "shapes": ROOT / "fixtures" / "shapes" / "shapes.json",
    "public-shapes": CALIBRATION / "public-shapes.json",
}
HOST = host(256 << 30, 200 << 30)
MIB = 1 << 20
_SHAPES = Path(tempfile.mkdtemp(prefix="llamafit-public-shapes-"))


def load_rows(path: Path) -> list[dict]:
    """The rows of one corpus file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@cache
def shape_model(
    shape: str, shape_from: str = "gpu-shapes", overrides: tuple[tuple[str, Any], ...] = ()
) -> MemoryModel:
    """The memory model of a shape: a header-only GGUF of gpu-shapes.json
    (make_shape_header.py), or a sparse GGUF of a make_shapes.py spec file (SHAPE_FILES), its
    spec's keys changed by `overrides` (a row's shape_overrides: the logged file's quantization,
    e.g. {"mix": "f16"} or {"legacy_quant": true})."""
    if shape_from in SHAPE_FILES:
        from scripts.fixtures import make_shapes

        specs = make_shapes.load_specs(SHAPE_FILES[shape_from])
        if overrides:
            name = shape + "".join(f"+{k}={v}" for k, v in overrides)
            specs[name] = {**specs[shape], **dict(overrides), "key": name}
            shape = name
        path = make_shapes.write_shape(shape, _SHAPES, specs)
    else:
        from scripts.fixtures import make_shape_header

        path = make_shape_header.write(shape, _SHAPES / f"{shape}.gguf")
    return MemoryModel(build_facts(read_model(path)))


def row_model(row: dict) -> MemoryModel:
    overrides = tuple(sorted(row.get("shape_overrides", {}).items()))
    return shape_model(row["shape"], row.get("shape_from", "gpu-shapes"), overrides)


def row_config(row: dict) -> ResolvedConfig:
    """The row's settings as libllama resolves them at the row's build (the GPU corpus' rule)."""
    from tests.memory.test_gpu_corpus import resolved

    return resolved(row, row_model(row).facts)


def row_gpus(row: dict) -> list[DeviceSpec]:
    return [DeviceSpec(name, "gpu", row["backend"]) for name in row["gpus"]]


def is_host(device: str) -> bool:
    return device == "CPU" or device.endswith("_Host")


@dataclass(frozen=True)
class Figure:
    """One logged compute buffer beside its prediction."""

    row: str
    device: str
    measured: int  # bytes (the log's MiB, rounded)
    predicted: int
    source: str  # compute_source: "graph" or "estimate"
    approximate: bool = False  # the row's shape only approximates the logged model

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else 0.0

    @property
    def gpu(self) -> bool:
        return not is_host(self.device)


def figures(row: dict) -> list[Figure]:
    """Every compute buffer the row logged, paired with the prediction for that device."""
    bd = row_model(row).estimate(row_config(row), row_gpus(row), HOST, reserve_bytes=0)
    by_name = {d.name: d for d in bd.devices[:-1]}
    hostrow = bd.devices[-1]
    out = []
    for dev, mib in row["measured"]["compute"].items():
        usage = hostrow if is_host(dev) else by_name[dev]
        out.append(
            Figure(
                row["id"],
                dev,
                round(mib * MIB),
                usage.compute_bytes,
                usage.compute_source,
                "approximate" in row,
            )
        )
    return out


def _rule(key: str) -> str:
    return f"rule {key} (b{build_of(key)})"


def declined(row: dict) -> str:
    """Why the replay leaves this row to the estimate: the first of replay.covers_devices'
    conditions (and the backends' graph checks) it fails, in words."""
    mm = row_model(row)
    f, rc, gpus = mm.facts, row_config(row), row_gpus(row)
    arch = f.architecture
    model = MODELS.get(arch)
    if model is None:
        return f"arch {arch} has no builder (models.MODELS)"
    if not since(model.since, rc.build):
        return f"{arch} replayed from {_rule(model.since)}; log at b{rc.build}"
    if not model.covers(rc.build) and model.gap is not None:
        gap = f"{_rule(model.gap[0])} to {_rule(model.gap[1])}"
        return f"{arch} not replayed from {gap}; log at b{rc.build}"
    if rc.embeddings:
        return "embeddings / pooling not replayed (replay.covers)"
    backends = {g.backend for g in gpus}
    if "metal" in backends and len(gpus) != 1:
        return "Metal: one device only (covers_devices)"
    if "vulkan" in backends and not since(REPLAY_SINCE, rc.build):
        kv = {rc.type_k.name.lower(), rc.type_v.name.lower()}
        if not model.checked_0317:
            return f"Vulkan before {_rule(REPLAY_SINCE)}: {arch} not checked at 0.3.17"
        if since(VK_OLD_UNTIL, rc.build):
            return f"Vulkan from {_rule(VK_OLD_UNTIL)} to {_rule(REPLAY_SINCE)} not ported"
        if not kv <= VK_OLD_KV or (rc.flash_attn and len(kv) > 1):
            return f"Vulkan before {_rule(REPLAY_SINCE)}: caches of {sorted(kv)} (VK_OLD_KV)"
    if backends & CUDA_BACKENDS:
        if rc.split_mode not in ("layer", "none") and not covers_devices(f, rc, gpus):
            return "-sm row split buffers at this build (covers_devices)"
    if not covers_devices(f, rc, gpus):
        return "covers_devices declines this placement"
    return (
        "the replay declined the graph or a device (cuda_graph_ok, metal_graph_ok: an op not"
        " ported; CUDA: UnplacedRule, a rule whose outcome is unknown; Vulkan: UnknownDeviceLimit)"
    )


def summary(figs: list[Figure]) -> dict[str, float]:
    """Over the GPU buffers: median |err|, worst err (signed), worst under-prediction, p90 |err|,
    and the share from the graph."""
    gpu = [x for x in figs if x.gpu]
    errs = sorted(abs(x.error) for x in gpu)
    if not errs:
        return {}
    p90 = errs[math.ceil(0.9 * len(errs)) - 1]  # nearest rank
    return {
        "n": len(gpu),
        "median": median(errs),
        "worst": max((x.error for x in gpu), key=abs),
        "worst_under": min(min(x.error for x in gpu), 0.0),
        "p90": p90,
        "graph": sum(x.source == "graph" for x in gpu) / len(gpu),
    }


def sweep_architectures() -> list[str]:
    """The architectures of the public sweep, as its file names them."""
    return list(json.loads(SWEEP_ARCHITECTURES.read_text())["architectures"])


def coverage(rows: list[dict], figs: list[Figure], listed: list[str]) -> dict[str, int]:
    """Of the `listed` architectures: how many have rows, and how many of those have every GPU
    figure from the graph (rows without an `architecture` left out)."""
    arch_of = {r["id"]: r["architecture"] for r in rows if "architecture" in r}
    covered = set(arch_of.values()) & set(listed)
    estimated = {arch_of[x.row] for x in figs if x.gpu and x.source != "graph" and x.row in arch_of}
    return {
        "listed": len(listed),
        "covered": len(covered),
        "graph": len(covered - estimated),
    }


def report(path: Path, only: str = "", min_build: int = 0) -> list[Figure]:
    rows = [r for r in load_rows(path) if only in r["id"] and r["build"] >= min_build]
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"\n{name}: {len(rows)} rows")
    print(
        f"{'row':<46}{'device':<10}{'logged':>9}{'predicted':>10}{'err':>8}  {'source':<9}declined"
    )
    figs: list[Figure] = []
    for row in rows:
        why = ""
        for x in figures(row):
            figs.append(x)
            if x.source == "estimate" and not why:
                why = declined(row)
            note = why if x.source == "estimate" and x.gpu else ""
            mark = "~" if x.approximate else " "
            print(
                f"{mark}{row['id'][:44]:<45}{x.device:<10}{x.measured / MIB:>9.2f}"
                f"{x.predicted / MIB:>10.2f}{x.error:>+8.1%}  {x.source:<9}{note}"
            )
    _print_summary(figs, "sweep" in path.name)
    if any("architecture" in r for r in rows):
        c = coverage(rows, figs, sweep_architectures())
        print(
            f"architectures: {c['covered']} of the sweep's {c['listed']} have rows "
            f"({c['covered'] / c['listed']:.0%}), {c['graph']} ({c['graph'] / c['listed']:.0%}) "
            "with every GPU figure from the graph"
        )
    exact = [x for x in figs if not x.approximate]
    if len(exact) < len(figs):
        print("without the rows marked ~:")
        _print_summary(exact, "sweep" in path.name)
    return figs


def _print_summary(figs: list[Figure], sweep: bool) -> None:
    """summary() in words, with the issue's targets for a corpus of logs or for the sweep."""
    s = summary(figs)
    if s:
        host_errs = [abs(x.error) for x in figs if not x.gpu]
        print(
            f"GPU buffers: {s['n']}  median |err| {s['median']:.2%}  worst {s['worst']:+.2%}  "
            f"worst under {s['worst_under']:+.2%}  p90 |err| {s['p90']:.2%}  "
            f"from the graph {s['graph']:.0%}"
        )
        if host_errs:
            print(
                f"host buffers: {len(host_errs)}  median |err| {median(host_errs):.2%}  "
                f"worst |err| {max(host_errs):.2%}"
            )
        targets = (
            [("median |err| <= 3%", s["median"] <= 0.03), ("p90 |err| <= 10%", s["p90"] <= 0.10)]
            if sweep
            else [
                ("median |err| <= 3%", s["median"] <= 0.03),
                ("worst |err| <= 10%", abs(s["worst"]) <= 0.10),
                ("no GPU under by > 5%", s["worst_under"] >= -0.05),
            ]
        )
        targets.append(("95% of GPU figures from the graph", s["graph"] >= 0.95))
        for text, met in targets:
            print(f"  [{'met' if met else 'NOT MET'}] {text} (#36)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--corpus", type=Path, action="append", help="a corpus file (default: both of #36's)"
    )
    ap.add_argument("--id", default="", help="only the rows whose id contains this text")
    ap.add_argument(
        "--min-build", type=int, default=0, help="only the rows of this llama.cpp build or later"
    )
    args = ap.parse_args(argv)
    for path in args.corpus or CORPORA:
        report(path.resolve(), args.id, args.min_build)
    return 0


if __name__ == "__main__":
    sys.exit(main())
