#!/usr/bin/env python3
"""llama.cpp's own fitter against llamafit on a real Vulkan device (Vulkan0: Mesa lavapipe, 2 GiB).

For each model and margin M (MiB kept free; the budget is 2048 - M on Vulkan0):
  - `llama-fit-params -m MODEL -fitt M` prints the -c / -ngl / -ot that llama.cpp's --fit chooses;
  - `llamafit plan MODEL --backend vulkan --gpu 2GiB --reserve M` chooses its config;
  - each chosen config is started with llama-server (--no-warmup, -lv 4, --fit off) and the
    device's real buffer totals are read from its log.
Prints one row per case, side by side, with "within budget" columns; --json writes the rows.
With --rpc the same comparison runs over two ggml-rpc-server workers on loopback, each serving a
lavapipe Vulkan0 (2 GiB): no local GPU, the budget is per worker, and a row is within budget when
both are.

    GGML_VK_VISIBLE_DEVICES=0 python scripts/bench/bench_fit.py [--quick] [--rpc] [--given-devices]
        [--json OUT]

By default llamafit plans as a user would have it: the llama-server of the build on PATH, no --gpu
or --backend (its own devices; RPC workers' memory asked through it). --given-devices describes them
instead.

Models: the real Gemma 3 270M (the demo) and real-shape zero-weight models
(scripts/fixtures/make_shapes.py) written into a temporary folder: dense (Llama 3.2 1B), SWA (Gemma
3 1B), MoE (Granite 3.0 1B-A400M).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.calibration import device_lab
from scripts.fixtures import make_shapes

DEVICE_MIB = 2048
MARGINS = (1024, 1536, 1800, 1900, 1948)
SHAPES = ("llama3.2-1b", "gemma3-1b", "granite3-1b-a400m")
RPC: list[
    str
] = []  # --rpc: the workers' endpoints (fresh workers for each llama.cpp run, see _workers)


@contextmanager
def _workers(rpc: bool) -> Iterator[None]:
    """Fresh RPC workers for one llama.cpp run: a fit-params probe or a start that fails can take a
    worker down."""
    if not rpc:
        yield
        return
    with device_lab.rpc_workers(2, "Vulkan0") as endpoints:
        RPC[:] = endpoints
        yield


def _rpc_args() -> list[str]:
    return ["--rpc", ",".join(RPC)] if RPC else []


def _env() -> dict[str, str]:
    """Over RPC no local Vulkan device: the workers hold lavapipe."""
    return device_lab.vk_env(None) if RPC else device_lab.vk_env("0")


@dataclass
class Side:
    args: list[str]
    n_ctx: int | None
    device_mib: float | None  # Vulkan0 model + KV + RS + compute + output, as reported
    started: bool
    failure: str | None = None


@dataclass
class Row:
    model: str
    margin_mib: int
    budget_mib: int
    fit: Side
    llamafit: Side

    def within(self, side: Side) -> bool | None:
        return None if side.device_mib is None else side.device_mib <= self.budget_mib


def _ctx(args: list[str]) -> int | None:
    for flag in ("-c", "--ctx-size"):
        if flag in args:
            return int(args[args.index(flag) + 1])
    return None


def fit_params(model: Path, margin: int) -> list[str]:
    out = device_lab.run_tool(
        ["llama-fit-params", *_rpc_args(), "-m", str(model), "-fitt", str(margin)], env=_env()
    )
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("-c ")]
    return shlex.split(lines[-1]) if lines else []  # -ot "…" comes quoted


AS_USER = [True]  # --given-devices: False


def llamafit_plan(model: Path, margin: int) -> list[str]:
    """As a user would have it (default): the llama-server on PATH, no --gpu or --backend: the plan
    uses the server's own devices (and RPC workers' memory asked through it). --given-devices: the
    devices described with --gpu/--backend/--rpc host:port=SIZE instead."""
    env = dict(_env(), PYTHONPATH=str(device_lab.ROOT))
    if AS_USER[0]:
        env["PATH"] = f"{device_lab.bin_dir()}{os.pathsep}{env.get('PATH', '')}"
        env.pop("LLAMA_SERVER", None)
        machine = ["--rpc", ",".join(RPC)] if RPC else []
    else:
        machine = (
            ["--gpu", "cpu", "--rpc", ",".join(f"{ep}={DEVICE_MIB}MiB" for ep in RPC)]
            if RPC
            else ["--backend", "vulkan", "--gpu", f"{DEVICE_MIB}MiB"]
        )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "plan",
            str(model),
            *machine,
            "--reserve",
            str(margin),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        return []
    cmd = json.loads(proc.stdout).get("command") or []
    args = list(cmd[3:])  # drop `llama-server -m MODEL`
    for flag in ("--fit", "--rpc"):  # the endpoints are the run's own (_workers)
        if flag in args:
            i = args.index(flag)
            del args[i : i + 2]
    return args


def start(model: Path, args: list[str]) -> Side:
    if not args:
        return Side(args, None, None, False, "no config")
    got = device_lab.load(model, [*_rpc_args(), *args], env=_env())
    # each worker's device 0, as llama-server names it
    devices = [f"RPC0[{ep}]" for ep in RPC] if RPC else ["Vulkan0"]
    # the fullest device
    used = (
        max(round(sum(kinds.get(d, 0.0) for kinds in got.buffers.values()), 2) for d in devices)
        if got.buffers
        else None
    )
    return Side(args, _ctx(args), used, got.ok, got.failure)


def models(tmp: Path, quick: bool) -> list[tuple[str, Path]]:
    from llamafit.fetch.demo import demo_model_path

    out = [("gemma3-270m (real)", Path(demo_model_path()))]
    for key in SHAPES[:1] if quick else SHAPES:
        out.append((key, make_shapes.write_shape(key, tmp)))
    return out


N_LAYERS: dict[str, int] = {}  # model name → its blocks + 1 (the output layer): -ngl all


def _ngl(s: Side, n_all: int) -> int:
    # llama.cpp's default: all
    value = s.args[s.args.index("-ngl") + 1] if "-ngl" in s.args else "all"
    return n_all if value in ("all", "auto", "-1") else min(int(value), n_all)


def dominated(row: Row) -> bool:
    """llama.cpp's --fit, within budget, has as much context and as many GPU layers as llamafit's
    pick and more of one (issue #28: never)."""
    if not row.within(row.fit):
        return False
    n_all = N_LAYERS.get(row.model, 10**6)
    fit, ours = (
        (row.fit.n_ctx or 0, _ngl(row.fit, n_all)),
        (row.llamafit.n_ctx or 0, _ngl(row.llamafit, n_all)),
    )
    return fit[0] >= ours[0] and fit[1] >= ours[1] and fit != ours


def _fmt_side(row: Row, s: Side) -> str:
    within = row.within(s)
    mark = "-"
    if within is not None:
        mark = "yes" if within else "NO"
    used = "-" if s.device_mib is None else f"{s.device_mib:7.1f}"
    ngl = s.args[s.args.index("-ngl") + 1] if "-ngl" in s.args else "-"
    kv = s.args[s.args.index("-ctk") + 1] if "-ctk" in s.args else "f16"
    extra = " ot" if "-ot" in s.args else ""
    if "--n-cpu-moe" in s.args:
        extra = f" cmoe{s.args[s.args.index('--n-cpu-moe') + 1]}"
    return f"{s.n_ctx or 0:>6} {ngl:>4} {kv:>5}{extra:<6} {used:>7} {mark:>3}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the demo and one shape, two margins")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--only", help="one model: the demo's name or a shape key")
    ap.add_argument(
        "--margins", help="comma-separated margins in MiB (default: 1024,1536,1800,1900,1948)"
    )
    ap.add_argument(
        "--rpc", action="store_true", help="over two RPC workers serving lavapipe (2 GiB each)"
    )
    ap.add_argument(
        "--given-devices",
        action="store_true",
        help="plan with --gpu/--backend/--rpc SIZE instead of the llama-server on PATH",
    )
    args = ap.parse_args(argv)
    AS_USER[0] = not args.given_devices
    device_lab.stop_on_signals()  # SIGTERM too stops the servers and workers started
    if device_lab.bin_dir() is None:
        print(
            "the Vulkan/RPC llama.cpp build is absent (build/llama-vulkan-rpc/bin)", file=sys.stderr
        )
        return 2
    if args.rpc:
        # placeholders for planning; each run gets fresh workers
        RPC[:] = [
            "127.0.0.1:1",
            "127.0.0.1:2",
        ]
    return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    rows: list[Row] = []
    print(
        f"{'model':<20} {'margin':>6} {'budget':>6} | {'llama.cpp --fit: -c  -ngl    KV':<31} "
        f"{'MiB':>7} ok | {'llamafit: -c  -ngl    KV':<25} {'MiB':>7} ok"
    )
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        margins = [int(m) for m in args.margins.split(",")] if args.margins else MARGINS
        for name, path in models(Path(tmp), args.quick):
            if args.only and not name.startswith(args.only):
                continue
            from llamafit import build_facts, read_model

            N_LAYERS[name] = build_facts(read_model(str(path))).n_layer + 1
            for margin in (MARGINS[1], MARGINS[2]) if args.quick else margins:
                rpc = bool(RPC)
                with _workers(rpc):
                    fit_args = fit_params(path, margin)
                with _workers(rpc):
                    fit_side = start(path, fit_args)
                with _workers(
                    rpc and AS_USER[0]
                ):  # as a user: real workers answer for their memory
                    lf_args = llamafit_plan(path, margin)
                with _workers(rpc):
                    lf_side = start(path, lf_args)
                row = Row(name, margin, DEVICE_MIB - margin, fit_side, lf_side)
                rows.append(row)
                print(
                    f"{name:<20} {margin:>6} {row.budget_mib:>6} | {_fmt_side(row, row.fit):>39} | "
                    f"{_fmt_side(row, row.llamafit):>33}",
                    flush=True,
                )
    behind = [r for r in rows if (r.llamafit.n_ctx or 0) < (r.fit.n_ctx or 0) and r.within(r.fit)]
    over = [r for r in rows if r.within(r.llamafit) is False]
    beaten = [r for r in rows if dominated(r)]
    print(
        f"\nllamafit behind llama.cpp's --fit: {len(behind)} of {len(rows)} rows; dominated: "
        f"{len(beaten)}; over budget: {len(over)}"
    )
    if args.json:
        args.json.write_text(
            json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
