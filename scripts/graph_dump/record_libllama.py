#!/usr/bin/env python3
"""Record the graphs of record_build.py's cases at older llama.cpp builds, through llama-cpp-python's
libllama instead of llama-server (llama-cpp-python ships no server binary).

One child Python per case loads the case's model with the low-level llama_cpp API of the
llama-cpp-python whose libllama is recorded, with graph_dump's shim preloaded (and, for a sparse
real-shape file, the no-populate shim), and makes the context llama-server would make for the
case's arguments (common_context_params_to_llama and llama-server's defaults: n_batch 2048, -np
auto = 4 slots with a unified cache, swa_full off, n_outputs_max = n_parallel from rule
server_output_limit on, flash attention on unless -fa off, --no-repack = use_extra_bufts off;
--embedding: embeddings on, n_batch = n_ubatch, every token an output; --pooling: its type).
llama_init_from_model runs llama_context::sched_reserve; the shim keeps its reserves' "sched"
events, the first two of which (pp, tg) are written to fixtures/graphs/<build>-<case>.jsonl.gz.

    # llama-cpp-python 0.3.36 as installed (llama.cpp 0c1e570, b9512):
    python scripts/graph_dump/record_libllama.py --build 9512 CASE ...
    # another llama-cpp-python: its Python package folder (PYTHONPATH) and its built libllama
    python scripts/graph_dump/record_libllama.py --build 8470 --py SDIST --lib LIBDIR CASE ...
    # a prebuilt libllama of llama-cpp-py-sync (built on a newer glibc): glibc_compat.py
    python scripts/graph_dump/record_libllama.py --build 8683 --py SDIST --lib OUT \
        --preload OUT/libisoc23.so CASE ...

--no-extra-bufts loads the weights without the CPU's extra buffer types whatever the case says:
a libllama built for a host with AMX puts MLA's attn_k_b / attn_v_b in the AMX buffer, and
0.3.17's and 0.3.35's ggml_backend_sched then aborts (GGML_ASSERT(*cur_backend_id != -1)) on
fx-deepseek2. The CPU graph and its compute buffer do not depend on where the weights are.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.builds import BUILD_SERVER_OUTPUT_LIMIT  # noqa: E402
from llamafit.memory.config import POOLING_TYPES  # noqa: E402
from scripts.graph_dump.record_build import (  # noqa: E402
    CASES,
    SPARSE,
    VULKAN,
    model_path,
    sched_lines,
)
from tests.support.graph_dump import DUMP_ENV, shim  # noqa: E402

OUT = ROOT / "fixtures" / "graphs"
SERVER_OUTPUT_LIMIT = BUILD_SERVER_OUTPUT_LIMIT  # rule server_output_limit (PR #23861)

# the child: llama-server's context for the case, through the low-level API
CHILD = r"""
import ctypes, importlib.util, json, os, sys
# llama_cpp opens its libraries RTLD_LOCAL, where the shim's dlsym(RTLD_NEXT) cannot find the
# real functions: libggml-base goes into the global scope first
spec = importlib.util.find_spec("llama_cpp")
lib = os.environ.get("LLAMA_CPP_LIB_PATH") or os.path.join(spec.submodule_search_locations[0], "lib")
ctypes.CDLL(os.path.join(lib, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
import llama_cpp as L
a = json.loads(sys.argv[1])
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
mp.use_mmap = True
mp.use_extra_bufts = a["repack"]
model = L.llama_model_load_from_file(a["model"].encode(), mp)
assert model, "model load failed"
cp = L.llama_context_default_params()
cp.n_ctx = a["n_ctx"]
cp.n_ubatch = a["n_ubatch"]
# --embedding: llama-server lowers n_batch to n_ubatch (tools/server/server.cpp main)
cp.n_batch = a["n_ubatch"] if a["embeddings"] else 2048
cp.embeddings = a["embeddings"]
cp.pooling_type = a["pooling"]
cp.n_seq_max = a["n_seq"]
cp.kv_unified = a["unified"]
cp.swa_full = False
cp.flash_attn_type = 1 if a["fa"] else 0
cp.type_k = a["type_k"]
cp.type_v = a["type_v"]
cp.n_threads = cp.n_threads_batch = 2
if a["outputs"] and hasattr(cp, "n_outputs_max"):
    cp.n_outputs_max = a["n_seq"]
    cp.n_outputs_max_per_seq = 1
ctx = L.llama_init_from_model(model, cp)
assert ctx, "context failed"
print("context built", flush=True)
"""

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}


def child_args(name: str, tmp: Path, build: int, extra_bufts: bool = True) -> dict[str, object]:
    """The child's settings for a case (llama-server's for its arguments)."""
    key, args = CASES[name]
    if VULKAN in args or "-ngl" in args or "-ot" in args:
        raise SystemExit(f"{name}: CPU-only cases only")

    def flag(f: str, default: str) -> str:
        return args[args.index(f) + 1] if f in args else default

    np_auto = "-np" not in args
    embeddings = "--embedding" in args or "--rerank" in args
    pooling = "rank" if "--rerank" in args else flag("--pooling", "")
    return {
        "model": str(model_path(key, tmp)),
        "n_ctx": int(flag("-c", "4096")),
        "n_ubatch": int(flag("-ub", "512")),
        "n_seq": 4 if np_auto else int(flag("-np", "1")),
        "unified": np_auto or "-kvu" in args,
        "fa": flag("-fa", "on") != "off",
        "type_k": GGML_TYPES[flag("-ctk", "f16")],
        "type_v": GGML_TYPES[flag("-ctv", "f16")],
        "repack": extra_bufts and "--no-repack" not in args,
        # server_output_limits keeps n_batch outputs for embeddings
        "outputs": build >= SERVER_OUTPUT_LIMIT and not embeddings,
        "embeddings": embeddings,
        # --pooling (--rerank: rank) as enum llama_pooling_type (-1: unspecified, the model's)
        "pooling": POOLING_TYPES.index(pooling) if pooling else -1,
    }


def record_case(
    name: str,
    tmp: Path,
    build: int,
    py: str | None,
    lib: str | None,
    extra_bufts: bool = True,
    preload_more: tuple[str, ...] = (),
) -> list[str]:
    """The sched lines of one case at this build (pp, then tg)."""
    key, _ = CASES[name]
    dump_lib = shim()
    if dump_lib is None:
        raise SystemExit("needs a C compiler for the graph_dump shim")
    preload = [str(dump_lib)]
    if key in SPARSE:
        from tests.support.sparse_loads import shim as no_populate

        extra = no_populate()
        if extra is None:
            raise SystemExit("needs a C compiler for the no-populate shim")
        preload.append(str(extra))
    preload.extend(preload_more)
    dump = tmp / f"{name}.jsonl"
    dump.unlink(missing_ok=True)
    env = dict(os.environ, LD_PRELOAD=":".join(preload), **{DUMP_ENV: str(dump)})
    if py is not None:
        env["PYTHONPATH"] = py
    if lib is not None:
        env["LLAMA_CPP_LIB_PATH"] = lib
    argv = [sys.executable, "-c", CHILD, json.dumps(child_args(name, tmp, build, extra_bufts))]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not dump.is_file():
        raise SystemExit(f"{name}: failed ({proc.returncode}); log tail:\n{proc.stderr[-2000:]}")
    return sched_lines(name, dump)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--build", type=int, required=True, help="the libllama's build number")
    ap.add_argument("--py", help="the llama_cpp package's parent folder (default: installed)")
    ap.add_argument("--lib", help="the folder of its libllama (default: the package's)")
    ap.add_argument(
        "--no-extra-bufts", action="store_true", help="use_extra_bufts off for every case"
    )
    ap.add_argument(
        "--preload",
        action="append",
        default=[],
        help="a library to preload too (glibc_compat.py's, for a prebuilt libllama)",
    )
    ns = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ns.cases:
            lines = record_case(
                name, Path(tmp), ns.build, ns.py, ns.lib, not ns.no_extra_bufts, tuple(ns.preload)
            )
            for ln in lines:
                json.loads(ln)  # whole lines only
            out = OUT / f"b{ns.build}-{name}.jsonl.gz"
            out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
            print(f"{name}: {out.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
