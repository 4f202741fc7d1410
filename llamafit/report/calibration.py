"""`llamafit calibration show`: what the calibration file holds, one row per setup (data, then text)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..memory.calibration import _devices_of, compute_correction, incomplete, record_identity

SCHEMA = "llamafit.calibration/1"


def summary(records: Iterable[dict[str, Any]], path: str) -> dict[str, Any]:
    """Per (build, devices, architecture): complete runs, skipped runs and the compute scale a plan would use."""
    groups: dict[tuple[Any, tuple[tuple[str, str], ...], str, str | None], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") in ("verify", "serve"):  # the speed model's records (run_verify.py): no memory sizes
            continue
        raw = r.get("server")
        server: dict[str, Any] = raw if isinstance(raw, dict) else {}
        key = (server.get("build"), tuple(_devices_of(r)), str(r.get("architecture")), record_identity(r))
        groups.setdefault(key, []).append(r)
    setups = []
    for (build, devices, arch, identity), rs in groups.items():  # one server, one row (issue #28)
        found = compute_correction(rs, devices=devices, build=build, architecture=arch, identity=identity)
        skipped = sum(1 for r in rs if incomplete(r.get("buffers", []), [n for n, _ in devices]))
        setups.append({"build": build, "identity": identity, "devices": [{"name": n, "backend": b} for n, b in devices],
                       "architecture": arch, "runs": len(rs) - skipped, "skipped_incomplete": skipped,
                       "compute_scale": None if found is None else round(found.compute_scale, 4)})  # fmt: skip
    return {"schema": SCHEMA, "path": path, "setups": setups}


def to_text(data: dict[str, Any]) -> str:
    if not data["setups"]:
        return f"No calibration recorded yet ({data['path']}); `llamafit run` records each healthy start."
    head = f"  {'build':>6}  {'devices':<18}{'model':<12}{'runs':>5}{'skipped':>8}  scale"
    lines = [f"Calibration {data['path']}", head]
    for s in data["setups"]:
        devices = ",".join(d["name"] for d in s["devices"]) or "CPU"
        scale = "-" if s["compute_scale"] is None else f"{s['compute_scale']:.3f}"
        build = "-" if s["build"] is None else str(s["build"])
        lines.append(f"  {build:>6}  {devices[:17]:<18}{s['architecture'][:11]:<12}{s['runs']:>5}"
                     f"{s['skipped_incomplete']:>8}  {scale}")  # fmt: skip
    return "\n".join(lines)
