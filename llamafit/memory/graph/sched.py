"""The scheduler's split: a port of ggml_backend_sched_split_graph (ggml/src/ggml-backend.cpp,
llama.cpp b11434).

`split_graph(graph, backends, n_copies=...)` assigns every leaf and node of the graph llama_context
builds (the pre-split Graph: weights and the KV cache carry their buffer names) to one of the
backends, given in the scheduler's priority order (GPUs first, the CPU last), cuts the node list
into splits per backend, adds a copy of every split input on the split's backend (n_copies of them
for pipeline parallelism), lets each split's backend reorder its nodes (graph_optimize), and builds
the graph ggml_gallocr_reserve_n receives: its nodes and leafs with the buffer (backend) id of each.

The five assignment passes, in the source's order:
 1. pre-allocated tensors (weights, the KV cache, views of them) go to the highest-priority backend
    that takes their buffer type and the op; graph inputs to the CPU; an op reading a weight goes
    with the weight, unless op offload hands a host weight's op to a GPU whose offload_op takes it
    (ggml_backend_sched_backend_id_from_cur);
 2. GPU assignments expand down and up over unassigned nodes, then every assignment does
    (ggml_backend_sched_set_if_supported: only where the backend supports the op);
 3. a node moves up to a higher-priority backend with the same buffer type, and a node still
    unassigned goes to the backend that supports it with most of its sources in a usable buffer;
 4. unassigned sources follow their node, views their view source;
 5. the splits: a new one where the backend changes (or where a weight of another backend's
    buffer type would need a copy), with the sources on other backends' buffers as its inputs.

Everything here works on indexes into the graph's tensor tuple; new tensors (the input copies, the
views that keep inputs alive, the backends' allocation dependencies) are appended after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

from ...errors import LlamafitError
from ...reader.ggml_types import GGML_MAX_NAME
from .nodes import (
    FLAG_INPUT,
    FLAG_OUTPUT,
    TENSOR_FIELDS,
    USAGE_WEIGHTS,
    Graph,
    Tensor,
    tensor_of,
)

GGML_MAX_SRC = 10
GGML_SCHED_MAX_COPIES = 4  # ggml/src/ggml-backend.cpp: n_copies with pipeline parallelism

VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})  # ggml_is_view_op

# Buffer types whose is_host is true at b11434: the CPU's own (ggml_backend_cpu_buffer_type,
# ggml_backend_cpu_buffer_from_ptr_type: mmap'ed weights) and the GPUs' pinned host buffers
# (ggml_backend_vk_host_buffer_type, ggml_backend_cuda_host_buffer_type, ...). The CPU's extra
# buffer types (CPU_REPACK, ...) are not host: their is_host is NULL (ggml-cpu/repack.cpp).
HOST_BUFTS = frozenset({"CPU", "CPU_Mapped", "Vulkan_Host", "CUDA_Host", "ROCm_Host", "SYCL_Host"})


class SchedError(LlamafitError):
    """A graph the scheduler cannot place: llama.cpp aborts on it (GGML_ABORT / GGML_ASSERT)."""


# split_graph's options: n_copies, op_offload, host_bufts, cur_copy, all_inputs
SplitOptions = tuple[int, bool, frozenset[str], int, bool]

# supports_op / offload_op: (the graph's tensors as they stand, the op's index) -> bool
OpPredicate = Callable[[Sequence[Tensor], int], bool]


@dataclass(frozen=True, slots=True)
class AllocDeps:
    """What a backend's graph_optimize hands back: the split's nodes in its new order and the
    allocation dependencies it adds (ggml_backend_graph_optimize_params.add_alloc_dep): for a
    node `until`, the tensors that must stay allocated until it has been computed."""

    order: tuple[int, ...]
    keep: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (until, kept tensors in insertion order)


# graph_optimize: (tensors, the split's node indexes, their current sources, use counts)
GraphOptimize = Callable[
    [Sequence[Tensor], Sequence[int], Sequence[tuple[int | None, ...]], Sequence[int]], AllocDeps
]


_SRC = TENSOR_FIELDS.index("src")
_FLAGS = TENSOR_FIELDS.index("flags")


def _changed(t: Tensor, src: tuple[int | None, ...], flags: int) -> Tensor:
    """t with other sources and flags."""
    values = list(t)
    values[_SRC] = src
    values[_FLAGS] = flags
    return tensor_of(values)


def _always(_tensors: Sequence[Tensor], _i: int) -> bool:
    return True


def _never(_tensors: Sequence[Tensor], _i: int) -> bool:
    return False


@dataclass(frozen=True)
class Backend:
    """One backend of the scheduler, with the device properties its rules read.

    `buft` is the buffer type the scheduler allocates this backend's compute buffer in
    (sched->bufts[b]: the backend's default buffer type, or for the CPU the first GPU's pinned host
    buffer type, src/llama-context.cpp); `bufts` the buffer type names its supports_buft accepts.
    `supports_op` and `offload_op` are ggml_backend_dev_supports_op / ggml_backend_dev_offload_op
    (a backend without offload_op never offloads); `graph_optimize` is the backend's reorder hook
    (None: the backend has none, ggml_backend_graph_optimize does nothing). `op_and_sources`:
    supports_op and offload_op read nothing of the graph but the op and its sources
    (tensors[i], tensors[s] for s in its src), which a recording split notes as what they read
    instead of watching each read (SplitRecord; the cost of _Reads)."""

    name: str
    buft: str
    bufts: frozenset[str]
    supports_op: OpPredicate = _always
    offload_op: OpPredicate = _never
    graph_optimize: GraphOptimize | None = None
    op_and_sources: bool = False


@dataclass(frozen=True, slots=True)
class Split:
    """One split: its backend (an index into the backends), its node range in the input graph's
    node list (after the backends' reorders), and its inputs (tensor indexes of the input graph,
    each copied onto the split's backend)."""

    backend: int
    i_start: int
    i_end: int
    inputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SplitGraph:
    """The result: `graph` is sched->graph with node_backend_ids / leaf_backend_ids as its buffer
    ids (what ggml_gallocr_reserve_n receives: buffer id = backend index), `splits` the splits,
    `tensor_backend` the backend of every tensor of the input graph (-1: none, as for tensors the
    graph does not reach)."""

    graph: Graph
    splits: tuple[Split, ...]
    tensor_backend: tuple[int, ...]


def use_counts(graph: Graph) -> list[int]:
    """ggml_visit_parents_graph (ggml/src/ggml.c): how many times each tensor is a source of a node
    or leaf of the graph (cgraph->use_counts, read by the backends' fusion checks)."""
    counts = [0] * len(graph.tensors)
    tensors = graph.tensors
    for lst in (graph.leafs, graph.nodes):
        for i in lst:
            for s in tensors[i].src:
                if s is not None:
                    counts[s] += 1
    return counts


def split_graph(
    graph: Graph,
    backends: Sequence[Backend],
    *,
    n_copies: int = 1,
    op_offload: bool = True,
    host_bufts: frozenset[str] = HOST_BUFTS,
    cur_copy: int = 0,
    all_inputs: bool = True,
    record: SplitRecord | None = None,
) -> SplitGraph:
    """ggml_backend_sched_split_graph over `graph` (ggml/src/ggml-backend.cpp). `backends` in the
    scheduler's priority order, the CPU last; `n_copies` 4 with pipeline parallelism
    (ggml_backend_sched_new: parallel ? GGML_SCHED_MAX_COPIES : 1); `op_offload` llama.cpp's
    cparams.op_offload (on unless --no-op-offload); `cur_copy` 0 at a reserve; `all_inputs`: with
    several copies, every graph input gets its copies (pass 6, builds.since("sched_all_inputs")),
    else only the inputs a node reads (in pass 5, before that build). `record`: a fresh
    SplitRecord, filled with what the split read of the graph's shapes, from which `resplit` gives
    the split of a graph of the same structure at other shapes."""
    options = (n_copies, op_offload, host_bufts, cur_copy, all_inputs)
    if record is not None:
        record.start(graph, tuple(backends), options)
    return _split(graph, tuple(backends), options, record)


def _split(  # noqa: C901 (ggml port: kept diffable)
    graph: Graph,
    backends: tuple[Backend, ...],
    options: SplitOptions,
    rec: SplitRecord | None,
) -> SplitGraph:
    """split_graph; with `rec`, every supports_op, offload_op and graph_optimize call is noted in
    it with the tensors it read."""
    n_copies, op_offload, host_bufts, cur_copy, all_inputs = options
    tensors = graph.tensors
    n = len(tensors)
    nb = len(backends)
    if nb == 0:
        raise SchedError("the scheduler needs at least one backend (the CPU, last)")
    last = nb - 1
    nodes = list(graph.nodes)
    leafs = graph.leafs

    ops = [t.op for t in tensors]
    view_src = [t.view_src for t in tensors]
    # the buffer that holds each tensor's memory: its view source's for a view
    base_buf = [
        (tensors[v].buffer if v is not None else t.buffer)
        for t, v in zip(tensors, view_src, strict=True)
    ]
    weights = [t.buffer is not None and t.usage == USAGE_WEIGHTS for t in tensors]
    srcs: list[tuple[int | None, ...]] = [t.src for t in tensors]
    bufts_of = [b.bufts for b in backends]
    sched_bufts = [b.buft for b in backends]
    by_name = {b.name: i for i, b in enumerate(backends)}

    cache: list[dict[int, bool]] = [{} for _ in range(nb)]
    # each backend's way to ask its supports_op and offload_op (noted in rec)
    asks: list[Callable[[OpPredicate, int], bool]]
    if rec is None:
        asks = [lambda pred, i: pred(tensors, i)] * nb
    else:
        watched, noted = rec.asker(tensors), rec.asker(tensors, watch=False)
        asks = [noted if b.op_and_sources else watched for b in backends]

    def supports(b: int, i: int) -> bool:
        c = cache[b]
        r = c.get(i)
        if r is None:
            r = c[i] = asks[b](backends[b].supports_op, i)
        return r

    bid = [-1] * n
    for i, t in enumerate(tensors):
        if t.backend is not None:
            if t.backend not in by_name:
                raise SchedError(
                    f"{t.name} is pinned to backend {t.backend}, not among the backends"
                )
            bid[i] = by_name[t.backend]

    def from_buffer(t: int, op: int) -> int:
        """ggml_backend_sched_backend_from_buffer."""
        buf = base_buf[t]
        if buf is None:
            return -1
        for b in range(nb):
            if buf in bufts_of[b] and supports(b, op):
                return b
        return -1

    def from_cur(i: int) -> int:  # noqa: C901 (ggml port: kept diffable)
        """ggml_backend_sched_backend_id_from_cur."""
        r = from_buffer(i, i)
        if r != -1:
            return r
        v = view_src[i]
        if v is not None:
            r = from_buffer(v, i)
            if r != -1:
                return r
        if base_buf[i] is not None:
            raise SchedError(
                f"pre-allocated tensor ({tensors[i].name}) in a buffer ({base_buf[i]}) that "
                f"cannot run the operation ({ops[i]})"
            )
        if tensors[i].flags & FLAG_INPUT:
            return last
        if ops[i] == "ROPE" or ops[i] == "FLASH_ATTN_EXT":
            return -1
        for s in srcs[i]:
            if s is None or not weights[s]:
                continue
            sb = from_buffer(s, i)
            if op_offload and sb == last and tensors[s].buffer in host_bufts:
                for b in range(sb):
                    # offload_op first (both are pure): a size check of supports_op that
                    # offload_op would overrule is never asked (backends.UnknownDeviceLimit)
                    if asks[b](backends[b].offload_op, i) and supports(b, i):
                        return b
            return sb
        return -1

    # pass 1: assign backends to ops with pre-allocated inputs. from_cur asks nothing and answers
    # -1 for a tensor outside any buffer (its view source too), not an input, with no weight
    # among its sources: most nodes, passed over here without the call
    for lst in (leafs, nodes):
        for i in lst:
            if bid[i] != -1:
                continue
            if base_buf[i] is None and not tensors[i].flags & FLAG_INPUT:
                v = view_src[i]
                if v is None or base_buf[v] is None:
                    for s in srcs[i]:
                        if s is not None and weights[s]:
                            break
                    else:
                        continue
            bid[i] = from_cur(i)

    # pass 2: expand the assignments (GPUs first, skipping the CPU; then every backend)
    compute = [i for i in nodes if ops[i] not in VIEW_OPS]
    for order, skip_cpu in (
        (compute, True),
        (compute[::-1], True),
        (compute, False),
        (compute[::-1], False),
    ):
        cur = -1
        for i in order:
            b = bid[i]
            if b != -1:
                cur = -1 if (skip_cpu and b == last) else b
            elif cur != -1 and supports(cur, i):
                bid[i] = cur

    def buffer_supported(t: int, b: int) -> bool:
        """ggml_backend_sched_buffer_supported."""
        buft = base_buf[t]
        if buft is None:
            tb = bid[t]
            v = view_src[t]
            if tb == -1 and v is not None:
                tb = bid[v]
            if tb == -1:
                return False
            buft = sched_bufts[tb]
        return buft in bufts_of[b]

    # pass 3: upgrade nodes to higher-priority backends with the same buffer type; place the rest
    for i in compute:
        b0 = bid[i]
        if b0 == -1:
            best = -1
            for b in range(nb):
                if not supports(b, i):
                    continue
                n_sup = 0
                for s in srcs[i]:
                    if s is None:
                        continue
                    v = view_src[s]
                    if (bid[s] != -1 or (v is not None and bid[v] != -1)) and buffer_supported(
                        s, b
                    ):
                        n_sup += 1
                if n_sup > best:
                    best = n_sup
                    bid[i] = b
        else:
            for b in range(b0):
                if sched_bufts[b] == sched_bufts[b0] and supports(b, i):
                    if all(s is None or buffer_supported(s, b) for s in srcs[i]):
                        bid[i] = b
                        break

    # pass 4: sources follow their node, views their view source
    for i in nodes:
        v = view_src[i]
        if v is not None and bid[i] == -1:
            bid[i] = bid[v]
        for s in srcs[i]:
            if s is None or bid[s] != -1:
                continue
            vs = view_src[s]
            bid[s] = bid[vs] if vs is not None else bid[i]
        if bid[i] == -1:
            for b in range(nb):
                if supports(b, i):
                    bid[i] = b
                    break
        if bid[i] == -1:
            raise SchedError(f"no backend supports {tensors[i].name} ({ops[i]})")

    # pass 5: the splits and their inputs
    new: list[Tensor] = []  # tensors added after the input graph's

    def add(t: Tensor) -> int:
        new.append(t)
        return n + len(new) - 1

    copies: dict[tuple[int, int], list[int]] = {}
    copy_flags = FLAG_INPUT | FLAG_OUTPUT if n_copies > 1 else 0
    graph_inputs: list[int] = []
    set_flags: dict[int, int] = {}

    def input_copies(i: int) -> None:
        """n_copies copies of graph input i on its own backend, the current one i itself"""
        b = bid[i]
        cps = []
        for c in range(n_copies):
            if c == cur_copy:
                set_flags[i] = FLAG_INPUT | FLAG_OUTPUT
                cps.append(i)
            else:
                name = f"{backends[b].name}#{tensors[i].name}#{c}"
                cps.append(add(_dup(tensors[i], name, FLAG_INPUT | FLAG_OUTPUT)))
        copies[(i, b)] = cps
        graph_inputs.append(i)

    splits: list[list[Any]] = []  # [backend, i_start, i_end, inputs]
    rewired: list[int] = []  # the nodes whose sources became copies
    read_inputs = not all_inputs and n_copies > 1  # copies of the inputs nodes read (pass 5)
    first = next((k for k, i in enumerate(nodes) if ops[i] not in VIEW_OPS), len(nodes))
    cur_b = bid[nodes[first]] if first < len(nodes) else -1
    split: list[Any] = [cur_b, 0, 0, []]
    splits.append(split)
    for k in range(first, len(nodes)):
        i = nodes[k]
        if ops[i] in VIEW_OPS:
            continue
        b = bid[i]
        need_new = False
        if b == cur_b and split[3]:
            for s in srcs[i]:
                if s is not None and weights[s] and bid[s] != cur_b:
                    if not buffer_supported(s, cur_b):
                        need_new = True
                        break
        if b != cur_b or need_new:
            split[2] = k
            split = [b, k, 0, []]
            splits.append(split)
            cur_b = b
        node_src = srcs[i]
        changed: list[int | None] | None = None
        for j, s in enumerate(node_src):
            if s is None:
                continue
            bs = bid[s]
            if bs == -1:
                raise SchedError(
                    f"{tensors[s].name} (a source of {tensors[i].name}) has no backend"
                )
            if read_inputs and tensors[s].flags & FLAG_INPUT and (s, bs) not in copies:
                # before pass 6 (builds.py sched_all_inputs): only the inputs a node reads
                input_copies(s)
            if bs != cur_b and not buffer_supported(s, cur_b):
                key = (s, cur_b)
                cps = copies.get(key)
                if cps is None:
                    bname = backends[cur_b].name
                    src_t = tensors[s]
                    cps = copies[key] = [
                        add(_dup(src_t, f"{bname}#{src_t.name}#{c}", copy_flags))
                        for c in range(n_copies)
                    ]
                    split[3].append(s)
                if changed is None:
                    changed = list(node_src)
                changed[j] = cps[cur_copy]
        if changed is not None:
            srcs[i] = tuple(changed)
            rewired.append(i)
    split[2] = len(nodes)

    # pass 6: with several copies, every graph input gets its own copies (since b11258,
    # builds.py sched_all_inputs; before, pass 5 copied the inputs a node reads)
    if n_copies > 1 and all_inputs:
        for i in leafs:
            if not tensors[i].flags & FLAG_INPUT:
                continue
            if (i, bid[i]) not in copies:
                input_copies(i)
            else:
                graph_inputs.append(i)

    # the tensors as they now stand: nodes whose sources became copies, leafs flagged output
    table: list[Tensor] = list(tensors)
    for i in {*rewired, *set_flags}:
        t = table[i]
        table[i] = _changed(t, srcs[i], t.flags | set_flags.get(i, 0))
    table.extend(new)

    # each backend optimizes its splits (ggml_backend_graph_optimize); the node list is reordered
    # in place, and the allocation dependencies are collected
    keep: dict[int, list[int]] = {}
    counts: list[int] | None = None
    all_srcs: list[tuple[int | None, ...]] = []
    for sp in splits:
        opt = backends[sp[0]].graph_optimize
        if opt is None or sp[2] <= sp[1]:
            continue
        if counts is None:
            counts = use_counts(graph) + [0] * len(new)
            all_srcs = srcs + [t.src for t in new]
        if rec is None:
            deps = opt(table, nodes[sp[1] : sp[2]], all_srcs, counts)
        else:
            deps = rec.optimize(opt, table, nodes[sp[1] : sp[2]], all_srcs, counts)
        nodes[sp[1] : sp[2]] = deps.order
        for until, kept in deps.keep:
            lst = keep.setdefault(until, [])
            for t_ in kept:
                if t_ not in lst:
                    lst.append(t_)

    def view_of(src_i: int, src: tuple[int, ...]) -> Tensor:
        return _view_of(table, src_i, src)

    if rec is not None:
        rec.n_table = len(table)
        rec.dup_of = {j: s for (s, _b), cps in copies.items() for j in cps if j >= n}
    # the graph for the allocator (sched->graph)
    out_nodes: list[int] = []
    out_ids: list[int] = []
    backend_of = bid.__getitem__
    # the positions of the nodes with allocation dependencies, in order: the views that keep
    # their tensors alive follow them; the nodes between them go in by slices
    kept_at = [k for k, i in enumerate(nodes) if keep.get(i)] if keep else []
    next_kept = 0
    for b, i0, i1, inputs in splits:
        for s in inputs:
            if rec is not None:
                rec.views.append((s, (s,)))
            table.append(view_of(s, (s,)))
            out_nodes.append(len(table) - 1)
            out_ids.append(bid[s])
            out_nodes.append(copies[(s, b)][cur_copy])
            out_ids.append(b)
        start = i0
        while next_kept < len(kept_at) and kept_at[next_kept] < i1:
            k = kept_at[next_kept]
            next_kept += 1
            run = nodes[start : k + 1]
            out_nodes += run
            out_ids += map(backend_of, run)
            start = k + 1
            kept = keep[nodes[k]]
            for j0 in range(0, len(kept), GGML_MAX_SRC):
                if rec is not None:
                    rec.views.append((kept[j0], tuple(kept[j0 : j0 + GGML_MAX_SRC])))
                table.append(view_of(kept[j0], tuple(kept[j0 : j0 + GGML_MAX_SRC])))
                out_nodes.append(len(table) - 1)
                out_ids.append(b)
        run = nodes[start:i1]
        out_nodes += run
        out_ids += map(backend_of, run)

    out_leafs: list[int] = []
    leaf_ids: list[int] = []
    if n_copies > 1:
        for i in graph_inputs:
            b = bid[i]
            for c in copies[(i, b)]:
                out_leafs.append(c)
                leaf_ids.append(b)
        for b, _, _, inputs in splits:
            for s in inputs:
                for c in copies[(s, b)]:
                    out_leafs.append(c)
                    leaf_ids.append(b)
    for i in leafs:
        out_leafs.append(i)
        leaf_ids.append(bid[i])

    out = SplitGraph(
        graph=Graph(
            tensors=tuple(table),
            leafs=tuple(out_leafs),
            nodes=tuple(out_nodes),
            leaf_buffer_ids=tuple(leaf_ids),
            node_buffer_ids=tuple(out_ids),
        ),
        splits=tuple(Split(b, i0, i1, tuple(inp)) for b, i0, i1, inp in splits),
        tensor_backend=tuple(bid),
    )
    if rec is not None:
        rec.out = out
    return out


def _view_of(table: Sequence[Tensor], src_i: int, src: tuple[int, ...]) -> Tensor:
    """ggml_view_tensor of a tensor with `src` as its sources: a view of the whole tensor, on
    its base (ggml_new_tensor_impl)."""
    t = table[src_i]
    v = t.view_src
    base, offs = (src_i, 0) if v is None else (v, t.view_offs)
    # positional (nodes.Tensor's field order): faster than its keywords
    return Tensor(
        f"{t.name} (view)"[: GGML_MAX_NAME - 1],
        "NONE",
        t.type,
        t.ne,
        t.nb,
        t.nbytes,
        0,  # flags
        src,
        base,  # view_src
        offs,  # view_offs
        table[base].data,
        None,  # buffer
        "NONE",  # desc
    )


def _dup(t: Tensor, name: str, flags: int) -> Tensor:
    """ggml_dup_tensor_layout: same type, shape and strides, no op, no data."""
    return Tensor(
        name[: GGML_MAX_NAME - 1],
        "NONE",
        t.type,
        t.ne,
        t.nb,
        t.nbytes,
        flags,
        desc="NONE",
    )


def structure_of(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
    """The tensors a hook (supports_op, offload_op, graph_optimize) was given, to read their
    structure alone from (every field but the shape: ne, nb, nbytes, view_offs; _structure)
    without a note. A SplitRecord's split notes each tensor a hook reads (_Reads), so that
    resplit asks the hook again where one of them has another shape; resplit's graphs have the
    same structure (_reshaped), so a read of structure alone needs no note (and costs less)."""
    return tensors.tensors if type(tensors) is _Reads else tensors


class _Reads(Sequence[Tensor]):
    """The graph's tensors as a backend's supports_op, offload_op or graph_optimize reads them,
    noting each index asked (a slice, len or iteration note -1: all of them); _read_set reads
    the notes."""

    __slots__ = ("tensors", "seen")

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        self.tensors = tensors
        self.seen: list[object] = []

    @overload
    def __getitem__(self, k: int) -> Tensor: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[Tensor]: ...

    def __getitem__(self, k: int | slice) -> Tensor | Sequence[Tensor]:
        self.seen.append(k)
        return self.tensors[k]

    def __len__(self) -> int:
        self.seen.append(-1)
        return len(self.tensors)

    def __iter__(self) -> Iterator[Tensor]:
        self.seen.append(-1)
        return iter(self.tensors)


def _read_set(seen: list[object]) -> set[int] | None:
    """The tensors a call read, from _Reads' notes; None: all of them."""
    out: set[int] = set()
    for k in seen:
        if type(k) is not int or k < 0:
            return None
        out.add(k)
    return out


# (the predicate, the op's index, its answer, _Reads' notes of what it read; None: the op and
# its sources, Backend.op_and_sources)
_Asked = tuple[OpPredicate, int, bool, list[object] | None]


@dataclass(slots=True)
class _Optimized:
    """One graph_optimize call: the hook, the split's nodes it was given, _Reads' notes of what
    it read, and what it answered."""

    opt: GraphOptimize
    nodes: tuple[int, ...]
    seen: list[object]
    deps: AllocDeps


class SplitRecord:
    """What split_graph(record=...)'s split read of its graph's shapes: each supports_op, offload_op
    and graph_optimize call with the tensors it read and its answer, and how each tensor it
    appended was made (copies of split inputs, views). Everything else the split decides follows
    from the graph's structure: its node and leaf lists, and per tensor the name, op, type,
    flags, sources, view source, buffer, usage and pinned backend."""

    def __init__(self) -> None:
        self.graph = Graph(tensors=(), leafs=(), nodes=())
        self.backends: tuple[Backend, ...] = ()
        self.options: SplitOptions | None = None
        self.asked: list[_Asked] = []
        self.optimized: list[_Optimized] = []
        self.srcs: Sequence[tuple[int | None, ...]] = ()
        self.counts: Sequence[int] = ()
        self.n_table = 0  # the input graph's tensors and the copies
        self.dup_of: dict[int, int] = {}  # copy's index -> the tensor it copies
        self.views: list[tuple[int, tuple[int, ...]]] = []  # _view_of's arguments, in order
        self.out: SplitGraph | None = None
        self._by_read: dict[int, list[int]] | None = None  # tensor -> the asked that read it
        self._all: list[int] = []  # the asked that read every tensor

    def start(
        self,
        graph: Graph,
        backends: tuple[Backend, ...],
        options: SplitOptions,
    ) -> None:
        """split_graph's: the graph, backends and options of the split it records."""
        if self.options is not None:
            raise ValueError("a SplitRecord records one split")
        self.graph, self.backends, self.options = graph, backends, options

    def asker(
        self, tensors: Sequence[Tensor], *, watch: bool = True
    ) -> Callable[[OpPredicate, int], bool]:
        """How the split asks a supports_op or offload_op and notes it: with what it read
        (_Reads), or without `watch` as reading the op and its sources (Backend.op_and_sources)."""
        asked = self.asked
        if not watch:

            def noted(pred: OpPredicate, i: int) -> bool:
                r = pred(tensors, i)
                asked.append((pred, i, r, None))
                return r

            return noted
        reads = _Reads(tensors)

        def ask(pred: OpPredicate, i: int) -> bool:
            seen: list[object] = []
            reads.seen = seen
            r = pred(reads, i)
            asked.append((pred, i, r, seen))
            return r

        return ask

    def optimize(
        self,
        opt: GraphOptimize,
        table: Sequence[Tensor],
        nodes: Sequence[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
    ) -> AllocDeps:
        self.srcs, self.counts = srcs, counts
        reads = _Reads(table)
        deps = opt(reads, nodes, srcs, counts)
        self.optimized.append(_Optimized(opt, tuple(nodes), reads.seen, deps))
        return deps

    def asked_reading(self, changed: Sequence[int]) -> list[int]:
        """The asked calls (in call order) that read one of these tensors or all of them."""
        if self._by_read is None:
            by: dict[int, list[int]] = {}
            tensors = self.graph.tensors
            for k, (_p, i, _r, seen) in enumerate(self.asked):
                if seen is None:  # the op and its sources (a source twice: k twice, alike)
                    by.setdefault(i, []).append(k)
                    for s in tensors[i].src:
                        if s is not None:
                            by.setdefault(s, []).append(k)
                    continue
                reads = _read_set(seen)
                if reads is None:
                    self._all.append(k)
                else:
                    for t in reads:
                        by.setdefault(t, []).append(k)
            self._by_read = by
        by = self._by_read
        hit = set(self._all)
        for t in changed:
            hit.update(by.get(t, ()))
        return sorted(hit)


def _structure(t: Tensor) -> tuple[object, ...]:
    """What of a tensor the split reads besides its shape (ne, nb, nbytes, view offset)."""
    return (
        t.name,
        t.op,
        t.type,
        t.flags,
        t.src,
        t.view_src,
        t.data,
        t.buffer,
        t.desc,
        t.pin_layer,
        t.usage,
        t.backend,
    )


def resplit(rec: SplitRecord, graph: Graph) -> SplitGraph | None:
    """The split_graph of `graph` with rec's backends and options, from rec, where `graph` has
    the structure of rec's graph (SplitRecord) and every supports_op, offload_op and
    graph_optimize call that read a tensor whose shape differs answers as it did: the split then
    decides everything as it did, and only the shapes of those tensors, of their copies and of
    the views of them differ. None where that does not hold (split_graph then splits it).

    The calls are asked again in the order the split asked them, so that one that raises
    (backends.UnknownDeviceLimit) does so where the split would have."""
    out = rec.out
    changed = _reshaped(rec.graph, graph)
    if out is None or changed is None:
        return None
    if not changed:
        return out
    new_t = graph.tensors
    for k in rec.asked_reading(changed):
        pred, i, answer, _seen = rec.asked[k]
        if pred(new_t, i) != answer:
            return None
    table = _rebuilt(rec, out, new_t, changed)
    return None if table is None else replace(out, graph=replace(out.graph, tensors=table))


def _rebuilt(
    rec: SplitRecord, out: SplitGraph, new_t: Sequence[Tensor], changed: list[int]
) -> tuple[Tensor, ...] | None:
    """resplit's tensors: rec's split's with the new shapes of the changed tensors, of their
    copies and of the views of them; None where a graph_optimize call that read one of them
    answers otherwise."""
    # the input graph's tensors as the split left them (sources changed to copies, leafs
    # flagged), and the copies
    before = out.graph.tensors
    old_t = rec.graph.tensors
    table = list(before[: rec.n_table])
    dirty = set(changed)
    for i in changed:
        t, was = new_t[i], before[i]
        table[i] = t if was is old_t[i] else _changed(t, was.src, was.flags)
    for j, s in rec.dup_of.items():
        if s in dirty:
            was = before[j]
            table[j] = _dup(new_t[s], was.name, was.flags)
    dirty.update([j for j, s in rec.dup_of.items() if s in dirty])
    for o in rec.optimized:
        reads = _read_set(o.seen)
        if reads is None or not dirty.isdisjoint(reads):
            if o.opt(table, o.nodes, rec.srcs, rec.counts) != o.deps:
                return None
    for j, (src_i, src) in enumerate(rec.views, start=rec.n_table):
        table.append(_view_of(table, src_i, src) if src_i in dirty else before[j])
    return tuple(table)


def _reshaped(old: Graph, graph: Graph) -> list[int] | None:
    """The tensors of `graph` whose shape (ne, nb, nbytes, view offset) differs from old's, where
    the two have the same structure (the same node and leaf lists, and each tensor the same
    _structure); None where they do not."""
    if graph.nodes != old.nodes or graph.leafs != old.leafs:
        return None
    new_t, old_t = graph.tensors, old.tensors
    if len(new_t) != len(old_t):
        return None
    changed = []
    for i in [i for i, a, b in zip(range(len(new_t)), new_t, old_t, strict=True) if a is not b]:
        a, b = new_t[i], old_t[i]
        if a == b:
            continue
        if _structure(a) != _structure(b):
            return None
        changed.append(i)
    return changed
