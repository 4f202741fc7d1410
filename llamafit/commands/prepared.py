"""The command layer's types: a `Request` (the model and its flags, the machine, whose rules), the
`Prepared` problem that prepare.py makes of it, and the `Report` a command prints. Plain values,
apart from the code that makes them (prepare.py) and reads them (every command)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..machine.pick import MachineSpec

if TYPE_CHECKING:
    from ..facts.hparams import ModelFacts
    from ..findings import Notice
    from ..fit.search import Target
    from ..fit.speed import SpeedInputs
    from ..machine.hardware import Hardware
    from ..machine.server_devices import Listing
    from ..memory.calibration import Correction
    from ..server.find import ServerChoice
    from ..server.flags import ParsedServerArgs


@dataclass(frozen=True)
class ModelRef:
    """Which model and which llama-server flags: MODEL (a path, `demo`, a URL, `hf:`…) or --demo,
    the flags after `--`, or a whole pasted command line (--cmd)."""

    model: str | None = None
    demo: bool = False
    server_args: tuple[str, ...] = ()
    command_line: str | None = None


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
    # what llama.cpp's estimate showed earlier for this build and these devices, applied before the
    # solve (llama_record.with_recorded): the `llama_cpp_recorded` JSON; None when nothing applied
    llama_recorded: dict[str, Any] | None = None
    server_listing: Listing | None = None  # the server's --list-devices, when prepare asked it
    # why the server found was passed over, or its device list not used (#37 F4): one line each
    server_notes: tuple[str, ...] = ()
