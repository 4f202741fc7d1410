"""Parse llama-server's own command line and LLAMA_ARG_* environment into a LaunchConfig.

Mirrors common_params_parse_ex (common/arg.cpp at 0c1e570): the environment applies first, then
argv from left to right, so a flag beats its variable and the last of a repeated flag wins; -ot
and --rpc add up instead, and -ncmoe/-ncffn keep the largest N (each adds CPU overrides for blocks
0..N-1). A flag's value is the next argv entry whatever it starts with (`-ngl -1`), and
`--long_name` means `--long-name`. llama.cpp has no `--flag=value` form (`error: invalid
argument: --ctx-size=8192`) and retired --mmap/--no-mmap/--mlock/-dio/-ndio for -lm: such
tokens are applied as meant (onto load_mode for the retired ones) and also listed in `unknown`,
since this llama-server would refuse them. Not modelled: the config.ini files llama.cpp reads
before the environment, and the checks that need the backends (-dev names, -ot buffer types).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..memory.config import (
    LOAD_MODES,
    N_PARALLEL_AUTO,
    NGL_ALL,
    NGL_AUTO,
    POOLING_TYPES,
    SPLIT_MODES,
    LaunchConfig,
    engine_defaults,
    with_given,
)
from ..memory.placement import check_override_regex
from ..reader.ggml_types import KV_CACHE_TYPES
from .flag_table import NO_VALUE, ONE_VALUE, TWO_VALUES


@dataclass(frozen=True, slots=True)
class ParsedServerArgs:
    config: LaunchConfig  # memory-relevant values over the engine's defaults, `given` recorded
    model: str | None  # -m/--model (or LLAMA_ARG_MODEL)
    hf_repo: str | None  # -hf/-hfr/--hf-repo (or LLAMA_ARG_HF_REPO), not resolved here
    # known flags that do not affect memory, verbatim with their values
    passthrough: tuple[str, ...]
    unknown: tuple[str, ...]  # what this llama-server would refuse, verbatim, in order
    env_used: tuple[str, ...]  # the LLAMA_ARG_* variables that took effect


Convert = Callable[[str, str], Any]  # (value, who) -> field value; `who` is the flag or variable

# common_arg_utils::is_truthy / is_falsey / is_autoy (common/arg.cpp): exact, case-sensitive
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")
_AUTOY = ("auto", "-1")
_MAX_DEVICES = 16  # llama_max_devices() (src/llama.cpp); -ts/-fitt refuse that many values
_INT = re.compile(r"\s*[+-]?\d+\s*")  # std::stoi, without the trailing junk it would ignore
_UINT = re.compile(r"\s*\+?\d+\s*")
_NUMBER = re.compile(r"\s*\+?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")  # a non-negative std::stof


def _int(value: str, who: str, minimum: int = -(2**31)) -> int:
    if not _INT.fullmatch(value):
        raise InputError(f"{who} expects an integer, got {shorten(value)!r}")
    if (
        len(value.strip().lstrip("+-").lstrip("0")) > 19
    ):  # before int(): Python refuses 4,300+ digits
        raise InputError(f"{who} is out of range, got {shorten(value.strip())}")
    number = int(value)
    if number >= 2**31 or number < -(2**31):
        raise InputError(f"{who} is out of range, got {value.strip()}")
    if number < minimum:
        raise InputError(f"{who} must be >= {minimum}, got {number}")
    return number


def shorten(text: str, limit: int = 40) -> str:
    """A user's value as quoted in an error: long ones cut, so the error stays one short line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _at_least(minimum: int) -> Convert:
    return lambda value, who: _int(value, who, minimum)


def _n_parallel(value: str, who: str) -> int:
    # arg.cpp refuses 0; tools/server/server.cpp treats any n_parallel < 0 as auto
    number = _int(value, who)
    if number == 0:
        raise InputError(f"{who} expects a number of slots or -1 (auto), got 0")
    return N_PARALLEL_AUTO if number < 0 else number


def _gpu_layers(value: str, who: str) -> int:
    if value in ("auto", "all"):
        return NGL_AUTO if value == "auto" else NGL_ALL
    if not _INT.fullmatch(value):
        raise InputError(f"{who} expects an integer, 'auto' or 'all', got {value!r}")
    # -1 is the default, left to --fit; libllama offloads every layer for any other negative
    # (llama_model::n_gpu_layers in src/llama-model.cpp)
    return max(_int(value, who), NGL_ALL)


def _one_of(choices: tuple[str, ...]) -> Convert:
    def convert(value: str, who: str) -> str:
        if value not in choices:
            raise InputError(f"{who} expects one of {', '.join(choices)}, got {value!r}")
        return value

    return convert


def _flash_attn(value: str, who: str) -> str:
    for mode, words in (("on", _TRUTHY), ("off", _FALSEY), ("auto", _AUTOY)):
        if value in words:
            return mode
    raise InputError(f"{who} expects on, off or auto, got {value!r}")


def _on_off(value: str, who: str) -> bool:
    # -fit, and parse_bool_value for the variable of a flag with a negative spelling
    if value not in _TRUTHY + _FALSEY:
        raise InputError(f"{who} expects on or off, got {value!r}")
    return value in _TRUTHY


def _per_device(value: str, who: str, pattern: re.Pattern[str], what: str) -> list[str]:
    parts = re.split(r"[,/]+", value)  # -ts and -fitt split on std::regex "[,/]+"
    if any(
        len(part.strip()) > 24 for part in parts
    ):  # before int()/float(): no 4,300-digit numbers, no inf
        raise InputError(f"{who} is out of range, got {shorten(value)!r}")
    if not all(pattern.fullmatch(part) for part in parts):
        raise InputError(f"{who} expects {what} separated by ',' or '/', got {value!r}")
    if len(parts) >= _MAX_DEVICES:
        raise InputError(f"{who} takes at most {_MAX_DEVICES - 1} values, got {len(parts)}")
    return parts


def _tensor_split(value: str, who: str) -> tuple[float, ...]:
    split = tuple(
        float(part) for part in _per_device(value, who, _NUMBER, "non-negative proportions")
    )
    if not all(
        math.isfinite(x) for x in split
    ):  # 1e999: std::stof throws out_of_range (common/arg.cpp)
        raise InputError(f"{who} is out of range, got {shorten(value)!r}")
    return split


def _fit_target(value: str, who: str) -> tuple[int, ...]:
    # one value applies to every device; with several, devices past the list keep 1024
    return tuple(int(part) for part in _per_device(value, who, _UINT, "MiB values"))


def _names(value: str, who: str, what: str) -> tuple[str, ...]:
    names = tuple(value.split(","))
    if not all(names):
        raise InputError(f"{who} expects {what} separated by ',', got {value!r}")
    return names


def _devices(value: str, who: str) -> tuple[str, ...]:
    # parse_device_list (arg.cpp): "none" alone means no offload; CPU is not an offload device
    names = _names(value, who, "device names")
    if names != ("none",) and any(name == "none" or name.lower() == "cpu" for name in names):
        raise InputError(f"{who} expects GPU device names or 'none' alone, got {value!r}")
    return names


def _overrides(value: str, who: str) -> tuple[tuple[str, str], ...]:
    # parse_tensor_buffer_overrides (arg.cpp): split on ',', each at its first '='
    pairs = [item.partition("=") for item in value.split(",")]
    if not all(sep and buft for _, sep, buft in pairs):
        raise InputError(
            f"{who} expects <tensor regex>=<buffer type>[,...], got {shorten(value)!r}"
        )
    for regex, _, _ in pairs:
        check_override_regex(regex)
    return tuple((regex, buft) for regex, _, buft in pairs)


def _text(value: str, who: str) -> str:
    return value


def _join(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    return old + new


@dataclass(frozen=True, slots=True)
class _Opt:
    """One add_opt(common_arg(...)) of arg.cpp that matters here."""

    field: str  # a LaunchConfig field, or "model" / "hf_repo"
    flags: tuple[str, ...]
    env: str  # .set_env(...)
    convert: Convert | None = None  # None: a switch (handler_void, or handler_bool with `negs`)
    negs: tuple[str, ...] = ()  # args_neg; their variable is the LLAMA_ARG_NO_* twin of `env`
    merge: Callable[[Any, Any], Any] | None = None  # how a repeat combines (None: replaces)


_OPTS = (
    _Opt("model", ("-m", "--model"), "LLAMA_ARG_MODEL", _text),
    _Opt("hf_repo", ("-hf", "-hfr", "--hf-repo"), "LLAMA_ARG_HF_REPO", _text),
    _Opt("n_ctx", ("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE", _at_least(0)),
    _Opt("flash_attn", ("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN", _flash_attn),
    _Opt("type_k", ("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K", _one_of(KV_CACHE_TYPES)),
    _Opt("type_v", ("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V", _one_of(KV_CACHE_TYPES)),
    _Opt(
        "n_gpu_layers",
        ("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "LLAMA_ARG_N_GPU_LAYERS",
        _gpu_layers,
    ),
    _Opt("n_batch", ("-b", "--batch-size"), "LLAMA_ARG_BATCH", _at_least(1)),
    _Opt("n_ubatch", ("-ub", "--ubatch-size"), "LLAMA_ARG_UBATCH", _at_least(1)),
    _Opt("n_parallel", ("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL", _n_parallel),
    _Opt(
        "kv_unified",
        ("-kvu", "--kv-unified"),
        "LLAMA_ARG_KV_UNIFIED",
        negs=("-no-kvu", "--no-kv-unified"),
    ),
    _Opt("swa_full", ("--swa-full",), "LLAMA_ARG_SWA_FULL"),
    _Opt(
        "kv_offload",
        ("-kvo", "--kv-offload"),
        "LLAMA_ARG_KV_OFFLOAD",
        negs=("-nkvo", "--no-kv-offload"),
    ),
    _Opt("op_offload", ("--op-offload",), "", negs=("--no-op-offload",)),  # no environment variable
    _Opt("repack", ("--repack",), "LLAMA_ARG_REPACK", negs=("-nr", "--no-repack")),
    _Opt("no_host", ("--no-host",), "LLAMA_ARG_NO_HOST"),
    _Opt("embeddings", ("--embedding", "--embeddings"), "LLAMA_ARG_EMBEDDINGS"),
    _Opt("pooling", ("--pooling",), "LLAMA_ARG_POOLING", _one_of(POOLING_TYPES)),
    _Opt("cpu_moe", ("-cmoe", "--cpu-moe"), "LLAMA_ARG_CPU_MOE"),
    _Opt("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"), "LLAMA_ARG_N_CPU_MOE", _at_least(0), merge=max),
    _Opt("n_cpu_ffn", ("-ncffn", "--n-cpu-ffn"), "LLAMA_ARG_N_CPU_FFN", _at_least(0), merge=max),
    _Opt(
        "override_tensor",
        ("-ot", "--override-tensor"),
        "LLAMA_ARG_OVERRIDE_TENSOR",
        _overrides,
        merge=_join,
    ),
    _Opt("tensor_split", ("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT", _tensor_split),
    _Opt("split_mode", ("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE", _one_of(SPLIT_MODES)),
    _Opt("main_gpu", ("-mg", "--main-gpu"), "LLAMA_ARG_MAIN_GPU", _int),
    _Opt("devices", ("-dev", "--device"), "LLAMA_ARG_DEVICE", _devices),
    _Opt(
        "rpc",
        ("--rpc",),
        "LLAMA_ARG_RPC",
        lambda v, who: _names(v, who, "host:port servers"),
        merge=_join,
    ),
    _Opt("load_mode", ("-lm", "--load-mode"), "LLAMA_ARG_LOAD_MODE", _one_of(LOAD_MODES)),
    _Opt("cache_ram_mib", ("-cram", "--cache-ram"), "LLAMA_ARG_CACHE_RAM", _int),
    _Opt("fit", ("-fit", "--fit"), "LLAMA_ARG_FIT", _on_off),
    _Opt("fit_target_mib", ("-fitt", "--fit-target"), "LLAMA_ARG_FIT_TARGET", _fit_target),
)
_BY_FLAG = {flag: opt for opt in _OPTS for flag in opt.flags + opt.negs}
_ARITY = {
    **dict.fromkeys(NO_VALUE, 0),
    **dict.fromkeys(ONE_VALUE, 1),
    **dict.fromkeys(TWO_VALUES, 2),
}


def arity(flag: str) -> int | None:
    """How many values llama-server's `flag` takes (common/arg.cpp, as flag_table.py lists it); None
    for a flag it does not have. The spelling as given: `--long_name` is canonicalised by the
    caller."""
    return _ARITY.get(flag)


def _known_or_none(flag: str, rest: Sequence[str]) -> int:
    return _ARITY.get(flag, 0)


def flag_groups(
    tokens: Sequence[str],
    arity_of: Callable[[str, Sequence[str]], int] = _known_or_none,
    *,
    strict: bool = False,
) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each flag of `tokens` with the values it takes, left to right: a value is the next token
    whatever it starts with (common/arg.cpp). `arity_of(flag, rest)` says how many (default: llama-
    server's arity, none for an unknown flag). A flag whose values are missing raises InputError
    when `strict`, else comes with the values there are."""
    i = 0
    while i < len(tokens):
        end = i + 1 + arity_of(tokens[i], tokens[i + 1 :])
        if strict and end > len(tokens):
            raise InputError(f"{tokens[i]} expects a value, but nothing follows it")
        yield tokens[i], tuple(tokens[i + 1 : end])
        i = end


# The spellings that -lm replaced (PR #20834; gone at 0c1e570), as changes to (mmap, mlock, dio)
_RETIRED_LOAD = {
    "--mmap": (True, None, None),
    "--no-mmap": (False, None, None),
    "--mlock": (None, True, None),
    "-dio": (None, None, True),
    "--direct-io": (None, None, True),
    "-ndio": (None, None, False),
    "--no-direct-io": (None, None, False),
}
RETIRED_LOAD_FLAGS = frozenset(_RETIRED_LOAD)  # fine for builds before PR #20834
# each load mode as (mmap, mlock, dio); mmap None is auto (mmap where every device allows it)
_LOAD_PARTS = {
    "auto": (None, False, False),
    "none": (False, False, False),
    "mmap": (True, False, False),
    "mlock": (False, True, False),
    "mmap+mlock": (True, True, False),
    "dio": (None, False, True),
}


def _retired_load_mode(current: str, flag: str) -> str:
    old, change = _LOAD_PARTS[current], _RETIRED_LOAD[flag]
    mmap, mlock, dio = (
        new if new is not None else was for was, new in zip(old, change, strict=True)
    )
    if dio:  # DirectIO replaced mmap in the builds that had -dio
        return "dio"
    if mlock:
        return "mlock" if mmap is False else "mmap+mlock"
    return {None: "auto", True: "mmap", False: "none"}[mmap]


def _set(values: dict[str, Any], opt: _Opt, value: Any) -> None:
    old = values.get(opt.field)
    values[opt.field] = value if opt.merge is None or old is None else opt.merge(old, value)


def _from_env(opt: _Opt, env: Mapping[str, str]) -> tuple[str, Any] | None:
    """(variable, value) when `opt`'s variable takes effect (common_arg::get_value_from_env)."""
    negative = opt.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1)
    if opt.negs and negative in env:  # any value of LLAMA_ARG_NO_* means false
        return negative, False
    raw = env.get(opt.env)
    if raw is None:
        return None
    if opt.convert is not None:
        return opt.env, opt.convert(raw, opt.env)
    if opt.negs:
        return opt.env, _on_off(raw, opt.env)
    return (opt.env, True) if raw in _TRUTHY else None  # a handler_void runs only when truthy


def _value(argv: Sequence[str], i: int, flag: str) -> str:
    if i >= len(argv):
        raise InputError(f"{flag} expects a value, but nothing follows it")
    return argv[i]


@dataclass(slots=True)
class _Scan:
    values: dict[str, Any]
    passthrough: list[str]
    unknown: list[str]
    on_cli: set[str]  # fields set by a flag


def _scan_one(argv: Sequence[str], i: int, scan: _Scan, base: LaunchConfig) -> int:
    """Handle the flag at argv[i]; return the index of the next flag."""
    token = argv[i]
    flag, eq, inline = token.partition("=")
    if flag.startswith("--"):
        flag = flag.replace("_", "-")  # parse_cli_args does this to every "--" argument
    opt = _BY_FLAG.get(flag)
    if opt is not None and not eq:
        if opt.convert is None:  # a switch: true unless a negative spelling
            _set(scan.values, opt, flag in opt.flags)
        else:
            _set(scan.values, opt, opt.convert(_value(argv, i + 1, token), token))
        scan.on_cli.add(opt.field)
        return i + (1 if opt.convert is None else 2)
    if (
        opt is not None and opt.convert is not None
    ):  # --flag=value: meant, but refused by llama-server
        _set(scan.values, opt, opt.convert(inline, flag))
        scan.on_cli.add(opt.field)
    elif (
        flag in ("--rerank", "--reranking") and not eq
    ):  # arg.cpp: params.embedding = true, pooling RANK
        scan.values.update(embeddings=True, pooling="rank")
        scan.on_cli.update(("embeddings", "pooling"))
        return i + 1  # a switch llama-server takes, not an unknown flag
    elif flag in _RETIRED_LOAD and not eq:
        scan.values["load_mode"] = _retired_load_mode(
            scan.values.get("load_mode", base.load_mode), flag
        )
        scan.on_cli.add("load_mode")
    elif flag in _ARITY and not eq:
        end = i + 1 + _ARITY[flag]
        _value(argv, end - 1, token)
        scan.passthrough.extend(argv[i:end])
        return end
    elif token.startswith("-") and not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        scan.unknown.extend(argv[i : i + 2])  # an unknown flag keeps the value it seems to take
        return i + 2
    scan.unknown.append(token)
    return i + 1


def parse_server_args(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, engine: str = "llama-server"
) -> ParsedServerArgs:
    """llama-server's flags (without the program name) and environment (None: none) as a launch.

    The flag set is llama-server's at 0c1e570 whatever the engine; `engine` picks the defaults.
    """
    base = engine_defaults(engine)
    scan = _Scan({}, [], [], set())
    applied: list[tuple[_Opt, str]] = []
    for opt in _OPTS:
        found = _from_env(opt, env or {})
        if found is not None:
            _set(scan.values, opt, found[1])
            applied.append((opt, found[0]))
    i = 0
    while i < len(argv):
        i = _scan_one(argv, i, scan, base)
    env_used = [
        name for opt, name in applied if opt.merge is not None or opt.field not in scan.on_cli
    ]
    model, hf_repo = scan.values.pop("model", None), scan.values.pop("hf_repo", None)
    if (
        raw := (env or {}).get("GGML_OP_OFFLOAD_MIN_BATCH")
    ) is not None:  # the backends read it with atoi
        m = re.match(r"\s*[-+]?\d+", raw)
        scan.values["op_offload_min_batch"] = int(m.group(0)) if m else 0
    config = with_given(base, **scan.values)
    return ParsedServerArgs(
        config, model, hf_repo, tuple(scan.passthrough), tuple(scan.unknown), tuple(env_used)
    )


def _closest_flag(flag: str) -> str | None:
    """The llama-server flag a mistyped one most likely meant: a long flag starting with its stem
    (`-ctx` → --ctx-size), else the closest spelling; shown with its short form where it has one."""
    import difflib

    stem = flag.lstrip("-")
    longs = sorted((f for f in _ARITY if f.startswith("--" + stem)), key=len)
    found = (
        longs[0]
        if stem and longs
        else next(iter(difflib.get_close_matches(flag, list(_ARITY), n=1)), None)
    )
    if found is None:
        return None
    opt = _BY_FLAG.get(found)
    short = next((f for f in opt.flags if not f.startswith("--")), None) if opt else None
    return f"{short} ({found})" if short and found.startswith("--") else found


def refused_message(unknown: Sequence[str]) -> str:
    """Why llama-server would not start with these flags (ParsedServerArgs.unknown), with the
    fix."""
    token = next((t for t in unknown if t.startswith("-")), unknown[0])
    flag, eq, value = token.partition("=")
    if eq and flag in _ARITY:
        return f"llama-server would not start: it has no flag {token}; write {flag} {value}"
    close = _closest_flag(flag) if flag.startswith("-") else None
    return f"llama-server would not start: it has no flag {token}" + (
        f"; did you mean {close}?" if close else ""
    )


_PROGRAMS = ("llama-server", "llama-cli", "server")
_FIRST_WORD = re.compile(r"""\s*("[^"]*"|'[^']*'|\S+)""")


def split_command_line(text: str) -> list[str]:
    """A pasted `llama-server …` line as argv (POSIX quoting; `\\` + newline joins lines).

    A leading program path (Windows ones too) named llama-server*, llama-cli* or server* is dropped.
    """
    joined = re.sub(r"\\\r?\n", "", text)  # a line continuation disappears, as in sh
    first = _FIRST_WORD.match(joined)
    if first and re.split(r"[\\/]", first.group(1).strip("'\""))[-1].startswith(_PROGRAMS):
        joined = joined[first.end() :]  # before shlex, which would eat a Windows path's backslashes
    try:
        return shlex.split(joined)
    except ValueError as err:
        raise InputError(f"cannot split the command line: {err}") from None
