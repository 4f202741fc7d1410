"""Reusable launch configs for a planned llama-server: sh, systemd, llama-swap, models.ini, docker.

Pure text generators (stdlib only); the caller writes the files. Every value is pinned: the
config replays `LaunchSpec.argv`, with --host/--port set from the spec (replaced where argv has
them, appended where it does not).
"""

from __future__ import annotations

import posixpath
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from llamafit.errors import InputError
from llamafit.safe_text import printable
from llamafit.server.flags import arity, flag_groups

KINDS = ("sh", "systemd", "llama-swap", "models-ini", "docker")
DOCKER_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"  # its entrypoint is llama-server
# per backend: the official image (llama.cpp docs/docker.md) and how its devices reach the container
DOCKER_BACKENDS = {
    "cpu": ("ghcr.io/ggml-org/llama.cpp:server", ""),
    "cuda": (DOCKER_IMAGE, "--gpus all"),
    "rocm": ("ghcr.io/ggml-org/llama.cpp:server-rocm", "--device /dev/kfd --device /dev/dri"),
    "vulkan": ("ghcr.io/ggml-org/llama.cpp:server-vulkan", "--device /dev/dri"),
}

_CTX = frozenset({"-c", "--ctx-size"})
_PATH_FLAGS = frozenset(
    {"-m", "--model", "-mm", "--mmproj", "-md", "--model-draft", "--spec-draft-model"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BREAKS = ("\n", "\r", "\0")

Group = tuple[str, tuple[str, ...]]  # a flag and the argv entries that are its values


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """A planned launch: the llama-server argv llamafit would exec, and what the plan says of it."""

    argv: tuple[str, ...]  # argv[0] is the server program
    model_path: str
    host: str = "127.0.0.1"
    port: int = 8080
    env: tuple[tuple[str, str], ...] = ()  # exported to the server, e.g. CUDA_VISIBLE_DEVICES
    name: str  # the model alias: llama-swap model ID, models.ini section
    predicted_mib: tuple[tuple[str, int], ...] = ()  # device name -> MiB
    llama_build: str | None = None
    n_ctx: int
    # (context, MiB needed on each GPU of the plan, CUDA0 first), for the sh guard
    ladder: tuple[tuple[int, tuple[int, ...]], ...] = ()
    backend: str = "cuda"  # the GPUs' backend, or cpu: picks the docker image

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise InputError("the launch argv is empty: it needs at least the server program")
        if not 0 < self.port < 65536:
            raise InputError(f"port {self.port} is not a TCP port (1-65535)")
        for name, _ in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise InputError(f"{name!r} is not an environment variable name")
        for context, mib in self.ladder:
            if context <= 0 or not mib or min(mib) < 0 or len(mib) != len(self.ladder[0][1]):
                raise InputError(
                    f"context ladder rung ({context}, {mib} MiB) is not a context and a size "
                    "per GPU"
                )
        for text in _texts(self):
            if any(ch in text for ch in _BREAKS):
                raise InputError(
                    f"{text!r}: a newline or NUL cannot be written into a launch config"
                )


def _texts(spec: LaunchSpec) -> Iterator[str]:
    """Every string of the spec that ends up in some config."""
    yield from spec.argv
    yield from (spec.model_path, spec.host, spec.name, spec.llama_build or "")
    yield from (text for pair in spec.env for text in pair)
    yield from (device for device, _ in spec.predicted_mib)


class _Raw(str):
    """A word already in the target syntax (a shell expansion, a llama-swap macro): never quoted."""


def _canon(flag: str) -> str:
    # arg.cpp does this to "--" flags
    return flag.replace("_", "-") if flag.startswith("--") else flag


def _groups(args: Sequence[str]) -> list[Group]:
    """Server arguments as flags with their values (arity from arg.cpp; unknown: no value)."""
    return list(flag_groups(args, lambda flag, _: arity(_canon(flag)) or 0, strict=True))


def _set_value(groups: list[Group], flags: frozenset[str], value: str) -> bool:
    """Give every `flags` group the single value `value`; False when argv has none."""
    hits = [i for i, (flag, _) in enumerate(groups) if _canon(flag) in flags]
    for i in hits:
        groups[i] = (groups[i][0], (value,))
    return bool(hits)


def _launch_groups(spec: LaunchSpec, host: str, port: str) -> list[Group]:
    groups = _groups(spec.argv[1:])
    for flag, value in (("--host", host), ("--port", port)):
        if not _set_value(groups, frozenset({flag}), value):
            groups.append((flag, (value,)))
    return groups


def launch_argv(
    spec: LaunchSpec, host: str | None = None, port: str | None = None
) -> tuple[str, ...]:
    """The argv every config runs (the sh script with LLAMAFIT_HOST/PORT = host/port)."""
    groups = _launch_groups(spec, spec.host if host is None else host, str(port or spec.port))
    return (spec.argv[0], *(word for flag, values in groups for word in (flag, *values)))


def _lines(groups: list[Group], quote: Callable[[str], str]) -> list[str]:
    """One line per flag and its values, each word quoted unless _Raw."""
    return [" ".join(w if isinstance(w, _Raw) else quote(w) for w in (f, *vs)) for f, vs in groups]


def _summary(spec: LaunchSpec, comment: str) -> str:
    devices = ", ".join(f"{device} {mib} MiB" for device, mib in spec.predicted_mib) or "none"
    build = spec.llama_build or "unknown"
    return (
        f"{comment} Planned by llamafit for {spec.name}: context {spec.n_ctx}, llama.cpp build "
        f"{build}.\n"
        f"{comment} Predicted GPU memory: {devices}.\n"
    )


def _plain_or(text: str, placeholder: str) -> str:
    """`text` when it is safe inside a one-line comment (letters, digits, . _ : -), else a
    placeholder."""
    return text if re.fullmatch(r"[\w.:-]+", text, flags=re.ASCII) else placeholder


def _verify_hint(spec: LaunchSpec, comment: str) -> str:
    """How to prove the deployed server survives a prompt that fills its context (docs/run.md,
    "verified")."""
    host = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
    host = f"[{host}]" if ":" in host else host
    return (
        f"{comment} After it starts, prove a full context once: llamafit check --verify "
        f"http://{host}:{spec.port}\n"
    )


# --- POSIX sh -------------------------------------------------------------------------------

_SH_HEAD = """#!/bin/sh
{summary}# LLAMAFIT_HOST / LLAMAFIT_PORT override the listen address; extra arguments go to the server.
set -eu

if [ -z "${{LLAMAFIT_HOST:-}}" ]; then LLAMAFIT_HOST={host}; fi
if [ -z "${{LLAMAFIT_PORT:-}}" ]; then LLAMAFIT_PORT={port}; fi
"""

# The ladder's MiB are per GPU, in the plan's order (CUDA0, CUDA1, …: CUDA_VISIBLE_DEVICES's order),
# so the guard reads one free figure per GPU the server sees: nvidia-smi --id takes
# CUDA_VISIBLE_DEVICES's indices or UUIDs and prints them in its own order (PCI order, as CUDA does
# with CUDA_DEVICE_ORDER=PCI_BUS_ID). A rung fits only when every GPU has its share free.
_SH_GUARD = """
# Guard: the largest planned context whose memory fits the free memory of every GPU (those of
# CUDA_VISIBLE_DEVICES, else all that nvidia-smi lists). Once the server is up, prove it survives
# a full context: llamafit check --verify http://HOST:PORT (docs/run.md: "verified").
llamafit_free_mib() {{
  if [ -n "${{CUDA_VISIBLE_DEVICES:-}}" ]; then set -- "--id=$CUDA_VISIBLE_DEVICES"; fi
  nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits "$@" 2>/dev/null |
    awk 'NF == 0 {{ next }} $1 !~ /^[0-9]+$/ {{ bad = 1 }} {{ s = s (n++ ? " " : "") $1 }}
      END {{ if (n && !bad) print s }}'
}}
llamafit_short() {{  # the first GPU with less free memory than its need in $1 (MiB per GPU), or nothing
  echo "$llamafit_free" | awk -v need="$1" '{{ n = split(need, w, " ")
    for (i = 1; i <= n; i++) if ($i + 0 < w[i] + 0) {{
      print "CUDA" i - 1 " has " $i " MiB free, needs " w[i] " MiB"; exit }} }}'
}}
LLAMAFIT_CTX={planned}
llamafit_free=
if command -v nvidia-smi >/dev/null 2>&1; then
  llamafit_free=$(llamafit_free_mib)
  if [ -z "$llamafit_free" ]; then
    echo "llamafit: nvidia-smi gave no free memory figure; keeping the planned context {planned}" >&2
  elif llamafit_n=$(echo "$llamafit_free" | awk '{{ print NF }}') && [ "$llamafit_n" -ne {n_gpus} ]; then
    llamafit_n="nvidia-smi lists $llamafit_n GPUs, the plan has {n_gpus}"
    echo "llamafit: $llamafit_n; keeping the planned context {planned}" >&2
    llamafit_free=
  fi
else
  echo "llamafit: nvidia-smi not found; keeping the planned context {planned}" >&2
fi
if [ -n "$llamafit_free" ]; then
{rungs}
  else
    echo "llamafit: context {ctx} does not fit: $(llamafit_short "{mib}")" >&2
    exit 1
  fi
fi
"""


def _guard(spec: LaunchSpec, groups: list[Group]) -> str:
    """The guard block; points the -c value of `groups` at $LLAMAFIT_CTX."""
    planned = [values[0] for flag, values in groups if _canon(flag) in _CTX]
    if not planned or not spec.ladder:
        raise InputError("the guard needs a -c value in the argv and the planner's context ladder")
    if not planned[-1].isdigit():
        raise InputError(f"-c {planned[-1]!r} is not a context size the guard can step down from")
    _set_value(groups, _CTX, _Raw('"$LLAMAFIT_CTX"'))
    ladder = [(ctx, " ".join(map(str, mib))) for ctx, mib in sorted(spec.ladder, reverse=True)]
    rungs = "\n".join(
        f'  {"elif" if i else "if"} [ -z "$(llamafit_short {shlex.quote(mib)})" ]; then '
        f"LLAMAFIT_CTX={ctx}"
        for i, (ctx, mib) in enumerate(ladder)
    )
    ctx, mib = ladder[-1]
    return _SH_GUARD.format(
        planned=int(planned[-1]), rungs=rungs, ctx=ctx, mib=mib, n_gpus=len(spec.ladder[0][1])
    )


def render_sh(spec: LaunchSpec, *, guard: bool = False) -> str:
    """A POSIX sh script that execs the planned argv (single-quoted words, `set --`, no eval)."""
    groups = _launch_groups(spec, _Raw('"$LLAMAFIT_HOST"'), _Raw('"$LLAMAFIT_PORT"'))
    text = _SH_HEAD.format(summary=_summary(spec, "#"), host=shlex.quote(spec.host), port=spec.port)
    text += "".join(f"export {name}={shlex.quote(value)}\n" for name, value in spec.env)
    if guard:
        text += _guard(spec, groups)
    words = [shlex.quote(spec.argv[0]), *_lines(groups, shlex.quote), '"$@"']
    return text + "\nset -- " + " \\\n  ".join(words) + '\nexec "$@"\n'


# --- systemd --------------------------------------------------------------------------------


def _systemd_quote(word: str, *, dollar: bool = True) -> str:
    """A double-quoted word (systemd.syntax(7): C escapes; systemd.unit(5): `%%` for a `%`;
    systemd.service(5) "Command lines": `$$` for a `$`, which Environment= does not expand)."""
    text = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"' + (text.replace("$", "$$") if dollar else text) + '"'


def _systemd_program_ok(program: str) -> bool:
    """load-fragment.c config_parse_exec: the prefixes -@:+! are read after unquoting, then the
    program must be an absolute path or a bare name (string_is_safe: no quotes, no backslash)."""
    if re.search(r"[\"'\\$]", program) or program.endswith("/"):
        return False
    return program.startswith("/") or ("/" not in program and program[0] not in "-@:+!")


def render_systemd(spec: LaunchSpec) -> str:
    """A systemd service unit running the planned argv."""
    argv = launch_argv(spec)
    if not _systemd_program_ok(argv[0]):
        raise InputError(
            f"{argv[0]!r}: systemd's ExecStart needs an absolute program path or a bare name"
        )
    environment = "".join(
        f"Environment={_systemd_quote(f'{name}={value}', dollar=False)}\n"
        for name, value in spec.env
    )
    return (
        f"{_summary(spec, '#')}"
        f"{_verify_hint(spec, '#')}"
        f"[Unit]\nDescription=llama-server {spec.name.replace('%', '%%')}\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        f"[Service]\nType=simple\n{environment}"
        f"ExecStart={' '.join(map(_systemd_quote, argv))}\n"
        "Restart=on-failure\nRestartSec=5\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


# --- llama-swap -----------------------------------------------------------------------------

_YAML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t"}


def _yaml_str(text: str) -> str:
    """A YAML double-quoted scalar (YAML 1.2 section 5.7: `\\`, `"`, and escapes for the rest)."""
    out = []
    for ch in text:
        if ch in _YAML_ESCAPES:
            out.append(_YAML_ESCAPES[ch])
        elif ch.isprintable() and ch != "\ufeff":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def render_llama_swap(spec: LaunchSpec) -> str:
    """A llama-swap `models:` entry (config.example.yaml: cmd, env, metadata); llama-swap puts the
    port in `${PORT}` and splits cmd with POSIX shell quoting (golib shlex.Posix)."""
    for text in _texts(spec):
        if "${" in text:  # llama-swap expands ${env.X} in the whole file and ${macro} in cmd
            raise InputError(f"{text!r}: llama-swap would read its '${{' as a macro")
    groups = _launch_groups(spec, spec.host, _Raw("${PORT}"))
    cmd = " ".join([shlex.quote(spec.argv[0]), *_lines(groups, shlex.quote)])
    env = [f"      - {_yaml_str(f'{name}={value}')}" for name, value in spec.env]
    devices = [f"        {_yaml_str(device)}: {mib}" for device, mib in spec.predicted_mib]
    build = "null" if spec.llama_build is None else _yaml_str(spec.llama_build)
    lines = [
        "# llama-swap model entry written by llamafit; merge it into the models: of config.yaml",
        "# After deploying, prove a full context once through llama-swap's upstream route:",
        "#   llamafit check --verify http://LLAMA_SWAP_HOST:PORT/upstream/"
        f"{_plain_or(spec.name, 'MODEL')}",
        "models:",
        f"  {_yaml_str(spec.name)}:",
        f"    cmd: {_yaml_str(cmd)}",
        "    env:" + ("" if env else " []"),
        *env,
        "    metadata:",
        "      predicted_mib:" + ("" if devices else " {}"),
        *devices,
        f"      llama_build: {build}",
        f"      n_ctx: {spec.n_ctx}",
    ]
    return "\n".join(lines) + "\n"


# --- llama-server router preset (models.ini) ------------------------------------------------

# tools/server/README.md "Model presets": one key per argument without leading dashes; short forms
# work too, but the preset writer (common/preset.cpp to_ini) uses each option's last spelling.
_INI_KEYS = {
    "-m": "model",
    "-c": "ctx-size",
    "-ngl": "n-gpu-layers",
    "--gpu-layers": "n-gpu-layers",
    "-fa": "flash-attn",
    "-ctk": "cache-type-k",
    "-ctv": "cache-type-v",
    "-ub": "ubatch-size",
    "-b": "batch-size",
    "-np": "parallel",
    "-ts": "tensor-split",
    "-ot": "override-tensor",
    "-ncmoe": "n-cpu-moe",
    "-cmoe": "cpu-moe",
    "-sm": "split-mode",
    "-mg": "main-gpu",
    "-dev": "device",
    "-fit": "fit",
    "-fitt": "fit-target",
    "-fitc": "fit-ctx",
    "-t": "threads",
    "-kvu": "kv-unified",
    "-nkvo": "no-kv-offload",
    "-mm": "mmproj",
    "-mmu": "mmproj-url",
    # side models: every spelling as the last one of its arg.cpp option, the key llama-server's own
    # writer uses (common/preset.cpp common_preset::to_ini) and the one older builds know too
    **dict.fromkeys(("-md", "--spec-draft-model"), "model-draft"),
    **dict.fromkeys(("-ngld", "--spec-draft-ngl", "--gpu-layers-draft"), "n-gpu-layers-draft"),
    **dict.fromkeys(("-devd", "--spec-draft-device"), "device-draft"),
    **dict.fromkeys(("-ctkd", "--spec-draft-type-k"), "cache-type-k-draft"),
    **dict.fromkeys(("-ctvd", "--spec-draft-type-v"), "cache-type-v-draft"),
    **dict.fromkeys(("-otd", "--spec-draft-override-tensor"), "override-tensor-draft"),
    **dict.fromkeys(("-ncmoed", "--spec-draft-n-cpu-moe", "--spec-draft-ncmoe"), "n-cpu-moe-draft"),
    **dict.fromkeys(("-cmoed", "--spec-draft-cpu-moe"), "cpu-moe-draft"),
    "-cd": "ctx-size-draft",
}
_ROUTER_OWNED = frozenset({"--host", "--port", "-a", "--alias"})  # server-models.cpp update_args
_INI_BAD_VALUE = re.compile(r"[;#]|^[ \t]|[ \t]$")  # preset.cpp's parser ends a value there


def _ini_options(spec: LaunchSpec) -> dict[str, str]:
    options: dict[str, str] = {}
    for flag, values in _groups(spec.argv[1:]):
        canon = _canon(flag)
        if canon in _ROUTER_OWNED:
            continue
        if arity(canon) is None or len(values) > 1:
            raise InputError(f"{flag}: a models.ini preset cannot carry this argument")
        key = _INI_KEYS.get(canon, canon.lstrip("-"))
        value = values[0] if values else "true"  # a switch (its "no-" spelling reads true too)
        if _INI_BAD_VALUE.search(value):
            raise InputError(
                f"{flag} {value!r}: a models.ini value cannot hold ';', '#' or edge spaces"
            )
        if key == "override-tensor" and key in options:
            value = f"{options[key]},{value}"  # repeated -ot flags add up, as a comma list does
        options[key] = value
    return options


def check_section_name(name: str) -> None:
    """A models.ini section name the router reads back as written (InputError otherwise)."""
    if not name.strip() or name != name.strip() or "]" in name or name == "*":
        raise InputError(f"{name!r} cannot be a models.ini section name")


def render_models_ini(spec: LaunchSpec) -> str:
    """A `[name]` section for `llama-server --models-preset FILE` (the router owns host and
    port)."""
    check_section_name(spec.name)
    env = " ".join(f"{name}={value}" for name, value in spec.env)
    head = _summary(spec, ";") + (
        f"; Set on the router (its instances inherit it): {env}\n" if env else ""
    )
    body = "".join(f"{key} = {value}\n" for key, value in _ini_options(spec).items())
    return f"{head}[{spec.name}]\n{body}"


# --- docker ---------------------------------------------------------------------------------


def _in_container(path: str, model_dir: str) -> str:
    """A host path under the model directory as the container sees it (under /models)."""
    rel = posixpath.relpath(path, model_dir) if posixpath.isabs(path) else ".."
    if rel == ".." or rel.startswith("../"):
        raise InputError(
            f"{path}: outside {model_dir}, the only directory mounted into the container"
        )
    return posixpath.join("/models", rel)


def check_docker_host(host: str) -> None:
    """A --host docker can publish on (InputError otherwise)."""
    if "," in host or host.endswith(".sock"):
        raise InputError(f"--host {host}: docker publishes one TCP address")


def _publish(spec: LaunchSpec) -> str:
    check_docker_host(spec.host)
    host = "127.0.0.1" if spec.host == "localhost" else spec.host  # docker -p takes an IP address
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{host}:{spec.port}:{spec.port}"


def render_docker(spec: LaunchSpec, *, image: str | None = None) -> str:
    """A `docker run` line: the model directory mounted read-only on /models, the server listening
    on 0.0.0.0 inside the container and published on the planned host (the image is llama-server,
    the official one for the backend unless `image` says)."""
    if spec.backend not in DOCKER_BACKENDS:
        raise InputError(
            f"docker containers cannot use {'Metal' if spec.backend == 'metal' else spec.backend}: "
            "use --format sh"
        )
    default_image, devices = DOCKER_BACKENDS[spec.backend]
    if not posixpath.isabs(spec.model_path):
        raise InputError(f"{spec.model_path}: docker needs an absolute model path to mount")
    model_dir = posixpath.dirname(posixpath.normpath(spec.model_path))
    if ":" in model_dir:
        raise InputError(f"{model_dir}: docker -v cannot mount a directory whose path holds ':'")
    groups = [
        (
            flag,
            tuple(_in_container(v, model_dir) for v in values)
            if _canon(flag) in _PATH_FLAGS
            else values,
        )
        for flag, values in _launch_groups(spec, "0.0.0.0", str(spec.port))
    ]
    words = [
        f"docker run --rm {devices}".rstrip(),
        f"-p {shlex.quote(_publish(spec))}",
        f"-v {shlex.quote(model_dir + ':/models:ro')}",
        *(f"-e {shlex.quote(f'{name}={value}')}" for name, value in spec.env),
        shlex.quote(image or default_image),
        *_lines(groups, shlex.quote),
    ]
    return " \\\n  ".join(words) + "\n"


_RENDERERS: dict[str, Callable[..., str]] = {
    "sh": render_sh,
    "systemd": render_systemd,
    "llama-swap": render_llama_swap,
    "models-ini": render_models_ini,
    "docker": render_docker,
}


def render(kind: str, spec: LaunchSpec, **opts: object) -> str:
    """The config of `kind` (one of KINDS); `opts` go to its renderer (guard=, image=)."""
    renderer = _RENDERERS.get(kind)
    if renderer is None:
        raise InputError(f"unknown launch config {kind!r}: one of {', '.join(KINDS)}")
    _check_expressible(kind, spec)
    return renderer(spec, **opts)


def _check_expressible(kind: str, spec: LaunchSpec) -> None:
    """Refuse, one line each, what `kind` cannot carry unchanged: control characters anywhere (a
    terminal would act on them, systemd refuses tabs, and a path changed in transit names another
    file), and for every format but sh, text that is not UTF-8 (units, YAML and INI are UTF-8)."""
    words = [
        *launch_argv(spec),
        spec.model_path,
        spec.host,
        spec.name,
        *(v for pair in spec.env for v in pair),
    ]
    for word in words:
        if bad := next((c for c in word if unicodedata.category(c) == "Cc"), None):
            raise InputError(
                f"{kind} output refused: {printable(word)} contains the control character "
                f"{printable(bad)}; rename it"
            )
        if kind != "sh" and any("\udc80" <= c <= "\udcff" for c in word):
            raise InputError(
                f"{kind} output refused: {printable(word)} is not valid UTF-8, which {kind} files "
                "must be; rename it (or use --format sh)"
            )


# --- many models: a llama-swap config and router presets (fit/many.py packs the sets) ---------


@dataclass(frozen=True)
class Entry:
    name: str
    argv: tuple[str, ...]  # argv[0] the server program
    gpu_mib: tuple[tuple[str, int], ...]
    n_ctx: int


def swap_groups(sets: Sequence[Sequence[str]]) -> list[tuple[str, bool, list[str]]]:
    """(group name, swap, members): sets of two or more run together, the rest swap."""
    groups = [
        (f"together-{i + 1}", False, list(s)) for i, s in enumerate(x for x in sets if len(x) > 1)
    ]
    singles = [s[0] for s in sets if len(s) == 1]
    return groups + ([("swap", True, singles)] if singles else [])


def render_llama_swap_many(
    entries: Sequence[Entry],
    sets: Sequence[Sequence[str]],
    *,
    host: str = "127.0.0.1",
    env: tuple[tuple[str, str], ...] = (),
) -> str:
    """One llama-swap config.yaml (its documented schema: macros,
    models.<id>.cmd/proxy/ttl/env/metadata, groups.<id>.swap/exclusive/members); llama-swap assigns
    ${PORT}; `env` (the device selection) goes to every model."""
    programs = sorted({e.argv[0] for e in entries})
    macros = {
        p: f"server{i + 1}" if len(programs) > 1 else "llama-server" for i, p in enumerate(programs)
    }
    lines = [
        "# llama-swap config written by llamafit: every model fitted; groups from the GPU "
        "memory each needs",
        "macros:",
    ]
    lines += [f"  {_yaml_str(m)}: {_yaml_str(p)}" for p, m in macros.items()]
    lines.append("models:")
    for e in entries:
        spec = LaunchSpec(
            argv=e.argv, model_path="", name=e.name, n_ctx=e.n_ctx, host=host, env=env
        )
        _check_expressible("llama-swap", spec)
        for text in (*e.argv, *(v for pair in env for v in pair)):
            if "${" in text:
                raise InputError(f"{text!r}: llama-swap would read its '${{' as a macro")
        groups = _launch_groups(spec, host, _Raw("${PORT}"))
        cmd = " ".join([f"${{{macros[e.argv[0]]}}}", *_lines(groups, shlex.quote)])
        lines += [
            f"  {_yaml_str(e.name)}:",
            f"    cmd: {_yaml_str(cmd)}",
            f"    proxy: {_yaml_str(f'http://{host}:${{PORT}}')}",
            "    ttl: 0",
            *(["    env:"] if env else []),
            *(f"      - {_yaml_str(f'{name}={value}')}" for name, value in env),
            "    metadata:",
            f"      n_ctx: {e.n_ctx}",
            "      predicted_mib:" + ("" if e.gpu_mib else " {}"),
        ]
        lines += [f"        {_yaml_str(d)}: {mib}" for d, mib in e.gpu_mib]
    lines.append("groups:")
    for name, swap, members in swap_groups(sets):
        lines += [
            f"  {_yaml_str(name)}:",
            f"    swap: {'true' if swap else 'false'}",
            "    exclusive: true",
            "    members:",
            *(f"      - {_yaml_str(m)}" for m in members),
        ]
    return "\n".join(lines) + "\n"


def render_models_ini_many(
    entries: Sequence[Entry],
    sets: Sequence[Sequence[str]],
    *,
    env: tuple[tuple[str, str], ...] = (),
) -> str:
    """A router preset file (`llama-server --models-preset FILE`): one fitted section per model;
    which models fit at once in the comments (run the router with --models-max as said there), and
    the device selection (`env`) the router must be started with."""
    together = [s for s in sets if len(s) > 1]
    router = LaunchSpec(argv=("llama-server",), model_path="", name="router", n_ctx=1, env=env)
    _check_expressible("models-ini", router)
    start = " ".join([*(f"{name}={shlex.quote(value)}" for name, value in env), "llama-server"])
    head = [
        "; llama-server router presets written by llamafit: each section fitted",
        "; fit in memory at once: "
        + ("; ".join(", ".join(s) for s in together) or "none (one model at a time)"),
        f"; start with: {start} --models-preset FILE --models-max {max_at_once(sets)}",
        "",
    ]
    body = []
    for e in entries:
        spec = LaunchSpec(
            argv=e.argv, model_path="", name=e.name, n_ctx=e.n_ctx, predicted_mib=e.gpu_mib
        )
        body.append(render_models_ini(spec))
    return "\n".join(head) + "\n".join(body)


def max_at_once(sets: Sequence[Sequence[str]]) -> int:
    """--models-max for the router: everything when all fit in one set, else one at a time (the
    router evicts by count, not by memory)."""
    return len(sets[0]) if len(sets) == 1 else 1
