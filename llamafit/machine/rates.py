"""Rates of a machine, measured or catalogued: what the host probe records (host_probe.py,
kernel_probe.py) and the speed model (fit/speed.py) reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rate:
    """A measured or catalogued rate (bytes/s or FLOP/s) and where it came from."""

    value: float
    source: str


@dataclass(frozen=True, slots=True)
class KernelRate:
    """What one CPU thread multiplies by weights of one ggml type, in FLOP/s, measured with
    llama.cpp's own kernels (machine/kernel_probe.py): `decode` a matrix-vector product (one token),
    `prompt` a 512-column matrix product (a prompt ubatch), both on a weight in the caches.
    `stream`: ((threads, bytes/s), …) ascending, the matrix-vector product reading a weight from
    memory, as a generated token reads every weight (empty: not measured)."""

    ggml_type: int
    decode: float
    prompt: float
    stream: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class AttentionRate:
    """What one CPU thread reaches in llama.cpp's flash attention over an F16 cache
    (ggml_flash_attn_ext; machine/kernel_probe.py), in FLOP/s counted as 2 x n_head x (head_k +
    head_v) per cell and query: `decode` one query per head, `prompt` a 512-query batch, both over
    a cache in the caches. `stream`: ((threads, FLOP/s), …) ascending, one query over a cache far
    larger than the caches, as a token at depth reads it (empty: not measured)."""

    decode: float
    prompt: float
    stream: tuple[tuple[int, float], ...] = ()
