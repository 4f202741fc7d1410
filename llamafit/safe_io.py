"""Bounded, symlink-safe file I/O for the cache directory and small user files (an edge).

Everything llamafit keeps under its cache directory may have been planted or damaged by someone
else: reads take regular files only, up to a bound, and never block on a FIFO; writes go to a
private (0700) directory through mkstemp (O_EXCL) and os.replace, and refuse a symlink in the
target's place; appends refuse anything but a regular file before opening it (lstat: a FIFO, a
device node or a link is never opened for writing), then open it with O_APPEND | O_NOFOLLOW |
O_NONBLOCK and check again on the open descriptor (fstat) before writing one line. Removal
(remove_read) unlinks only the regular file that was read, identified by device and inode. A file
the user names for output (write_output: `plan --html`) replaces only a regular file that is no
input of the command, in a directory that exists (#37 F5).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Sequence
from typing import BinaryIO

SMALL_FILE = 64 << 10  # an API key, a dialect record, a header sidecar
CALIBRATION_FILE = 16 << 20  # thousands of runs' records
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafeFile(OSError):
    """Not a regular file, too large, or a symlink where llamafit writes."""


def read_regular(path: str | os.PathLike[str], limit: int, *, follow: bool = False) -> bytes:
    """At most `limit` bytes of a regular file; UnsafeFile for anything else (FIFO, device, link,
    larger)."""
    return read_regular_stat(path, limit, follow=follow)[0]


def read_regular_stat(
    path: str | os.PathLike[str], limit: int, *, follow: bool = False
) -> tuple[bytes, os.stat_result]:
    """read_regular, and the file's stat (to remove exactly the file that was read: remove_read)."""
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
    return data, st


def open_regular(path: str | os.PathLike[str]) -> tuple[BinaryIO, os.stat_result]:
    """A regular file opened for reading (never through a link, never blocking on a FIFO), and its
    stat; UnsafeFile for anything else. For a file read in pieces (the newest records of a large
    calibration file, a line-by-line check): the caller bounds what it keeps."""
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFile(e.errno, "is a symbolic link", str(path)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFile(0, "is not a regular file", str(path))
    return os.fdopen(fd, "rb"), st


def remove_read(path: str | os.PathLike[str], read: os.stat_result) -> None:
    """Unlink `path` only while it is still the regular file `read` describes (same device and
    inode): never a link, FIFO or device node put in its place since."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (read.st_dev, read.st_ino):
        raise UnsafeFile(0, "was replaced while it was read", str(path))
    os.unlink(path)


def private_dir(path: str | os.PathLike[str]) -> None:
    """Create `path` (and parents) with mode 0700; refuse a symlink or non-directory in its
    place."""
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


def _refuse_unless_regular(path: str | os.PathLike[str]) -> None:
    """Where `path` exists, it must be a regular file, not a symbolic link (UnsafeFile
    otherwise)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeFile(0, "is a symbolic link", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(0, "is not a regular file", str(path))


def install(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Move a file llamafit wrote privately (in `path`'s directory) into place: os.replace, refusing
    a symbolic link or anything but a regular file where it goes."""
    _refuse_unless_regular(path)
    os.replace(tmp, path)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line to a regular file (created 0600), never through a symlink, a FIFO or a
    device."""
    private_dir(os.path.dirname(os.fspath(path)) or ".")
    _refuse_unless_regular(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK, 0o600)
    except OSError:
        _refuse_link(path)
        raise
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(0, "is not a regular file", str(path))
        f.write(line.rstrip("\n") + "\n")


def _output_refusal(path: str, inputs: Sequence[str]) -> str | None:
    """Why `path` may not be replaced by a file the user asked for, or None (it may be)."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):  # followed: a symlinked directory is that directory
        return f"no such directory {directory}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):  # a FIFO, a device node, a directory, a socket
        return "is not a regular file"
    for given in inputs:
        with contextlib.suppress(OSError):
            theirs = os.stat(given)
            if (theirs.st_dev, theirs.st_ino) == (st.st_dev, st.st_ino):
                return f"is an input of this command ({given})"
    with contextlib.suppress(OSError), open(path, "rb", opener=_nonblocking) as f:
        if f.read(4) == b"GGUF":
            return "is a GGUF file, which llamafit never replaces"
    return None


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | _NOFOLLOW | _NONBLOCK)


def check_output(path: str, inputs: Sequence[str] = ()) -> None:
    """Refuse (UnsafeFile) a file the user named for output (`plan --html`) where writing it would
    destroy something: a missing directory (never created unasked), a symbolic link, anything but
    a regular file (a FIFO, /dev/null), one of the command's inputs, a GGUF file. A symlinked
    directory is followed, as an editor would."""
    why = _output_refusal(path, inputs)
    if why:
        raise UnsafeFile(0, why, path)


def write_output(path: str, data: bytes, inputs: Sequence[str] = ()) -> None:
    """Write a file the user named (check_output's rules) atomically: a new file in the same
    directory, then os.replace; an existing page keeps its mode, a new one is 0644."""
    check_output(path, inputs)
    directory = os.path.dirname(path) or "."
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        check_output(path, inputs)  # again, just before: nothing put in its place meanwhile
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
