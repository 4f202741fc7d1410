"""`llamafit check` as a function: flags in, breakdown, verdict and ways out back (no I/O here
beyond reading the GGUF header; the host's RAM comes in through `detect_host`)."""

from __future__ import annotations

from ..findings import Notice
from ..fit.ways_out import suggestions
from ..memory.resolve import resolve
from ..report import check as check_report
from .llama_check import compute_notices, llama_cpp_check
from .plan import wrap_lines
from .prepare import prepare, warnings_for
from .prepared import Report, Request


def run_check(request: Request) -> Report:
    """Resolve the user's flags, predict every buffer, and say whether it fits (and if not, how)."""
    p = prepare(request)
    t = p.target
    rc = resolve(p.parsed.config, p.facts, engine=t.engine, build=t.build)
    rc = t.side.main_rc(rc, build=t.build) if t.side else rc
    rc = t.model.settle_flash_attn(rc, t.devices_of(p.parsed.config), t.host)  # -fa auto
    breakdown = t.breakdown(p.parsed.config, rc)
    ways = (
        [] if breakdown.fits else suggestions(t, p.parsed.config, n_ctx=rc.n_ctx, exact=breakdown)
    )
    warnings = warnings_for(p, rc)
    if breakdown.host_pages:  # it fits: only the mapped weights are short of host RAM
        host = breakdown.devices[-1]
        short = {"used_bytes": host.used_bytes, "usable_bytes": host.usable_bytes or 0}
        warnings.append(Notice("host_ram_short", short))
    llama = llama_cpp_check(p, p.parsed.config, rc, breakdown)
    warnings += compute_notices(llama, [g.name for g in t.gpus])
    extra = {
        "llama_build": t.build,
        "unknown_flags": list(p.parsed.unknown),
        "passthrough": list(p.parsed.passthrough),
    }
    data = check_report.to_json(
        p.facts, rc, breakdown, warnings=warnings, ways_out=ways, extra=extra
    )
    text = check_report.to_text(p.facts, rc, breakdown, warnings=warnings, ways_out=ways)
    if p.llama_recorded:  # llama.cpp's earlier estimate for this build, applied (llama_record.py)
        data["llama_cpp_recorded"] = p.llama_recorded
    if llama is not None:  # llama.cpp's own dry run of the same flags (issue #28)
        data["llama_cpp_check"] = llama
        text = "\n".join([text, *wrap_lines(check_report.llama_check_lines(llama))])
    return Report(breakdown.fits, data, text)
