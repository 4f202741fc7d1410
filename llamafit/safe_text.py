"""Text from model files and paths, made safe for a terminal (pure)."""

from __future__ import annotations

import unicodedata


def printable(text: str) -> str:
    """Text from a model file or path for the terminal: control characters and undecodable bytes
    escaped (\\x1b, \\udcff), never acted on by the terminal."""
    out = []
    for c in text:
        if unicodedata.category(c) in ("Cc", "Cs") or c in "\u2028\u2029":
            out.append(c.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(c)
    return "".join(out)
