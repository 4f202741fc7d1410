"""CPU_REPACK (memory/repack.py): which host weights llama.cpp's CPU backend repacks, and how much
the copy takes; against the real llama-server (b11434) for the demo model."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import host
from llamafit.machine.hardware import cpu_features
from llamafit.memory.model import MemoryModel
from llamafit.memory.repack import has_layout, repacked_bytes
from llamafit.memory.resolve import resolve
from llamafit.reader.model import read_model
from llamafit.server.flags import parse_server_args
from tests.support import needs_demo, needs_llama_server

AVX2 = frozenset({"avx2"})
AVX512 = frozenset({"avx2", "avx512"})
ARM_I8MM = frozenset({"neon", "dotprod", "matmul_int8"})
ARM_DOT = frozenset({"neon", "dotprod"})


@pytest.mark.parametrize(
    ("type_name", "shape", "features", "expected"),
    [
        ("Q4_0", (2048, 8192), AVX2, True),
        ("Q4_0", (2048, 8196), AVX2, False),  # rows not a multiple of 8
        ("Q4_0", (2048, 8196), ARM_DOT, True),  # 4x4 layout: rows a multiple of 4
        ("Q4_K", (640, 1024), AVX2, True),
        ("Q4_K", (640, 1024), frozenset(), False),
        ("Q2_K", (4096, 4096), AVX2, False),  # needs AVX-512
        ("Q2_K", (4096, 4096), AVX512, True),
        ("Q5_K", (4096, 4096), AVX512, False),  # Arm only
        ("Q5_K", (4096, 4096), ARM_I8MM, True),
        ("Q6_K", (4096, 4096), ARM_DOT, True),
        ("Q8_0", (4096, 4096), AVX512, False),
        ("Q8_0", (4096, 4096), ARM_DOT, True),
        ("IQ4_NL", (4096, 4096), AVX2, True),
        ("MXFP4", (2880, 2880, 32), AVX2, True),
        ("Q5_0", (4096, 4096), AVX512 | ARM_I8MM, False),  # no repacked layout
        ("F16", (4096, 4096), AVX512 | ARM_I8MM, False),
    ],
)
def test_layout(
    type_name: str, shape: tuple[int, ...], features: frozenset[str], expected: bool
) -> None:
    assert has_layout(type_name, shape, features) is expected


@pytest.mark.parametrize(
    ("name", "shape", "n_bytes", "expected"),
    [
        ("blk.0.attn_q.weight", (4096, 4096), 9437184, 9437184),  # MUL_MAT, 2-D
        ("blk.0.attn_output.weight", (640, 1000), 360000, 360000),  # padded to 32: already
        ("blk.0.ffn_down.weight", (1000, 8), 4501, 4512),  # padded to TENSOR_ALIGNMENT
        ("output.weight", (4096, 32000), 73728000, 73728000),
        ("token_embd.weight", (4096, 32000), 73728000, 0),  # GET_ROWS
        ("blk.0.attn_q.bias", (4096,), 16384, 0),  # ADD
        ("blk.0.ffn_up_exps.weight", (2048, 768, 128), 113246208, 113246208),  # MUL_MAT_ID, 3-D
        (
            "blk.0.ffn_up_exps.weight",
            (2048, 768, 1),
            884736,
            0,
        ),  # one expert: 2-D, not MUL_MAT_ID's
        ("blk.0.attn_norm.weight", (4096,), 16384, 0),  # MUL
        ("blk.0.ssm_conv1d.weight", (4, 8192), 131072, 0),  # SSM_CONV
    ],
)
def test_repacked_bytes(name: str, shape: tuple[int, ...], n_bytes: int, expected: int) -> None:
    assert repacked_bytes(name, "Q4_0", shape, n_bytes, AVX2) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n", AVX512),
        ("processor\t: 0\nflags\t\t: fpu sse2 avx\n", frozenset()),
        ("processor\t: 0\nFeatures\t: fp asimd evtstrm aes asimddp i8mm sve\n", ARM_I8MM),
        ("", frozenset()),
    ],
)
def test_cpu_features(tmp_path: Path, text: str, expected: frozenset[str]) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    assert cpu_features(str(info)) == expected


def _demo_repack(flags: list[str], features: frozenset[str]) -> int:
    from llamafit.fetch.demo import demo_model_path

    mm = MemoryModel(build_facts(read_model(demo_model_path())))
    rc = resolve(parse_server_args(flags, {}).config, mm.facts, engine="llama-server")
    return mm.estimate(rc, (), host(64 << 30, 48 << 30, features)).devices[-1].repack_bytes


@needs_demo
@pytest.mark.parametrize(
    ("flags", "features", "expected"),
    [
        ([], AVX2, 13271040),  # the 18 attn_output and 9 ffn_down Q4_K matrices: 12.66 MiB printed
        (["-nr"], AVX2, 0),
        (["--no-repack"], AVX2, 0),
        (["-nr", "--repack"], AVX2, 13271040),
        ([], frozenset(), 0),  # a CPU without AVX2 has no Q4_K layout
        # Arm with the dot product: Q4_K 8x4, Q6_K ffn_down (9), Q8_0 attn_v (9): 24,514,560, and the
        # tied output's Q8_0 copy of token_embd (262144 x 640: 178,257,920), probed as a MUL_MAT
        ([], ARM_DOT, 202772480),
    ],
)
def test_demo_repack(flags: list[str], features: frozenset[str], expected: int) -> None:
    assert _demo_repack(flags, features) == expected


@pytest.mark.slow
@needs_demo
@needs_llama_server
@pytest.mark.parametrize("flags", [[], ["-nr"]])
def test_demo_repack_matches_the_server(flags: list[str]) -> None:
    """The real llama-server's CPU_REPACK line (none with -nr) equals the prediction on this CPU."""
    from llamafit.fetch.demo import demo_model_path
    from tests.support.server_probe import server_binary, server_log

    binary = server_binary()
    assert binary is not None
    log = server_log(binary, ["-m", str(demo_model_path()), "-c", "1024", "--fit", "off", *flags])
    lines = [line for line in log.splitlines() if "CPU_REPACK model buffer size" in line]
    reported = float(lines[0].split("=")[1].split()[0]) if lines else 0.0
    assert abs(_demo_repack(flags, cpu_features()) / (1 << 20) - reported) <= 0.005
