"""`llamafit ls` over N generated header-only models: cold (nothing cached) and warm times.

The models are header-only GGUFs (no tensor data, as llamafit reads them): the Qwen2.5-32B-like
Q4_K_M header (152k-token vocabulary) and the small fixtures in turn, each under its own name in
one directory, so every one is a separate file to find, read, fit and cache.

    python scripts/bench_ls.py [N] [--gpu 24GiB]

Prints: the in-process listing time (scan + headers + fits) cold and warm, and the whole
command (`python -m llamafit ls DIR`, process start included) warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "fixtures" / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"] + [
    ROOT / "fixtures" / f for f in ("dense-llama.gguf", "moe-qwen3.gguf", "swa-gemma3.gguf", "mla-deepseek2.gguf")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=200)
    ap.add_argument("--gpu", default="24GiB")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ls-"))
    models, cache = work / "models", work / "cache"
    models.mkdir()
    for i in range(args.n):
        src = SOURCES[i % len(SOURCES)]
        shutil.copyfile(src, models / f"m{i:03d}-{src.stem}.gguf")
    os.environ["LLAMAFIT_CACHE_DIR"] = str(cache)
    sys.path.insert(0, str(ROOT))
    from llamafit.commands.ls import listing, machine_for, roots_for
    from llamafit.commands.prepare import MachineSpec
    from llamafit.server.flags import parse_server_args

    m = machine_for(MachineSpec(gpu_spec=args.gpu), os.environ)  # as `llamafit ls --gpu` builds it
    cfg = parse_server_args([]).config
    roots = roots_for([str(models)], os.environ)
    times = []
    for label in ("cold", "warm", "warm"):
        t0 = time.perf_counter()
        result = listing(roots, m, cfg)
        times.append((label, time.perf_counter() - t0, len(result.rows)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "llamafit", "ls", str(models), "--gpu", args.gpu], env=env,
                   stdout=subprocess.DEVNULL, check=False)
    whole = time.perf_counter() - t0
    t0 = time.perf_counter()
    code = "import llamafit.cli, llamafit.commands.ls, llamafit.facts.hparams"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    imports = time.perf_counter() - t0
    print(f"llamafit ls over {args.n} header-only models ({args.gpu}), {len(SOURCES)} shapes in turn")
    for label, t, n in times:
        print(f"  listing {label:5s} {t * 1000:8.1f} ms  ({n} rows, {t / args.n * 1000:.2f} ms per model)")
    print(f"  whole command, warm: {whole * 1000:8.1f} ms (of which Python start + imports: {imports * 1000:.1f} ms)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
