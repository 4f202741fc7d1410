"""A short graph for a model whose blocks repeat: the replay builds, splits and allocates each long
run of alike blocks as a few of them, and proves on that short graph that the full one allocates
the same compute buffers.

Why it holds. llama.cpp's graph is its blocks in order (llm_graph_context's `for il < n_layer`),
each block's nodes one window of the graph (ggml_visit_parents_graph reaches a block's nodes from
the next block's first one), and ggml_backend_sched_split_graph and ggml_gallocr_alloc_graph_impl
walk that order with a state that carries from window to window. Two blocks are alike when
everything their nodes are made from is the same (`signatures`: the per-layer hyper-parameters,
the block's tensors with their types, shapes and buffers, its cache's buffer, whether it is the
last). A run of alike units (a unit: 1 to MAX_PERIOD blocks that repeat, as a K-quant mix's
every third block) then makes alike windows, which `shorten` leaves out all but KEEP_HEAD units
at the start and KEEP_TAIL at the end of (a Cut between the units L and R kept on either side).

The short graph's allocation (alloc.Marked) then shows, per cut (`proves`): no leaf or graph
input that ggml-alloc allocates before its walk is first read in the windows compared (a
block's own would be allocated there once per block); the allocators' free blocks before L's
window and before R's are the same; and the two windows take the same steps at the same places
(each allocation's buffer, chunk, offset and size; each free's and in-place reuse's, and which
allocation of its own window or of the previous one it gives back). By induction, each unit left
out would start from those free blocks, take those steps and end on them again; so the full
graph reaches the same peaks, and from R on it runs as the short one does. Where any of this
does not show, the caller replays the full graph. Pipeline parallelism's copies of every graph
input (unread but the first) would hide a block's own inputs from that check: the caller takes
the full graph there.

Also: the full graph's tensor count from the short one (template.count_short, for the
scheduler's hash set) and Gallocr.holds' sums with the units left out (`left_out_bytes`).

Not shortened: archs whose builders decide a block by its index beyond what the signature holds
(INDEX_RULES: a RoPE skipped every 4th block, a dense lead or deepstack counted in the builder).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, is_dataclass
from itertools import chain
from operator import attrgetter

from ...facts.hparams import ModelFacts
from .alloc import Gallocr, Marked, allocates
from .loader import tensor_map
from .nodes import Graph
from .params import GraphConfig

KEEP_HEAD = 3  # units kept at a run's start: its first, one to settle, and L
KEEP_TAIL = 2  # at its end: R and the unit after it (R's window then frees what L's does)
MAX_KEPT = 0.5  # the most of a model's blocks a short graph keeps (else the full graph)
MAX_PERIOD = 6  # the longest unit of blocks looked for (llama.cpp's K-quant mixes repeat every 3
# blocks, Gemma 3's sliding-window pattern every 6)

# the builders (models/) whose blocks differ by their index alone, beyond the signature: afmoe,
# llama4, smallthinker and smollm3 (no RoPE every 4th block), ernie4_5_moe (its MoE interleave),
# gemma3n (n_layer_sparsity), qwen3vl and qwen3vlmoe (deepstack inputs of the first blocks)
INDEX_RULES = frozenset(
    {
        "afmoe",
        "llama4",
        "smallthinker",
        "smollm3",
        "ernie4_5_moe",
        "gemma3n",
        "qwen3vl",
        "qwen3vlmoe",
    }
)


@dataclass(frozen=True, slots=True)
class Cut:
    """Whole units of `period` blocks left out between the kept units that start at the blocks
    `before` (L) and `after` (R)."""

    before: int
    after: int
    period: int = 1

    @property
    def skipped(self) -> int:
        return self.after - self.before - self.period


@dataclass(frozen=True, slots=True)
class Shortened:
    """The blocks the short graph builds (GraphConfig.layers) and where it leaves some out."""

    layers: tuple[int, ...]
    cuts: tuple[Cut, ...]


def _per_layer(facts: ModelFacts) -> list[tuple[object, ...]]:
    """The facts' per-layer values (every tuple field of n_layer_all entries, in nested facts
    too), per layer."""
    n = facts.n_layer_all
    columns: list[tuple[object, ...]] = []
    for holder in (facts, *(getattr(facts, f.name) for f in fields(facts))):
        if holder is not facts and not is_dataclass(holder):
            continue
        for f in fields(holder):
            if f.name in ("tensors", "warnings"):
                continue
            value = getattr(holder, f.name)
            if isinstance(value, tuple) and len(value) == n:
                columns.append(value)
    return [tuple(c[il] for c in columns) for il in range(n)]


def _block_part(name: str) -> tuple[int, str] | None:
    """A block tensor's block and the rest of its name ("blk.<il>.<part>", LLM_TN's); None for
    the others."""
    if not name.startswith("blk."):
        return None
    il, _, part = name[4:].partition(".")
    return (int(il), part) if il.isdigit() else None


def _blocks(facts: ModelFacts) -> dict[int, tuple[tuple[str, str, tuple[int, ...]], ...]]:
    """Each block's tensors: (name after "blk.<il>.", type, shape), in file order."""
    out: dict[int, list[tuple[str, str, tuple[int, ...]]]] = {}
    for name, (kind, shape) in tensor_map(facts).items():
        if (hit := _block_part(name)) is not None:
            out.setdefault(hit[0], []).append((hit[1], kind, shape))
    return {il: tuple(parts) for il, parts in out.items()}


# the model's part of signatures, once per facts object (by identity, as loader.tensor_map)
_FACTS: dict[
    int,
    tuple[
        ModelFacts,
        list[tuple[object, ...]],
        dict[int, tuple[tuple[str, str, tuple[int, ...]], ...]],
    ],
] = {}


def signatures(facts: ModelFacts, config: GraphConfig) -> list[tuple[object, ...]]:
    """What each block's nodes are made from, per block of the graph (n_layer): its per-layer
    hyper-parameters, tensors, weight and cache buffers and overrides, and whether it is the
    last (llm_graph_context's output-row selection)."""
    n = facts.n_layer
    hit = _FACTS.get(id(facts))
    if hit is None or hit[0] is not facts:
        if len(_FACTS) > 16:
            _FACTS.clear()
        hit = _FACTS[id(facts)] = (facts, _per_layer(facts), _blocks(facts))
    _f, hparams, blocks = hit
    overrides: dict[int, list[tuple[str, str]]] = {}
    for name, buf in config.overrides:
        if (blk := _block_part(name)) is not None:
            overrides.setdefault(blk[0], []).append((blk[1], buf))
    lw, lkv = config.layer_weights, config.layer_kv
    return [
        (
            hparams[il],
            blocks.get(il, ()),
            lw[il] if il < len(lw) else None,
            lkv[il] if il < len(lkv) else None,
            tuple(sorted(overrides.get(il, ()))),
            il == n - 1,
        )
        for il in range(n)
    ]


# shorten's answers: (facts, the config's buffers) -> (facts, answer); facts by identity, as
# loader.tensor_map keeps them
_SHORTENED: dict[tuple[int, object], tuple[ModelFacts, Shortened | None]] = {}


# the models whose short graph proved nothing (unproven), by identity
_DECLINED: dict[int, ModelFacts] = {}


def shorten(facts: ModelFacts, config: GraphConfig) -> Shortened | None:
    """_shorten, once per model and buffers (a plan asks it for each replay)."""
    if facts.architecture in INDEX_RULES or config.layers or _DECLINED.get(id(facts)) is facts:
        return None
    key = (id(facts), (config.layer_weights, config.layer_kv, config.overrides))
    hit = _SHORTENED.get(key)
    if hit is None or hit[0] is not facts:
        if len(_SHORTENED) > 256:
            _SHORTENED.clear()
        hit = _SHORTENED[key] = (facts, _shorten(facts, config))
    return hit[1]


def unproven(facts: ModelFacts) -> None:
    """Where a short graph of this model proved nothing (proves): shorten answers None for it
    from now on, so that later replays go to the full graph at once instead of replaying both
    (what declined there, a block's own inputs or a state that has not settled, is the model's
    and declines alike at other sizes and placements)."""
    if len(_DECLINED) > 64:
        _DECLINED.clear()
    _DECLINED[id(facts)] = facts


def _shorten(facts: ModelFacts, config: GraphConfig) -> Shortened | None:
    """The short graph's blocks for this model and config: each run of alike units (the
    shortest period of blocks, up to MAX_PERIOD, that covers the most blocks from where the run
    starts) longer than KEEP_HEAD + KEEP_TAIL units kept at its ends; None where nothing is left
    out (shorten answers for the archs of INDEX_RULES)."""
    ids: dict[tuple[object, ...], int] = {}
    sig = [ids.setdefault(x, len(ids)) for x in signatures(facts, config)]  # alike: one id
    n = len(sig)
    layers: list[int] = []
    cuts: list[Cut] = []
    a = 0
    while a < n:
        best = (0, 0)  # blocks covered, period
        for p in range(1, MAX_PERIOD + 1):
            b = a + p
            while b < n and sig[b] == sig[b - p]:
                b += 1
            units = (b - a) // p
            if units > KEEP_HEAD + KEEP_TAIL and units * p > best[0]:
                best = (units * p, p)
        length, p = best
        if not length:
            layers.append(a)
            a += 1
            continue
        end = a + length
        before, after = a + (KEEP_HEAD - 1) * p, end - KEEP_TAIL * p
        layers += range(a, before + p)
        layers += range(after, end)
        cuts.append(Cut(before, after, p))
        a = end
    if not cuts or len(layers) > MAX_KEPT * n:
        return None  # (too little left out to pay for the proof and the one-token reserve)
    return Shortened(tuple(layers), tuple(cuts))


def first_named(names: Iterable[str], blocks: set[int]) -> dict[int, int]:
    """Per block of `blocks`, the position in `names` of the first name for it ("<name>-<il>",
    llm_graph_context::cb)."""
    first: dict[int, int] = {}
    suffixes = {f"-{il}": il for il in blocks}
    for pos, name in enumerate(names):
        k = name.rfind("-")
        if k > 0:
            il = suffixes.get(name[k:])
            if il is not None and il not in first:
                first[il] = pos
                if len(first) == len(suffixes):
                    break
    return first


def marks(graph: Graph, short: Shortened) -> tuple[int, ...] | None:
    """The node positions where the windows `proves` compares start (L-1, L, R and the unit
    after R, per cut), after the walk's first node (0), ascending; None where the graph does not
    show them in that order."""
    need = {il for c in short.cuts for il in (c.before - c.period, c.before, c.after)}
    need |= {c.after + c.period for c in short.cuts}
    tensors = graph.tensors
    first = first_named([tensors[i].name for i in graph.nodes], need)
    out: list[int] = [0]  # the walk's first node: the steps before it allocate leafs and inputs
    for cut in short.cuts:
        p = cut.period
        blocks = (cut.before - p, cut.before, cut.after, cut.after + p)
        if any(il not in first for il in blocks):
            return None
        pos = [first[il] for il in blocks]
        if pos != sorted(set(pos)) or pos[0] <= out[-1]:
            return None
        out += pos
    return tuple(out)


def cut_marks(at: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """marks' positions per cut: where units L-1, L, R and the unit after R start."""
    return [(at[k], at[k + 1], at[k + 2], at[k + 3]) for k in range(1, len(at) - 3, 4)]


_ALLOC, _REUSE, _FREE = 0, 1, 3  # alloc.py's step kinds
_SRC = attrgetter("src")


def _trace(m: Marked, prev: int, start: int, end: int) -> list[tuple[object, ...]] | None:
    """The steps start..end of the pass as the allocators see them: each allocation's place and
    size; each free's and in-place reuse's, with which allocation of this window (0, n) or of
    the previous one, prev..start (1, n), it gives back. None where a step gives back a tensor
    allocated before the previous window, or is a view's reuse."""
    steps, placed, sized = m.steps, m.placed, m.sized
    born: dict[int, tuple[int, int]] = {}
    n = 0
    for k in range(prev, start):
        kind, node, _b = steps[k]
        if kind in (_ALLOC, _REUSE):
            born[node] = (1, n)
            n += 1
    out: list[tuple[object, ...]] = []
    n = 0
    for k in range(start, end):
        kind, node, b = steps[k]
        at = placed[node]
        if at is None:
            return None
        if kind == _ALLOC:
            out.append((kind, at, sized[b][node]))
            born[node] = (0, n)
            n += 1
            continue
        ref = born.get(b if kind == _REUSE else node)
        if ref is None:
            return None
        if kind == _FREE:
            out.append((kind, at, sized[at[0]][node], ref))
            continue
        if kind != _REUSE:
            return None
        parent = placed[b]
        if parent is None:
            return None
        out.append((kind, at, sized[at[0]][node], sized[parent[0]][b], ref))
        born[node] = (0, n)
        n += 1
    return out


def proves(m: Marked | None, short: Shortened, graph: Graph) -> bool:
    """Whether the short graph's pass (marked at `marks`) shows, at every cut, that the blocks
    left out would allocate as L's window does (module docstring): no leaf or input allocated
    before the walk is first read in the windows compared (one of a block's own would be
    allocated there once per block of the full graph), the same free blocks before L and before
    R, the two windows' steps alike (_trace), and chunks' peaks that decide no step (one chunk
    per allocator, or the same peaks)."""
    if m is None or len(m.at) != 1 + 4 * len(short.cuts):
        return False
    if not _no_block_inputs(m, graph):
        return False
    for c, (s_prev, s_l, s_r, s_next) in enumerate(cut_marks(m.at)):
        before_l, before_r = m.snaps[2 + 4 * c], m.snaps[3 + 4 * c]
        for (offs_l, sizes_l, peak_l), (offs_r, sizes_r, peak_r) in zip(
            before_l, before_r, strict=True
        ):
            if offs_l != offs_r or sizes_l != sizes_r:
                return False
            if len(peak_r) > 1 and peak_l != peak_r:
                return False
        left = _trace(m, s_prev, s_l, s_r)
        if left is None or left != _trace(m, s_l, s_r, s_next):
            return False
    return True


def _no_block_inputs(m: Marked, graph: Graph) -> bool:
    """Whether no tensor the walk allocates before its first node (ggml-alloc's leafs and graph
    inputs) is first read by a node of a window compared (_first_read_outside)."""
    pre = {node for kind, node, _b in m.steps[: m.at[0]] if kind in (_ALLOC, _REUSE)}
    return _first_read_outside(graph, m.positions, pre)


def _first_read_outside(graph: Graph, at: tuple[int, ...], tensors: set[int]) -> bool:
    """Whether none of `tensors` is first read (as a node's source, in graph order) by a node of
    a window compared: from L-1's first node to the end of the unit after R, per cut (`at`:
    marks' positions)."""
    if not tensors:
        return True
    ts, nodes = graph.tensors, graph.nodes

    def read(a: int, b: int) -> set[int | None]:
        return set(chain.from_iterable(map(_SRC, map(ts.__getitem__, nodes[a:b]))))

    before: set[int | None] = set()
    done = 0
    for start, _l, _r, end in cut_marks(at):
        before |= read(done, start)
        inside = read(start, end)
        if (inside & tensors) - before:
            return False
        before |= inside
        done = end
    return True


def left_out_bytes(
    gallocr: Gallocr, graph: Graph, short: Shortened, at: tuple[int, ...]
) -> list[int] | None:
    """Per buffer id, the bytes the blocks a short graph leaves out would add to Gallocr.holds'
    sums (`at`: marks'): per cut, the units left out times unit L's (Gallocr.span_bytes), where
    unit R counts alike. None where that is not shown: unit L and R count differently, or a leaf
    that ggml-alloc allocates is first read in the windows compared (a block's own: it is not in
    the units)."""
    tensors = graph.tensors
    leafs = {i for i in graph.leafs if allocates(tensors[i])}
    if not _first_read_outside(graph, at, leafs):
        return None
    out = [0] * len(gallocr.bufts)
    for cut, (_prev, l_at, r_at, end) in zip(short.cuts, cut_marks(at), strict=True):
        unit = gallocr.span_bytes(graph, l_at, r_at)
        if gallocr.span_bytes(graph, r_at, end) != unit:
            return None
        units = cut.skipped // cut.period
        out = [o + units * u for o, u in zip(out, unit, strict=True)]
    return out
