"""Each broken fixture gives one line `Error: <file> at byte <n>: <what>` and exit code 2."""

from __future__ import annotations

import filecmp

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import BROKEN
from tests.support.scripts import script

write_all = script("make_broken_fixtures").write_all

CASES = [
    ("bad-alignment", " at byte 251: general.alignment 48 is not a power of 2"),
    (
        "bad-block-size",
        " at byte 218: tensor 'blk.0.w' of type Q4_0 has 10 elements per row, not a multiple "
        "of the block size 32",
    ),
    ("bad-tensor-offset", " at byte 257: tensor 'blk.0.w' has data offset 64, expected 0"),
    (
        "big-endian",
        " at byte 4: big-endian GGUF files are not supported (this reader is little-endian)",
    ),
    (
        "data-out-of-bounds",
        " at byte 288: tensor data out of bounds: 'blk.0.attn_norm.weight' ends at byte 416 "
        "but the file has 316 bytes",
    ),
    ("duplicate-key", " at byte 218: duplicate key 'llama.block_count'"),
    ("duplicate-tensor", " at byte 272: duplicate tensor name 'blk.0.attn_norm.weight'"),
    ("empty", ": the file is empty"),
    (
        "huge-array",
        " at byte 238: array of 4611686018427387904 items in the value of 'test.arr' exceeds "
        "the 0 bytes left",
    ),
    (
        "huge-kv-count",
        " at byte 16: key count 1099511627776 exceeds what the 194 bytes left can hold",
    ),
    (
        "huge-string",
        " at byte 242: string length 9223372036854775808 in the value of 'general.name' "
        "exceeds the 1 bytes left",
    ),
    (
        "huge-tensor-count",
        " at byte 8: tensor count 1099511627776 exceeds what the 194 bytes left can hold",
    ),
    ("missing-block-count", ": key not found in model: llama.block_count"),
    ("nested-too-deep", " at byte 337: arrays nested deeper than 8 in the value of 'test.nested'"),
    ("not-gguf", " at byte 0: not a GGUF file (magic b'this', expected b'GGUF')"),
    ("too-many-dims", " at byte 218: tensor 'blk.0.w' has 5 dimensions (at most 4)"),
    (
        "truncated-in-kv",
        " at byte 214: file ends while reading the value of 'llama.attention.head_count' (1 "
        "bytes left)",
    ),
    (
        "truncated-in-tensor-info",
        " at byte 260: file ends while reading tensor 'blk.0.attn_norm.weight' (7 bytes left)",
    ),
    ("unknown-tensor-type", " at byte 245: tensor 'blk.0.w' has unknown ggml type 4"),
    ("unknown-value-type", " at byte 232: unknown value type 13 in the value of 'test.x'"),
    ("version-1", " at byte 4: GGUF version 1 is no longer supported (llama.cpp reads 2 and 3)"),
    ("version-99", " at byte 4: unsupported GGUF version 99 (expected 2 or 3)"),
    (
        "wrong-array-length",
        ": key llama.attention.head_count_kv has wrong array length; expected 1, got 3",
    ),
]


@pytest.mark.parametrize(("name", "message"), CASES, ids=[c[0] for c in CASES])
def test_broken_file_is_one_line_error(name: str, message: str) -> None:
    path = BROKEN / f"{name}.gguf"
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"Error: {path}{message}\n"


def test_good_file_beside_the_broken_ones(demo_path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(demo_path)])
    assert result.exit_code == 0
    assert "Architecture   gemma3, Q4_K_M, 268.1 M parameters" in result.stdout
    assert result.stderr == ""


def test_every_broken_fixture_is_tested_and_regenerates_identically(tmp_path) -> None:
    written = write_all(tmp_path)
    assert sorted(p.stem for p in written) == sorted(c[0] for c in CASES)
    for p in written:
        assert filecmp.cmp(p, BROKEN / p.name, shallow=False), p.name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "no-such-file.gguf"], "Error: no-such-file.gguf: no such file\n"),
        (["inspect"], "Error: no model given: pass a GGUF path, or --demo for the bundled model\n"),
        (["inspect", "x.gguf", "--demo"], "Error: give either a MODEL or --demo, not both\n"),
    ],
)
def test_bad_arguments(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert (result.exit_code, result.stderr) == (2, message)


def test_directory_is_not_a_model(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path)])
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: {tmp_path}: is a directory, not a GGUF file\n",
    )
