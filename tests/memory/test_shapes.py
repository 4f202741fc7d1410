"""Real-shape models (scripts/fixtures/make_shapes.py): sparse full-size GGUFs that real llama.cpp
loads.

Every shape is generated here (no download, no disk: the data is a hole). Weights and KV that
llama.cpp reports for them are what llamafit predicts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.facts.hparams import build_facts
from llamafit.reader.model import read_model
from tests.support.loads import lab_load
from tests.support.scripts import script

device_lab = script("device_lab")
make_shapes = script("make_shapes")

# (key, file size in bytes: header + 32-byte aligned tensor data, as llama.cpp reads it)
SIZES = [
    ("llama3.2-1b", 803732384),
    ("llama-nemotron-embed-1b-v2", 803732448),
    ("llama3.1-8b", 4916776320),
    ("qwen2.5-7b", 4681738336),
    ("dream-v0-7b", 4681738336),
    ("llada-8b", 4923872384),
    ("qwen3-8b", 5026445664),
    ("qwen3-30b-a3b", 18555348064),
    ("rnd1-30b-a3b", 32482593824),
    ("gpt-oss-20b", 12102705248),
    ("gemma3-1b", 807556864),
    ("gemma3-4b", 2491256416),
    ("deepseek-v2-lite", 10349203616),
    ("granite3-1b-a400m", 821583552),
    ("granite4-h-micro", 3397125856),
    ("mamba-codestral-7b", 7753762496),
    ("mamba-130m", 89625472),
    ("falcon-mamba-7b", 4203878144),
    ("jamba-reasoning-3b", 1838633984),
    ("jamba-v0.1", 31163219616),
    ("gemma3n-e2b", 4746317568),
    ("gemma3n-e4b", 7308120320),
    ("qwen3-next-80b-a3b", 48403362720),
    ("qwen3-coder-next", 56705886848),
    ("qwen3.5-35b-a3b", 21097436672),
    ("nemotron3-nano-30b-a3b", 24470049024),
    ("gemma4-26b-a4b", 16782299008),
    ("gemma4-e2b", 3408247776),
    # 601 tensors, as the unsloth E2B Q4_K_M file of the b8700 corpus log (shared_kv_weights)
    ("gemma4-e2b-kvw", 3420109280),
    ("gemma4-e4b", 7997666784),
    ("qwen3.5-27b", 16219636512),
    ("ministral3-8b", 5194467200),
    ("smollm3-3b", 1911342528),
    ("seed-oss-36b", 21760593952),
    ("ernie4.5-0.3b", 386507040),
    ("ernie4.5-21b-a3b", 13220188288),
    ("phi-4", 8855961376),
    ("olmo2-1b", 1581121728),
    ("olmo3-7b", 4471053472),
    ("olmo3-32b", 19481487040),
    ("exaone4-32b", 19342698400),
    ("glm-z1-32b", 19675299392),
    ("glm4-9b-chat", 9993564032),
    ("command-r-v01", 21523997536),
    ("command-r-plus", 62744137920),
    ("command-r7b", 5053928544),
    ("qwen2.5-vl-7b", 4681738432),
    ("qwen3-vl-8b", 5026445824),
    ("qwen3-vl-30b-a3b", 18555348224),
    ("granite3-8b", 4942608480),
    ("llama4-scout", 65093465184),
    ("hunyuan-7b", 4621009152),
    ("hy-mt2-1.8b", 1131641696),
    ("lfm2-1.2b", 1245828640),
    ("lfm2.5-2.6b", 1562973984),
    ("minimax-m2", 138340234048),
    ("falcon-h1-3b", 3351255872),
    ("hunyuan-a13b", 48729368576),
    ("gemma2-9b", 5762849856),
    ("nemotron-nano-9b-v2", 6523431488),
    ("ling-mini-2.0", 9891691616),
    ("lfm2-8b-a1b", 5044625376),
    ("qwen1.5-moe-a2.7b", 9459218816),
    ("qwen2.5-moe-2x1.5b", 2335474656),
    ("gemma-2b", 1632054528),
    ("phi-2", 1710329408),
    ("starcoder2-3b", 1887645504),
    ("exaone3.5-7.8b", 4769526688),
    ("olmoe-1b-7b", 4213237184),
    ("afm-4.5b", 2912341504),
    ("deepseek-moe-16b", 10829941696),
    ("internlm2.5-7b", 4713404288),
    ("gpt2", 136385152),
    ("stablelm2-1.6b", 1030898144),
    ("bge-small-en-v1.5", 67852704),
    ("nomic-embed-text-v1.5", 87651104),
    ("embeddinggemma-300m", 335091200),
    ("modernbert-base", 299602176),
    ("bge-reranker-base", 564764544),
    ("jina-embeddings-v2-base-en", 274639424),
    ("eurobert-210m", 153008544),
    ("nomic-embed-text-v2-moe", 341394784),
    ("jina-embeddings-v3", 401789696),
    ("jina-reranker-v1-tiny-en", 33401056),
    ("falcon-h1-tiny-90m", 58458496),
    ("pythia-1.4b", 877925792),
    ("falcon-40b", 25755023712),
    ("starcoder-15b", 9768865920),
    ("granite-20b-code", 12564357120),
    ("bloom-560m", 402557600),
    ("bloom-7b1", 4496702048),
    ("mpt-7b", 4072729088),
    ("olmo-1b", 733245600),
    ("baichuan2-13b", 8999735392),
    ("baichuan2-7b", 4614756224),
    ("phi3.5-moe", 25346214912),
    ("phi3.5-mini", 2280206720),
    ("minicpm-1b", 841810784),
    ("minicpm4-8b", 4966037920),
    ("apertus-8b", 5053959360),
    ("ling-lite-1.5", 11153321664),
    ("trinity-mini", 12718843360),
    ("smallthinker-4b", 2497603872),
    ("qwen-7b", 4696557728),
    ("qwen-14b", 9054525152),
    ("orion-14b", 8813275840),
    ("plamo-13b", 7893496000),
    ("refact-1.6b", 968078816),
    ("xverse-7b", 4471458624),
    ("nemotron-mini-4b", 2698887328),
    ("llada-moe-7b-a1b", 4518938912),
    ("dbrx-instruct", 79650220864),
    ("openelm-3b", 1838021184),
    ("codeshell-7b", 4569158080),
    ("jais-30b", 26965236416),
    ("mistral-small-4-119b", 72115872864),
    ("hunyuan-ocr", 576509856),
    ("umt5-xxl-encoder", 3838194080),
    ("minicpm3-4b", 2470303648),
    ("nemotron-51b", 27732656576),
]


def test_every_spec_has_an_expected_size() -> None:
    assert sorted(make_shapes.load_specs()) == sorted(k for k, _ in SIZES)


@pytest.mark.parametrize(("key", "size"), SIZES, ids=[k for k, _ in SIZES])
def test_shape_is_full_size_sparse_and_readable(shapes_dir: Path, key: str, size: int) -> None:
    path = make_shapes.write_shape(key, shapes_dir)
    st = path.stat()
    assert st.st_size == size
    assert st.st_blocks * 512 < 16 << 20  # only the header is on disk
    spec = make_shapes.load_specs()[key]
    facts = build_facts(read_model(path))
    assert (facts.architecture, facts.n_layer_all, facts.file_size) == (
        spec["arch"],
        spec["n_layer"],
        size,
    )


# (arch, legacy_quant, tensor, ne, type) of the q4_k_m mix, 60 layers: the plain mix (Q6_K where
# use_more_bits, Q4_K else) and with legacy_quant llama.cpp's src/llama-quant.cpp
# llama_tensor_get_type at Q4_K_M before its tensor_category rework: attn_qkv Q5_K, falcon's output
# Q8_0 and its ffn_down Q6_K below n_layer / 16, Q5_K where use_more_bits, Q4_K elsewhere
QTYPES = [
    ("falcon", False, "output.weight", (8192, 65024), "Q6_K"),
    ("falcon", False, "blk.9.ffn_down.weight", (32768, 8192), "Q6_K"),
    ("falcon", False, "blk.10.attn_qkv.weight", (8192, 9216), "Q4_K"),
    ("falcon", True, "output.weight", (8192, 65024), "Q8_0"),
    ("falcon", True, "blk.2.ffn_down.weight", (32768, 8192), "Q6_K"),
    ("falcon", True, "blk.3.ffn_down.weight", (32768, 8192), "Q5_K"),
    ("falcon", True, "blk.9.ffn_down.weight", (32768, 8192), "Q5_K"),
    ("falcon", True, "blk.10.ffn_down.weight", (32768, 8192), "Q4_K"),
    ("falcon", True, "blk.59.ffn_down.weight", (32768, 8192), "Q5_K"),
    ("falcon", True, "blk.10.attn_qkv.weight", (8192, 9216), "Q5_K"),
    ("mpt", True, "output.weight", (4096, 50432), "Q6_K"),
    ("mpt", True, "blk.3.ffn_down.weight", (16384, 4096), "Q6_K"),
    ("mpt", True, "blk.10.ffn_down.weight", (16384, 4096), "Q4_K"),
    ("mpt", True, "blk.10.attn_qkv.weight", (4096, 12288), "Q5_K"),
    ("mpt", True, "blk.10.attn_v.weight", (4096, 4096), "Q4_K"),
    ("mpt", True, "blk.10.ffn_up.weight", (4096, 16384), "Q4_K"),
    # a row that is not a multiple of 256 falls back (Q5_K: Q5_1)
    ("mpt", True, "blk.10.attn_qkv.weight", (4160, 12480), "Q5_1"),
]


@pytest.mark.parametrize(("arch", "legacy", "name", "ne", "qtype"), QTYPES)
def test_q4_k_m_mix(arch: str, legacy: bool, name: str, ne: tuple[int, int], qtype: str) -> None:
    f = make_shapes.ShapeFixture("x.gguf", arch, 0, n_layer=60, legacy_quant=legacy)
    assert f.qtype(name, ne).name == qtype


# (tied, tensor, ne, type) of the q4_0 mix (llama-quant.cpp llama_tensor_get_type): Q4_0 but
# the output matrix, or a tied token embedding, at Q6_K
Q4_0_TYPES = [
    (False, "output.weight", (4096, 70144), "Q6_K"),
    (False, "token_embd.weight", (4096, 70144), "Q4_0"),
    (True, "token_embd.weight", (4096, 70144), "Q6_K"),
    (False, "blk.0.attn_qkv.weight", (4096, 6144), "Q4_0"),
    (False, "blk.0.ffn_down.weight", (16384, 4096), "Q4_0"),
]


@pytest.mark.parametrize(("tied", "name", "ne", "qtype"), Q4_0_TYPES)
def test_q4_0_mix(tied: bool, name: str, ne: tuple[int, int], qtype: str) -> None:
    f = make_shapes.ShapeFixture("x.gguf", "codeshell", 0, mix="q4_0", n_layer=42, tied=tied)
    assert f.qtype(name, ne).name == qtype


# (gqa_attn_v, tensor, ne, type) of the iq4_xs mix (llama-quant.cpp llama_tensor_get_type_impl,
# with an imatrix): IQ4_XS but the output at Q6_K and attn_v at Q5_K where n_gqa() >= 4; a row
# that is not a multiple of 256 falls back to IQ4_NL
IQ4_XS_TYPES = [
    (True, "output.weight", (8192, 128256), "Q6_K"),
    (True, "token_embd.weight", (8192, 128256), "IQ4_XS"),
    (True, "blk.0.attn_v.weight", (8192, 1024), "Q5_K"),
    (False, "blk.0.attn_v.weight", (8192, 1024), "IQ4_XS"),
    (True, "blk.0.attn_k.weight", (8192, 1024), "IQ4_XS"),
    (True, "blk.0.ffn_down.weight", (28672, 8192), "IQ4_XS"),
    (True, "blk.11.attn_output.weight", (8192, 8192), "IQ4_XS"),
    (True, "blk.0.ffn_up.weight", (4160, 8192), "IQ4_NL"),
]


@pytest.mark.parametrize(("gqa", "name", "ne", "qtype"), IQ4_XS_TYPES)
def test_iq4_xs_mix(gqa: bool, name: str, ne: tuple[int, int], qtype: str) -> None:
    f = make_shapes.ShapeFixture("x.gguf", "deci", 0, mix="iq4_xs", n_layer=80, gqa_attn_v=gqa)
    assert f.qtype(name, ne).name == qtype


# deci_layers: block_configs rows [n_heads_in_group, replace_with_linear, ffn_mult] as the
# converter (conversion/deci.py DeciModel) writes them: (n_head, n_head_kv, n_ff) per layer
DECI_LAYERS = [
    ([8, False, 1.3125], (64, 8, 7168)),
    ([16, False, 2.625], (64, 4, 14336)),
    ([64, False, 5.25], (64, 1, 28672)),
    ([None, True, 2.625], (64, 0, 14336)),  # linear attention
    ([None, False, 1.3125], (0, 0, 7168)),  # attention-free
    ([8, False, 1.0], (64, 8, 5632)),  # int(2 * 8192 / 3) = 5461, rounded up to 256s
]


@pytest.mark.parametrize(("block", "layer"), DECI_LAYERS)
def test_deci_layers(block: list[object], layer: tuple[int, int, int]) -> None:
    heads, kv, n_ff = make_shapes.deci_layers(
        {"n_head": 64, "n_embd": 8192, "block_configs": [block]}
    )
    assert (heads[0], kv[0], n_ff[0]) == layer


def test_shapes_are_deterministic(tmp_path: Path, shapes_dir: Path) -> None:
    a = make_shapes.write_shape("gemma3-1b", shapes_dir)
    b = make_shapes.write_shape("gemma3-1b", tmp_path)
    head = 8 << 20  # the header and the first tensors; the rest is a hole

    def start(path: Path) -> str:
        with path.open("rb") as f:
            return hashlib.sha256(f.read(head)).hexdigest()

    assert start(a) == start(b)


def _predicted(path: Path, gpu: str, flags: list[str]) -> dict[str, dict[str, int]]:
    res = CliRunner().invoke(
        cli,
        [
            "check",
            str(path),
            "--gpu",
            gpu,
            "--backend",
            "vulkan",
            "--reserve",
            "0",
            "--json",
            "--",
            *flags,
        ],
    )
    assert res.exit_code in (0, 1), res.output
    return {d["name"]: d for d in json.loads(res.stdout)["devices"]}


def _mib(n: int) -> float:
    return round(n / (1 << 20), 2)


# Loaded live: the shapes under 1 GiB (llama.cpp maps the file with MAP_POPULATE, which fills the
# page cache with the holes' zeros, so the large shapes stay out of the test run).
LIVE = ["llama3.2-1b", "gemma3-1b"]


@pytest.mark.parametrize("key", LIVE)
def test_shape_loads_on_cpu_with_the_predicted_weights_and_kv(
    vk_rpc_bin: Path, shapes_dir: Path, key: str
) -> None:
    path = make_shapes.write_shape(key, shapes_dir)
    flags = ["-c", "4096", "-np", "1", "--no-repack"]
    got = lab_load(path, flags, env=device_lab.vk_env(None))
    assert got.ok, got.failure
    cpu = _predicted(path, "cpu", flags)["CPU"]
    assert got.get("model", "CPU_Mapped") == _mib(cpu["weights_bytes"])
    assert got.get("KV", "CPU") == _mib(cpu["kv_bytes"])


def test_mamba_shape_loads_with_the_predicted_states_and_compute(
    vk_rpc_bin: Path, shapes_dir: Path
) -> None:
    """Mamba-1 (mamba-130m, under 1 GiB): the recurrent states of two sequences
    (llama_memory_recurrent: n_embd_r + n_embd_s F32 a layer and sequence) and the CPU compute
    buffer of the replayed graph are what llama.cpp allocates."""
    path = make_shapes.write_shape("mamba-130m", shapes_dir)
    flags = ["-c", "4096", "-np", "2", "--no-repack"]
    got = lab_load(path, flags, env=device_lab.vk_env(None))
    assert got.ok, got.failure
    cpu = _predicted(path, "cpu", flags)["CPU"]
    assert cpu["compute_source"] == "graph"
    assert [got.get("model", "CPU_Mapped"), got.get("RS", "CPU"), got.get("compute", "CPU")] == [
        _mib(cpu["weights_bytes"]),
        _mib(cpu["recurrent_bytes"]),
        _mib(cpu["compute_bytes"]),
    ]
