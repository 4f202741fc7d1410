"""How llama.cpp reads a GGUF file's name (reader/names.py): the split suffix and the quantization
tag (common/download.cpp get_gguf_split_info, extract_quant_bits) and the shard names the loader
opens (src/llama.cpp llama_split_path, llama_split_prefix)."""

from __future__ import annotations

import pytest

from llamafit.errors import GGUFError
from llamafit.reader.model import shard_paths
from llamafit.reader.names import SplitInfo, quant_bits, split_info


@pytest.mark.parametrize(
    "path, expected",
    [
        (
            "Qwen2.5-32B-Instruct-Q4_K_M.gguf",
            SplitInfo("Qwen2.5-32B-Instruct-Q4_K_M", 1, 1, "Q4_K_M"),
        ),
        ("model.q8_0.gguf", SplitInfo("model.q8_0", 1, 1, "Q8_0")),
        ("sub/x-IQ4_XS-00001-of-00002.gguf", SplitInfo("sub/x-IQ4_XS", 1, 2, "IQ4_XS")),
        ("x-00003-OF-00004.gguf", SplitInfo("x", 3, 4, "")),  # icase; "x" alone has no tag
        ("plain.gguf", SplitInfo("plain", 1, 1, "")),
        (
            "-00001-of-00002.gguf",
            SplitInfo("-00001-of-00002", 1, 1, "00002"),
        ),  # an empty prefix is no split
        (
            "m-0001-of-00002.gguf",
            SplitInfo("m-0001-of-00002", 1, 1, "00002"),
        ),  # four digits: no split
        ("m-00001-of-00002.GGUF", None),
        ("readme.md", None),
    ],
)
def test_split_info_is_llama_cpps(path: str, expected: SplitInfo | None) -> None:
    assert split_info(path) == expected


@pytest.mark.parametrize(
    "path, bits",
    [
        ("m-Q4_K_M.gguf", 4),
        ("m-F16.gguf", 16),
        ("m-BF16.gguf", 16),
        ("m-NVFP4.gguf", 4),
        ("m-IQ2_XXS.gguf", 2),
        ("m-Q8_0-00002-of-00003.gguf", 8),
        ("mmproj.gguf", 0),
        ("m-Q4_K_M.bin", 0),
    ],
)
def test_quant_bits_is_llama_cpps(path: str, bits: int) -> None:
    assert quant_bits(path) == bits


@pytest.mark.parametrize(
    "path, expected",
    [
        (
            "d/m-00002-of-00003.gguf",
            ["d/m-00001-of-00003.gguf", "d/m-00002-of-00003.gguf", "d/m-00003-of-00003.gguf"],
        ),
        ("m-00001-of-00001.gguf", ["m-00001-of-00001.gguf"]),
        ("m.gguf", ["m.gguf"]),
        (
            "m-00001-OF-00002.gguf",
            ["m-00001-OF-00002.gguf"],
        ),  # the loader's suffix is exact: one file
        ("m-00001-of-00002.GGUF", ["m-00001-of-00002.GGUF"]),
    ],
)
def test_shard_paths_follow_llama_split_path(path: str, expected: list[str]) -> None:
    assert shard_paths(path) == expected


@pytest.mark.parametrize(
    "path", ["m-00000-of-00002.gguf", "m-00003-of-00002.gguf", "m-00000-of-00000.gguf"]
)
def test_shard_numbers_outside_one_to_n_are_refused(path: str) -> None:
    with pytest.raises(GGUFError, match="split models number their shards 1 to N"):
        shard_paths(path)
