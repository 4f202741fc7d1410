"""How long `llamafit plan` and `llamafit check` take, in CPU seconds above Python's start-up (issue
#26).

    python scripts/bench/bench_plan.py [--repeat N] [--only TEXT]  # every model, targets met or not
    python scripts/bench/bench_plan.py --guard  # CI's regression guard (exit 1 when over)

Each figure is the user + sys CPU time of a child process (resource.getrusage RUSAGE_CHILDREN), the
best of N runs, minus the best of as many runs, in turn with them (a busy machine slows both alike),
of a baseline child that only imports the modules the commands import (the same interpreter, the
same bytecode cache), so start-up and imports are not counted. Models: the demo Gemma 3 270M,
fixtures/*.gguf, the header-only Qwen2.5-32B, and every header-only shape of the GPU corpus
(scripts/fixtures/make_shape_header.py --all, written to a temp dir), the 94-layer Qwen3-235B-A22B
MoE also on two GPUs and over RPC workers given with their sizes (nothing is started), the demo
and the Llama 3.2 1B shape on Vulkan devices and RPC workers (the graph replay settles the plan's
chosen config there: solver.exact_choice). Targets
(issue #26): plan at most 150 ms and check at most 50 ms above the baseline, on every row.

--guard runs the heaviest rows and checks ratios that hold on a busy machine: the plan's in-child
CPU time at most GUARD_PLAN x the baseline child's own, the check's at most GUARD_CHECK x.

    python scripts/bench/bench_plan.py --llama-check [--repeat N]  # what llama.cpp's dry run adds

--llama-check times `plan --demo` in wall seconds with the Vulkan llama-server on PATH as a user
would have it (build/llama-vulkan-rpc/bin or $LLAMAFIT_VULKAN_RPC_BIN, GGML_VK_VISIBLE_DEVICES=0,
no vulkaninfo), with and without `--no-llama-check`, side by side: before anything is recorded (the
record and llama-fit-params' kept answers removed before each run: the check asks it, learns
Vulkan0's tensor limit and solves again) and once recorded (later plans start from it, and read
its kept answer: no process). Target (issue #28): at most LLAMA_CHECK_TARGET s more.

    python scripts/bench/bench_plan.py --vs-click [--repeat N]  # what a user waits, imports included

--vs-click times `llamafit plan qwen3-235b-a22b-q6_k.gguf --gpu 24GiB,24GiB` (the 94-layer MoE on
two GPUs, run in a folder holding only that file: a plan picks up sibling mmproj files) beside a
bare `python -c "import click"`, in turn, best of N, wall and CPU seconds (the child's and its own
children's: a llama-server probe counts), bytecode compiled first: cold (a fresh cache folder each
run: the llama-server found is probed) and warm (the cache kept), and the plan's own CPU time in
a child that had done its imports. Targets: the plan adds at most VS_CLICK_WALL s of wall time to
the bare import (issue #34, "Done when"); at most COLD_PLAN_CPU s of CPU after imports and
COLD_WALL s of wall time from a cold start, imports included (issue #36, item 5).

    python scripts/bench/bench_plan.py --replays [--only TEXT]  # what each plan replays, and why

--replays counts, per row, the graph replays a plan makes (MemoryModel._compute's calls of
replay.device_compute_bytes / cpu_compute_bytes, each with the config it replays and the
function of the plan that asked for it: exact_choice, _exact_boundary, marginal_costs, ...)
and the graphs those allocate (alloc.Gallocr.reserve_n), and the one-token graphs they need not
allocate (alloc.Gallocr.holds): call counts, the same on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
PLAN_TARGET, CHECK_TARGET = 0.150, 0.050  # seconds above the baseline (issue #26, "Done when")
GUARD_PLAN, GUARD_CHECK = 1.5, 1.0  # --guard: in-child CPU time / the baseline child's own
Q235 = "qwen3-235b-a22b-q6_k"
LLAMA_CHECK_TARGET = 3.0  # seconds of wall time the check may add to `plan` on the demo (issue #28)
# --vs-click targets (issues #34 and #36)
VS_CLICK_WALL, COLD_PLAN_CPU, COLD_WALL = 0.250, 0.150, 0.5
GUARD_ROWS = (
    "demo",
    "qwen2.5-32b-like-q4_k_m",
    f"{Q235} 2 GPUs",
    f"{Q235} RPC",
    "deepseek-r1-671b-pre-mla",
)


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # no host probe: pinned rates
    env.update(
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHONPYCACHEPREFIX=str(tmp / "pyc"),
        LLAMAFIT_CACHE_DIR=str(tmp / "cache"),
        LLAMAFIT_CALIBRATION=str(tmp / "calibration.jsonl"),
        LLAMAFIT_HOST_BANDWIDTH="50e9",
        LLAMAFIT_HOST_FLOPS="200e9",
    )
    return env


def run_quiet(argv: list[str], env: dict[str, str]) -> None:
    """One child run to its end in ROOT (`python -m` puts the working directory first), what it
    prints and its exit status left aside."""
    subprocess.run(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """user + sys of one child run to its end (run_quiet)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_quiet(argv, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "llamafit", *args]


def imported_modules(args: list[str], env: dict[str, str], tmp: Path) -> list[str]:
    """The modules a run of the command has imported when it exits."""
    out = tmp / "modules.txt"
    code = (
        "import atexit, runpy, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        f"sys.argv = ['llamafit', *{args!r}]\n"
        "runpy.run_module('llamafit', run_name='__main__')\n"
    )
    run_quiet([sys.executable, "-c", code], env)
    return [m for m in out.read_text().split() if m not in ("__main__", "__mp_main__")]


def _imports(modules: list[str]) -> str:
    return (
        f"import importlib, os, sys\nfor m in {modules!r}:\n"
        "    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n"
    )


def baseline_argv(modules: list[str]) -> list[str]:
    return [sys.executable, "-c", _imports(modules)]


def timed_argv(modules: list[str], args: list[str], out: Path) -> list[str]:
    """A child that imports the modules, then runs the command and writes the CPU seconds it took
    (resource.getrusage RUSAGE_SELF around it)."""
    code = _imports(modules) + (
        "import resource\nfrom llamafit.cli import main\n"
        f"sys.argv = ['llamafit', *{args!r}]\n"
        "t = resource.getrusage(resource.RUSAGE_SELF)\ntry:\n    main()\nexcept SystemExit:\n    "
        "pass\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        f"open({str(out)!r}, 'w').write(repr(u.ru_utime - t.ru_utime + u.ru_stime - t.ru_stime))\n"
    )
    return [sys.executable, "-c", code]


def timed_cpu(argv: list[str], env: dict[str, str], out: Path) -> float:
    cpu_seconds(argv, env)
    return float(out.read_text())


def rows(shapes: Path) -> list[tuple[str, list[str]]]:
    """(label, the model and device arguments) per row."""
    out: list[tuple[str, list[str]]] = [("demo", ["--demo", "--gpu", "24GiB"])]
    for p in sorted(FIXTURES.glob("*.gguf")):
        if "-0000" not in p.name or "00001-of" in p.name:
            out.append((p.stem, [str(p), "--gpu", "24GiB"]))
    for p in sorted((FIXTURES / "header-only").glob("*.gguf")):
        out.append((p.stem, [str(p), "--gpu", "24GiB"]))
    for p in sorted(shapes.glob("*.gguf")):
        out.append((p.stem, [str(p), "--gpu", "24GiB"]))
    # Vulkan devices and RPC workers: the graph replay settles the chosen config (exact_choice)
    out.append(("demo Vulkan0 lavapipe", ["--demo", "--gpu", "lavapipe"]))
    out.append(("demo 2 Vulkan", ["--demo", "--backend", "vulkan", "--gpu", "8GiB,4GiB"]))
    one_b = str(shapes / "llama3.2-1b.gguf")
    out.append(("llama3.2-1b Vulkan0 lavapipe", [one_b, "--gpu", "lavapipe"]))
    out.append(("llama3.2-1b 2 Vulkan", [one_b, "--backend", "vulkan", "--gpu", "1GiB,1GiB"]))
    rpc = "10.0.0.2:50052=2GiB,10.0.0.3:50052=1GiB"
    out.append(("llama3.2-1b 2 RPC", [one_b, "--gpu", "cpu", "--rpc", rpc]))
    q235 = str(shapes / f"{Q235}.gguf")
    out.append((f"{Q235} 2 GPUs", [q235, "--gpu", "24GiB,24GiB"]))
    out.append(
        (
            f"{Q235} RPC",
            [q235, "--gpu", "24GiB", "--rpc", "10.0.0.2:50052=24GiB,10.0.0.3:50052=16GiB"],
        )
    )
    return out


# a child that runs the plan with the replay entry points and the allocator counted, and writes
# what it counted as JSON (--replays)
_COUNTED = """
import json, sys, traceback
from llamafit.memory import model
from llamafit.memory.graph import alloc
from llamafit.cli import main
ASKERS = ("exact_choice", "_exact_boundary", "marginal_costs", "tradeoffs", "settle_flash_attn")
replays, graphs, skipped = [], [0], [0]
def counted(fn):
    def run(facts, rc, *args):
        names = [f.name for f in traceback.extract_stack()[:-1]]
        asker = next((n for n in reversed(names) if n in ASKERS), names[-2])
        replays.append([rc.n_ctx, rc.n_gpu_layers, rc.n_cpu_moe, rc.type_k.name.lower(),
                        rc.type_v.name.lower(), rc.flash_attn, rc.n_ubatch, asker])
        return fn(facts, rc, *args)
    return run
model.device_compute_bytes = counted(model.device_compute_bytes)
model.cpu_compute_bytes = counted(model.cpu_compute_bytes)
reserve_n = alloc.Gallocr.reserve_n
def reserve_counted(self, graph, *args):
    graphs[0] += 1
    return reserve_n(self, graph, *args)
alloc.Gallocr.reserve_n = reserve_counted
holds = alloc.Gallocr.holds
def holds_counted(self, graph, *args):
    yes = holds(self, graph, *args)
    skipped[0] += yes
    return yes
alloc.Gallocr.holds = holds_counted
sys.argv = ["llamafit", *ARGS]
try:
    main()
except SystemExit:
    pass
open(OUT, "w").write(json.dumps({"replays": replays, "graphs": graphs[0], "skipped": skipped[0]}))
"""


def replays_table(only: str) -> int:
    """Per row: the replays a plan makes (each: context, -ngl, --n-cpu-moe, K/V, FA, -ub, who
    asked) and the graphs they allocate."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        shapes = tmp / "shapes"
        shapes.mkdir()
        script = ROOT / "scripts" / "fixtures" / "make_shape_header.py"
        subprocess.run(
            [sys.executable, str(script), "--all", str(shapes)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        env = _env(tmp)
        out = tmp / "counted.json"
        total = [0, 0, 0]
        print(
            "replays asked per plan (MemoryModel._compute's), the graphs they allocate (a\n"
            "replay that does not cover the devices declines: no graph) and the one-token graphs\n"
            "they need not allocate (alloc.Gallocr.holds)"
        )
        for label, a in rows(shapes):
            if only not in label:
                continue
            args = ["plan", *a, "--ram", "64GiB"]
            code = f"ARGS = {args!r}\nOUT = {str(out)!r}\n" + _COUNTED
            out.unlink(missing_ok=True)  # (a child that failed leaves none: no stale row)
            run_quiet([sys.executable, "-c", code], env)
            counted = json.loads(out.read_text())
            total[0] += len(counted["replays"])
            total[1] += counted["graphs"]
            total[2] += counted["skipped"]
            print(
                f"{label}: {len(counted['replays'])} replays, {counted['graphs']} graphs, "
                f"{counted['skipped']} skipped"
            )
            for ctx, ngl, cpu_moe, k, v, fa, ub, asker in counted["replays"]:
                fa_text = "on" if fa else "off"
                print(
                    f"  -c {ctx:>7} -ngl {ngl:>3} cpu-moe {cpu_moe:>3} {k}/{v} fa {fa_text:<3} "
                    f"-ub {ub:>4}  {asker}"
                )
        print(f"all rows: {total[0]} replays, {total[1]} graphs, {total[2]} skipped")
    return 0


def vulkan_bin() -> Path | None:
    override = os.environ.get("LLAMAFIT_VULKAN_RPC_BIN")
    folder = Path(override) if override else ROOT / "build" / "llama-vulkan-rpc" / "bin"
    return folder if (folder / "llama-server").is_file() else None


def wall_seconds(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed: {done.stderr.strip()[-300:]}")
    return time.perf_counter() - t0


def llama_check_table(repeat: int) -> int:
    """`plan --demo` with and without llama.cpp's check, in wall seconds, side by side."""
    folder = vulkan_bin()
    if folder is None:
        print("no Vulkan llama-server (build/llama-vulkan-rpc, or $LLAMAFIT_VULKAN_RPC_BIN)")
        return 1
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "bin").mkdir()
        (tmp / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
        env = _env(tmp) | {"PATH": f"{folder}{os.pathsep}{tmp / 'bin'}"}
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
        env.pop("LLAMA_SERVER", None)
        record = tmp / "cache" / "llama-check"
        answers = tmp / "cache" / "llama-fit-params"  # llama-fit-params' answers, kept (fit_check)
        wall_seconds(cli(["plan", "--demo"]), env)  # warm: the demo, the server's dialect, identity
        runs: dict[tuple[str, bool], list[float]] = {}
        for _ in range(repeat):  # the four cases in turn: a busy machine slows them alike
            for recorded in (False, True):
                for check in (False, True):
                    if not recorded:
                        shutil.rmtree(record, ignore_errors=True)
                        shutil.rmtree(answers, ignore_errors=True)
                    elif not record.exists():
                        wall_seconds(cli(["plan", "--demo"]), env)  # the check records it
                    flags = [] if check else ["--no-llama-check"]
                    key = ("recorded" if recorded else "none"), check
                    took = wall_seconds(cli(["plan", "--demo", *flags]), env)
                    runs.setdefault(key, []).append(took)
        best = {key: min(v) for key, v in runs.items()}
    print("plan --demo on Vulkan0 (the Vulkan llama-server on PATH, no vulkaninfo): wall s,")
    print(f"best of {repeat}")
    print(f"{'':<30} {'--no-llama-check':>16} {'check':>7} {'more':>7}")
    worst = 0.0
    for key, label in (("none", "nothing recorded yet"), ("recorded", "recorded (later plans)")):
        off, on = best[key, False], best[key, True]
        worst = max(worst, on - off)
        print(f"{label:<30} {off:16.2f} {on:7.2f} {on - off:+7.2f}")
    met = "met" if worst <= LLAMA_CHECK_TARGET else "not met"
    target = f"{LLAMA_CHECK_TARGET:.0f} s"
    print(f"target: the check adds at most {target}: {met} (worst {worst:+.2f} s)")
    return 0


def _wall_cpu(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, user + sys CPU) seconds of one child run to its end, its own children included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed: {done.stderr.strip()[-300:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def vs_click_table(repeat: int) -> int:
    """`plan` of the 94-layer MoE on two GPUs beside a bare `import click`, side by side."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        folder = tmp / "model"  # the model alone: a plan picks up sibling mmproj files
        folder.mkdir()
        model = folder / f"{Q235}.gguf"
        script = ROOT / "scripts" / "fixtures" / "make_shape_header.py"
        subprocess.run(
            [sys.executable, str(script), Q235, str(model)], check=True, stdout=subprocess.DEVNULL
        )
        env = _env(tmp)
        args = ["plan", model.name, "--gpu", "24GiB,24GiB"]
        click_argv = [sys.executable, "-c", "import click"]
        plan_argv = cli(args)
        _wall_cpu(plan_argv, env, folder)  # compiles the bytecode, fills the warm cache
        modules = imported_modules([*args[:1], str(model), *args[2:]], env, tmp)
        out = tmp / "cpu.txt"
        in_child = timed_argv(modules, [*args[:1], str(model), *args[2:]], out)
        runs: dict[str, list[tuple[float, float]]] = {}
        for i in range(repeat):  # in turn: a busy machine slows them alike
            cold = env | {"LLAMAFIT_CACHE_DIR": str(tmp / f"cold-{i}")}
            runs.setdefault("click", []).append(_wall_cpu(click_argv, env, folder))
            runs.setdefault("cold", []).append(_wall_cpu(plan_argv, cold, folder))
            runs.setdefault("warm", []).append(_wall_cpu(plan_argv, env, folder))
            fresh = env | {"LLAMAFIT_CACHE_DIR": str(tmp / f"in-child-{i}")}
            runs.setdefault("in-child", []).append((0.0, timed_cpu(in_child, fresh, out)))
            runs.setdefault("in-child warm", []).append((0.0, timed_cpu(in_child, env, out)))
    best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in runs.items()}
    click_wall, click_cpu = best["click"]
    bare = 'python -c "import click"'
    print(f"`llamafit plan {Q235}.gguf --gpu 24GiB,24GiB` beside `{bare}`:")
    print(f"ms, best of {repeat} in turn ({os.cpu_count()} CPUs)")
    print(f"{'':<36} {'wall':>6} {'CPU':>6} {'+wall':>7} {'+CPU':>7}")
    print(f"{bare:<36} {click_wall * 1e3:6.0f} {click_cpu * 1e3:6.0f}")
    for key, label in (
        ("cold", "plan, cold (a fresh cache)"),
        ("warm", "plan, warm (the cache kept)"),
    ):
        wall, cpu = best[key]
        print(
            f"{label:<36} {wall * 1e3:6.0f} {cpu * 1e3:6.0f} {(wall - click_wall) * 1e3:+7.0f} "
            f"{(cpu - click_cpu) * 1e3:+7.0f}"
        )
    in_cpu = best["in-child"][1]
    for key, label in (("in-child", "cold"), ("in-child warm", "warm")):
        print(f"{f'plan after its imports, {label}':<36} {'':>6} {best[key][1] * 1e3:6.0f}")
    added = best["cold"][0] - click_wall
    for what, figure, target in (
        ("#34: cold plan adds to import click, wall", added, VS_CLICK_WALL),
        ("#36: CPU after imports, cold", in_cpu, COLD_PLAN_CPU),
        ("#36: cold start, wall", best["cold"][0], COLD_WALL),
    ):
        met = "met" if figure <= target else "not met"
        print(f"target {what}: at most {target * 1e3:.0f} ms: {met} ({figure * 1e3:.0f} ms)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure (the best is shown)")
    ap.add_argument("--only", default="", help="rows whose label contains this text")
    ap.add_argument(
        "--guard", action="store_true", help="CI regression guard: ratios on the heaviest rows"
    )
    what = "plan --demo with and without llama.cpp's check"
    ap.add_argument("--llama-check", action="store_true", help=what)
    what = "plan of the 94-layer MoE on two GPUs beside a bare `import click`"
    ap.add_argument("--vs-click", action="store_true", help=what)
    what = "the graph replays each plan makes, and who asked (call counts)"
    ap.add_argument("--replays", action="store_true", help=what)
    args = ap.parse_args()
    if args.replays:
        return replays_table(args.only)
    if args.vs_click:
        return vs_click_table(args.repeat)
    if args.llama_check:
        return llama_check_table(args.repeat)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        shapes = tmp / "shapes"
        shapes.mkdir()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "fixtures" / "make_shape_header.py"),
                "--all",
                str(shapes),
            ],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        env = _env(tmp)
        table = [
            (label, a)
            for label, a in rows(shapes)
            if (label in GUARD_ROWS if args.guard else args.only in label)
        ]
        heavy = [str(shapes / f"{Q235}.gguf"), "--gpu", "24GiB,24GiB", "--ram", "64GiB"]
        # the modules of both commands (finding them also warms the bytecode cache)
        modules = sorted(
            {m for cmd in ("plan", "check") for m in imported_modules([cmd, *heavy], env, tmp)}
        )
        baseline = baseline_argv(modules)
        print(
            f"CPU ms, best of {args.repeat}. plan, check: the child's own CPU time less the "
            "baseline child's (imports only);\nin-child: what the command took in a child that "
            "had done those imports"
        )
        print(
            f"{'model':<34} {'plan':>6} {'check':>6} {'baseline':>9} {'in-child:':>10} "
            f"{'plan':>5} {'check':>6}"
        )
        worst = {"plan": 0.0, "check": 0.0, "plan_in": 0.0, "check_in": 0.0}
        bases = []
        for label, a in table:
            # warm: the demo's first use assembles it
            cpu_seconds(cli(["check", *a, "--ram", "64GiB"]), env)
            runs: dict[str, list[float]] = {
                "base": [],
                "plan": [],
                "check": [],
                "plan_in": [],
                "check_in": [],
            }
            for _ in range(args.repeat):
                runs["base"].append(cpu_seconds(baseline, env))
                for cmd in ("plan", "check"):
                    runs[cmd].append(cpu_seconds(cli([cmd, *a, "--ram", "64GiB"]), env))
                    out = tmp / "cpu.txt"
                    runs[cmd + "_in"].append(
                        timed_cpu(timed_argv(modules, [cmd, *a, "--ram", "64GiB"], out), env, out)
                    )
            base = min(runs["base"])
            bases.append(base)
            figures = {
                k: min(v) - (base if k in ("plan", "check") else 0.0)
                for k, v in runs.items()
                if k != "base"
            }
            for k, v in figures.items():
                worst[k] = max(worst[k], v)
            print(
                f"{label:<34} {figures['plan'] * 1e3:6.0f} {figures['check'] * 1e3:6.0f} "
                f"{base * 1e3:9.0f} {'':>10} {figures['plan_in'] * 1e3:5.0f} "
                f"{figures['check_in'] * 1e3:6.0f}"
            )
        print(
            f"{'worst':<34} {worst['plan'] * 1e3:6.0f} {worst['check'] * 1e3:6.0f} "
            f"{max(bases) * 1e3:9.0f} {'':>10} {worst['plan_in'] * 1e3:5.0f} "
            f"{worst['check_in'] * 1e3:6.0f}"
        )
        if args.guard:
            ok = True
            for cmd, limit in (("plan", GUARD_PLAN), ("check", GUARD_CHECK)):
                ratio = worst[cmd + "_in"] / min(bases)
                met = ratio <= limit
                ok = ok and met
                print(
                    f"guard: {cmd} in-child / baseline = {ratio:.2f} (limit {limit}): "
                    f"{'ok' if met else 'OVER'}"
                )
            return 0 if ok else 1
        for cmd, target in (("plan", PLAN_TARGET), ("check", CHECK_TARGET)):
            for how, figure in (
                ("above the baseline", worst[cmd]),
                ("in-child", worst[cmd + "_in"]),
            ):
                print(
                    f"target: {cmd} at most {target * 1e3:.0f} ms above start-up and imports on "
                    f"every row, {how}: {'met' if figure <= target else 'not met'} (worst "
                    f"{figure * 1e3:.0f} ms)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
