"""The short graph (llamafit/memory/graph/periodic.py) against the full one, plan by plan.

    python scripts/bench/bench_short.py [--gpu SPEC] [--backend NAME] [--only TEXT] [--mix TYPE]

For every shape scripts/fixtures/make_shapes.py writes, `llamafit plan --json` twice in one
process: with the replay taking short graphs where they prove the full graph's buffers, and with
every replay of the full graph (replay.shorten answering None). Per shape: whether the two plans
are the same text, how many short reserves proved the full graph and how many declined, the
blocks of the first short graph against the model's, and the CPU time of each plan. Exit 1 where
any plan differs. Default: two 12 GiB CUDA GPUs (`--gpu 12GiB,12GiB`). `--mix q8_0` writes every
shape in that mix instead of its own (one type in every block: more of them repeat); two GPUs that
hold every block (`--gpu 512GiB,512GiB`) replay with pipeline parallelism's input copies.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="12GiB,12GiB", help="plan's --gpu (default 12GiB,12GiB)")
    ap.add_argument("--backend", default="", help="plan's --backend (default: cuda)")
    ap.add_argument("--only", default="", help="shapes whose name contains this")
    ap.add_argument("--mix", default="", help="every shape in this mix (default: its own)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-short-") as name:
        return _compare(a, Path(name))


def _compare(a: argparse.Namespace, tmp: Path) -> int:
    """The table, with the shapes and the caches in `tmp`."""
    os.environ.update(
        LLAMAFIT_CACHE_DIR=str(tmp / "cache"),
        LLAMAFIT_CALIBRATION=str(tmp / "cal.jsonl"),
        LLAMAFIT_HOST_BANDWIDTH="50e9",
        LLAMAFIT_HOST_FLOPS="200e9",
    )
    from click.testing import CliRunner

    from llamafit.cli import cli
    from llamafit.memory.graph import periodic, replay, template
    from scripts.fixtures import make_shapes

    answers: Counter[bool] = Counter()
    blocks: list[int] = []
    proves, shorten = replay.proves, replay.shorten

    def counted(m: object, short: periodic.Shortened, graph: object) -> bool:
        out = proves(m, short, graph)  # type: ignore[arg-type]
        answers[out] += 1
        if not blocks:
            blocks.append(len(short.layers))
        return out

    replay.proves = counted  # type: ignore[assignment]
    extra = ["--backend", a.backend] if a.backend else []
    args = ["--gpu", a.gpu, *extra, "--ram", "64GiB", "--json", "--no-llama-check"]
    runner = CliRunner()
    print(f"plan {' '.join(args)}: short graphs against full ones (CPU ms)")
    print(
        f"{'shape':30} {'same':>5} {'proved':>6} {'declined':>8} {'blocks':>9} {'short':>7} "
        f"{'full':>7}"
    )
    differ = 0
    specs = make_shapes.load_specs()
    if a.mix:
        specs = {
            f"{k}-{a.mix}": {**v, "key": f"{k}-{a.mix}", "mix": a.mix} for k, v in specs.items()
        }
    keys = [k for k in specs if a.only in k]
    if keys:  # a plan first, untimed: the imports and caches a first plan pays
        first = make_shapes.write_shape(keys[0], tmp / "shapes", specs)
        runner.invoke(cli, ["plan", str(first), *args])
    for key in keys:
        path = make_shapes.write_shape(key, tmp / "shapes", specs)
        answers.clear()
        blocks.clear()
        outs, cpu = [], []
        for short_on in (True, False):
            replay.shorten = shorten if short_on else (lambda facts, config: None)
            template.clear_cache()
            t = time.process_time()
            outs.append(runner.invoke(cli, ["plan", str(path), *args]).output)
            cpu.append((time.process_time() - t) * 1e3)
        replay.shorten = shorten
        same = outs[0] == outs[1]
        differ += not same
        from llamafit.facts.hparams import build_facts
        from llamafit.reader.model import read_model

        n_layer = build_facts(read_model(path)).n_layer
        kept = f"{blocks[0]}/{n_layer}" if blocks else f"-/{n_layer}"
        print(
            f"{key:30} {'yes' if same else 'NO':>5} {answers[True]:6} {answers[False]:8} "
            f"{kept:>9} {cpu[0]:7.0f} {cpu[1]:7.0f}"
        )
    print(f"plans that differ: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
