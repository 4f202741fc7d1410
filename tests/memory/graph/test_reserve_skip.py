"""The reserves the replay knows without allocating a graph (alloc.Gallocr.again and .holds;
replay.cpu_compute_bytes and device_compute_bytes use both).

- again: llama_context::sched_reserve reserves the prompt-sized graph twice; the second allocates
  as the first did and regrows a chunked buffer the one-token graph shrank (the recorded Vulkan
  reserves with 4 MiB chunks).
- holds: the one-token graph is not allocated where the aligned sizes of its tensors on each
  buffer sum to no more than the buffer's first chunk and chunk size limit; hand graphs at the
  edges of that bound, and plans on every kind of device whose figures are the same with and
  without the skip (each skipped reserve checked against a real one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.memory.config import LaunchConfig
from llamafit.memory.graph.alloc import Allocation, BufferType, Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.backends.vulkan import vulkan_host_buffer_type
from llamafit.memory.graph.nodes import FLAG_OUTPUT, Graph
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import resolve
from scripts.fixtures import make_shapes
from tests.memory.graph.test_alloc import W, chain, graph, t
from tests.memory.test_fa_auto import HOST
from tests.memory.test_replay_devices import LAVAPIPE
from tests.support import needs_demo
from tests.support.alloc_cases import GRAPHS, read_fixture
from tests.support.graph_build import facts_of


# --- again: the prompt-sized graph reserved a second time ---------------------------------------
@pytest.mark.parametrize("path", sorted(GRAPHS.glob("alloc-*.jsonl.gz")), ids=lambda p: p.name)
def test_a_graph_reserved_again_gives_the_recorded_sizes(path: Path) -> None:
    """Each recorded ggml_gallocr_reserve_n of a graph reserved before, taken by again() from
    that reserve's allocation, gives llama.cpp's buffer sizes after it."""
    rec = read_fixture(path)
    galloc = Gallocr(rec.bufts)
    made: list[tuple[Graph, Allocation]] = []
    again = 0
    for e in rec.events:
        earlier = next((a for g, a in made if g == e.graph), None)
        if earlier is None:
            got = galloc.reserve_n(e.graph)
            assert galloc.last is not None
            made.append((e.graph, galloc.last))
        else:
            got = galloc.again(earlier)
            again += 1
        assert got == e.sizes + (0,) * (len(got) - len(e.sizes))
    assert again >= 1


def test_again_regrows_the_chunk_the_one_token_graph_shrank() -> None:
    """Vulkan_Host in 4 MiB chunks: the one-token graph's larger first chunk reallocates the
    buffer smaller (4,289,216 bytes), the prompt-sized graph again regrows it (12,087,456)."""
    rec = read_fixture(GRAPHS / "alloc-vulkan-chunks.jsonl.gz")
    galloc = Gallocr(rec.bufts)
    pp, tg = rec.events[0].graph, rec.events[1].graph
    galloc.reserve_n(pp)
    assert galloc.last is not None
    first = galloc.last
    assert galloc.reserve_n(tg)[1] == 4_289_216
    assert galloc.again(first)[1] == 12_087_456


# --- holds: a reserve that cannot grow a buffer -------------------------------------------------
DEV = BufferType("dev", 32, 1024)  # chunks of at most 1024 bytes
TWICE = [BufferType("dev", 32), BufferType("dev", 32)]  # two buffer ids, one allocator


def _two(size: int) -> Graph:
    """Two outputs of `size` bytes, one on each buffer id (0 and 1)."""
    nodes = [
        t("a", size=size, src=("w",), flags=FLAG_OUTPUT),
        t("b", size=size, src=("w",), flags=FLAG_OUTPUT),
    ]
    return graph([W], nodes, leaf_ids=(0,), node_ids=(0, 1))


def _freed(*sizes: int) -> Graph:
    """A chain x0 -> x1 -> ... whose tensors are freed as it goes (only the last is an output):
    its peak is two neighbours, not the sum."""
    nodes = [t("x0", size=sizes[0], src=("w",))]
    for i, s in enumerate(sizes[1:], 1):
        flags = FLAG_OUTPUT if i == len(sizes) - 1 else 0
        nodes.append(t(f"x{i}", op="CPY", size=s, src=(f"x{i - 1}",), flags=flags))
    return graph([W], nodes)


# (case, buffer types, the first graph, the second, whether holds answers yes)
HOLDS_ROWS: list[tuple[str, list[BufferType], Graph, Graph, bool]] = [
    ("smaller graph", [CPU], chain(800), chain(400), True),
    ("the same sum, aligned", [CPU], chain(800), chain(384, 416), True),
    ("past the buffer once aligned", [CPU], chain(800), chain(384, 417), False),
    # the bound counts every tensor: freed ones too (the pass would leave the buffer as it is)
    ("a sum above a peak the pass keeps", [CPU], chain(800), _freed(400, 400, 400), False),
    # Vulkan_Host's 32 extra bytes are in the buffer: a sum up to them cannot grow it
    (
        "the host buffer's extra bytes",
        [vulkan_host_buffer_type(64, 1 << 30)],
        chain(800),
        chain(832),
        True,
    ),
    ("one chunk of the first", [DEV], chain(600, 600), chain(608), True),
    ("the second chunk does not count", [DEV], chain(600, 600), chain(608, 32), False),
    # a first chunk larger than the limit (one tensor): a sum above the limit would open a
    # second chunk
    ("above the chunk limit", [DEV], chain(2000), chain(600, 600), False),
    ("two ids of one allocator add up", TWICE, _two(512), _two(512), True),
    ("two ids of one allocator over it", TWICE, _two(512), _two(544), False),
]


@pytest.mark.parametrize(
    ("bufts", "first", "second", "holds"),
    [r[1:] for r in HOLDS_ROWS],
    ids=[r[0] for r in HOLDS_ROWS],
)
def test_holds(bufts: list[BufferType], first: Graph, second: Graph, holds: bool) -> None:
    galloc = Gallocr(bufts)
    assert not galloc.holds(first)  # no buffer yet
    before = galloc.reserve_n(first)
    buffers = list(galloc.buffers)
    assert galloc.holds(second) is holds
    after = galloc.reserve_n(second)
    if holds:
        assert (after, galloc.buffers) == (before, buffers)


def test_holds_declines_bad_buffer_ids() -> None:
    """reserve_n raises AllocError on them: holds leaves the answer to it."""
    galloc = Gallocr([CPU])
    galloc.reserve_n(chain(800))
    assert not galloc.holds(graph([W], [t("a", src=("w",))], leaf_ids=(0,), node_ids=(1,)))


# --- plans: the same figures with and without the skip ------------------------------------------
# (shape, plan arguments, the one-token reserves the plan skips)
PLANS: list[tuple[str, list[str], int]] = [
    ("llama3.2-1b", ["--gpu", "24GiB"], 3),  # CUDA, full offload
    ("llama3.1-8b", ["--gpu", "6GiB"], 0),  # CUDA, partial offload
    ("qwen3-30b-a3b", ["--gpu", "12GiB,12GiB"], 3),  # MoE, experts on the host, two GPUs
    ("llama3.2-1b", ["--gpu", "cpu"], 1),  # the CPU alone
    ("llama3.2-1b", ["--backend", "metal", "--gpu", "16GiB"], 0),  # Metal
    ("llama3.1-8b", ["--backend", "vulkan", "--gpu", "6GiB"], 1),  # Vulkan
]


@pytest.mark.parametrize(("shape", "args", "skipped"), PLANS)
def test_a_plan_is_the_same_without_the_skip(
    shape: str,
    args: list[str],
    skipped: int,
    shapes_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each reserve holds skips leaves a real reserve's buffers as they are, and the plan's
    figures (--json, whole) are those of the replay that allocates every graph."""
    path = make_shapes.write_shape(shape, shapes_dir)
    argv = ["plan", str(path), *args, "--ram", "64GiB", "--json"]
    holds = Gallocr.holds
    said: list[bool] = []

    def checked(
        self: Gallocr, g: Graph, extra: Sequence[int] | Callable[[], Sequence[int] | None] = ()
    ) -> bool:
        # (a short graph's: extra, the blocks it leaves out; it then holds as well)
        yes = holds(self, g, extra)
        said.append(yes)
        if yes:
            twin = Gallocr(self.bufts)
            twin.buffers = list(self.buffers)
            assert twin.reserve_n(g) == self.sizes()
            assert twin.buffers == self.buffers
        return yes

    monkeypatch.setattr(Gallocr, "holds", checked)
    skipping = CliRunner().invoke(cli, argv)
    assert skipping.exit_code == 0, skipping.output
    assert said.count(True) == skipped
    assert said  # asked for every one-token reserve
    monkeypatch.setattr(Gallocr, "holds", lambda self, g, extra=(): False)
    allocating = CliRunner().invoke(cli, argv)
    assert allocating.exit_code == 0, allocating.output
    assert json.loads(skipping.output) == json.loads(allocating.output)
    assert skipping.output == allocating.output


@needs_demo
def test_a_chunked_host_buffer_is_the_recorded_one() -> None:
    """The demo on lavapipe in 4 MiB suballocation blocks (the alloc-vulkan-chunks recording:
    -c 4096 -ngl 99, GGML_VK_SUBALLOCATION_BLOCK_SIZE=4194304): Vulkan_Host ends at the second
    prompt-sized reserve's 12,087,456 bytes, not the one-token graph's 4,289,216."""
    facts, _hp = facts_of("demo")
    gpu = replace(LAVAPIPE, max_allocation_bytes=4 << 20)
    rc = resolve(LaunchConfig(n_ctx=4096, n_gpu_layers=99, fit=False), facts)
    bd = MemoryModel(facts).estimate(rc, [gpu], HOST, reserve_bytes=0)
    rec = read_fixture(GRAPHS / "alloc-vulkan-chunks.jsonl.gz")
    assert tuple(d.compute_bytes for d in bd.devices) == rec.events[-1].sizes
    assert rec.events[-1].sizes == (28_860_432, 12_087_456)
