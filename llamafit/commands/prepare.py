"""The command layer's one assembly: a `Request` (model, llama-server flags, machine, whose rules)
in, a `Prepared` problem out, shared by check, plan, run and script so that they agree.

`prepare` reads the GGUF header, parses the flags, builds the devices (given or detected), follows
the build of the server that will run, and applies the calibration file once, here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..facts.gguf_kind import gguf_kind
from ..facts.hparams import build_facts
from ..findings import Notice, as_notice
from ..fit.devices import named_devices
from ..fit.search import Target
from ..machine import pick
from ..machine.hardware import RpcQuery
from ..machine.pick import DetectFn, HostFn
from ..memory.calibration import compute_correction, parse_records
from ..memory.graph.replay import unknown_cc_devices
from ..memory.model import MemoryModel
from ..memory.overrides import check_override_devices
from ..memory.resolve import ResolvedConfig
from ..paths import calibration_path, is_url
from ..reader.model import GGUFModel, read_model
from ..server.flags import parse_server_args, refused_message, split_command_line
from ..server.side_flags import MODELLED
from .prepared import Prepared, Request
from .side_load import load_side_plan

if TYPE_CHECKING:
    from ..machine.server_devices import Listing
    from ..server.find import ServerChoice


_PROGRAMS = ("llama-server", "llama-cli", "server")


def _is_program(arg: str) -> bool:
    return os.path.basename(arg).startswith(_PROGRAMS)


def split_model_argument(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """`MODEL -- flags`, `-- flags`, or `-- llama-server …`: the model (if first) and the rest."""
    if args and not args[0].startswith("-") and not _is_program(args[0]):
        return args[0], list(args[1:])
    return None, list(args)


def _server_argv(command_line: str | None, server_args: Sequence[str]) -> list[str]:
    if command_line is not None:
        if server_args:
            raise InputError("give llama-server flags either after -- or with --cmd, not both")
        return split_command_line(command_line)
    if server_args and _is_program(server_args[0]):
        return list(server_args[1:])  # a pasted `llama-server …` already split by the shell
    return list(server_args)


def _rpc_query(env: Mapping[str, str]) -> RpcQuery:
    def query(endpoints: Sequence[str]) -> dict[str, tuple[int, int]]:
        from ..machine.rpc import query_workers
        from ..server.find import locate_server

        located = locate_server(None, env)
        return query_workers(located[0], endpoints, env) if located else {}

    return query


# what llama-server would make of a GGUF that is not a model (fetch.stores.gguf_kind), and what to
# give instead
NOT_A_MODEL = {
    "vocab": "has no tensors: a tokenizer-only GGUF (like llama.cpp's models/ggml-vocab-*.gguf) "
    "that llama-server cannot load; give the model's own GGUF",
    "empty": "has no tensors and no tokenizer: not a model llama-server can load",
    "adapter": "is a LoRA adapter, not a model; give the base model and the adapter with -- --lora "
    "ADAPTER",
    "imatrix": "is an importance matrix (llama-imatrix output), not a model; give the model's GGUF",
    "mmproj": "is a multimodal projector, not a model; give the model and the projector with -- "
    "--mmproj PROJECTOR",
}


def refuse_non_model(gguf: GGUFModel, name: str) -> None:
    """Bad input, one line: a GGUF llama-server would not load as its model (issue #16: a
    tokenizer-only file used to be planned as a model with no weights)."""
    kind = gguf_kind(gguf.metadata, len(gguf.tensors))
    if kind == "empty":
        build_facts(gguf)  # the header's own fault first (a missing key), as `inspect` says it
    if kind in NOT_A_MODEL:
        raise InputError(f"{name} {NOT_A_MODEL[kind]}")


def prepare(
    request: Request,
    *,
    server: ServerChoice | None = None,
    host_fn: HostFn | None = None,
    detect_fn: DetectFn | None = None,
) -> Prepared:
    """The model, flags and devices of `request`, planned by the rules of `server` (when one will
    run), with the calibration file's correction applied."""
    ref, env = request.model, request.env
    parsed = parse_server_args(
        _server_argv(ref.command_line, ref.server_args), env, engine=request.engine
    )
    if (
        parsed.unknown and request.build is None
    ):  # it would not start: no verdict for a command that cannot run
        raise InputError(refused_message(parsed.unknown))
    model = ref.model
    if model is None and not ref.demo:
        model = parsed.model
    elif parsed.model is not None and model is not None and parsed.model != model:
        raise InputError(f"two models given: {model} and -m {parsed.model}")
    if (model is not None or ref.demo) and parsed.hf_repo:
        raise InputError(f"two models given: {model or 'the demo model'} and -hf {parsed.hf_repo}")
    gguf = load_model(model, demo=ref.demo, hf_repo=parsed.hf_repo, env=env)
    refuse_non_model(gguf, model or parsed.hf_repo or "the model")
    facts = build_facts(gguf)
    server_notes: list[str] = []
    if server is None:
        server = _planned_server(request, detect_fn is None, server_notes)
    binary = server.binary if server is not None else None
    vulkan_fn, listing = pick.no_vulkan, None  # an injected detection stands alone
    asked: list[Listing] = []  # the server's --list-devices answer, asked once (server_listing)
    if detect_fn is None:
        vulkan_fn = pick.default_vulkan
        listing = pick.server_devices_for(binary.path if binary else None, asked)
    hw, devices = pick.pick_devices(
        request.machine,
        env,
        host_fn or pick.default_host,
        detect_fn or pick.default_detect,
        vulkan_fn,
        _rpc_query(env),
        listing,
    )
    if parsed.config.devices:  # -dev: the devices it names are the devices planned
        named = named_devices(devices, parsed.config.devices)
        n_rpc = len(devices) - len(hw.gpus)  # --rpc workers come first, without a GPUInfo
        hw = replace(hw, gpus=tuple(hw.gpus[i - n_rpc] for i in named if i >= n_rpc))
        devices = tuple(devices[i] for i in named)
    check_override_devices(parsed.config.override_tensor, devices)
    side = load_side_plan(
        parsed,
        gguf.metadata,
        facts,
        env,
        load_model=load_model,
        auto_mmproj=request.auto_mmproj,
        build=request.build,
    )
    target = Target(
        MemoryModel(facts),
        request.engine,
        request.build,
        devices,
        hw.host,
        request.machine.reserve_bytes,
        side=side,
    )
    # calibration is keyed by the server's identity when the plan is for its own devices (issue #28)
    identity = binary.identity if binary is not None and hw.source == "llama-server" else None
    p = Prepared(
        parsed,
        facts,
        target,
        hw,
        server=server,
        server_identity=identity,
        env=env,
        llama_check=request.llama_check,
    )
    if asked and asked[-1].failure:
        server_notes.append(f"{asked[-1].failure}; planned with detection's devices")
    p = replace(p, server_listing=asked[-1] if asked else None, server_notes=tuple(server_notes))
    if server is not None:
        p = for_server(p, server)
    from .speed_inputs import machine_speed

    p = replace(
        p,
        speed=machine_speed(
            p.target.gpus,
            hw.gpus,
            facts.architecture,
            env,
            passthrough=parsed.passthrough,
            bandwidth=request.machine.bandwidth_gbps,
        ),
    )
    from .llama_record import with_recorded

    return with_recorded(with_calibration(p, env))


def _planned_server(request: Request, detect: bool, notes: list[str]) -> ServerChoice | None:
    """The server a plan without one given is for: llama-cpp-python's embedded one for
    --engine llama-cpp-python (whatever llama-server is on PATH: its build and defaults), else
    the llama-server here (unless detection is injected)."""
    from ..server import find

    if request.engine == "llama-cpp-python":
        return find.ServerChoice("embedded", None, "--engine llama-cpp-python")
    return find.local_server(request.env, notes) if detect else None


def for_server(p: Prepared, server: ServerChoice) -> Prepared:
    """Plan by the rules of the server that will run: its build, and for llama-cpp-python's embedded
    server its own (one sequence, full-size SWA caches, n_batch outputs reserved, no prompt
    cache)."""
    p = with_server_build(p, server)
    if server.kind != "embedded":
        return p
    from ..memory.config import with_given

    # it has no -ot / --n-cpu-moe
    cfg = with_given(
        p.parsed.config,
        n_parallel=1,
        kv_unified=False,
        swa_full=True,
        cache_ram_mib=0,
        cpu_moe=False,
        n_cpu_moe=0,
        n_cpu_ffn=0,
        override_tensor=(),
    )
    from ..memory.resolve import PINNED_BUILD

    build = PINNED_BUILD if p.target.build is None else p.target.build  # the llama.cpp it vendors
    return replace(
        p,
        parsed=replace(p.parsed, config=cfg),
        target=replace(p.target, engine="llama-cpp-python", build=build),
    )


def with_server_build(p: Prepared, server: ServerChoice) -> Prepared:
    """The memory model follows the build of the server that will run (unless --llama-build
    says)."""
    binary = server.binary
    if binary is None or binary.build is None or p.target.build is not None:
        return p
    return replace(p, target=replace(p.target, build=binary.build))


def with_calibration(p: Prepared, env: Mapping[str, str]) -> Prepared:
    """Apply the compute correction learned from earlier runs of this build on these devices.
    None where the graph replay gives the compute buffers themselves (memory/graph/replay.py)."""
    from ..memory.graph.replay import covers_every_config
    from .records import read_newest

    if covers_every_config(p.facts, p.target.build, [g.backend for g in p.target.gpus]):
        return p

    path = calibration_path(env)
    skipped: list[str] = []
    try:
        text = read_newest(path)[0]  # a file over 16 MiB: its newest records (#37 F13)
    except FileNotFoundError:  # none yet: plan without corrections
        return p
    except (
        OSError
    ) as e:  # unreadable, a FIFO, a link, too large: plan without corrections, and say so
        unread = Notice("calibration_unread", {"path": path, "reason": e.strerror or str(e)})
        return replace(p, calibration_issue=unread)
    records = parse_records(text.splitlines(), skipped)
    if skipped:
        issue = Notice(
            "calibration_skipped", {"path": path, "count": len(skipped), "reason": skipped[0]}
        )
        p = replace(p, calibration_issue=issue)
    devices = [(d.name, d.backend) for d in p.target.gpus]
    found = compute_correction(
        records,
        devices=devices,
        build=p.target.build,
        architecture=p.facts.architecture,
        identity=p.server_identity,
    )
    if found is None or found.is_identity:
        return p
    return replace(
        p,
        target=replace(p.target, compute_scale=found.compute_scale),
        calibration=replace(found, source=path),
    )


def load_model(
    model: str | None, *, demo: bool, hf_repo: str | None, env: Mapping[str, str]
) -> GGUFModel:
    """A local path, `demo`, an http(s) URL, `hf://org/repo/file.gguf`, or `hf:org/repo[:quant]`
    (also llama-server's `-hf org/repo:quant` among the flags): only the header is read. A plain
    local file is read here, as open_model would read it, without loading the fetch code."""
    if model is not None and not demo and _plain_local_file(model):
        return read_model(model)
    from ..fetch.demo import resolve_model_arg
    from ..fetch.model_source import open_hf_repo, open_model
    from ..report.progress import ByteProgress

    progress = ByteProgress("reading the remote header")
    try:
        if model is None and not demo and hf_repo:
            return open_hf_repo(hf_repo, env, progress=progress)
        return open_model(resolve_model_arg(model, demo=demo), env, progress=progress)
    finally:
        progress.close()


def _plain_local_file(model: str) -> bool:
    """A path to a local file that no store reference (`ollama:`, `lmstudio:`, `hf:`), URL or demo
    name (fetch.demo.DEMO_NAMES, which hold no separator and no .gguf) can mean."""
    return (
        not is_url(model)
        and not model.startswith(("hf:", "ollama:", "lmstudio:"))
        and (os.sep in model or model.endswith(".gguf"))
        and os.path.isfile(model)
    )


# Flags that add memory llamafit does not model: they are passed through, and said so.
_EXTRA_MODELS = {
    "-mm": "mmproj",
    "--mmproj": "mmproj",
    "-mmu": "mmproj",
    "--mmproj-url": "mmproj",
    "-md": "draft",
    "--model-draft": "draft",
    "--lora": "lora",
    "--lora-scaled": "lora",
}


def flag_warnings(p: Prepared) -> list[Notice | str]:
    """What the flags and the calibration file add that the prediction does not show."""
    # unknown flags are an error (prepare) unless --llama-build names another build, whose flags
    # differ
    warnings: list[Notice | str] = [
        Notice("unknown_flag", {"flag": u}) for u in p.parsed.unknown if u.startswith("-")
    ]
    if p.parsed.env_used:  # llama-server reads LLAMA_ARG_*; so did the plan
        warnings.append(Notice("from_environment", {"names": sorted(p.parsed.env_used)}))
    warnings += list(p.target.side.notes) if p.target.side else []
    for flag in p.parsed.passthrough:
        if flag in _EXTRA_MODELS and flag not in MODELLED:
            warnings.append(Notice("unmodelled_model", {"flag": flag, "what": _EXTRA_MODELS[flag]}))
    cfg = p.parsed.config
    if cfg.rpc:  # -dev is modelled (prepare: named_devices)
        warnings.append(Notice("devices_not_modelled"))
    if not p.target.gpus and "n_gpu_layers" in p.parsed.config.given:
        warnings.append(Notice("ngl_without_gpu"))
    if p.hardware.source in (
        "llama-server",
        "vulkaninfo",
    ):  # the server's devices against detection (issue #28)
        warnings += [Notice("server_devices", {"message": n}) for n in p.hardware.notes]
    warnings += [Notice("server_unanswered", {"message": n}) for n in p.server_notes]
    warnings += recorded_notices(p.llama_recorded)
    if p.calibration:
        warnings.append(
            Notice(
                "calibration",
                {
                    "compute_scale": p.calibration.compute_scale,
                    "runs": p.calibration.runs,
                    "architecture": p.calibration.architecture,
                    "devices": [n for n, _ in p.calibration.devices],
                    "source": p.calibration.source,
                },
            )
        )
    if p.calibration_issue:
        warnings.append(p.calibration_issue)
    return warnings


def recorded_notices(recorded: Mapping[str, Any] | None) -> list[Notice | str]:
    """llama_cpp_recorded {device, room_bytes, kinds, max_tensor_bytes, checked}: per device, what
    the plan took from llama.cpp's earlier estimate for this build (llama_record.with_recorded)."""
    if not recorded:
        return []
    room = {r["device"]: r["bytes"] for r in recorded["room"]}
    limits = {t["device"]: t["max_tensor_bytes"] for t in recorded["tensor_limits"]}
    out: list[Notice | str] = []
    for name in dict.fromkeys([*limits, *room]):
        kinds = [d["kind"] for d in recorded["differences"] if d["device"] == name and d["applied"]]
        data = {"device": name, "room_bytes": room.get(name, 0), "kinds": kinds}
        data |= {"max_tensor_bytes": limits.get(name), "checked": recorded["checked"]}
        out.append(Notice("llama_cpp_recorded", data))
    return out


def warnings_for(p: Prepared, rc: ResolvedConfig | None) -> list[Notice | str]:
    """Every warning of a command: the model's (code model), llama.cpp's for this config (code
    config), then the flags' and the calibration's."""
    facts = [as_notice(w, "model") for w in p.facts.warnings]
    config = [as_notice(w, "config") for w in rc.warnings] if rc else []
    unknown = unknown_cc_devices(rc, p.target.gpus) if rc else ()
    cc = [Notice("cc_unknown", {"devices": list(unknown)})] if unknown else []
    if rc is not None and rc.fa_auto_off is not None:
        layer, device, fa_device = rc.fa_auto_off
        data = {"layer": layer, "device": device, "fa_device": fa_device}
        cc.append(Notice("fa_auto_off", data))
    return [*facts, *config, *cc, *flag_warnings(p)]
