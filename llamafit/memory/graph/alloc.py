"""A replay of ggml's graph allocator (ggml/src/ggml-alloc.c at llama.cpp b11434): where
ggml_gallocr_reserve_n places every tensor of a split graph, and how large each compute buffer
grows.

The split graph carries a buffer id per node and leaf (the scheduler's backend index,
ggml_backend_sched_split_graph); per buffer id a `BufferType` gives what ggml-alloc asks of a
ggml_backend_buffer_type: its alignment, its maximum buffer size (a larger need is split into
chunks) and its alloc size per tensor.

- `allocate(graph, bufts)`: one ggml_gallocr_alloc_graph_impl pass from empty allocators: every
  chunk's peak (ggml_dyn_tallocr max_size) and the address of every tensor ggml-alloc placed.
- `peaks(graph, bufts)`: the peak per buffer id, summed over chunks.
- `Gallocr`: the allocator's state over several reserves (llama_context reserves a few graphs into
  one ggml_gallocr; a buffer is reallocated only when a chunk grows): `reserve_n(graph)` returns
  ggml_gallocr_get_buffer_size per buffer id after the call, which is what llama.cpp reports;
  `again(allocation)` the same for a graph reserved before, without allocating it; `holds(graph)`
  whether a reserve of `graph` would leave every buffer as it is, by a bound on its sizes.

The hot loops run over plain lists of ints (a graph of a few thousand nodes replays in
milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter, is_not, not_

from ...errors import LlamafitError
from .nodes import FLAG_INPUT, FLAG_OUTPUT, Graph, Tensor

SIZE_MAX = (1 << 64) - 1
# ggml/src/ggml-alloc.c
MAX_FREE_BLOCKS = 256
GGML_VBUFFER_MAX_CHUNKS = 16

# ggml/src/ggml-alloc.c ggml_op_can_inplace (names as ggml_op_name prints them)
INPLACE_OPS = frozenset(
    {
        "FILL",
        "SCALE",
        "DIAG_MASK_ZERO",
        "DIAG_MASK_INF",
        "ADD",
        "ADD_ID",
        "ADD1",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "ROPE_BACK",
        "SILU_BACK",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "CLAMP",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
    }
)


class AllocError(LlamafitError):
    """ggml-alloc would abort on this graph (out of free blocks or chunks, a bad buffer id)."""


@dataclass(frozen=True, slots=True)
class BufferType:
    """What ggml-alloc asks of one ggml_backend_buffer_type.

    Buffer ids whose types have the same `name` share one allocator and one buffer, as
    ggml_gallocr_new_n does for a buffer type given twice (ggml_gallocr_get_buffer_size then
    reports it under the first id only)."""

    name: str  # ggml_backend_buft_name
    alignment: int  # ggml_backend_buft_get_alignment (a power of two)
    max_size: int = SIZE_MAX  # ggml_backend_buft_get_max_size: the most one chunk holds
    # ggml_backend_buft_get_alloc_size of the graph's tensor at an index (a backend's rule may read
    # the tensor's sources, and nothing else: AllocRecord.sizes_at relies on it); None is its
    # default, ggml_nbytes (CPU, Vulkan, RPC on CPU)
    alloc_size: Callable[[Sequence[Tensor], int], int] | None = None
    # bytes the buffer type adds to each buffer it allocates: ggml-vulkan.cpp
    # ggml_backend_vk_host_buffer_type_alloc_buffer adds 32 ("behave like the CPU buffer type")
    alloc_extra: int = 0


class DynTallocr:
    """ggml-alloc.c struct ggml_dyn_tallocr: per chunk a list of free blocks sorted by offset
    (offsets and sizes in two lists) and the chunk's peak (max_size)."""

    __slots__ = ("alignment", "max_chunk_size", "offs", "sizes", "max_size")

    def __init__(self, alignment: int, max_buffer_size: int = SIZE_MAX) -> None:
        if alignment <= 0 or alignment & (alignment - 1):
            raise AllocError(f"alignment {alignment} is not a power of two")
        self.alignment = alignment
        # ggml_dyn_tallocr_new: clamped to avoid overflows
        self.max_chunk_size = min(max_buffer_size, SIZE_MAX // 2)
        self.offs: list[list[int]] = []
        self.sizes: list[list[int]] = []
        self.max_size: list[int] = []

    def reset(self) -> None:
        """ggml_dyn_tallocr_reset."""
        self.offs = []
        self.sizes = []
        self.max_size = []

    def _new_chunk(self, min_size: int) -> int:
        """ggml_dyn_tallocr_new_chunk: one free block of max(min_size, max_chunk_size); the last
        possible chunk is virtually endless."""
        n = len(self.max_size)
        if n >= GGML_VBUFFER_MAX_CHUNKS:
            return -1
        size = max(min_size, self.max_chunk_size)
        if n == GGML_VBUFFER_MAX_CHUNKS - 1:
            size = SIZE_MAX // 2
        self.offs.append([0])
        self.sizes.append([size])
        self.max_size.append(0)
        return n

    def alloc(self, size: int) -> tuple[int, int]:  # noqa: C901 (ggml port: kept diffable)
        """ggml_dyn_tallocr_alloc: (chunk, offset) of `size` bytes (aligned up)."""
        size += -size % self.alignment  # aligned_offset(NULL, size, alignment)
        best_chunk = -1
        best_block = -1
        all_sizes = self.sizes
        if len(all_sizes) == 1:
            # one chunk (nearly every call): the loops below, unrolled for it; the last block is
            # taken whenever it fits (its reuse always beats the initial INT64_MIN)
            sizes = all_sizes[0]
            last = len(sizes) - 1
            if last > 0:
                best_fit_size = SIZE_MAX
                for i in range(last):
                    s = sizes[i]
                    if size <= s <= best_fit_size:
                        best_block = i
                        best_fit_size = s
            if best_block == -1 and last >= 0 and sizes[last] >= size:
                best_block = last
            if best_block != -1:
                offs = self.offs[0]
                offset = offs[best_block]
                end = offset + size
                left = sizes[best_block] - size
                if left:
                    offs[best_block] = end
                    sizes[best_block] = left
                else:
                    del offs[best_block], sizes[best_block]
                peak = self.max_size
                if end > peak[0]:
                    peak[0] = end
                return 0, offset
        # the best fitting free block besides the last block, within any chunk (the best size is
        # reset per chunk: a later chunk's fit wins, as in the C loop)
        for c, sizes in enumerate(all_sizes):
            best_fit_size = SIZE_MAX
            for i in range(len(sizes) - 1):
                s = sizes[i]
                if size <= s <= best_fit_size:
                    best_chunk = c
                    best_block = i
                    best_fit_size = s
        if best_block == -1:
            # no suitable block: try each chunk's last block (this may grow a chunk's size)
            best_reuse = -(1 << 63)  # INT64_MIN
            for c, sizes in enumerate(all_sizes):
                if sizes:
                    last = len(sizes) - 1
                    reuse = self.max_size[c] - self.offs[c][last] - size
                    better_reuse = best_reuse < 0 and reuse > best_reuse
                    better_fit = 0 <= reuse < best_reuse
                    if sizes[last] >= size and (better_reuse or better_fit):
                        best_chunk = c
                        best_block = last
                        best_reuse = reuse
        if best_block == -1:
            # none of the existing chunks has enough space left
            best_chunk = self._new_chunk(size)
            best_block = 0
        if best_chunk == -1:
            raise AllocError(f"graph allocation: no chunk left for {size} bytes")
        offs = self.offs[best_chunk]
        sizes = all_sizes[best_chunk]
        offset = offs[best_block]
        offs[best_block] = offset + size
        sizes[best_block] -= size
        if sizes[best_block] == 0:
            del offs[best_block]
            del sizes[best_block]
        if offset + size > self.max_size[best_chunk]:
            self.max_size[best_chunk] = offset + size
        return best_chunk, offset

    def free_bytes(self, chunk: int, offset: int, size: int) -> None:
        """ggml_dyn_tallocr_free_bytes: merge with the block it ends or starts, or insert a new
        block in address order."""
        size += -size % self.alignment  # aligned_offset(NULL, size, alignment)
        offs = self.offs[chunk]
        sizes = self.sizes[chunk]
        end = offset + size
        n = len(offs)
        i = 0
        for o in offs:  # (the lists change only where the loop returns)
            s = sizes[i]
            if o + s == offset:
                # the freed bytes follow block i: grow it, and merge it with the next block
                s += size
                if i < n - 1 and o + s == offs[i + 1]:
                    sizes[i] = s + sizes[i + 1]
                    del offs[i + 1], sizes[i + 1]
                else:
                    sizes[i] = s
                return
            if end == o:
                # the freed bytes precede block i: grow it down, and merge it with the previous
                offs[i] = offset
                s += size
                if i > 0 and offs[i - 1] + sizes[i - 1] == offset:
                    sizes[i - 1] += s
                    del offs[i], sizes[i]
                else:
                    sizes[i] = s
                return
            i += 1
        # ggml_dyn_tallocr_insert_block
        if n >= MAX_FREE_BLOCKS:
            raise AllocError("graph allocation: out of free blocks")
        pos = 0
        while pos < n and offs[pos] < offset:
            pos += 1
        offs.insert(pos, offset)
        sizes.insert(pos, size)


# per allocator (each buffer type once): its chunks' free blocks, offsets and sizes, and peaks
FreeLists = tuple[
    tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...], tuple[int, ...]], ...
]


def free_lists(tallocs: Sequence[DynTallocr]) -> FreeLists:
    """The allocators' state between two steps (each allocator once): what a later step's
    placement depends on besides the tensors still held."""
    seen: dict[int, DynTallocr] = {id(t): t for t in tallocs}
    return tuple(
        (tuple(map(tuple, t.offs)), tuple(map(tuple, t.sizes)), tuple(t.max_size))
        for t in seen.values()
    )


@dataclass(frozen=True, slots=True)
class Allocation:
    """One allocation pass over a graph."""

    # per buffer id: each chunk's peak (ggml_dyn_tallocr_max_size); a buffer id sharing another's
    # buffer type repeats the shared allocator's chunks
    chunk_sizes: tuple[tuple[int, ...], ...]
    # per tensor index: (buffer id, chunk, offset) where ggml-alloc placed it (an in-place node
    # shares its parent's address), None for views, external tensors and unused ones
    addrs: tuple[tuple[int, int, int] | None, ...]
    # per buffer id: the index of the first buffer id with the same buffer type (itself if none)
    owner: tuple[int, ...]

    @property
    def peaks(self) -> tuple[int, ...]:
        """Per buffer id, the chunks' peaks summed (0 for a buffer id whose buffer type an earlier
        id has: ggml_gallocr_get_buffer_size counts a shared buffer once)."""
        return tuple(sum(c) if self.owner[i] == i else 0 for i, c in enumerate(self.chunk_sizes))


def _owners(bufts: Sequence[BufferType]) -> tuple[int, ...]:
    """ggml_gallocr_new_n: a buffer type given twice reuses the first one's allocator."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(b.name, i) for i, b in enumerate(bufts))


# The steps of one ggml_gallocr_alloc_graph_impl pass (AllocRecord.steps): (kind, tensor, buffer id
# or parent) of each ggml_gallocr_allocate_node that took a new block (_ALLOC, tensor, buffer id)
# or reused a parent's in place (_REUSE, tensor, parent; _REUSE_VIEW: a view parent's, the extra
# space freed of its view source), and of each ggml_gallocr_free_node that freed (_FREE, tensor,
# 0), in order
_ALLOC, _REUSE, _REUSE_VIEW, _FREE = 0, 1, 2, 3
_Step = tuple[int, int, int]
# per tensor index: (buffer id, chunk, offset) where ggml-alloc placed it, None where it did not
_Placed = list[tuple[int, int, int] | None]
# a zeroed struct hash_node: what ggml-alloc reads of a tensor it never placed
_UNPLACED = (0, 0, 0)


def _walk(  # noqa: C901 (ggml port: kept diffable)
    graph: Graph, n_buf: int, marks: Sequence[int] = (), at: list[int] | None = None
) -> tuple[list[_Step], list[tuple[int, int, bool]]]:
    """The walk of ggml-alloc.c ggml_gallocr_alloc_graph_impl over `graph`: the steps it takes,
    and each ggml_are_same_layout it asks (node, parent, answer), in order. `marks`: node
    positions (ascending) at which `at` gets the number of steps taken before that node.

    Which step comes next follows from the steps before (struct hash_node's allocated flag and
    counts) and the graph's structure alone, never from where a block lands: _place places the
    steps. (ggml-alloc aborts at the step it cannot place: _place raises there.)"""
    tensors = graph.tensors
    n_t = len(tensors)
    flags: list[int] = list(map(_FLAGS, tensors))
    view_src: list[int | None] = list(map(_VIEW_SRC, tensors))
    # the sources without the empty slots (a tuple without None is kept as it is)
    srcs: list[tuple[int, ...]] = [
        s if None not in s else tuple(i for i in s if i is not None) for s in map(_SRC, tensors)
    ]
    # ggml_gallocr_allocate_node does nothing for a view, nor for a tensor ggml_gallocr_is_allocated
    # finds allocated outside ggml-alloc (data set, or on a buffer). Per tensor index: 2 for
    # those, 1 while ggml-alloc holds it allocated (hash_node.allocated), 0 otherwise; "not 0" is
    # ggml_gallocr_is_allocated for a tensor that is not a view
    state = [2 if t.data or t.buffer is not None or t.view_src is not None else 0 for t in tensors]
    inplace = [op in INPLACE_OPS for op in map(_OP, tensors)]
    # struct hash_node's counts, per tensor index
    n_children = [0] * n_t
    n_views = [0] * n_t
    steps: list[_Step] = []
    layouts: list[tuple[int, int, bool]] = []
    step = steps.append

    def allocate_node(node: int, bid: int) -> None:  # noqa: C901 (ggml port: kept diffable)
        """ggml_gallocr_allocate_node, for a tensor not yet allocated, not external and not a view
        (the callers test `state` first: the C function's first check)."""
        state[node] = 1
        # try to reuse a parent's buffer (in place)
        if inplace[node]:
            for parent in srcs[node]:
                if state[parent] != 1:  # external data (or a view): cannot be reused
                    continue
                vs = view_src[parent]
                # outputs cannot be reused
                if flags[parent] & FLAG_OUTPUT or (vs is not None and flags[vs] & FLAG_OUTPUT):
                    continue
                same = _same_layout(tensors[node], tensors[parent])
                layouts.append((node, parent, same))
                if not same or n_children[parent] != 1 or n_views[parent] != 0:
                    continue
                if vs is None:
                    step((_REUSE, node, parent))
                    state[parent] = 0  # avoid freeing the parent
                    return
                # unreachable at reserve (a view is never allocated by ggml-alloc), kept as in
                # the C code; data pointers compared as "set or not"
                if (
                    n_views[vs] == 1
                    and n_children[vs] == 0
                    and tensors[vs].data == tensors[parent].data
                ):
                    step((_REUSE_VIEW, node, parent))
                    state[parent] = 0
                    state[vs] = 0
                    return
        step((_ALLOC, node, bid))

    def free_node(node: int) -> None:
        """ggml_gallocr_free_node: graph outputs are never freed."""
        if flags[node] & FLAG_OUTPUT:
            return
        step((_FREE, node, 0))
        state[node] = 0

    leaf_ids = graph.leaf_buffer_ids or (0,) * len(graph.leafs)
    node_ids = graph.node_buffer_ids or (0,) * len(graph.nodes)
    if len(leaf_ids) != len(graph.leafs) or len(node_ids) != len(graph.nodes):
        raise AllocError("one buffer id per leaf and per node is needed")
    # ggml_gallocr_allocate_node asserts buffer_id >= 0 on every call (each id comes through it)
    for bid in (*leaf_ids, *node_ids):
        if not 0 <= bid < n_buf:
            raise AllocError(f"buffer id {bid} out of range (0..{n_buf - 1})")
    nodes = graph.nodes

    # allocate leafs
    for leaf, bid in zip(graph.leafs, leaf_ids, strict=True):
        if not state[leaf]:
            allocate_node(leaf, bid)

    # count children and views; allocate graph inputs first to avoid overwriting them
    for node, bid in zip(nodes, node_ids, strict=True):
        vs = view_src[node]
        # an op NONE node only carries dependencies for ggml-backend: not a view of its source
        if vs is not None and tensors[node].op != "NONE":
            n_views[vs] += 1
        if flags[node] & FLAG_INPUT and not state[node]:
            allocate_node(node, bid)
        for src in srcs[node]:
            n_children[src] += 1
            if flags[src] & FLAG_INPUT and not state[src]:
                allocate_node(src, bid)

    # allocate tensors in graph order, freeing parents when their last child is done (in
    # segments between the marks)
    start = 0
    for seg, end in enumerate((*marks, len(nodes))):
        for node, bid in zip(nodes[start:end], node_ids[start:end], strict=True):
            parents = srcs[node]
            # allocate parents (only leafs need to be allocated at this point)
            for parent in parents:
                if not state[parent]:
                    allocate_node(parent, bid)
            if not state[node]:
                allocate_node(node, bid)
            # update parents
            for parent in parents:
                left = n_children[parent] - 1
                n_children[parent] = left
                if left == 0 and n_views[parent] == 0:
                    vs = view_src[parent]
                    if vs is not None:
                        n_views[vs] -= 1
                        if n_views[vs] == 0 and n_children[vs] == 0 and state[vs] == 1:
                            free_node(vs)
                    elif state[parent] == 1:
                        free_node(parent)
        if at is not None and seg < len(marks):
            at.append(len(steps))
        start = end
    return steps, layouts


def _sizes_of(
    fn: object, nbytes: list[int], known: Sequence[list[int]] | None, i: int, n_t: int
) -> list[int]:
    """Buffer id i's alloc sizes per tensor: ggml_nbytes where its type has no rule (fn None),
    else the sizes known already (a record's), else -1 each (to be asked)."""
    if fn is None:
        return nbytes
    return [-1] * n_t if known is None else known[i]


def _place(  # noqa: C901 (one loop over the steps: kept flat)
    graph: Graph,
    bufts: Sequence[BufferType],
    tallocs: Sequence[DynTallocr],
    steps: Sequence[_Step],
    known: Sequence[list[int]] | None = None,
    cuts: Sequence[int] = (),
    snaps: list[FreeLists] | None = None,
) -> tuple[_Placed, list[list[int]]]:
    """The steps of a ggml_gallocr_alloc_graph_impl pass over `graph` (_walk's, or an AllocRecord's
    of a graph like it) taken on reset allocators (`tallocs`): the address of every tensor they
    place, and per buffer id the sizes ggml_backend_buft_get_alloc_size gave (-1: not asked).
    `known`: per buffer id with a rule of its own, the sizes known already (-1 where not;
    AllocRecord.sizes_at), taken as this pass's own. `cuts`: step indexes (ascending) before
    which `snaps` gets the allocators' free blocks (free_lists)."""
    tensors = graph.tensors
    n_t = len(tensors)
    nbytes: list[int] = list(map(_NBYTES, tensors))
    # ggml_backend_buft_get_alloc_size per buffer id and tensor: ggml_nbytes where the buffer
    # type has no rule of its own, else its rule's answer, asked once (a tensor is sized when
    # allocated and again when freed)
    sizers = [b.alloc_size for b in bufts]
    sized = [_sizes_of(fn, nbytes, known, i, n_t) for i, fn in enumerate(sizers)]
    allocs = [t.alloc for t in tallocs]
    frees = [t.free_bytes for t in tallocs]
    aligns = [t.alignment for t in tallocs]
    placed: _Placed = [None] * n_t

    def size_of(bid: int, t: int) -> int:
        """ggml_backend_buft_get_alloc_size, asked once (-1: not asked yet). A buffer type
        without a rule of its own has ggml_nbytes there, taken as it is: a hostile shape's
        negative one too, which the allocator then answers for as it did before."""
        size = sized[bid][t]
        fn = sizers[bid]
        if size < 0 and fn is not None:
            size = sized[bid][t] = fn(tensors, t)
        return size

    start = 0
    for seg, end in enumerate((*cuts, len(steps))):
        for kind, node, b in steps[start:end] if cuts else steps:
            if kind == _ALLOC:
                # ggml_gallocr_allocate_node's new block (ggml_dyn_tallocr_alloc) on buffer id b
                size = sized[b][node]
                if size < 0:
                    size = size_of(b, node)
                c, off = allocs[b](size)
                placed[node] = (b, c, off)
            elif kind == _FREE:
                # ggml_gallocr_free_node
                bid, c, off = placed[node] or _UNPLACED
                size = sized[bid][node]
                if size < 0:
                    size = size_of(bid, node)
                frees[bid](c, off, size)
            else:
                # ggml_gallocr_allocate_node in place: the node takes its parent's (b) address, and
                # ggml_gallocr_free_extra_space frees the tail of the parent (or of its view source)
                # that a smaller node leaves
                extra_of = b if kind == _REUSE else tensors[b].view_src
                assert extra_of is not None
                at = placed[node] = placed[b] or _UNPLACED
                bid = at[0]
                e_bid, e_chunk, e_offset = placed[extra_of] or _UNPLACED
                parent_size = sized[e_bid][extra_of]
                if parent_size < 0:
                    parent_size = size_of(e_bid, extra_of)
                node_size = sized[bid][node]
                if node_size < 0:
                    node_size = size_of(bid, node)
                if parent_size < node_size:
                    raise AllocError(f"{tensors[node].name}: larger than the parent it reuses")
                a = aligns[e_bid]  # aligned_offset(NULL, size, alignment)
                parent_size += -parent_size % a
                node_size += -node_size % a
                if parent_size > node_size:
                    frees[e_bid](e_chunk, e_offset + node_size, parent_size - node_size)
        if snaps is not None and seg < len(cuts):
            snaps.append(free_lists(tallocs))
        start = end
    return placed, sized


@dataclass(frozen=True, slots=True)
class Marked:
    """Where one pass stood at some node positions (Gallocr.reserve_n's `marks`): the steps taken
    before each (`at`) and the allocators' free blocks there (`snaps`), with the pass's steps,
    the placement of every tensor and the sizes asked (what periodic.py compares)."""

    positions: tuple[int, ...]
    at: tuple[int, ...]
    snaps: tuple[FreeLists, ...]
    steps: Sequence[_Step]
    placed: _Placed
    sized: list[list[int]]


def _alloc_graph(
    graph: Graph,
    bufts: Sequence[BufferType],
    tallocs: Sequence[DynTallocr],
    record: AllocRecord | None = None,
    marks: tuple[int, ...] = (),
) -> tuple[_Placed, Marked | None]:
    """ggml-alloc.c ggml_gallocr_alloc_graph_impl over reset allocators; the address per tensor:
    _walk's steps, placed (_place). `record`: an empty AllocRecord, given this pass. `marks`:
    node positions to stand at (Marked; None without)."""
    at: list[int] = []
    steps, layouts = _walk(graph, len(bufts), marks, at)
    snaps: list[FreeLists] = []
    placed, sized = _place(graph, bufts, tallocs, steps, None, at, snaps)
    if record is not None:
        record.graph, record.bufts = graph, tuple(bufts)
        record.steps, record.layouts, record.sized = steps, layouts, sized
        record.marks = (marks, tuple(at))
    if not marks:
        return placed, None
    return placed, Marked(marks, tuple(at), tuple(snaps), steps, placed, sized)


def _replay(
    graph: Graph,
    bufts: Sequence[BufferType],
    tallocs: Sequence[DynTallocr],
    record: AllocRecord,
    changed: Sequence[int],
    marks: tuple[int, ...] = (),
) -> tuple[_Placed, Marked | None]:
    """_alloc_graph of a graph that `record` fits (AllocRecord.changed: `changed`): its steps, at
    this graph's sizes, without the walk over the graph that decides them (but where the marks
    are new to the record)."""
    if marks and record.marks[0] != marks:
        at: list[int] = []
        _walk(graph, len(bufts), marks, at)
        record.marks = (marks, tuple(at))
    cuts = record.marks[1] if marks else ()
    snaps: list[FreeLists] = []
    known = record.sizes_at(graph, changed)
    placed, sized = _place(graph, bufts, tallocs, record.steps, known, cuts, snaps)
    if not marks:
        return placed, None
    return placed, Marked(marks, cuts, tuple(snaps), record.steps, placed, sized)


def allocates(t: Tensor) -> bool:
    """Whether ggml-alloc would place t itself (ggml_gallocr_is_allocated false, not a view): no
    data of its own and no buffer."""
    return not (t.data or t.buffer is not None or t.view_src is not None)


def _same_layout(a: Tensor, b: Tensor) -> bool:
    """ggml-impl.h ggml_are_same_layout."""
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def _alloc_structure(t: Tensor) -> tuple[object, ...]:
    """What ggml_gallocr_alloc_graph_impl reads of a tensor besides its type and shape (which
    only ggml_are_same_layout and the sizes read): its op, flags, sources, view source, and
    whether it has memory already (the data pointers of a view and its source compared)."""
    return (t.op, t.flags, t.src, t.view_src, t.data, t.buffer is not None)


class AllocRecord:
    """The steps one ggml_gallocr_alloc_graph_impl pass took (_alloc_graph(record=...)): each
    ggml_gallocr_allocate_node that took a new block or reused a parent's, and each
    ggml_gallocr_free_node that freed, in order; and each ggml_are_same_layout it asked, with
    its answer. Which steps the pass takes follows from the graph's structure (its node and leaf
    lists with their buffer ids, and per tensor _alloc_structure) and those answers alone; the
    sizes decide only where each block lands. So a graph of the same structure whose tensors of
    another shape answer every layout question alike takes the same steps (`fits`): a config at
    another cache size (sched.resplit's graphs), which _replay places without walking it. It
    keeps the pass's sizes too (ggml_backend_buft_get_alloc_size per buffer id and tensor), which
    hold for such a graph's tensors where neither they nor their sources changed (`sizes_at`)."""

    __slots__ = ("graph", "bufts", "steps", "layouts", "sized", "stale", "marks")

    def __init__(self) -> None:
        self.graph: Graph | None = None
        self.bufts: tuple[BufferType, ...] = ()
        self.steps: list[tuple[int, int, int]] = []
        self.layouts: list[tuple[int, int, bool]] = []
        # per buffer id, the pass's _place sizes (-1: not asked)
        self.sized: list[list[int]] = []
        # sizes_at's last answer: the changed tensors, and those whose sizes they may change
        self.stale: tuple[Sequence[int], set[int]] = ((), set())
        # the node positions a pass stood at (Marked) and the steps taken before each
        self.marks: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())

    def reset(self) -> None:
        """Forget the recorded pass."""
        self.graph, self.bufts, self.steps, self.layouts, self.sized = None, (), [], [], []
        self.stale = ((), set())
        self.marks = ((), ())

    def fits(self, graph: Graph, bufts: Sequence[BufferType]) -> bool:
        """Whether `graph` on `bufts` takes the recorded steps."""
        return self.changed(graph, bufts) is not None

    def changed(self, graph: Graph, bufts: Sequence[BufferType]) -> list[int] | None:
        """Where `graph` on `bufts` takes the recorded steps (`fits`), the indexes of the tensors
        it has in place of the recorded graph's (another object); None where it does not."""
        old = self.graph
        if old is None or tuple(bufts) != self.bufts:
            return None
        if graph is old:
            return []
        if (
            graph.nodes != old.nodes
            or graph.leafs != old.leafs
            or graph.node_buffer_ids != old.node_buffer_ids
            or graph.leaf_buffer_ids != old.leaf_buffer_ids
            or len(graph.tensors) != len(old.tensors)
        ):
            return None
        new_t, old_t = graph.tensors, old.tensors
        changed = list(compress(count(), map(is_not, new_t, old_t)))
        for i in changed:
            if _alloc_structure(new_t[i]) != _alloc_structure(old_t[i]):
                return None
        seen = set(changed)
        if all(
            _same_layout(new_t[a], new_t[b]) == same
            for a, b, same in self.layouts
            if a in seen or b in seen
        ):
            return changed
        return None

    def sizes_at(self, graph: Graph, changed: Sequence[int]) -> list[list[int]]:
        """Per buffer id, the recorded sizes that hold for `graph` (whose tensors at `changed`
        are other than the recorded graph's), -1 for the others: a BufferType.alloc_size rule
        reads the tensor and its sources, so its answer holds where none of them changed."""
        seen, stale = self.stale
        if seen != changed:  # (a record's graphs at other cache sizes change the same tensors)
            stale = set(changed)
            srcs = map(_SRC, graph.tensors)
            stale.update(list(compress(count(), map(not_, map(stale.isdisjoint, srcs)))))
            self.stale = (changed, stale)
        out = []
        for buft, known in zip(self.bufts, self.sized, strict=True):
            if buft.alloc_size is not None:  # (without a rule: ggml_nbytes, _place's own)
                known = known[:]
                for i in stale:
                    known[i] = -1
            out.append(known)
        return out


_NBYTES = attrgetter("nbytes")
_FLAGS = attrgetter("flags")
_VIEW_SRC = attrgetter("view_src")
_SRC = attrgetter("src")
_OP = attrgetter("op")


def _tallocs(bufts: Sequence[BufferType], owner: Sequence[int]) -> list[DynTallocr]:
    made: dict[int, DynTallocr] = {}
    for i, b in enumerate(bufts):
        if owner[i] == i:
            made[i] = DynTallocr(b.alignment, b.max_size)
    return [made[o] for o in owner]


def allocate(graph: Graph, bufts: Sequence[BufferType]) -> Allocation:
    """One allocation of `graph` from empty allocators (ggml-alloc.c ggml_gallocr_reserve_n_impl
    up to the buffers: ggml_gallocr_alloc_graph_impl), `bufts` indexed by buffer id."""
    owner = _owners(bufts)
    tallocs = _tallocs(bufts, owner)
    placed = _alloc_graph(graph, bufts, tallocs)[0]
    return Allocation(
        chunk_sizes=tuple(tuple(t.max_size) for t in tallocs),
        addrs=tuple(placed),
        owner=owner,
    )


def peaks(graph: Graph, bufts: Sequence[BufferType]) -> tuple[int, ...]:
    """Per buffer id, the bytes ggml-alloc needs for `graph` (its chunks' peaks summed)."""
    return allocate(graph, bufts).peaks


class Gallocr:
    """struct ggml_gallocr over several reserves: per buffer id the buffer's chunk sizes as
    allocated (ggml_vbuffer), reallocated when the new allocation has a larger chunk."""

    def __init__(self, bufts: Sequence[BufferType]) -> None:
        self.bufts = tuple(bufts)
        self.owner = _owners(self.bufts)
        self.tallocs = _tallocs(self.bufts, self.owner)
        # per buffer id: None (no buffer yet) or each chunk's buffer size (ggml_vbuffer)
        self.buffers: list[tuple[int, ...] | None] = [None] * len(self.bufts)
        self.last: Allocation | None = None
        self.marked: Marked | None = None  # the last reserve_n's, where it was given marks

    def reserve_n(
        self, graph: Graph, record: AllocRecord | None = None, marks: tuple[int, ...] = ()
    ) -> tuple[int, ...]:
        """ggml-alloc.c ggml_gallocr_reserve_n: allocate `graph`, grow the buffers that need it;
        ggml_gallocr_get_buffer_size per buffer id after it. `record`: the AllocRecord of an
        earlier reserve, whose steps this one takes where they fit the graph; else it is
        allocated afresh and its steps recorded in `record` instead. `marks`: node positions
        (ascending) where the pass's state is kept in `marked` (None without)."""
        for t in self.tallocs:
            t.reset()
        changed = None if record is None else record.changed(graph, self.bufts)
        if record is not None and changed is not None:
            placed, marked = _replay(graph, self.bufts, self.tallocs, record, changed, marks)
        elif record is not None:
            record.reset()
            placed, marked = _alloc_graph(graph, self.bufts, self.tallocs, record, marks)
        else:
            placed, marked = _alloc_graph(graph, self.bufts, self.tallocs, None, marks)
        self.marked = marked
        self.last = Allocation(
            chunk_sizes=tuple(tuple(t.max_size) for t in self.tallocs),
            addrs=tuple(placed),
            owner=self.owner,
        )
        return self.again(self.last)

    def again(self, allocation: Allocation) -> tuple[int, ...]:
        """ggml_gallocr_reserve_n of a graph whose allocation from reset allocators is
        `allocation` (an earlier reserve_n's `last`: ggml_gallocr_alloc_graph_impl is
        deterministic, so the same graph allocates the same chunk peaks again): the buffers it
        grows, per buffer id ggml_gallocr_get_buffer_size after it. A buffer with a chunk larger
        than its buffer's is reallocated whole at the new chunk sizes (ggml_vbuffer_alloc), which
        may shrink its other chunks: llama_context::sched_reserve's second prompt-sized reserve
        regrows a chunked buffer the one-token graph shrank."""
        for i, buft in enumerate(self.bufts):
            if self.owner[i] != i:
                # the buffer type is used multiple times: reuse the same buffer
                self.buffers[i] = self.buffers[self.owner[i]]
            cur = self.buffers[i]
            new = allocation.chunk_sizes[i]
            realloc = cur is None
            for c, size in enumerate(new):
                # ggml_vbuffer_chunk_size: 0 for a chunk the buffer does not have
                cur_size = cur[c] if cur is not None and c < len(cur) else 0
                if size > cur_size:
                    realloc = True
            if realloc:
                # ggml_vbuffer_alloc; ggml_backend_buft_alloc_buffer gives a 0-size dummy for 0
                self.buffers[i] = tuple(s + buft.alloc_extra if s else 0 for s in new)
        return self.sizes()

    def holds(  # noqa: C901 (one pass, early exits)
        self,
        graph: Graph,
        extra: Sequence[int] | Callable[[], Sequence[int] | None] = (),
    ) -> bool:
        """Whether reserve_n(graph) now would leave every buffer as it is, known without
        allocating `graph`: for each allocator, the aligned alloc sizes of every tensor the pass
        could place there sum to at most its buffer's first chunk and its chunk size limit.

        Proof (ggml/src/ggml-alloc.c at b11434). ggml_gallocr_alloc_graph_impl allocates (a new
        block: ggml_gallocr_allocate_node -> ggml_dyn_tallocr_alloc) only tensors of the graph's
        leaf and node lists, each at most once and on its own list's buffer id, never a view
        nor a tensor with memory (ggml_gallocr_is_allocated); an in-place reuse allocates
        nothing. Each tensor of the lists that is neither is counted here, so the sum S of a
        buffer bounds what the pass allocates there. ggml_dyn_tallocr_alloc takes every block
        from the start of a free block, and a free block is either memory an earlier alloc
        handed out and ggml_dyn_tallocr_free_bytes gave back, or the chunk's last block,
        which reaches the chunk's end: so the bytes below a chunk's peak (max_size) are all bytes
        some alloc handed out, and the peak never exceeds the aligned sizes allocated in it.
        One chunk holds them all when S <= max_chunk_size: the last block starts at or below
        the peak, which is at most the S_before allocated earlier, so a request of s <=
        max_chunk_size - S_before fits there and no new chunk is made
        (ggml_dyn_tallocr_new_chunk). The new allocation is then one chunk of at most S, at
        most the buffer's first chunk: ggml_gallocr_reserve_n_impl finds no chunk larger than
        the buffer's, and reallocates nothing. Not seen without the pass: where it would abort
        (ggml_dyn_tallocr_insert_block's MAX_FREE_BLOCKS, an in-place child larger than its
        parent), the buffers stay as they are here.

        `extra`: per buffer id, bytes more that the pass places there besides `graph`'s (a
        short graph's blocks left out, periodic.left_out_bytes), or what gives them (asked only
        where `graph`'s own sums hold; None: not known, no skip)."""
        buffers, tallocs, bufts, owner = self.buffers, self.tallocs, self.bufts, self.owner
        left = [0] * len(bufts)
        for i in range(len(bufts)):
            cur = buffers[i]
            if cur is None:
                return False
            if owner[i] == i:
                left[i] = min(cur[0] if cur else 0, tallocs[i].max_chunk_size)
        n_buf = len(bufts)
        ts = graph.tensors
        for tensor_ids, ids in (
            (graph.leafs, graph.leaf_buffer_ids),
            (graph.nodes, graph.node_buffer_ids),
        ):
            if not ids:
                ids = (0,) * len(tensor_ids)
            elif len(ids) != len(tensor_ids) or not 0 <= min(ids) <= max(ids) < n_buf:
                return False  # reserve_n raises AllocError
            for t, bid in zip(tensor_ids, ids, strict=True):
                if not allocates(ts[t]):
                    continue
                o = owner[bid]
                left[o] -= self._aligned(ts, t, bid)
                if left[o] < 0:
                    return False
        more = extra() if callable(extra) else extra
        if more is None:
            return False
        for i, b in enumerate(more):
            left[owner[i]] -= b
            if left[owner[i]] < 0:
                return False
        return True

    def span_bytes(self, graph: Graph, start: int, end: int) -> list[int]:
        """Per buffer id, the aligned alloc sizes holds counts for the nodes at positions
        start..end of the graph's node list."""
        out = [0] * len(self.bufts)
        ts, nodes, ids = graph.tensors, graph.nodes, graph.node_buffer_ids
        for pos in range(start, end):
            if allocates(ts[nodes[pos]]):
                bid = ids[pos] if ids else 0
                out[bid] += self._aligned(ts, nodes[pos], bid)
        return out

    def _aligned(self, ts: Sequence[Tensor], t: int, bid: int) -> int:
        """Tensor t's alloc size on buffer id bid (its buffer type's rule, else ggml_nbytes),
        aligned up as ggml_dyn_tallocr_alloc takes it."""
        sizer = self.bufts[bid].alloc_size
        size = ts[t].nbytes if sizer is None else sizer(ts, t)
        a = self.tallocs[bid].alignment
        return size + (a - size % a) % a

    def buffer_size(self, buffer_id: int) -> int:
        """ggml-alloc.c ggml_gallocr_get_buffer_size: a shared buffer counts under its first id."""
        buf = self.buffers[buffer_id]
        if buf is None or self.owner[buffer_id] != buffer_id:
            return 0
        return sum(buf)

    def sizes(self) -> tuple[int, ...]:
        return tuple(self.buffer_size(i) for i in range(len(self.bufts)))
