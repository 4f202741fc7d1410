"""A GGUF that is not a model (a tokenizer-only file, a LoRA adapter, a projector) given as the
model: one line, exit 2, for every command that plans (issue #16: a tokenizer-only file used to be
planned)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support.store_layouts import MODEL, lora, mmproj, vocab_only

CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    (
        "vocab",
        vocab_only,
        "has no tensors: a tokenizer-only GGUF (like llama.cpp's models/ggml-vocab-*.gguf) that "
        "llama-server cannot load; give the model's own GGUF",
    ),
    (
        "adapter",
        lora,
        "is a LoRA adapter, not a model; give the base model and the adapter with -- --lora "
        "ADAPTER",
    ),
    (
        "mmproj",
        mmproj,
        "is a multimodal projector, not a model; give the model and the projector with -- --mmproj "
        "PROJECTOR",
    ),
]


@pytest.mark.parametrize("command", ["check", "plan", "script"])
@pytest.mark.parametrize(("kind", "write", "why"), CASES, ids=[c[0] for c in CASES])
def test_a_gguf_that_is_not_a_model_is_refused(
    tmp_path: Path, command: str, kind: str, write: Callable[[Path], Path], why: str
) -> None:
    path = write(tmp_path / f"{kind}.gguf")
    res = CliRunner().invoke(cli, [command, str(path), "--gpu", "cpu"])
    assert (res.exit_code, res.stdout, res.stderr) == (2, "", f"Error: {path} {why}\n")


def test_the_model_itself_still_plans() -> None:
    res = CliRunner().invoke(cli, ["check", str(MODEL), "--gpu", "cpu"])
    assert res.exit_code == 0, res.output
