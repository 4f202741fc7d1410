"""Text from model files and paths, made safe for a terminal (pure)."""

from __future__ import annotations

import re

# unicodedata's Cc (C0, DEL, C1) and Cs (lone surrogates: undecodable bytes), and the line and
# paragraph separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")


def _escaped(m: re.Match[str]) -> str:
    return m.group().encode("unicode_escape", "backslashreplace").decode("ascii")


def printable(text: str) -> str:
    """Text from a model file or path for the terminal: control characters and undecodable bytes
    escaped (\\x1b, \\udcff), never acted on by the terminal. Linear in the text, with no list
    of characters (a tool's 4 MiB answer: #37 F4)."""
    return _UNSAFE.sub(_escaped, text)


# printable's, but the tab (\x09) and the newline (\x0a): the two a program's output is read by
_UNSAFE_BUT_LINES = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\ud800-\\udfff\\u2028\\u2029]")


def printable_lines(text: str) -> str:
    """Like printable, but newlines and tabs kept (a `\\r\\n` is a newline): a program's output,
    line by line, as its parser reads it (vulkaninfo indents with tabs). Neither acts on a
    terminal beyond moving the cursor; a line shown to the user goes through printable too."""
    return _UNSAFE_BUT_LINES.sub(_escaped, text.replace("\r\n", "\n"))
