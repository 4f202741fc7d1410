#!/usr/bin/env python3
"""Op offload on a real device: what Vulkan0 (lavapipe) reserves when it takes host-weight ops,
against llamafit's prediction (memory/op_offload.py add_op_offload), on the real-shape sparse
models.

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench/bench_op_offload.py [--json OUT]

The grid crosses the batch threshold (GGML_OP_OFFLOAD_MIN_BATCH, 32) and the sizes where the copies
stop fitting the activations' holes: -ub 32..2048, two context sizes (the K/V views grow with it),
flash attention on and off (off: the KQ product joins the GPU until it passes the device's storage
range), whole host layers (-ngl 0) and host experts under GPU layers (-ot exps=CPU). Prints one line
per start (MiB, real vs predicted, for Vulkan0 and Vulkan_Host) and the worst and median errors of
Vulkan0. Servers run on loopback from LLAMAFIT_LAB_PORT_LO..HI (device_lab.py) and are stopped after
each load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from click.testing import CliRunner

from llamafit.cli import cli
from scripts.calibration import device_lab
from scripts.fixtures import make_shapes

BASE = ("-np", "1", "--no-repack")
_UB = ("32", "64", "128", "256", "512", "1024", "2048")
GRID: tuple[tuple[str, tuple[str, ...]], ...] = (
    *(("llama3.2-1b", ("-c", "4096", "-ngl", "0", "-ub", ub, "-b", "2048")) for ub in _UB),
    *(
        ("llama3.2-1b", ("-c", "16384", "-ngl", "0", "-ub", ub, "-b", "2048"))
        for ub in ("32", "128", "512", "2048")
    ),
    *(
        ("llama3.2-1b", ("-c", "4096", "-ngl", "0", "-fa", "off", "-ub", ub))
        for ub in ("32", "64", "128", "256", "512")
    ),
    ("llama3.2-1b", ("-c", "4096", "-ngl", "4", "-ub", "128")),
    *(
        (
            "granite3-1b-a400m",
            ("-c", "4096", "-ngl", "99", "-ot", "exps=CPU", "-ub", ub, "-b", "2048"),
        )
        for ub in ("32", "128", "512", "1024", "2048")
    ),
    *(
        ("granite3-1b-a400m", ("-c", "4096", "-ngl", "0", "-ub", ub, "-b", "2048"))
        for ub in ("32", "512", "2048")
    ),
    *(("gemma3-1b", ("-c", "4096", "-ngl", "0", "-ub", ub)) for ub in ("32", "512")),  # SWA
    *(
        ("qwen3-8b", ("-c", "4096", "-ngl", "6", "-ub", ub)) for ub in ("128", "512")
    ),  # untied output on the host
    (
        "deepseek-v2-lite",
        ("-c", "4096", "-ngl", "0", "-ub", "512"),
    ),  # experts over the storage range: host ops
    ("gpt-oss-20b", ("-c", "4096", "-ngl", "99", "-ot", "exps=CPU", "-ub", "512")),
)


def predict(path: Path, flags: list[str]) -> dict[str, int]:
    res = CliRunner(env={"GGML_VK_VISIBLE_DEVICES": None}).invoke(
        cli, ["check", str(path), "--gpu", "lavapipe", "--reserve", "0", "--json", "--", *flags]
    )
    return {d["name"]: d["compute_bytes"] for d in json.loads(res.stdout)["devices"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    if device_lab.bin_dir() is None:
        print(
            "the Vulkan/RPC llama.cpp build is absent (build/llama-vulkan-rpc/bin)", file=sys.stderr
        )
        return 2
    folder = Path(tempfile.mkdtemp(prefix="llamafit-op-offload-"))
    rows, errors = [], []
    print(
        f"{'model':18s} {'flags':44s} {'Vulkan0 real':>12s} {'pred':>8s} {'err':>7s}   "
        f"{'host real':>9s} {'pred':>7s}"
    )
    for key, extra in GRID:
        path = make_shapes.write_shape(key, folder)
        flags = [*BASE, *extra]
        got = device_lab.load(path, flags)
        if not got.ok:
            print(f"{key:18s} {' '.join(extra):44s} failed: {got.failure}")
            continue
        pred = predict(path, flags)
        real, host = got.get("compute", "Vulkan0"), got.get("compute", "Vulkan_Host")
        p_gpu, p_host = pred["Vulkan0"] / (1 << 20), pred["CPU"] / (1 << 20)
        err = p_gpu / real - 1
        errors.append(err)
        rows.append(
            {
                "model": key,
                "flags": flags,
                "real_mib": {"Vulkan0": real, "Vulkan_Host": host},
                "predicted_bytes": {"Vulkan0": pred["Vulkan0"], "CPU": pred["CPU"]},
            }
        )
        print(
            f"{key:18s} {' '.join(extra):44s} {real:12.2f} {p_gpu:8.2f} {100 * err:+6.1f}%   "
            f"{host:9.2f} {p_host:7.2f}",
            flush=True,
        )
    if errors:
        print(
            f"\nVulkan0 compute over {len(errors)} starts: worst under "
            f"{100 * min(min(errors), 0):+.1f}%, median {100 * statistics.median(errors):+.1f}%, "
            f"worst over {100 * max(errors):+.1f}%"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0 if errors and min(errors) >= -0.0005 else 1


if __name__ == "__main__":
    raise SystemExit(main())
