"""check, plan, run and script share one assembly (`prepare`): with a calibration file that
corrects the compute buffers, all four plan and check the same -c."""

from __future__ import annotations

import configparser
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES, NEW_HELP, NEW_VERSION, fake_server

QWEN = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")
# a build before the graph replay's first for qwen2 (b7698): the compute buffers are estimated,
# which a calibration record corrects (the replay's exact figures it does not)
MACHINE = ["--gpu", "22GiB", "--llama-build", "7690"]
# One earlier run of build 7690 on one CUDA0: compute reported at 1.5x the prediction.
RECORD = {
    "server": {"build": 7690},
    "hardware": [{"name": "CUDA0", "backend": "cuda"}],
    "compute_scale": 1.0,
    "architecture": "qwen2",
    "buffers": [
        {"device": "CUDA0", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 150.0}
    ],
}


def note(path: Path) -> dict:
    return {
        "code": "calibration",
        "compute_scale": 1.5,
        "runs": 1,
        "architecture": "qwen2",
        "devices": ["CUDA0"],
        "source": str(path),
        "text": f"compute buffers scaled by 1.500: the median of 1 earlier run of qwen2 "
        f"models on CUDA0 ({path})",
    }


def invoke(env: dict[str, str], *args: str) -> dict:
    result = CliRunner(env=env).invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def calibrated(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "calibration.jsonl"
    path.write_text("not json\n" + json.dumps(RECORD) + "\n")
    return {"LLAMAFIT_CALIBRATION": str(path)}


def test_without_calibration_the_plan_differs(tmp_path: Path, calibrated: dict[str, str]) -> None:
    """The record matters: without it the same plan fits 256 more tokens."""
    empty = {"LLAMAFIT_CALIBRATION": str(tmp_path / "none.jsonl")}
    plain = invoke(empty, "plan", QWEN, *MACHINE, "--kv", "q8_0", "--json")
    corrected = invoke(calibrated, "plan", QWEN, *MACHINE, "--kv", "q8_0", "--json")
    assert (plain["config"]["n_ctx"], corrected["config"]["n_ctx"]) == (21760, 21504)
    assert note(tmp_path / "calibration.jsonl") in corrected["warnings"]
    assert not any(w["code"] == "calibration" for w in plain["warnings"])


def test_check_plan_run_and_script_agree_on_the_context(
    tmp_path: Path, calibrated: dict[str, str]
) -> None:
    planned = invoke(calibrated, "plan", QWEN, *MACHINE, "--kv", "q8_0", "--json")
    n_ctx = planned["config"]["n_ctx"]
    assert n_ctx == 21504 and planned["command"][3:5] == ["-c", "21504"]

    # check, given the planned flags, predicts the same buffers (the compute correction included)
    checked = invoke(calibrated, "check", QWEN, *MACHINE, "--json", "--", *planned["command"][3:])
    assert checked["fits"] is True and checked["config"]["n_ctx"] == n_ctx
    assert [d["compute_bytes"] for d in checked["devices"]] == [
        d["compute_bytes"] for d in planned["devices"]
    ]
    assert note(Path(calibrated["LLAMAFIT_CALIBRATION"])) in checked["warnings"]

    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    ran = invoke(
        calibrated,
        "run",
        QWEN,
        *MACHINE,
        "--kv",
        "q8_0",
        "--dry-run",
        "--json",
        "--server",
        str(server),
    )
    assert ran["config"]["n_ctx"] == n_ctx and ran["run_command"][3:5] == ["-c", str(n_ctx)]

    result = CliRunner(env=calibrated).invoke(
        cli, ["script", QWEN, *MACHINE, "--kv", "q8_0", "--format", "models-ini", "--name", "q"]
    )
    assert result.exit_code == 0, result.output
    ini = configparser.ConfigParser()
    ini.read_string(result.stdout)
    assert ini["q"]["ctx-size"] == str(n_ctx)
