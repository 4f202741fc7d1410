"""The llama-server command line for a chosen configuration: an argv list, never a shell string.

A remote model (an https URL, Hugging Face resolve URLs included) is passed as `-mu URL`:
llama-server downloads it itself. Every value the fit depends on is pinned explicitly (-c, -ngl,
-fa, -ctk, -ctv, -ub, -np, --embedding, --pooling), plus `--fit off` so that llama-server's own
fitter does not change them; flags the user pinned that do not affect memory are passed through
in their order.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..memory.config import N_PARALLEL_AUTO, LaunchConfig
from ..memory.resolve import ResolvedConfig
from ..paths import is_url


def server_argv(
    model_path: str,
    cfg: LaunchConfig,
    rc: ResolvedConfig,
    *,
    passthrough: Sequence[str] = (),
    server: str = "llama-server",
) -> list[str]:
    model = ["-mu", model_path] if is_url(model_path) else ["-m", model_path]
    argv = [
        server,
        *model,
        "-c",
        str(cfg.n_ctx),
        "-ngl",
        str(rc.n_gpu_layers),
        "-fa",
        rc.fa_flag,
        "-ctk",
        rc.type_k.name.lower(),
        "-ctv",
        rc.type_v.name.lower(),
        "-b",
        str(rc.n_batch),
        "-ub",
        str(rc.n_ubatch),
    ]
    argv += _slots(cfg) + _placement(rc) + _memory(rc) + _embeddings(cfg)
    if cfg.devices:  # -dev: the user's own, or `none` for a plan without a GPU (solver)
        argv += ["-dev", ",".join(cfg.devices)]
    if cfg.rpc:
        argv += ["--rpc", ",".join(cfg.rpc)]
    argv += ["--fit", "off", *passthrough]
    return argv


def _slots(cfg: LaunchConfig) -> list[str]:
    if cfg.n_parallel == N_PARALLEL_AUTO:
        return []
    return ["-np", str(cfg.n_parallel), *(["-kvu"] if cfg.kv_unified else [])]


def _placement(rc: ResolvedConfig) -> list[str]:
    """Where the weights go: experts and FFNs to the CPU, -ot rules, the split over the GPUs."""
    argv = ["--n-cpu-moe", str(rc.n_cpu_moe)] if rc.n_cpu_moe else []
    argv += ["--cpu-moe"] if rc.cpu_moe else []
    argv += ["--n-cpu-ffn", str(rc.n_cpu_ffn)] if rc.n_cpu_ffn else []
    for rx, buft in rc.overrides:
        argv += ["-ot", f"{rx}={buft}"]
    if rc.tensor_split:
        argv += ["-ts", ",".join(f"{f:g}" for f in rc.tensor_split)]
    if rc.split_mode != "layer":
        argv += ["-sm", rc.split_mode, "-mg", str(rc.main_gpu)]
    return argv


def _embeddings(cfg: LaunchConfig) -> list[str]:
    """--embedding and --pooling (--rerank is --embedding --pooling rank, common/arg.cpp)."""
    argv = ["--embedding"] if cfg.embeddings else []
    return argv + (["--pooling", cfg.pooling] if cfg.pooling else [])


def _memory(rc: ResolvedConfig) -> list[str]:
    """The caches and the loading: --swa-full, -nkvo, --load-mode."""
    argv = ["--swa-full"] if rc.swa_full else []
    argv += ["-nkvo"] if not rc.kv_offload else []
    argv += ["--load-mode", rc.load_mode] if rc.load_mode != "auto" else []
    return argv


def display(argv: Sequence[str]) -> str:
    """A shell-quoted rendering for people (the argv list is what runs)."""
    return shlex.join(argv)
