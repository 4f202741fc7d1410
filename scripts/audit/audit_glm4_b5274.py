"""GLM-Z1 32B's compute buffers at llama.cpp b5274 (ik_llama.cpp#370, #344): a replay of that
build's reserve graph through that build's scheduler split and graph allocator.

    python scripts/audit/audit_glm4_b5274.py          # the logs' buffers
    python scripts/audit/audit_glm4_b5274.py --grid   # compute._logits_above_mask_hole's conditions

The source replayed is llama.cpp 8733e0c (the vendor tree of the llama-cpp-python 0.3.9 sdist, a
few days after b5274), three pieces of it:
  - the graph: llm_build_glm4 (src/llama-model.cpp) with build_inp_embd, build_attn_inp_kv_unified
    (an F32 KQ mask cast to F16 for flash attention), build_attn (K/V written by ggml_cpy into cache
    views, flash_attn_ext over cache views), the last block's get_rows of inp_out_ids, and build_ffn's
    LLM_FFN_SWIGLU (two ggml_cont of the fused up's halves, silu and mul in place; src/llama-graph.cpp);
    nodes in ggml_visit_parents order (ggml_build_forward_expand of Q, K, V and the two copies per
    block, then of the logits);
  - the split for one GPU holding every block and the output (ggml_backend_sched_split_graph,
    ggml/src/ggml-backend.cpp): token_embd's GET_ROWS on the CPU, every other node on the GPU; the
    host tensors the GPU nodes read are copied in, the copies allocated at the start of the split in
    the order the nodes first read them, each behind a view of its source that keeps the source alive;
  - the allocator (ggml/src/ggml-alloc.c): ggml_gallocr_alloc_graph_impl (inputs first, then every
    node: in place over a parent that is its own, not a view, not an output, of the same layout and
    read once; a tensor freed when its last reader is done) over ggml_dyn_tallocr_alloc (the
    best-fitting free block besides the last, else the last) and ggml_dyn_tallocr_free_tensor.
Only what ggml-alloc reads is kept per tensor: its size, op, sources and view source. Every tensor the
graph makes is contiguous F32 (F16 for the cast mask), so ggml_are_same_layout reduces to equal sizes.
`--glu` replays build_ffn's later ggml_swiglu (PR #14158) and `--set-rows` the later set_rows KV
writes with their k_idxs/v_idxs inputs (PR #14959), for the grid.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

MIB = 1 << 20
SIZE_MAX = (1 << 64) - 1
F32 = 4
GGML_KQ_MASK_PAD = 64  # ggml/include/ggml.h at that build
# ggml_op_can_inplace (ggml/src/ggml-alloc.c), the ops this graph has
INPLACE = frozenset({"ADD", "MUL", "UNARY", "ROPE", "RMS_NORM"})
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
GLM_Z1_32B = (6144, 48, 2, 128, 23040, 151552)  # n_embd, n_head, n_head_kv, head, n_ff, n_vocab
GRID_SHAPES = (
    (2048, 16, 4, 128, 5632, 32000),
    (3072, 32, 32, 96, 8192, 32064),
    (4096, 32, 2, 128, 13696, 151552),
    (5120, 40, 8, 128, 27648, 152064),
    GLM_Z1_32B,
)


@dataclass(eq=False)
class Tensor:
    name: str
    op: str
    nbytes: int
    src: list[Tensor | None] = field(default_factory=list)
    view_src: Tensor | None = None
    is_input: bool = False
    data: bool = False  # weights and the KV cache: allocated elsewhere
    backend: int = 0

    def __post_init__(self) -> None:
        if self.view_src is not None and self.view_src.view_src is not None:
            self.view_src = self.view_src.view_src  # ggml_new_tensor_impl: views of views
        if self.view_src is not None and self.view_src.data:
            self.data = True


class Graph:
    """ggml_build_forward_expand: nodes and leafs in ggml_visit_parents order."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._seen: set[int] = set()

    def expand(self, t: Tensor) -> None:
        if id(t) in self._seen:
            return
        self._seen.add(id(t))
        for s in t.src:
            if s is not None:
                self.expand(s)
        (self.leafs if t.op == "NONE" else self.nodes).append(t)


def build_glm4(
    shape: tuple[int, ...],
    n_layer: int,
    n_tokens: int,
    n_kv: int,
    *,
    glu: bool = False,
    set_rows: bool = False,
) -> Graph:
    """llm_build_glm4's prompt-sized reserve graph, flash attention on, every token an output."""
    n_embd, n_head, n_head_kv, head, n_ff, n_vocab = shape
    g, t = Graph(), n_tokens
    e = F32 * n_embd * t

    def weight(name: str) -> Tensor:
        return Tensor(name, "NONE", 0, data=True)

    tokens = Tensor("inp_tokens", "NONE", 4 * t, is_input=True)
    inp_l = Tensor("inp_embd", "GET_ROWS", e, [weight("token_embd"), tokens])
    pos = Tensor("inp_pos", "NONE", 4 * t, is_input=True)
    rows = -(-t // GGML_KQ_MASK_PAD) * GGML_KQ_MASK_PAD
    mask = Tensor("KQ_mask", "NONE", F32 * n_kv * rows, is_input=True)
    mask16 = Tensor("KQ_mask (f16)", "CPY", 2 * n_kv * rows, [mask])
    mask16.src.append(mask16)  # ggml_cast: src[1] is the result itself
    k_idxs = Tensor("k_idxs", "NONE", 8 * t, is_input=True)
    v_idxs = Tensor("v_idxs", "NONE", 8 * t, is_input=True)
    gqa = F32 * n_head_kv * head * t
    for il in range(n_layer):
        inp_sa = inp_l
        cur = Tensor(f"norm-{il}", "RMS_NORM", e, [inp_l])
        cur = Tensor(f"attn_norm-{il}", "MUL", e, [cur, weight("attn_norm")])
        q = Tensor(f"Qcur-{il}", "MUL_MAT", F32 * n_head * head * t, [weight("wq"), cur])
        k = Tensor(f"Kcur-{il}", "MUL_MAT", gqa, [weight("wk"), cur])
        v = Tensor(f"Vcur-{il}", "MUL_MAT", gqa, [weight("wv"), cur])
        q = Tensor(f"Qcur-{il} (reshaped)", "RESHAPE", q.nbytes, [q], q)
        k = Tensor(f"Kcur-{il} (reshaped)", "RESHAPE", k.nbytes, [k], k)
        v3 = Tensor(f"Vcur-{il} (reshaped)", "RESHAPE", v.nbytes, [v], v)
        q = Tensor(f"Qrope-{il}", "ROPE", q.nbytes, [q, pos])
        k = Tensor(f"Krope-{il}", "ROPE", k.nbytes, [k, pos])
        for x in (q, k, v3):
            g.expand(x)
        k_l, v_l = weight(f"cache_k_l{il}"), weight(f"cache_v_l{il}")
        k_view = Tensor(f"k_cache_view-{il}", "VIEW", 0, [k_l], k_l)
        v2 = Tensor(f"Vcur-{il} (2d)", "RESHAPE", v.nbytes, [v3], v3)
        v_view = Tensor(f"v_cache_view-{il}", "VIEW", 0, [v_l], v_l)
        if set_rows:
            k2 = Tensor(f"Kcur-{il} (2d)", "RESHAPE", k.nbytes, [k], k)
            g.expand(Tensor(f"k_set-{il}", "SET_ROWS", 0, [k_view, k2, k_idxs], k_view))
            g.expand(Tensor(f"v_set-{il}", "SET_ROWS", 0, [v_view, v2, v_idxs], v_view))
        else:
            g.expand(Tensor(f"k_cpy-{il}", "CPY", 0, [k, k_view], k_view))
            g.expand(Tensor(f"v_cpy-{il}", "CPY", 0, [v2, v_view], v_view))
        q_perm = Tensor(f"q-{il}", "PERMUTE", q.nbytes, [q], q)
        k_att = Tensor(f"k-{il}", "VIEW", 0, [k_l], k_l)
        v_att = Tensor(f"v-{il}", "VIEW", 0, [v_l], v_l)
        fa = Tensor(f"fattn-{il}", "FLASH_ATTN_EXT", e, [q_perm, k_att, v_att, mask16])
        fa2 = Tensor(f"kqv_out-{il}", "RESHAPE", e, [fa], fa)
        cur = Tensor(f"wo-{il}", "MUL_MAT", e, [weight("wo"), fa2])
        if il == n_layer - 1:
            out_ids = Tensor("inp_out_ids", "NONE", 4 * t, is_input=True)
            cur = Tensor("get_rows cur", "GET_ROWS", e, [cur, out_ids])
            inp_sa = Tensor("get_rows inpSA", "GET_ROWS", e, [inp_sa, out_ids])
        cur = Tensor(f"post_attn_norm-{il}", "RMS_NORM", e, [cur])
        cur = Tensor(f"post_attn_norm_w-{il}", "MUL", e, [cur, weight("attn_post_norm")])
        ffn_inp = Tensor(f"ffn_inp-{il}", "ADD", e, [cur, inp_sa])
        cur = Tensor(f"ffn_norm-{il}", "RMS_NORM", e, [ffn_inp])
        cur = Tensor(f"ffn_norm_w-{il}", "MUL", e, [cur, weight("ffn_norm")])
        ff = F32 * n_ff * t
        up = Tensor(f"ffn_up-{il}", "MUL_MAT", 2 * ff, [weight("ffn_up"), cur])
        if glu:
            cur = Tensor(f"ffn_swiglu-{il}", "GLU", ff, [up])
        else:
            x0 = Tensor(f"x0-{il}", "CONT", ff, [Tensor(f"up0-{il}", "VIEW", ff, [up], up)])
            x1 = Tensor(f"x1-{il}", "CONT", ff, [Tensor(f"up1-{il}", "VIEW", ff, [up], up)])
            x0 = Tensor(f"ffn_silu-{il}", "UNARY", ff, [x0])
            cur = Tensor(f"ffn_mul-{il}", "MUL", ff, [x0, x1])
        cur = Tensor(f"ffn_down-{il}", "MUL_MAT", e, [weight("ffn_down"), cur])
        cur = Tensor(f"post_mlp_norm-{il}", "RMS_NORM", e, [cur])
        cur = Tensor(f"post_mlp_norm_w-{il}", "MUL", e, [cur, weight("ffn_post_norm")])
        inp_l = Tensor(f"l_out-{il}", "ADD", e, [cur, ffn_inp])
    cur = Tensor("norm", "RMS_NORM", e, [inp_l])
    cur = Tensor("result_norm", "MUL", e, [cur, weight("output_norm")])
    g.expand(Tensor("result_output", "MUL_MAT", F32 * n_vocab * t, [weight("output"), cur]))
    return g


GPU, CPU = 0, 1


def split_one_gpu(g: Graph) -> list[Tensor]:
    """ggml_backend_sched_split_graph for one GPU holding every block and the output: the node list
    of the graph copy, each node's backend set (the inputs' and leafs' too)."""
    first = g.nodes[0]
    assert first.name == "inp_embd"  # token_embd's GET_ROWS: the CPU (GET_ROWS is never offloaded)
    first.backend = CPU
    for leaf in g.leafs:
        leaf.backend = CPU if leaf.is_input else GPU
    inputs: list[Tensor] = []
    copies: dict[int, Tensor] = {}
    for node in g.nodes[1:]:
        node.backend = GPU
        if node.op in VIEW_OPS:
            continue
        for j, s in enumerate(node.src):
            if s is None or s.backend != CPU:
                continue
            if id(s) not in copies:
                copies[id(s)] = Tensor(f"GPU#{s.name}", "NONE", s.nbytes)
                inputs.append(s)
            node.src[j] = copies[id(s)]
    out = [first]
    for s in inputs:
        dep = Tensor(f"{s.name} (view)", "NONE", s.nbytes, [s], s, backend=CPU)
        out += [dep, copies[id(s)]]
    return out + g.nodes[1:]


class DynAllocator:
    """ggml_dyn_tallocr: free blocks sorted by offset, the last one unbounded."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks = [[0, SIZE_MAX // 2]]
        self.max_size = 0

    def _aligned(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size: int) -> int:
        size = self._aligned(size)
        best, best_size = -1, SIZE_MAX
        for i, (_, bsize) in enumerate(self.blocks[:-1]):
            if size <= bsize <= best_size:
                best, best_size = i, bsize
        block = self.blocks[best]  # -1: the last block
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            self.blocks.remove(block)
        self.max_size = max(self.max_size, offset + size)
        return offset

    def free(self, offset: int, size: int) -> None:
        size, blocks = self._aligned(size), self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if i < len(blocks) - 1 and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks.pop(i + 1)[1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += blocks.pop(i)[1]
                return
        at = next((i for i, b in enumerate(blocks) if b[0] >= offset), len(blocks))
        blocks.insert(at, [offset, size])


@dataclass
class _Hash:
    allocated: bool = False
    offset: int = 0
    buffer: int = 0
    n_children: int = 0
    n_views: int = 0


def allocate(
    nodes: list[Tensor], leafs: list[Tensor], alignments: tuple[int, ...]
) -> tuple[list[int], dict[str, int]]:
    """ggml_gallocr_alloc_graph_impl: each buffer's high-water mark and every tensor's offset."""
    allocators = [DynAllocator(a) for a in alignments]
    hash_: dict[int, _Hash] = {}
    where: dict[str, int] = {}

    def hn(t: Tensor) -> _Hash:
        return hash_.setdefault(id(t), _Hash())

    def allocate_node(t: Tensor, buffer: int) -> None:
        h = hn(t)
        if t.data or h.allocated or t.view_src is not None:
            return
        h.allocated = True
        if t.op in INPLACE:
            for p in t.src:
                ph = hash_.get(id(p)) if p is not None else None
                # its own (views never are), not an output (none here), same layout, read once
                if p is None or ph is None or not ph.allocated or p.nbytes != t.nbytes:
                    continue
                if ph.n_children == 1 and ph.n_views == 0:
                    h.buffer, h.offset, ph.allocated = ph.buffer, ph.offset, False
                    where[t.name] = h.offset
                    return
        h.buffer, h.offset = buffer, allocators[buffer].alloc(t.nbytes)
        where[t.name] = h.offset

    def free_node(t: Tensor) -> None:
        h = hn(t)
        allocators[h.buffer].free(h.offset, t.nbytes)
        h.allocated = False

    for leaf in leafs:
        allocate_node(leaf, leaf.backend)
    for node in nodes:
        if node.view_src is not None and node.op != "NONE":
            hn(node.view_src).n_views += 1
        for s in node.src:
            if s is not None:
                hn(s).n_children += 1
                if s.is_input:
                    allocate_node(s, node.backend)
    for node in nodes:
        for p in node.src:
            if p is not None:
                allocate_node(p, node.backend)
        allocate_node(node, node.backend)
        for p in node.src:
            if p is None:
                continue
            ph = hn(p)
            ph.n_children -= 1
            if ph.n_children or ph.n_views:
                continue
            if p.view_src is not None:
                vh = hn(p.view_src)
                vh.n_views -= 1
                if vh.n_views == 0 and vh.n_children == 0 and vh.allocated:
                    free_node(p.view_src)
            elif ph.allocated:
                free_node(p)
    return [a.max_size for a in allocators], where


def gpu_buffers(
    shape: tuple[int, ...], n_layer: int, n_tokens: int, n_kv: int, **kw: bool
) -> tuple[int, int, int]:
    """(GPU compute buffer, host compute buffer, where the logits end on the GPU)."""
    g = build_glm4(shape, n_layer, n_tokens, n_kv, **kw)
    sizes, where = allocate(split_one_gpu(g), g.leafs, (128, 32))  # CUDA, CUDA_Host alignments
    return sizes[GPU], sizes[CPU], where["result_output"] + F32 * shape[5] * n_tokens


def cpu_buffer(shape: tuple[int, ...], n_layer: int, n_tokens: int, n_kv: int) -> int:
    g = build_glm4(shape, n_layer, n_tokens, n_kv)
    for t in g.nodes + g.leafs:
        t.backend = 0
    return allocate(g.nodes, g.leafs, (32,))[0][0]


def closed_form(shape: tuple[int, ...], n_tokens: int, n_kv: int, set_rows: bool) -> int | None:
    """compute._logits_above_mask_hole's conditions and value (None: it does not apply)."""
    n_embd, _, _, _, n_ff, n_vocab = shape

    def pad(n: int) -> int:
        return -(-n // 128) * 128

    e, ff, mask = pad(F32 * n_embd * n_tokens), pad(F32 * n_ff * n_tokens), F32 * n_kv * n_tokens
    bottom = e + 2 * pad(4 * n_tokens) + pad(mask) + (2 * pad(8 * n_tokens) if set_rows else 0)
    if not (mask // 2 > 2 * e and ff + e <= bottom < 2 * ff + e):
        return None
    return ff + e + F32 * n_vocab * n_tokens


def grid() -> None:
    checked = wrong = 0
    for shape in GRID_SHAPES:
        for glu in (False, True):
            for set_rows in (False, True):
                for n_tokens in (64, 128, 256, 512, 1024, 2048):
                    for n_kv in range(1024, 131072 + 1, 1024):
                        want = closed_form(shape, n_tokens, n_kv, set_rows)
                        if want is None:
                            continue
                        got = gpu_buffers(shape, 5, n_tokens, n_kv, glu=glu, set_rows=set_rows)[2]
                        checked += 1
                        if got != want:
                            wrong += 1
                            print("differs:", shape, glu, set_rows, n_tokens, n_kv, got, want)
    print(f"{checked} configurations where the rule applies, {wrong} where the replay differs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", action="store_true")
    args = ap.parse_args()
    if args.grid:
        grid()
        return
    gpu, host, _ = gpu_buffers(GLM_Z1_32B, 61, 512, 32768)
    print(
        f"-c 32768 -ub 512 -fa, one GPU: CUDA0 {gpu / MIB:.2f} MiB, CUDA_Host {host / MIB:.2f} MiB"
    )
    print("  (ik_llama.cpp#370 b5274 and #344 b5192 print 353.00 and 76.01)")
    cpu = cpu_buffer(GLM_Z1_32B, 61, 512, 5120)
    print(
        f"-c 5120 -ub 512 -fa, CPU: {cpu / MIB:.2f} MiB (ik_llama.cpp#344's CPU run prints 308.00)"
    )


if __name__ == "__main__":
    main()
