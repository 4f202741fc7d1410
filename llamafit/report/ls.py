"""`llamafit ls` in words (80 columns) and as JSON (keys documented in docs/ls.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..fit.listing import Row
from ..safe_text import printable
from ..units import GIB, MIB


class _Place(Protocol):  # fetch.stores.Root
    @property
    def store(self) -> str: ...
    @property
    def path(self) -> str: ...


class _Note(_Place, Protocol):  # fetch.stores.Note
    @property
    def code(self) -> str: ...
    @property
    def detail(self) -> str: ...


class Listing(Protocol):
    """What `llamafit ls` found (commands.ls.Listing): the rows, the stores looked in, the notes."""

    @property
    def rows(self) -> Sequence[Row]: ...
    @property
    def notes(self) -> Sequence[_Note]: ...
    @property
    def roots(self) -> Sequence[_Place]: ...


_COLS = (
    ("NAME", 13),
    ("STORE", 9),
    ("ARCH", 8),
    ("QUANT", 6),
    ("SIZE", 5),
    ("TRAIN", 5),
    ("CTX/SLOT", 9),
    ("TOK/S", 7),
    ("HERE", 10),
)
_RIGHT = {"SIZE", "TRAIN", "TOK/S"}


def tokens(n: int) -> str:
    if n < 1024:
        return str(n)
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n / 1024:.1f}k"


def gib(n: int) -> str:
    return f"{n / GIB:.1f}G" if n < 100 * GIB else f"{n / GIB:.0f}G"


def here(row: Row) -> str:
    f = row.fit
    if f.verdict == "fits":
        return "fits"
    if f.verdict == "offload":
        return f"-ncmoe {f.n_cpu_moe}" if f.n_cpu_moe else f"-ngl {f.n_gpu_layers}"
    if f.verdict == "needs" and f.need_bytes:
        return (
            f"needs {f.need_bytes / GIB:.0f}G"
            if f.need_bytes >= 10 * GIB
            else f"needs {f.need_bytes / GIB:.1f}G"
        )
    return "no fit"


def _ctx(row: Row) -> str:
    f = row.fit
    if f.verdict in ("fits", "offload") and f.ctx:
        return f"{tokens(f.ctx)} {f.type_k if f.type_k == f.type_v else f'{f.type_k}/{f.type_v}'}"
    return "-"


def rate(tps: float) -> str:
    """Tokens/s in at most 4 characters: 4.2, 41, 185, 1.9k, 50k, 1.7M."""
    for scale, unit in ((1.0, ""), (1e3, "k"), (1e6, "M")):
        if tps < 9.95 * scale:
            return f"{tps / scale:.1f}{unit}"
        if tps < 999.5 * scale:
            return f"{tps / scale:.0f}{unit}"
    return f"{tps / 1e9:.0f}G"


def _speed(row: Row) -> str:
    """Generation tokens/s, full context to empty ("21-41"); the empty context's alone ("~1.9k")
    where the range does not fit; "-" without an estimate (a GPU given by size has no bandwidth)."""
    tps = row.fit.generation_tps
    if not tps or row.fit.verdict not in ("fits", "offload"):
        return "-"
    low, high = rate(tps[0]), rate(tps[1])
    both = high if low == high else f"{low}-{high}"
    return both if len(both) <= dict(_COLS)["TOK/S"] else f"~{high}"


def _cells(row: Row) -> list[str]:
    """Names, architectures and quant tags come from stores and model files: escaped (safe_text)."""
    return [
        printable(row.name),
        printable(row.store),
        printable(row.arch),
        printable(row.quant),
        gib(row.size_bytes),
        tokens(row.n_ctx_train),
        _ctx(row),
        _speed(row),
        here(row),
    ]


def _line(cells: list[str]) -> str:
    out = []
    for (title, width), cell in zip(_COLS, cells, strict=True):
        cell = cell if len(cell) <= width else cell[: width - 1] + "…"
        out.append(cell.rjust(width) if title in _RIGHT else cell.ljust(width))
    return " ".join(out).rstrip()


def _short(path: str, home: str) -> str:
    """A path for the text, escaped, under ~ when in the home directory."""
    return printable(
        "~" + path[len(home) :] if home and path.startswith(home.rstrip("/") + "/") else path
    )


def header_lines(machine: str, n: int | None = None) -> list[str]:
    what = f"{_count(n, 'model')} on {machine}" if n is not None else f"models on {machine}"
    return [what, "", _line([t for t, _ in _COLS])]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def row_lines(row: Row) -> list[str]:
    cells = _cells(row)
    lines = []
    if len(cells[0]) > _COLS[0][1]:  # a long name gets its own line
        lines.append(cells[0])
        cells[0] = ""
    lines.append(_line(cells))
    if row.mmproj:  # the paired projector: counted in the fit, or why not
        b, line = (
            row.fit.mmproj_bytes,
            f"{'':{_COLS[0][1]}} + {printable(row.mmproj.rsplit('/', 1)[-1])}",
        )
        if b is not None:
            line += f" ({b / MIB:,.0f} MiB counted)"
        elif row.fit.verdict in ("fits", "offload"):
            line += " (not counted: llama-server would refuse it)"
        lines.append(_clip(line))
    return lines


_LEGEND_GPU = [
    "CTX/SLOT: the largest context per slot and its KV type. HERE: fits = every layer",
    "on the GPU; -ngl N / -ncmoe N = the offload it needs; needs N G = one GPU's",
    "memory for a 4k context (every layer, q8_0 KV).",
]
_LEGEND_CPU = [
    "CTX/SLOT: the largest context per slot and its KV type. HERE: fits = the model",
    "and that context fit in free RAM (no GPU: every layer on the CPU); no fit = not",
    "even a 4k context does.",
]
_LEGEND_SPEED = [
    "TOK/S: estimated generation tokens/s, the full context to an empty one (`plan`",
    "shows how; - = a device's bandwidth is unknown).",
]


def footer_lines(listing: Listing, home: str = "", *, gpus: bool = True) -> list[str]:
    """The notes and the legend; `gpus`: whether the machine has GPUs (the legend is worded by
    it)."""
    lines = (
        []
        if listing.rows
        else ["(no GGUF models found; looked in:)"]
        + [_clip(f"  {r.store}: {_short(r.path, home)}") for r in listing.roots]
    )
    lines += ["", *(_LEGEND_GPU if gpus else _LEGEND_CPU), *_LEGEND_SPEED]
    if listing.notes:
        lines += ["", f"{_count(len(listing.notes), 'note')}:"]
        lines += [_note_line(n.code, _short(n.path, home), n.detail) for n in listing.notes]
    return lines


def to_text(listing: Listing, *, machine: str, home: str = "", gpus: bool = True) -> str:
    lines = header_lines(machine, len(listing.rows))
    for row in listing.rows:
        lines += row_lines(row)
    return "\n".join(lines + footer_lines(listing, home, gpus=gpus))


def _clip(line: str, width: int = 80) -> str:
    """One note per line, 80 columns (the JSON carries the whole text)."""
    return line if len(line) <= width else line[: width - 1] + "…"


def _note_line(code: str, path: str, detail: str, width: int = 80) -> str:
    """`  code: …path tail (detail)` in `width` columns: the path loses its head first."""
    tail = f" ({printable(detail)})" if detail else ""
    room = width - len(f"  {code}: ") - len(tail)
    if len(path) > room:
        path = "…" + path[-max(room - 1, 24) :]
    return _clip(f"  {code}: {path}{tail}", width)


def to_json(listing: Listing, *, machine: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": machine,
        "stores": [{"store": r.store, "path": r.path} for r in listing.roots],
        "models": [r.to_json() for r in listing.rows],
        "notes": [
            {"store": n.store, "path": n.path, "code": n.code, "detail": n.detail}
            for n in listing.notes
        ],
    }
