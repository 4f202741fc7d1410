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

The replay of this build is now the production one (llamafit/memory/graph: build.py's graph by
GraphConfig.build, replay.py's Metal backend, backends/metal.py's reorder by rule
metal_reorder_64, alloc.py's metal_buffer_type): `replayed(row)` with no variant is
replay.device_compute_bytes; the variants swap one rule for another.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from llamafit.memory.graph import replay  # noqa: E402
from llamafit.memory.graph.alloc import BufferType, Gallocr  # noqa: E402
from llamafit.memory.graph.backends.cpu import CPU, cpu_backend  # noqa: E402
from llamafit.memory.graph.backends.metal import (  # noqa: E402
    METAL_ALIGNMENT,
    N_FORWARD_19555,
    N_FORWARD_BEFORE_19555,
    SAFE_19555,
    SAFE_BEFORE_19555,
    metal_backend,
    metal_buffer_type,
    metal_reorder,
)
from llamafit.memory.graph.models import graph_hparams_of  # noqa: E402
from llamafit.memory.graph.reserve import reserve_configs  # noqa: E402
from llamafit.memory.graph.sched import split_graph  # noqa: E402
from llamafit.memory.graph.template import build_direct  # noqa: E402
from llamafit.memory.resolve import ResolvedConfig, build_of  # noqa: E402
from tests.memory import test_gpu_corpus as corpus  # noqa: E402
from tests.support.gpu_shapes import model  # noqa: E402

MIB = 1 << 20
ROW = "repo-jonsjoberg-mistral-small-24b-fit-90k-metal-m3pro"
SWEEP = (49152, 65536, 86016, 90880, 98304)
# the rules of b7960 (the row's build); a variant replaces one
B7960 = (SAFE_BEFORE_19555, N_FORWARD_BEFORE_19555)


def resolved(row: dict) -> ResolvedConfig:
    """The row's config as tests/memory/test_gpu_corpus.py resolves it (the row's build)."""
    return corpus.resolved(row, model(row["shape"]).facts)


def production(row: dict) -> tuple[int, int]:
    """(MTL0, CPU) compute buffers as MemoryModel.estimate gives them (replay.device_compute_bytes
    with the Metal backend of the row's build)."""
    mtl, cpu = (d.compute_bytes for d in corpus.predicted(row).devices)
    return mtl, cpu


def replayed(
    row: dict,
    *,
    n_ctx: int | None = None,
    reorder: tuple[frozenset[str], int] | None = B7960,
    f32_mask: bool = True,
    fa_extras: bool = True,
) -> tuple[int, int]:
    """(MTL0, CPU) compute buffers of the row's reserves (pp, tg, pp) with every layer and the output
    on MTL0, token_embd on CPU_Mapped, through the production graph, scheduler and allocator;
    `reorder` None: no graph_optimize; `f32_mask` False: the graph of a build with the F16 mask
    input (rule fa_mask_f16); `fa_extras` False: ggml_nbytes for the flash attention too."""
    mm = model(row["shape"])
    rc = resolved(row)
    if n_ctx is not None:
        rc = replace(rc, n_ctx=n_ctx, n_ctx_seq=n_ctx)
    mtl = metal_backend("MTL0", rc.build)
    mtl = replace(mtl, graph_optimize=None if reorder is None else metal_reorder(*reorder))
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
    buft = metal_buffer_type("MTL0", rc.build) if fa_extras else BufferType("MTL0", METAL_ALIGNMENT)
    gallocr = Gallocr((buft, CPU))
    hp = graph_hparams_of(mm.facts)
    sizes: tuple[int, ...] = ()
    for _r, config in reserve_configs(rc, **buffers):
        if not f32_mask:
            config = replace(config, build=build_of("fa_mask_f16"))
        graph = build_direct(mm.facts, config, hp)
        placed = replay._placed(graph, backends, ["MTL0"] * n_all)
        sp = split_graph(placed, backends, n_copies=1, op_offload=rc.op_offload)
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
    mtl, cpu = production(row)
    print(
        f"{'MemoryModel.estimate (production replay)':50s} MTL0 {mtl / MIB:8.2f} ({mtl}) CPU {cpu / MIB:8.2f}"
    )
    for name, kw in variants:
        mtl, cpu = replayed(row, **kw)
        print(f"{name:50s} MTL0 {mtl / MIB:8.2f} ({mtl}) CPU {cpu / MIB:8.2f}")
    for n_ctx in SWEEP:
        mtl, _ = replayed(row, n_ctx=n_ctx)
        print(f"  n_ctx {n_ctx:6d}: MTL0 {mtl / MIB:8.2f}")


if __name__ == "__main__":
    main()
