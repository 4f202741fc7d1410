"""Embeddings mode: llama-server --embeddings / --pooling / --rerank through parse → resolve →
compute.

tools/server/server-context.cpp server_output_limits keeps n_batch outputs with embeddings (every
token's logits are reserved); llm_graph_context::build_pooling (src/llama-graph.cpp) adds the
pooling inputs (inp_mean n_tokens x n_seqs F32, inp_cls n_seqs I32; n_tokens wide before PR #14217);
the logits land above the tensors alive from the start of the graph (compute._pinned_output). The
real llama-server rows are scripts/audit/audit_embeddings.py's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.errors import InputError
from llamafit.facts.hparams import build_facts
from llamafit.memory import compute
from llamafit.memory.config import LaunchConfig
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server.flags import parse_server_args
from tests.support import FIXTURES, needs_demo, needs_llama_server
from tests.support.loads import cpu_compute_mib
from tests.support.scripts import script

MIB = 1 << 20
PRINTED = 0.01 * MIB  # llama-server prints two decimals


@pytest.mark.parametrize(
    ("argv", "env", "embeddings", "pooling"),
    [
        ([], {}, False, ""),
        (["--embeddings"], {}, True, ""),
        (["--embedding", "--pooling", "mean"], {}, True, "mean"),
        (["--pooling", "cls"], {}, False, "cls"),
        (["--rerank"], {}, True, "rank"),
        (
            ["--reranking", "--pooling", "last"],
            {},
            True,
            "last",
        ),  # a later --pooling wins, as in arg.cpp
        ([], {"LLAMA_ARG_EMBEDDINGS": "1", "LLAMA_ARG_POOLING": "none"}, True, "none"),
    ],
)
def test_flags(argv: list[str], env: dict[str, str], embeddings: bool, pooling: str) -> None:
    cfg = parse_server_args(argv, env).config
    assert (cfg.embeddings, cfg.pooling) == (embeddings, pooling)


def test_unknown_pooling_is_one_line_error() -> None:
    with pytest.raises(
        InputError, match=r"--pooling expects one of none, mean, cls, last, rank, got 'avg'"
    ):
        parse_server_args(["--pooling", "avg"], {})


@pytest.fixture(scope="module")
def llama():  # type: ignore[no-untyped-def]
    return build_facts(read_model(FIXTURES / "dense-llama.gguf"))


@pytest.mark.parametrize(
    ("cfg", "gguf_pooling", "build", "n_outputs_max", "pooling"),
    [
        (LaunchConfig(), -1, None, 4, "none"),  # np auto: 4 outputs
        # server_output_limits: n_batch, which llama-server lowers to n_ubatch with embeddings
        # (tools/server/server.cpp main; the real b11434 log: n_batch = n_outputs_max = 512)
        (LaunchConfig(embeddings=True), -1, None, 512, "none"),
        (LaunchConfig(embeddings=True), 1, None, 512, "mean"),  # the GGUF's <arch>.pooling_type
        (
            LaunchConfig(embeddings=True, pooling="last"),
            1,
            None,
            512,
            "last",
        ),  # --pooling over the GGUF
        (
            LaunchConfig(pooling="cls"),
            -1,
            None,
            2048,
            "cls",
        ),  # a pooling without --embeddings: n_batch too
        (LaunchConfig(pooling="none"), -1, None, 4, "none"),
        (
            LaunchConfig(embeddings=True, n_batch=512),
            3,
            9000,
            512,
            "last",
        ),  # before PR #23861: n_batch anyway
    ],
)
def test_resolve(
    llama, cfg: LaunchConfig, gguf_pooling: int, build: int | None, n_outputs_max: int, pooling: str
) -> None:
    rc = resolve(replace(cfg, n_ctx=4096), replace(llama, pooling_type=gguf_pooling), build=build)
    assert (rc.n_outputs_max, rc.pooling, rc.embeddings) == (n_outputs_max, pooling, cfg.embeddings)


@pytest.mark.parametrize(
    ("pooling", "build", "name", "size"),
    [
        ("mean", None, "inp_mean", 512 * 4 * 4),  # n_tokens x n_seq_max F32
        ("mean", 5618, "inp_mean", 512 * 512 * 4),  # before PR #14217: n_tokens x n_tokens
        ("rank", None, "inp_cls", 32),  # n_seq_max I32, padded to the CPU's 32
        ("cls", 5618, "inp_cls", 512 * 4),
        ("none", None, None, 0),
    ],
)
def test_pooling_inputs(
    llama, pooling: str, build: int | None, name: str | None, size: int
) -> None:
    rc = resolve(
        LaunchConfig(n_ctx=4096, embeddings=True, pooling=pooling, n_ubatch=512), llama, build=build
    )
    inputs = compute.input_bytes(llama, compute.base_settings(llama, rc))
    pooled = {k: v for k, v in inputs.items() if k in ("inp_mean", "inp_cls")}
    assert pooled == ({name: size} if name else {})


def test_pooling_needs_embeddings(llama) -> None:
    """--pooling alone changes the outputs, but build_pooling returns at once without
    cparams.embeddings."""
    rc = resolve(LaunchConfig(n_ctx=4096, pooling="mean"), llama)
    assert "inp_mean" not in compute.input_bytes(llama, compute.base_settings(llama, rc))


@pytest.mark.slow
@needs_llama_server
@needs_demo
@pytest.mark.parametrize("flags", script("audit_embeddings").CASES[1:])  # [0]: the plain reference
def test_real_llama_server_cpu_compute(demo_path, flags: str) -> None:  # type: ignore[no-untyped-def]
    """The real llama-server's CPU compute buffer (b11434) to its two printed decimals."""
    audit_embeddings = script("audit_embeddings")

    real = cpu_compute_mib(str(demo_path), flags)
    assert real is not None
    assert abs(audit_embeddings.predicted(str(demo_path), flags) - real * MIB) <= PRINTED, flags
