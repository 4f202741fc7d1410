"""The speed model's pure parts: the CPU's arithmetic bound, calibration from verified runs, the probe's cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from llamafit.memory.config import LaunchConfig
from llamafit.facts.hparams import build_facts
from llamafit.reader.model import read_model
from llamafit.memory.model import MemoryModel
from llamafit.memory.placement import layer_map
from llamafit.memory.resolve import resolve
from llamafit.fit.speed import Efficiency, Rate, SpeedInputs, estimate
from llamafit.fit.speed_calibration import calibrate

MODEL = MemoryModel(build_facts(read_model(str(FIXTURES / "dense-llama.gguf"))))
RC = resolve(LaunchConfig(n_ctx=4096), MODEL.facts, engine="llama-server")
LMAP = layer_map(MODEL.facts.n_layer_all, 0, ())


def cpu(bw: float, flops: float, decode: float | None = None, attention: float | None = None) -> SpeedInputs:
    eff = {"cpu": Efficiency(1.0, 1.0, "test", decode, attention)}
    return SpeedInputs((), (), Rate(bw, "test"), Rate(flops, "test"), efficiency=eff)


def test_cpu_token_time_is_the_slower_of_memory_and_arithmetic_plus_attention() -> None:
    memory_only = estimate(MODEL, RC, LMAP, (), cpu(1e9, 1e12))
    assert memory_only is not None
    d = memory_only.devices[0]
    assert d.bound == "memory" and d.seconds[0] == (d.weight_bytes + d.kv_bytes_empty) / 1e9
    slow = estimate(MODEL, RC, LMAP, (), cpu(1e12, 1e6, decode=1.0, attention=1.0))  # 1 MFLOP/s: arithmetic wins
    assert slow is not None and slow.devices[0].bound == "compute"
    flops = slow.flops_per_token
    facts = MODEL.facts
    attn_cell = sum(2 * facts.n_head[il] * (facts.n_embd_head_k + facts.n_embd_head_v) for il in range(facts.n_layer))
    assert slow.devices[0].seconds == pytest.approx((flops / 1e6 + attn_cell * 256 / 1e6,
                                                     flops / 1e6 + attn_cell * 4096 / 1e6), rel=1e-12)  # fmt: skip


def record(machine: str = "m", arch: str = "llama", measured: object = 10.0, estimated: object = 20.0,
           backend: object = "cpu", kind: str = "verify") -> dict[str, object]:  # fmt: skip
    return {"kind": kind, "speed": {"machine": machine, "architecture": arch, "backend": backend,
                                    "generation_tps": measured, "estimated_generation_tps": estimated,
                                    "efficiency": 0.7}}  # fmt: skip


@pytest.mark.parametrize("records, scale, runs", [
    ([record()], 0.5, 1),
    ([record(), record(measured=30.0), record(measured=40.0)], 1.5, 3),  # the median of 0.5, 1.5, 2.0
    ([record(machine="other")], None, 0),  # another machine
    ([record(arch="qwen2")], None, 0),  # another model family
    ([record(kind="load")], None, 0),  # not a verified run
    ([record(measured="fast")], None, 0),  # wrong JSON types are skipped, not fatal
    ([record(estimated=0)], None, 0),
    ([record(backend=["cpu"])], None, 0),
    ([record(measured=1e-9)], None, 0),  # a ratio no machine explains
    ([{"kind": "verify", "speed": "x"}, record()], 0.5, 1),
])  # fmt: skip
def test_calibration_scales_the_slowest_backend_by_measured_over_estimated(records, scale, runs) -> None:  # type: ignore[no-untyped-def]
    base = cpu(1e9, 1e9, decode=0.5, attention=0.1)
    out = calibrate(base, records, machine="m", architecture="llama")
    eff = out.efficiency_for("cpu")
    if scale is None:
        assert out is base and out.calibrated is None
        return
    assert (eff.generation, eff.decode, eff.attention) == pytest.approx((1.0 * scale, 0.5 * scale, 0.1 * scale))
    assert (
        out.calibrated
        == f"cpu generation speed x {scale:.2f}, measured by {runs} verified run(s) of llama on this machine"
    )


def test_host_probe_cache_is_used_and_bad_caches_are_remeasured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.machine import host_probe

    calls = []
    monkeypatch.setattr(host_probe, "measure_bandwidth", lambda n=None: calls.append("bw") or 12e9)
    monkeypatch.setattr(host_probe, "measure_flops", lambda: calls.append("flops") or 34e9)
    bw, flops = host_probe.host_rates({}, tmp_path)
    assert (bw.value, flops.value, calls) == (12e9, 34e9, ["bw", "flops"])
    assert host_probe.host_rates({}, tmp_path)[0].value == 12e9 and len(calls) == 2  # cached
    for junk in ("[1, 2]", '{"schema": "llamafit.host-probe/1", "bandwidth_bytes_per_s": "x"}', "\x00" * 5000):
        (tmp_path / "host-probe.json").write_text(junk)
        host_probe.host_rates({}, tmp_path)
    assert len(calls) == 8  # each junk cache measured again, never trusted
    env = {"LLAMAFIT_HOST_BANDWIDTH": "51.2e9", "LLAMAFIT_HOST_FLOPS": "1e12"}
    bw, flops = host_probe.host_rates(env, tmp_path)
    assert (bw, flops) == (Rate(51.2e9, "$LLAMAFIT_HOST_BANDWIDTH"), Rate(1e12, "$LLAMAFIT_HOST_FLOPS"))
    assert json.loads((tmp_path / "host-probe.json").read_text())["bandwidth_bytes_per_s"] == 12e9
