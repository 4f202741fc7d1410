"""llama.cpp's own dry run of a config: `llama-fit-params -fitp on` beside the server (an edge
module).

llama-fit-params (tools/fit-params) loads the model without its weights' data and prints, per
device, the memory llama_params_fit projects (common/fit.cpp common_fit_print →
llama_get_device_memory_data): `DEVICE MODEL CONTEXT COMPUTE` in whole MiB on stdout, `Host` last.
It is asked the question llamafit answered: every flag that changes memory is passed explicitly,
because its defaults are not llama-server's (-np 1, no -kvu, no automatic slots).

Quirks of its estimate, kept out of the comparison (each from the llama.cpp function that causes
it):
- it has no -kvu (the tool does not register it in common/arg.cpp): a config with unified KV and
  several slots is asked without it, and compared with llamafit's figures for the same question;
- its compute figures reserve the graph with every token of the ubatch as an output
  (common_context_params_to_llama leaves n_outputs_max to llama_context, which makes it n_batch):
  for Gemma 3 270M its Host prints 514 MiB where llama-server allocates about 40, so the Host's
  total is shown, not judged; the compute column itself is compared with llamafit's figure for
  that same graph (fit/llama_check.py fit_params_rc, compute_checks).

Its answers are kept on disk (ask's `remember`, answer_path): a later plan of the same question
runs no process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..machine.bounded import ask_tool, bounded_int
from .find import _arity, parse_help
from .flags import flag_groups

# seconds for the dry run (it reads the model's metadata and tokenizer: 0.7-2.5 s measured) and
# for its --help; a hung tool costs this much, then the plan goes on without its answer (#37 F4)
FIT_TIMEOUT_S = 30.0
HELP_TIMEOUT_S = 5.0
# the largest figure per device believed, in MiB (64 TiB: far above any device llama.cpp can use);
# a row with more, or with more digits, is no estimate
MAX_MIB = 1 << 26
MAX_NAME = 300  # a device name llama.cpp prints: CUDA0, Vulkan1, RPC0[host:port], Host
TOOL = "llama-fit-params"
_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")
# llama-server flags that do not reach llama-fit-params (no memory, or llama-server's own)
_DROP = frozenset(
    {
        "--host",
        "--port",
        "--fit",
        "-fit",
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        "-lv",
        "--verbosity",
        "--log-verbosity",
        "--no-warmup",
        "-fitt",
        "--fit-target",
        "-fitc",
        "--fit-ctx",
    }
)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One device of llama.cpp's projection, in whole MiB as printed."""

    device: str  # Vulkan0, CUDA0, …, Host
    model_mib: int
    context_mib: int
    compute_mib: int

    @property
    def total_mib(self) -> int:
        return self.model_mib + self.context_mib + self.compute_mib


def parse_fit_print(text: str) -> tuple[Estimate, ...]:
    """The `-fitp on` rows of llama-fit-params' stdout. ValueError for a row no llama.cpp prints
    (a figure over MAX_MIB, a device name over MAX_NAME characters): the whole answer is not
    believed, rather than compared with a device missing."""
    out = []
    for line in text.splitlines():
        if m := _ROW.match(line):
            mib = [bounded_int(m.group(i), MAX_MIB) for i in (2, 3, 4)]
            if None in mib:
                raise ValueError(f"a figure of more than {MAX_MIB:,} MiB")
            if len(m.group(1)) > MAX_NAME:
                raise ValueError(f"a device name of more than {MAX_NAME} characters")
            model, context, compute = (int(n or 0) for n in mib)
            out.append(Estimate(m.group(1), model, context, compute))
    return tuple(out)


def tool_beside(server: str) -> str | None:
    """llama-fit-params in the server's own folder (the same build), or None."""
    path = os.path.join(os.path.dirname(os.path.realpath(server)), TOOL)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def question(argv: Sequence[str], tool_help: str) -> tuple[list[str], list[str]]:
    """llama-server's argv (server_argv: model first) as llama-fit-params' flags, each with its
    values, llama-server's own (host, port, --fit, -kvu) dropped; and the flags the tool does not
    list (then it cannot be asked the same question: a build without RPC has no --rpc)."""
    dialect = parse_help(tool_help)
    out: list[str] = []
    missing: list[str] = []
    for token, values in flag_groups(argv[1:], lambda flag, rest: _arity(flag, dialect, rest)):
        if token.startswith("-") and token not in _DROP:
            if dialect.has(token):
                out += [token, *values]
            else:
                missing.append(token)
    return out, missing


_ASKED: dict[
    tuple[str, ...], tuple[tuple[Estimate, ...], str | None]
] = {}  # this process's answers
ANSWER_FORMAT = 1


def ask(
    tool: str,
    flags: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float | None = None,
    *,
    remember: tuple[str, str] | None = None,
) -> tuple[tuple[Estimate, ...], str | None]:
    """(rows, None), or ((), why) when the tool fails. One question is asked once per process (a
    plan re-solved after learning a tensor limit usually asks the same again: 0.7-2.5 s each).
    `remember`: (the model's path in `flags`, what names the question beyond its flags: the build
    and the model's file as it is now); then an answer is kept on disk (answer_path) and a later
    plan of the same question runs no process: with `-fit off` the dry run allocates nothing and
    reads no free memory, so its answer depends only on the build, the model, the flags and the
    environment that _shapes_answer names."""
    key = (tool, *flags, *(f"{k}={v}" for k, v in sorted(env.items()) if _shapes_answer(k)))
    if key not in _ASKED:
        path = None if remember is None else answer_path(tool, key, remember)
        rows = None if path is None else _load_answer(path)
        if rows is not None:
            _ASKED[key] = rows, None
        else:
            _ASKED[key] = _ask(tool, flags, env, FIT_TIMEOUT_S if timeout_s is None else timeout_s)
            if path is not None and _ASKED[key][0]:
                _store_answer(path, _ASKED[key][0])
    return _ASKED[key]


def _shapes_answer(name: str) -> bool:
    """An environment variable that may change the dry run's answer beyond its flags: the devices
    a backend shows (CUDA_VISIBLE_DEVICES, GGML_VK_VISIBLE_DEVICES…), ggml's own settings, and
    the flags' LLAMA_ARG_* variables (common/arg.cpp reads them for any flag not given)."""
    return name.endswith("VISIBLE_DEVICES") or name.startswith(("GGML_", "LLAMA_ARG_"))


def answer_path(tool: str, key: Sequence[str], remember: tuple[str, str]) -> str | None:
    """Where the answer to one question is kept: cache_dir()/llama-fit-params/, named by the hash
    of the tool (real path, mtime, size: a rebuilt tool is asked again), the question with the
    model's path left out (a header-only model is asked through a stand-in of a fresh temporary
    name) and what names the build and the model (`remember`); None when the tool cannot be
    stat'ed."""
    import hashlib

    from ..paths import cache_dir

    try:
        real = os.path.realpath(tool)
        st = os.stat(real)
    except OSError:
        return None
    model, names = remember
    asked = ["<model>" if k == model else k for k in key[1:]]
    text = "\0".join([real, str(st.st_mtime_ns), str(st.st_size), names, *asked])
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache_dir(), "llama-fit-params", f"{digest}.json")


def _load_answer(path: str) -> tuple[Estimate, ...] | None:
    """A kept answer, or None: no file, or anything but a well-formed one of ours (asked again)."""
    import json

    from ..safe_io import SMALL_FILE, read_regular

    try:
        data = json.loads(read_regular(path, SMALL_FILE), parse_constant=lambda c: None)
        if not isinstance(data, dict) or data.get("format") != ANSWER_FORMAT:
            return None
        rows = tuple(Estimate(*row) for row in data["rows"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    good = all(
        isinstance(r.device, str)
        and 0 < len(r.device) <= MAX_NAME
        and all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_MIB
            for n in (r.model_mib, r.context_mib, r.compute_mib)
        )
        for r in rows
    )
    return rows if rows and good else None


def _store_answer(path: str, rows: Sequence[Estimate]) -> None:
    import json

    from ..safe_io import write_atomic

    data = {
        "format": ANSWER_FORMAT,
        "rows": [[r.device, r.model_mib, r.context_mib, r.compute_mib] for r in rows],
    }
    try:
        write_atomic(path, json.dumps(data).encode())
    except OSError:
        pass  # a read-only cache only costs asking again


def _ask(
    tool: str, flags: Sequence[str], env: Mapping[str, str], timeout_s: float
) -> tuple[tuple[Estimate, ...], str | None]:
    helped = ask_tool([tool, "--help"], env, HELP_TIMEOUT_S)
    if helped.failure:
        return (), helped.failure
    asked, missing = question(flags, helped.text)
    if missing:
        return (
            (),
            f"this build's {TOOL} has no {', '.join(missing)}: it cannot be asked the same "
            "question",
        )
    proc = ask_tool([tool, *asked, "-fitp", "on", "-fit", "off"], env, timeout_s)
    if proc.failure:
        return (), proc.failure
    try:
        rows = parse_fit_print(proc.stdout)
    except ValueError as e:
        return (), f"{TOOL} reports {e}: not believed"
    if not rows:
        tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()][
            -1:
        ] or ["no output"]
        return (), f"{TOOL} printed no estimate (exit {proc.returncode}): {tail[0][:120]}"
    return rows, None


# a header-only GGUF (metadata, tokenizer, tensor infos) is far smaller
STAND_IN_HEADER_LIMIT = 64 << 20


def stand_in(
    path: str, data_end_bytes: int, n_shards: int, folder: str
) -> tuple[str | None, str | None]:
    """(a sparse stand-in for a local header-only GGUF in `folder`, None) or (None, why not).

    llama-fit-params allocates nothing and reads no tensor data, but it opens the model: the
    stand-in is the real header, extended with zeros to the size its tensors need (os.truncate: no
    disk used). It needs a tokenizer llama.cpp accepts (llama_vocab::load): a header without
    tokenizer.ggml.model and tokens cannot be asked."""
    from ..reader.model import read_model
    from ..safe_io import read_regular, write_atomic

    if n_shards != 1:
        return None, "a header-only split model (its shards' stand-ins are not made here)"
    try:
        model = read_model(path)
        header = read_regular(path, STAND_IN_HEADER_LIMIT)
    except (OSError, ValueError) as e:
        return None, f"its header cannot be read: {e}"
    if (
        "tokenizer.ggml.model" not in model.metadata
        or "tokenizer.ggml.tokens" not in model.metadata
    ):
        return None, "the header-only file has no tokenizer, which llama.cpp needs to open it"
    out = os.path.join(folder, os.path.basename(path))
    write_atomic(out, header)
    os.truncate(out, max(data_end_bytes, len(header)))
    return out, None
