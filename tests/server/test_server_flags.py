"""llama-server's own flags and LLAMA_ARG_* variables (common/arg.cpp at 0c1e570) into a
LaunchConfig."""

from __future__ import annotations

from typing import Any

import pytest

from llamafit.errors import InputError
from llamafit.memory.config import LaunchConfig, engine_defaults
from llamafit.server.flag_table import NO_VALUE, ONE_VALUE, TWO_VALUES
from llamafit.server.flags import (
    _BY_FLAG,
    RETIRED_LOAD_FLAGS,
    arity,
    flag_groups,
    parse_server_args,
    split_command_line,
)

ALL_TYPES = "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"


def config(argv: list[str], env: dict[str, str] | None = None) -> LaunchConfig:
    return parse_server_args(argv, env).config


def changed(cfg: LaunchConfig) -> dict[str, Any]:
    """The fields given, with their values."""
    return {name: getattr(cfg, name) for name in sorted(cfg.given)}


SPELLINGS = [
    (["-c", "8192"], {"n_ctx": 8192}),
    (["--ctx-size", "8192"], {"n_ctx": 8192}),
    (["--ctx_size", "8192"], {"n_ctx": 8192}),  # arg.cpp turns '_' into '-' in "--" flags
    (["-b", "1024"], {"n_batch": 1024}),
    (["--batch-size", "1024"], {"n_batch": 1024}),
    (["-ub", "256"], {"n_ubatch": 256}),
    (["--ubatch-size", "256"], {"n_ubatch": 256}),
    (["-ngl", "99"], {"n_gpu_layers": 99}),
    (["--gpu-layers", "all"], {"n_gpu_layers": -2}),
    (["--n-gpu-layers", "auto"], {"n_gpu_layers": -1}),
    (["-ctk", "q8_0"], {"type_k": "q8_0"}),
    (["--cache-type-k", "q4_0"], {"type_k": "q4_0"}),
    (["-ctv", "q8_0"], {"type_v": "q8_0"}),
    (["--cache-type-v", "iq4_nl"], {"type_v": "iq4_nl"}),
    (["-np", "3"], {"n_parallel": 3}),
    (["--parallel", "1"], {"n_parallel": 1}),
    (["-kvu"], {"kv_unified": True}),
    (["--kv-unified"], {"kv_unified": True}),
    (["-no-kvu"], {"kv_unified": False}),
    (["--no-kv-unified"], {"kv_unified": False}),
    (["--swa-full"], {"swa_full": True}),
    (["-kvo"], {"kv_offload": True}),
    (["--kv-offload"], {"kv_offload": True}),
    (["-nkvo"], {"kv_offload": False}),
    (["--no-kv-offload"], {"kv_offload": False}),
    (["-cmoe"], {"cpu_moe": True}),
    (["--cpu-moe"], {"cpu_moe": True}),
    (["-ncmoe", "12"], {"n_cpu_moe": 12}),
    (["--n-cpu-moe", "0"], {"n_cpu_moe": 0}),
    (["-ncffn", "4"], {"n_cpu_ffn": 4}),
    (["--n-cpu-ffn", "4"], {"n_cpu_ffn": 4}),
    (["-ot", "exps=CPU"], {"override_tensor": (("exps", "CPU"),)}),
    (
        ["--override-tensor", r"blk\.[0-3]\.ffn=CUDA0,token_embd=CPU"],
        {"override_tensor": ((r"blk\.[0-3]\.ffn", "CUDA0"), ("token_embd", "CPU"))},
    ),
    (["-ts", "3,1"], {"tensor_split": (3.0, 1.0)}),
    (["--tensor-split", "0.6/0.4"], {"tensor_split": (0.6, 0.4)}),
    (["-sm", "row"], {"split_mode": "row"}),
    (["--split-mode", "none"], {"split_mode": "none"}),
    (["-mg", "1"], {"main_gpu": 1}),
    (["--main-gpu", "-1"], {"main_gpu": -1}),
    (["-dev", "CUDA0,CUDA1"], {"devices": ("CUDA0", "CUDA1")}),
    (["--device", "none"], {"devices": ("none",)}),
    (["--rpc", "10.0.0.2:50052,10.0.0.3:50052"], {"rpc": ("10.0.0.2:50052", "10.0.0.3:50052")}),
    (["-lm", "mmap+mlock"], {"load_mode": "mmap+mlock"}),
    (["--load-mode", "dio"], {"load_mode": "dio"}),
    (["-cram", "0"], {"cache_ram_mib": 0}),
    (["--cache-ram", "-1"], {"cache_ram_mib": -1}),
    (["-fit", "off"], {"fit": False}),
    (["--fit", "on"], {"fit": True}),
    (["-fitt", "2048"], {"fit_target_mib": (2048,)}),
    (["--fit-target", "512,256"], {"fit_target_mib": (512, 256)}),
    (["-fa", "on"], {"flash_attn": "on"}),
    (["--flash-attn", "off"], {"flash_attn": "off"}),
]


@pytest.mark.parametrize(("argv", "expected"), SPELLINGS, ids=[" ".join(a) for a, _ in SPELLINGS])
def test_each_spelling_sets_its_field(argv: list[str], expected: dict[str, Any]) -> None:
    parsed = parse_server_args(argv)
    assert changed(parsed.config) == expected
    assert (parsed.passthrough, parsed.unknown, parsed.env_used) == ((), (), ())


VALUE_FORMS = [
    ("-fa", "enabled", "on"),
    ("-fa", "true", "on"),
    ("-fa", "1", "on"),
    ("-fa", "disabled", "off"),
    ("-fa", "false", "off"),
    ("-fa", "0", "off"),
    ("-fa", "auto", "auto"),
    ("-fa", "-1", "auto"),  # is_autoy; the value may start with '-'
    ("-fit", "enabled", True),
    ("-fit", "1", True),
    ("-fit", "disabled", False),
    ("-fit", "false", False),
    ("-ngl", "0", 0),
    ("-ngl", "-1", -1),
    ("-ngl", "-2", -2),
    ("-ngl", "-7", -2),  # libllama offloads every layer for any negative but -1 (auto)
    ("-np", "-1", -1),
    ("-np", "-4", -1),  # server.cpp: n_parallel < 0 is auto
    ("-c", "0", 0),
    ("-c", " +4096 ", 4096),  # what std::stoi reads
    ("-ts", "1,,2//3", (1.0, 2.0, 3.0)),
    ("-ts", "1e1,.5", (10.0, 0.5)),
    ("-fitt", "100/200/300", (100, 200, 300)),
]
VALUE_FIELDS = {
    "-fa": "flash_attn",
    "-fit": "fit",
    "-ngl": "n_gpu_layers",
    "-np": "n_parallel",
    "-c": "n_ctx",
    "-ts": "tensor_split",
    "-fitt": "fit_target_mib",
}


@pytest.mark.parametrize(
    ("flag", "value", "expected"), VALUE_FORMS, ids=[f"{f} {v}" for f, v, _ in VALUE_FORMS]
)
def test_value_forms_follow_arg_cpp(flag: str, value: str, expected: Any) -> None:
    assert getattr(config([flag, value]), VALUE_FIELDS[flag]) == expected


def test_flag_equals_value_is_applied_but_llama_server_refuses_it() -> None:
    parsed = parse_server_args(
        ["--ctx-size=8192", "-ngl=all", "--override-tensor=exps=CPU", "--port=8080"]
    )
    assert changed(parsed.config) == {
        "n_ctx": 8192,
        "n_gpu_layers": -2,
        "override_tensor": (("exps", "CPU"),),
    }
    assert parsed.unknown == (
        "--ctx-size=8192",
        "-ngl=all",
        "--override-tensor=exps=CPU",
        "--port=8080",
    )
    assert parsed.passthrough == ()


REPEATS = [
    (["-c", "4096", "-c", "8192"], {"n_ctx": 8192}),  # the last value wins
    (["-kvu", "-no-kvu"], {"kv_unified": False}),
    (
        ["-ot", "a=CPU", "-ot", "b=CUDA0,c=CPU"],
        {"override_tensor": (("a", "CPU"), ("b", "CUDA0"), ("c", "CPU"))},
    ),
    (["--rpc", "h1:1", "--rpc", "h2:2"], {"rpc": ("h1:1", "h2:2")}),
    (["-ncmoe", "10", "-ncmoe", "5"], {"n_cpu_moe": 10}),  # overrides for blocks 0..9 stay
    (
        ["-cmoe", "-ncmoe", "3", "-ot", "x=CPU"],  # kept apart, not expanded into -ot
        {"cpu_moe": True, "n_cpu_moe": 3, "override_tensor": (("x", "CPU"),)},
    ),
    (["-ts", "1,1,1", "-ts", "2,1"], {"tensor_split": (2.0, 1.0)}),
]


@pytest.mark.parametrize(("argv", "expected"), REPEATS, ids=[" ".join(a) for a, _ in REPEATS])
def test_repeated_flags(argv: list[str], expected: dict[str, Any]) -> None:
    assert changed(config(argv)) == expected


RETIRED = [
    (["--no-mmap"], "none"),
    (["--mmap"], "mmap"),
    (["--mlock"], "mmap+mlock"),
    (["--no-mmap", "--mlock"], "mlock"),
    (["--mlock", "--no-mmap"], "mlock"),
    (["-dio"], "dio"),
    (["--direct-io", "--mlock"], "dio"),
    (["-dio", "-ndio"], "auto"),
    (["--no-direct-io"], "auto"),
    (["-lm", "none", "--mmap"], "mmap"),
    (["--no_mmap"], "none"),
]


@pytest.mark.parametrize(("argv", "load_mode"), RETIRED, ids=[" ".join(a) for a, _ in RETIRED])
def test_retired_load_flags_map_onto_load_mode_and_stay_unknown(
    argv: list[str], load_mode: str
) -> None:
    parsed = parse_server_args(argv)
    assert changed(parsed.config) == {"load_mode": load_mode}
    assert parsed.unknown == tuple(a for a in argv if a not in ("-lm", "none"))


ENV_CASES = [
    ({"LLAMA_ARG_CTX_SIZE": "16384"}, [], {"n_ctx": 16384}, ("LLAMA_ARG_CTX_SIZE",)),
    ({"LLAMA_ARG_CTX_SIZE": "16384"}, ["-c", "4096"], {"n_ctx": 4096}, ()),  # the flag wins
    ({"LLAMA_ARG_FLASH_ATTN": "disabled"}, [], {"flash_attn": "off"}, ("LLAMA_ARG_FLASH_ATTN",)),
    (
        {"LLAMA_ARG_CACHE_TYPE_K": "q8_0", "LLAMA_ARG_CACHE_TYPE_V": "q8_0"},
        [],
        {"type_k": "q8_0", "type_v": "q8_0"},
        ("LLAMA_ARG_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_V"),
    ),
    ({"LLAMA_ARG_N_GPU_LAYERS": "all"}, [], {"n_gpu_layers": -2}, ("LLAMA_ARG_N_GPU_LAYERS",)),
    (
        {"LLAMA_ARG_BATCH": "512", "LLAMA_ARG_UBATCH": "128"},
        [],
        {"n_batch": 512, "n_ubatch": 128},
        ("LLAMA_ARG_BATCH", "LLAMA_ARG_UBATCH"),
    ),
    ({"LLAMA_ARG_N_PARALLEL": "2"}, [], {"n_parallel": 2}, ("LLAMA_ARG_N_PARALLEL",)),
    ({"LLAMA_ARG_KV_UNIFIED": "true"}, [], {"kv_unified": True}, ("LLAMA_ARG_KV_UNIFIED",)),
    ({"LLAMA_ARG_KV_UNIFIED": "off"}, [], {"kv_unified": False}, ("LLAMA_ARG_KV_UNIFIED",)),
    (
        {"LLAMA_ARG_NO_KV_UNIFIED": ""},
        [],
        {"kv_unified": False},
        ("LLAMA_ARG_NO_KV_UNIFIED",),
    ),  # any value
    (
        {"LLAMA_ARG_KV_UNIFIED": "1", "LLAMA_ARG_NO_KV_UNIFIED": "1"},
        [],
        {"kv_unified": False},
        ("LLAMA_ARG_NO_KV_UNIFIED",),
    ),  # the NO_ twin is read first
    ({"LLAMA_ARG_NO_KV_UNIFIED": "1"}, ["-kvu"], {"kv_unified": True}, ()),
    ({"LLAMA_ARG_KV_OFFLOAD": "0"}, [], {"kv_offload": False}, ("LLAMA_ARG_KV_OFFLOAD",)),
    ({"LLAMA_ARG_NO_KV_OFFLOAD": "1"}, [], {"kv_offload": False}, ("LLAMA_ARG_NO_KV_OFFLOAD",)),
    ({"LLAMA_ARG_SWA_FULL": "on"}, [], {"swa_full": True}, ("LLAMA_ARG_SWA_FULL",)),
    ({"LLAMA_ARG_SWA_FULL": "0"}, [], {}, ()),  # a handler_void runs only for a truthy value
    ({"LLAMA_ARG_SWA_FULL": "yes"}, [], {}, ()),
    ({"LLAMA_ARG_CPU_MOE": "1"}, [], {"cpu_moe": True}, ("LLAMA_ARG_CPU_MOE",)),
    ({"LLAMA_ARG_N_CPU_MOE": "20"}, ["-ncmoe", "8"], {"n_cpu_moe": 20}, ("LLAMA_ARG_N_CPU_MOE",)),
    ({"LLAMA_ARG_N_CPU_FFN": "2"}, [], {"n_cpu_ffn": 2}, ("LLAMA_ARG_N_CPU_FFN",)),
    (
        {"LLAMA_ARG_OVERRIDE_TENSOR": "a=CPU"},
        ["-ot", "b=CPU"],
        {"override_tensor": (("a", "CPU"), ("b", "CPU"))},
        ("LLAMA_ARG_OVERRIDE_TENSOR",),
    ),  # both push_back in arg.cpp
    (
        {"LLAMA_ARG_TENSOR_SPLIT": "1,3"},
        [],
        {"tensor_split": (1.0, 3.0)},
        ("LLAMA_ARG_TENSOR_SPLIT",),
    ),
    ({"LLAMA_ARG_SPLIT_MODE": "tensor"}, [], {"split_mode": "tensor"}, ("LLAMA_ARG_SPLIT_MODE",)),
    ({"LLAMA_ARG_MAIN_GPU": "1"}, [], {"main_gpu": 1}, ("LLAMA_ARG_MAIN_GPU",)),
    ({"LLAMA_ARG_DEVICE": "Vulkan0"}, [], {"devices": ("Vulkan0",)}, ("LLAMA_ARG_DEVICE",)),
    ({"LLAMA_ARG_RPC": "h:1"}, ["--rpc", "g:2"], {"rpc": ("h:1", "g:2")}, ("LLAMA_ARG_RPC",)),
    ({"LLAMA_ARG_LOAD_MODE": "none"}, [], {"load_mode": "none"}, ("LLAMA_ARG_LOAD_MODE",)),
    ({"LLAMA_ARG_LOAD_MODE": "none"}, ["--mlock"], {"load_mode": "mlock"}, ()),
    ({"LLAMA_ARG_CACHE_RAM": "0"}, [], {"cache_ram_mib": 0}, ("LLAMA_ARG_CACHE_RAM",)),
    ({"LLAMA_ARG_FIT": "off"}, [], {"fit": False}, ("LLAMA_ARG_FIT",)),
    ({"LLAMA_ARG_FIT_TARGET": "256"}, [], {"fit_target_mib": (256,)}, ("LLAMA_ARG_FIT_TARGET",)),
    (
        {"LLAMA_ARG_MMAP": "0", "LLAMA_ARG_NO_MMAP": "1", "LLAMA_ARG_MLOCK": "1"},
        [],
        {},
        (),
    ),  # gone at 0c1e570
    ({"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_N_PREDICT": "x"}, [], {}, ()),  # not memory: not read
]


@pytest.mark.parametrize(
    ("env", "argv", "expected", "used"), ENV_CASES, ids=[f"{e} {a}" for e, a, _, _ in ENV_CASES]
)
def test_environment(
    env: dict[str, str], argv: list[str], expected: dict[str, Any], used: tuple[str, ...]
) -> None:
    parsed = parse_server_args(argv, env)
    assert (changed(parsed.config), parsed.env_used) == (expected, used)


MODELS = [
    (["-m", "x.gguf"], {}, ("x.gguf", None, ())),
    (["--model", "/a b/x.gguf", "-hfr", "u/m:Q8_0"], {}, ("/a b/x.gguf", "u/m:Q8_0", ())),
    (["-hf", "u/m"], {}, (None, "u/m", ())),
    (["--hf-repo", "u/m"], {}, (None, "u/m", ())),
    (
        [],
        {"LLAMA_ARG_MODEL": "/e.gguf", "LLAMA_ARG_HF_REPO": "u/e"},
        ("/e.gguf", "u/e", ("LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO")),
    ),
    (["-m", "f.gguf"], {"LLAMA_ARG_MODEL": "/e.gguf"}, ("f.gguf", None, ())),
]


@pytest.mark.parametrize(
    ("argv", "env", "expected"), MODELS, ids=[" ".join(a) or "env" for a, _, _ in MODELS]
)
def test_model_and_hf_repo(argv: list[str], env: dict[str, str], expected: tuple[Any, ...]) -> None:
    parsed = parse_server_args(argv, env)
    assert (parsed.model, parsed.hf_repo, parsed.env_used) == expected
    assert parsed.config.given == frozenset()


def test_passthrough_and_unknown_keep_order_and_values() -> None:
    argv = [
        "--host",
        "0.0.0.0",
        "-c",
        "4096",
        "--port",
        "8080",
        "-t",
        "8",
        "--temp",
        "0.7",
        "--frobnicate",
        "yes",
        "--alias",
        "my model",
        "-lv",
        "4",
        "--gizmo",
        "--log-jsonl",
        "--api-key",
        "k1",
        "--jinja",
        "-a",
        "x",
        "stray.gguf",
        "--control-vector-layer-range",
        "3",
        "9",
        "--no-mmap",
        "-ngl",
        "-1",
        "--widget",
        "-5",
        "--spec-draft-model",
        "draft.gguf",
        "-md",
        "d2.gguf",
        "--mmproj-auto",
    ]
    parsed = parse_server_args(argv)
    assert parsed.passthrough == (
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "-t",
        "8",
        "--temp",
        "0.7",
        "--alias",
        "my model",
        "-lv",
        "4",
        "--log-jsonl",
        "--api-key",
        "k1",
        "--jinja",
        "-a",
        "x",
        "--control-vector-layer-range",
        "3",
        "9",
        "--spec-draft-model",
        "draft.gguf",
        "-md",
        "d2.gguf",
        "--mmproj-auto",
    )
    assert parsed.unknown == (
        "--frobnicate",
        "yes",
        "--gizmo",
        "stray.gguf",
        "--no-mmap",
        "--widget",
        "-5",
    )
    assert changed(parsed.config) == {"n_ctx": 4096, "n_gpu_layers": -1, "load_mode": "none"}


def test_bare_fa_of_older_builds_takes_the_next_flag_as_its_value() -> None:
    # 0c1e570 wants a value after -fa: `-fa -c 4096` fails like llama.cpp, `-fa` last needs a value
    with pytest.raises(InputError) as err:
        parse_server_args(["-fa", "-c", "4096"])
    assert str(err.value) == "-fa expects on, off or auto, got '-c'"


ERRORS = [
    (["-c", "abc"], None, "-c expects an integer, got 'abc'"),
    (["--ctx-size", "4k"], None, "--ctx-size expects an integer, got '4k'"),
    (["-c", "-5"], None, "-c must be >= 0, got -5"),
    (["-c", "4294967296"], None, "-c is out of range, got 4294967296"),
    (["-b", "0"], None, "-b must be >= 1, got 0"),
    (["-ub", "0"], None, "-ub must be >= 1, got 0"),
    (["-np", "0"], None, "-np expects a number of slots or -1 (auto), got 0"),
    (["-np", "four"], None, "-np expects an integer, got 'four'"),
    (["-ngl", "most"], None, "-ngl expects an integer, 'auto' or 'all', got 'most'"),
    (["-ngl", "ALL"], None, "-ngl expects an integer, 'auto' or 'all', got 'ALL'"),
    (["-ncmoe", "-1"], None, "-ncmoe must be >= 0, got -1"),
    (["-ncffn", "x"], None, "-ncffn expects an integer, got 'x'"),
    (["-mg", "first"], None, "-mg expects an integer, got 'first'"),
    (["-ctk", "q4_k"], None, f"-ctk expects one of {ALL_TYPES}, got 'q4_k'"),
    (["--cache-type-v", "F16"], None, f"--cache-type-v expects one of {ALL_TYPES}, got 'F16'"),
    (["-fa", "yes"], None, "-fa expects on, off or auto, got 'yes'"),
    (["-fit", "auto"], None, "-fit expects on or off, got 'auto'"),
    (["-sm", "rows"], None, "-sm expects one of none, layer, row, tensor, got 'rows'"),
    (
        ["-lm", "mlock+mmap"],
        None,
        "-lm expects one of auto, none, mmap, mlock, mmap+mlock, dio, got 'mlock+mmap'",
    ),
    (
        ["-ts", "3,x"],
        None,
        "-ts expects non-negative proportions separated by ',' or '/', got '3,x'",
    ),
    (
        ["-ts", "-1,1"],
        None,
        "-ts expects non-negative proportions separated by ',' or '/', got '-1,1'",
    ),
    (["-ts", ",".join(["1"] * 16)], None, "-ts takes at most 15 values, got 16"),
    (["-fitt", "1.5"], None, "-fitt expects MiB values separated by ',' or '/', got '1.5'"),
    (
        ["-dev", "CUDA0,,CUDA1"],
        None,
        "-dev expects device names separated by ',', got 'CUDA0,,CUDA1'",
    ),
    (
        ["-dev", "none,CUDA0"],
        None,
        "-dev expects GPU device names or 'none' alone, got 'none,CUDA0'",
    ),
    (["-dev", "CPU"], None, "-dev expects GPU device names or 'none' alone, got 'CPU'"),
    (["--rpc", ""], None, "--rpc expects host:port servers separated by ',', got ''"),
    (["-ot", "exps"], None, "-ot expects <tensor regex>=<buffer type>[,...], got 'exps'"),
    (
        ["-ot", "exps=CPU,blk="],
        None,
        "-ot expects <tensor regex>=<buffer type>[,...], got 'exps=CPU,blk='",
    ),
    (["--ctx-size=big"], None, "--ctx-size expects an integer, got 'big'"),
    (["-m", "x.gguf", "-c"], None, "-c expects a value, but nothing follows it"),
    (["-kvu", "--port"], None, "--port expects a value, but nothing follows it"),
    (
        ["--control-vector-layer-range", "1"],
        None,
        "--control-vector-layer-range expects a value, but nothing follows it",
    ),
    ([], {"LLAMA_ARG_CTX_SIZE": "abc"}, "LLAMA_ARG_CTX_SIZE expects an integer, got 'abc'"),
    ([], {"LLAMA_ARG_KV_UNIFIED": "yes"}, "LLAMA_ARG_KV_UNIFIED expects on or off, got 'yes'"),
    (
        [],
        {"LLAMA_ARG_CACHE_TYPE_K": "q2_k"},
        f"LLAMA_ARG_CACHE_TYPE_K expects one of {ALL_TYPES}, got 'q2_k'",
    ),
    (
        [],
        {"LLAMA_ARG_N_PARALLEL": "0"},
        "LLAMA_ARG_N_PARALLEL expects a number of slots or -1 (auto), got 0",
    ),
]


@pytest.mark.parametrize(("argv", "env", "message"), ERRORS, ids=[m for _, _, m in ERRORS])
def test_errors(argv: list[str], env: dict[str, str] | None, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_server_args(argv, env)
    assert str(err.value) == message


PASTED = [
    ("llama-server -m model.gguf -c 4096", ["-m", "model.gguf", "-c", "4096"]),
    (
        "./build/bin/llama-server \\\n  -m '/models/my model.gguf' \\\n  -ngl 99 \\\n  --port 8080",
        ["-m", "/models/my model.gguf", "-ngl", "99", "--port", "8080"],
    ),
    (
        '"/opt/llama cpp/llama-server" -m "/a b/c.gguf" \\\r\n -c 8192',
        ["-m", "/a b/c.gguf", "-c", "8192"],
    ),
    (r"C:\llama\llama-server.exe -m C:/models/x.gguf", ["-m", "C:/models/x.gguf"]),
    ("/usr/local/bin/llama-cli -m x.gguf", ["-m", "x.gguf"]),
    ("./server -m x.gguf", ["-m", "x.gguf"]),
    ("-m x.gguf --alias 'a \"quoted\" name'", ["-m", "x.gguf", "--alias", 'a "quoted" name']),
    ("python -m llama_cpp.server", ["python", "-m", "llama_cpp.server"]),
    ("", []),
]


@pytest.mark.parametrize(("text", "argv"), PASTED, ids=[t[:40] for t, _ in PASTED])
def test_split_command_line(text: str, argv: list[str]) -> None:
    assert split_command_line(text) == argv


def test_split_command_line_unclosed_quote() -> None:
    with pytest.raises(InputError) as err:
        split_command_line("llama-server -m 'x.gguf")
    assert str(err.value) == "cannot split the command line: No closing quotation"


def test_a_whole_pasted_launch() -> None:
    text = """/opt/llama.cpp/build/bin/llama-server \\
        -m "/models/Qwen3 30B/Qwen3-30B-A3B-Q4_K_M.gguf" \\
        -c 32768 -fa on -ctk q8_0 -ctv q8_0 \\
        -ngl all --n-cpu-moe 20 -np 2 -kvu \\
        --host 0.0.0.0 --port 8080 --jinja"""
    parsed = parse_server_args(
        split_command_line(text), {"LLAMA_ARG_CACHE_RAM": "0", "LLAMA_ARG_CTX_SIZE": "4096"}
    )
    assert parsed.model == "/models/Qwen3 30B/Qwen3-30B-A3B-Q4_K_M.gguf"
    assert changed(parsed.config) == {
        "cache_ram_mib": 0,
        "flash_attn": "on",
        "kv_unified": True,
        "n_cpu_moe": 20,
        "n_ctx": 32768,
        "n_gpu_layers": -2,
        "n_parallel": 2,
        "type_k": "q8_0",
        "type_v": "q8_0",
    }
    assert parsed.passthrough == ("--host", "0.0.0.0", "--port", "8080", "--jinja")
    assert (parsed.unknown, parsed.env_used) == ((), ("LLAMA_ARG_CACHE_RAM",))


def config_for(engine: str, argv: list[str]) -> LaunchConfig:
    return parse_server_args(argv, engine=engine).config


@pytest.mark.parametrize("engine", ["llama-server", "llama-cpp-python", "llama-cli"])
def test_engine_defaults_are_the_base(engine: str) -> None:
    base = engine_defaults(engine)
    assert config_for(engine, []) == base
    cfg = config_for(engine, ["-c", "2048"])
    assert (cfg.n_ctx, cfg.given, cfg.n_batch) == (2048, frozenset({"n_ctx"}), base.n_batch)
    assert (cfg.flash_attn, cfg.n_parallel, cfg.fit) == (base.flash_attn, base.n_parallel, base.fit)


def test_llama_cpp_python_defaults_survive_unrelated_flags() -> None:
    cfg = config_for("llama-cpp-python", ["--no-mmap", "-b", "256"])
    assert (
        cfg.n_ctx,
        cfg.flash_attn,
        cfg.n_gpu_layers,
        cfg.n_batch,
        cfg.swa_full,
        cfg.load_mode,
    ) == (512, "off", 0, 256, True, "none")
    assert cfg.given == frozenset({"n_batch", "load_mode"})


def test_flag_table_agrees_with_the_memory_options() -> None:
    assert not NO_VALUE & ONE_VALUE and not (NO_VALUE | ONE_VALUE) & TWO_VALUES
    assert len(NO_VALUE | ONE_VALUE | TWO_VALUES) == 412  # every spelling registered for the server
    for flag, opt in _BY_FLAG.items():
        assert flag in (NO_VALUE if opt.convert is None else ONE_VALUE), flag
    assert not RETIRED_LOAD_FLAGS & (NO_VALUE | ONE_VALUE), "retired at 0c1e570"
    # not llama-server's
    assert {"-p", "--prompt", "--mmap", "-fitp", "-dio"}.isdisjoint(NO_VALUE | ONE_VALUE)


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("-c", 1),
        ("--ctx-size", 1),
        ("-fa", 1),
        ("--no-warmup", 0),
        ("--control-vector-layer-range", 2),
        ("--ctx_size", None),
        ("--no-mmap", None),
        ("--no-such-flag", None),
    ],
)
def test_arity_is_llama_servers(flag: str, expected: int | None) -> None:
    assert arity(flag) == expected


@pytest.mark.parametrize(
    "tokens, strict, expected",
    [
        (
            ["-c", "-1", "--no-warmup", "--control-vector-layer-range", "1", "9", "-x", "v"],
            False,
            [
                ("-c", ("-1",)),
                ("--no-warmup", ()),
                ("--control-vector-layer-range", ("1", "9")),
                ("-x", ()),
                ("v", ()),
            ],
        ),
        (["-t", "4", "-c"], False, [("-t", ("4",)), ("-c", ())]),
        (["-t", "4", "-c"], True, "-c expects a value, but nothing follows it"),
        ([], True, []),
    ],
)
def test_flag_groups_take_each_flags_values(
    tokens: list[str], strict: bool, expected: list | str
) -> None:
    if isinstance(expected, str):
        with pytest.raises(InputError, match=expected):
            list(flag_groups(tokens, strict=strict))
    else:
        assert list(flag_groups(tokens, strict=strict)) == expected


def test_flag_groups_ask_the_given_arity() -> None:
    groups = flag_groups(["-x", "v", "w"], lambda flag, rest: len(rest) if flag == "-x" else 0)
    assert list(groups) == [("-x", ("v", "w"))]
