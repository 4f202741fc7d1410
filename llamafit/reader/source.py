"""Byte sources for the GGUF reader: a local file now, HTTP ranges later.

The parser only needs `size` and `read(offset, n)`; a remote source implements the same two,
so the parser never changes when a new source is added.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Protocol


class ByteSource(Protocol):
    """Random-access, read-only bytes."""

    name: str

    @property
    def size(self) -> int:
        """Total length in bytes of what can be read."""
        ...

    def read(self, offset: int, n: int) -> bytes | bytearray:
        """Up to `n` bytes at `offset` (fewer only at the end). A source may hand over the
        bytearray it filled rather than copy it into bytes; callers never mutate it."""
        ...


class FileSource:
    """A local file read with pread: no mmap, no reads past what the parser asks for."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.name = os.fspath(path)
        mode = os.stat(self.name).st_mode  # before open: opening a FIFO would block
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", self.name)
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", self.name)
        self._fd = os.open(self.name, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, n: int) -> bytes:
        return os.pread(self._fd, n, offset)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesSource:
    """In-memory bytes (tests, and headers already fetched)."""

    def __init__(self, data: bytes | bytearray, name: str = "<bytes>") -> None:
        self.name = name
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, n: int) -> bytes | bytearray:
        return self._data[offset : offset + n]
