"""The buffer of Gemma 3n's and Gemma 4's per-layer token rows (per_layer_token_embd) in the graph
replay, by build and backend. Before rules gemma3n_ple_expand / gemma4_ple_expand (b8739) the
rows sit with the output layer (LLM_TENSOR_LAYER_OUTPUT in src/llama-arch.cpp of llama-cpp-python
0.3.16, 0.3.17, 0.3.20), but llama_model_loader's select_weight_buft (weight_buft_supported
probes them with GGML_OP_GET_ROWS) passes over a device whose supports_op refuses that GET_ROWS:
CUDA at those builds takes no K-quant rows (ggml-cuda.cu), so Q5_K rows fall to the host and
their GET_ROWS runs where the scheduler puts it. The replay's buffer for them is the one
weights.ple_device gives (model._device_placement). Stand-ins: fixtures/shapes gemma4-e2b-kvw
(the b8700 log's E2B, Q5_K rows) and gemma3n-e2b, with Q8_0 or Q5_K rows, full offload, 4096
cells, one sequence."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel, _device_placement
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from tests.support.scripts import script

make_shapes = script("make_shapes")
ROWS = "per_layer_token_embd.weight"
ROWS_OT = (("per_layer_token_embd", "CPU"),)
DEVICE = {"cuda": "CUDA0", "metal": "MTL0", "vulkan": "Vulkan0"}
_MODELS: dict[tuple[str, str], MemoryModel] = {}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ple-graph-shapes")


def _model(shapes: Path, key: str, rows: str) -> MemoryModel:
    hit = _MODELS.get((key, rows))
    if hit is None:
        specs = make_shapes.load_specs()
        name = f"{key}-{rows.lower()}-rows"
        specs[name] = {**specs[key], "key": name, "tensor_types": {ROWS: rows}}
        path = make_shapes.write_shape(name, shapes, specs)
        hit = _MODELS[(key, rows)] = MemoryModel(build_facts(read_model(path)))
    return hit


def _estimate(
    mm: MemoryModel, backend: str, build: int, ot: tuple[tuple[str, str], ...] = ()
) -> tuple[tuple[int, ...], str, tuple[tuple[str, str], ...]]:
    """The compute buffers (the GPU's, the host's), their source and the replay's per-tensor
    buffers (DevicePlacement.overrides) at full offload."""
    cfg = LaunchConfig(n_ctx=4096, n_parallel=1, n_gpu_layers=99, fit=False, override_tensor=ot)
    rc = resolve(cfg, mm.facts, build=build)
    gpus = [DeviceSpec(DEVICE[backend], "gpu", backend)]
    bd = mm.estimate(rc, gpus, host(64 << 30, 64 << 30), reserve_bytes=0)
    placement = _device_placement(mm, rc, bd.layer_devices, gpus, frozenset(), ())
    sources = {d.compute_source for d in bd.devices}
    assert len(sources) == 1
    return tuple(d.compute_bytes for d in bd.devices), sources.pop(), placement.overrides


ON_HOST = ((ROWS, "CPU_Mapped"),)
G4, G3N = "gemma4-e2b-kvw", "gemma3n-e2b"
# (stand-in, rows, backend, build) -> (GPU compute, host compute), source, per-tensor buffers
CASES = [
    # CUDA before the rule: Q8_0 rows on the GPU with the output layer, Q5_K rows on the host
    (G4, "Q8_0", "cuda", 8683, (553_670_656, 16_801_792), "graph", ()),
    (G4, "Q5_K", "cuda", 8683, (545_804_288, 32_006_144), "graph", ON_HOST),
    (G3N, "Q8_0", "cuda", 8683, (545_783_808, 18_898_944), "graph", ()),
    (G3N, "Q5_K", "cuda", 8683, (545_783_808, 30_433_280), "graph", ON_HOST),
    # from the rule both are input-layer (host) weights, expanded into the graph first
    (G4, "Q8_0", "cuda", 8739, (572_018_688, 35_151_872), "graph", ()),
    (G4, "Q5_K", "cuda", 8739, (572_018_688, 35_151_872), "graph", ()),
    (G3N, "Q8_0", "cuda", 8739, (545_783_808, 34_627_584), "graph", ()),
    (G3N, "Q5_K", "cuda", 8739, (545_783_808, 34_627_584), "graph", ()),
    # Metal and Vulkan take K-quant GET_ROWS: the rows stay with the output layer, either type
    (G4, "Q8_0", "metal", 8683, (543_162_368, 16_801_792), "graph", ()),
    (G4, "Q5_K", "metal", 8683, (543_162_368, 16_801_792), "graph", ()),
    (G4, "Q5_K", "vulkan", 8683, (540_016_640, 16_799_744), "estimate", ()),
    (G3N, "Q5_K", "metal", 8683, (541_589_504, 18_896_896), "estimate", ()),
    (G3N, "Q5_K", "vulkan", 8683, (541_589_504, 18_896_896), "estimate", ()),
]


@pytest.mark.parametrize(("key", "rows", "backend", "build", "compute", "source", "bufs"), CASES)
def test_rows_buffer_in_the_replay(
    shapes: Path,
    key: str,
    rows: str,
    backend: str,
    build: int,
    compute: tuple[int, int],
    source: str,
    bufs: tuple[tuple[str, str], ...],
) -> None:
    assert _estimate(_model(shapes, key, rows), backend, build) == (compute, source, bufs)


@pytest.mark.parametrize("key", [G4, G3N])
def test_refused_rows_replay_as_rows_kept_on_the_host(shapes: Path, key: str) -> None:
    """On CUDA at b8683 the Q5_K rows' graph is the one of Q8_0 rows that -ot keeps on the host
    (the rows' type changes no compute buffer: their GET_ROWS gives F32 either way)."""
    refused = _estimate(_model(shapes, key, "Q5_K"), "cuda", 8683)
    kept = _estimate(_model(shapes, key, "Q8_0"), "cuda", 8683, ROWS_OT)
    assert refused == kept
