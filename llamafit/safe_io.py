"""Bounded, symlink-safe file I/O for the cache directory and small user files (an edge).

Everything llamafit keeps under its cache directory may have been planted or damaged by someone
else: reads take regular files only, up to a bound, and never block on a FIFO; writes go to a
private (0700) directory through mkstemp (O_EXCL) and os.replace, and refuse a symlink in the
target's place; appends open with O_NOFOLLOW and check the file is regular.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

SMALL_FILE = 64 << 10  # an API key, a dialect record, a header sidecar
CALIBRATION_FILE = 16 << 20  # thousands of runs' records
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafeFile(OSError):
    """Not a regular file, too large, or a symlink where llamafit writes."""


def read_regular(path: str | os.PathLike[str], limit: int, *, follow: bool = False) -> bytes:
    """At most `limit` bytes of a regular file; UnsafeFile for anything else (FIFO, device, link, larger)."""
    flags = os.O_RDONLY | _NONBLOCK | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFile(e.errno, "is a symbolic link", str(path)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise UnsafeFile(0, "is not a regular file", str(path))
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise UnsafeFile(0, f"is larger than {limit:,} bytes", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(0, f"is larger than {limit:,} bytes", str(path))
    return data


def private_dir(path: str | os.PathLike[str]) -> None:
    """Create `path` (and parents) with mode 0700; refuse a symlink or non-directory in its place."""
    missing = []
    here = os.path.abspath(path)
    while not os.path.lexists(here):
        missing.append(here)
        here = os.path.dirname(here)
    for d in reversed(missing):  # os.makedirs gives the parents the umask's mode, not 0700
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeFile(0, "is not a directory", str(path))


def _refuse_link(path: str | os.PathLike[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise UnsafeFile(0, "is a symbolic link", str(path))


def write_atomic(path: str | os.PathLike[str], data: bytes | bytearray) -> None:
    """Replace `path` with `data` via a private mkstemp file in the same directory."""
    directory = os.path.dirname(os.fspath(path)) or "."
    private_dir(directory)
    _refuse_link(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(os.fspath(path)) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line to a regular file (created 0600), never through a symlink."""
    private_dir(os.path.dirname(os.fspath(path)) or ".")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK, 0o600)
    except OSError:
        _refuse_link(path)
        raise
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(0, "is not a regular file", str(path))
        f.write(line.rstrip("\n") + "\n")
