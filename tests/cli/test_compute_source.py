"""Whose figure a compute buffer is (DeviceUsage.compute_source, issue #36): "graph" (the replay of
llama.cpp's reserve graph) or "estimate" (the hand-derived peaks), in the JSON of every device and
beside the figure in the text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.commands.run import actual_vs_predicted
from llamafit.memory.usage import Breakdown, DeviceUsage
from llamafit.report.check import check_lines, device_lines
from tests.support import FIXTURES

QWEN = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")
MIB = 1 << 20


def _usage(name: str, kind: str, compute_mib: int, source: str) -> DeviceUsage:
    return DeviceUsage(
        name, kind, None, None, 0, 0, 0, compute_mib * MIB, 0, 0, compute_source=source
    )


def _breakdown(*sources: str) -> Breakdown:
    rows = [_usage(f"CUDA{i}", "gpu", 100 + i, s) for i, s in enumerate(sources[:-1])]
    return Breakdown((*rows, _usage("CPU", "host", 9, sources[-1])), None, True, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kv", "build", "source", "marked"),
    [
        # f16 cache: the replay covers qwen2 on CUDA at the current build
        ("f16", (), "graph", False),
        # q8_0 with flash attention: its F16 copies in the buffer (cuda_fattn.py)
        ("q8_0", (), "graph", False),
        # iq4_nl: no CUDA flash-attention kernel reads it, the CPU runs the attention, where the
        # scheduler puts it
        ("iq4_nl", (), "graph", False),
        # before rule inp_embd_expand (b7698) the graph builders are not checked
        ("f16", ("--llama-build", "7690"), "estimate", True),
    ],
)
def test_every_device_says_whose_compute_figure_it_is(
    kv: str, build: tuple[str, ...], source: str, marked: bool
) -> None:
    args = ["check", QWEN, "--gpu", "24GiB", "--ram", "64GiB", *build]
    flags = ["--", "-c", "8192", "-fa", "on", "-ctk", kv, "-ctv", kv]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json", *flags]).stdout)
    assert [(d["name"], d["compute_source"]) for d in data["devices"]] == [
        ("CUDA0", source),
        ("CPU", source),
    ]
    text = CliRunner().invoke(cli, [*args, *flags]).stdout
    note = "Compute    ~ estimated: llama.cpp's graph is not replayed for this setup"
    assert (note in text.splitlines()) is marked


def test_the_table_marks_estimated_compute() -> None:
    assert device_lines(_breakdown("graph", "estimate")) == [
        "(MiB)      usable weights      KV     RS compute  output reserve    used    left",
        "CUDA0           -       0       0      0     100       0       0     100       -",
        "CPU             -       0       0      0      ~9       0       0       9       -",
        "Compute    ~ estimated: llama.cpp's graph is not replayed for this setup",
    ]
    assert device_lines(_breakdown("graph", "graph"))[-1].startswith("CPU ")


def test_runs_check_table_says_estimated_after_an_estimated_compute_row() -> None:
    rows = actual_vs_predicted(
        _breakdown("estimate", "graph"), {"compute": {"CUDA0": 101.0, "CUDA_Host": 9.0}}
    )
    compute = [r for r in rows if r["kind"] == "compute"]
    assert compute == [
        {
            "device": "CUDA0",
            "kind": "compute",
            "predicted_mib": 100.0,
            "actual_mib": 101.0,
            "compute_source": "estimate",
        },
        {
            "device": "CPU",
            "kind": "compute",
            "predicted_mib": 9.0,
            "actual_mib": 9.0,
            "compute_source": "graph",
        },
    ]
    assert check_lines(compute) == [
        "Check      device    buffer     predicted   reported   (MiB)",
        "           CUDA0     compute       100.00     101.00   estimated",
        "           CPU       compute         9.00       9.00",
    ]


def test_ls_says_whose_compute_each_device_of_the_pick_has(tmp_path: Path) -> None:
    """ls --json: the chosen config's compute_source per device, as plan's devices have it."""
    (tmp_path / "q.gguf").symlink_to(QWEN)
    listed = json.loads(
        CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "24GiB", "--json"]).output
    )
    planned = json.loads(
        CliRunner()
        .invoke(cli, ["plan", str(tmp_path / "q.gguf"), "--gpu", "24GiB", "--json"])
        .output
    )
    assert listed["models"][0]["fit"]["compute_source"] == {
        d["name"]: d["compute_source"] for d in planned["devices"]
    }


@pytest.mark.parametrize(
    ("gpu", "flags", "devices"),
    [
        # one slot: the one-token graph has one query row, where a vector kernel may read q8_0
        ("24GiB", ["-np", "1"], ["CUDA0"]),
        ("rtx4090", ["-np", "1"], None),  # the card's compute capability is known: 8.9
        ("24GiB", [], None),  # four slots in one stream: 4 rows, no vector kernel reads q8_0
        ("24GiB", ["-np", "4"], ["CUDA0"]),  # -np given: a stream per slot, one row each
        ("24GiB", ["-np", "1", "-ctk", "f16", "-ctv", "f16"], None),  # no copies to make
    ],
)
def test_an_unknown_compute_capability_is_said_where_it_may_matter(
    gpu: str, flags: list[str], devices: list[str] | None
) -> None:
    args = ["check", QWEN, "--gpu", gpu, "--ram", "64GiB", "--json"]
    kv = ["-c", "8192", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--", *kv, *flags]).stdout)
    found = [w for w in data["warnings"] if w["code"] == "cc_unknown"]
    assert [w["devices"] for w in found] == ([devices] if devices else [])
