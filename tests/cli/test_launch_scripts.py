"""Launch configs: exact text for a simple plan, and round trips through the real consumers'
syntax."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llamafit.errors import InputError
from llamafit.server.scripts import (
    KINDS,
    LaunchSpec,
    launch_argv,
    render,
    render_docker,
    render_llama_swap,
    render_models_ini,
    render_sh,
    render_systemd,
)

SH = shutil.which("sh") or "/bin/sh"
# busybox: via "sh"
SHELLS = sorted({SH, *filter(None, map(shutil.which, ("dash", "bash", "busybox")))})
MODEL = "/models/My Model.gguf"
SPEC = LaunchSpec(
    argv=(
        "llama-server",
        "-m",
        MODEL,
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
        "-ub",
        "512",
        "--fit",
        "off",
    ),
    model_path=MODEL,
    env=(("CUDA_VISIBLE_DEVICES", "0"),),
    name="my-model",
    predicted_mib=(("CUDA0", 20000),),
    llama_build="b1234",
    n_ctx=32768,
    ladder=((32768, (20000,)), (16384, (15000,)), (4096, (9000,))),
)

ARGS = """\
  -m '/models/My Model.gguf' \\
  -c 32768 \\
  -ngl 65 \\
  -fa on \\
  -ctk q8_0 \\
  -ctv q8_0 \\
  -ub 512 \\
  --fit off \\
"""
HEAD = """\
# Planned by llamafit for my-model: context 32768, llama.cpp build b1234.
# Predicted GPU memory: CUDA0 20000 MiB.
"""
SH_TEXT = f"""\
#!/bin/sh
{HEAD}\
# LLAMAFIT_HOST / LLAMAFIT_PORT override the listen address; extra arguments go to the server.
set -eu

if [ -z "${{LLAMAFIT_HOST:-}}" ]; then LLAMAFIT_HOST=127.0.0.1; fi
if [ -z "${{LLAMAFIT_PORT:-}}" ]; then LLAMAFIT_PORT=8080; fi
export CUDA_VISIBLE_DEVICES=0

set -- llama-server \\
{ARGS}  --host "$LLAMAFIT_HOST" \\
  --port "$LLAMAFIT_PORT" \\
  "$@"
exec "$@"
"""
SYSTEMD_TEXT = f"""\
{HEAD}\
# After it starts, prove a full context once: llamafit check --verify http://127.0.0.1:8080
[Unit]
Description=llama-server my-model
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
Environment="CUDA_VISIBLE_DEVICES=0"
ExecStart="llama-server" "-m" "/models/My Model.gguf" "-c" "32768" "-ngl" "65" "-fa" "on" "-ctk" "q8_0" \
"-ctv" "q8_0" "-ub" "512" "--fit" "off" "--host" "127.0.0.1" "--port" "8080"
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
"""
SWAP_TEXT = """\
# llama-swap model entry written by llamafit; merge it into the models: of config.yaml
# After deploying, prove a full context once through llama-swap's upstream route:
#   llamafit check --verify http://LLAMA_SWAP_HOST:PORT/upstream/my-model
models:
  "my-model":
    cmd: "llama-server -m '/models/My Model.gguf' -c 32768 -ngl 65 -fa on -ctk q8_0 -ctv q8_0 -ub 512 \
--fit off --host 127.0.0.1 --port ${PORT}"
    env:
      - "CUDA_VISIBLE_DEVICES=0"
    metadata:
      predicted_mib:
        "CUDA0": 20000
      llama_build: "b1234"
      n_ctx: 32768
"""
INI_TEXT = """\
; Planned by llamafit for my-model: context 32768, llama.cpp build b1234.
; Predicted GPU memory: CUDA0 20000 MiB.
; Set on the router (its instances inherit it): CUDA_VISIBLE_DEVICES=0
[my-model]
model = /models/My Model.gguf
ctx-size = 32768
n-gpu-layers = 65
flash-attn = on
cache-type-k = q8_0
cache-type-v = q8_0
ubatch-size = 512
fit = off
"""
DOCKER_TEXT = f"""\
docker run --rm --gpus all \\
  -p 127.0.0.1:8080:8080 \\
  -v /models:/models:ro \\
  -e CUDA_VISIBLE_DEVICES=0 \\
  ghcr.io/ggml-org/llama.cpp:server-cuda \\
{ARGS}  --host 0.0.0.0 \\
  --port 8080
"""
EXPECTED = {
    "sh": SH_TEXT,
    "systemd": SYSTEMD_TEXT,
    "llama-swap": SWAP_TEXT,
    "models-ini": INI_TEXT,
    "docker": DOCKER_TEXT,
}

HOSTILE = [
    "/models/My Model.gguf",
    '/models/it\'s "quoted".gguf',
    "/models/$HOME/`id`/$(id)/*.gguf",
    "/models/-lead/--dash.gguf",
    "/models/ünïcødé 模型 🦙.gguf",
    "/models/back\\slash;semi#hash&amp|pipe.gguf",
    "/models/tab\there  two  spaces .gguf",
    "/models/%percent%/${BRACE}/~tilde.gguf",
    "/models/''/\"\"/\\'.gguf",
]


def spec_for(model: str, program: str = "llama-server", **changes: Any) -> LaunchSpec:
    argv = (program, "-m", model, *SPEC.argv[3:])
    return replace(SPEC, argv=argv, model_path=model, **changes)


@pytest.mark.parametrize("kind", KINDS)
def test_exact_text_for_a_simple_plan(kind: str) -> None:
    assert render(kind, SPEC) == EXPECTED[kind]


def test_guard_text_replaces_only_the_context() -> None:
    guarded = render_sh(SPEC, guard=True)
    assert '  -c "$LLAMAFIT_CTX" \\\n' in guarded
    assert '  if [ -z "$(llamafit_short 20000)" ]; then LLAMAFIT_CTX=32768\n' in guarded
    assert '  elif [ -z "$(llamafit_short 9000)" ]; then LLAMAFIT_CTX=4096\n' in guarded
    assert guarded.replace('-c "$LLAMAFIT_CTX"', "-c 32768").endswith(SH_TEXT.split("\n\n", 2)[2])
    assert render("sh", SPEC, guard=True) == guarded


def test_unknown_kind() -> None:
    with pytest.raises(InputError, match="unknown launch config"):
        render("k8s", SPEC)


# --- the spec --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["/models/a\nb.gguf", "/models/a\rb.gguf", "/models/a\0b.gguf"])
def test_a_line_break_or_nul_is_refused(bad: str) -> None:
    with pytest.raises(InputError, match="newline or NUL"):
        spec_for(bad)
    with pytest.raises(InputError, match="newline or NUL"):
        replace(SPEC, env=(("X", "a\nb"),))


@pytest.mark.parametrize(
    "changes",
    [
        {"argv": ()},
        {"port": 0},
        {"port": 65536},
        {"env": (("1X", "a"),)},
        {"env": (("A B", "a"),)},
        {"ladder": ((0, (10,)),)},
        {"ladder": ((10, ()),)},
        {"ladder": ((10, (-1,)),)},
        {"ladder": ((20, (10, 10)), (10, (10,)))},
    ],
)
def test_an_unusable_spec_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        replace(SPEC, **changes)


def test_launch_argv_sets_host_and_port_in_place_or_at_the_end() -> None:
    assert launch_argv(SPEC)[-4:] == ("--host", "127.0.0.1", "--port", "8080")
    given = replace(SPEC, argv=("srv", "--port", "1", "-m", "x", "--host", "h"), host="::1", port=9)
    assert launch_argv(given) == ("srv", "--port", "9", "-m", "x", "--host", "::1")
    assert launch_argv(given, "0.0.0.0", "7") == (
        "srv",
        "--port",
        "7",
        "-m",
        "x",
        "--host",
        "0.0.0.0",
    )


# --- sh --------------------------------------------------------------------------------------


def sh_run(
    script: str, tmp_path: Path, *args: str, path: str | None = None, shell: str = SH, **env: str
) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "launch.sh"
    file.write_text(script, encoding="utf-8")
    environ = {"PATH": os.environ["PATH"] if path is None else path, **env}
    command = [shell, "sh"] if shell.endswith("busybox") else [shell]
    return subprocess.run(
        [*command, str(file), *args], env=environ, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def server(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in llama-server, in a hostile directory, that records its argv and environment."""
    folder = tmp_path / "bin dir 'x' $y"
    folder.mkdir()
    record = tmp_path / "record.json"
    program = folder / "llama-server"
    program.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'cvd': os.environ.get('CUDA_VISIBLE_DEVICES')}},"
        f" open({str(record)!r}, 'w'))\n",
        encoding="utf-8",
    )
    program.chmod(0o755)
    return str(program), record


def recorded(record: Path) -> dict[str, Any]:
    return json.loads(record.read_text(encoding="utf-8"))


@pytest.mark.parametrize("model", [*HOSTILE, "-model.gguf", "relative dir/m.gguf"])
@pytest.mark.parametrize("guard", [False, True])
def test_sh_syntax_holds_for_hostile_paths(model: str, guard: bool, tmp_path: Path) -> None:
    file = tmp_path / "launch.sh"
    file.write_text(render_sh(spec_for(model), guard=guard), encoding="utf-8")
    subprocess.run([SH, "-n", str(file)], check=True, timeout=30)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("model", [*HOSTILE, "-model.gguf"])
def test_sh_execs_exactly_the_planned_argv(
    model: str, shell: str, server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = spec_for(model, program)
    done = sh_run(render_sh(spec), tmp_path, shell=shell)
    assert done.returncode == 0, done.stderr
    assert recorded(record) == {"argv": list(launch_argv(spec)[1:]), "cvd": "0"}


def test_sh_takes_host_and_port_from_the_environment_and_passes_extra_arguments(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = spec_for(HOSTILE[2], program)
    extra = ("--alias", "it's $me", "-v")
    done = sh_run(render_sh(spec), tmp_path, *extra, LLAMAFIT_HOST="0.0.0.0", LLAMAFIT_PORT="9000")
    assert done.returncode == 0, done.stderr
    assert recorded(record)["argv"] == [*launch_argv(spec, "0.0.0.0", "9000")[1:], *extra]


def fake_nvidia_smi(folder: Path, output: str) -> Path:
    """An nvidia-smi that prints `output` and records its arguments."""
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(
        f"#!/bin/sh\necho \"$@\" > {shlex.quote(str(folder / 'args'))}\nprintf '{output}'\n"
    )
    tool.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("free", "context"),
    [
        ("80000\\n", 32768),
        ("20000\\n", 32768),
        ("19999\\n", 16384),
        ("9000\\n", 4096),
        ("  12000\\n", 4096),
    ],
)
def test_guard_steps_down_the_ladder(
    free: str, context: int, server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = spec_for(HOSTILE[1], program)
    tools = fake_nvidia_smi(tmp_path / "tools", free)
    done = sh_run(render_sh(spec, guard=True), tmp_path, path=f"{tools}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    argv = recorded(record)["argv"]
    assert isinstance(argv, list)
    assert argv == list(launch_argv(replace(spec, argv=_with_ctx(spec.argv, context)))[1:])
    assert (tools / "args").read_text().split() == [
        "--query-gpu=memory.free",
        "--format=csv,noheader,nounits",
        "--id=0",
    ]


def _with_ctx(argv: tuple[str, ...], context: int) -> tuple[str, ...]:
    i = argv.index("-c")
    return (*argv[: i + 1], str(context), *argv[i + 2 :])


TWO_GPUS = ((32768, (12000, 8000)), (16384, (9000, 6000)), (4096, (5000, 4000)))


@pytest.mark.parametrize(
    ("free", "context"),
    [
        ("12000\\n8000\\n", 32768),
        ("20000\\n7999\\n", 16384),
        ("8999\\n20000\\n", 4096),
        ("5000\\n4000\\n", 4096),
    ],
)
def test_guard_checks_each_gpu(
    free: str, context: int, server: tuple[str, Path], tmp_path: Path
) -> None:
    """The second and third readings total more than the 20000 MiB the planned context needs, but
    one GPU is short."""
    program, record = server
    spec = replace(spec_for(MODEL, program), env=(), ladder=TWO_GPUS)
    tools = fake_nvidia_smi(tmp_path / "tools", free)
    done = sh_run(render_sh(spec, guard=True), tmp_path, path=f"{tools}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert recorded(record)["argv"] == list(
        launch_argv(replace(spec, argv=_with_ctx(spec.argv, context)))[1:]
    )
    assert "--id" not in (tools / "args").read_text()


@pytest.mark.parametrize(
    ("free", "short"),
    [
        ("30000\\n3999\\n", "CUDA1 has 3999 MiB free, needs 4000 MiB"),
        ("4999\\n30000\\n", "CUDA0 has 4999 MiB free, needs 5000 MiB"),
    ],
)
def test_guard_names_the_short_gpu(
    free: str, short: str, server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = replace(spec_for(MODEL, program), ladder=TWO_GPUS)
    tools = fake_nvidia_smi(tmp_path / "tools", free)
    done = sh_run(render_sh(spec, guard=True), tmp_path, path=f"{tools}:{os.environ['PATH']}")
    assert done.returncode == 1
    assert done.stderr == f"llamafit: context 4096 does not fit: {short}\n"
    assert not record.exists()


@pytest.mark.parametrize("free", ["30000\\n", "30000\\n30000\\n30000\\n"])
def test_guard_keeps_the_planned_context_when_the_gpus_differ_from_the_plan(
    free: str, server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = replace(spec_for(MODEL, program), ladder=TWO_GPUS)
    tools = fake_nvidia_smi(tmp_path / "tools", free)
    done = sh_run(render_sh(spec, guard=True), tmp_path, path=f"{tools}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert recorded(record)["argv"] == list(launch_argv(spec)[1:])
    count = free.count("\\n")
    expected = (
        f"llamafit: nvidia-smi lists {count} GPUs, the plan has 2; keeping the planned context "
        "32768\n"
    )
    assert done.stderr == expected


def test_guard_exits_1_when_nothing_fits(server: tuple[str, Path], tmp_path: Path) -> None:
    program, record = server
    tools = fake_nvidia_smi(tmp_path / "tools", "8999\\n")
    done = sh_run(
        render_sh(spec_for(MODEL, program), guard=True),
        tmp_path,
        path=f"{tools}:{os.environ['PATH']}",
    )
    assert done.returncode == 1
    assert (
        done.stderr
        == "llamafit: context 4096 does not fit: CUDA0 has 8999 MiB free, needs 9000 MiB\n"
    )
    assert not record.exists()


@pytest.mark.parametrize("output", [None, "[N/A]\\n"])
def test_guard_keeps_the_planned_context_without_a_reading(
    output: str | None, server: tuple[str, Path], tmp_path: Path
) -> None:
    program, record = server
    spec = spec_for(HOSTILE[4], program)
    tools = tmp_path / "empty"
    tools.mkdir()
    if output is not None:
        fake_nvidia_smi(tools, output)
        (tools / "awk").symlink_to(shutil.which("awk") or "/usr/bin/awk")
    # no real nvidia-smi either
    done = sh_run(render_sh(spec, guard=True), tmp_path, path=str(tools))
    assert done.returncode == 0, done.stderr
    assert recorded(record)["argv"] == list(launch_argv(spec)[1:])
    assert re.fullmatch(
        r"llamafit: nvidia-smi .*; keeping the planned context 32768\n", done.stderr
    )


@pytest.mark.parametrize(
    "changes",
    [{"ladder": ()}, {"argv": ("llama-server", "-m", MODEL)}, {"argv": ("srv", "-c", "auto")}],
)
def test_guard_needs_a_context_and_a_ladder(changes: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="guard"):
        render_sh(replace(SPEC, **changes), guard=True)


# --- systemd ---------------------------------------------------------------------------------


def systemd_words(line: str) -> list[str]:
    """ExecStart's words back: double quotes with C escapes (systemd.syntax(7)), then %% and $$."""
    words = re.findall(r'"((?:[^"\\]|\\.)*)"', line)
    assert " ".join(f'"{w}"' for w in words) == line  # every word quoted, nothing else
    unescape = {"\\\\": "\\", '\\"': '"', "%%": "%", "$$": "$"}
    return [re.sub(r'\\\\|\\"|%%|\$\$', lambda m: unescape[m.group()], w) for w in words]


@pytest.mark.parametrize("model", [m for m in HOSTILE if "\t" not in m])
def test_systemd_exec_start_round_trips(model: str) -> None:
    spec = spec_for(model, "/opt/llama.cpp/bin dir/llama-server")
    line = next(x for x in render_systemd(spec).splitlines() if x.startswith("ExecStart="))
    assert systemd_words(line.removeprefix("ExecStart=")) == list(launch_argv(spec))


def test_systemd_quotes_space_dollar_percent_quote_backslash() -> None:
    spec = replace(spec_for('/m/a b$c%d"e\\f.gguf'), env=(("X", "50% $HOME"),), name="n%i")
    text = render_systemd(spec)
    assert '"-m" "/m/a b$$c%%d\\"e\\\\f.gguf"' in text
    assert 'Environment="X=50%% $HOME"\n' in text  # Environment= does not expand $
    assert "Description=llama-server n%%i\n" in text


@pytest.mark.parametrize(
    "program", ["-llama-server", "@x", "bin/llama-server", "/opt/$x/srv", '/a"b', "/opt/"]
)
def test_systemd_refuses_a_program_it_would_misread(program: str) -> None:
    with pytest.raises(InputError, match="ExecStart"):
        render_systemd(spec_for(MODEL, program))


# --- llama-swap ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [m for m in HOSTILE if "${" not in m])
def test_llama_swap_yaml_round_trips(model: str) -> None:
    yaml = pytest.importorskip("yaml")  # PyYAML: the test extra
    spec = replace(
        spec_for(model),
        env=(("CUDA_VISIBLE_DEVICES", "0,1"), ("X", 'q"\\ü')),
        predicted_mib=(("CUDA0", 1), ("CUDA1: x", 2)),
        name='it\'s: "m" #1',
    )
    entry = yaml.safe_load(render_llama_swap(spec))["models"][spec.name]
    assert set(entry) == {"cmd", "env", "metadata"}
    assert "--port ${PORT}" in entry["cmd"]
    assert shlex.split(entry["cmd"].replace("${PORT}", "5800")) == list(
        launch_argv(spec, port="5800")
    )
    assert entry["env"] == ["CUDA_VISIBLE_DEVICES=0,1", 'X=q"\\ü']
    assert entry["metadata"] == {
        "predicted_mib": {"CUDA0": 1, "CUDA1: x": 2},
        "llama_build": "b1234",
        "n_ctx": 32768,
    }


def test_llama_swap_empty_values() -> None:
    yaml = pytest.importorskip("yaml")
    spec = replace(SPEC, env=(), predicted_mib=(), llama_build=None)
    entry = yaml.safe_load(render_llama_swap(spec))["models"]["my-model"]
    assert entry["env"] == [] and entry["metadata"] == {
        "predicted_mib": {},
        "llama_build": None,
        "n_ctx": 32768,
    }


@pytest.mark.parametrize(
    "changes", [{"name": "m${X}"}, {"env": (("A", "${env.HOME}"),)}, {"llama_build": "${b}"}]
)
def test_llama_swap_refuses_what_it_would_expand(changes: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="macro"):
        render_llama_swap(replace(SPEC, **changes))
    with pytest.raises(InputError, match="macro"):
        render_llama_swap(spec_for("/m/${x}.gguf"))


# --- models.ini ------------------------------------------------------------------------------


def ini_section(text: str, name: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    assert parser.sections() == [name]
    return dict(parser[name])


@pytest.mark.parametrize("model", [m for m in HOSTILE if not re.search(r"[;#]", m)])
def test_models_ini_round_trips(model: str) -> None:
    argv = (
        "llama-server",
        "--model",
        model,
        "--ctx_size",
        "4096",
        "-ngl",
        "all",
        "-ot",
        r"blk\.1\.=CPU",
        "--host",
        "0.0.0.0",
        "--port",
        "1",
        "-a",
        "x",
        "-ot",
        "exps=CPU",
        "-nkvo",
        "-ts",
        "3,1",
        "-np",
        "1",
        "-b",
        "2048",
        "--n-cpu-moe",
        "3",
        "-fa",
        "auto",
        "--jinja",
        "--fit",
        "on",
    )
    spec = replace(SPEC, argv=argv, model_path=model, name="org/Model-GGUF:Q4_K_M")
    assert ini_section(render_models_ini(spec), spec.name) == {
        "model": model,
        "ctx-size": "4096",
        "n-gpu-layers": "all",
        "override-tensor": r"blk\.1\.=CPU,exps=CPU",
        "no-kv-offload": "true",
        "tensor-split": "3,1",
        "parallel": "1",
        "batch-size": "2048",
        "n-cpu-moe": "3",
        "flash-attn": "auto",
        "jinja": "true",
        "fit": "on",
    }


def test_models_ini_simple_plan_parses() -> None:
    assert ini_section(INI_TEXT, "my-model")["cache-type-v"] == "q8_0"


@pytest.mark.parametrize(
    "changes",
    [
        {"argv": ("s", "-m", "/m/a;b.gguf")},
        {"argv": ("s", "-m", "/m/a#b.gguf")},
        {"argv": ("s", "-m", " /m")},
        {"argv": ("s", "--made-up", "1")},
        {"argv": ("s", "--control-vector-layer-range", "1", "2")},
        {"name": "a]b"},
        {"name": "*"},
        {"name": " x"},
        {"name": ""},
    ],
)
def test_models_ini_refuses_what_it_cannot_hold(changes: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        render_models_ini(replace(SPEC, **changes))


# --- docker ----------------------------------------------------------------------------------


def docker_argv(text: str) -> list[str]:
    return shlex.split(text.replace("\\\n", ""))


@pytest.mark.parametrize(
    ("host", "publish"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("::1", "[::1]"),
    ],
)
def test_docker_publishes_on_the_planned_host(host: str, publish: str) -> None:
    words = docker_argv(render_docker(replace(SPEC, host=host, port=8081)))
    assert words[words.index("-p") + 1] == f"{publish}:8081:8081"
    assert words[-4:] == ["--host", "0.0.0.0", "--port", "8081"]


@pytest.mark.parametrize("model", [m for m in HOSTILE if ":" not in m])
def test_docker_rewrites_model_paths_into_the_mount(model: str) -> None:
    folder = model.rsplit("/", 1)[0]
    spec = replace(
        spec_for(model), argv=(*spec_for(model).argv, "--mmproj", f"{folder}/sub/mmproj.gguf")
    )
    words = docker_argv(render_docker(spec, image="my/image:tag"))
    assert words[: words.index("my/image:tag") + 1] == [
        "docker",
        "run",
        "--rm",
        "--gpus",
        "all",
        "-p",
        "127.0.0.1:8080:8080",
        "-v",
        f"{folder}:/models:ro",
        "-e",
        "CUDA_VISIBLE_DEVICES=0",
        "my/image:tag",
    ]
    inside = spec_for(f"/models/{model.rsplit('/', 1)[1]}")
    inside = replace(inside, argv=(*inside.argv, "--mmproj", "/models/sub/mmproj.gguf"))
    assert words[words.index("my/image:tag") + 1 :] == list(launch_argv(inside, "0.0.0.0")[1:])


@pytest.mark.parametrize(
    "changes",
    [
        {"model_path": "rel/m.gguf"},
        {"argv": (*SPEC.argv, "--mmproj", "/elsewhere/mm.gguf")},
        {"model_path": "/a:b/m.gguf", "argv": ("s", "-m", "/a:b/m.gguf")},
        {"host": "/run/llama.sock"},
    ],
)
def test_docker_refuses_what_the_container_cannot_see(changes: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        render_docker(replace(SPEC, **changes))
