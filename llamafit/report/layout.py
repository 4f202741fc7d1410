"""Text for people at the display edge: 80 columns, wrapped under the label, colour on a terminal.

Report lines have a label column of 11 characters (`Verdict    …`); a longer line wraps with its
continuation under the text. A command wraps as shell continuations (` \\`), so what is printed
still pastes into a shell. Words are never broken: a path longer than a line stays whole.
Colour (https://no-color.org): only on a terminal, never with NO_COLOR set to anything or TERM=dumb.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Sequence
from typing import Any

WIDTH = 80
LABEL = 11
_LABELLED = re.compile(r"^[A-Z][A-Za-z-]*(?: [A-Za-z-]+)? +\S")  # `Verdict    x`, `Way out    x`


def wrap(text: str, width: int = WIDTH, **options: Any) -> list[str]:
    """textwrap.wrap in linear time: a word longer than two lines (a hostile device or model name
    that reached a report) is cut there with `…`, since textwrap breaks a long word by copying
    what is left of it for every line (#37 F11: a 4 MiB device name never finished)."""
    longest = 2 * width
    if len(text) > longest and any(len(w) > longest for w in text.split()):
        text = " ".join(w if len(w) <= longest else w[: longest - 1] + "…" for w in text.split(" "))
    return textwrap.wrap(text, width, **options)


def wrap_line(line: str, width: int = WIDTH) -> list[str]:
    """A labelled line wrapped under its text; other lines as they are."""
    if (
        len(line) <= width
        or len(line) <= LABEL
        or line[LABEL - 1] != " "
        or not _LABELLED.match(line)
    ):
        return [line]
    if line.endswith(
        " \\"
    ):  # a command line (command_lines) already wrapped as shell continuations
        return [line]
    return wrap(
        line[LABEL:],
        width,
        initial_indent=line[:LABEL],
        subsequent_indent=" " * LABEL,
        break_long_words=False,
        break_on_hyphens=False,
    )


def wrap_text(text: str, width: int = WIDTH) -> str:
    return "\n".join(part for line in text.split("\n") for part in wrap_line(line, width))


def command_lines(label: str, argv: Sequence[str], width: int = WIDTH) -> list[str]:
    """`label` + the shell-quoted argv, continued with ` \\` under the text; a flag stays with its
    value. A command that needs wrapping puts the program and the model (`-m`/`-mu` PATH) on lines
    of their own, so that how the flags wrap never depends on where the files are."""
    words = [shlex.quote(a) for a in argv]
    one = f"{label:<{LABEL}}" + " ".join(words)
    if len(one) <= width:
        return [one]
    groups: list[str] = []
    for w in words:
        if (
            groups
            and groups[-1].startswith("-")
            and " " not in groups[-1]
            and not w.startswith("-")
        ):
            groups[-1] += " " + w
        else:
            groups.append(w)
    alone = [g for g in groups[:2] if g == groups[0] or g.startswith(("-m ", "-mu "))]
    lines = [f"{label:<{LABEL}}{alone[0]} \\"] + [" " * LABEL + g + " \\" for g in alone[1:]]
    current = " " * LABEL
    for g in groups[len(alone) :]:
        candidate = current + ("" if current.endswith(" ") and len(current) <= LABEL else " ") + g
        if len(candidate) > width - 2 and current.strip():
            lines.append(current + " \\")
            current = " " * LABEL + g
        else:
            current = candidate
    return [*lines, current] if current.strip() else [*lines[:-1], lines[-1].removesuffix(" \\")]


def server_lines(why: str) -> list[str]:
    """`Server     llama-server from PATH: /path/to/llama-server`: the path on a line of its own."""
    head, sep, path = why.rpartition(": ")
    if sep and path.startswith("/"):
        return [f"Server     {head}:", " " * LABEL + path]
    return wrap_line(f"Server     {why}")
