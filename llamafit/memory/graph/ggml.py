"""A small emulation of the ggml calls llama.cpp's graph builder makes: each op computes its
result's type, ne and nb, sources, view source and offset, and its name exactly as ggml/src/ggml.c
(b11434) does, and `Builder.expand` adds a tensor and its unvisited sources to the graph in the
order of ggml_visit_parents_graph (ggml/src/ggml.c). `Builder.graph` returns the nodes.Graph.

Names matter: ggml names a view, reshape, permute, transpose, cont or cast after its source's name
*at the time it is created* ("%s (view)", vsnprintf into 64 bytes), and ggml_visit_parents_graph
names the still unnamed tensors "node_%d" / "leaf_%d" when it first visits them. So the order of
creation and expansion below follows llama.cpp's call order.

Hot path: plain attributes and tuples, no validation beyond what decides a branch.
"""

from __future__ import annotations

from ...reader.ggml_types import GGML_MAX_NAME, GGML_TYPE_SIZES
from .nodes import (
    FLAG_COMPUTE,
    FLAG_INPUT,
    FLAG_OUTPUT,
    USAGE_ANY,
    Graph,
    Tensor,
    make_tensor,
)


def row_size(type_: str, n: int) -> int:
    """ggml_row_size (ggml/src/ggml.c)."""
    blck, size = GGML_TYPE_SIZES[type_]
    return size * n // blck


def _contiguous_nb(type_: str, ne: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """nb of a new tensor (ggml_new_tensor_impl)."""
    blck, size = GGML_TYPE_SIZES[type_]
    nb1 = size * (ne[0] // blck)
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (size, nb1, nb2, nb3)


def _cut(name: str) -> str:
    if len(name) < GGML_MAX_NAME:
        return name
    raw = name.encode()[: GGML_MAX_NAME - 1]
    return raw.decode(errors="ignore")


class T:
    """One ggml_tensor under construction (mutable: names and flags change as llama.cpp does).

    The ops below pass its arguments by position (type, ne, nb, op, src, view_src, view_offs,
    name, desc): a call by keywords costs up to four times as much, and a build makes one per
    tensor."""

    __slots__ = (
        "name",
        "op",
        "desc",
        "type",
        "ne",
        "nb",
        "flags",
        "src",
        "view_src",
        "view_offs",
        "data",
        "buffer",
        "idx",
        "pin_layer",
        "rule",
    )
    name: str
    op: str
    desc: str
    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    flags: int
    src: tuple[T, ...]  # the sources it has, in order (ggml's unused NULL slots left out)
    view_src: T | None
    view_offs: int
    data: bool
    buffer: str | None
    idx: int
    pin_layer: int
    rule: tuple[str, int] | None  # build.py: how a tensor with data picks its buffer

    def __init__(
        self,
        type_: str,
        ne: tuple[int, int, int, int],
        nb: tuple[int, int, int, int] | None = None,
        op: str = "NONE",
        src: tuple[T, ...] = (),
        view_src: T | None = None,
        view_offs: int = 0,
        name: str = "",
        desc: str = "",
    ) -> None:
        self.type = type_
        self.ne = ne
        if nb is None:  # _contiguous_nb, inline: most tensors are new ones
            blck, size = GGML_TYPE_SIZES[type_]
            nb1 = size * (ne[0] // blck)
            nb2 = nb1 * ne[1]
            nb = (size, nb1, nb2, nb2 * ne[2])
        self.nb = nb
        self.op = op
        self.desc = desc or op
        self.src = src
        # ggml_new_tensor_impl: a view of a view points at the base tensor, offsets added
        if view_src is not None and view_src.view_src is not None:
            view_offs += view_src.view_offs
            view_src = view_src.view_src
        self.view_src = view_src
        self.view_offs = view_offs
        self.data = view_src is not None and view_src.data
        self.buffer = None
        self.flags = 0
        self.name = name
        self.idx = -1  # index in the graph's tensors once visited
        self.pin_layer = -1
        self.rule = None


def nelements(t: T) -> int:
    ne = t.ne
    return ne[0] * ne[1] * ne[2] * ne[3]


def nbytes_of(type_: str, ne: tuple[int, int, int, int], nb: tuple[int, int, int, int]) -> int:
    """ggml_nbytes of a tensor of this type, ne and nb."""
    if ne[0] <= 0 or ne[1] <= 0 or ne[2] <= 0 or ne[3] <= 0:
        return 0
    blck, size = GGML_TYPE_SIZES[type_]
    if blck == 1:
        return (
            size
            + (ne[0] - 1) * nb[0]
            + (ne[1] - 1) * nb[1]
            + (ne[2] - 1) * nb[2]
            + (ne[3] - 1) * nb[3]
        )
    return ne[0] * nb[0] // blck + (ne[1] - 1) * nb[1] + (ne[2] - 1) * nb[2] + (ne[3] - 1) * nb[3]


def is_contiguous(t: T, n: int = 0) -> bool:
    """ggml_is_contiguous_n (ggml/src/ggml.c); n = 0 is ggml_is_contiguous."""
    blck, size = GGML_TYPE_SIZES[t.type]
    ne, nb = t.ne, t.nb
    next_nb = size
    if ne[0] != blck and nb[0] != next_nb:
        return False
    next_nb *= ne[0] // blck
    for i in range(1, 4):
        if ne[i] != 1:
            if i > n:
                if nb[i] != next_nb:
                    return False
                next_nb *= ne[i]
            else:
                next_nb = ne[i] * nb[i]
    return True


def _ne4(ne: tuple[int, ...]) -> tuple[int, int, int, int]:
    n = len(ne)
    if n == 4:
        return ne  # type: ignore[return-value]
    if n == 3:
        return (ne[0], ne[1], ne[2], 1)
    if n == 2:
        return (ne[0], ne[1], 1, 1)
    return (ne[0], 1, 1, 1)


class Builder:
    """A ggml context and one ggml_cgraph: the ops llama.cpp's graph builder calls."""

    def __init__(self) -> None:
        self.tensors: list[T] = []  # visited, in visit order (index = T.idx)
        self.nodes: list[int] = []
        self.leafs: list[int] = []

    # --- tensors without an op -----------------------------------------------------------
    @staticmethod
    def new(type_: str, *ne: int, name: str = "", inp: bool = False) -> T:
        """ggml_new_tensor_Nd; `name` as ggml_set_name, `inp` as ggml_set_input."""
        t = T(type_, _ne4(ne), None, "NONE", (), None, 0, name)
        if inp:
            t.flags = FLAG_INPUT
        return t

    @staticmethod
    def weight(name: str, type_: str, ne: tuple[int, ...], buffer: str) -> T:
        """A model tensor already in a buffer (llama_model_loader: data set, op NONE)."""
        t = T(type_, _ne4(ne), None, "NONE", (), None, 0, name)
        t.data = True
        t.buffer = buffer
        return t

    # --- same-shape ops (ggml_dup_tensor of src0) --------------------------------------------
    @staticmethod
    def _unop(op: str, a: T, desc: str = "") -> T:
        return T(a.type, a.ne, None, op, (a,), None, 0, "", desc)

    @staticmethod
    def _binop(op: str, a: T, b: T) -> T:
        return T(a.type, a.ne, None, op, (a, b))

    def add(self, a: T, b: T) -> T:
        return T(a.type, a.ne, None, "ADD", (a, b))

    def add_id(self, a: T, b: T, ids: T) -> T:
        """ggml_add_id: a plus the rows of b that ids pick."""
        return T(a.type, a.ne, None, "ADD_ID", (a, b, ids))

    def mul(self, a: T, b: T) -> T:
        return T(a.type, a.ne, None, "MUL", (a, b))

    def div(self, a: T, b: T) -> T:
        return self._binop("DIV", a, b)

    def sub(self, a: T, b: T) -> T:
        return self._binop("SUB", a, b)

    def sqrt(self, a: T) -> T:
        """ggml_sqrt (GGML_OP_SQRT, not a unary op)."""
        return self._unop("SQRT", a)

    def mean(self, a: T) -> T:
        """ggml_mean: one F32 column, each row's mean."""
        return T("f32", (1, a.ne[1], a.ne[2], a.ne[3]), None, "MEAN", (a,))

    def rms_norm(self, a: T) -> T:
        return self._unop("RMS_NORM", a)

    def norm(self, a: T) -> T:
        return self._unop("NORM", a)

    def l2_norm(self, a: T) -> T:
        """ggml_l2_norm: a new tensor like a (ggml_dup_tensor), each row over its L2 norm."""
        return self._unop("L2_NORM", a)

    def scale(self, a: T) -> T:
        return self._unop("SCALE", a)

    def clamp(self, a: T, inplace: bool = False) -> T:
        """ggml_clamp; inplace: its form before rule clamp_copy (ggml_view_tensor of a)."""
        if inplace:
            return T(a.type, a.ne, a.nb, "CLAMP", (a,), a, 0, _cut(a.name + " (view)"))
        return self._unop("CLAMP", a)

    def dup(self, a: T) -> T:
        return self._unop("DUP", a)

    def sqr(self, a: T) -> T:
        """ggml_sqr (GGML_OP_SQR, not a unary op)."""
        return self._unop("SQR", a)

    def unary(self, a: T, which: str) -> T:
        """ggml_unary_impl: ggml_tanh, ggml_gelu, ggml_silu, ... (desc: the unary op's name)."""
        return self._unop("UNARY", a, which)

    def rope(self, a: T, pos: T, factors: T | None) -> T:
        """ggml_rope_ext: src a, positions, frequency factors."""
        src = (a, pos, factors) if factors is not None else (a, pos)
        return T(a.type, a.ne, None, "ROPE", src)

    def soft_max(self, a: T, mask: T | None = None) -> T:
        """ggml_soft_max / ggml_soft_max_ext (no sinks)."""
        return T(a.type, a.ne, None, "SOFT_MAX", (a, mask) if mask is not None else (a,))

    def glu(self, a: T, which: str) -> T:
        """ggml_swiglu / ggml_geglu (ggml_glu_impl without b): the two halves of a's rows."""
        return T(a.type, (a.ne[0] // 2, *a.ne[1:]), None, "GLU", (a,), None, 0, "", which)

    def glu_split(self, a: T, b: T, which: str) -> T:
        """ggml_swiglu_split / ggml_geglu_split (ggml_glu_impl with b)."""
        return T(a.type, a.ne, None, "GLU", (a, b), None, 0, "", which)

    # --- shape-changing ops -----------------------------------------------------------------
    def mul_mat(self, a: T, b: T) -> T:
        return T("f32", (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), None, "MUL_MAT", (a, b))

    def mul_mat_id(self, a: T, b: T, ids: T) -> T:
        return T("f32", (a.ne[1], ids.ne[0], b.ne[2], 1), None, "MUL_MAT_ID", (a, b, ids))

    def get_rows(self, a: T, b: T) -> T:
        type_ = "i32" if a.type == "i32" else "f32"
        return T(type_, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), None, "GET_ROWS", (a, b))

    def set_rows(self, a: T, b: T, c: T) -> T:
        """ggml_set_rows: a view of a; sources b, c, a (legacy order)."""
        return T(a.type, a.ne, a.nb, "SET_ROWS", (b, c, a), a, 0, _cut(a.name + " (view)"))

    def repeat_4d(self, a: T, *ne: int) -> T:
        """ggml_repeat_4d: a new tensor of a's type and shape ne, a tiled over it."""
        return T(a.type, _ne4(ne), None, "REPEAT", (a,))

    def sum_rows(self, a: T) -> T:
        return T(a.type, (1, a.ne[1], a.ne[2], a.ne[3]), None, "SUM_ROWS", (a,))

    def argsort(self, a: T) -> T:
        return T("i32", a.ne, None, "ARGSORT", (a,))

    def argsort_top_k(self, a: T, k: int) -> T:
        """ggml_argsort_top_k: the first k columns of ggml_argsort, as a view."""
        s = self.argsort(a)
        return self.view(s, (k, s.ne[1], s.ne[2], s.ne[3]), (s.nb[1], s.nb[2], s.nb[3]), 0)

    def cpy(self, a: T, b: T) -> T:
        """ggml_cpy: a view of b, named "b (copy of a)" (or "a (copy)" when b has no name)."""
        name = f"{b.name} (copy of {a.name})" if b.name else f"{a.name} (copy)"
        return T(b.type, b.ne, b.nb, "CPY", (a, b), b, 0, _cut(name))

    def scale_inplace(self, a: T) -> T:
        """ggml_scale_inplace: a SCALE that is a view of a (ggml_view_tensor)."""
        return T(a.type, a.ne, a.nb, "SCALE", (a,), a, 0, _cut(a.name + " (view)"))

    def ssm_conv(self, sx: T, c: T) -> T:
        """ggml_ssm_conv: {d_inner, tokens per sequence, sequences}, F32."""
        n_t = sx.ne[0] - c.ne[0] + 1
        return T("f32", (c.ne[1], n_t, sx.ne[2], 1), None, "SSM_CONV", (sx, c))

    def ssm_scan(self, s: T, x: T, dt: T, a: T, b: T, c: T, ids: T, k: int) -> T:
        """ggml_ssm_scan: y and the K final states, one F32 row."""
        n = nelements(x) + k * s.ne[0] * s.ne[1] * s.ne[2] * ids.ne[0]
        return T("f32", (n, 1, 1, 1), None, "SSM_SCAN", (s, x, dt, a, b, c, ids))

    def gated_delta_net(self, q: T, k: T, v: T, g: T, beta: T, state: T, k_snaps: int) -> T:
        """ggml_gated_delta_net (ggml.c): the outputs {S_v * H, tokens * seqs} and then the
        k_snaps state snapshots ({S_v * H, K * S_v * seqs} more rows), one F32 matrix."""
        s_v, h, n_t, n_s = v.ne
        ne = (s_v * h, n_t * n_s + k_snaps * s_v * n_s, 1, 1)
        return T("f32", ne, None, "GATED_DELTA_NET", (q, k, v, g, beta, state))

    def cumsum(self, a: T) -> T:
        """ggml_cumsum: a new tensor like a, each row's running sum."""
        return self._unop("CUMSUM", a)

    def tri(self, a: T) -> T:
        """ggml_tri: a new tensor like a (square rows), one triangle kept."""
        return self._unop("TRI", a)

    def diag(self, a: T) -> T:
        """ggml_diag: a row {n, 1, ...} as the diagonal of a new {n, n, ...} matrix."""
        return T(a.type, (a.ne[0], a.ne[0], a.ne[2], a.ne[3]), None, "DIAG", (a,))

    def solve_tri(self, a: T, b: T) -> T:
        """ggml_solve_tri: X of A X = B, a new F32 tensor of b's shape."""
        return T("f32", b.ne, None, "SOLVE_TRI", (a, b))

    def repeat(self, a: T, b: T) -> T:
        """ggml_repeat: a new tensor of a's type and b's shape, a tiled over it."""
        return T(a.type, b.ne, None, "REPEAT", (a,))

    def set_inplace(self, a: T, b: T) -> T:
        """ggml_set_inplace: b written into a, the result a view of a (ggml_view_tensor)."""
        return T(a.type, a.ne, a.nb, "SET", (a, b), a, 0, _cut(a.name + " (view)"))

    def fill(self, a: T) -> T:
        """ggml_fill: a new tensor like a, every element one constant."""
        return T(a.type, a.ne, None, "FILL", (a,))

    def concat(self, a: T, b: T, dim: int) -> T:
        """ggml_concat: a new tensor of a's type, b appended along dim."""
        ne = list(a.ne)
        ne[dim] += b.ne[dim]
        return T(a.type, (ne[0], ne[1], ne[2], ne[3]), None, "CONCAT", (a, b))

    def pad(self, a: T, p0: int, p1: int = 0, p2: int = 0, p3: int = 0) -> T:
        ne = (a.ne[0] + p0, a.ne[1] + p1, a.ne[2] + p2, a.ne[3] + p3)
        return T(a.type, ne, None, "PAD", (a,))

    def cast(self, a: T, type_: str) -> T:
        """ggml_cast: a CPY whose second source is itself."""
        t = T(type_, a.ne, None, "CPY", (), None, 0, _cut(a.name + " (copy)"))
        t.src = (a, t)
        return t

    def cont(self, a: T, *ne: int) -> T:
        """ggml_cont / ggml_cont_2d..4d."""
        shape = _ne4(ne) if ne else a.ne
        return T(a.type, shape, None, "CONT", (a,), None, 0, _cut(a.name + " (cont)"))

    def flash_attn_ext(self, q: T, k: T, v: T, mask: T | None) -> T:
        ne = (v.ne[0], q.ne[2], q.ne[1], q.ne[3])
        src = (q, k, v, mask) if mask is not None else (q, k, v)
        return T("f32", ne, None, "FLASH_ATTN_EXT", src)

    # --- views ---------------------------------------------------------------------------
    def reshape(self, a: T, *ne: int) -> T:
        """ggml_reshape_Nd: a contiguous view of a."""
        name = a.name + " (reshaped)"  # _cut's test inline: views are the most common ops
        cut = name if len(name) < GGML_MAX_NAME else _cut(name)
        return T(a.type, _ne4(ne), None, "RESHAPE", (a,), a, 0, cut)

    def view(self, a: T, ne: tuple[int, ...], nbs: tuple[int, ...], offset: int) -> T:
        """ggml_view_1d..4d: ne has 1 to 4 entries and nbs the len(ne) - 1 strides given."""
        shape = _ne4(ne)
        nb0 = GGML_TYPE_SIZES[a.type][1]
        if len(ne) == 1:
            nb = _contiguous_nb(a.type, shape)
        elif len(ne) == 2:
            nb = (nb0, nbs[0], nbs[0] * ne[1], nbs[0] * ne[1])
        elif len(ne) == 3:
            nb = (nb0, nbs[0], nbs[1], nbs[1] * ne[2])
        else:
            nb = (nb0, nbs[0], nbs[1], nbs[2])
        name = a.name + " (view)"
        cut = name if len(name) < GGML_MAX_NAME else _cut(name)
        return T(a.type, shape, nb, "VIEW", (a,), a, offset, cut)

    def permute(self, a: T, ax0: int, ax1: int, ax2: int, ax3: int) -> T:
        ne = [0, 0, 0, 0]
        nb = [0, 0, 0, 0]
        ne[ax0], ne[ax1], ne[ax2], ne[ax3] = a.ne
        nb[ax0], nb[ax1], nb[ax2], nb[ax3] = a.nb
        # ggml_permute: ggml_view_tensor names it "(view)", then "(permuted)" after a's name
        return T(
            a.type,
            (ne[0], ne[1], ne[2], ne[3]),
            (nb[0], nb[1], nb[2], nb[3]),
            "PERMUTE",
            (a,),
            a,
            0,
            _cut(a.name + " (permuted)"),
        )

    def transpose(self, a: T) -> T:
        ne, nb = a.ne, a.nb
        return T(
            a.type,
            (ne[1], ne[0], ne[2], ne[3]),
            (nb[1], nb[0], nb[2], nb[3]),
            "TRANSPOSE",
            (a,),
            a,
            0,
            _cut(a.name + " (transposed)"),
        )

    # --- the graph -------------------------------------------------------------------------
    def expand(self, t: T, compute: bool = True) -> None:
        """ggml_build_forward_expand (compute) / one member of ggml_build_forward_select."""
        self._visit(t, compute)

    def select(self, ts: list[T], idx: int) -> T:
        """ggml_build_forward_select: all expanded, only ts[idx] computed."""
        for i, t in enumerate(ts):
            self._visit(t, i == idx)
        return ts[idx]

    def _visit(self, node: T, compute: bool) -> None:  # noqa: C901 (ggml port: kept diffable)
        """ggml_visit_parents_graph (left-to-right order): a tensor's sources depth first, then
        it joins the leafs (op NONE) or the nodes. The depth stays small (llama.cpp expands the
        graph layer by layer: at most 24 frames on the recorded models), so plain recursion
        serves."""
        if compute and node.op != "NONE":
            node.flags |= FLAG_COMPUTE
        if node.idx >= 0:  # already visited: only spread the compute flag
            if compute:
                for s in node.src:
                    # a tensor without an op has no sources and never takes the flag: skip it
                    if not s.flags & FLAG_COMPUTE and s.op != "NONE":
                        self._visit(s, True)
            return
        tensors = self.tensors
        node.idx = len(tensors)
        tensors.append(node)
        for s in node.src:
            # a source visited already: _visit(s, compute) would only spread the compute flag,
            # which a tensor without an op never takes and a flagged one has spread (its
            # sources were visited with it: the graph has no cycle but a cast's own)
            if s.idx < 0 or compute and not s.flags & FLAG_COMPUTE and s.op != "NONE":
                self._visit(s, compute)
        if node.op == "NONE":
            if not node.name:
                node.name = f"leaf_{len(self.leafs)}"
            self.leafs.append(node.idx)
        else:
            if not node.name:
                node.name = f"node_{len(self.nodes)}"
            self.nodes.append(node.idx)

    def n_tensors(self) -> int:
        """len(self.graph().tensors) without converting them: the visited tensors and the view
        sources not visited (each once), as graph() appends them."""
        tensors = self.tensors
        unvisited = {
            id(t.view_src) for t in tensors if t.view_src is not None and t.view_src.idx < 0
        }
        return len(tensors) + len(unvisited)

    def graph(self) -> Graph:
        """The nodes.Graph: every visited tensor (visit order), then view sources not visited.

        Tensors equal in every field (the same model's graph for another cache size shares most
        of them) are converted once: _FROZEN keeps them across calls."""
        tensors = self.tensors
        for t in list(tensors):
            v = t.view_src
            if v is not None and v.idx < 0:
                v.idx = len(tensors)
                tensors.append(v)
        frozen = _FROZEN
        if len(frozen) > _FROZEN_MAX:
            frozen.clear()
        get = frozen.get
        sizes = _NBYTES
        if len(sizes) > _FROZEN_MAX:
            sizes.clear()
        out: list[Tensor] = []
        add = out.append
        # each tensor's nodes.Tensor (its sources and view source by index), once per distinct
        # one; inline, not a function a tensor: this loop runs for every tensor of every build
        for t in tensors:
            src = t.src
            n = len(src)  # most tensors have one or two sources: no comprehension for them
            if n == 1:
                si: tuple[int, ...] = (src[0].idx,)
            elif n == 2:
                s0, s1 = src
                si = (s0.idx, s1.idx)
            else:
                si = tuple([s.idx for s in src])
            vs = t.view_src
            vi = None if vs is None else vs.idx
            key = (
                t.name,
                t.op,
                t.desc,
                t.type,
                t.ne,
                t.nb,
                t.flags,
                si,
                vi,
                t.view_offs,
                t.data,
                t.buffer,
                t.pin_layer,
            )
            hit = get(key)
            if hit is None:
                shape = (t.type, t.ne, t.nb)  # most shapes recur (each layer's): nbytes once each
                n_bytes = sizes.get(shape)
                if n_bytes is None:
                    n_bytes = sizes[shape] = nbytes_of(t.type, t.ne, t.nb)
                # nodes.Tensor's fields in order (tuple.__new__: no keyword or default handling)
                hit = frozen[key] = make_tensor(
                    Tensor,
                    (
                        t.name,
                        t.op,
                        t.type,
                        t.ne,
                        t.nb,
                        n_bytes,
                        t.flags,
                        si,
                        vi,
                        t.view_offs,
                        t.data,
                        t.buffer,
                        t.desc,
                        t.pin_layer,
                        USAGE_ANY,
                        None,
                    ),
                )
            add(hit)
        return Graph(tensors=tuple(out), leafs=tuple(self.leafs), nodes=tuple(self.nodes))


_FROZEN: dict[tuple[object, ...], Tensor] = {}
# nbytes_of by (type, ne, nb), as Builder.graph and nbytes_known computed it: the same shapes
# recur in every layer and every build
_NBYTES: dict[tuple[str, tuple[int, int, int, int], tuple[int, int, int, int]], int] = {}
_FROZEN_MAX = 200_000


def nbytes_known(type_: str, ne: tuple[int, int, int, int], nb: tuple[int, int, int, int]) -> int:
    """nbytes_of, computed once per (type, ne, nb) and kept with the converted tensors."""
    shape = (type_, ne, nb)
    n_bytes = _NBYTES.get(shape)
    if n_bytes is None:
        if len(_NBYTES) > _FROZEN_MAX:
            _NBYTES.clear()
        n_bytes = _NBYTES[shape] = nbytes_of(type_, ne, nb)
    return n_bytes


def forget_frozen() -> None:
    """Drop the converted tensors (and their sizes) Builder.graph keeps."""
    _FROZEN.clear()
    _NBYTES.clear()


def set_output(t: T) -> None:
    """ggml_set_output."""
    t.flags |= FLAG_OUTPUT
