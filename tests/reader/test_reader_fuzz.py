"""Mutated headers: the reader and the facts builder fail only with LlamafitError, never a crash."""

from __future__ import annotations

import struct
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamafit.errors import LlamafitError
from llamafit.facts.hparams import build_facts
from llamafit.reader import header
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


def _outcome(data: bytes, window: int | None) -> object:
    src = BytesSource(data)
    if window is not None:
        src.first_window = window  # type: ignore[attr-defined]
    try:
        return read_header(src)
    except LlamafitError as e:
        return str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.sampled_from([None, 64, 1000]))
def test_tensor_infos_read_from_the_window_are_the_checked_reads(
    data: bytes, window: int | None
) -> None:
    """header._tensor_info_in_window (the tensor infos parsed straight from the bytes read) gives
    the header, or the error, that _read_tensor_info alone gives, whatever the window."""
    fast = _outcome(data, window)
    with mock.patch.object(header, "_tensor_info_in_window", lambda cur, seen: None):
        assert _outcome(data, window) == fast


def test_the_seed_reads_its_tensor_infos_from_the_window() -> None:
    real = header._tensor_info_in_window
    calls: list[object] = []

    def counted(cur: object, seen: set[str]) -> object:
        calls.append(real(cur, seen))  # type: ignore[arg-type]
        return calls[-1]

    with mock.patch.object(header, "_tensor_info_in_window", counted):
        h = read_header(BytesSource(_HEADER))
    assert len(calls) == len(h.tensors) and None not in calls
