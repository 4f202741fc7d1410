"""llamafit.memory.graph.alloc, the replay of ggml-alloc (ggml/src/ggml-alloc.c).

- Tiny hand-built graphs pin each rule of the C code with exact offsets and peaks, derived by
  reading it (ggml_dyn_tallocr_alloc/_free_bytes, ggml_gallocr_allocate_node/_free_node,
  ggml_gallocr_alloc_graph_impl, ggml_gallocr_reserve_n_impl).
- Recorded real calls (fixtures/graphs/alloc-*.jsonl.gz, scripts/graph_dump/record_alloc.py):
  after every ggml_gallocr_reserve_n llama.cpp made, the replayed buffer sizes are the real ones
  to the byte, on the CPU server, the Vulkan device (one chunk and several) and RPC workers.
- Slow: the same, recorded live from a real llama-server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.memory.graph import alloc
from llamafit.memory.graph.alloc import (
    SIZE_MAX,
    AllocError,
    AllocRecord,
    BufferType,
    DynTallocr,
    Gallocr,
    Marked,
    allocate,
    peaks,
)
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.backends.vulkan import vulkan_host_buffer_type
from llamafit.memory.graph.nodes import FLAG_INPUT, FLAG_OUTPUT, Graph, Tensor
from scripts.fixtures import make_shapes
from tests.memory.graph.test_resplit import PLANS
from tests.support import (
    VK_RPC_BIN_ABSENT,
    installed,
    needs_demo,
    needs_llama_server,
    vulkan_rpc_bin_dir,
)
from tests.support.alloc_cases import CASES, GRAPHS, read_fixture, record, replay

replay_steps = alloc._replay

HUGE = SIZE_MAX // 2  # the free block a new chunk starts with when the buffer type has no limit

# --- the dynamic tensor allocator ---------------------------------------------------------------
# Each row: alignment, max size, then operations: ("alloc", size, (chunk, offset) expected) or
# ("free", chunk, offset, size); then each chunk's free blocks and peak after them.
Op = tuple[object, ...]
TALLOCR_ROWS: list[tuple[str, int, int, list[Op], list[list[tuple[int, int]]], list[int]]] = [
    (
        "best fit: the smallest free block, not the last one",
        32,
        SIZE_MAX,
        [
            ("alloc", 800, (0, 0)),
            ("alloc", 96, (0, 800)),
            ("alloc", 416, (0, 896)),
            ("alloc", 96, (0, 1312)),
            ("free", 0, 0, 800),
            ("free", 0, 896, 416),
            ("alloc", 400, (0, 896)),  # 416 bytes: the 416 block beats the 800 one
            ("alloc", 400, (0, 0)),
            ("alloc", 1000, (0, 1408)),  # fits no free block but the last: the chunk grows
        ],
        [[(416, 384), (2432, HUGE - 2432)]],
        [2432],
    ),
    (
        "equal free blocks: the later one",
        32,
        SIZE_MAX,
        [
            ("alloc", 800, (0, 0)),
            ("alloc", 96, (0, 800)),
            ("alloc", 800, (0, 896)),
            ("alloc", 96, (0, 1696)),
            ("free", 0, 0, 800),
            ("free", 0, 896, 800),
            ("alloc", 400, (0, 896)),
        ],
        [[(0, 800), (1312, 384), (1792, HUGE - 1792)]],
        [1792],
    ),
    (
        "freed bytes merge with the blocks before and after",
        32,
        SIZE_MAX,
        [
            ("alloc", 400, (0, 0)),
            ("alloc", 400, (0, 416)),
            ("alloc", 400, (0, 832)),
            ("free", 0, 416, 400),
            ("free", 0, 0, 400),
            ("free", 0, 832, 400),
            ("alloc", 2000, (0, 0)),  # all merged into the last block: it starts at 0 again
        ],
        [[(2016, HUGE - 2016)]],
        [2016],
    ),
    (
        "sizes are aligned up",
        64,
        SIZE_MAX,
        [
            ("alloc", 1, (0, 0)),
            ("alloc", 65, (0, 64)),
            ("alloc", 64, (0, 192)),
        ],
        [[(256, HUGE - 256)]],
        [256],
    ),
    (
        "a maximum size: chunks, one tensor larger than it gets a chunk of its own",
        32,
        1024,
        [
            ("alloc", 600, (0, 0)),
            ("alloc", 600, (1, 0)),
            ("alloc", 2000, (2, 0)),
            # both last blocks would grow their chunk by 32: the first one (a strictly greater
            # reuse factor is needed to switch)
            ("alloc", 32, (0, 608)),
            ("free", 1, 0, 600),
            # chunk 0's last block is too small; chunk 1 grows by 96 (chunk 2 has no free block)
            ("alloc", 700, (1, 0)),
            ("free", 2, 0, 2000),
            # chunk 2's last block holds it without growing: preferred to growing chunk 0 or 1
            ("alloc", 200, (2, 0)),
            ("alloc", 1500, (2, 224)),
            ("free", 2, 0, 200),
            ("free", 2, 224, 1500),
            ("free", 1, 0, 700),
            # chunks 1 and 2 both hold 608 without growing: the one leaving less unused (chunk 1)
            ("alloc", 600, (1, 0)),
        ],
        [[(640, 384)], [(608, 416)], [(0, 2016)]],
        [640, 704, 2016],
    ),
    (
        "the sixteenth chunk is endless",
        32,
        64,
        [("alloc", 64, (c, 0)) for c in range(16)] + [("alloc", 64, (15, 64))],
        [[] for _ in range(15)] + [[(128, HUGE - 128)]],
        [64] * 15 + [128],
    ),
]


@pytest.mark.parametrize(
    ("alignment", "max_size", "ops", "blocks", "peak"),
    [r[1:] for r in TALLOCR_ROWS],
    ids=[r[0] for r in TALLOCR_ROWS],
)
def test_dyn_tallocr(
    alignment: int,
    max_size: int,
    ops: list[Op],
    blocks: list[list[tuple[int, int]]],
    peak: list[int],
) -> None:
    t = DynTallocr(alignment, max_size)
    for op in ops:
        if op[0] == "alloc":
            assert t.alloc(op[1]) == op[2], op  # type: ignore[arg-type]
        else:
            t.free_bytes(op[1], op[2], op[3])  # type: ignore[arg-type]
    assert [list(zip(o, s, strict=True)) for o, s in zip(t.offs, t.sizes, strict=True)] == blocks
    assert t.max_size == peak


def test_out_of_free_blocks_is_an_error() -> None:
    # ggml_dyn_tallocr_insert_block asserts n_free_blocks < MAX_FREE_BLOCKS (256)
    t = DynTallocr(32)
    for i in range(600):
        assert t.alloc(32) == (0, 32 * i)
    for i in range(255):  # every other tensor: 255 new blocks before the last one
        t.free_bytes(0, 64 * i, 32)
    assert len(t.offs[0]) == 256
    with pytest.raises(AllocError, match="out of free blocks"):
        t.free_bytes(0, 64 * 255, 32)


def test_alignment_must_be_a_power_of_two() -> None:
    with pytest.raises(AllocError, match="power of two"):
        DynTallocr(48)


# --- graphs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    name: str
    op: str
    size: int
    src: tuple[str, ...]
    flags: int
    view: str | None
    data: bool
    ne: tuple[int, int, int, int]


def t(
    name: str,
    op: str = "MUL_MAT",
    size: int = 400,
    src: tuple[str, ...] = (),
    flags: int = 0,
    view: str | None = None,
    data: bool = False,
    ne: tuple[int, int, int, int] | None = None,
) -> Spec:
    """A tensor: f32, `size` bytes, one row unless `ne` says otherwise."""
    return Spec(name, op, size, src, flags, view, data, ne or (size // 4, 1, 1, 1))


def graph(
    leafs: list[Spec],
    nodes: list[Spec],
    others: tuple[Spec, ...] = (),
    leaf_ids: tuple[int, ...] | None = None,
    node_ids: tuple[int, ...] | None = None,
) -> Graph:
    specs = [*leafs, *nodes, *others]
    index = {s.name: i for i, s in enumerate(specs)}

    def tensor(s: Spec) -> Tensor:
        row = 4 * s.ne[0]
        nb = (4, row, row * s.ne[1], row * s.ne[1] * s.ne[2])
        view = None if s.view is None else index[s.view]
        return Tensor(
            name=s.name,
            op=s.op,
            type="f32",
            ne=s.ne,
            nb=nb,
            nbytes=s.size,
            flags=s.flags,
            src=tuple(index[n] for n in s.src),
            view_src=view,
            data=s.data,
        )

    return Graph(
        tensors=tuple(tensor(s) for s in specs),
        leafs=tuple(range(len(leafs))),
        nodes=tuple(range(len(leafs), len(leafs) + len(nodes))),
        leaf_buffer_ids=leaf_ids,
        node_buffer_ids=node_ids,
    )


W = t("w", "NONE", data=True)  # a weight: external data, never placed
X = t("x", "NONE", flags=FLAG_INPUT)  # a graph input leaf


def offsets(g: Graph, bufts: list[BufferType]) -> dict[str, int | None]:
    a = allocate(g, bufts)
    return {g.tensors[i].name: None if p is None else p[2] for i, p in enumerate(a.addrs)}


# Each row: the graph, then (name: offset) for every tensor (None: not placed) and the peak.
GRAPH_ROWS: list[tuple[str, Graph, dict[str, int | None], int]] = [
    (
        "in place: a one-child parent's memory is reused",
        graph([W, X], [t("y", "SCALE", src=("x",)), t("z", src=("w", "y"))]),
        {"w": None, "x": 0, "y": 0, "z": 416},
        832,
    ),
    (
        "in place refused: the parent has another child still to run",
        graph([W, X], [t("y", "SCALE", src=("x",)), t("z", "ADD", src=("x", "y"))]),
        {"w": None, "x": 0, "y": 416, "z": 0},
        832,
    ),
    (
        "in place refused: another layout (same bytes)",
        graph([W, X], [t("y", "SCALE", src=("x",), ne=(50, 2, 1, 1)), t("z", src=("w", "y"))]),
        {"w": None, "x": 0, "y": 416, "z": 0},
        832,
    ),
    (
        "in place refused: an op ggml_op_can_inplace does not list",
        graph([W, X], [t("y", "CPY", src=("x",)), t("z", src=("w", "y"))]),
        {"w": None, "x": 0, "y": 416, "z": 0},
        832,
    ),
    (
        "not in place over external data",
        graph([W], [t("y", "SCALE", src=("w",))]),
        {"w": None, "y": 0},
        416,
    ),
    (
        "an output is neither reused in place nor freed",
        graph(
            [W],
            [
                t("a", src=("w",), flags=FLAG_OUTPUT),
                t("b", "SCALE", src=("a",)),
                t("c", src=("w", "b")),
            ],
        ),
        {"w": None, "a": 0, "b": 416, "c": 832},
        1248,
    ),
    (
        "the same graph without the output flag",
        graph([W], [t("a", src=("w",)), t("b", "SCALE", src=("a",)), t("c", src=("w", "b"))]),
        {"w": None, "a": 0, "b": 0, "c": 416},
        832,
    ),
    (
        "a view keeps its source alive until the view's children are done",
        graph(
            [W],
            [t("a", src=("w",)), t("v", "VIEW", 200, src=("a",), view="a"), t("b", src=("w", "v"))],
        ),
        {"w": None, "a": 0, "v": None, "b": 416},
        832,
    ),
    (
        "an op NONE view node is not counted as a view: its source is freed early",
        graph(
            [W],
            [t("a", src=("w",)), t("v", "NONE", 200, src=("a",), view="a"), t("b", src=("w", "v"))],
        ),
        {"w": None, "a": 0, "v": None, "b": 0},
        416,
    ),
    (
        "graph inputs are placed before the other nodes",
        graph(
            [W], [t("a", src=("w",)), t("b", src=("a", "i"))], (t("i", "NONE", flags=FLAG_INPUT),)
        ),
        {"w": None, "a": 416, "b": 832, "i": 0},
        1248,
    ),
    (
        "a source that is no input is placed when its first child runs",
        graph([W], [t("a", src=("w",)), t("b", src=("a", "i"))], (t("i", "NONE"),)),
        {"w": None, "a": 0, "b": 832, "i": 416},
        1248,
    ),
    (
        "a freed tensor next to the last block extends it: the buffer is reused from there",
        graph(
            [W],
            [
                t("a", src=("w",)),
                t("b", src=("a",)),
                t("c", src=("b",)),
                t("d", size=800, src=("c",)),
            ],
        ),
        {"w": None, "a": 0, "b": 416, "c": 0, "d": 416},
        1216,
    ),
]


@pytest.mark.parametrize(
    ("g", "want", "peak"), [r[1:] for r in GRAPH_ROWS], ids=[r[0] for r in GRAPH_ROWS]
)
def test_graph_allocation(g: Graph, want: dict[str, int | None], peak: int) -> None:
    assert offsets(g, [CPU]) == want
    assert peaks(g, [CPU]) == (peak,)


@pytest.mark.parametrize(
    ("alignment", "b_offset", "peak"),
    [(16, 48, 160), (32, 64, 192), (64, 64, 192), (128, 128, 256)],
)
def test_alignment_of_the_buffer_type(alignment: int, b_offset: int, peak: int) -> None:
    g = graph([W], [t("a", size=40, src=("w",)), t("b", size=100, src=("a",))])
    buft = BufferType("dev", alignment)
    assert offsets(g, [buft]) == {"w": None, "a": 0, "b": b_offset}
    assert peaks(g, [buft]) == (peak,)


def test_a_smaller_in_place_node_frees_the_parents_tail() -> None:
    # ggml_gallocr_free_extra_space: with an alloc size that pads MUL_MAT results by 512 bytes
    # (as a backend's get_alloc_size may), SCALE reuses its parent and gives back the tail
    def padded(tensors: Sequence[Tensor], i: int) -> int:
        x = tensors[i]
        return x.nbytes + (512 if x.op == "MUL_MAT" else 0)

    buft = BufferType("padded", 32, alloc_size=padded)
    g = graph([W], [t("a", src=("w",)), t("b", "SCALE", src=("a",)), t("c", src=("w", "b"))])
    # a: 912 -> 928 bytes at 0; b in place at 0 frees 416..928, which joins the last block; c
    # (928 bytes) starts there (without the freed tail it would start at 928: a peak of 1856)
    assert offsets(g, [buft]) == {"w": None, "a": 0, "b": 0, "c": 416}
    assert peaks(g, [buft]) == (1344,)


def test_buffer_ids_place_tensors_in_their_buffers() -> None:
    g = graph(
        [W],
        [t("a", src=("w",)), t("b", src=("a",)), t("c", src=("b",))],
        leaf_ids=(1,),
        node_ids=(0, 1, 1),
    )
    a = allocate(g, [CPU, BufferType("dev", 16)])
    assert a.addrs == (None, (0, 0, 0), (1, 0, 0), (1, 0, 400))
    assert a.peaks == (416, 800)


def test_a_buffer_type_given_twice_shares_one_allocator() -> None:
    # ggml_gallocr_new_n reuses the allocator; ggml_gallocr_get_buffer_size counts it once
    g = graph([W], [t("a", src=("w",)), t("b", src=("a",))], node_ids=(0, 1))
    a = allocate(g, [CPU, CPU])
    assert a.addrs == (None, (0, 0, 0), (1, 0, 416))
    assert a.chunk_sizes == ((832,), (832,))
    assert a.peaks == (832, 0)


@pytest.mark.parametrize(
    ("leaf_ids", "node_ids", "message"),
    [
        ((2,), (0, 0), "buffer id 2 out of range"),
        ((0,), (0, -1), "buffer id -1 out of range"),
        ((0,), (0,), "one buffer id per leaf and per node"),
    ],
)
def test_bad_buffer_ids(leaf_ids: tuple[int, ...], node_ids: tuple[int, ...], message: str) -> None:
    g = graph([W], [t("a", src=("w",)), t("b", src=("a",))], leaf_ids=leaf_ids, node_ids=node_ids)
    with pytest.raises(AllocError, match=message):
        allocate(g, [CPU, CPU])


# --- the allocator over several reserves ----------------------------------------------------------
def chain(*sizes: int) -> Graph:
    """Nodes that each stay alive to the end (outputs) of these sizes."""
    nodes = [t(f"n{i}", size=s, src=("w",), flags=FLAG_OUTPUT) for i, s in enumerate(sizes)]
    return graph([W], nodes)


GALLOCR_ROWS: list[tuple[str, BufferType, list[Graph], list[int]]] = [
    ("a buffer only grows", CPU, [chain(800), chain(400), chain(1600)], [800, 800, 1600]),
    (
        "Vulkan_Host buffers are 32 bytes larger",
        vulkan_host_buffer_type(64, 1 << 30),
        [chain(800), chain(400)],
        [864, 864],
    ),
    # two chunks of 608, then one chunk of 800: chunk 0 grew, so the buffer is reallocated with
    # the new chunks only (smaller than before in all)
    (
        "a chunked buffer is reallocated whole when one chunk grows",
        BufferType("dev", 32, 1024),
        [chain(600, 600), chain(800), chain(600, 600)],
        [1216, 800, 1216],
    ),
]


@pytest.mark.parametrize(
    ("buft", "graphs", "sizes"), [r[1:] for r in GALLOCR_ROWS], ids=[r[0] for r in GALLOCR_ROWS]
)
def test_gallocr_buffer_sizes_over_reserves(
    buft: BufferType, graphs: list[Graph], sizes: list[int]
) -> None:
    galloc = Gallocr([buft])
    assert galloc.sizes() == (0,)
    assert [galloc.reserve_n(g)[0] for g in graphs] == sizes


# --- the steps of an earlier reserve (AllocRecord) ------------------------------------------------
def scaled(g: Graph, k: int) -> Graph:
    """g with every tensor k times as long along ne[0] (the same structure, other sizes)."""

    def longer(x: Tensor) -> Tensor:
        ne = (x.ne[0] * k, *x.ne[1:])
        row = 4 * ne[0]
        nb = (4, row, row * ne[1], row * ne[1] * ne[2])
        return x._replace(ne=ne, nb=nb, nbytes=x.nbytes * k)

    return replace(g, tensors=tuple(longer(x) for x in g.tensors))


def reserved(
    g: Graph, bufts: list[BufferType], record: AllocRecord | None = None
) -> tuple[object, ...]:
    galloc = Gallocr(bufts)
    sizes = galloc.reserve_n(g, record)
    assert galloc.last is not None
    return sizes, galloc.last.addrs


@pytest.mark.parametrize("g", [r[1] for r in GRAPH_ROWS], ids=[r[0] for r in GRAPH_ROWS])
def test_a_record_places_the_same_structure_at_other_sizes(g: Graph) -> None:
    record = AllocRecord()
    assert reserved(g, [CPU], record) == reserved(g, [CPU])
    assert record.graph is g
    for k in (3, 1):
        other = scaled(g, k)
        assert record.fits(other, [CPU])
        assert reserved(other, [CPU], record) == reserved(other, [CPU])
        assert record.graph is g  # replayed, not recorded again


IN_PLACE = GRAPH_ROWS[0][1]  # y = SCALE(x) reuses x in place


def _with(g: Graph, name: str, **fields: Any) -> Graph:
    return replace(
        g, tensors=tuple(x._replace(**fields) if x.name == name else x for x in g.tensors)
    )


@pytest.mark.parametrize(
    ("other", "bufts"),
    [
        (_with(IN_PLACE, "y", ne=(50, 2, 1, 1)), [CPU]),  # y's layout differs from x's
        (_with(IN_PLACE, "z", src=(2,)), [CPU]),  # z reads y only
        (_with(IN_PLACE, "y", op="CPY"), [CPU]),  # not an in-place op
        (replace(IN_PLACE, nodes=IN_PLACE.nodes[::-1]), [CPU]),
        (IN_PLACE, [BufferType("dev", 32)]),
    ],
    ids=["another layout", "another source", "another op", "another order", "another buffer"],
)
def test_a_record_declines_another_structure(other: Graph, bufts: list[BufferType]) -> None:
    """reserve_n then allocates afresh and records that graph instead."""
    record = AllocRecord()
    reserved(IN_PLACE, [CPU], record)
    assert not record.fits(other, bufts)
    assert reserved(other, bufts, record) == reserved(other, bufts)
    assert record.graph is other


def test_a_record_asks_again_only_the_sizes_a_change_reaches() -> None:
    """A buffer type's rule reads the tensor and its sources (CUDA's FLASH_ATTN_EXT reads K and
    V): a replay reuses the recorded answer where neither changed, and asks again for the
    changed tensor and each tensor reading it; the places are a fresh allocation's."""
    asked: list[str] = []

    def with_sources(tensors: Sequence[Tensor], i: int) -> int:
        asked.append(tensors[i].name)
        return tensors[i].nbytes + sum(tensors[s].nbytes for s in tensors[i].src if s is not None)

    dev = BufferType("dev", 32, alloc_size=with_sources)
    g = graph([W, X], [t("y", src=("w", "x")), t("z", src=("y",)), t("out", src=("z",))])
    record = AllocRecord()
    reserved(g, [dev], record)
    assert asked == ["x", "y", "z", "out"]
    other = _with(g, "x", ne=(200, 1, 1, 1), nb=(4, 800, 800, 800), nbytes=800)
    asked.clear()
    assert record.fits(other, [dev])
    got = reserved(other, [dev], record)
    assert asked == ["x", "y"]  # z and out: the recorded sizes
    assert record.graph is g
    # x at 0; y (its 400 bytes, w's 400, x's 800) after it; z in x's freed block; out after z
    want = ((2400,), (None, (0, 0, 0), (0, 0, 800), (0, 0, 0), (0, 0, 800)))
    assert got == reserved(other, [dev]) == want


# test_resplit's plans: each replays one placement at several cache sizes (replay.Splits keeps
# each split graph's AllocRecord)
@pytest.mark.parametrize(("shape", "args"), PLANS)
def test_a_plans_reserves_from_records(
    shape: str, args: list[str], shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every reserve a plan takes from an earlier one's steps places every tensor where a fresh
    allocation does, and the plan takes some."""
    replayed = []

    def checked(
        g: Graph,
        bufts: Sequence[BufferType],
        tallocs: Sequence[DynTallocr],
        rec: AllocRecord,
        changed: Sequence[int],
        marks: tuple[int, ...] = (),
    ) -> tuple[list[tuple[int, int, int] | None], Marked | None]:
        got = replay_steps(g, bufts, tallocs, rec, changed, marks)
        fresh = Gallocr(bufts)
        fresh.reserve_n(g, marks=marks)
        assert fresh.last is not None
        assert tuple(got[0]) == fresh.last.addrs
        assert [t.max_size for t in tallocs] == [t.max_size for t in fresh.tallocs]
        if marks:  # where the pass stood: as the fresh pass's
            assert got[1] is not None and fresh.marked is not None
            assert (got[1].at, got[1].snaps) == (fresh.marked.at, fresh.marked.snaps)
        replayed.append(g)
        return got

    monkeypatch.setattr(alloc, "_replay", checked)
    # every graph allocated: the one-token ones too (test_reserve_skip checks the skip)
    monkeypatch.setattr(Gallocr, "holds", lambda self, g, extra=(): False)
    path = make_shapes.write_shape(shape, shapes_dir)
    result = CliRunner().invoke(cli, ["plan", str(path), *args, "--json"])
    assert result.exit_code == 0, result.output
    assert len(replayed) >= 2


# --- real llama.cpp -----------------------------------------------------------------------------
FIXTURE_FILES = sorted(GRAPHS.glob("alloc-*.jsonl.gz"))


def test_the_fixtures_cover_every_backend_kind() -> None:
    kinds = {read_fixture(p).case.server for p in FIXTURE_FILES}
    assert kinds == {"cpu", "vulkan", "rpc"}
    stored = {f"alloc-{n}.jsonl.gz" for n, c in CASES.items() if c.fixture}
    assert {p.name for p in FIXTURE_FILES} == stored


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_recorded_calls_replay_to_the_byte(path: Path) -> None:
    rec = read_fixture(path)
    rows = replay(rec)
    assert len(rows) >= 3
    assert [(seq, got) for seq, got, _ in rows] == [(seq, want) for seq, _, want in rows]


def test_the_chunked_fixture_shrinks_and_regrows() -> None:
    # the recorded Vulkan_Host buffer with 4 MiB chunks: reallocated smaller, then larger again;
    # a running maximum of the peaks would not reproduce it
    rec = read_fixture(GRAPHS / "alloc-vulkan-chunks.jsonl.gz")
    host = [want[1] for _, _, want in replay(rec)]
    assert host[1] < host[0] == host[2]


def _live(name: str, *, to_context: bool = False) -> None:
    rows = replay(record(CASES[name], to_context=to_context))
    assert len(rows) >= 3
    assert [got for _, got, _ in rows] == [want for _, _, want in rows]


@pytest.mark.slow
@needs_demo
@needs_llama_server
def test_live_cpu_server_replays_to_the_byte() -> None:
    _live("cpu-np4")


@pytest.mark.slow
@pytest.mark.skipif(vulkan_rpc_bin_dir() is None, reason=VK_RPC_BIN_ABSENT)
@needs_demo
def test_live_vulkan_partial_offload_in_chunks_replays_to_the_byte() -> None:
    _live("vulkan-chunks")
    _live("vulkan-ngl6")


@pytest.mark.slow
@pytest.mark.skipif(vulkan_rpc_bin_dir() is None, reason=VK_RPC_BIN_ABSENT)
@needs_demo
def test_live_rpc_pipeline_parallel_replays_to_the_byte() -> None:
    _live("rpc2")  # two CPU workers and the host: three buffers, four copies of split inputs


@pytest.mark.slow
@pytest.mark.skipif(not installed("gguf"), reason="needs gguf (scripts/make_shapes.py)")
@needs_llama_server
def test_live_real_shape_moe_replays_to_the_byte() -> None:
    """Read until the context is built: the CPU server's probe decode adds no galloc call (b11434:
    the same three), and it would read the 17 GiB sparse file and run a token through it."""
    _live("cpu-qwen3-30b-a3b", to_context=True)
