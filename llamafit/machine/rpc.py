"""Ask llama.cpp RPC workers for their memory (an edge module: runs llama-server).

`llama-server --rpc HOST:PORT,... --list-devices` (the --rpc flag must come first: common/arg.cpp
registers the workers when it parses --rpc, and --list-devices prints and exits at once) prints
`RPCn: HOST:PORT (TOTAL MiB, FREE MiB free)` for each worker device (ggml-rpc.cpp
ggml_backend_rpc_get_device_memory asks the worker over the wire).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .bounded import bounded_int
from .server_devices import MAX_MIB

_LINE = re.compile(r"^\s*RPC\d+: (\S+) \((\d+) MiB, (\d+) MiB free\)")


def parse_list_devices(text: str) -> dict[str, tuple[int, int]]:
    """endpoint → (total bytes, free bytes) from `--list-devices` output (first device per
    worker)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        total, free = (bounded_int(m.group(i), MAX_MIB) for i in (2, 3)) if m else (None, None)
        if m and total is not None and free is not None:
            out.setdefault(m.group(1), (total << 20, free << 20))
    return out


def query_workers(
    server: str, endpoints: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0
) -> dict[str, tuple[int, int]]:
    """Memory of each reachable worker; unreachable ones are missing from the answer."""
    from .bounded import ask_tool

    answer = ask_tool([server, "--rpc", ",".join(endpoints), "--list-devices"], env, timeout_s)
    return {} if answer.failure else parse_list_devices(answer.text)
