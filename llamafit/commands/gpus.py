"""`llamafit gpus`: what hardware detection finds, and the devices the llama-server that would run
lists (issue #28), as a report that cli.py prints."""

from __future__ import annotations

from collections.abc import Mapping

from ..machine.server_devices import Listing
from .prepared import Report


def run_gpus(env: Mapping[str, str]) -> Report:
    from ..machine import hardware
    from ..machine.pick import server_devices_for
    from ..report.gpus import gpus_json, gpus_text
    from ..server import find

    hw = hardware.detect()
    notes: list[str] = []  # a server passed over, or its list not used (#37 F4)
    server = find.local_server(env, notes)
    binary = server.binary if server is not None else None
    asked: list[Listing] = []
    seen = server_devices_for(binary.path, asked)(env, hw) if binary is not None else None
    notes += [f"{a.failure}; plans use detection's devices" for a in asked if a.failure]
    path = binary.path if binary else None
    data = gpus_json(hw, seen, path, binary.identity if binary else None, notes)
    return Report(True, data, gpus_text(hw, seen, path, notes))
