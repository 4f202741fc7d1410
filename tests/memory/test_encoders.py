"""Encoders, embedding models and rerankers (bert, nomic-bert, nomic-bert-moe, jina-bert-v2/v3,
gemma-embedding, modern-bert, eurobert) from the GGUF to the command: no memory
(llama_model::create_memory gives none), the replay's compute buffers of a CPU-only llama-server
with --embedding or --rerank to the byte (the real b11434 starts of
scripts/graph_dump/record_build.py, fixtures/graphs/build-*), the output buffer embeddings grow,
the pooling flags in the planned command, and the one-line summary `check` prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.facts.hparams import build_facts
from llamafit.memory.config import LaunchConfig, with_given
from llamafit.memory.graph.replay import covers
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server.argv import server_argv
from tests.support import FIXTURES
from tests.support.graph_build import cases, model_file, recorded
from tests.support.scripts import script

CASES = cases()


def _check_json(path: str, *flags: str) -> dict:  # type: ignore[type-arg]
    res = CliRunner().invoke(cli, ["check", path, "--gpu", "cpu", "--json", "--", *flags])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # type: ignore[no-any-return]


# (case, flags as llamafit reads them): the recorded start's own flags but --fit off and
# --no-repack (no repacked type in these shapes' files)
@pytest.mark.parametrize(
    "name",
    [
        "bge-small-c512-emb",
        "bge-small-c512-np2",
        "nomic-c2048-emb-fa-off-np2",
        "embgemma-c2048-emb",
        "embgemma-c2048-emb-fa-off-np1",
        "modernbert-c8192-emb-none",
        "modernbert-c8192-emb-fa-off-np2",
        "bge-reranker-c512-rerank",
        "jina-v2-c8192-emb-ub1024",
        "eurobert-c8192-emb-fa-off",
        "nomic-moe-c512-emb",
        "jina-v3-c4096-emb-fa-off",
        "jina-reranker-tiny-c4096-q8",  # the sweep's jina-bert-v2 model as a plain server
    ],
)
def test_check_gives_the_real_cpu_compute_buffer(name: str) -> None:
    case = CASES[name]
    flags = [a for a in case.args if a != "--no-repack"]
    d = _check_json(str(model_file(case.model)), *flags)
    (cpu,) = d["devices"]
    real = recorded(name)[0].backends
    assert (cpu["name"], cpu["compute_source"], cpu["compute_bytes"]) == (
        "CPU",
        "graph",
        real[0][1],
    )
    assert (cpu["kv_bytes"], cpu["recurrent_bytes"]) == (0, 0)
    if "--embedding" in flags or "--rerank" in flags:  # llama-server's embeddings rule
        assert d["config"]["n_batch"] == d["config"]["n_ubatch"]


# (arch key, --embedding, covered): the encoders with and without embeddings; a decoder's
# pooled graph (build_pooling over its result_norm beside the logits) is not modelled
@pytest.mark.parametrize(
    ("model", "embeddings", "covered"),
    [
        ("bge-small-en-v1.5", True, True),
        ("bge-small-en-v1.5", False, True),
        ("modernbert-base", True, True),
        ("fixtures/dense-llama.gguf", True, False),
        ("fixtures/dense-llama.gguf", False, True),
    ],
)
def test_covers_encoders_with_embeddings(model: str, embeddings: bool, covered: bool) -> None:
    facts = build_facts(read_model(model_file(model)))
    rc = resolve(LaunchConfig(n_ctx=512, embeddings=embeddings), facts)
    assert covers(facts, rc) is covered


def test_encoder_facts() -> None:
    """Non-causal, no cache in any layer, the GGUF's pooling type (2: CLS)."""
    facts = build_facts(read_model(model_file("bge-small-en-v1.5")))
    assert (facts.causal, any(facts.has_kv), facts.pooling_type) == (False, False, 2)
    modern = build_facts(read_model(model_file("modernbert-base")))
    # load_swa_pattern(ml, 3, true): every third layer from layer 0 is full, the rest symmetric SWA
    assert (modern.swa.swa_type, modern.swa.n_swa) == ("symmetric", 128)
    assert [il for il in range(modern.n_layer) if not modern.swa.is_swa[il]] == [
        0,
        3,
        6,
        9,
        12,
        15,
        18,
        21,
    ]


# (flags given, the command's tail before -dev): --rerank is --embedding --pooling rank
@pytest.mark.parametrize(
    ("given", "tail"),
    [
        ({}, []),
        ({"embeddings": True}, ["--embedding"]),
        ({"embeddings": True, "pooling": "cls"}, ["--embedding", "--pooling", "cls"]),
        ({"embeddings": True, "pooling": "rank"}, ["--embedding", "--pooling", "rank"]),
        ({"pooling": "mean"}, ["--pooling", "mean"]),
    ],
)
def test_server_argv_keeps_the_pooling_flags(given: dict[str, object], tail: list[str]) -> None:
    facts = build_facts(read_model(FIXTURES / "dense-llama.gguf"))
    cfg = with_given(LaunchConfig(n_ctx=1024), **given)
    argv = server_argv("m.gguf", cfg, resolve(cfg, facts))
    assert argv[argv.index("-ub") + 2 : argv.index("--fit")] == tail


# (model, flags, the planned command's flags after -ub N): an embedding model is planned for
# --embedding unless its flags say how it runs; a decoder is not
@pytest.mark.parametrize(
    ("model", "flags", "tail"),
    [
        ("bge-small-en-v1.5", [], ["--embedding", "-dev", "none"]),
        ("bge-small-en-v1.5", ["--pooling", "mean"], ["--pooling", "mean", "-dev", "none"]),
        ("bge-small-en-v1.5", ["--rerank"], ["--embedding", "--pooling", "rank", "-dev", "none"]),
        ("fixtures/dense-llama.gguf", [], ["-dev", "none"]),
    ],
)
def test_plan_runs_an_embedding_model_with_embeddings(
    model: str, flags: list[str], tail: list[str]
) -> None:
    path = str(model_file(model))
    res = CliRunner().invoke(cli, ["plan", path, "--gpu", "cpu", "--json", "--", *flags])
    assert res.exit_code == 0, res.output
    command = json.loads(res.stdout)["command"]
    assert command[command.index("-ub") + 2 : command.index("--fit")] == tail


def test_check_says_why_there_is_no_cache() -> None:
    path = str(model_file("bge-small-en-v1.5"))
    res = CliRunner().invoke(cli, ["check", path, "--gpu", "cpu", "--", "-c", "512", "--embedding"])
    assert res.exit_code == 0, res.output
    config = res.stdout.split("Config     ", 1)[1].split("\n(MiB)", 1)[0]
    assert (
        config.split()
        == (
            "-c 512 (512 tokens shared by up to 4 parallel requests; no KV cache (non-causal)) "
            "-fa on -ctk f16 -ctv f16 -ngl 13 -b 512 -ub 512 --embedding --pooling cls"
        ).split()
    )


# (flags, output buffer): output_reserve(n_seq_max) at the start; with --embedding the first full
# batch (every token an output) grows it to n_batch rows of logits and embeddings, n_batch being
# n_ubatch then (tools/server/server.cpp)
@pytest.mark.parametrize(
    ("flags", "output"),
    [
        (["-c", "512"], 30522 * 4 * 4),
        (["-c", "512", "--embedding"], (30522 + 384) * 512 * 4),
        (["-c", "512", "--embedding", "-ub", "256"], (30522 + 384) * 256 * 4),
        (["-c", "512", "--rerank", "-np", "1"], (30522 + 384) * 512 * 4),
    ],
)
def test_embeddings_grow_the_output_buffer(flags: list[str], output: int) -> None:
    d = _check_json(str(model_file("bge-small-en-v1.5")), *flags)
    (cpu,) = d["devices"]
    assert cpu["output_bytes"] == output


def test_a_non_causal_decoder_keeps_its_cache(tmp_path: Path) -> None:
    """llama_model::create_memory makes no cache for the encoders' archs only: a Llama 3.2 1B
    shape whose GGUF says attention.causal false still gets one. The real b11434 start (-c 4096
    -np 1 --fit off): "CPU KV buffer size = 128.00 MiB", "CPU compute buffer size = 72.02 MiB"."""
    make_shapes = script("make_shapes")
    spec = dict(make_shapes.load_specs()["llama3.2-1b"], key="llama1b-noncausal", pooling="last")
    (path,) = make_shapes.build(spec).write(tmp_path)
    facts = build_facts(read_model(path))
    assert (facts.causal, all(facts.has_kv)) == (False, True)
    d = _check_json(str(path), "-c", "4096", "-np", "1")
    (cpu,) = d["devices"]
    assert (cpu["kv_bytes"], cpu["compute_source"]) == (128 << 20, "graph")
    assert round(cpu["compute_bytes"] / (1 << 20), 2) == 72.02
    res = CliRunner().invoke(cli, ["inspect", str(path)])
    note = "Note           non-causal / embedding model: a KV cache all the same"
    assert note in res.stdout.splitlines()


@pytest.mark.parametrize(
    ("model", "note"),
    [
        ("bge-small-en-v1.5", "Note           non-causal / embedding model: no KV cache"),
        ("llama3.2-1b", None),
    ],
)
def test_inspect_says_whether_a_non_causal_model_has_a_cache(model: str, note: str | None) -> None:
    res = CliRunner().invoke(cli, ["inspect", str(model_file(model))])
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stdout.splitlines() if "non-causal" in line]
    assert notes == ([note] if note else [])
