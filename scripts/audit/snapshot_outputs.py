"""Every `plan` and `check` output over the fixtures and the corpus shapes, written to a folder, so that
a change that must not change a figure (issue #34: code moved, not rules) is shown byte-identical:

    python scripts/audit/snapshot_outputs.py OUT_BEFORE          # on the old tree
    python scripts/audit/snapshot_outputs.py OUT_AFTER           # on the new tree
    diff -r OUT_BEFORE OUT_AFTER && echo identical

Rows: bench_plan.rows (the demo, fixtures/*.gguf, the header-only Qwen2.5-32B, every header-only shape
of the GPU corpus, Vulkan devices and RPC workers, the 94-layer MoE on two GPUs and over RPC), each
planned on several GPU sizes and backends, as text and as --json, and checked at a fixed config. No
llama.cpp program is asked (PATH holds only python; --no-llama-check), the host's rates are pinned and
every cache and calibration file is a fresh temporary one and the host RAM is given (--ram), so
the outputs depend on the tree alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench.bench_plan import rows  # noqa: E402

# Extra device sets per row: the row's own, then these (replacing its --gpu).
EXTRA_GPUS = (
    ["--gpu", "cpu"],
    ["--gpu", "8GiB"],
    ["--gpu", "24GiB,4GiB"],
    ["--gpu", "12GiB", "--backend", "rocm"],
    ["--gpu", "16GiB", "--backend", "metal"],
    ["--gpu", "6GiB", "--backend", "vulkan"],
)
CHECK_FLAGS = (
    ["--", "-c", "8192", "-ngl", "99"],
    ["--", "-c", "32768", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ngl", "20"],
    ["--", "-c", "4096", "-fa", "off", "-ub", "256", "-ngl", "0"],
)

CHILD = r"""
import json, sys
from click.testing import CliRunner
from llamafit.cli import cli
out = sys.argv[1]
jobs = json.loads(open(sys.argv[2]).read())
runner = CliRunner()
for name, args in jobs:
    r = runner.invoke(cli, args, catch_exceptions=True)
    text = r.output
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        text += f"\n<exception {type(r.exception).__name__}: {r.exception}>"
    with open(f"{out}/{name}", "w") as f:
        f.write(f"$ llamafit {' '.join(args)}\nexit {r.exit_code}\n{text}")
"""


def _swap_gpu(args: list[str], gpu: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--gpu", "--backend"):
            skip = True
            continue
        out.append(a)
    return out + gpu


def jobs(shapes: Path) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for label, args in rows(shapes):
        base = label.replace(" ", "_").replace("/", "_")
        variants = [args] + [_swap_gpu(args, g) for g in EXTRA_GPUS if "--rpc" not in args]
        variants = [[*v, "--ram", "64GiB"] for v in variants]  # not this machine's free RAM
        args = [*args, "--ram", "64GiB"]
        for i, v in enumerate(variants):
            out.append((f"{base}.plan{i}.txt", ["plan", *v, "--no-llama-check"]))
            out.append((f"{base}.plan{i}.json", ["plan", *v, "--no-llama-check", "--json"]))
        for j, flags in enumerate(CHECK_FLAGS):
            out.append((f"{base}.check{j}.txt", ["check", *args, "--no-llama-check", *flags]))
            out.append(
                (f"{base}.check{j}.json", ["check", *args, "--no-llama-check", "--json", *flags])
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default="", help="rows whose label contains this text")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        shapes = tmp / "shapes"
        shapes.mkdir()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts/fixtures/make_shape_header.py"),
                "--all",
                str(shapes),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        todo = [(n, args) for n, args in jobs(shapes) if a.only in n]
        (tmp / "jobs.json").write_text(json.dumps(todo))
        (tmp / "bin").mkdir()
        (tmp / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA", "GGML_"))}
        env.update(
            PATH=str(tmp / "bin"),
            PYTHONPATH=str(ROOT),
            LLAMAFIT_CACHE_DIR=str(tmp / "cache"),
            LLAMAFIT_CALIBRATION=str(tmp / "calibration.jsonl"),
            LLAMAFIT_HOST_BANDWIDTH="50e9",
            LLAMAFIT_HOST_FLOPS="200e9",
            COLUMNS="80",
            HOME=str(tmp / "home"),
        )
        subprocess.run(
            [sys.executable, "-c", CHILD, str(a.out), str(tmp / "jobs.json")],
            env=env,
            cwd=tmp,
            check=True,
        )
        for f in a.out.iterdir():  # temp paths and the tree's own out, so two trees compare
            text = f.read_text()
            f.write_text(text.replace(str(tmp), "<tmp>").replace(str(ROOT), "<root>"))
    print(f"{len(todo)} outputs in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
