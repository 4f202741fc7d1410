"""A resolved configuration as llama-cpp-python's own server command (`python -m llama_cpp.server`,
run through `python -m llamafit.server.embedded_main`, which adds llama-server's `GET /health`).

Pure mapping (nothing here imports llama_cpp). Setting names are the fields of llama-cpp-python
0.3.36's `llama_cpp/server/settings.py` (ModelSettings + ServerSettings), which its cli.py turns
into `--<field> VALUE` options: ints as decimal, booleans as true/false, lists as several values.
The server passes them to `llama_cpp.Llama` (server/model.py), which fills libllama's params
(llama.py):

| ResolvedConfig | setting | how |
|---|---|---|
| n_ctx, n_batch, n_ubatch | --n_ctx, --n_batch, --n_ubatch | as is (Llama caps n_batch at n_ctx,
n_ubatch at n_batch) | | n_gpu_layers | --n_gpu_layers | llama.cpp's count, output layer included |
| flash_attn | --flash_attn true/false | no `auto`: LLAMA_FLASH_ATTN_TYPE_ENABLED/DISABLED |
| type_k, type_v | --type_k, --type_v | the ggml type id (f16 = 1, q8_0 = 8) |
| kv_offload | --offload_kqv | |
| load_mode | --use_mmap, --use_mlock | set both: the server's default is mmap+mlock
(llama_supports_mlock()) | | split_mode, main_gpu, tensor_split | --split_mode N, --main_gpu,
--tensor_split F … | LLAMA_SPLIT_MODE_* 0-3 |

Always added: `--verbose true` (libllama logs everything, buffer sizes included, to stderr) and
`--logits_all false`: the server's default true makes llama.py keep an n_ctx × n_vocab float32
`scores` array on the host (32768 × 152064 → 18.6 GiB), which no llama.cpp figure accounts for;
the cost is that /v1/completions cannot return logprobs.

No equivalent (see `embedded_notes`): slots (n_seq_max; the server runs one sequence and serves
requests one at a time, so kv_unified means nothing), swa_full (never passed: libllama's default
true, full-size SWA caches), tensor overrides and --cpu-moe/--n-cpu-moe/--n-cpu-ffn (no
tensor_buft_overrides setting), direct I/O, and llama-server's prompt cache (--cache-ram: the
embedded server's `cache` setting is off).
"""

from __future__ import annotations

import sys

from ..memory.resolve import ResolvedConfig

# enum llama_split_mode (include/llama.h)
SPLIT_MODES = {
    "none": 0,
    "layer": 1,
    "row": 2,
    "tensor": 3,
}
# --load-mode → (use_mmap, use_mlock); llama.py picks LLAMA_LOAD_MODE_* from the pair
LOAD_MODES = {
    "auto": (True, False),
    "mmap": (True, False),
    "none": (False, False),
    "mlock": (False, True),
    "mmap+mlock": (True, True),
    "dio": (False, False),
}


def _bool(value: bool) -> str:
    return "true" if value else "false"


def embedded_argv(
    model_path: str, rc: ResolvedConfig, *, host: str, port: int, python: str = sys.executable
) -> list[str]:
    """`python -m llama_cpp.server …` for this configuration (llama-cpp-python 0.3.36 setting
    names)."""
    use_mmap, use_mlock = LOAD_MODES.get(rc.load_mode, (True, False))
    argv = [
        python,
        "-m",
        "llamafit.server.embedded_main",
        "--model",
        model_path,
        "--n_ctx",
        str(rc.n_ctx),
        "--n_gpu_layers",
        str(rc.n_gpu_layers),
        "--flash_attn",
        _bool(rc.flash_attn),
        "--type_k",
        str(rc.type_k.id),
        "--type_v",
        str(rc.type_v.id),
        "--n_batch",
        str(rc.n_batch),
        "--n_ubatch",
        str(rc.n_ubatch),
        "--offload_kqv",
        _bool(rc.kv_offload),
        "--use_mmap",
        _bool(use_mmap),
        "--use_mlock",
        _bool(use_mlock),
    ]
    if rc.split_mode != "layer":
        argv += ["--split_mode", str(SPLIT_MODES[rc.split_mode]), "--main_gpu", str(rc.main_gpu)]
    if rc.tensor_split:
        argv += ["--tensor_split", *(f"{f:g}" for f in rc.tensor_split)]
    return argv + [
        "--logits_all",
        "false",
        "--verbose",
        "true",
        "--host",
        host,
        "--port",
        str(port),
    ]


def embedded_notes(rc: ResolvedConfig) -> list[str]:
    """What of this configuration the embedded server cannot do, and what it does instead."""
    notes = []
    if rc.n_seq_max > 1:
        notes.append(
            f"{rc.n_seq_max} slots: the embedded server has one sequence and answers requests "
            "one at a time"
        )
    if not rc.swa_full:
        notes.append(
            "swa_full off: the embedded server keeps libllama's default (full-size SWA caches)"
        )
    if rc.all_overrides:
        notes.append(
            "tensor overrides (-ot, --cpu-moe, --n-cpu-moe, --n-cpu-ffn): the embedded server "
            "has none"
        )
    if rc.load_mode == "dio":
        notes.append(
            "--load-mode dio: the embedded server has no direct I/O; it loads without mmap instead"
        )
    if rc.cache_ram_bytes:
        notes.append("prompt cache (--cache-ram): the embedded server runs without one")
    return notes
