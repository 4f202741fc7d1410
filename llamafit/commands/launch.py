"""`run`'s types: the options of a launch (`RunOptions`) and what will run (`Launch`: the argv,
why this server, the choice it is checked against). Plain values, shared by run.py, run_verify.py
and the records a run writes (records.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..fit.solver import Choice


@dataclass(frozen=True)
class RunOptions:
    host: str = "127.0.0.1"
    port: int | None = 8080  # None: --port auto
    server: str | None = None  # a path, "embedded", or None (find one)
    dry_run: bool = False
    api_key_file: str | None = None
    verbose: bool = False
    load_timeout_s: float | None = None  # None: default_load_timeout(the model's size)
    verify: bool = False  # after Ready, fill the planned context once (run_verify.py)


@dataclass(frozen=True)
class Launch:
    """What will run: the argv, why this server, and the prediction to check it against."""

    argv: list[str]
    env: dict[str, str]
    kind: str  # "llama-server" | "embedded"
    why: str
    choice: Choice
    url: str
    server_info: dict[str, Any]
    # /health: llama-server's, and llamafit.server.embedded_main's for llama-cpp-python's server
    health_path: str
