"""Mutated headers: the reader and the facts builder fail only with LlamafitError, never a crash."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamafit.errors import LlamafitError
from llamafit.facts.hparams import build_facts
from llamafit.reader.header import read_header
from llamafit.reader.model import GGUFModel
from llamafit.reader.source import BytesSource
from tests.support import FIXTURES

# A real fixture's header (metadata, vocabulary, tensor infos): a header-only file.
_SEED = (FIXTURES / "swa-gemma3.gguf").read_bytes()
_HEADER = _SEED[: read_header(BytesSource(_SEED)).data_offset]
_BIG = [0, 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63, 2**64 - 1]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(_HEADER)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "u64", "u32", "cut", "insert"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "u64":
            data[at : at + 8] = struct.pack("<Q", draw(st.sampled_from(_BIG)))
        elif kind == "u32":
            data[at : at + 4] = struct.pack("<I", draw(st.sampled_from(_BIG[:4])))
        elif kind == "cut":
            del data[at:]
            if not data:
                break
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_only_llamafit_errors_escape(data: bytes) -> None:
    try:
        header = read_header(BytesSource(data, "fuzz.gguf"))
        build_facts(GGUFModel("fuzz.gguf", (header,)))
    except LlamafitError:
        pass


def test_the_seed_itself_parses() -> None:
    header = read_header(BytesSource(_HEADER, "seed.gguf"))
    assert header.header_only
    assert build_facts(GGUFModel("seed.gguf", (header,))).architecture == "gemma3"
