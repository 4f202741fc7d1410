"""Gemma 3n's tensors outside the blocks (src/models/gemma3n.cpp load_tensors): llama.cpp places the
AltUp projections with the output layer (LLM_TENSOR_LAYER_OUTPUT in src/llama-arch.cpp) and the
per-layer input projection with block 0 (created as tn(..., "weight", 0)); the per-layer token
embeddings, like token_embd, stay with the input on the CPU. Before rule gemma3n_ple_expand
(b8739) those three went with the output layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.facts.tensor_names import is_output_layer, layer_of
from llamafit.machine.devices import DeviceSpec, host
from llamafit.memory.config import LaunchConfig
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from tests.support import needs_llama_server
from tests.support.loads import cpu_compute_mib
from tests.support.scripts import script

_make_broken_fixtures = script("make_broken_fixtures")
T_ARRAY = _make_broken_fixtures.T_ARRAY
T_FLOAT32 = _make_broken_fixtures.T_FLOAT32
T_STRING = _make_broken_fixtures.T_STRING
T_UINT32 = _make_broken_fixtures.T_UINT32
gguf = _make_broken_fixtures.gguf
kv = _make_broken_fixtures.kv
tensor_info = _make_broken_fixtures.tensor_info

F16, F32 = 1, 0
E, V, L, ALTUP = 64, 256, 4, 16


def _gemma3n(path: Path) -> Path:
    a = "gemma3n"
    kvs = [
        kv("general.architecture", T_STRING, a),
        kv(f"{a}.block_count", T_UINT32, L),
        kv(f"{a}.context_length", T_UINT32, 4096),
        kv(f"{a}.embedding_length", T_UINT32, E),
        kv(f"{a}.feed_forward_length", T_UINT32, 128),
        kv(f"{a}.attention.head_count", T_UINT32, 2),
        kv(f"{a}.attention.head_count_kv", T_UINT32, 1),
        kv(f"{a}.attention.key_length", T_UINT32, 32),
        kv(f"{a}.attention.value_length", T_UINT32, 32),
        kv(f"{a}.attention.sliding_window", T_UINT32, 512),
        kv(f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-6),
        kv(f"{a}.vocab_size", T_UINT32, V),
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv("tokenizer.ggml.token_type", T_ARRAY, (T_UINT32, [])),
    ]
    tensors = [
        ("token_embd.weight", [E, V], F16),
        ("per_layer_token_embd.weight", [ALTUP * L, V], F16),
        ("per_layer_model_proj.weight", [E, ALTUP * L], F16),
        ("per_layer_proj_norm.weight", [ALTUP], F32),
        ("altup_proj.weight", [E, E, 3], F16),
        ("altup_unembd_proj.weight", [E, E, 3], F16),
        ("output_norm.weight", [E], F32),
    ]
    tensors += [(f"blk.{i}.attn_norm.weight", [E], F32) for i in range(L)]
    infos, offset = [], 0
    for name, shape, t in tensors:
        infos.append(tensor_info(name, shape, t, offset))
        n = 1
        for d in shape:
            n *= d
        offset += -(-n * (2 if t == F16 else 4) // 32) * 32
    path.write_bytes(gguf(kvs, infos))
    return path


@pytest.mark.parametrize(
    ("name", "output", "layer"),
    [
        ("altup_proj.weight", True, None),
        ("altup_unembd_proj.weight", True, None),
        ("output.weight", True, None),
        ("output_norm.weight", True, None),
        ("per_layer_model_proj.weight", False, 0),
        ("per_layer_proj_norm.weight", False, 0),
        ("per_layer_token_embd.weight", False, None),
        ("token_embd.weight", False, None),
        ("blk.3.altup_proj.weight", False, 3),
    ],
)
def test_where_tensors_outside_the_blocks_live(name: str, output: bool, layer: int | None) -> None:
    assert (is_output_layer(name), layer_of(name)) == (output, layer)


ALTUP_BYTES = 2 * (E * E * 3 * 2)  # altup_proj + altup_unembd_proj, F16
PROJ_BYTES = E * ALTUP * L * 2 + ALTUP * 4  # per_layer_model_proj (F16) + per_layer_proj_norm (F32)
NORMS = (L + 1) * E * 4  # the blocks' attn_norm and output_norm, F32
INPUT = E * V * 2 + ALTUP * L * V * 2  # token_embd + per_layer_token_embd, F16
TIED = E * V * 2  # no output.weight: the output layer's copy of token_embd (TENSOR_DUPLICATED)


ROWS = ALTUP * L * V * 2  # per_layer_token_embd, F16


@pytest.mark.parametrize(
    ("build", "ngl", "gpu", "cpu"),
    [
        (
            None,
            L + 1,
            ALTUP_BYTES + PROJ_BYTES + NORMS + TIED,
            INPUT,
        ),  # everything but the inputs on the GPU
        (
            None,
            1,
            ALTUP_BYTES + E * 4 + TIED,
            INPUT + PROJ_BYTES + L * E * 4,
        ),  # -ngl 1: only the output layer
        (None, 0, 0, INPUT + ALTUP_BYTES + PROJ_BYTES + NORMS),
        # before rule gemma3n_ple_expand (b8739) the per-layer rows and projection go with the
        # output layer (LLM_TENSOR_LAYER_OUTPUT; Vulkan takes the F16 rows' GET_ROWS)
        (8683, L + 1, ALTUP_BYTES + PROJ_BYTES + NORMS + TIED + ROWS, INPUT - ROWS),
        (8683, 1, ALTUP_BYTES + E * 4 + TIED + PROJ_BYTES + ROWS, INPUT - ROWS + L * E * 4),
        (8683, 0, 0, INPUT + ALTUP_BYTES + PROJ_BYTES + NORMS),
    ],
)
def test_weights_per_device(
    tmp_path: Path, build: int | None, ngl: int, gpu: int, cpu: int
) -> None:
    mm = MemoryModel(build_facts(read_model(_gemma3n(tmp_path / "g3n.gguf"))))
    cfg = LaunchConfig(n_ctx=4096, n_parallel=1, n_gpu_layers=ngl, fit=False)
    rc = resolve(cfg, mm.facts, build=build)
    bd = mm.estimate(
        rc, [DeviceSpec("Vulkan0", "gpu", "vulkan")], host(64 << 30, 64 << 30), reserve_bytes=0
    )
    assert (bd.devices[0].weights_bytes, bd.devices[-1].weights_bytes) == (gpu, cpu)


# --- the compute buffer against the real llama-server (scripts/audit/audit_gemma3n.py)
# -------------------------


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gemma3n-shapes")


@pytest.mark.slow
@needs_llama_server
@pytest.mark.parametrize(("key", "flags"), script("audit_gemma3n").CASES)
def test_compute_against_real_llama_server(shapes: Path, key: str, flags: str) -> None:
    """Exact to 0.02 MiB (llama-server prints two decimals): the graph replay (gemma3n.cpp's
    graph, memory/graph/build.py) and, for --embeddings, compute.py's hand-derived peak."""
    audit_gemma3n = script("audit_gemma3n")

    path = str(audit_gemma3n.shape(key, shapes))
    real = cpu_compute_mib(path, flags)
    assert real is not None
    assert abs(audit_gemma3n.predicted(path, flags) / (1 << 20) - real) <= 0.02
