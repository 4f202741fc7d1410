"""`llamafit run` without starting a server: --dry-run's whole text and JSON, and its bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.server.find import build_identity
from tests.support import DENSE, NEW_HELP, NEW_VERSION, fake_server


def run(*args: str):
    return CliRunner().invoke(cli, ["run", str(DENSE), *args])


def test_dry_run_prints_the_plan_the_server_and_the_command(tmp_path: Path, fixed_host) -> None:
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = run("--gpu", "8GiB", "--dry-run", "--server", str(server), "--ctx", "4096")
    assert result.exit_code == 0
    assert (
        result.stdout
        == f"""\
Model      {DENSE}
           llama, Q8_0, trained 4,096 tokens
Hardware   CUDA0 (cuda) 8,192 MiB usable; CPU (cpu) 49,152 MiB usable
(MiB)      usable weights      KV     RS compute  output reserve    used    left
CUDA0       8,192       0       2      0       1       0   1,024   1,027   7,165
CPU        49,152       0       0      0       5       0       0       5  49,147
Memory     W weights  K KV  C compute  R reserve  . free
CUDA0      [WKCRRRRRR...................................] 1,027/8,192 MiB
CPU        [WC..........................................] 5/49,152 MiB
Trade-offs (largest context per slot at this offload):
  fa  K     V      -ngl cpu-moe  max context  tokens/s  vs the pick
  on  f16   f16       5       0        4,096    5,566+  the pick
  off f16   f16       5       0        4,096    5,566+  fa off
  on  f16   q8_0      5       0            -         -  no fit
    the same with q8_0/q8_0; f16/q4_0; q8_0/q4_0; q4_0/q4_0
  5,566+: at least 5,566 tokens/s (at a full context), more while it is emptier
Marginal   0.5 MiB per 1,000 tokens per slot; 0.3 MiB per block on the GPU: each
           block moved to the CPU buys about 635 tokens
Speed      generation ~5,566-5,774 tokens/s (full to empty context); prompt
           ~34,122,316 tokens/s (rough)
           likely 4,004-7,069 full, 4,301-7,236 empty tokens/s (±25%, not
             measured here yet); prompt 17,424,162-54,886,109 tokens/s (assumed
             bandwidth)
           one chat turn (read 200 tokens, write 400, after 3,496): 0.06-0.10 s
           CUDA0: 0-2 MiB/token, 384.0 GB/s x 0.79 + 0.2 ms (assumed;
             --bandwidth GB/s gives it)
Verdict    fits 4,096 tokens per slot with all layers on the GPU, f16/f16 KV,
           flash attention on — the trained maximum
Server     llama-server from --server:
           {server}
Command    {server} \\
           -m {DENSE} \\
           -c 4096 -ngl 5 -fa on -ctk f16 -ctv f16 -b 2048 -ub 512 --fit off \\
           --host 127.0.0.1 --port 8080 -lv 4
"""
    )
    as_json = json.loads(
        run("--gpu", "8GiB", "--dry-run", "--server", str(server), "--ctx", "4096", "--json").stdout
    )
    assert as_json["run_command"] == [
        str(server),
        *as_json["command"][1:],
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "-lv",
        "4",
    ]
    assert as_json["server"] == {
        "kind": "llama-server",
        "path": str(server),
        "source": "--server",
        "build": None,
        "version": "version: 0.6.0-dev (build 0, commit unknown)",
        "notes": [],
        "identity": build_identity(str(server), as_json["server"]["version"]),
        "devices": None,  # --gpu: the server is not asked for its devices (#37 F14)
        "why": f"llama-server from --server: {server}",
    }


def test_missing_api_key_file_is_bad_input(tmp_path: Path) -> None:
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = run(
        "--gpu", "cpu", "--dry-run", "--server", str(server), "--api-key-file", "/nonexistent/key"
    )
    error = "Error: --api-key-file /nonexistent/key: No such file or directory\n"
    assert (result.exit_code, result.stderr) == (2, error)


def test_json_needs_dry_run(tmp_path: Path) -> None:
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = run("--gpu", "cpu", "--json", "--server", str(server))
    assert (result.exit_code, result.stdout) == (2, "")
    assert (
        result.stderr
        == "Error: --json needs --dry-run (a running server prints its progress as text)\n"
    )


@pytest.mark.parametrize("mode", [["--dry-run"], ["--port", "18901"]])
def test_run_solves_the_plan_once(
    mode: list[str], tmp_path: Path, fixed_host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dry-run, and a launch (the stand-in server exits at once, so there is no out-of-memory
    retry)."""
    from llamafit.fit import explain

    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return solve(*args, **kwargs)

    solve = explain.solve_exact  # the plan's solve (solver.solve_exact)
    monkeypatch.setattr(explain, "solve_exact", counted)
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = run("--gpu", "8GiB", "--server", str(server), "--ctx", "4096", *mode)
    assert result.exit_code == (0 if mode == ["--dry-run"] else 1), result.output
    assert len(calls) == 1
    asked = (tmp_path / "bin" / "calls.log").read_text().splitlines()
    # the probe's --version and --help (at once: either order), then the launch started the
    # stand-in; with --gpu nothing asks --list-devices (#37 F14)
    assert sorted(asked[:2]) == ["--help", "--version"]
    assert asked[2:] == ([] if mode == ["--dry-run"] else ["-m"])


@pytest.mark.parametrize("mode", [["--dry-run"], ["--port", "18902"]])
@pytest.mark.parametrize("gpu", [[], ["--gpu", "8GiB"]])
def test_run_asks_the_server_for_its_devices_once(
    mode: list[str], gpu: list[str], tmp_path: Path
) -> None:
    """The plan's devices (prepare) and the record's (build_launch) come from one --list-devices;
    with --gpu (the user's devices) neither asks (#37 F14)."""
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = run(*gpu, "--server", str(server), "--ctx", "4096", *mode)
    assert result.exit_code == (0 if mode == ["--dry-run"] else 1), result.output
    calls = (tmp_path / "bin" / "calls.log").read_text().splitlines()
    assert calls.count("--list-devices") == (0 if gpu else 1)


@pytest.mark.parametrize(("gpu", "ctx"), [("cpu", 32768), ("24GiB", 32768), ("cpu", 8192)])
def test_verify_duration_is_the_plans_prompt_batches_and_generation(
    fixed_host, gpu: str, ctx: int
) -> None:
    """--verify's up-front duration: each 512-token batch of the prompt at the plan's prompt rate
    at its fill, then the generation at a full context (the closed form against the sum)."""
    from llamafit.commands.plan import render_plan
    from llamafit.commands.prepare import prepare
    from llamafit.commands.prepared import ModelRef, Request
    from llamafit.commands.run_verify import verify_pace
    from llamafit.fit.solver import Policy
    from llamafit.fit.speed import PP_TOKENS, estimate_at
    from llamafit.machine.pick import MachineSpec
    from tests.support import QWEN

    p = prepare(
        Request(
            ModelRef(str(QWEN), server_args=("-c", str(ctx))),
            MachineSpec(gpu_spec=gpu),
            env=dict(os.environ, LLAMAFIT_CALIBRATION="/nonexistent"),
        )
    )
    choice = render_plan(p, Policy())[1].choice
    assert choice is not None and p.speed is not None
    n_prompt, n_predict = ctx - 16, 16

    def at(fill: int) -> tuple[float, float | None, int]:
        got = estimate_at(
            p.target.model, choice.rc, p.target.gpus, p.speed, fill, choice.breakdown.layer_devices
        )
        assert got is not None and got[1] is not None
        return got

    batches = sum(
        min(PP_TOKENS, n_prompt - start) / at(min(start, n_prompt - PP_TOKENS))[1]  # type: ignore[operator]
        for start in range(0, n_prompt, PP_TOKENS)
    )
    pace = verify_pace(p, choice, n_prompt, n_predict)
    assert pace is not None and pace.expected_s is not None
    expected = batches + n_predict / at(n_prompt - PP_TOKENS)[0]
    assert pace.expected_s == pytest.approx(expected, rel=1e-3)
    assert pace.growth > 0  # later batches are slower


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            [str(DENSE), "--api-key-file", "/dev/zero"],
            "Error: --api-key-file /dev/zero: is not a regular file\n",
        ),
        (["--demo", "--api-key-file", "/dev/zero"], None),
        (["--router", str(DENSE.parent), "--api-key-file", "/dev/zero"], None),
        (
            [str(DENSE), "--json"],
            "Error: --json needs --dry-run (a running server prints its progress as text)\n",
        ),
        (
            [str(DENSE), "--host", "no-such-host.invalid"],
            None,
        ),
    ],
)
def test_a_bad_option_is_refused_before_any_work(
    tmp_path: Path, args: list[str], error: str | None
) -> None:
    """On a new machine (no cache: the host probe would run, the demo be assembled), a bad option
    is the only thing said: no measuring notice, no demo preparation, no plan."""
    env = {
        "LLAMAFIT_CACHE_DIR": str(tmp_path / "new"),
        "LLAMAFIT_HOST_BANDWIDTH": None,
        "LLAMAFIT_HOST_FLOPS": None,
    }
    result = CliRunner(env=env).invoke(cli, ["run", *args, "--gpu", "cpu"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    if error is not None:
        assert result.stderr == error
    assert not (tmp_path / "new").exists()  # nothing measured, assembled or cached
