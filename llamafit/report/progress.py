"""Progress lines on stderr for the slow steps: rewritten in place with a carriage return, and
closed so that what follows (an `Error:` too) starts a line of its own. The stream is looked up
when a line is written, so that whoever replaced sys.stderr (click's test runner) gets it."""

from __future__ import annotations

import sys
from typing import TextIO

from ..units import MIB


class ByteProgress:
    """`LABEL: 12.3 MiB` while bytes arrive (a remote header); call it with the bytes so far."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream
        self.shown = False  # a line is open

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def __call__(self, done: int) -> None:
        self.shown = True
        out = self._out()
        out.write(f"\r{self.label}: {done / MIB:,.1f} MiB")
        out.flush()

    def close(self) -> None:
        """End the line, when one was written."""
        if self.shown:
            self.shown = False
            out = self._out()
            out.write("\n")
            out.flush()


def status_line(text: str | None, stream: TextIO | None = None, tty: bool | None = None) -> None:
    """One status line on a terminal only: `text`, or None to clear it. `tty`: whether the stream
    is a terminal (None: the stream says)."""
    out = stream if stream is not None else sys.stderr
    if not (out.isatty() if tty is None else tty):
        return
    out.write(f"\r{text}" if text else "\r\033[K")
    out.flush()
