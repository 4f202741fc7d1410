"""template.py's graphs in whole plans: a plan whose replays take the template's graphs (and
count_graph's build) prints what one that builds every graph directly prints. LongRoPE models on
two GPUs: each device's blocks read their own copy of the factors (TENSOR_DUPLICATED per buffer
type), which _sharing must tell apart as it does rope_freqs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.memory.graph import replay, template
from scripts.fixtures import make_shapes


def _plan(path: Path, args: list[str]) -> str:
    result = CliRunner().invoke(cli, ["plan", str(path), *args, "--json", "--no-llama-check"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("shape", ["phi3.5-mini", "minicpm4-8b"])
def test_a_templated_plan_is_the_direct_one(
    shape: str, shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_shapes.write_shape(shape, shapes_dir)
    args = ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]
    # the full graphs, so that count_graph's build is the first replay's
    monkeypatch.setattr(replay, "shorten", lambda facts, config: None)
    template.clear_cache()
    templated = _plan(path, args)
    template.clear_cache()
    monkeypatch.setattr(replay, "build_graph", template.build_direct)
    assert _plan(path, args) == templated
