"""`plan --html FILE`: the plan as one self-contained page (inline SVG and CSS; no scripts, no
network).

Sections: the verdict and the command (ready to copy); each device's memory as a stacked bar with
its numbers (the same parts as the terminal's bars.py); the largest context against the layers on
the GPU, one curve per K/V type; generation speed against the context filled, with its band. Every
number comes from `plan --json` (`data`) and commands/plan_curves.py (`curves`); each drawn mark
carries its number in a data- attribute, so a test can read the page back.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from html import escape as _html_escape
from typing import Any

from ..safe_text import printable


def escape(text: str) -> str:
    """Text for the page: control characters escaped as on the terminal (a device name or model
    name with an escape sequence: #37 F8), then HTML-escaped (`<script>` is text)."""
    return _html_escape(printable(text))


_PARTS = (
    ("weights", "#4c72b0", ("weights_bytes",)),
    ("KV", "#b04ca6", ("kv_bytes", "recurrent_bytes")),
    ("compute", "#d9a521", ("compute_bytes", "output_bytes")),
    ("reserve", "#9a9a9a", ("reserve_bytes", "overhead_bytes")),
)
_FREE = "#e8efe8"
_SERIES = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
# the page's charts: width, height, left margin, legend column
_W, _H, _PAD, _LEGEND = (
    900,
    300,
    60,
    170,
)


def _mib(n: int | float) -> str:
    return f"{n / 2**20:,.0f}"


def _num(x: float) -> str:
    return f"{x:,.1f}" if x < 10 and not float(x).is_integer() else f"{x:,.0f}"


def _device_bar(d: dict[str, Any], width: int = _W - _PAD - 160) -> str:
    """One device: an SVG stacked bar over its usable memory (or what is used, when that is
    more)."""
    parts = [(name, colour, sum(int(d.get(k) or 0) for k in keys)) for name, colour, keys in _PARTS]
    parts[0] = (parts[0][0], parts[0][1], parts[0][2] + int(d.get("side_bytes") or 0))
    used = sum(n for _, _, n in parts)
    usable = d.get("usable_bytes")
    span = max(used, usable or 0) or 1
    x, rects = 0.0, []
    for name, colour, n in [*parts, ("free", _FREE, max((usable or 0) - used, 0))]:
        w = n / span * width
        rects.append(
            f'<rect x="{_PAD + x:.2f}" y="8" width="{w:.2f}" height="28" fill="{colour}" '
            f'data-part="{name}" data-bytes="{n}"><title>{name}: {_mib(n)} MiB</title></rect>'
        )
        x += w
    size = f"{_mib(used)} of {_mib(usable)} MiB" if usable is not None else f"{_mib(used)} MiB"
    return (
        f'<svg class="bar" width="{_W}" height="44" role="img" aria-label="{escape(d["name"])} '
        f'memory"><text x="0" y="27" font-size="13">{escape(d["name"])}</text>{"".join(rects)}'
        f'<text x="{_PAD + width + 6}" y="27" font-size="11">{size}</text></svg>'
    )


def _memory_table(devices: Sequence[dict[str, Any]]) -> str:
    keys = (
        "usable_bytes",
        "weights_bytes",
        "kv_bytes",
        "recurrent_bytes",
        "compute_bytes",
        "output_bytes",
        "reserve_bytes",
        "overhead_bytes",
        "side_bytes",  # a draft model, the MTP context, the projector: in used, no other column
        "used_bytes",
        "free_after_bytes",
    )
    head = "".join(f"<th>{escape(k.removesuffix('_bytes').replace('_', ' '))}</th>" for k in keys)
    rows = []
    for d in devices:
        cells = "".join(
            f'<td data-key="{k}" data-bytes="{"" if d.get(k) is None else d[k]}">'
            f"{'-' if d.get(k) is None else _mib(d[k])}</td>"
            for k in keys
        )
        rows.append(
            f'<tr data-device="{escape(d["name"])}"><th>{escape(d["name"])}</th>{cells}</tr>'
        )
    return f'<table id="memory"><tr><th>MiB</th>{head}</tr>{"".join(rows)}</table>'


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Any:
    span = (hi - lo) or 1.0
    return lambda v: out_lo + (v - lo) / span * (out_hi - out_lo)


def _ticks(hi: float, n: int = 5) -> list[float]:
    """Ticks from 0 up to `hi` at a round step, 1, 2 or 5 times a power of ten, the smallest that
    makes at most n steps: 0, 10,000, 20,000, 30,000 on a 32,768-token axis (never 6,554 and
    13,107), 0, 20, 40, 60 for 65 layers."""
    if hi <= 0:
        return [0.0]
    raw = hi / n
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-12))
    return [round(i * step, 12) for i in range(int(hi / step + 1e-9) + 1)]


def _tick_label(t: float, ticks: Sequence[float]) -> str:
    """A tick's number with the decimals its step needs (0.05 steps: 0.05, 0.10…)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{t:,.{decimals}f}"


def _chart(
    chart_id: str,
    series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    x_label: str,
    y_label: str,
    band: Sequence[tuple[float, float, float]] = (),
    x_max: float | None = None,
) -> str:
    """A line chart: each series a polyline with a circle per point (data-x, data-y), an optional
    band (x, low, high) under them, axes from 0 (x to `x_max` when given) with five ticks each, the
    legend to the right of the plot."""
    xs = (
        [x for _, _, pts in series for x, _ in pts]
        + [b[0] for b in band]
        + ([x_max] if x_max else [])
    )
    ys = [y for _, _, pts in series for _, y in pts] + [b[2] for b in band]
    if not xs or not ys:
        return ""
    right = _W - _LEGEND
    sx = _scale(0, max(xs) or 1, _PAD, right)
    sy = _scale(0, (max(ys) or 1) * 1.05, _H - 40, 10)
    out = [
        f'<svg id="{chart_id}" width="{_W}" height="{_H + 30}" role="img" '
        f'aria-label="{escape(y_label)}">'
    ]
    out.append(f'<line x1="{_PAD}" y1="{_H - 40}" x2="{right}" y2="{_H - 40}" stroke="#333"/>')
    out.append(f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_H - 40}" stroke="#333"/>')
    x_ticks, y_ticks = _ticks(max(xs) or 1), _ticks(float(max(ys) or 1))
    for t in x_ticks:
        out.append(
            f'<text x="{sx(t):.1f}" y="{_H - 22}" font-size="11" text-anchor="middle" '
            f'data-tick="x">{_tick_label(t, x_ticks)}</text>'
        )
    for t in y_ticks:
        out.append(
            f'<text x="{_PAD - 6}" y="{sy(t) + 4:.1f}" font-size="11" '
            f'text-anchor="end" data-tick="y">{_tick_label(t, y_ticks)}</text><line x1="{_PAD}" '
            f'y1="{sy(t):.1f}" x2="{right}" y2="{sy(t):.1f}" stroke="#ddd"/>'
        )
    out.append(
        f'<text x="{(_PAD + right) / 2}" y="{_H - 4}" font-size="12" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(
        f'<text x="12" y="{_H / 2}" font-size="12" transform="rotate(-90 12 {_H / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    if band:
        upper = " ".join(f"{sx(x):.1f},{sy(h):.1f}" for x, _, h in band)
        lower = " ".join(f"{sx(x):.1f},{sy(lo):.1f}" for x, lo, _ in reversed(band))
        out.append(
            f'<polygon points="{upper} {lower}" fill="#4c72b0" fill-opacity="0.18" data-band="1"/>'
        )
    for i, (name, colour, pts) in enumerate(series):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        out += [
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{colour}" '
            f'data-series="{escape(name)}" data-x="{x:g}" data-y="{y:g}"/>'
            for x, y in pts
        ]
        out.append(
            f'<rect x="{right + 16}" y="{16 + 18 * i}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{right + 34}" y="{26 + 18 * i}" font-size="12">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _speed_table(speed: dict[str, Any] | None) -> str:
    if not speed:
        return "<p>No speed estimate: a device's bandwidth is unknown.</p>"
    rows = [
        ("generation, full context", "generation_tps_full"),
        ("generation, empty context", "generation_tps_empty"),
        ("prompt (pp512)", "prompt_tps_band"),
    ]
    out = ['<table id="speed"><tr><th></th><th>low</th><th>high</th></tr>']
    for label, key in rows:
        pair = speed.get(key)
        if pair:
            out.append(
                f'<tr data-key="{key}"><th>{label} (tokens/s)</th><td '
                f'data-value="{pair[0]}">{_num(pair[0])}</td><td data-value="{pair[1]}">'
                f"{_num(pair[1])}</td></tr>"
            )
    turn = speed.get("turn")
    if turn and turn.get("seconds"):
        s = turn["seconds"]
        out.append(
            f'<tr data-key="turn_seconds"><th>one turn: {turn["prompt"]:,} tokens in, '
            f"{turn['generated']:,} out, {turn['context']:,} already in the context (s)</th><td "
            f'data-value="{s[0]}">{s[0]:.1f}</td><td data-value="{s[1]}">{s[1]:.1f}</td></tr>'
        )
    out.append("</table>")
    sources = "".join(
        f"<li>{escape(d['device'])}: {d['bandwidth_bytes_per_s'] / 1e9:,.1f} GB/s "
        f"({escape(d['bandwidth_source'])}) x {d['efficiency']}</li>"
        for d in speed["inputs"]["devices"]
    )
    return "".join(out) + f"<ul>{sources}</ul>"


_CSS = """body{font-family:system-ui,sans-serif;margin:24px;max-width:960px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}pre{background:#f4f4f4;padding:10px;white-space:pre-wrap;
user-select:all}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.verdict{font-size:15px}"""


def plan_page(data: dict[str, Any], curves: dict[str, Any]) -> str:
    """The page for one plan (`data`: plan --json's object)."""
    model = data["model"]
    title = f"llamafit plan: {model.get('name') or model['path']}"
    command = " ".join(shlex.quote(a) for a in data["command"]) or "(nothing fits)"
    legend = "".join(f'<span style="background:{c}"></span>{n}' for n, c, _ in _PARTS)
    legend += f'<span style="background:{_FREE}"></span>free'
    layers = [
        (
            f"{s['type_k']}/{s['type_v']} fa {s['flash_attn']}",
            _SERIES[i % len(_SERIES)],
            [(k, ctx) for k, ctx in s["points"] if ctx is not None],
        )
        for i, s in enumerate(curves.get("context_by_layers", []))
    ]
    speed_pts = curves.get("speed_by_context", [])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="verdict" id="verdict">{escape(data["verdict"]["text"])}</p>',
        f"<p>{escape(model['architecture'])}, {escape(model['file_type'])}, trained "
        f'{model["n_ctx_train"]:,} tokens; context per slot <b id="context" data-value="'
        f'{data["context_per_slot"] or ""}">{data["context_per_slot"] or 0:,}</b></p>',
        "<h2>Command</h2>",
        f'<pre id="command">{escape(command)}</pre>',
        "<h2>Memory per device</h2>",
        f'<p class="legend">{legend}</p>',
        *(_device_bar(d) for d in data["devices"]),
        _memory_table(data["devices"])
        if data["devices"]
        else "<p>Nothing fits: the verdict says what would.</p>",
    ]
    if layers:
        parts += [
            "<h2>Context against layers on the GPU</h2>",
            _chart(
                "context-by-layers",
                layers,
                "layers on the GPU (-ngl)",
                "largest context per slot",
                x_max=model["n_layer_all"] + 1,
            ),
        ]
    if speed_pts:
        parts += [
            "<h2>Generation speed against the context filled</h2>",
            _chart(
                "speed-by-context",
                [("estimate", "#4c72b0", [(p[0], p[2]) for p in speed_pts])],
                "tokens in the context",
                "tokens/s",
                band=[(p[0], p[1], p[3]) for p in speed_pts],
            ),
        ]
    parts += ["<h2>Speed</h2>", _speed_table(data.get("speed"))]
    warnings = "".join(f"<li>{escape(w['text'])}</li>" for w in data.get("warnings", []))
    if warnings:
        parts += ["<h2>Notes</h2>", f"<ul>{warnings}</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
