"""Local GGUF headers through the remote header cache (llamafit.fetch.model_source): a local file is
keyed `file://<real path>` and validated by its size and mtime, so a second read of an unchanged
file re-parses the cached header prefix instead of touching the (possibly huge, possibly slow)
file. The cache holds only the header bytes, never tensor data."""

from __future__ import annotations

import os

from ..reader.model import GGUFModel, read_model
from .model_source import CachedHeader, header_prefix, load_header, save_header
from ..reader.source import ByteSource, BytesSource, FileSource


def file_key(path: str) -> str:
    return "file://" + os.path.realpath(path)


def validator(st: os.stat_result) -> str:
    return f"{st.st_size} bytes, mtime {st.st_mtime_ns} ns"


class _Cached(BytesSource):
    def __init__(self, entry: CachedHeader, name: str) -> None:
        super().__init__(entry.prefix, name)
        self._total = entry.size

    @property
    def size(self) -> int:
        return self._total


class _Recording:
    """A FileSource that keeps what the parser read."""

    def __init__(self, src: FileSource, key: str, valid: str) -> None:
        self.src, self.name, self.key, self.valid = src, src.name, key, valid
        self.chunks: list[tuple[int, bytes]] = []

    @property
    def size(self) -> int:
        return self.src.size

    def read(self, offset: int, n: int) -> bytes:
        data = self.src.read(offset, n)
        self.chunks.append((offset, data))
        return data

    def close(self) -> None:
        self.src.close()


def read_local_model(path: str) -> GGUFModel:
    """read_model for a local path, each shard's header from the cache when size and mtime match."""
    recorders: dict[str, _Recording] = {}

    def open_source(name: str) -> ByteSource:
        st = os.stat(name)
        key, valid = file_key(name), validator(st)
        cached = load_header(key)
        if cached is not None and cached.validator == valid and cached.size == st.st_size:
            return _Cached(cached, name)
        recorders[name] = _Recording(FileSource(name), key, valid)
        return recorders[name]

    model = read_model(path, open_source)
    for shard in model.shards:
        if rec := recorders.get(shard.path):
            prefix = header_prefix(rec.chunks, min(shard.data_offset, shard.file_size))
            save_header(CachedHeader(rec.key, rec.valid, shard.file_size, prefix))
    return model
