"""The decode model of issue #35: a fixed cost per layer on top of the reads, an efficiency per
backend and memory class, the range's band per backend, and calibration narrowing it."""

from __future__ import annotations

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.speed import (
    EFFICIENCY,
    Efficiency,
    SpeedInputs,
    efficiency_key,
    estimate,
    generation_range_at,
    token_seconds,
)
from llamafit.fit.speed_calibration import calibrate, speed_scales
from llamafit.machine.devices import DeviceSpec
from llamafit.machine.rates import Rate
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.placement import layer_map
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from tests.fit.test_speed import record
from tests.support import FIXTURES

MODEL = MemoryModel(build_facts(read_model(str(FIXTURES / "dense-llama.gguf"))))
GPU = DeviceSpec("CUDA0", "gpu", "cuda", 24 << 30, 24 << 30)
N_ALL = MODEL.facts.n_layer_all


def test_token_seconds_is_the_reads_plus_the_layers_fixed_cost() -> None:
    eff = Efficiency(0.5, 1.0, "t", layer_seconds=100e-6)
    assert token_seconds(1e9, 32, 1e12, eff) == pytest.approx(1e9 / 0.5e12 + 32 * 100e-6)
    assert token_seconds(1e9, 0, 1e12, eff) == pytest.approx(2e-3)


@pytest.mark.parametrize(
    ("backend", "memory", "key"),
    [
        ("cuda", "gddr", "cuda"),
        ("cuda", "hbm", "cuda-hbm"),
        ("cuda", None, "cuda"),
        ("rocm", "hbm", "rocm-hbm"),
        ("metal", "unified", "metal"),  # Metal's own entry is unified memory
        ("vulkan", "host", "vulkan"),  # lavapipe: no entry of its own
        ("cuda", "unified", "cuda-unified"),  # GB10
        ("rocm", "unified", "rocm"),  # Strix Halo under ROCm: no entry of its own
        ("cpu", None, "cpu"),
        ("sycl", None, "vulkan"),  # a backend without an entry
    ],
)
def test_efficiency_key(backend: str, memory: str | None, key: str) -> None:
    assert efficiency_key(EFFICIENCY, backend, memory) == key


def _gpu_inputs(memory: str | None, bandwidth: float = 1e12) -> SpeedInputs:
    return SpeedInputs(
        (Rate(bandwidth, "t"),), (None,), Rate(50e9, "t"), Rate(200e9, "t"), gpu_memory=(memory,)
    )


@pytest.mark.parametrize("memory", ["gddr", "hbm", None])
def test_each_gpu_layer_adds_its_backends_fixed_cost(memory: str | None) -> None:
    rc = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=N_ALL + 1), MODEL.facts, engine="llama-server"
    )
    lmap = layer_map(N_ALL, N_ALL + 1, (1.0,))
    est = estimate(MODEL, rc, lmap, (GPU,), _gpu_inputs(memory))
    assert est is not None
    eff = EFFICIENCY["cuda-hbm" if memory == "hbm" else "cuda"]
    d = est.devices[0]
    assert d.fixed_seconds == pytest.approx(N_ALL * eff.layer_seconds)
    reads = (d.weight_bytes + d.kv_bytes_empty) / (1e12 * eff.generation)
    assert d.seconds[0] == pytest.approx(reads + N_ALL * eff.layer_seconds)
    assert (d.efficiency, d.band, est.band) == (eff.generation, eff.band, eff.band)


def test_the_range_at_a_fill_is_the_estimate_with_the_band_around_it() -> None:
    rc = resolve(
        LaunchConfig(n_ctx=4096, n_gpu_layers=N_ALL + 1), MODEL.facts, engine="llama-server"
    )
    lmap = layer_map(N_ALL, N_ALL + 1, (1.0,))
    got = generation_range_at(MODEL, rc, (GPU,), _gpu_inputs("gddr"), 1024, lmap)
    assert got is not None
    low, mid, high = got
    band = EFFICIENCY["cuda"].band
    assert (low, high) == pytest.approx((mid * (1 - band), mid * (1 + band)))


def _run(ratio: float) -> dict[str, object]:
    """A CUDA run here with enough evidence, measured / estimated = ratio."""
    return record(measured=10 * ratio, estimated=10.0, backend="cuda")


@pytest.mark.parametrize(
    ("ratios", "scale", "band"),
    [
        ([0.8], 0.8, None),  # one run: no spread measured, the band stays
        ([0.8, 0.84, 0.76], 0.8, 0.1),  # three runs within 5%: the floor, 10%
        ([0.8, 0.92, 0.68], 0.8, 0.15),  # within 15%
        ([0.8, 1.2, 0.5], 0.8, None),  # wider than the uncalibrated band: that one
    ],
)
def test_runs_here_scale_every_memory_class_of_the_backend_and_narrow_its_band(
    ratios: list[float], scale: float, band: float | None
) -> None:
    base = _gpu_inputs("hbm")
    out = calibrate(base, [_run(r) for r in ratios], machine="m", architecture="llama")
    for key in ("cuda", "cuda-hbm"):
        eff = out.efficiency_for("cuda", "hbm" if key.endswith("hbm") else None)
        kept = EFFICIENCY[key]
        assert eff.generation == pytest.approx(kept.generation * scale)
        assert eff.layer_seconds == pytest.approx(kept.layer_seconds / scale)
        assert eff.band == pytest.approx(kept.band if band is None else band)
    assert out.efficiency_for("metal") == EFFICIENCY["metal"]  # another backend: untouched


def test_the_spread_needs_three_runs() -> None:
    (two,) = speed_scales([_run(0.8), _run(0.9)])
    (three,) = speed_scales([_run(0.8), _run(0.9), _run(1.0)])
    assert two.spread is None
    assert three.spread == pytest.approx(0.1 / 0.9)
