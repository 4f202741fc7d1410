"""Colour on a terminal: whole lines by their label (the verdict, warnings, failures) and the
memory bars part by part (bars.py). Only where use_colour says so (a TTY, no NO_COLOR)."""

from __future__ import annotations

from collections.abc import Mapping

from .bars import is_bar_line, paint_bars
from .layout import LABEL


def use_colour(is_tty: bool, env: Mapping[str, str]) -> bool:
    return is_tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


_COLOURS = (
    ("Verdict    does not fit", "31"),
    ("Verdict    fits", "32"),
    ("Warning    ", "33"),
    ("Failed     ", "31"),
)


def paint(text: str) -> str:
    """The verdict green (fits) or red (does not fit), warnings yellow, failures red: whole
    lines."""
    out, code = [], None
    for line in text.split("\n"):
        if is_bar_line(line):  # a memory bar (bars.py): each part on its colour
            out.append(paint_bars(line))
            continue
        if not line.startswith(" " * LABEL):  # a continuation keeps its first line's colour
            code = next((c for prefix, c in _COLOURS if line.startswith(prefix)), None)
        out.append(f"\x1b[{code}m{line}\x1b[0m" if code else line)
    return "\n".join(out)
