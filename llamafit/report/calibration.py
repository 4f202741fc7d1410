"""`llamafit calibration show`: every scale the calibration file gives plans, and where it came from
(data, then text): compute-buffer scales per setup, generation-speed scales per model family."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..fit.speed_calibration import MIN_GENERATED_TOKENS, MIN_REQUESTS, speed_scales
from ..memory.calibration import (
    _devices_of,
    compute_correction,
    incomplete,
    is_memory_record,
    record_identity,
)
from ..safe_text import printable

SCHEMA = "llamafit.calibration/1"
SKIP_WORDS = {
    "overloaded": "overloaded",
    "load_unknown": "no load recorded",
    "implausible": "implausible",
    "damaged": "damaged",
}


def summary(
    records: Iterable[dict[str, Any]],
    path: str,
    damaged: int = 0,
    older_bytes: int = 0,
    llama_cpp: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per (build, devices, architecture): complete runs, skipped runs and the compute scale a plan
    would use; per (machine, architecture, backend): the speed runs that count, their evidence and
    the speed scale."""
    records = list(records)
    groups: dict[
        tuple[Any, tuple[tuple[str, str], ...], str, str | None], list[dict[str, Any]]
    ] = {}
    for r in records:
        if not is_memory_record(
            r
        ):  # the speed model's records (run_verify.py), failed runs: no memory sizes
            continue
        raw = r.get("server")
        server: dict[str, Any] = raw if isinstance(raw, dict) else {}
        key = (
            server.get("build"),
            tuple(_devices_of(r)),
            str(r.get("architecture")),
            record_identity(r),
        )
        groups.setdefault(key, []).append(r)
    setups = []
    for (build, devices, arch, identity), rs in groups.items():  # one server, one row (issue #28)
        found = compute_correction(
            rs, devices=devices, build=build, architecture=arch, identity=identity
        )
        skipped = sum(1 for r in rs if incomplete(r.get("buffers", []), [n for n, _ in devices]))
        setups.append(
            {
                "build": build,
                "identity": identity,
                "devices": [{"name": n, "backend": b} for n, b in devices],
                "architecture": arch,
                "runs": len(rs) - skipped,
                "skipped_incomplete": skipped,
                "compute_scale": None if found is None else round(found.compute_scale, 4),
            }
        )
    speed = [
        {
            "machine": s.machine,
            "architecture": s.architecture,
            "backend": s.backend,
            "runs": s.runs,
            "requests": s.requests,
            "generated_tokens": s.generated_tokens,
            "median": None if s.median is None else round(s.median, 4),
            "speed_scale": None if s.scale is None else round(s.scale, 4),
            "skipped": dict(sorted(s.skipped.items())),
        }
        for s in speed_scales(records)
    ]
    return {
        "schema": SCHEMA,
        "path": path,
        "setups": setups,
        "speed": speed,
        "damaged_lines": damaged,
        # bytes of the oldest records not read: the file is larger than llamafit reads (16 MiB)
        "older_bytes_not_read": older_bytes,
        # llama.cpp's dry-run answers remembered per build (commands/llama_record.py listed)
        "llama_cpp": llama_cpp or [],
        "speed_needs": {"requests": MIN_REQUESTS, "generated_tokens": MIN_GENERATED_TOKENS},
    }


def _setup_lines(data: dict[str, Any]) -> list[str]:
    """The compute-buffer scales per setup."""
    lines: list[str] = []
    if data["setups"]:
        lines += [
            "Compute buffers (scale: what plans multiply the prediction by)",
            f"  {'build':>6}  {'devices':<18}{'model':<12}{'runs':>5}{'skipped':>8}  scale",
        ]
    for s in data["setups"]:
        devices = ",".join(d["name"] for d in s["devices"]) or "CPU"
        scale = "-" if s["compute_scale"] is None else f"{s['compute_scale']:.3f}"
        build = "-" if s["build"] is None else str(s["build"])
        lines.append(
            f"  {build:>6}  {devices[:17]:<18}{s['architecture'][:11]:<12}{s['runs']:>5}"
            f"{s['skipped_incomplete']:>8}  {scale}"
        )
    return lines


def _speed_lines(data: dict[str, Any]) -> list[str]:
    """The generation-speed scales per model and backend."""
    lines: list[str] = []
    if data.get("speed"):
        need = data["speed_needs"]
        lines += [
            f"Generation speed (scale in use once runs hold {need['requests']} requests and "
            f"{need['generated_tokens']:,} tokens)",
            f"  {'model':<12}{'backend':<9}{'runs':>5}{'requests':>9}{'tokens':>9}"
            f"{'median':>8}  scale",
        ]
        for s in data["speed"]:
            median = "-" if s["median"] is None else f"{s['median']:.3f}"
            scale = "-" if s["speed_scale"] is None else f"{s['speed_scale']:.3f}"
            lines.append(
                f"  {s['architecture'][:11]:<12}{s['backend'][:8]:<9}{s['runs']:>5}"
                f"{s['requests']:>9,}{s['generated_tokens']:>9,}{median:>8}  {scale}"
            )
            if s["skipped"]:
                lines.append(
                    "    not counted: "
                    + ", ".join(f"{n} {SKIP_WORDS.get(k, k)}" for k, n in s["skipped"].items())
                )
    return lines


def _llama_cpp_lines(data: dict[str, Any]) -> list[str]:
    """llama.cpp's remembered estimates per build."""
    lines: list[str] = []
    if data.get("llama_cpp"):
        lines.append(
            "llama.cpp's own estimates remembered (llama-fit-params; plans with its check)"
        )
        for b in data["llama_cpp"]:
            lines.append(f"  {b['build'][:40]}: {len(b['entries'])} entries")
            for e in b["entries"]:
                mib = "-" if e["bytes"] is None else f"{e['bytes'] / (1 << 20):,.1f} MiB"
                model = f" ({e['model_name']})" if e.get("model_name") else ""
                lines.append(f"    {e['device'][:24]:<24} {e['kind']:<13}{mib:>14}{model}"[:80])
    return lines


def to_text(data: dict[str, Any]) -> str:
    if not data["setups"] and not data.get("speed") and not data.get("llama_cpp"):
        return printable(
            f"No calibration recorded yet ({data['path']}); `llamafit run` records each healthy "
            "start."
        )
    lines = [f"Calibration {data['path']}"]
    lines += _setup_lines(data) + _speed_lines(data) + _llama_cpp_lines(data)
    if data.get("damaged_lines"):
        lines.append(f"{data['damaged_lines']} damaged line(s) skipped")
    if data.get("older_bytes_not_read"):
        lines.append(
            f"The oldest {data['older_bytes_not_read']:,} bytes of records are not read (only the "
            "newest 16 MiB are)"
        )
    # names and paths from the records: escaped for the terminal (#37 F8)
    return "\n".join(printable(line) for line in lines)
