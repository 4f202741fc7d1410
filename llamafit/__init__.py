"""llamafit: fit llama.cpp to the memory you have.

The library, for notebooks and scripts (the command line is `llamafit.cli`)::

    import llamafit as lf

    facts = lf.build_facts(lf.read_model("model.gguf"))
    target = lf.make_target(facts, "24GiB")
    result = lf.plan(target, lf.LaunchConfig(), lf.Policy(prefer="context"))
    print(lf.breakdown_text(result.choice.breakdown))
    print(lf.verdict_text(result.verdict))

The names in `__all__` are imported on first use, so `import llamafit` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The llama.cpp whose rules llamafit mirrors: llama-cpp-python 0.3.36's vendor/llama.cpp. A rule
# cites its source at this commit as `llama.cpp: <path> <function or symbol>` (e.g. `# llama.cpp:
# src/llama-context.cpp llama_context::output_reserve`); "0c1e570" in a docstring is this commit.
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

_API = {
    "__version__": "version",
    "read_model": "reader.model",  # a GGUF's header(s), any shard of a split model
    # also http(s) URLs and Hugging Face names (only the header is read)
    "open_model": "fetch.model_source",
    "build_facts": "facts.hparams",
    "ModelFacts": "facts.hparams",
    "MemoryModel": "memory.model",
    "Breakdown": "memory.model",
    "DeviceSpec": "machine.devices",
    "host": "machine.devices",
    "LaunchConfig": "memory.config",
    # a LaunchConfig with values pinned as if given as llama-server flags
    "with_given": "memory.config",
    "resolve": "memory.resolve",
    "Target": "fit.search",
    "make_target": "api",
    "Policy": "fit.solver",
    "Choice": "fit.solver",
    "NoFit": "fit.solver",
    "solve": "fit.solver",
    "plan": "fit.explain",
    "PlanResult": "fit.explain",
    "Verdict": "findings",
    "breakdown_text": "api",
    "verdict_text": "report.plan",
    "server_argv": "server.argv",
    "LlamafitError": "errors",
}
__all__ = [
    "LLAMA_CPP_COMMIT",
    "__version__",
    "read_model",
    "open_model",
    "build_facts",
    "ModelFacts",
    "MemoryModel",
    "Breakdown",
    "DeviceSpec",
    "host",
    "LaunchConfig",
    "with_given",
    "resolve",
    "Target",
    "make_target",
    "Policy",
    "Choice",
    "NoFit",
    "solve",
    "plan",
    "PlanResult",
    "Verdict",
    "breakdown_text",
    "verdict_text",
    "server_argv",
    "LlamafitError",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'llamafit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from .api import breakdown_text, make_target
    from .errors import LlamafitError
    from .facts.hparams import ModelFacts, build_facts
    from .fetch.model_source import open_model
    from .findings import Verdict
    from .fit.explain import PlanResult, plan
    from .fit.search import Target
    from .fit.solver import Choice, NoFit, Policy, solve
    from .machine.devices import DeviceSpec, host
    from .memory.config import LaunchConfig, with_given
    from .memory.model import Breakdown, MemoryModel
    from .memory.resolve import resolve
    from .reader.model import read_model
    from .report.plan import verdict_text
    from .server.argv import server_argv
    from .version import __version__
