"""sched.resplit: the split of a graph of the same structure as a recorded one (split_graph's record)
at other shapes, without splitting it again, must be exactly split_graph's, and must decline
(None) where a backend's answer or the structure differs.

The real cases capture the graphs a plan splits (replay.Splits.split) on real-shape stand-ins
(scripts/fixtures/make_shapes.py) and check each one that resplit answers for against
split_graph; the small ones build the graphs by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.memory.graph import replay
from llamafit.memory.graph.alloc import AllocRecord
from llamafit.memory.graph.backends import cuda_optimize
from llamafit.memory.graph.backends.cpu import cpu_backend
from llamafit.memory.graph.backends.vulkan import vulkan_backend
from llamafit.memory.graph.nodes import FLAG_INPUT, USAGE_WEIGHTS, Graph, Tensor
from llamafit.memory.graph.sched import (
    AllocDeps,
    Backend,
    SplitGraph,
    SplitRecord,
    _read_set,
    resplit,
    split_graph,
    structure_of,
)
from scripts.fixtures import make_shapes


def _t(name: str, op: str = "NONE", rows: int = 4, **kw: object) -> Tensor:
    ne = (4, rows, 1, 1)
    return Tensor(name, op, "f32", ne, (4, 16, 16 * rows, 16 * rows), 16 * rows, **kw)  # type: ignore[arg-type]


def _graph(rows: int, *, src_of_c: int = 3) -> Graph:
    """inp (input, `rows` rows) -> a = w_gpu x inp -> b = w_cpu x a (a host weight) -> c."""
    tensors = (
        _t("inp", rows=rows, flags=FLAG_INPUT),
        _t("w_gpu", data=True, buffer="Vulkan0", usage=USAGE_WEIGHTS),
        _t("w_cpu", data=True, buffer="CPU", usage=USAGE_WEIGHTS),
        _t("a", "MUL_MAT", rows, flags=16, src=(1, 0)),
        _t("b", "MUL_MAT", rows, flags=16, src=(2, 3)),
        _t("c", "MUL_MAT", rows, flags=16, src=(1, src_of_c)),
    )
    return Graph(tensors=tensors, leafs=(0, 1, 2), nodes=(3, 4, 5))


def _small_backends(max_rows: int | None = None) -> list[Backend]:
    gpu = vulkan_backend("Vulkan0", graph_optimize=False)
    if max_rows is not None:
        inner = gpu.supports_op

        def supports(tensors: Sequence[Tensor], i: int) -> bool:
            # a shape-dependent answer: ops over more than max_rows rows stay off the GPU
            return tensors[i].ne[1] <= max_rows and inner(tensors, i)

        gpu = replace(gpu, supports_op=supports)
    return [gpu, cpu_backend("CPU")]


@pytest.mark.parametrize("n_copies", [1, 4])  # 4: pipeline parallelism
def test_other_shapes_are_split_as_split_graph_splits_them(n_copies: int) -> None:
    """The inputs' copies and the views that keep them alive take the new shapes."""
    backends = _small_backends()
    rec = SplitRecord()
    split_graph(_graph(4), backends, n_copies=n_copies, record=rec)
    got = resplit(rec, _graph(8))
    want = split_graph(_graph(8), backends, n_copies=n_copies)
    assert got == want
    # the copies of inp and a, and the views that keep them alive: all over 8 rows
    appended = {1: 4, 4: 13}[n_copies]
    assert [t.ne[1] for t in got.graph.tensors[6:]] == [8] * appended


def test_the_same_graph_is_the_recorded_split() -> None:
    backends = _small_backends()
    rec = SplitRecord()
    out = split_graph(_graph(4), backends, record=rec)
    assert resplit(rec, _graph(4)) is out


@pytest.mark.parametrize(
    ("graph", "why"),
    [
        (_graph(8), "the GPU refuses an op over 8 rows that it took over 4"),
        (_graph(4, src_of_c=4), "c reads b instead of a: another structure"),
        (replace(_graph(4), nodes=(3, 5, 4)), "another node order"),
    ],
)
def test_declines(graph: Graph, why: str) -> None:
    backends = _small_backends(max_rows=4)
    rec = SplitRecord()
    split_graph(_graph(4), backends, record=rec)
    assert resplit(rec, graph) is None, why


# a plan that replays one placement at several cache sizes: the boundary search and the marginal
# costs (the MoE on two CUDA devices; a dense model on a Vulkan device)
PLANS = [
    ("qwen3-30b-a3b", ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]),
    ("llama3.1-8b", ["--gpu", "6GiB", "--backend", "vulkan", "--ram", "64GiB"]),
]


@pytest.mark.parametrize(("shape", "args"), PLANS)
def test_a_plans_splits(
    shape: str, args: list[str], shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every split a plan takes from resplit is split_graph's, and the plan takes some."""
    calls: list[tuple[Graph, tuple[Backend, ...], int, bool, SplitGraph]] = []
    split = replay.Splits.split

    def noted(
        self: replay.Splits, graph: Graph, n_copies: int, op_offload: bool, like: object
    ) -> tuple[SplitGraph, AllocRecord]:
        out, steps = split(self, graph, n_copies, op_offload, like)
        calls.append((graph, self.backends, n_copies, op_offload, out))
        return out, steps

    monkeypatch.setattr(replay.Splits, "split", noted)
    path = make_shapes.write_shape(shape, shapes_dir)
    result = CliRunner().invoke(cli, ["plan", str(path), *args, "--json"])
    assert result.exit_code == 0, result.output
    records = []
    for g, b, c, o, _ in calls:
        records.append(SplitRecord())
        split_graph(g, b, n_copies=c, op_offload=o, record=records[-1])
    resplit_ones = 0
    for k, (graph, backends, n_copies, op_offload, out) in enumerate(calls):
        assert out == split_graph(graph, backends, n_copies=n_copies, op_offload=op_offload)
        if any(resplit(rec, graph) is not None for rec in records[:k]):
            resplit_ones += 1
    assert resplit_ones >= 2


def test_graph_optimize_reads_no_shape_unnoted(
    shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What CUDA's graph_optimize reads through sched.structure_of (no note, so resplit does not
    run it again) is structure alone: with every shape there zeroed, each call of a MoE plan on
    two CUDA devices answers as it does."""
    real = structure_of
    zeroed: dict[int, tuple[Sequence[Tensor], list[Tensor]]] = {}

    def shapeless(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        table = real(tensors)
        hit = zeroed.get(id(table))
        if hit is None or hit[0] is not table:
            zero = (0, 0, 0, 0)
            hit = zeroed[id(table)] = (
                table,
                [t._replace(ne=zero, nb=zero, nbytes=0, view_offs=0) for t in table],
            )
        return hit[1]

    optimize = cuda_optimize.cuda_graph_optimize
    calls: list[tuple[bool, bool]] = []

    def both(*args: Any, **kwargs: Any) -> AllocDeps:
        want = optimize(*args, **kwargs)
        with monkeypatch.context() as m:
            m.setattr(cuda_optimize, "structure_of", shapeless)
            got = optimize(*args, **kwargs)
        calls.append((want.keep != (), got == want))
        return want

    monkeypatch.setattr(cuda_optimize, "cuda_graph_optimize", both)
    path = make_shapes.write_shape("qwen3-30b-a3b", shapes_dir)
    result = CliRunner().invoke(cli, ["plan", str(path), *PLANS[0][1], "--json"])
    assert result.exit_code == 0, result.output
    assert all(same for _, same in calls)
    assert any(kept for kept, _ in calls)  # the fusions matched (alloc deps added)


@pytest.mark.parametrize(("shape", "args"), PLANS)
def test_op_and_sources_is_what_they_read(
    shape: str, args: list[str], shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend's op_and_sources holds: split with each read watched (_Reads), its supports_op
    and offload_op read no tensor of a plan's graphs but the op and its sources."""
    calls: list[tuple[Graph, tuple[Backend, ...], int, bool]] = []
    split = replay.Splits.split

    def noted(
        self: replay.Splits, graph: Graph, n_copies: int, op_offload: bool, like: object
    ) -> tuple[SplitGraph, AllocRecord]:
        calls.append((graph, self.backends, n_copies, op_offload))
        return split(self, graph, n_copies, op_offload, like)

    monkeypatch.setattr(replay.Splits, "split", noted)
    path = make_shapes.write_shape(shape, shapes_dir)
    result = CliRunner().invoke(cli, ["plan", str(path), *args, "--json"])
    assert result.exit_code == 0, result.output
    asked = 0
    for graph, backends, n_copies, op_offload in calls[:2]:
        claimed = {
            id(p) for b in backends if b.op_and_sources for p in (b.supports_op, b.offload_op)
        }
        rec = SplitRecord()
        watched = [replace(b, op_and_sources=False) for b in backends]
        split_graph(graph, watched, n_copies=n_copies, op_offload=op_offload, record=rec)
        for pred, i, _answer, seen in rec.asked:
            if id(pred) not in claimed:
                continue
            assert seen is not None
            reads = _read_set(seen)
            assert reads is not None
            assert reads <= {i, *graph.tensors[i].src}, graph.tensors[i].name
            asked += 1
    assert asked > 0
