"""Graphs compared the way graph_dump.c writes them: every tensor reachable from the leafs and the
nodes, in the shim's own order (leafs, then nodes, each depth first over sources then the view
source), as tuples of their fields with sources as positions in that order. Two graphs are the same
graph for the allocator when their canonical forms are equal."""

from __future__ import annotations

from llamafit.memory.graph.nodes import Graph

Canonical = tuple[tuple, tuple, tuple]


def canonical(graph: Graph) -> Canonical:
    """(tensors, leafs with buffer ids, nodes with buffer ids) in graph_dump.c collect() order."""
    order: list[int] = []
    pos: dict[int, int] = {}
    tensors = graph.tensors

    def walk(i: int | None) -> None:
        if i is None or i in pos:
            return
        stack: list[tuple[int, int]] = [(i, 0)]
        while stack:
            t, k = stack.pop()
            if t in pos:
                continue
            deps: list[int] = [s for s in tensors[t].src if s is not None]
            v = tensors[t].view_src
            if v is not None:
                deps.append(v)
            while k < len(deps) and deps[k] in pos:
                k += 1
            if k < len(deps):
                stack.append((t, k + 1))
                stack.append((deps[k], 0))
                continue
            pos[t] = len(order)
            order.append(t)

    for i in graph.leafs:
        walk(i)
    for i in graph.nodes:
        walk(i)
    rows = []
    for i in order:
        t = tensors[i]
        rows.append(
            (
                t.name,
                t.op,
                t.desc,
                t.type,
                t.ne,
                t.nb,
                t.nbytes,
                t.flags,
                tuple(None if s is None else pos[s] for s in t.src),
                None if t.view_src is None else pos[t.view_src],
                t.view_offs,
                t.data,
                t.buffer,
            )
        )
    leaf_ids = graph.leaf_buffer_ids or (None,) * len(graph.leafs)
    node_ids = graph.node_buffer_ids or (None,) * len(graph.nodes)
    return (
        tuple(rows),
        tuple((pos[i], b) for i, b in zip(graph.leafs, leaf_ids, strict=True)),
        tuple((pos[i], b) for i, b in zip(graph.nodes, node_ids, strict=True)),
    )


def first_difference(a: Canonical, b: Canonical) -> str:
    """Where two canonical graphs first differ, in words (for assertion messages)."""
    for what, x, y in zip(("tensor", "leaf", "node"), a, b, strict=True):
        for k, (p, q) in enumerate(zip(x, y, strict=False)):
            if p != q:
                return f"{what} {k}: {p!r} != {q!r}"
        if len(x) != len(y):
            return f"{what}s: {len(x)} != {len(y)}"
    return "equal"
