"""What the core install costs: `import llamafit` and `llamafit --help` above bare Python start-up
(wall and CPU, best of N, bytecode compiled as `pip install` leaves it), and with --venv the
distributions a fresh virtual environment holds after `pip install .` of this checkout.

    python scripts/bench/bench_startup.py [--repeat 7] [--venv]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def distributions(work: Path) -> list[str]:
    """`pip install .` into a fresh venv: every distribution it holds but pip's own (pip,
    setuptools)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", str(ROOT)], check=True, stdout=subprocess.DEVNULL)
    listed = json.loads(
        subprocess.run([*pip, "list", "--format", "json"], check=True, capture_output=True).stdout
    )
    return sorted(d["name"] for d in listed if d["name"] not in ("pip", "setuptools", "wheel"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--venv", action="store_true", help="also count the distributions of a fresh install"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(ROOT / "llamafit")], env=env, check=True
        )
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import llamafit": [sys.executable, "-c", "import llamafit"],
            "llamafit --help": [sys.executable, "-m", "llamafit", "--help"],
        }
        best = {
            name: min((timed(cmd, env) for _ in range(args.repeat)), key=lambda t: t[0])
            for name, cmd in cases.items()
        }
        base_wall, base_cpu = best["python -c pass"]
        print(
            f"start-up, best of {args.repeat} ({os.cpu_count()} CPUs): bare Python "
            f"{base_wall * 1000:.0f} ms wall, {base_cpu * 1000:.0f} ms CPU"
        )
        for name in ("import llamafit", "llamafit --help"):
            wall, cpu = best[name]
            print(
                f"  {name:16s} +{(wall - base_wall) * 1000:5.0f} ms wall  "
                f"+{(cpu - base_cpu) * 1000:5.0f} ms CPU"
            )
        if args.venv:
            names = distributions(Path(tmp))
            print(
                f"`pip install .` in a fresh venv: {len(names)} distributions ({', '.join(names)})"
            )


if __name__ == "__main__":
    main()
