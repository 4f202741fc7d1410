"""`llamafit check` as a function: flags in, breakdown, verdict and ways out back (no I/O here
beyond reading the GGUF header; the host's RAM comes in through `detect_host`)."""

from __future__ import annotations

import os

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import check_report
from .calibration import compute_correction, parse_records
from .paths import calibration_path
from .demo import resolve_model_arg
from .devices import DeviceSpec
from .hardware import Hardware, fit_devices, given, parse_gpu_option, parse_rpc_option
from .errors import InputError
from .facts import ModelFacts, build_facts
from .gguf_model import GGUFModel
from .memory import MemoryModel
from .resolve import resolve
from .server_flags import ParsedServerArgs, parse_server_args, refused_message, split_command_line
from .search import Target
from .ways_out import suggestions


@dataclass(frozen=True)
class CheckReport:
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
    from .hardware import detect_host

    return detect_host()


@dataclass(frozen=True)
class Prepared:
    """A model, the user's llama-server flags and the machine, ready for check or plan."""

    parsed: ParsedServerArgs
    facts: ModelFacts
    target: Target
    hardware: Hardware

    @property
    def bandwidths(self) -> tuple[int | None, ...]:
        """Memory bandwidth per device of target.gpus (RPC workers first: unknown)."""
        n_rpc = sum(1 for d in self.target.gpus if d.backend == "rpc")
        return (None,) * n_rpc + tuple(g.bandwidth_bytes_per_s for g in self.hardware.gpus)


def _default_detect(env: Mapping[str, str]) -> Hardware:
    from .hardware import detect

    return detect(env)


def parse_ram_option(text: str) -> DeviceSpec:
    """`--ram 64GiB`: plan for another machine's host memory (all of it usable)."""
    from .devices import host, parse_size

    if text.strip().replace(".", "", 1).isdigit():
        raise InputError(f"--ram {text.strip()} has no unit; did you mean {text.strip()}GiB?")
    size = parse_size(text)
    if size < 1 << 20:
        raise InputError(f"--ram {text.strip()}: host RAM must be at least 1 MiB")
    return host(size, size)


def machine(gpu_spec: str | None, backend: str, use: str, rpc: str | None, env: Mapping[str, str],
            host_fn: Callable[[], DeviceSpec], detect_fn: Callable[[Mapping[str, str]], Hardware],
            ram: str | None = None) -> tuple[Hardware, tuple[DeviceSpec, ...]]:  # fmt: skip
    """--gpu (sizes, catalog names, cpu) or detection; --rpc workers come first, as llama.cpp orders them;
    --ram replaces the host's memory."""
    ram_host = parse_ram_option(ram) if ram is not None else None
    if gpu_spec is None:
        hw = detect_fn(env)
    else:
        hw = given(parse_gpu_option(gpu_spec, backend=backend), ram_host or host_fn())
    if ram_host is not None:
        hw = replace(hw, host=ram_host)
    specs = fit_devices(hw.gpus, use=use if gpu_spec is None else "total", rpc=parse_rpc_option(rpc) if rpc else ())
    return hw, specs


def prepare(*, model: str | None, demo: bool, gpu_spec: str | None, engine: str, build: int | None,
            backend: str, reserve_bytes: int, command_line: str | None, server_args: Sequence[str],
            env: Mapping[str, str], use: str = "free", rpc: str | None = None, ram: str | None = None,
            host_fn: Callable[[], DeviceSpec] | None = None,
            detect_fn: Callable[[Mapping[str, str]], Hardware] | None = None) -> Prepared:  # fmt: skip
    parsed = parse_server_args(_server_argv(command_line, server_args), env, engine=engine)
    if parsed.unknown:
        raise InputError(refused_message(parsed.unknown))
    if model is None and not demo:
        model = parsed.model
    elif parsed.model is not None and model is not None and parsed.model != model:
        raise InputError(f"two models given: {model} and -m {parsed.model}")
    facts = build_facts(load_model(model, demo=demo, hf_repo=parsed.hf_repo, env=env))
    hw, devices = machine(gpu_spec, backend, use, rpc, env, host_fn or _default_host, detect_fn or _default_detect,
                          ram)  # fmt: skip
    target = Target(MemoryModel(facts), engine, build, devices, hw.host, reserve_bytes)
    return Prepared(parsed, facts, target, hw)


def with_calibration(p: Prepared, env: Mapping[str, str]) -> tuple[Prepared, str | None]:
    """Apply the compute correction learned from earlier runs of this build on these devices."""
    path = calibration_path(env)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            records = parse_records(f)
    except OSError:  # none yet, or unreadable: plan without corrections
        return p, None
    devices = [(d.name, d.backend) for d in p.target.gpus]
    found = compute_correction(records, devices=devices, build=p.target.build, architecture=p.facts.architecture)
    if found is None or found.is_identity:
        return p, None
    return replace(p, target=replace(p.target, compute_scale=found.compute_scale)), found.note(path)


def _progress(done: int) -> None:
    import sys

    sys.stderr.write(f"\rreading the remote header: {done / 2**20:,.1f} MiB")
    sys.stderr.flush()


def load_model(model: str | None, *, demo: bool, hf_repo: str | None, env: Mapping[str, str]) -> GGUFModel:
    """A local path, `demo`, an http(s) URL, `hf://org/repo/file.gguf`, or `hf:org/repo[:quant]`
    (also llama-server's `-hf org/repo:quant` among the flags): only the header is read."""
    from .model_source import open_hf_repo, open_model

    if model is None and not demo and hf_repo:
        return open_hf_repo(hf_repo, env, progress=_progress)
    return open_model(resolve_model_arg(model, demo=demo), env, progress=_progress)


# Flags that add memory llamafit does not model: they are passed through, and said so.
_EXTRA_MODELS = {"-mm": "a multimodal projector", "--mmproj": "a multimodal projector", "-mmu": "a multimodal projector",
                 "--mmproj-url": "a multimodal projector", "-md": "a draft model", "--model-draft": "a draft model",
                 "--lora": "a LoRA adapter", "--lora-scaled": "a LoRA adapter"}  # fmt: skip


def flag_warnings(p: Prepared) -> list[str]:
    warnings = []
    for flag in p.parsed.passthrough:
        if flag in _EXTRA_MODELS:
            warnings.append(f"{flag}: {_EXTRA_MODELS[flag]} is loaded too; its memory is not in this prediction")
    cfg = p.parsed.config
    if cfg.devices or cfg.rpc:
        warnings.append("-dev/--rpc among the llama-server flags are passed on but not modelled: describe the "
                        "devices to llamafit with --gpu and --rpc")  # fmt: skip
    if not p.target.gpus and "n_gpu_layers" in p.parsed.config.given:
        warnings.append("--gpu cpu: -ngl has no effect without a GPU")
    return warnings


def run_check(**kwargs: Any) -> CheckReport:
    """Resolve the user's flags, predict every buffer, and say whether it fits (and if not, how)."""
    p = prepare(**kwargs)
    t = p.target
    rc = resolve(p.parsed.config, p.facts, engine=t.engine, build=t.build)
    breakdown = t.model.estimate(rc, t.gpus, t.host, reserve_bytes=t.reserve_bytes)
    ways = [] if breakdown.fits else suggestions(t, p.parsed.config, n_ctx=rc.n_ctx)
    warnings = list(p.facts.warnings) + list(rc.warnings) + flag_warnings(p)
    if breakdown.host_pages:
        host = breakdown.devices[-1]
        warnings.append(f"host RAM: this config uses {host.used_bytes >> 20:,} MiB on the host but "
                        f"{(host.usable_bytes or 0) >> 20:,} MiB is available; the CPU weights are memory-mapped "
                        "and will page from disk (slow)")  # fmt: skip
    extra = {"llama_build": t.build, "unknown_flags": list(p.parsed.unknown), "passthrough": list(p.parsed.passthrough)}
    data = check_report.to_json(p.facts, rc, breakdown, warnings=warnings, ways_out=ways, extra=extra)
    text = check_report.to_text(p.facts, rc, breakdown, warnings=warnings, ways_out=ways)
    return CheckReport(breakdown.fits, data, text)
