"""Ask llama.cpp RPC workers for their memory (an edge module: runs llama-server).

`llama-server --rpc HOST:PORT,... --list-devices` (the --rpc flag must come first: common/arg.cpp
registers the workers when it parses --rpc, and --list-devices prints and exits at once) prints
`RPCn: HOST:PORT (TOTAL MiB, FREE MiB free)` for each worker device (ggml-rpc.cpp
ggml_backend_rpc_get_device_memory asks the worker over the wire).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence

_LINE = re.compile(r"^\s*RPC\d+: (\S+) \((\d+) MiB, (\d+) MiB free\)")


def parse_list_devices(text: str) -> dict[str, tuple[int, int]]:
    """endpoint → (total bytes, free bytes) from `--list-devices` output (first device per
    worker)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if m := _LINE.match(line):
            out.setdefault(m.group(1), (int(m.group(2)) << 20, int(m.group(3)) << 20))
    return out


def query_workers(
    server: str, endpoints: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0
) -> dict[str, tuple[int, int]]:
    """Memory of each reachable worker; unreachable ones are missing from the answer."""
    try:
        proc = subprocess.run(
            [server, "--rpc", ",".join(endpoints), "--list-devices"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_list_devices(proc.stdout + proc.stderr)
