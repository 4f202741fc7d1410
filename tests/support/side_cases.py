"""Side-model cases shared by tests/memory/test_side_models.py and
scripts/bench/bench_side_models.py: a launch, llamafit's prediction for it and the real
llama-server's reported buffers, side by side."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from llamafit.commands.prepare import prepare
from llamafit.commands.prepared import ModelRef, Request
from llamafit.fit.search import Target
from llamafit.machine.devices import host
from llamafit.machine.pick import MachineSpec
from llamafit.memory.resolve import resolve
from tests.support import FIXTURES
from tests.support.server_probe import Part, server_log, split_parts

MIB = 1 << 20
HOST = host(64 << 30, 48 << 30)


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # "demo" or a fixture name
    flags: tuple[str, ...]
    # "{mmproj}" in flags: a Gemma 3 4B-shape projector for the 270M (n_embd 640)
    projector: bool = False

    @property
    def side(self) -> str:
        """The side model's part: mmproj, mtp (a draft-mtp context) or draft."""
        if self.projector:
            return "mmproj"
        return "mtp" if "draft-mtp" in self.flags else "draft"


CASES = (
    Case(
        "gemma3-270m draft np1",
        "demo",
        ("-np", "1", "-c", "4096", "-md", "{model}", "--spec-type", "draft-simple"),
    ),
    Case(
        "gemma3-270m draft np4",
        "demo",
        ("-np", "4", "-c", "4096", "-md", "{model}", "--spec-type", "draft-simple"),
    ),
    Case(
        "gemma3-270m draft np4 n7",
        "demo",
        (
            "-np",
            "4",
            "-c",
            "4096",
            "-md",
            "{model}",
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "7",
        ),
    ),
    Case(
        "gemma3-270m draft np1 n15",
        "demo",
        (
            "-np",
            "1",
            "-c",
            "4096",
            "-md",
            "{model}",
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "15",
        ),
    ),
    Case(
        "gemma3-270m mmproj fa on",
        "demo",
        ("-np", "1", "-c", "4096", "--mmproj", "{mmproj}", "-fa", "on"),
        True,
    ),
    Case(
        "gemma3-270m mmproj fa off",
        "demo",
        ("-np", "1", "-c", "4096", "--mmproj", "{mmproj}", "-fa", "off"),
        True,
    ),
    Case(
        "nextn-glm4moe mtp np1",
        "nextn-glm4moe.gguf",
        ("-np", "1", "-c", "1024", "--spec-type", "draft-mtp"),
    ),
    Case(
        "nextn-glm4moe mtp np4",
        "nextn-glm4moe.gguf",
        ("-np", "4", "-c", "4096", "--spec-type", "draft-mtp"),
    ),
)


def model_path(case: Case) -> str:
    if case.model == "demo":
        from llamafit.fetch.demo import demo_model_path

        return str(demo_model_path())
    return str(FIXTURES / case.model)


def projector_path() -> str:
    from tests.support.projector_files import write_gemma3_projector

    path = (
        Path(tempfile.gettempdir())
        / f"llamafit-test-{os.getuid()}"
        / "mmproj-gemma3-4b-shape-640.gguf"
    )
    if not path.exists():  # written aside and renamed: another process never reads half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        write_gemma3_projector(part, projection_dim=640)
        os.replace(part, path)
    return str(path)


def _flags(case: Case, path: str) -> list[str]:
    mmproj = projector_path() if case.projector else ""
    return [f.replace("{model}", path).replace("{mmproj}", mmproj) for f in case.flags]


def predicted(case: Case) -> tuple[dict[str, float], dict[str, float]]:
    """(main context, side model) predicted MiB by kind for the host CPU."""
    path = model_path(case)
    flags = _flags(case, path)
    request = Request(
        ModelRef(path, server_args=tuple(flags)),
        MachineSpec(gpu_spec="cpu", reserve_bytes=0),
        env=dict(os.environ),
    )
    p = prepare(request, host_fn=lambda: HOST)
    t: Target = p.target
    rc = resolve(p.parsed.config, p.facts, engine=t.engine, build=t.build)
    rc = t.side.main_rc(rc, build=t.build) if t.side else rc
    b = t.breakdown(p.parsed.config, rc)
    d = b.devices[-1]
    main = {
        "model": d.weights_bytes / MIB,
        "KV": d.kv_bytes / MIB,
        "compute": d.compute_bytes / MIB,
        "output": d.output_bytes / MIB,
    }
    u = b.side_models[0].devices[-1]
    # the buffer llama-server prints maps the whole draft: the part shared with the target's mapping
    # included
    shared = dict(b.side_models[0].details).get("shared_weights_bytes", 0)
    assert isinstance(shared, int)
    side = {
        "model": (u.weights_bytes + shared) / MIB,
        "KV": u.kv_bytes / MIB,
        "compute": u.compute_bytes / MIB,
        "output": u.output_bytes / MIB,
    }
    return main, side


def reported(binary: str, case: Case) -> tuple[Part, Part]:
    path = model_path(case)
    main, side, proj = split_parts(
        server_log(binary, ["-m", path, *_flags(case, path)], warmup=case.projector)
    )
    return main, proj if case.projector else side


def _model_mib(part: Part, *, mtp_weights: bool) -> float:
    # CPU_REPACK holds repacked copies the header does not describe (the main prediction leaves them
    # out too)
    return part.mib.get("model:CPU_Mapped", part.mib.get("model", 0.0)) if not mtp_weights else 0.0


def run_case(binary: str, case: Case) -> list[tuple[str, str, float, float]]:
    """(part, kind, predicted MiB, reported MiB) rows for the main context and the side model."""
    pred_main, pred_side = predicted(case)
    rep_main, rep_side = reported(binary, case)
    mtp = "draft-mtp" in case.flags
    side = case.side
    rows = []
    for part, pred, rep in (("main", pred_main, rep_main), (side, pred_side, rep_side)):
        for kind in ("model", "KV", "compute", "output"):
            if part == "mmproj" and kind in ("KV", "output"):
                continue
            if kind == "model":
                if (
                    part == "mtp"
                ):  # the NextN weights are in the main model buffer: show the main one's change
                    continue
                value = (
                    rep.mib.get("model", 0.0)
                    if part == "mmproj"
                    else _model_mib(rep, mtp_weights=False)
                )
                if mtp and part == "main":
                    pred = {**pred, "model": pred["model"] + pred_side["model"]}
            else:
                value = rep.mib.get(kind, 0.0)
            rows.append((part, kind, round(pred[kind], 2), value))
    return rows
