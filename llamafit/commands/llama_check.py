"""Ask the llama.cpp that will run about the chosen config before anything loads (issue #28):
llama-fit-params beside the server, on the server's own devices, with every flag that changes
memory given explicitly; its figures beside llamafit's (fit/llama_check.py) for plan, check and
run."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from ..findings import Notice
from ..fit.llama_check import (
    PRINT_SLACK_BYTES,
    agrees,
    compare,
    compute_checks,
    differences,
    fit_params_rc,
    logits_quirk_bytes,
    room_per_device,
)
from ..memory.config import LaunchConfig, with_given
from ..memory.model import Breakdown
from ..memory.resolve import ResolvedConfig, resolve
from ..paths import is_url
from ..report.progress import status_line
from ..server.argv import server_argv
from ..units import MIB
from .prepared import Prepared


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal: the progress line is shown only there (tests set it)."""
    return sys.stderr.isatty()


def _same_question(
    p: Prepared, cfg: LaunchConfig, rc: ResolvedConfig, breakdown: Breakdown
) -> tuple[LaunchConfig, ResolvedConfig, Breakdown, list[str]]:
    """The config llama-fit-params can be asked (it has no -kvu: several unified slots are asked as
    separate streams) and llamafit's breakdown for exactly that."""
    if not (rc.kv_unified and rc.n_seq_max > 1):
        return cfg, rc, breakdown, []
    t = p.target
    asked = with_given(cfg, kv_unified=False, n_parallel=rc.n_seq_max)
    rc2 = resolve(asked, p.facts, engine=t.engine, build=t.build)
    rc2 = t.model.settle_flash_attn(rc2, t.devices_of(asked), t.host)  # -fa auto, as rc's
    rc2 = t.side.main_rc(rc2, build=t.build) if t.side else rc2
    note = (
        f"asked for {rc.n_seq_max} slots without -kvu ({'llama-fit-params'} has no -kvu); "
        "llamafit's figures are for the same"
    )
    return asked, rc2, t.breakdown(asked, rc2), [note]


def _our_names(theirs: list[str], rpc: list[str]) -> dict[str, str]:
    """llama-fit-params' device names → llamafit's: Host is the CPU; its RPC0, RPC1… (one device per
    --rpc worker, in order: ggml-rpc.cpp ggml_backend_rpc_add_server) are our RPC0[host:port] in
    order."""
    out = {}
    k = 0
    for name in theirs:
        if name == "Host":
            out[name] = "CPU"
        elif name.startswith("RPC") and "[" not in name and k < len(rpc):
            out[name], k = rpc[k], k + 1
        else:
            out[name] = name
    return out


def _names_question(p: Prepared, build: str) -> str:
    """What names a question to llama-fit-params beyond its flags (fit_check.ask's `remember`):
    the build, and the model's files as they are now (real path, size, mtime of each shard)."""
    from ..reader.model import shard_paths

    try:
        files = shard_paths(p.facts.path)
    except (OSError, ValueError):
        files = [p.facts.path]
    parts = [build]
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            parts.append(f"{os.path.realpath(f)}:?")
            continue
        parts.append(f"{os.path.realpath(f)}:{st.st_size}:{st.st_mtime_ns}")
    return "\0".join(parts)


def compute_notices(check: dict[str, Any] | None, gpus: list[str]) -> list[Notice]:
    """llama_compute_differs {device, llama_mib, llamafit_bytes, difference_bytes, compute_source,
    taken}: a device where llama.cpp's compute column and llamafit's figure for the same
    question disagree beyond print precision (`taken`: whose figure the plan takes, the larger
    one: "llama.cpp" on a GPU where llama.cpp's is larger (larger_wins), else "llamafit"; the
    host is judged, but no room is kept there, as for weights and KV)."""
    out = []
    for c in (check or {}).get("compute", []):
        if c["agrees"]:
            continue
        wins = c["difference_bytes"] > 0 and c["device"] in gpus
        out.append(
            Notice(
                "llama_compute_differs",
                {
                    "device": c["device"],
                    "llama_mib": c["mib"],
                    "llamafit_bytes": c["llamafit_bytes"],
                    "difference_bytes": c["difference_bytes"],
                    "compute_source": c["compute_source"],
                    "taken": "llama.cpp" if wins else "llamafit",
                },
            )
        )
    return out


def llama_cpp_check(
    p: Prepared, cfg: LaunchConfig, rc: ResolvedConfig, breakdown: Breakdown
) -> dict[str, Any] | None:
    """The `llama_cpp_check` JSON object, or None when there is nothing to ask: off
    (--no-llama-check), a plan for given devices (--gpu), or a server that sees no GPU."""
    binary = p.server.binary if p.server is not None else None
    if (
        not p.llama_check
        or binary is None
        or p.hardware.source != "llama-server"
        or not p.target.gpus
    ):
        return None
    from ..server.fit_check import TOOL, stand_in, tool_beside

    base: dict[str, Any] = {"tool": TOOL, "build": binary.identity, "devices": [], "agrees": None}
    tool = tool_beside(binary.path)
    if tool is None:
        return base | {"skipped": f"no {TOOL} beside {os.path.basename(binary.path)}"}
    if is_url(p.facts.path):
        return base | {"skipped": "a remote model: its header is not kept here for a stand-in"}
    with tempfile.TemporaryDirectory(prefix="llamafit-stand-in-") as folder:
        model = p.facts.path
        if p.facts.incomplete:  # header only: the real header, zero-filled to its size (sparse)
            made, why = stand_in(p.facts.path, p.facts.data_end_bytes, p.facts.n_shards, folder)
            if made is None:
                return base | {"skipped": why}
            model = made
        return _asked(p, cfg, rc, breakdown, tool, model, base)


def _asked(
    p: Prepared,
    cfg: LaunchConfig,
    rc: ResolvedConfig,
    breakdown: Breakdown,
    tool: str,
    model: str,
    base: dict[str, Any],
) -> dict[str, Any]:
    from ..server.fit_check import TOOL, ask

    asked, arc, ab, notes = _same_question(p, cfg, rc, breakdown)
    rpc = [d.name[d.name.index("[") + 1 : -1] for d in p.target.gpus if d.backend == "rpc"]
    argv = server_argv(model, asked, arc) + ["-np", str(arc.n_seq_max)]
    if rpc and not asked.rpc:  # the workers, as render_plan passes them
        argv += ["--rpc", ",".join(rpc)]
    tty = stderr_is_tty()  # the line shows on a terminal only
    status_line(f"asking llama.cpp ({TOOL}) about this config…", tty=tty)
    try:
        rows, failed = ask(tool, argv, p.env, remember=(model, _names_question(p, base["build"])))
    finally:
        status_line(None, tty=tty)
    if failed:
        return base | {"skipped": failed}
    names = _our_names(
        [r.device for r in rows], [d.name for d in p.target.gpus if d.backend == "rpc"]
    )
    quirk = logits_quirk_bytes(p.facts.n_vocab, arc.n_ubatch, arc.n_outputs_max)
    # llamafit's compute for llama-fit-params' own graph (its worst-case logits included)
    frc = fit_params_rc(arc)
    fb = ab if frc == arc else p.target.breakdown(asked, frc)
    computed = compute_checks([(names[r.device], r.compute_mib) for r in rows], fb)
    checks = compare(
        [(names[r.device], r.total_mib, r.model_mib) for r in rows],
        ab,
        quirk,
        {c.device: c.agrees for c in computed},
    )
    base["model_mib"] = {names[r.device]: r.model_mib for r in rows}
    base["context_mib"] = {names[r.device]: r.context_mib for r in rows}
    base["compute"] = [
        {
            "device": c.device,
            "mib": c.llama_mib,
            "llamafit_bytes": c.llamafit_bytes,
            "difference_bytes": c.difference_bytes,
            "compute_source": c.source,
            "agrees": c.agrees,
        }
        for c in computed
    ]
    diffs = differences(
        [(names[r.device], r.model_mib, r.context_mib, r.compute_mib) for r in rows],
        ab,
        [g.name for g in p.target.gpus],
        fb,
    )
    base["differences"] = [{"device": d.device, "kind": d.kind, "bytes": d.bytes} for d in diffs]
    if p.server_identity is not None:  # later plans for this build and device start from it
        from ..report.json_parts import config_json
        from .records import difference_entries, store

        differs = {c.device for c in checks if c.judged and not c.agrees}
        store(p.server_identity, difference_entries(p, diffs, config_json(arc), differs))
    devices = [
        {
            "device": c.device,
            "mib": c.llama_mib,
            "llamafit_mib": c.llamafit_mib,
            "judged": c.judged,
            "agrees": c.agrees,
        }
        | ({"logits_quirk_mib": c.quirk_mib} if c.agrees and not c.close else {})
        for c in checks
    ]
    return base | {"path": tool, "devices": devices, "agrees": agrees(checks), "notes": notes}


def learn_tensor_limit(
    p: Prepared, cfg: LaunchConfig, rc: ResolvedConfig, check: dict[str, Any] | None
) -> tuple[Prepared, list[str]] | None:
    """When llama.cpp put less model on a Vulkan device of unknown tensor limit than llamafit did,
    the limit that reproduces llama.cpp's placement (tensor_limit_candidates), and the prepared
    problem with it; None when there is nothing to learn."""
    from dataclasses import replace

    from ..fit.llama_check import tensor_limit_candidates

    if not check or not check.get("model_mib"):
        return None
    t = p.target
    unknown = [
        i for i, g in enumerate(t.gpus) if g.backend == "vulkan" and g.max_tensor_bytes is None
    ]
    asked, arc, ab, _ = _same_question(p, cfg, rc, t.breakdown(cfg, rc))
    ours = {d.name: d for d in ab.devices}
    learned: list[str] = []
    limits: dict[str, int] = {}
    gpus = list(t.gpus)
    for i in unknown:
        name = gpus[i].name
        theirs = check["model_mib"].get(name)
        if theirs is None or name not in ours or ours[name].weights_bytes / MIB <= theirs + 1:
            continue
        for bound in tensor_limit_candidates([x.n_bytes for x in p.facts.tensors]):
            trial = tuple(
                replace(g, max_tensor_bytes=bound) if j == i else g for j, g in enumerate(gpus)
            )
            b = replace(t, gpus=trial).breakdown(asked, arc)
            mine = next(d for d in b.devices if d.name == name).weights_bytes / MIB
            if abs(mine - theirs) <= 1:
                gpus, limits[name] = list(trial), bound
                learned.append(
                    f"{name}: llama.cpp keeps {ours[name].weights_bytes / MIB - mine:,.0f} MiB of "
                    "weights off it (a tensor limit; no vulkaninfo): planned with a "
                    f"{bound // MIB:,} MiB limit"
                )
                break
    if not learned:
        return None
    if p.server_identity is not None:  # later plans for this build and device start from it
        from .records import limit_entries, store

        store(p.server_identity, limit_entries(p, limits))
    hw_gpus = tuple(
        replace(g, spec=gpus[[d.name for d in gpus].index(g.spec.name)])
        if g.spec.name in [d.name for d in gpus]
        else g
        for g in p.hardware.gpus
    )
    kept = tuple(n for n in p.hardware.notes if "vulkaninfo" not in n)
    hardware = replace(p.hardware, gpus=hw_gpus, notes=kept + tuple(learned))
    return replace(p, target=replace(t, gpus=tuple(gpus)), hardware=hardware), learned


_ROOM_FOR = {"model": "weights", "context": "KV", "compute": "compute"}


def larger_wins(
    p: Prepared, cfg: LaunchConfig, rc: ResolvedConfig, check: dict[str, Any] | None
) -> tuple[Prepared, list[str]] | None:
    """Where llama.cpp's estimate holds more weights, KV/recurrent state or compute on a GPU than
    llamafit's (the buffers its loader sizes exactly: llama_model_loader, llama_kv_cache; and its
    scheduler's compute buffers, compared at llama-fit-params' own graph: fit_params_rc), the plan
    keeps that much more room there (the device's overhead_bytes) and is solved again; None when
    it does not, or when the room recorded from an earlier check of this build (llama_record)
    already covers it."""
    from dataclasses import replace

    from ..fit.llama_check import Difference
    from .llama_record import recorded_room

    if not check or check.get("agrees") is not False or not check.get("differences"):
        return None
    differs = {d["device"] for d in check["devices"] if d["judged"] and not d["agrees"]}
    rows = [d for d in check["differences"] if d["device"] in differs]
    diffs = [Difference(d["device"], d["kind"], d["bytes"]) for d in rows]
    room, had = room_per_device(diffs), recorded_room(p)
    gpus, notes = list(p.target.gpus), []
    for i, g in enumerate(gpus):
        more = room.get(g.name, 0) - had.get(g.name, 0)
        if more > PRINT_SLACK_BYTES:
            gpus[i] = replace(g, overhead_bytes=g.overhead_bytes + more)
            kinds = [_ROOM_FOR[d.kind] for d in diffs if d.device == g.name and d.room_bytes]
            notes.append(
                f"{g.name}: llama.cpp's own estimate holds {more / MIB:,.0f} MiB more "
                f"{' and '.join(kinds)} than llamafit's: planned with that much more room"
            )
    if not notes:
        return None
    hardware = replace(p.hardware, notes=p.hardware.notes + tuple(notes))
    return replace(
        p, target=replace(p.target, gpus=tuple(gpus)), hardware=hardware, llama_adjusted=True
    ), notes
