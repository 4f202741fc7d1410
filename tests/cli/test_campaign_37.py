"""The third hostile-input and fault campaign (issue #37, "Findings"): each finding's test failed
before its fix. The misbehaving llama.cpp programs are stand-ins written here (shell scripts):
they stand for a broken build, a hung GPU driver or a planted binary, never for llama.cpp's
behaviour. Deadlines are cut to a fraction of a second so that nothing waits long."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.machine import bounded, server_devices
from llamafit.server import find, fit_check
from tests.support import DENSE, FIXTURES, HOST, NEW_HELP, NEW_VERSION, fake_server
from tests.support.scripts import script

fuzz = script("fuzz")
drop, patch = script("gguf_patch").drop, script("gguf_patch").patch

DEADLINE_S = 1.0
GOOD = {
    "--version": f"printf %s {NEW_VERSION!r} >&2",
    "--help": 'cat "$(dirname "$0")/help.txt"',
    "--list-devices": "printf 'Available devices:\\n  (none)\\n'",
}
FIT_HELP = """\
-m,    --model FNAME                    model path to load
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of parallel sequences to decode (default: 1)
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM
-fa,   --flash-attn [on|off|auto]       set Flash Attention use
-ctk,  --cache-type-k TYPE              KV cache data type for K
-ctv,  --cache-type-v TYPE              KV cache data type for V
-b,    --batch-size N                   logical maximum batch size (default: 2048)
-ub,   --ubatch-size N                  physical maximum batch size (default: 512)
-fit,  --fit [on|off]                   whether to adjust unset arguments to fit in device memory
-fitp, --fit-print [on|off]             print the estimated required memory
"""
# what each misbehaviour does in place of an answer
FOREVER = "exec yes 'Available devices:'"  # prints without end
HANG = 'sleep 300 & echo $! >> "$(dirname "$0")/pids"; sleep 300'  # and leaves a child behind
ENDLESS_LINE = "exec tr '\\000' x < /dev/zero"  # one line that never ends
DIGITS = "9" * 5000


def _script(path: Path, answers: dict[str, str]) -> Path:
    cases = "".join(f"  {flag}) {body} ;;\n" for flag, body in answers.items())
    path.write_text(
        f'#!/bin/sh\necho $$ >> "$(dirname "$0")/pids"\ncase "$1" in\n{cases}'
        '  *) eval "$FAKE_FITP" ;;\nesac\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_build(where: Path, answers: dict[str, str], fitp: str = "") -> dict[str, str]:
    """A llama-server on PATH whose answers are GOOD but where `answers` (`{"--version": shell}`)
    replace them, and with `fitp` a llama-fit-params beside it that answers `-fitp on` with that
    shell; the environment that finds them (the caller cuts the deadlines short)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "help.txt").write_text(NEW_HELP)
    _script(where / "llama-server", {**GOOD, **answers})
    if fitp:
        (where / "fit-help.txt").write_text(FIT_HELP)
        _script(where / "llama-fit-params", {"--help": 'cat "$(dirname "$0")/fit-help.txt"'})
    return {
        "PATH": f"{where}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKE_FITP": fitp,
        "LLAMAFIT_CALIBRATION": str(where / "none.jsonl"),
    }


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _left_running(where: Path) -> list[int]:
    """The stand-ins' processes still alive; a SIGKILL is delivered asynchronously, so a process
    killed a moment ago gets a few seconds to go (one that was never killed stays 300 s)."""
    import time

    pids = (
        [int(p) for p in (where / "pids").read_text().split()] if (where / "pids").exists() else []
    )
    for _ in range(200):
        alive = [p for p in pids if _alive(p)]
        if not alive:
            break
        time.sleep(0.02)
    return alive


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every question to a llama.cpp program gets DEADLINE_S."""
    for module, name in (
        (find, "VERSION_TIMEOUT_S"),
        (find, "HELP_TIMEOUT_S"),
        (server_devices, "LIST_TIMEOUT_S"),
        (fit_check, "FIT_TIMEOUT_S"),
        (fit_check, "HELP_TIMEOUT_S"),
    ):
        monkeypatch.setattr(module, name, DEADLINE_S)


def _invoke(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env)
    return result.exit_code, result.stdout, result.stderr


# ---- F4: every run of a llama.cpp program is bounded in one place -------------------------------


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("exec yes", "prog printed more than 1 MiB"),
        (ENDLESS_LINE, "prog printed more than 1 MiB"),
        (HANG, f"prog gave no answer within {DEADLINE_S:g} s"),
        ("exec sleep 300 >/dev/null 2>&1", f"prog gave no answer within {DEADLINE_S:g} s"),
    ],
    ids=["forever", "endless-line", "hang-with-child", "hang-silent"],
)
def test_f4_a_misbehaving_program_costs_a_deadline_and_a_cap(
    tmp_path: Path, body: str, failure: str
) -> None:
    prog = tmp_path / "prog"
    prog.write_text(f'#!/bin/sh\necho $$ >> "$(dirname "$0")/pids"\n{body}\n')
    prog.chmod(0o755)
    answer = bounded.ask_tool([str(prog)], {"PATH": "/usr/bin:/bin"}, DEADLINE_S, 1 << 20)
    assert (answer.failure, answer.returncode) == (failure, None)
    assert len(answer.stdout) <= (1 << 20) + 2 * (1 << 16)  # the cap, and one read beyond it
    assert _left_running(tmp_path) == []  # its whole process group went with it


def test_f4_escapes_and_invalid_utf8_are_text_for_a_terminal(tmp_path: Path) -> None:
    prog = tmp_path / "prog"
    prog.write_text("#!/bin/sh\nprintf 'a\\033[2J<script>\\377\\r\\nb\\tc\\n'\n")
    prog.chmod(0o755)
    answer = bounded.ask_tool([str(prog)], {}, DEADLINE_S)
    assert answer == bounded.ToolAnswer("a\\x1b[2J<script>\ufffd\nb\tc\n", "", 0, None)


def test_f4_vulkaninfo_through_the_bounded_run_reads_as_its_text() -> None:
    """Its tab-indented report (the tab and the newline are the two controls kept)."""
    from llamafit.machine.vulkan import parse_vulkaninfo
    from tests.support import DATA

    report = DATA / "vulkaninfo" / "lavapipe-llvm15.txt"
    answer = bounded.ask_tool(["cat", str(report)], {"PATH": "/usr/bin:/bin"}, 10.0)
    assert answer.failure is None
    assert parse_vulkaninfo(answer.stdout) == parse_vulkaninfo(report.read_text())
    assert parse_vulkaninfo(answer.stdout)[0].max_storage_buffer_range == 134217728


@pytest.mark.parametrize(
    ("digits", "limit", "expected"),
    [
        ("24080", 1 << 26, 24080),
        (DIGITS, 1 << 26, None),
        ("67108865", 1 << 26, None),
        ("", 9, None),
    ],
)
def test_f4_numbers_from_a_program_are_parsed_with_bounds(
    digits: str, limit: int, expected: int | None
) -> None:
    assert bounded.bounded_int(digits, limit) == expected


@pytest.mark.parametrize(
    ("question", "body", "why"),
    [
        ("version", HANG, f"llama-server --version gave no answer within {DEADLINE_S:g} s"),
        ("version", FOREVER, "llama-server --version printed more than 4 MiB"),
        ("help", HANG, f"llama-server --help gave no answer within {DEADLINE_S:g} s"),
        ("help", ENDLESS_LINE, "llama-server --help printed more than 4 MiB"),
    ],
)
def test_f4_a_server_that_hangs_or_floods_its_probe_is_passed_over_with_a_note(
    tmp_path: Path, short: None, question: str, body: str, why: str
) -> None:
    env = fake_build(tmp_path / "bin", {f"--{question}": body})
    code, out, err = _invoke(["plan", str(DENSE), "--ram", "8GiB", "--gpu", "cpu"], env)
    assert code == 0, err
    which = str(tmp_path / "bin" / "llama-server")
    assert (
        f"Warning    PATH {which} does not answer like llama-server: {why}; planned without it"
        in out.replace("\n           ", " ")
    )
    assert _left_running(tmp_path / "bin") == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (HANG, f"llama-server --list-devices gave no answer within {DEADLINE_S:g} s"),
        (FOREVER, "llama-server --list-devices printed more than 4 MiB"),
        (ENDLESS_LINE, "llama-server --list-devices printed more than 4 MiB"),
        (
            f"printf 'Available devices:\\n  CUDA0: X ({DIGITS} MiB, 1 MiB free)\\n'",
            "llama-server --list-devices reports a device of more than 67,108,864 MiB: not "
            "believed",
        ),
        (
            "printf 'Available devices:\\n  CUDA0: X (99999999999 MiB, 1 MiB free)\\n'",
            "llama-server --list-devices reports a device of more than 67,108,864 MiB: not "
            "believed",
        ),
    ],
    ids=["hang", "forever", "endless-line", "5000-digits", "absurd-size"],
)
def test_f4_endless_list_devices_is_bounded(
    tmp_path: Path, short: None, body: str, why: str
) -> None:
    env = fake_build(tmp_path / "bin", {"--list-devices": body})
    code, out, err = _invoke(["plan", str(DENSE), "--ram", "8GiB", "--json"], env)
    assert code == 0, err
    warnings = [w for w in json.loads(out)["warnings"] if w["code"] == "server_unanswered"]
    assert warnings == [
        {
            "code": "server_unanswered",
            "message": f"{why}; planned with detection's devices",
            "text": f"{why}; planned with detection's devices",
        }
    ]
    code, out, err = _invoke(["gpus"], env)
    assert code == 0, err
    assert f"note: {why}; plans use detection's devices" in " ".join(
        line.strip() for line in out.splitlines()
    )
    assert _left_running(tmp_path / "bin") == []


def test_f4_escapes_from_list_devices_reach_no_terminal(tmp_path: Path, short: None) -> None:
    env = fake_build(
        tmp_path / "bin",
        {
            "--list-devices": "printf 'Available devices:\\n  CUDA0: \\033]0;pwned\\007<script> "
            "(16 MiB, 16 MiB free)\\n'"
        },
    )
    code, out, err = _invoke(["gpus"], env)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "CUDA0   \\x1b]0;pwned\\x07<script>" in out


@pytest.mark.parametrize(
    ("fitp", "why"),
    [
        (HANG, f"llama-fit-params gave no answer within {DEADLINE_S:g} s"),
        (FOREVER, "llama-fit-params printed more than 4 MiB"),
        (ENDLESS_LINE, "llama-fit-params printed more than 4 MiB"),
        (
            f"echo 'CUDA0 {DIGITS} 1 1'; echo 'Host 0 0 1'",
            "llama-fit-params reports a figure of more than 67,108,864 MiB: not believed",
        ),
        (
            "head -c 100000 /dev/zero | tr '\\000' x; echo ' 1 1 1'; echo 'Host 0 0 1'",
            "llama-fit-params reports a device name of more than 300 characters: not believed",
        ),
    ],
    ids=["hang", "forever", "endless-line", "5000-digits", "long-name"],
)
def test_f4_a_misbehaving_llama_fit_params_leaves_the_plan_as_it_was(
    tmp_path: Path, short: None, fitp: str, why: str
) -> None:
    env = fake_build(
        tmp_path / "bin",
        {"--list-devices": "printf 'Available devices:\\n  CUDA0: GPU (16 MiB, 16 MiB free)\\n'"},
        fitp=fitp,
    )
    code, out, err = _invoke(["plan", str(DENSE), "--reserve", "0", "--ram", "8GiB", "--json"], env)
    assert code == 0, err
    check = json.loads(out)["llama_cpp_check"]
    assert _left_running(tmp_path / "bin") == []
    assert check["skipped"] == why


# ---- F14: numbers and text from the tools, and `run --gpu` asks no device list -----------------


def test_f14_run_with_gpu_does_not_ask_list_devices(tmp_path: Path, fixed_host: object) -> None:
    server = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    result = CliRunner().invoke(
        cli, ["run", str(DENSE), "--gpu", "8GiB", "--dry-run", "--server", str(server)]
    )
    assert result.exit_code == 0, result.output
    # --version and --help run at once (bounded.ask_tools): in either order
    assert sorted((tmp_path / "bin" / "calls.log").read_text().split()) == ["--help", "--version"]


@pytest.mark.parametrize(
    "text",
    [
        f"Available devices:\n  Vulkan0: X ({DIGITS} MiB, 1 MiB free)\n",
        f"Available devices:\n  Vulkan{DIGITS}: X (1 MiB, 1 MiB free)\n",
    ],
    ids=["size", "index"],
)
def test_f14_a_list_with_absurd_digits_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="^a device"):
        server_devices.parse_list_devices(text)


def test_f14_an_rpc_device_without_an_endpoint_is_read() -> None:
    listed = server_devices.parse_list_devices(
        "Available devices:\n  RPC0:  (2048 MiB, 2000 MiB free)\n"
    )
    assert [d.name for d in listed or ()] == ["RPC0[?]"]


class _NVMLError(Exception):
    pass


class OddNVML:
    """A pynvml whose one GPU answers `name` and `memory` (total, free, used) as given."""

    NVMLError = _NVMLError
    NVML_CLOCK_MEM = 2

    def __init__(self, name: object, memory: tuple[object, object, object]) -> None:
        self.name, self.memory = name, memory

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> object:
        return self.name

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-1"

    def nvmlDeviceGetPciInfo(self, h: int) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(busId=b"00000000:01:00.0")

    def nvmlDeviceGetMemoryInfo(self, h: int) -> object:
        from types import SimpleNamespace

        total, free, used = self.memory
        return SimpleNamespace(total=total, free=free, used=used)

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        raise _NVMLError("Not Supported")

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return 0


@pytest.mark.parametrize(
    ("memory", "note"),
    [
        ((-1, 0, 0), "nvml: a memory figure of -1, not believed"),
        ((None, 0, 0), "nvml: a memory figure of None, not believed"),
        ((10**5000, 0, 0), "nvml: a memory figure of 2^16609, not believed"),
        ((1 << 30, 1.5, 0), "nvml: a memory figure of 1.5, not believed"),
    ],
    ids=["negative", "none", "huge", "float"],
)
def test_f14_odd_nvml_values_are_a_note_not_a_traceback(
    tmp_path: Path, memory: tuple[object, object, object], note: str
) -> None:
    from llamafit.machine.hardware import detect

    hw = detect(
        {},
        nvml=OddNVML(b"GPU", memory),
        sysfs_root=tmp_path,
        sysctl=lambda name: None,
        host_fn=lambda: HOST,
    )
    assert (hw.gpus, hw.notes[0]) == ((), note)


def test_f14_an_nvml_name_of_invalid_utf8_and_escapes_is_text(tmp_path: Path) -> None:
    from llamafit.machine.hardware import detect

    hw = detect(
        {},
        nvml=OddNVML(b"RTX\xff\x1b[2J", (1 << 30, 1 << 29, 1 << 29)),
        sysfs_root=tmp_path,
        sysctl=lambda name: None,
        host_fn=lambda: HOST,
    )
    assert [g.name for g in hw.gpus] == ["RTX\ufffd\\x1b[2J"]


# ---- F1: the replay's inputs are validated with the facts, and the replay is fuzzed ------------


def _header_of(name: str) -> bytes:
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    data = (FIXTURES / name).read_bytes()
    return data[: read_header(BytesSource(data)).data_offset]


@pytest.mark.parametrize(
    ("fixture", "key", "value", "why"),
    [
        (
            "recurrent-mamba2.gguf",
            "mamba2.ssm.time_step_rank",
            0,
            "key mamba2.ssm.time_step_rank = 0 must be at least 1; mamba2's recurrent layers "
            "need it",
        ),
        (
            "recurrent-mamba2.gguf",
            "mamba2.ssm.time_step_rank",
            None,
            "key mamba2.ssm.time_step_rank is missing; mamba2's recurrent layers need it",
        ),
        (
            "recurrent-mamba2.gguf",
            "mamba2.ssm.time_step_rank",
            3,
            "key mamba2.ssm.time_step_rank = 3 does not divide mamba2.ssm.inner_size = 128; "
            "mamba2's recurrent layers need it to",
        ),
        (
            "hybrid-granite.gguf",
            "granitehybrid.ssm.time_step_rank",
            0,
            "key granitehybrid.ssm.time_step_rank = 0 must be at least 1; granitehybrid's "
            "recurrent layers need it",
        ),
        (
            "hybrid-granite.gguf",
            "granitehybrid.ssm.group_count",
            0,
            "key granitehybrid.ssm.group_count = 0 must be at least 1; granitehybrid's "
            "recurrent layers need it",
        ),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan"])
def test_f1_a_recurrent_size_the_replay_divides_by_is_one_line(
    tmp_path: Path, command: str, fixture: str, key: str, value: int | None, why: str
) -> None:
    header = _header_of(fixture)
    path = tmp_path / "m.gguf"
    path.write_bytes(drop(header, key) if value is None else patch(header, key, 4, value))
    code, out, err = _invoke([command, str(path), "--gpu", "8GiB"], {})
    assert (code, out, err) == (2, "", f"Error: {path}: {why}\n")


def test_f1_the_fuzz_seeds_every_architecture_the_replay_builds(tmp_path: Path) -> None:
    from llamafit.memory.graph.models import MODELS as FAMILIES

    assert set(fuzz.REPLAY_FIXTURES) | set(fuzz.REPLAY_SHAPES) >= set(FAMILIES)


def test_f1_the_fuzzed_replay_meets_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    tally, _ = fuzz.run(0, seed=37, only="replay")
    assert tally.cases["replay"] >= 2 * len(fuzz.REPLAY_FIXTURES)
    assert (tally.tracebacks, tally.bad_exits, tally.multi_line) == ([], [], [])


# ---- F5: `plan --html FILE` is written like every other llamafit file -------------------------

QWEN = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"


def _html(target: Path | str) -> tuple[int, str, str]:
    return _invoke(["plan", str(QWEN), "--gpu", "24GiB", "--html", str(target)], {})


def test_f5_the_page_never_replaces_the_model_file(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(QWEN.read_bytes())
    result = CliRunner().invoke(cli, ["plan", str(model), "--gpu", "24GiB", "--html", str(model)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: --html {model}: is an input of this command ({model})\n"
    assert model.read_bytes() == QWEN.read_bytes()


def test_f5_the_page_never_replaces_another_gguf(tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(DENSE.read_bytes())
    code, out, err = _html(other)
    assert (code, err) == (
        2,
        f"Error: --html {other}: is a GGUF file, which llamafit never replaces\n",
    )
    assert other.read_bytes() == DENSE.read_bytes()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_f5_the_page_never_replaces_a_fifo_or_a_special_file(tmp_path: Path, kind: str) -> None:
    """A FIFO and a socket stand for every file that is not a regular one (a device node: before
    the fix, a run as root replaced /dev/null; no test writes near a real device)."""
    import socket

    target = tmp_path / "plan.html"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    code, out, err = _html(target)
    assert (code, out, err) == (2, "", f"Error: --html {target}: is not a regular file\n")
    assert not stat.S_ISREG(os.lstat(target).st_mode)


def test_f5_the_page_follows_a_symlinked_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "docs").symlink_to(tmp_path / "real")
    code, out, err = _html(tmp_path / "docs" / "plan.html")
    assert code == 0, err
    assert (tmp_path / "real" / "plan.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["plan.html"]  # no temp left


def test_f5_the_page_creates_no_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "plan.html"
    code, out, err = _html(target)
    assert (code, out, err) == (
        2,
        "",
        f"Error: --html {target}: no such directory {target.parent}\n",
    )
    assert not (tmp_path / "no").exists()


def test_f5_an_existing_page_is_replaced_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "plan.html"
    target.write_text("old")
    target.chmod(0o640)
    code, out, err = _html(target)
    assert code == 0, err
    assert (target.read_text()[:15], stat.S_IMODE(target.stat().st_mode)) == (
        "<!DOCTYPE html>",
        0o640,
    )


# ---- F2: every --json output is strict JSON ----------------------------------------------------


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("command", ["inspect", "plan", "check"])
def test_f2_a_non_finite_number_is_null_with_a_warning(
    tmp_path: Path, value: float, command: str
) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(
        patch(_header_of("mla-deepseek2.gguf"), "deepseek2.expert_weights_scale", 6, value)
    )
    args = [command, str(path), "--json"] + ([] if command == "inspect" else ["--gpu", "8GiB"])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    data = _strict(result.stdout)
    if command == "inspect":
        assert isinstance(data, dict) and data["expert_weights_scale"] is None
        assert result.stderr == (
            f"Warning: expert_weights_scale = {value} is not a JSON number: written as null\n"
        )


def test_f2_strict_json_names_each_value_it_writes_as_null() -> None:
    from llamafit.report.json_parts import strict_json

    text, notes = strict_json({"a": [1.5, float("nan")], "b": {"c": float("inf")}})
    assert (_strict(text), notes) == (
        {"a": [1.5, None], "b": {"c": None}},
        [
            "a[1] = nan is not a JSON number: written as null",
            "b.c = inf is not a JSON number: written as null",
        ],
    )


# ---- F3: control characters in every message that quotes file contents ------------------------


@pytest.mark.parametrize(
    ("key", "vtype", "value", "quoted"),
    [
        (
            "general.architecture",
            8,
            "lla\r\nma\x1b[2J",
            "key not found in model: lla\\r\\nma\\x1b[2J.block_count",
        ),
        (
            "llama.context_length",
            8,
            "x\r\ny",
            "key llama.context_length has type str, expected int",
        ),
    ],
)
def test_f3_an_error_at_read_is_one_line_with_its_controls_escaped(
    tmp_path: Path, key: str, vtype: int, value: str, quoted: str
) -> None:
    from llamafit.errors import LlamafitError
    from llamafit.facts.hparams import build_facts
    from llamafit.reader.model import read_model

    path = tmp_path / "m.gguf"
    path.write_bytes(patch(_header_of("dense-llama.gguf"), key, vtype, value))
    with pytest.raises(LlamafitError) as e:
        build_facts(read_model(str(path)))
    assert str(e.value) == f"{path}: {quoted}"  # one line, for a caller of the API too
    code, out, err = _invoke(["check", str(path)], {})
    assert (code, out, err) == (2, "", f"Error: {path}: {quoted}\n")


def test_f3_a_hostile_key_name_is_escaped_in_the_message(tmp_path: Path) -> None:
    import struct

    from llamafit.errors import LlamafitError
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    name = b"evil\r\nError: \x1b[2J"
    entry = struct.pack("<Q", len(name)) + name + struct.pack("<II", 4, 1)  # a u32 key
    header = _header_of("dense-llama.gguf")
    n_kv = struct.unpack_from("<Q", header, 16)[0]
    twice = header[:16] + struct.pack("<Q", n_kv + 2) + entry + entry + header[24:]
    with pytest.raises(LlamafitError) as e:
        read_header(BytesSource(twice, "m.gguf"))
    assert "evil\\r\\nError: \\x1b[2J" in str(e.value)
    assert not {"\r", "\n", "\x1b"} & set(str(e.value))


# ---- F6: `--for` values that are no preset are one line ----------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (
            "serve:" + DIGITS,
            f"--for serve:{'9' * 34}…: only serve takes a number of users, 1-256 (serve:8)",
        ),
        ("serve:²", "--for serve:²: only serve takes a number of users, 1-256 (serve:8)"),
        ("serve:٣", "--for serve:٣: only serve takes a number of users, 1-256 (serve:8)"),
        ("", "--for '': one of chat, agent, long, serve (serve:N for N concurrent users)"),
    ],
    ids=["5000-digits", "superscript", "arabic-indic", "empty"],
)
@pytest.mark.parametrize("command", ["plan", "run"])
def test_f6_for_values_that_are_no_preset_are_one_line(
    command: str, value: str, error: str
) -> None:
    args = [command, str(DENSE), "--gpu", "8GiB", "--for", value]
    code, out, err = _invoke(args + (["--dry-run"] if command == "run" else []), {})
    assert (code, out, err) == (2, "", f"Error: {error}\n")


# ---- F7, F13, F8: calibration show and clear on hostile and large files ------------------------

MEMORY_RECORD = {
    "time": "2026-01-01T00:00:00Z",
    "llamafit": "0.1",
    "server": {"build": None},
    "architecture": "llama",
    "hardware": [{"name": "CUDA0", "backend": "cuda"}],
    "compute_scale": 1.0,
    "buffers": [
        {"device": "CUDA0", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 110.0}
    ],
}


def _record(**changes: object) -> str:
    record = json.loads(json.dumps(MEMORY_RECORD))
    record.update({k: v for k, v in changes.items() if k != "buffer"})
    record["buffers"][0].update(changes.get("buffer", {}))
    return json.dumps(record)


@pytest.mark.parametrize(
    "line",
    [
        _record(compute_scale=1e10, buffer={"predicted_mib": 1e-320}),  # underflows to 0
        _record(buffer={"predicted_mib": 0.0, "actual_mib": 0.0}),
        _record(buffer={"predicted_mib": -5.0}),
        _record(buffer={"predicted_mib": 1e308, "actual_mib": 1e308}),
        _record().replace("110.0", "1" + "0" * 400),
        _record().replace('"compute_scale": 1.0', '"compute_scale": ' + "9" * 400),
    ],
    ids=["underflow", "zero", "negative", "huge", "400-digit-size", "400-digit-scale"],
)
@pytest.mark.parametrize(
    "args",
    [
        ["calibration", "show"],
        ["calibration", "show", "--json"],
        ["plan", str(DENSE), "--gpu", "8GiB"],
    ],
    ids=["show", "show-json", "plan"],
)
def test_f7_calibration_show_survives_zero_negative_and_huge_buffers(
    tmp_path: Path, line: str, args: list[str]
) -> None:
    path = tmp_path / "calibration.jsonl"
    path.write_text(line + "\n")
    code, out, err = _invoke(args, {"LLAMAFIT_CALIBRATION": str(path)})
    assert code == 0, err
    if "--json" in args:
        _strict(out)


def test_f13_a_calibration_file_over_16_mib_is_shown_and_cleared(tmp_path: Path) -> None:
    path = tmp_path / "calibration.jsonl"
    line = _record() + "\n"
    count = (17 << 20) // len(line) + 1
    path.write_text(line * count)
    env = {"LLAMAFIT_CALIBRATION": str(path)}
    code, out, err = _invoke(["calibration", "show", "--json"], env)
    assert code == 0, err
    data = _strict(out)
    assert isinstance(data, dict)
    newest = (16 << 20) // len(line)
    assert (data["setups"][0]["runs"], data["older_bytes_not_read"]) == (
        newest,
        path.stat().st_size - newest * len(line),
    )
    code, out, err = _invoke(["calibration", "show"], env)
    assert out.splitlines()[-1] == (
        f"The oldest {path.stat().st_size - newest * len(line):,} bytes of records are not read "
        "(only the newest 16 MiB are)"
    )
    assert _invoke(["calibration", "clear"], env) == (0, f"Cleared {path}\n", "")
    assert not path.exists()


def test_f13_a_large_file_clears_one_kind_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "calibration.jsonl"
    speed = json.dumps({"kind": "serve", "time": "t", "llamafit": "0.1", "speed": {}})
    line = _record() + "\n"
    path.write_text(line * ((17 << 20) // len(line)) + speed + "\n")
    code, out, err = _invoke(
        ["calibration", "clear", "--kind", "memory"], {"LLAMAFIT_CALIBRATION": str(path)}
    )
    assert (code, err) == (0, "")
    assert path.read_text() == speed + "\n"


def test_f8_names_in_calibration_records_are_escaped(tmp_path: Path) -> None:
    path = tmp_path / "calibration.jsonl"
    path.write_text(
        _record(
            architecture="llama\x1b]0;pwned\x07",
            hardware=[{"name": "CUDA0\x1b[2J", "backend": "cuda"}],
        ).replace('"device": "CUDA0"', '"device": "CUDA0\\u001b[2J"')
        + "\n"
    )
    code, out, err = _invoke(["calibration", "show"], {"LLAMAFIT_CALIBRATION": str(path)})
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "CUDA0\\x1b[2J" in out


def test_f8_device_names_from_the_server_are_escaped_in_plan_gpus_and_the_page(
    tmp_path: Path, short: None
) -> None:
    listed = "printf 'Available devices:\\n  CUDA0[\\033c<script>]: GPU\\033[2J (16 MiB, 16 MiB free)\\n'"
    env = fake_build(tmp_path / "bin", {"--list-devices": listed})
    page = tmp_path / "plan.html"
    outputs = [
        _invoke(["plan", str(DENSE), "--ram", "8GiB", "--reserve", "0", "--html", str(page)], env),
        _invoke(["gpus"], env),
    ]
    for code, out, err in outputs:
        assert code in (0, 1), err
        assert "\x1b" not in out + err
    assert "CUDA0[\\x1bc<script>]" in outputs[0][1]
    assert "CUDA0[\\x1bc<script>]" in outputs[1][1]
    text = page.read_text()
    assert "\x1b" not in text and "<script>" not in text
    assert "CUDA0[\\x1bc&lt;script&gt;]" in text


# ---- F9: a hub ref is a commit hash, never a path out of the cache -----------------------------


@pytest.mark.parametrize("ref", ["/", "../../../..", "../../../../../etc", "snapshots/../.."])
def test_f9_a_hub_ref_that_is_no_commit_hash_is_ignored_with_a_note(
    tmp_path: Path, ref: str
) -> None:
    from llamafit.fetch.store_scan import scan_hub
    from tests.support.store_layouts import hf_repo

    top = hf_repo(tmp_path / "hub", "org/repo", {"m.gguf": FIXTURES / "dense-llama.gguf"})
    (top / "refs" / "main").write_text(ref)
    outside = tmp_path / "outside.gguf"  # what a walk out of the cache would find
    outside.write_bytes(DENSE.read_bytes())
    found, notes = scan_hub(str(tmp_path / "hub"))  # the newest snapshot instead
    assert [f.path for f in found] == [str(next((top / "snapshots").iterdir()) / "m.gguf")]
    assert [(n.code, n.path) for n in notes] == [("bad-ref", str(top / "refs" / "main"))]


# ---- F12: `ls` is linear in the files of a folder ----------------------------------------------


def _folder(rng: object, n: int) -> list[str]:
    import random

    assert isinstance(rng, random.Random)
    dirs = ["", "a", "a/b", "c"]
    tags = ["Q4_K_M", "Q8_0", "F16", "BF16", "Q2_K", "IQ4_XS", ""]
    out = []
    for i in range(n):
        d = rng.choice(dirs)
        tag = rng.choice(tags)
        stem = (
            ("mmproj-" if rng.random() < 0.4 else "model-")
            + f"x{i % 7}"
            + (f"-{tag}" if tag else "")
        )
        out.append(f"{d}/{stem}.gguf".lstrip("/"))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_f12_the_indexed_sibling_is_find_best_sibling_s(seed: int) -> None:
    import random

    from llamafit.fetch import stores

    files = _folder(random.Random(seed), 60)
    siblings = stores._Siblings(files)
    for f in files:
        assert siblings.best(f) == stores.best_sibling(files, f), f


def test_f12_grouping_a_folder_reads_each_name_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linear, counted rather than timed: quant_bits once or twice per file, whatever the count
    (it was once per model and projector pair: 20,000 files took 33 s)."""
    from llamafit.fetch import stores

    calls = [0]
    real = stores.quant_bits

    def counted(path: str) -> int:
        calls[0] += 1
        return real(path)

    monkeypatch.setattr(stores, "quant_bits", counted)
    files = [f"model-{i}-Q4_K_M.gguf" for i in range(1000)] + [
        f"mmproj-{i}-F16.gguf" for i in range(1000)
    ]
    groups, _ = stores.group_files(files)
    assert len(groups) == 1000
    assert calls[0] <= 2 * len(files)


# ---- F11: wrapping is linear in the length of a word -------------------------------------------


def test_f11_a_device_name_of_200_kib_is_cut_not_wrapped_over_thousands_of_lines() -> None:
    from llamafit.report.check import llama_check_lines

    name = "x" * (200 << 10)
    data = {
        "tool": "llama-fit-params",
        "devices": [
            {"device": name, "mib": 1.0, "llamafit_mib": 1.0, "judged": True, "agrees": True}
        ],
        "agrees": True,
        "notes": [f"note on {name}"],
    }
    lines = llama_check_lines(data)
    x = "x"
    assert lines == [  # the name cut at two lines' length (160 characters), then wrapped
        f"llama.cpp  llama-fit-params: {x * 51}",
        f"             {x * 67}",
        f"             {x * 41}… 1 MiB, llamafit 1.0",
        "             (agrees)",
        f"           note on {x * 61}",
        f"           {x * 69}",
        f"           {x * 29}…",
    ]


# ---- F10: a remembered llama-fit-params answer is held to the rules of every other record -----

DENSE_KEY = "llama:188992:267776"  # llama_record.model_key of the dense fixture
ROOM = 4 << 20  # a plausible difference: 4 MiB more weights on a 16 MiB device


def _remembering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fitp: str = ""
) -> tuple[dict[str, str], str]:
    """A build listing one 16 MiB CUDA0 (with `fitp`, a llama-fit-params answering it), its
    environment, and its identity; the records go to a private cache."""
    env = fake_build(
        tmp_path / "bin",
        {"--list-devices": "printf 'Available devices:\\n  CUDA0: GPU (16 MiB, 16 MiB free)\\n'"},
        fitp=fitp,
    )
    env |= {
        "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache"),
        "LLAMAFIT_CALIBRATION": str(tmp_path / "cal.jsonl"),
    }
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", env["LLAMAFIT_CACHE_DIR"])
    identity = find.build_identity(
        str(tmp_path / "bin" / "llama-server"), NEW_VERSION.splitlines()[0]
    )
    return env, identity


def _remember(identity: str, time: str = "2026-01-01T00:00:00Z") -> None:
    from llamafit.commands.records import store

    store(
        identity,
        [
            {"device": "CUDA0", "card": "GPU", "total_bytes": 16 << 20, "model": DENSE_KEY}
            | {"model_name": "dense-llama.gguf", "kind": "model", "bytes": ROOM, "agrees": False}
            | {"config": {}, "time": time}
        ],
    )


def _plan_json(env: dict[str, str], *flags: str) -> dict:
    code, out, err = _invoke(
        ["plan", str(DENSE), "--reserve", "0", "--ram", "8GiB", "--json", *flags], env
    )
    assert code in (0, 1), err
    data = _strict(out)
    assert isinstance(data, dict)
    return data


def test_f10_a_remembered_answer_applies_only_with_llama_s_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, identity = _remembering(tmp_path, monkeypatch)
    _remember(identity)
    assert _plan_json(env)["llama_cpp_recorded"]["room"] == [{"device": "CUDA0", "bytes": ROOM}]
    assert "llama_cpp_recorded" not in _plan_json(env, "--no-llama-check")


def test_f10_a_real_start_overrides_a_remembered_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, identity = _remembering(tmp_path, monkeypatch)
    _remember(identity, time="2026-01-01T00:00:00Z")
    started = json.loads(_record(time="2026-02-01T00:00:00Z"))
    started["server"] = {"build": None, "identity": identity}
    Path(env["LLAMAFIT_CALIBRATION"]).write_text(json.dumps(started) + "\n")
    assert "llama_cpp_recorded" not in _plan_json(env)
    started["time"] = "2025-12-01T00:00:00Z"  # a start before the answer: the answer stands
    Path(env["LLAMAFIT_CALIBRATION"]).write_text(json.dumps(started) + "\n")
    assert _plan_json(env)["llama_cpp_recorded"]["room"] == [{"device": "CUDA0", "bytes": ROOM}]


def test_f10_an_implausible_answer_is_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short: None
) -> None:
    from llamafit.commands.records import load

    huge = "echo 'CUDA0 1000000 0 1'; echo 'Host 0 0 1'"  # 976 GiB of weights on a 16 MiB card
    env, identity = _remembering(tmp_path, monkeypatch, fitp=huge)
    _plan_json(env)
    assert [e["kind"] for e in load(identity) if e.get("kind")] == ["context", "compute"]


def test_f10_remembered_answers_are_listed_and_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.commands.records import load, record_path

    env, identity = _remembering(tmp_path, monkeypatch)
    _remember(identity)
    code, out, err = _invoke(["calibration", "show", "--json"], env)
    data = _strict(out)
    assert isinstance(data, dict)
    assert data["llama_cpp"] == [
        {
            "build": identity,
            "path": record_path(identity),
            "entries": [
                {
                    "device": "CUDA0",
                    "kind": "model",
                    "bytes": ROOM,
                    "model_name": "dense-llama.gguf",
                }
            ],
        }
    ]
    code, out, err = _invoke(["calibration", "show"], env)
    assert out.splitlines()[-2:] == [
        f"  {identity}: 1 entries",
        "    CUDA0                    model               4.0 MiB (dense-llama.gguf)",
    ]
    code, out, err = _invoke(["calibration", "clear"], env)
    assert (code, out.splitlines()[-1]) == (
        0,
        "Cleared llama.cpp's remembered estimates of 1 build(s)",
    )
    assert load(identity) == [] and not Path(record_path(identity)).exists()
