"""A llama-server launch configuration, as the user gave it (before llama.cpp's rules resolve it).

Field names follow llama.cpp's `common_params` / `llama_context_params` (common/common.h,
include/llama.h at 0c1e570); defaults are llama-server's (common/arg.cpp, tools/server).
`None` means "not given": the engine's default applies (see `engine_defaults`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ENGINES = ("llama-server", "llama-cpp-python", "llama-cli")
FLASH_ATTN = ("on", "off", "auto")
SPLIT_MODES = ("none", "layer", "row", "tensor")
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
NGL_AUTO = -1  # -ngl auto (llama.cpp: -1)
NGL_ALL = -2  # -ngl all (llama.cpp: -2)
N_PARALLEL_AUTO = -1  # -np -1: llama-server picks 4 slots with a unified KV cache
# --pooling (common/arg.cpp; enum llama_pooling_type in include/llama.h); "" = the model's default
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What a user asked llama-server for (flags or their LLAMA_ARG_* environment variables)."""

    n_ctx: int = 0  # -c; 0 = n_ctx_train
    flash_attn: str = "auto"  # -fa on|off|auto
    type_k: str = "f16"  # -ctk
    type_v: str = "f16"  # -ctv
    n_gpu_layers: int = NGL_AUTO  # -ngl N | auto (-1) | all (-2)
    n_batch: int = 2048  # -b
    n_ubatch: int = 512  # -ub
    n_parallel: int = N_PARALLEL_AUTO  # -np
    kv_unified: bool = False  # -kvu / -no-kvu (forced on when -np is auto)
    swa_full: bool = False  # --swa-full
    kv_offload: bool = True  # -nkvo turns it off
    cpu_moe: bool = False  # -cmoe
    n_cpu_moe: int = 0  # -ncmoe N: experts of the first N blocks on the CPU
    n_cpu_ffn: int = 0  # -ncffn N: dense FFN of the first N blocks on the CPU
    override_tensor: tuple[tuple[str, str], ...] = ()  # -ot regex=BUFT,...
    tensor_split: tuple[float, ...] = ()  # -ts
    split_mode: str = "layer"  # -sm
    main_gpu: int = 0  # -mg
    devices: tuple[str, ...] = ()  # -dev
    rpc: tuple[str, ...] = ()  # --rpc host:port,...
    load_mode: str = "auto"  # -lm (older builds: --mmap/--no-mmap, --mlock)
    cache_ram_mib: int = 8192  # -cram: the server's prompt cache in host RAM
    embeddings: bool = False  # --embedding(s) / --rerank (common_params::embedding)
    # --pooling none|mean|cls|last|rank ("": the GGUF's <arch>.pooling_type); --rerank: rank
    pooling: str = ""
    op_offload: bool = True  # --no-op-offload turns it off (common/arg.cpp: params.no_op_offload)
    # GGML_OP_OFFLOAD_MIN_BATCH (ggml-cuda.cu / ggml-vulkan.cpp device init)
    op_offload_min_batch: int = 32
    # --repack / -nr --no-repack (common_params::no_extra_bufts): CPU_REPACK weights
    repack: bool = True
    no_host: bool = False  # --no-host: no GPU host buffer type ahead of the CPU's extra ones
    fit: bool = True  # -fit on|off
    fit_target_mib: tuple[int, ...] = (1024,)  # -fitt
    given: frozenset[str] = field(default=frozenset())  # which fields the user set explicitly


def engine_defaults(engine: str) -> LaunchConfig:
    """The defaults that differ by front-end (what each passes to libllama)."""
    if engine == "llama-server":
        return LaunchConfig()
    if engine == "llama-cpp-python":
        # llama_cpp.Llama(): n_ctx=512, n_batch=512, n_ubatch=512, n_gpu_layers=0, flash_attn
        # False, swa_full True (libllama's default), one sequence, no server prompt cache.
        return LaunchConfig(
            n_ctx=512,
            flash_attn="off",
            n_gpu_layers=0,
            n_batch=512,
            n_parallel=1,
            swa_full=True,
            cache_ram_mib=0,
            fit=False,
        )
    if engine == "llama-cli":
        return LaunchConfig(n_parallel=1, cache_ram_mib=0)
    raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")


def with_given(base: LaunchConfig, **values: object) -> LaunchConfig:
    """`base` with `values` set and recorded as given by the user."""
    return replace(base, **values, given=base.given | frozenset(values))  # type: ignore[arg-type]
