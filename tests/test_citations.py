"""One llama.cpp commit: every short hash in the package and the measured table is
LLAMA_CPP_COMMIT's, and every `llama.cpp:` citation names a file of the source tree and a symbol."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llamafit import LLAMA_CPP_COMMIT
from tests.support import FIXTURES, ROOT

SOURCES = sorted([*(ROOT / "llamafit").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")])
TAG = re.compile(
    r"llama\.cpp: ((?:src|common|ggml|tools|include)/[\w./-]+\.(?:cpp|h|c|cu|cuh|m)) (\S+)"
)


def test_the_commit_is_a_full_sha() -> None:
    assert re.fullmatch(r"[0-9a-f]{40}", LLAMA_CPP_COMMIT)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_short_hashes_name_the_pinned_commit(path: Path) -> None:
    text = path.read_text()
    pinned = re.findall(r"\b0c1e[0-9a-f]{3,36}\b", text)
    assert all(LLAMA_CPP_COMMIT.startswith(h) for h in pinned)


def test_the_measured_table_is_of_the_pinned_commit() -> None:
    table = json.loads(
        (FIXTURES / "calibration" / f"llama-cpp-{LLAMA_CPP_COMMIT[:7]}-cpu.json").read_text()
    )
    assert table["llama_cpp_commit"] == LLAMA_CPP_COMMIT


def test_citation_tags_name_a_file_and_a_symbol() -> None:
    tags = [m for p in SOURCES for m in TAG.findall(p.read_text())]
    assert len(tags) >= 5
    assert all(symbol.strip("(),.;:") for _, symbol in tags)
