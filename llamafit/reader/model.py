"""A whole model: one GGUF file or all shards of a split model (`name-00001-of-00003.gguf`).

llama.cpp names shards with llama_split_path ("%s-%05d-of-%05d.gguf", src/llama.cpp) and writes
`split.no`, `split.count`, `split.tensors.count` into each (tools/gguf-split); metadata comes from
the first shard, tensors from all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import GGUFError
from .header import GGUFHeader, TensorInfo, read_header
from .names import shard_name, split_info
from .source import ByteSource, FileSource


@dataclass(frozen=True)
class GGUFModel:
    """All shards' headers; `metadata` is the first shard's, `tensors` all shards' in order."""

    path: str
    shards: tuple[GGUFHeader, ...]

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.shards[0].metadata

    @cached_property
    def tensors(self) -> tuple[TensorInfo, ...]:
        return tuple(t for s in self.shards for t in s.tensors)

    @cached_property
    def _by_name(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}

    def tensor(self, name: str) -> TensorInfo | None:
        return self._by_name.get(name)

    @property
    def file_size(self) -> int:
        return sum(s.file_size for s in self.shards)

    @property
    def header_only(self) -> bool:
        return any(s.header_only for s in self.shards)


def shard_paths(path: str) -> list[str]:
    """Every shard's path given any one of them; a single path when the name is not a split name."""
    # a split name exactly as llama_split_path writes it (llama_split_prefix)
    info = split_info(path)
    if info is None or path != shard_name(info.prefix, info.index, info.count):
        return [path]
    count, no = info.count, info.index
    if not 1 <= no <= count:
        raise GGUFError(
            path,
            None,
            f"the name says shard {no} of {count}; split models number their shards "
            "1 to N (-00001-of-0000N.gguf)",
        )
    return [shard_name(info.prefix, i, count) for i in range(1, count + 1)]


def _check_shard(header: GGUFHeader, index: int, count: int) -> None:
    n_split = header.metadata.get("split.count", 1)
    if count == 1 and isinstance(n_split, int) and n_split > 1:
        raise GGUFError(
            header.path,
            None,
            f"is one shard of {n_split} but its name does not end in "
            "-NNNNN-of-NNNNN.gguf, so the other shards cannot be found",
        )
    no = header.metadata.get("split.no", 0 if count == 1 else None)
    n = header.metadata.get("split.count", 1 if count == 1 else None)
    if n != count or no != index:
        raise GGUFError(
            header.path,
            None,
            f"expected shard {index + 1} of {count}, but split.no={no} split.count={n}",
        )


def read_model(
    path: str | os.PathLike[str], open_source: Callable[[str], ByteSource] = FileSource
) -> GGUFModel:
    """Read a model's header(s): one file, or all shards of a split model found from any shard."""
    path = os.fspath(path)
    paths = shard_paths(path)
    headers = []
    for i, p in enumerate(paths):
        headers.append(_read_one(p, open_source, missing_of=path if len(paths) > 1 else None))
        _check_shard(headers[-1], i, len(paths))
    model = GGUFModel(paths[0], tuple(headers))
    _check_tensor_names(model)
    return model


def _read_one(
    path: str, open_source: Callable[[str], ByteSource], missing_of: str | None
) -> GGUFHeader:
    try:
        src = open_source(path)
    except FileNotFoundError:
        if missing_of:
            raise GGUFError(
                path, None, f"shard of split model {os.path.basename(missing_of)} is missing"
            ) from None
        raise GGUFError(path, None, "no such file") from None
    except IsADirectoryError:
        raise GGUFError(path, None, "is a directory, not a GGUF file") from None
    except OSError as e:
        raise GGUFError(path, None, f"cannot open: {e.strerror or e}") from e
    try:
        return read_header(src)
    except OSError as e:
        raise GGUFError(path, None, f"read error: {e.strerror or e}") from e
    finally:
        close = getattr(src, "close", None)
        if close:
            close()


def _check_tensor_names(model: GGUFModel) -> None:
    seen: set[str] = set()
    for shard in model.shards:
        for t in shard.tensors:
            if t.name in seen:
                raise GGUFError(
                    shard.path, None, f"tensor '{t.name}' appears in more than one shard"
                )
            seen.add(t.name)
    expected = model.metadata.get("split.tensors.count")
    if isinstance(expected, int) and expected != len(seen):
        raise GGUFError(
            model.path,
            None,
            f"split.tensors.count is {expected} but the shards hold {len(seen)} tensors",
        )
