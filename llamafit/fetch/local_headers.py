"""Local GGUF headers through the remote header cache (llamafit.fetch.model_source): a local file is
keyed `file://<real path>` and validated by its size and mtime, so a second read of an unchanged
file re-parses the cached header prefix instead of touching the (possibly huge, possibly slow)
file. The cache holds only the header bytes, never tensor data."""

from __future__ import annotations

import os

from ..reader.model import GGUFModel, read_model
from ..reader.source import ByteSource, FileSource
from .model_source import (
    CachedHeader,
    CachedSource,
    RecordingSource,
    header_prefix,
    load_header,
    save_header,
)


def file_key(path: str) -> str:
    return "file://" + os.path.realpath(path)


def validator(st: os.stat_result) -> str:
    return f"{st.st_size} bytes, mtime {st.st_mtime_ns} ns"


def read_local_model(path: str) -> GGUFModel:
    """read_model for a local path, each shard's header from the cache when size and mtime match."""
    recorders: dict[str, tuple[RecordingSource, str, str]] = {}

    def open_source(name: str) -> ByteSource:
        st = os.stat(name)
        key, valid = file_key(name), validator(st)
        cached = load_header(key)
        if cached is not None and cached.validator == valid and cached.size == st.st_size:
            return CachedSource(cached, name)
        recorders[name] = (RecordingSource(FileSource(name)), key, valid)
        return recorders[name][0]

    model = read_model(path, open_source)
    for shard in model.shards:
        if shard.path in recorders:
            rec, key, valid = recorders[shard.path]
            prefix = header_prefix(rec.chunks, min(shard.data_offset, shard.file_size))
            save_header(CachedHeader(key, valid, shard.file_size, prefix))
    return model
