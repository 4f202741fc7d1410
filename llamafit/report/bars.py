"""A picture of each device's memory in the terminal: one bar per device within 80 columns.

Each bar spans the device's usable memory (or what is used, when that is more) and shows, left to
right, weights `W` (side models too), KV cache and recurrent state `K`, compute and output buffers
`C`, the reserve and the driver's overhead `R`, and what is left `.`; a part that is not zero takes
at least one column, and `|` marks where the device's memory ends when more is used. Letters keep
the picture readable without colour; on a terminal `paint_bars` colours them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..memory.model import Breakdown, DeviceUsage
from .layout import LABEL

BAR = 44  # columns of the bar itself: label 11 + [44] + " 143,360/143,360 MiB" stays within 80
PARTS = (("W", "weights"), ("K", "KV"), ("C", "compute"), ("R", "reserve"), (".", "free"))
LEGEND = "Memory     " + "  ".join(f"{ch} {name}" for ch, name in PARTS)
_COLOUR = {"W": "44", "K": "45", "C": "43", "R": "47", ".": "0"}  # background colours (ANSI SGR)


def _parts(d: DeviceUsage) -> list[int]:
    used = [
        d.weights_bytes + d.side_bytes,
        d.kv_bytes + d.recurrent_bytes,
        d.compute_bytes + d.output_bytes,
        d.reserve_bytes + d.overhead_bytes,
    ]
    free = max((d.usable_bytes or 0) - sum(used), 0)
    return [*used, free]


def _columns(sizes: Sequence[int], width: int) -> list[int]:
    """Columns per part, proportional, each part that is not zero at least one, summing to
    `width`."""
    total = sum(sizes)
    if total <= 0:
        return [0] * (len(sizes) - 1) + [width]
    cols = [max(1, round(s * width / total)) if s else 0 for s in sizes]
    while sum(cols) > width:  # take from the widest part
        i = max(range(len(cols)), key=lambda j: cols[j])
        cols[i] -= 1
    while sum(cols) < width:
        i = max(range(len(cols)), key=lambda j: sizes[j] * width / total - cols[j])
        cols[i] += 1
    return cols


def bar(d: DeviceUsage, width: int = BAR) -> str:
    """The bar's letters; when more is used than the device has, `|` marks where its memory ends."""
    cols = _columns(_parts(d), width)
    text = "".join(ch * n for (ch, _), n in zip(PARTS, cols, strict=True))
    if d.usable_bytes is not None and d.used_bytes > d.usable_bytes:
        at = min(round(d.usable_bytes / d.used_bytes * width), width - 1)
        text = text[:at] + "|" + text[at + 1 :]
    return text


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def bar_lines(b: Breakdown, width: int = BAR) -> list[str]:
    """The legend, then one line per device: `CUDA0      [WWKC…....] 1,446/24,576 MiB`."""
    lines = [LEGEND]
    for d in b.devices:
        name = d.name
        if len(name) >= LABEL:
            lines.append(name)
            name = ""
        size = f"{_mib(d.used_bytes)} MiB"
        if d.usable_bytes is not None:
            size = f"{_mib(d.used_bytes)}/{_mib(d.usable_bytes)} MiB"
        over = d.usable_bytes is not None and d.used_bytes > d.usable_bytes
        lines.append(f"{name:<{LABEL}}[{bar(d, width)}] {size}{' over' if over else ''}")
    return lines


def paint_bars(line: str) -> str:
    """A bar line with each part's letters on its colour (only on a terminal:
    report/colour.paint)."""
    start, end = line.find("["), line.find("]")
    if start < 0 or end < start:
        return line
    out, i = [], start + 1
    while i < end:
        j = i
        while j < end and line[j] == line[i]:
            j += 1
        code = _COLOUR.get(line[i])
        out.append(f"\x1b[{code}m{line[i:j]}\x1b[0m" if code and code != "0" else line[i:j])
        i = j
    return line[: start + 1] + "".join(out) + line[end:]


def is_bar_line(line: str) -> bool:
    start = line.find("[", LABEL - 1)
    end = line.find("]", start + 1)
    return (
        start == LABEL
        and end > start
        and set(line[start + 1 : end]) <= {ch for ch, _ in PARTS} | {"|"}
    )
