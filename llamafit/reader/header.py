"""A fast, header-only GGUF parser (stdlib struct over a ByteSource).

Mirrors the checks of llama.cpp's own loader, `gguf_init_from_file_impl` in ggml/src/gguf.cpp
(llama.cpp 0c1e570): magic, version, counts, duplicate keys and tensor names, n_dims <= 4,
element-count overflow, known ggml types whose block size divides ne0, tensor offsets laid out
in order with `general.alignment` padding. It never reads tensor data and never allocates more
than the bytes left in the source could hold, so hostile headers fail fast with a GGUFError.
Large arrays (the tokenizer's tokens, scores, token types, merges) are walked, not built: only
their item type and count are kept (SkippedArray).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import GGUFError
from ..units import pad
from .ggml_types import GGML_MAX_NAME, TYPES_BY_ID, GGMLType, tensor_nbytes
from .source import ByteSource

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32  # ggml/include/gguf.h
GGML_MAX_DIMS = 4  # ggml/include/ggml.h
MAX_NESTING = 8  # nested arrays deeper than this are refused (llama.cpp allows none)
FIRST_WINDOW = 1 << 16  # the first read; later reads grow with the position (see _Cursor._fill)
MAX_WINDOW = 1 << 26  # no read is larger (unless one string is)
MAX_KEPT_ARRAY = 65_536  # longer arrays are skipped (count kept); per-layer arrays are far shorter
_DIMS = [struct.Struct(f"<{n}Q") for n in range(GGML_MAX_DIMS + 1)]
_TYPE_OFFSET = struct.Struct("<IQ")

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# GGUF value types (ggml/include/gguf.h enum gguf_type): struct format and size of one item.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),  # UINT8
    1: ("b", 1),  # INT8
    2: ("H", 2),  # UINT16
    3: ("h", 2),  # INT16
    4: ("I", 4),  # UINT32
    5: ("i", 4),  # INT32
    6: ("f", 4),  # FLOAT32
    7: ("?", 1),  # BOOL
    10: ("Q", 8),  # UINT64
    11: ("q", 8),  # INT64
    12: ("d", 8),  # FLOAT64
}
TYPE_STRING = 8
TYPE_ARRAY = 9
TYPE_UINT32 = 4
_MIN_ITEM_SIZE = {TYPE_STRING: 8, TYPE_ARRAY: 12, **{t: s for t, (_, s) in _SCALARS.items()}}
_MIN_KV_SIZE = 8 + 4 + 1  # key length, value type, smallest value
_MIN_TENSOR_INFO_SIZE = 8 + 4 + 4 + 8  # name length, n_dims, type, offset


@dataclass(frozen=True, slots=True)
class SkippedArray:
    """An array walked but not materialised: its GGUF item type and length."""

    item_type: int
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's header entry; `n_bytes` is ggml_nbytes (ggml/src/ggml.c)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    """Everything in one GGUF file before its tensor data."""

    path: str
    version: int
    metadata: Mapping[str, Any]
    value_types: Mapping[str, int]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    data_size: int
    file_size: int

    @property
    def header_only(self) -> bool:
        """True when the file stops before its tensor data (how a remote read sees a model)."""
        return self.file_size < self.data_offset + self.data_size


def _walk_strings(buf: bytes | bytearray, off: int, count: int) -> tuple[int, int]:
    """Skip up to `count` strings in buf from off; returns (strings skipped, new offset).

    Stops early when a length prefix is not wholly inside buf (struct.error; OverflowError for
    absurd offsets). Unrolled by 16: this loop is most of the time spent on a 262k vocabulary.
    """
    unpack = _U64.unpack_from
    done = 0
    try:
        for _ in range(count >> 4):
            start = off
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            off += 8 + unpack(buf, off)[0]
            done += 16
    except (struct.error, OverflowError):
        off = start  # redo the interrupted group one string at a time
    try:
        while done < count:
            off += 8 + unpack(buf, off)[0]
            done += 1
    except (struct.error, OverflowError):
        pass
    return done, off


class _Cursor:
    """Sequential reads through a growing window over a ByteSource."""

    def __init__(self, src: ByteSource, first_window: int | None = None) -> None:
        self.src = src
        self.size = src.size
        self.pos = 0
        self.buf: bytes | bytearray = b""
        self.base = 0
        # a source may ask for smaller reads (HTTP: fetch < 2x the header even for tiny headers)
        self.first_window: int = first_window or int(getattr(src, "first_window", FIRST_WINDOW))
        self.reach = 0  # a position the parse is sure to read up to (a hint for the next read)
        self.what = "the header"

    def fail(self, what: str, offset: int | None = None) -> GGUFError:
        return GGUFError(self.src.name, self.pos if offset is None else offset, what)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def _fill(self, n: int) -> int:
        """Make [pos, pos+n) readable; returns pos's index into buf.

        A read is the largest of the first window, what is sure to be parsed (up to `reach`) and
        half the bytes before pos (growth by 1.5x), capped at MAX_WINDOW. What is read but never
        parsed thus stays under half the header: a remote header costs < 2x its size, and a
        262k-token vocabulary still takes a handful of reads.
        """
        off = self.pos - self.base
        if 0 <= off and off + n <= len(self.buf):
            return off
        if n > self.left:
            raise self.fail(f"file ends while reading {self.what} ({self.left} bytes left)")
        window = min(max(self.first_window, self.pos // 2, self.reach - self.pos), MAX_WINDOW)
        self.buf = b""  # let the old window go before the new one arrives
        self.buf = self.src.read(self.pos, min(max(n, window), self.left))
        self.base = self.pos
        if len(self.buf) < n:
            raise self.fail(f"source returned too few bytes while reading {self.what}")
        return 0

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        off = self._fill(st.size)
        self.pos += st.size
        return st.unpack_from(self.buf, off)

    def u32(self) -> int:
        return int(self.unpack(_U32)[0])

    def u64(self) -> int:
        return int(self.unpack(_U64)[0])

    def raw(self, n: int) -> bytes | bytearray:
        off = self._fill(n)
        self.pos += n
        return self.buf[off : off + n]

    def string(self) -> str:
        start = self.pos
        n = self.u64()
        if n > self.left:
            raise self.fail(
                f"string length {n} in {self.what} exceeds the {self.left} bytes left", start
            )
        return self.raw(n).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Walk `count` length-prefixed strings without building them (the 262k-token hot loop).

        The inner loop only adds lengths; reading past the window raises struct.error, and the
        refill then reads at that position (failing if a length ran past the end of the file).
        """
        while count:
            if self.pos > self.size:
                raise self.fail(f"a string in {self.what} runs past the end of the file")
            self.reach = self.pos + 8 * count  # each string has its 8-byte length
            off = self._fill(8)
            done, off = _walk_strings(self.buf, off, count)
            count -= done
            self.pos = self.base + off
        if self.pos > self.size:
            raise self.fail(f"a string in {self.what} runs past the end of the file")

    def must_read(self, n: int) -> None:
        """The parse cannot go on without reading `n` more bytes: fail now, before reading any, when
        the source will not deliver them (a remote source's header budget, `read_budget`)."""
        budget = getattr(self.src, "read_budget", None)
        buffered = max(len(self.buf) - (self.pos - self.base), 0)
        if budget is not None and n - buffered > budget:
            raise self.fail(
                f"{self.what} needs at least {n:,} more bytes, more than the {budget:,} bytes left "
                "of this source's header budget: not a plausible GGUF header"
            )

    def skip(self, n: int) -> None:
        if n > self.left:
            raise self.fail(f"file ends inside {self.what} (needs {n} bytes, {self.left} left)")
        self.pos += n


def _read_value(cur: _Cursor, vtype: int, *, skip_arrays: bool, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        fmt, _ = _SCALARS[vtype]
        return cur.unpack(struct.Struct("<" + fmt))[0]
    if vtype == TYPE_STRING:
        return cur.string()
    if vtype == TYPE_ARRAY:
        return _read_array(cur, skip_arrays=skip_arrays, depth=depth + 1)
    raise cur.fail(f"unknown value type {vtype} in {cur.what}", cur.pos - 4)


def _read_array(cur: _Cursor, *, skip_arrays: bool, depth: int) -> Any:
    start = cur.pos
    if depth > MAX_NESTING:
        raise cur.fail(f"arrays nested deeper than {MAX_NESTING} in {cur.what}", start)
    itype = cur.u32()
    count = cur.u64()
    if itype not in _MIN_ITEM_SIZE:
        raise cur.fail(f"unknown array item type {itype} in {cur.what}", start)
    if count > cur.left // _MIN_ITEM_SIZE[itype]:
        raise cur.fail(
            f"array of {count} items in {cur.what} exceeds the {cur.left} bytes left", start
        )
    if itype in (TYPE_STRING, TYPE_ARRAY):
        cur.must_read(count * _MIN_ITEM_SIZE[itype])  # their lengths must be read, not skipped
    keep = not skip_arrays and count <= MAX_KEPT_ARRAY
    if itype in _SCALARS:
        fmt, size = _SCALARS[itype]
        if not keep:
            cur.skip(count * size)
            return SkippedArray(itype, count)
        return list(struct.unpack_from(f"<{count}{fmt}", cur.raw(count * size)))
    if itype == TYPE_STRING and not keep:
        cur.skip_strings(count)
        return SkippedArray(itype, count)
    items = [_read_value(cur, itype, skip_arrays=not keep, depth=depth) for _ in range(count)]
    return items if keep else SkippedArray(itype, count)


def _read_metadata(cur: _Cursor, n_kv: int) -> tuple[dict[str, Any], dict[str, int]]:
    """Key/value pairs and each key's GGUF value type."""
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for i in range(n_kv):
        start = cur.pos
        cur.what = f"key {i}"
        key = cur.string()
        if not key:
            raise cur.fail(f"key {i} is empty", start)
        if key in metadata:
            raise cur.fail(f"duplicate key '{key}'", start)
        cur.what = f"the value of '{key}'"
        vtype = types[key] = cur.u32()
        # tokenizer arrays are only ever counted (n_vocab, n_merges): never build them
        metadata[key] = _read_value(cur, vtype, skip_arrays=key.startswith("tokenizer."))
    return metadata, types


def _alignment(cur: _Cursor, metadata: Mapping[str, Any], types: Mapping[str, int]) -> int:
    if "general.alignment" not in metadata:
        return GGUF_DEFAULT_ALIGNMENT
    value = metadata["general.alignment"]
    if types["general.alignment"] != TYPE_UINT32:
        raise cur.fail("general.alignment must be a uint32", None)
    if value == 0 or value & (value - 1):
        raise cur.fail(f"general.alignment {value} is not a power of 2", None)
    return int(value)


def _read_tensor_info(cur: _Cursor, i: int, seen: set[str]) -> TensorInfo:
    start = cur.pos
    cur.what = f"tensor info {i}"
    name = cur.string()
    if len(name.encode()) >= GGML_MAX_NAME:
        raise cur.fail(f"tensor name '{name[:80]}' is longer than {GGML_MAX_NAME - 1} bytes", start)
    if name in seen:
        raise cur.fail(f"duplicate tensor name '{name}'", start)
    cur.what = f"tensor '{name}'"
    n_dims = cur.u32()
    if n_dims > GGML_MAX_DIMS:
        raise cur.fail(f"tensor '{name}' has {n_dims} dimensions (at most {GGML_MAX_DIMS})", start)
    shape = cur.unpack(_DIMS[n_dims])
    n_elements = 1
    for d in shape:
        if d >= 1 << 63:
            raise cur.fail(f"tensor '{name}' has a negative dimension", start)
        n_elements *= d
    if n_elements >= 1 << 63:
        raise cur.fail(f"tensor '{name}' shape {shape} overflows int64", start)
    type_at = cur.pos
    ggml_type, offset = cur.unpack(_TYPE_OFFSET)
    try:
        gtype = GGMLType.of(ggml_type)
    except KeyError:
        raise cur.fail(f"tensor '{name}' has unknown ggml type {ggml_type}", type_at) from None
    ne0 = shape[0] if shape else 1
    if ne0 % gtype.block_size:
        raise cur.fail(
            f"tensor '{name}' of type {gtype.name} has {ne0} elements per row, "
            f"not a multiple of the block size {gtype.block_size}",
            start,
        )
    seen.add(name)
    return TensorInfo(name, shape, ggml_type, offset, tensor_nbytes(gtype, n_elements))


def _tensor_info_in_window(cur: _Cursor, seen: set[str]) -> TensorInfo | None:
    """_read_tensor_info's tensor info where it lies whole in the bytes already read and passes
    every check, parsed straight from the window (a plan reads some thousand of them: issue #36
    item 5); None, having read nothing, for anything else: _read_tensor_info then reads it (and
    raises its errors)."""
    buf, off = cur.buf, cur.pos - cur.base
    end = len(buf)
    if off < 0 or off + 8 > end:
        return None
    (n,) = _U64.unpack_from(buf, off)
    at = off + 8 + n
    if at + 4 > end:
        return None
    name = buf[off + 8 : at].decode("utf-8", errors="replace")
    (n_dims,) = _U32.unpack_from(buf, at)
    if len(name.encode()) >= GGML_MAX_NAME or name in seen or n_dims > GGML_MAX_DIMS:
        return None
    dims = _DIMS[n_dims]
    at += 4
    if at + dims.size + _TYPE_OFFSET.size > end:
        return None
    shape = dims.unpack_from(buf, at)
    n_elements = 1
    for d in shape:
        if d >= 1 << 63:
            return None
        n_elements *= d
    ggml_type, offset = _TYPE_OFFSET.unpack_from(buf, at + dims.size)
    gtype = TYPES_BY_ID.get(ggml_type)
    if n_elements >= 1 << 63 or gtype is None or (shape[0] if shape else 1) % gtype.block_size:
        return None
    seen.add(name)
    cur.pos = cur.base + at + dims.size + _TYPE_OFFSET.size
    return TensorInfo(name, shape, ggml_type, offset, tensor_nbytes(gtype, n_elements))


def _layout_data(cur: _Cursor, tensors: list[TensorInfo], alignment: int) -> tuple[int, int]:
    """Check offsets as gguf.cpp does (in order, each padded); returns (data_offset, data_size)."""
    data_offset = pad(cur.pos, alignment)
    size = 0
    for t in tensors:
        if t.offset != size:
            raise cur.fail(f"tensor '{t.name}' has data offset {t.offset}, expected {size}", None)
        size += pad(t.n_bytes, alignment)
    if cur.size > data_offset and cur.size < data_offset + size:
        last = next(t for t in tensors if data_offset + t.offset + t.n_bytes > cur.size)
        raise cur.fail(
            f"tensor data out of bounds: '{last.name}' ends at byte "
            f"{data_offset + last.offset + last.n_bytes} but the file has {cur.size} bytes",
            data_offset + last.offset,
        )
    return data_offset, size


def _version(cur: _Cursor) -> int:
    magic = cur.raw(4) if cur.left >= 4 else b""
    if magic != GGUF_MAGIC:
        if cur.size == 0:
            raise GGUFError(cur.src.name, None, "the file is empty")
        raise cur.fail(f"not a GGUF file (magic {magic!r}, expected b'GGUF')", 0)
    cur.what = "the version"
    version = cur.u32()
    if version in (2 << 24, 3 << 24):
        raise cur.fail("big-endian GGUF files are not supported (this reader is little-endian)", 4)
    if version == 1:
        raise cur.fail("GGUF version 1 is no longer supported (llama.cpp reads 2 and 3)", 4)
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version} (expected 2 or 3)", 4)
    return version


def read_header(src: ByteSource) -> GGUFHeader:
    """Parse one GGUF file's header; every defect becomes a GGUFError."""
    cur = _Cursor(src)
    version = _version(cur)
    cur.what = "the tensor and key counts"
    n_tensors, n_kv = cur.u64(), cur.u64()
    if n_tensors > cur.left // _MIN_TENSOR_INFO_SIZE:
        raise cur.fail(
            f"tensor count {n_tensors} exceeds what the {cur.left} bytes left can hold", 8
        )
    if n_kv > cur.left // _MIN_KV_SIZE:
        raise cur.fail(f"key count {n_kv} exceeds what the {cur.left} bytes left can hold", 16)
    metadata, types = _read_metadata(cur, n_kv)
    alignment = _alignment(cur, metadata, types)
    seen: set[str] = set()
    cur.reach = cur.pos + n_tensors * _MIN_TENSOR_INFO_SIZE
    tensors = []
    found = None
    for i in range(n_tensors):
        found = _tensor_info_in_window(cur, seen)
        tensors.append(found if found is not None else _read_tensor_info(cur, i, seen))
    if found is not None:
        cur.what = f"tensor '{found.name}'"  # as _read_tensor_info leaves it
    data_offset, data_size = _layout_data(cur, tensors, alignment)
    return GGUFHeader(
        src.name,
        version,
        metadata,
        types,
        tuple(tensors),
        alignment,
        data_offset,
        data_size,
        src.size,
    )
