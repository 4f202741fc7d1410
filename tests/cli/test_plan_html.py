"""`plan --html FILE` (issue #25): one self-contained page whose numbers read back as plan --json's,
and that headless chromium renders to a picture that is not blank."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import QWEN


class Marks(HTMLParser):
    """Every element's attributes, in order, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def write_page(path: Path, *args: str) -> tuple[dict, str]:
    result = CliRunner().invoke(cli, ["plan", str(QWEN), *args, "--html", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), path.read_text()


def test_the_page_reads_back_as_the_json(tmp_path: Path, fixed_host) -> None:
    """rtx4080: 7,168 tokens per slot at -ngl 52 with q4_0 K and V, 13 layers on the CPU."""
    data, page = write_page(tmp_path / "plan.html", "--gpu", "rtx4080")
    marks = Marks()
    marks.feed(page)
    el = marks.elements
    # memory: every number of every device, in the table and in the bar
    cells = {(row["data-device"], a["data-key"]): a["data-bytes"] for row, a in _rows(el)}
    for d in data["devices"]:
        for key in (
            "usable_bytes",
            "weights_bytes",
            "kv_bytes",
            "compute_bytes",
            "reserve_bytes",
            "used_bytes",
        ):
            assert cells[(d["name"], key)] == str(d[key])
    bars = [a for tag, a in el if tag == "rect" and "data-part" in a]
    gpu = data["devices"][0]
    assert [(a["data-part"], int(a["data-bytes"] or 0)) for a in bars[:5]] == [
        ("weights", gpu["weights_bytes"]),
        ("KV", gpu["kv_bytes"] + gpu["recurrent_bytes"]),
        ("compute", gpu["compute_bytes"] + gpu["output_bytes"]),
        ("reserve", gpu["reserve_bytes"]),
        ("free", gpu["free_after_bytes"]),
    ]
    context = next(a for tag, a in el if a.get("id") == "context")
    assert context["data-value"] == str(data["context_per_slot"]) == "7424"
    # the context curves pass through the pick: q4_0/q4_0 at -ngl 52 reaches 7,424
    points = {(a["data-series"], a["data-x"]): a["data-y"] for tag, a in el if tag == "circle"}
    assert points[("q4_0/q4_0 fa on", "52")] == "7424"
    for t in data["tradeoffs"]:  # each K/V curve at the pick's -ngl is its trade-off row
        if t["flash_attn"] == "on":
            assert points[(f"{t['type_k']}/{t['type_v']} fa on", "52")] == str(t["max_ctx"])
    # none fits
    assert points[("q4_0/q4_0 fa on", "0")] == "32768" and ("f16/f16 fa on", "59") not in points
    # speed: the band's numbers, and the curve starts at the empty context's estimate
    speed = data["speed"]
    rows = {
        a["data-key"]: [float(b["data-value"]) for _, b in _cells(el, a)]
        for tag, a in el
        if tag == "tr" and a.get("data-key")
    }
    assert rows["generation_tps_full"] == speed["generation_tps_full"]
    assert rows["generation_tps_empty"] == speed["generation_tps_empty"]
    assert rows["prompt_tps_band"] == speed["prompt_tps_band"]
    assert rows["turn_seconds"] == speed["turn"]["seconds"]
    assert float(points[("estimate", "0")]) == speed["generation_tps"][1]
    # the command, ready to copy
    assert " ".join(data["command"]) in page.replace("&#x27;", "'")
    # self-contained: no scripts, nothing fetched
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert not [a for _, a in el if a.get("src") or a.get("href")]


def _rows(el: list[tuple[str, dict[str, str | None]]]) -> list[tuple[dict, dict]]:
    """(the row's attributes, a cell's attributes) for each cell of a row with data-device."""
    out, row = [], None
    for tag, a in el:
        if tag == "tr":
            row = a if a.get("data-device") else None
        elif tag == "td" and row is not None and "data-key" in a:
            out.append((row, a))
    return out


def _cells(el: list[tuple[str, dict[str, str | None]]], row: dict) -> list[tuple[str, dict]]:
    i = next(i for i, (_, a) in enumerate(el) if a is row)
    out = []
    for tag, a in el[i + 1 :]:
        if tag == "tr":
            break
        if tag == "td":
            out.append((tag, a))
    return out


def test_a_symlink_in_its_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("keep")
    (tmp_path / "plan.html").symlink_to(tmp_path / "elsewhere")
    result = CliRunner().invoke(
        cli, ["plan", str(QWEN), "--gpu", "24GiB", "--html", str(tmp_path / "plan.html")]
    )
    assert result.exit_code == 2
    assert result.stderr == f"Error: --html {tmp_path / 'plan.html'}: is a symbolic link\n"
    assert (tmp_path / "elsewhere").read_text() == "keep"


def _chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, unfiltered."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos : pos + 8])
        body = png[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                if pa <= pb and pa <= pc:
                    pred = a
                else:
                    pred = b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


@pytest.mark.slow  # starts a browser
def test_chromium_renders_the_page(tmp_path: Path, fixed_host) -> None:
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    _, page = write_page(tmp_path / "plan.html", "--gpu", "rtx4080")
    shot = tmp_path / "plan.png"
    profile = tempfile.mkdtemp(dir=tmp_path)
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1000,1400",
            (tmp_path / "plan.html").as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    width, height, rows = _pixels(shot.read_bytes())
    assert (width, height) == (1000, 1400)
    bpp = len(rows[0]) // width
    pixels = [row[i : i + 3] for row in rows for i in range(0, len(row), bpp)]
    colours = set(pixels)
    dark = sum(1 for p in pixels if sum(p) < 200)
    assert len(colours) > 50 and dark > 1000  # text, bars and curves, not a blank page
    # the memory bar's weights colour (#4c72b0) is on the page
    assert bytes([0x4C, 0x72, 0xB0]) in colours


class Ticks(HTMLParser):
    """Each chart's tick labels: {(chart id, "x" or "y"): [label, …]}."""

    def __init__(self) -> None:
        super().__init__()
        self.chart, self.axis = "", None
        self.ticks: dict[tuple[str, str], list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.chart = a.get("id") or ""
        self.axis = a.get("data-tick") if tag == "text" else None

    def handle_data(self, data: str) -> None:
        if self.axis:
            self.ticks.setdefault((self.chart, self.axis), []).append(data)
            self.axis = None


def test_axis_ticks_are_round_and_the_page_is_said_to_be_written(
    tmp_path: Path, fixed_host
) -> None:
    """Ticks at 1, 2 or 5 times a power of ten (they fell at 6,554 / 13,107 tokens and 11 / 15
    layers), and a line that says where the page went (on stderr: --json stays parseable)."""
    page = tmp_path / "plan.html"
    result = CliRunner().invoke(cli, ["plan", str(QWEN), "--gpu", "rtx4080", "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"Wrote      {page}\n"
    ticks = Ticks()
    ticks.feed(page.read_text())
    # 65 layers, 32,768 tokens
    assert ticks.ticks[("context-by-layers", "x")] == ["0", "20", "40", "60"]
    assert ticks.ticks[("context-by-layers", "y")] == ["0", "10,000", "20,000", "30,000"]
    for labels in ticks.ticks.values():
        values = [float(v.replace(",", "")) for v in labels]
        step = values[1] - values[0]
        assert values == [pytest.approx(i * step) for i in range(len(values))]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 9) in (1, 2, 5), labels


@pytest.mark.parametrize(
    ("hi", "ticks"),
    [
        (32768, [0, 10_000, 20_000, 30_000]),
        (65, [0, 20, 40, 60]),
        (11, [0, 5, 10]),
        (15, [0, 5, 10, 15]),
        (3, [0, 1, 2, 3]),
        (100, [0, 20, 40, 60, 80, 100]),
        (0.37, [0, 0.1, 0.2, 0.3]),
        (0, [0]),
    ],
)
def test_ticks_step_by_one_two_or_five(hi: float, ticks: list[float]) -> None:
    from llamafit.report.html import _ticks

    assert _ticks(hi) == ticks
