"""Where Gemma 3n's and Gemma 4's per-layer token rows (per_layer_token_embd) and their projection
(per_layer_model_proj, per_layer_proj_norm) sit, by build: with the output layer before rules
gemma3n_ple_expand / gemma4_ple_expand (b8739; LLM_TENSOR_LAYER_OUTPUT in src/llama-arch.cpp of
llama-cpp-python 0.3.16, 0.3.17 and 0.3.20), from there the rows with the input layer (the host)
and the projection with block 0 (0.3.21). Checked against the model buffers of two public Metal
logs of builds before the rule (fixtures/calibration/gpu-corpus-2026.jsonl), their shapes typed as
the logs' "type X: N tensors" lines count them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import resolve
from llamafit.reader.ggml_types import GGMLType
from llamafit.reader.model import read_model
from tests.memory.test_gpu_corpus import resolved
from tests.support.scripts import script

make_shapes = script("make_shapes")
ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fixtures" / "calibration" / "gpu-corpus-2026.jsonl"
MIB = 1 << 20

# The corpus row, the shapes.json spec it is built from, the types the logged file keeps over the
# spec's mix, the log's tensor type counts, and its model buffers (MiB as printed).
# - acdtrx/llama-runner llama-server.log (b8680, unsloth gemma-4-E4B-it Q8_0): "720 tensors",
#   "type f32: 423", "type q8_0: 296", "type bf16: 1"; CPU_Mapped 680.00, MTL0_Mapped 7798.32.
#   The 84 F32 beyond the norms are the 42 blocks' inp_gate and proj; the BF16 one the projection.
# - coin1860/kb-agent llama_server.log (~b8700, unsloth gemma-4-E2B-it Q4_K_M): "601 tensors",
#   "type f32: 353", "q4_K: 212", "q5_K: 1", "q6_K: 34", "bf16: 1"; CPU_Mapped 216.00 (a Q4_K
#   token_embd), MTL0_Mapped 2947.73. The Q5_K one is the per-layer token rows (as the unsloth
#   E2B file of ggml-org/llama.cpp issue #22243 has them).
# With the tied output on the GPU, MTL0_Mapped maps the whole file's data, token_embd included:
# the range from the first of its tensors to the end of the last (llama_model_loader::
# get_mapping_range), so with the GGUF's alignment padding between the tensors (under
# GGUF_ALIGNMENT bytes each), which the sum of the tensors' bytes leaves out.
GGUF_ALIGNMENT = 32
LOGS = [
    (
        "repo-acdtrx-gemma4-e4b-q8-c65536-metal-m4",
        "gemma4-e4b",
        {"inp_gate": "F32", "proj": "F32", "per_layer_model_proj.weight": "BF16"},
        {"f32": 423, "q8_0": 296, "bf16": 1},
        {"CPU": 680.00, "MTL0": 7798.32},
    ),
    (
        "repo-coin1860-gemma4-e2b-q8kv-ub1024-metal-m4",
        "gemma4-e2b-kvw",
        {
            "inp_gate": "F32",
            "proj": "F32",
            "per_layer_model_proj.weight": "BF16",
            "token_embd.weight": "Q4_K",
            "per_layer_token_embd.weight": "Q5_K",
        },
        {"f32": 353, "q4_k": 212, "q5_k": 1, "q6_k": 34, "bf16": 1},
        {"CPU": 216.00, "MTL0": 2947.73},
    ),
]


def _row(row_id: str) -> dict:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return next(r for r in rows if r["id"] == row_id)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ple-shapes")


def _model(shapes: Path, key: str, types: dict[str, str]) -> MemoryModel:
    specs = make_shapes.load_specs()
    name = f"{key}-logged"
    specs[name] = {**specs[key], "key": name, "tensor_types": types}
    return MemoryModel(build_facts(read_model(make_shapes.write_shape(name, shapes, specs))))


@pytest.mark.parametrize(("row_id", "key", "types", "counts", "logged"), LOGS)
def test_model_buffers_of_the_metal_logs(
    shapes: Path,
    row_id: str,
    key: str,
    types: dict[str, str],
    counts: dict[str, int],
    logged: dict[str, float],
) -> None:
    mm = _model(shapes, key, types)
    assert Counter(GGMLType.of(t.ggml_type).name.lower() for t in mm.facts.tensors) == counts
    row = _row(row_id)
    rc = resolved(row, mm.facts)
    gpus = [DeviceSpec(name, "gpu", row["backend"]) for name in row["gpus"]]
    bd = mm.estimate(rc, gpus, host(64 << 30, 64 << 30), reserve_bytes=0)
    cpu, gpu = bd.devices[-1].weights_bytes, bd.devices[0].weights_bytes
    assert round(cpu / MIB, 2) == logged["CPU"]  # token_embd alone: no padding inside
    padding = len(mm.facts.tensors) * (GGUF_ALIGNMENT - 1)
    assert gpu <= logged["MTL0"] * MIB + MIB // 200  # the printed MiB, rounded to 0.01
    assert gpu + padding >= logged["MTL0"] * MIB - MIB // 200


# Gemma 4 E2B's shape (fixtures/shapes/shapes.json gemma4-e2b, Q4_K_M: a Q6_K token_embd and
# per_layer_token_embd, an F16 per_layer_model_proj) on one GPU, by build, backend, Vulkan's tensor
# limit, -ngl and -ot. At b8739 (the rule) the rows sit on the host with token_embd and the
# projection with block 0; at b8683 all three go with the output layer, but the rows stay on the
# host where the backend refuses their GET_ROWS (CUDA: no K-quants) or their size passes the
# device's limit (select_weight_buft, weight_buft_supported).
TOKEN_EMBD = 330_301_440  # Q6_K [1536, 262144]
ROWS = 1_926_758_400  # per_layer_token_embd, Q6_K [8960, 262144]
PROJ = 27_525_120 + 1_024  # per_layer_model_proj (F16 [1536, 8960]) + per_layer_proj_norm (F32)
OUTPUT = 330_301_440 + 6_144  # the tied output's copy of token_embd + output_norm (F32)
ALL = 3_400_202_380  # every tensor once
GPU_NOW = ALL - TOKEN_EMBD - ROWS + TOKEN_EMBD  # full offload at b8739: all but the rows, + tied
GPU_NOW_CUDA = 1_473_457_280  # the same with CUDA's row padding
BLK0 = 22_916_100  # blk.0.*
GIB = 1 << 30


ALL_BUT_OUTPUT_PLE = ALL - OUTPUT - ROWS - PROJ + TOKEN_EMBD  # -ngl 1 at b8683: the host's
ROWS_OT = (("per_layer_token_embd", "CPU"),)
BLK0_OT = (("blk\\.0\\.", "CPU"),)


@pytest.mark.parametrize(
    ("build", "backend", "limit", "ngl", "ot", "gpu", "cpu"),
    [
        (8739, "metal", None, 99, (), GPU_NOW, TOKEN_EMBD + ROWS),
        (8683, "metal", None, 99, (), GPU_NOW + ROWS, TOKEN_EMBD),
        (8683, "vulkan", None, 99, (), GPU_NOW + ROWS, TOKEN_EMBD),
        (8683, "cuda", None, 99, (), GPU_NOW_CUDA, TOKEN_EMBD + ROWS),  # Q6_K rows refused
        (8683, "vulkan", GIB, 99, (), GPU_NOW, TOKEN_EMBD + ROWS),  # the rows over the limit
        # -ngl 1: the output layer only (rule ngl_output_first), block 0 on the host
        (8739, "vulkan", None, 1, (), OUTPUT, ALL - OUTPUT + TOKEN_EMBD),
        (8683, "vulkan", None, 1, (), OUTPUT + ROWS + PROJ, ALL_BUT_OUTPUT_PLE),
        (8683, "vulkan", None, 0, (), 0, ALL),
        # an -ot rule for the rows wins; one for block 0 leaves the PLE tensors where they were
        (8683, "vulkan", None, 99, ROWS_OT, GPU_NOW, TOKEN_EMBD + ROWS),
        (8683, "vulkan", None, 99, BLK0_OT, GPU_NOW + ROWS - BLK0, TOKEN_EMBD + BLK0),
        (8739, "vulkan", None, 99, BLK0_OT, GPU_NOW - BLK0, TOKEN_EMBD + ROWS + BLK0),
    ],
)
def test_ple_weights_by_build(
    shapes: Path,
    build: int,
    backend: str,
    limit: int | None,
    ngl: int,
    ot: tuple[tuple[str, str], ...],
    gpu: int,
    cpu: int,
) -> None:
    mm = MemoryModel(build_facts(read_model(make_shapes.write_shape("gemma4-e2b", shapes))))
    cfg = LaunchConfig(n_ctx=4096, n_parallel=1, n_gpu_layers=ngl, fit=False, override_tensor=ot)
    rc = resolve(cfg, mm.facts, build=build)
    name = {"metal": "MTL0", "vulkan": "Vulkan0", "cuda": "CUDA0"}[backend]
    device = DeviceSpec(name, "gpu", backend, max_tensor_bytes=limit)
    bd = mm.estimate(rc, [device], host(64 << 30, 64 << 30), reserve_bytes=0)
    assert (bd.devices[0].weights_bytes, bd.devices[-1].weights_bytes) == (gpu, cpu)
