"""`llamafit gpus`: what hardware detection finds, and the devices the llama-server that would run
lists (issue #28), as a report that cli.py prints."""

from __future__ import annotations

from collections.abc import Mapping

from .prepared import Report


def run_gpus(env: Mapping[str, str]) -> Report:
    from ..machine import hardware
    from ..machine.pick import server_devices_for
    from ..report.gpus import gpus_json, gpus_text
    from ..server import find

    hw = hardware.detect()
    server = find.local_server(env)
    binary = server.binary if server is not None else None
    seen = server_devices_for(binary.path)(env, hw) if binary is not None else None
    path = binary.path if binary else None
    data = gpus_json(hw, seen, path, binary.identity if binary else None)
    return Report(True, data, gpus_text(hw, seen, path))
