"""llama-fit-params' compute column against llamafit's (issue #36 item 4): judged per device at its
own graph (fit_params_rc), to print precision; the larger wins on a GPU; its answers kept on disk
so that a cached plan runs no process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.findings import Notice
from llamafit.fit.llama_check import (
    ComputeCheck,
    DeviceCheck,
    Difference,
    compute_checks,
    differences,
    fit_params_rc,
)
from llamafit.machine.devices import host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.report.check import notice_text
from llamafit.server import fit_check
from llamafit.server.fit_check import Estimate, answer_path
from tests.support import FIXTURES

MIB = 1 << 20
DENSE = MemoryModel(build_facts(read_model(str(FIXTURES / "dense-llama.gguf"))))


@pytest.mark.parametrize(
    ("llama_mib", "ours", "difference", "agrees"),
    [
        (26, 26 * MIB + 26624, -26624, True),  # Vulkan0 of the demo, measured: in the printed MiB
        (26, 27 * MIB - 1, -(MIB - 1), True),  # the top of the printed MiB
        (26, 27 * MIB, -MIB, False),  # llamafit's is larger beyond it
        (26, 25 * MIB, MIB, True),  # one MiB below: no room either (Difference.room_bytes)
        (26, 25 * MIB - 1, MIB + 1, False),  # llama.cpp's is larger beyond print precision
        (5, 2375680, 5 * MIB - 2375680, False),
    ],
)
def test_the_compute_column_is_held_to_print_precision(
    llama_mib: int, ours: int, difference: int, agrees: bool
) -> None:
    c = ComputeCheck("Vulkan0", llama_mib, ours, "graph")
    assert (c.difference_bytes, c.agrees) == (difference, agrees)
    room = Difference("Vulkan0", "compute", difference).room_bytes
    assert room == (difference if not agrees and difference > 0 else 0)


@pytest.mark.parametrize(
    ("kind", "bytes_", "room"),
    [
        ("compute", 3 * MIB, 3 * MIB),
        ("compute", MIB, 0),
        ("compute", -5 * MIB, 0),
        ("model", 4 * MIB, 4 * MIB),
        ("context", 2 * MIB, 2 * MIB),
    ],
)
def test_every_kind_llama_cpp_prints_may_win(kind: str, bytes_: int, room: int) -> None:
    assert Difference("CUDA0", kind, bytes_).room_bytes == room


def test_a_compute_disagreement_is_a_device_disagreement() -> None:
    near = DeviceCheck("Vulkan0", 247, 247.2, True)
    assert near.agrees and not DeviceCheck("Vulkan0", 247, 247.2, True, compute_agrees=False).agrees


def test_llama_fit_params_graph_has_a_logits_row_per_batch_token() -> None:
    """common_context_params_to_llama passes n_outputs_max 0, llama_context makes it n_batch; the
    server's is its slots' (4). The allocator reuses the logits' memory: the dense fixture's CPU
    compute buffer grows by 2,016 bytes, not by the 650,240 of 508 more F32 rows of 320."""
    rc = resolve(LaunchConfig(n_ctx=4096, n_parallel=4), DENSE.facts)
    asked = fit_params_rc(rc)
    assert (rc.n_outputs_max, asked.n_outputs_max, asked.n_batch) == (4, 2048, 2048)
    cpu = host(8 << 30, 8 << 30)
    server, fit = DENSE.estimate(rc, (), cpu), DENSE.estimate(asked, (), cpu)
    assert (server.devices[-1].compute_bytes, fit.devices[-1].compute_bytes) == (2508832, 2510848)
    checks = compute_checks([("CPU", 2), ("Vulkan9", 7)], fit)  # a device llamafit has not: left
    assert checks == (ComputeCheck("CPU", 2, 2510848, "graph"),)
    # differences: weights and KV at the server's question, compute at llama-fit-params' graph
    diffs = differences([("CPU", 0, 0, 2)], server, ["CPU"], fit)
    assert [(d.kind, d.bytes) for d in diffs] == [
        ("model", -server.devices[-1].weights_bytes),
        ("context", -server.devices[-1].kv_bytes),
        ("compute", 2 * MIB - 2510848),
    ]


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (
            {"device": "CUDA0", "llama_mib": 612, "llamafit_bytes": 500 * MIB, "taken": "llama.cpp"}
            | {"difference_bytes": 112 * MIB, "compute_source": "graph"},
            "CUDA0: llama.cpp's dry run reserves 612 MiB of compute, llamafit's graph replay "
            "500.0 MiB for the same graph; planned with llama.cpp's larger figure",
        ),
        (
            {"device": "CUDA0", "llama_mib": 400, "llamafit_bytes": 500 * MIB, "taken": "llamafit"}
            | {"difference_bytes": -100 * MIB, "compute_source": "estimate"},
            "CUDA0: llama.cpp's dry run reserves 400 MiB of compute, llamafit's estimate 500.0 "
            "MiB for the same graph; llamafit's larger figure kept",
        ),
        (
            {"device": "CPU", "llama_mib": 514, "llamafit_bytes": 40 * MIB, "taken": "llamafit"}
            | {"difference_bytes": 474 * MIB, "compute_source": "graph"},
            "CPU: llama.cpp's dry run reserves 514 MiB of compute, llamafit's graph replay 40.0 "
            "MiB for the same graph; no room is kept on the host for it",
        ),
    ],
)
def test_the_warning_names_both_figures_and_which_one_the_plan_took(
    data: dict[str, object], text: str
) -> None:
    assert notice_text(Notice("llama_compute_differs", data)) == text


# ---- the answer kept on disk (server/fit_check.py) ----

ROWS = (Estimate("Vulkan0", 65, 156, 26), Estimate("Host", 170, 0, 514))


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "llama-fit-params"
    path.write_text("#!/bin/sh\n")
    return str(path)


def test_a_question_is_named_without_the_stand_in_s_path(tool: str) -> None:
    """A header-only model is asked through a stand-in of a fresh temporary name each time: the
    same question, the same answer file; another build, model, flag or tool is another."""
    key = (tool, "-m", "/tmp/a/m.gguf", "-c", "4096")
    path = answer_path(tool, key, ("/tmp/a/m.gguf", "b1\0m.gguf:1:2"))
    assert path is not None and path.startswith(os.path.join(os.environ["LLAMAFIT_CACHE_DIR"], ""))
    again = (tool, "-m", "/tmp/b/m.gguf", "-c", "4096")
    assert answer_path(tool, again, ("/tmp/b/m.gguf", "b1\0m.gguf:1:2")) == path
    others = [
        answer_path(tool, key, ("/tmp/a/m.gguf", "b2\0m.gguf:1:2")),
        answer_path(tool, key, ("/tmp/a/m.gguf", "b1\0m.gguf:1:3")),
        answer_path(tool, (*key[:4], "8192"), ("/tmp/a/m.gguf", "b1\0m.gguf:1:2")),
    ]
    os.utime(tool, ns=(1, 1))  # the tool rebuilt
    others.append(answer_path(tool, key, ("/tmp/a/m.gguf", "b1\0m.gguf:1:2")))
    assert len({path, *others}) == 5
    assert answer_path(tool + "-gone", key, ("m", "b")) is None


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        (json.dumps({"format": 1, "rows": []}), None),
        (
            json.dumps({"format": 1, "rows": [["Vulkan0", 65, 156, 26], ["Host", 170, 0, 514]]}),
            ROWS,
        ),
        (json.dumps({"format": 2, "rows": [["Vulkan0", 65, 156, 26]]}), None),
        (json.dumps({"format": 1, "rows": [["Vulkan0", 65, 156]]}), None),
        (json.dumps({"format": 1, "rows": [["Vulkan0", 65, 156, -1]]}), None),
        (json.dumps({"format": 1, "rows": [["Vulkan0", 65, 156, 1 << 27]]}), None),
        (json.dumps({"format": 1, "rows": [["Vulkan0", 65, 156, True]]}), None),
        (json.dumps({"format": 1, "rows": [["", 65, 156, 26]]}), None),
        (json.dumps({"format": 1, "rows": "Vulkan0 65 156 26"}), None),
        ("not json", None),
    ],
)
def test_a_kept_answer_is_believed_only_when_well_formed(
    tool: str, content: str, kept: tuple[Estimate, ...] | None
) -> None:
    path = answer_path(tool, (tool, "-c", "1"), ("m", "b"))
    assert path is not None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(content)
    assert fit_check._load_answer(path) == kept


def test_an_answer_is_kept_and_a_failure_is_not(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ask runs the tool and keeps its rows; the next process (a new _ASKED) reads them
    and runs nothing. A failure is not kept: the next plan asks again."""
    ran: list[str] = []

    def answered(t: str, flags: object, env: object, timeout: float) -> object:
        ran.append(t)
        return ROWS, None

    monkeypatch.setattr(fit_check, "_ASKED", {})
    monkeypatch.setattr(fit_check, "_ask", answered)
    flags, remember = ["-m", "m.gguf", "-c", "1"], ("m.gguf", "b1")
    assert fit_check.ask(tool, flags, {}, remember=remember) == (ROWS, None)
    monkeypatch.setattr(fit_check, "_ASKED", {})
    assert fit_check.ask(tool, flags, {}, remember=remember) == (ROWS, None)
    assert ran == [tool]

    def failed(t: str, flags: object, env: object, timeout: float) -> object:
        ran.append("failed")
        return (), "hung"

    monkeypatch.setattr(fit_check, "_ask", failed)
    for _ in range(2):
        monkeypatch.setattr(fit_check, "_ASKED", {})
        assert fit_check.ask(tool, [*flags, "-ub", "8"], {}, remember=remember) == ((), "hung")
    assert ran == [tool, "failed", "failed"]


@pytest.mark.parametrize(
    ("env", "asked_again"),
    [
        ({"GGML_VK_VISIBLE_DEVICES": "0"}, True),
        ({"CUDA_VISIBLE_DEVICES": "1"}, True),
        ({"LLAMA_ARG_N_GPU_LAYERS": "3"}, True),
        ({"HOME": "/elsewhere"}, False),
    ],
)
def test_the_environment_that_changes_the_answer_names_it(
    tool: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], asked_again: bool
) -> None:
    ran: list[dict[str, str]] = []

    def answered(t: str, flags: object, given: dict[str, str], timeout: float) -> object:
        ran.append(given)
        return ROWS, None

    monkeypatch.setattr(fit_check, "_ask", answered)
    for asked in ({}, env):
        monkeypatch.setattr(fit_check, "_ASKED", {})
        fit_check.ask(tool, ["-m", "m.gguf"], asked, remember=("m.gguf", "b1"))
    assert ran == ([{}, env] if asked_again else [{}])
