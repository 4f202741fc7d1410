"""Defects found in review, each pinned by a test (solver bounds, llama.cpp rules, CLI contract)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from click.testing import CliRunner
from conftest import FIXTURES
from test_solver import QWEN, target

from llamafit.cli import cli
from llamafit.config import LaunchConfig, with_given
from llamafit.devices import host
from llamafit.facts import build_facts
from llamafit.gguf_model import read_model
from llamafit.resolve import resolve
from llamafit.solver import Policy, solve

DENSE = str(FIXTURES / "dense-llama.gguf")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_fixed_context_is_padded_like_llama_cpp() -> None:
    assert solve(target(QWEN, "24GiB"), LaunchConfig(), Policy(ctx=20000)).ctx == 20224
    pinned = solve(target(QWEN, "24GiB"), with_given(LaunchConfig(), n_ctx=1000), Policy())
    assert pinned.ctx == 1024


def test_explicit_c_0_with_slots_gets_the_trained_context_per_stream() -> None:
    f = build_facts(read_model(DENSE))
    rc = resolve(with_given(LaunchConfig(), n_ctx=0, n_parallel=2), f)
    assert (rc.n_ctx, rc.n_ctx_seq, rc.n_stream) == (8192, 4096, 2)


def test_host_ram_does_not_hide_a_partial_offload() -> None:
    """12 GiB GPU, 16 GiB host: some -ngl fit the GPU while the host holds the rest (mmap'd)."""
    t = replace(target(QWEN, "12GiB"), host=host(16 << 30, 16 << 30))
    choice = solve(t, LaunchConfig(), Policy(kv="q4_0", ctx=4096))
    assert 0 < choice.rc.n_gpu_layers < 65


def test_a_pinned_combination_llama_cpp_rejects_is_bad_input() -> None:
    result = invoke("plan", str(QWEN), "--gpu", "24GiB", "--", "-ctv", "q8_0", "-fa", "off")
    assert (result.exit_code, result.stderr) == (2, "Error: quantized V cache requires flash_attn to be enabled; add -fa on\n")


def test_cpu_only_plans_emit_ngl_0() -> None:
    d = json.loads(invoke("plan", DENSE, "--gpu", "cpu", "--json").stdout)
    assert d["command"][d["command"].index("-ngl") + 1] == "0"


def test_missing_api_key_file_is_bad_input() -> None:
    result = invoke("run", DENSE, "--gpu", "cpu", "--dry-run", "--api-key-file", "/nonexistent/key")
    assert result.exit_code == 2 and result.stderr.startswith("Error: --api-key-file /nonexistent/key: ")


def test_a_fifo_is_not_a_model(tmp_path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    result = invoke("inspect", str(fifo))
    assert (result.exit_code, result.stderr) == (2, f"Error: {fifo}: cannot open: not a regular file\n")


def test_unmodelled_extra_models_are_flagged() -> None:
    flags = ["--mmproj", "p.gguf", "-dev", "CUDA0"]
    d = json.loads(invoke("check", DENSE, "--gpu", "8GiB", "--json", "--", *flags).stdout)
    assert {"code": "unmodelled_model", "flag": "--mmproj", "what": "mmproj",
            "text": "--mmproj: a multimodal projector is loaded too; its memory is not in this prediction",
            } in d["warnings"]
    assert {"code": "devices_not_modelled", "text": "-dev/--rpc among the llama-server flags are passed on but not "
            "modelled: describe the devices to llamafit with --gpu and --rpc"} in d["warnings"]  # fmt: skip
