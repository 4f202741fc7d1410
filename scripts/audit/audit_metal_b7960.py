"""Issue #27, row repo-jonsjoberg-mistral-small-24b-fit-90k-metal-m3pro: the MTL0 compute buffer
of llama-server b7960 on an Apple M3 Pro (Mistral Small 3.1 24B, -c 90880, 4 unified slots, flash
attention) replayed through the scheduler and ggml-alloc with b7960's graph and Metal's rules.

    python scripts/audit/audit_metal_b7960.py

The log printed MTL0 348.26 MiB and CPU 197.51 MiB. The hand model (llamafit/memory/compute.py)
says 308.76 for MTL0 (the FFN candidate over an F16 mask that is the only mask on the device). The
replay gives 365178880 bytes = 348.26 MiB for MTL0 and 207108096 = 197.51 MiB for the CPU, from
these rules of the b7960-era source (llama-cpp-python 0.3.17's vendored llama.cpp 49bfddeca for
the scheduler and the graph; ggml-metal-common.cpp as it stood before PR #19555):

- src/llama-graph.cpp build_attn_inp_kv_impl: with flash attention the KQ mask is an F32 input and
  the attention reads ggml_cast(mask, F16) (PR #23764 later made the input F16 itself);
- ggml/src/ggml-backend.cpp ggml_backend_sched_split_graph: the input leaf goes to the CPU ("1.inp"),
  the cast (no weights) to MTL0 by pass 2's "expand gpu down"; pass 5 then copies the F32 mask into
  MTL0 as a split input, since ggml_backend_metal_device_supports_buft (ggml-metal.cpp) accepts only
  Metal's own buffer types. The copy (n_ctx x n_ubatch x 4 = 177.5 MiB) is allocated with the other
  split inputs at the start of the split and freed after the cast: a hole at the bottom of the buffer;
- ggml-metal-common.cpp ggml_graph_optimize (called per split through ggml_backend_graph_optimize):
  ADD/NORM/RMS_NORM chains are packed, then ggml_metal_graph_optimize_reorder hoists later nodes into
  the current concurrent set, looking N_FORWARD = 8 nodes ahead over a short list of "safe" ops
  (PR #19555, 2026-02-12, after b7960, made it 64 nodes and more ops). In layer 0 the cast is hoisted
  only as far as after the roped Q (8 MiB), so the F16 mask lands at 195.51 MiB: above the embedding
  copy (10), the positions and KV indexes, the F32 copy (177.5), out_ids and the roped Q;
- then every layer's ffn_inp, gate and up fit in the F32 copy's hole and the SWIGLU output (64 MiB)
  goes above the F16 mask: 195.51 + 88.75 + 64 = 348.26.

The Metal flash-attention extras of ggml_backend_metal_buffer_type_get_alloc_size (pad, blk, tmp of
ggml-metal-ops.cpp) and the 512 outputs of b7960's reserve (llama_context::sched_reserve:
graph_reserve(n_tokens, n_seqs, n_tokens)) do not move the peak here. Without the reorder the buffer
would be 366.26, with PR #19555's reorder 350.26, with only the F16 mask on the device 335.16.

No closed-form candidate follows: over n_ctx (the SWEEP below) the replayed buffer is not monotonic
(49152: 354.01, 65536: 338.01, 86016: 398.01, 90880: 348.26), since where the F16 cast lands depends
on which of layer 0's tensors are alive at the cast and on which holes the F32 copy leaves. Modelling
this row needs the graph replay for this build (the F32 mask and its cast, no mixed-batch branch,
Metal's reorder), not another hand peak; the hand model is left as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from llamafit.memory.graph import build as graph_build  # noqa: E402
from llamafit.memory.graph import replay  # noqa: E402
from llamafit.memory.graph.alloc import CPU, BufferType, Gallocr  # noqa: E402
from llamafit.memory.graph.backends import cpu_backend  # noqa: E402
from llamafit.memory.graph.nodes import FLAG_COMPUTE, FLAG_OUTPUT, Tensor  # noqa: E402
from llamafit.memory.graph.sched import AllocDeps, Backend, GraphOptimize, split_graph  # noqa: E402
from llamafit.memory.resolve import ResolvedConfig  # noqa: E402
from tests.memory import test_gpu_corpus as corpus  # noqa: E402
from tests.support.gpu_shapes import model  # noqa: E402

MIB = 1 << 20
ROW = "repo-jonsjoberg-mistral-small-24b-fit-90k-metal-m3pro"
METAL_ALIGNMENT = 32  # ggml_backend_metal_buffer_type_shared_get_alignment
SWEEP = (49152, 65536, 86016, 90880, 98304)

# ggml-metal-common.cpp ggml_metal_graph_optimize_reorder: h_safe and N_FORWARD before PR #19555
SAFE_B7960 = frozenset(
    {
        "MUL_MAT",
        "MUL_MAT_ID",
        "ROPE",
        "NORM",
        "RMS_NORM",
        "GROUP_NORM",
        "SUM_ROWS",
        "MUL",
        "ADD",
        "DIV",
        "GLU",
        "SCALE",
        "GET_ROWS",
        "CPY",
        "SET_ROWS",
    }
)
N_FORWARD_B7960 = 8
# the same after PR #19555 (as in 0.3.17's vendored llama.cpp)
SAFE_19555 = SAFE_B7960 | {
    "L2_NORM",
    "SSM_CONV",
    "SSM_SCAN",
    "CLAMP",
    "TRI",
    "DIAG",
    "SUB",
    "UNARY",
    "SET",
    "CONT",
    "REPEAT",
}
N_FORWARD_19555 = 64
EMPTY = frozenset({"NONE", "RESHAPE", "TRANSPOSE", "VIEW", "PERMUTE"})  # ggml_op_is_empty
FUSE_FIRST = frozenset({"ADD", "NORM", "RMS_NORM"})
FUSE_NEXT = frozenset({"ADD", "MUL", "NORM", "RMS_NORM"})
MAX_FUSE = 16
_CACHE = re.compile(r"cache_([kv])_l(\d+)$")


def metal_graph_optimize(safe: frozenset[str], n_forward: int) -> GraphOptimize:
    """ggml_graph_optimize (ggml-metal-common.cpp): pack the fusable ADD/NORM/RMS_NORM chains
    (ggml_can_fuse, ggml-impl.h), reorder with ggml_metal_graph_optimize_reorder, unpack.

    Memory ranges (ggml_mem_range_from_tensor) at reserve: an unallocated tensor is its own range
    (its base tensor's address as the buffer id); the KV cache is allocated, k_l0, v_l0, k_l1, ...
    back to back in one buffer, and two ranges overlap when p0 < cmp.p1 && p1 >= cmp.p0 (so the
    end of one layer's K touches its V). Weights are only read: source ranges never conflict."""

    def optimize(
        tensors: Sequence[Tensor],
        nodes: Sequence[int],
        srcs: Sequence[tuple[int | None, ...]],
        counts: Sequence[int],
    ) -> AllocDeps:
        n = len(nodes)

        def base(i: int) -> int:
            v = tensors[i].view_src
            while v is not None:
                i, v = v, tensors[v].view_src
            return i

        def mem_range(i: int) -> tuple[object, int, int]:
            b = base(i)
            m = _CACHE.match(tensors[b].name)
            if tensors[b].data and m:
                p = 2 * int(m.group(2)) + (m.group(1) == "v")
                return ("kv", p, p + 1)
            return (b, 0, 1024)

        def can_fuse(i: int, f: int) -> bool:
            for k in range(f):
                t = tensors[nodes[i + k]]
                if not t.flags & FLAG_COMPUTE:
                    return False
                if k < f - 1 and (
                    counts[nodes[i + k]] != 1 or t.view_src is not None or t.flags & FLAG_OUTPUT
                ):
                    return False
                if k > 0:
                    prev = nodes[i + k - 1]
                    s = srcs[nodes[i + k]]
                    if prev not in s[:2] or t.ne != tensors[prev].ne:
                        return False
            return True

        packed: list[tuple[int, ...]] = []
        i = 0
        while i < n:
            f = 1
            if tensors[nodes[i]].op in FUSE_FIRST:
                f = i + 1
                while f < n and f < i + MAX_FUSE and tensors[nodes[f]].op in FUSE_NEXT:
                    f += 1
                f -= i
                while f > 1 and not can_fuse(i, f):
                    f -= 1
            packed.append(tuple(nodes[i : i + f]))
            i += f

        def reads(p: tuple[int, ...]) -> list[tuple[object, int, int]]:
            return [mem_range(s) for t in p for s in srcs[t] if s is not None]

        def overlap(a: tuple[object, int, int], b: tuple[object, int, int]) -> bool:
            return a[0] == b[0] and a[1] < b[2] and a[2] >= b[1]

        Ranges = list[tuple[tuple[object, int, int], bool]]  # (range, is a destination)

        def add(mrs: Ranges, p: tuple[int, ...]) -> None:
            mrs.extend((r, False) for r in reads(p))
            mrs.append((mem_range(p[-1]), True))

        def check(mrs: Ranges, p: tuple[int, ...]) -> bool:
            for r in reads(p):
                if any(dst and overlap(r, c) for c, dst in mrs):
                    return False
            d = mem_range(p[-1])
            return not any(overlap(d, c) for c, _ in mrs)

        used = [False] * len(packed)
        order: list[int] = []
        mrs0: Ranges = []
        for i0, p0 in enumerate(packed):
            if used[i0]:
                continue
            if tensors[p0[0]].op not in EMPTY and not check(mrs0, p0):
                mrs1: Ranges = []
                add(mrs1, p0)
                for i1 in range(i0 + 1, min(i0 + n_forward, len(packed))):
                    if used[i1]:
                        continue
                    p1 = packed[i1]
                    op = tensors[p1[0]].op
                    if op not in safe and op not in EMPTY:
                        break
                    if (op in EMPTY or check(mrs0, p1)) and check(mrs1, p1):
                        add(mrs0, p1)
                        order.extend(p1)
                        used[i1] = True
                    else:
                        add(mrs1, p1)
                mrs0 = []
            add(mrs0, p0)
            order.extend(p0)
        return AllocDeps(order=tuple(order))

    return optimize


def metal_alloc_size(table: list[Sequence[Tensor]]) -> Callable[[Tensor], int]:
    """ggml_backend_metal_buffer_type_get_alloc_size (ggml-metal.cpp): FLASH_ATTN_EXT also holds
    ggml_metal_op_flash_attn_ext_extra_pad, _blk and _tmp (ggml-metal-ops.cpp, the non-vec kernel's
    NCPSG 64 / NQPTG 8 for the padding and the block map, 32 workgroups for the temp buffer).
    `table` holds the graph being allocated (its sources are looked up there)."""

    def size(t: Tensor) -> int:
        res = t.nbytes
        if t.op != "FLASH_ATTN_EXT":
            return res
        ts = table[0]
        q, k, v = (ts[s] for s in t.src[:3] if s is not None)
        m = ts[t.src[3]] if len(t.src) > 3 and t.src[3] is not None else None
        mask_rows = 2 * m.ne[1] * m.ne[2] * m.ne[3] if m is not None else 0
        res += 64 * (k.nb[1] * k.ne[2] * k.ne[3] + v.nb[1] * v.ne[2] * v.ne[3] + mask_rows)
        if m is not None:
            vec = q.ne[1] < 20 and q.ne[0] % 32 == 0  # ggml_metal_op_flash_attn_ext_use_vec
            nq, nc = (1, 32) if vec else (8, 64)
            blk = -(-m.ne[0] // nc) * -(-q.ne[1] // nq) * m.ne[2] * m.ne[3]
            res += -(-blk // 32) * 32
        return res + 4 * min(q.ne[1], 32) * q.ne[2] * q.ne[3] * 32 * (v.ne[0] + 2)

    return size


@contextmanager
def b7960_graph(f32_mask: bool) -> Iterator[None]:
    """build.py's b11434 graph as b7960 built it: no mixed token/embedding branch (PR #29622 came
    later: build_inp_embd selects between the token lookup and inp_embd only) and, with `f32_mask`,
    the F32 mask input and its ggml_cast to F16 (build_attn_inp_kv_impl before PR #23764)."""
    inp_init, inp_embd = graph_build._Inp.__init__, graph_build._Context.inp_embd

    def init(self: graph_build._Inp, ctx: graph_build._Context, cache: graph_build._Cache) -> None:
        inp_init(self, ctx, cache)
        if f32_mask and ctx.c.flash_attn:
            m = self.mask
            f32 = ctx.b.new("f32", *m.ne, name="attn_inp_kq_mask", inp=True)
            self.mask = ctx.b.cast(f32, "f16")

    def embd(self: graph_build._Context, tok_scale: float, embd_scale: float = 0.0) -> object:
        assert tok_scale == 1.0 and embd_scale == 0.0  # llama: neither
        b = self.b
        tok_embd = self.need(self.w("token_embd.weight", -1), "token_embd.weight")
        tokens = self.cb(b.new("i32", self.c.n_tokens), "inp_tokens", -1)
        tokens.flags |= 1
        rows = self.cb(b.new("f32", self.f.n_embd, self.c.n_tokens), "inp_embd", -1)
        rows.flags |= 1
        cur = self.cb(b.select([b.get_rows(tok_embd, tokens), rows], 0), "embd", -1)
        b.expand(cur)
        return cur

    graph_build._Inp.__init__ = init  # type: ignore[method-assign]
    graph_build._Context.inp_embd = embd  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        graph_build._Inp.__init__ = inp_init  # type: ignore[method-assign]
        graph_build._Context.inp_embd = inp_embd  # type: ignore[method-assign]


def resolved(row: dict) -> ResolvedConfig:
    """The row's config as tests/memory/test_gpu_corpus.py resolves it (the row's build)."""
    got: list[ResolvedConfig] = []
    resolve = corpus.resolve

    def keep(*args: object, **kwargs: object) -> ResolvedConfig:
        got.append(resolve(*args, **kwargs))  # type: ignore[arg-type]
        raise StopIteration

    corpus.resolve = keep  # type: ignore[assignment]
    try:
        corpus.predicted(row)
    except StopIteration:
        pass
    finally:
        corpus.resolve = resolve
    return got[0]


def replayed(
    row: dict,
    *,
    n_ctx: int | None = None,
    reorder: tuple[frozenset[str], int] | None = (SAFE_B7960, N_FORWARD_B7960),
    f32_mask: bool = True,
    fa_extras: bool = True,
) -> tuple[int, int]:
    """(MTL0, CPU) compute buffers of the row's reserves (pp, tg, pp) with every layer and the output
    on MTL0, token_embd on CPU_Mapped; `reorder` None: no graph_optimize."""
    mm = model(row["shape"])
    rc = resolved(row)
    if n_ctx is not None:
        rc = replace(rc, n_ctx=n_ctx, n_ctx_seq=n_ctx)
    opt = None if reorder is None else metal_graph_optimize(*reorder)
    mtl = Backend(name="MTL0", buft="MTL0", bufts=frozenset({"MTL0"}), graph_optimize=opt)
    backends = [mtl, cpu_backend("CPU")]
    n_all, n_kv = mm.facts.n_layer_all, mm.facts.n_layer
    buffers = {
        "weights": "CPU_Mapped",
        "layer_weights": ("MTL0",) * n_all,
        "input_weights": "CPU_Mapped",
        "output_weights": "MTL0",
        "overrides": (),
        "kv": "CPU",
        "layer_kv": ("MTL0",) * n_kv,
        "full_offload": True,
    }
    table: list[Sequence[Tensor]] = [()]
    sizer = metal_alloc_size(table) if fa_extras else None
    gallocr = Gallocr((BufferType("MTL0", METAL_ALIGNMENT, alloc_size=sizer), CPU))
    hp = replay.graph_hparams_of(mm.facts)
    sizes: tuple[int, ...] = ()
    with b7960_graph(f32_mask):
        for _r, config in graph_build.reserve_configs(rc, **buffers):
            graph = graph_build.build_direct(mm.facts, config, hp)
            placed = replay._placed(graph, backends, ["MTL0"] * n_all)
            sp = split_graph(placed, backends, n_copies=1, op_offload=rc.op_offload)
            table[0] = sp.graph.tensors
            sizes = gallocr.reserve_n(sp.graph)
    return sizes[0], sizes[1]


def main() -> None:
    row = next(r for r in corpus.ROWS if r["id"] == ROW)
    print(f"{ROW}: measured MTL0 {row['measured']['compute']['MTL0']} CPU 197.51 MiB")
    variants: tuple[tuple[str, dict], ...] = (
        ("b7960: F32 mask + cast, reorder before #19555", {}),
        ("  without the FA extras", {"fa_extras": False}),
        ("  no graph_optimize", {"reorder": None}),
        ("  reorder of PR #19555", {"reorder": (SAFE_19555, N_FORWARD_19555)}),
        ("  only the F16 mask on the device", {"f32_mask": False}),
    )
    for name, kw in variants:
        mtl, cpu = replayed(row, **kw)
        print(f"{name:50s} MTL0 {mtl / MIB:8.2f} ({mtl}) CPU {cpu / MIB:8.2f}")
    for n_ctx in SWEEP:
        mtl, _ = replayed(row, n_ctx=n_ctx)
        print(f"  n_ctx {n_ctx:6d}: MTL0 {mtl / MIB:8.2f}")


if __name__ == "__main__":
    main()
