"""Byte units and round-up padding, in one place. Bytes are ints everywhere; MiB and GiB appear
only at the display edge (the report modules) and in user-facing options."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def pad(x: int, n: int) -> int:
    """x rounded up to a multiple of n (llama.cpp: ggml/include/ggml.h GGML_PAD)."""
    return -(-x // n) * n
