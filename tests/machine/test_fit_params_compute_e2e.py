"""Issue #36 item 4 against real starts: llama-fit-params' compute column, llamafit's graph replay
and what llama-server allocates, on lavapipe's Vulkan0 (through scripts/calibration/gpu_check.py
--vulkan, the CUDA check's own code path) and on the CPU alone, with the Vulkan/RPC build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.llama_check import ComputeCheck, fit_params_rc
from llamafit.machine.devices import host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import COMPUTE_GRAPH, MemoryModel
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server import fit_check
from tests.support import ROOT
from tests.support.scripts import script

pytestmark = pytest.mark.slow
MIB = 1 << 20


def test_on_vulkan0_the_replay_is_what_llama_server_allocates_and_llama_fit_params_prints(
    vulkan0: Path, tmp_path: Path
) -> None:
    """gpu_check --vulkan: per case and device, llamafit's compute (the replay) equals the buffer
    llama-server reported to the printed hundredth of a MiB, and llama-fit-params' compute
    column agrees with llamafit's figure for its own graph (its worst-case logits: 258 MiB on the
    host for Llama 3.2 1B at -ub 512, where the server allocates 20)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        LLAMAFIT_VULKAN_RPC_BIN=str(vulkan0),
        LLAMAFIT_CALIBRATION=str(tmp_path / "none.jsonl"),
    )
    out = tmp_path / "vk.jsonl"
    gpu_check = ROOT / "scripts" / "calibration" / "gpu_check.py"
    done = subprocess.run(
        [sys.executable, str(gpu_check), "--vulkan", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loads = [json.loads(line) for line in out.read_text().splitlines()]
    cases = script("gpu_check").VULKAN_CASES
    assert [(r["kind"], r["model"], tuple(r["flags"]), r["ok"]) for r in loads] == [
        ("load", key, flags, True) for key, flags in cases
    ]
    for r in loads:
        assert [c["device"] for c in r["compute"]] == ["Vulkan0", "CPU"]
        for c in r["compute"]:
            assert c["compute_source"] == COMPUTE_GRAPH
            assert c["llamafit_mib"] == c["llama_server_mib"], (r["model"], r["flags"], c)
            assert c["fit_params_agrees"] is True, (r["model"], r["flags"], c)
        assert r["llama_check"]["llama_cpp_check"]["agrees"] is True
    first = {c["device"]: c for c in loads[0]["compute"]}
    assert first["CPU"]["llama_fit_params_mib"] == 258
    assert first["CPU"]["llama_server_mib"] == 20.02
    lines = done.stdout.splitlines()
    assert lines[0] == "compute buffers on Vulkan0: llamafit vs llama-server (MiB)"
    assert len(lines) == 1 + len(cases)


@pytest.mark.parametrize("flags", [("-c", "4096", "-np", "1"), ("-c", "8192", "-np", "4")])
def test_on_the_cpu_alone_llama_fit_params_host_compute_is_the_replay_of_its_graph(
    vk_rpc_bin: Path, shapes_dir: Path, flags: tuple[str, ...]
) -> None:
    """No Vulkan device visible: llama-fit-params prints the Host row only; its compute column is
    llamafit's replay at n_outputs_max = n_batch (fit_params_rc) to print precision, and the
    server's CPU compute buffer is the replay at the server's own n_outputs_max."""
    from scripts.calibration import device_lab

    model = script("make_shapes").write_shape("llama3.2-1b", shapes_dir)
    env = device_lab.vk_env(None)
    env.pop("LLAMA_ARG_N_GPU_LAYERS", None)
    tool = str(vk_rpc_bin / "llama-fit-params")
    rows, failed = fit_check.ask(tool, ["llama-server", "-m", str(model), *flags], env)
    assert failed is None and [r.device for r in rows] == ["Host"]
    n_ctx, n_parallel = int(flags[1]), int(flags[3])
    m = MemoryModel(build_facts(read_model(str(model))))
    rc = resolve(LaunchConfig(n_ctx=n_ctx, n_parallel=n_parallel, kv_unified=False), m.facts)
    cpu = host(64 << 30, 64 << 30)
    at_fit = m.estimate(fit_params_rc(rc), (), cpu).devices[-1]
    check = ComputeCheck("CPU", rows[0].compute_mib, at_fit.compute_bytes, at_fit.compute_source)
    assert check.agrees, check
    with device_lab.serve(model, [*flags, "-kvu" if n_parallel == 1 else "-no-kvu"], env=env) as (
        loaded,
        _,
    ):
        assert loaded.ok, loaded.failure
    reported = sum(loaded.buffers.get("compute", {}).values())
    ours = m.estimate(rc, (), cpu).devices[-1].compute_bytes
    assert round(ours / MIB, 2) == round(reported, 2)
