"""periodic.py: the short graph of a model with long runs of alike blocks. Its blocks per config
(shorten), and that every plan that replays it prints what the full graph's replay prints, the
short graph taken where it proves the full one's buffers and declined where it does not (a
signature that misses what tells two blocks apart)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.facts.hparams import build_facts
from llamafit.memory.graph import periodic, replay
from llamafit.memory.graph.alloc import Marked
from llamafit.memory.graph.models import graph_hparams_of
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.periodic import Cut, Shortened, shorten
from llamafit.memory.graph.template import count_direct, count_short
from llamafit.reader.model import read_model
from scripts.fixtures import make_shapes

BASE = GraphConfig(n_tokens=512, n_seqs=1, n_outputs=1, kv_size=4096)
EXPS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def _cpu_experts(blocks: range) -> tuple[tuple[str, str], ...]:
    """--n-cpu-moe's overrides: these blocks' experts in the host buffer."""
    return tuple((f"blk.{il}.{part}", "CPU") for il in blocks for part in EXPS)


# shape, config, the short graph's blocks and cuts (None: the full graph). Both shapes are
# Q4_K_M mixes: llama.cpp's use_more_bits gives attn_v and ffn_down more bits in the first and
# last eighth of the blocks and every third block between (llama_tensor_get_type,
# src/llama-quant.cpp), so the middle repeats every 3 blocks; the last block is alone (its
# output rows)
R = range
SHORTEN = [
    # qwen3-30b-a3b, 48 blocks: 0..5 alike (3 is left out), 6..41 in 12 units of 3 (the units
    # at 15..35 left out), 42..46 too few
    (
        "qwen3-30b-a3b",
        BASE,
        ((*R(0, 3), *R(4, 15), *R(36, 48)), (Cut(2, 4), Cut(12, 36, 3))),
    ),
    # two GPUs: the 3-block units of each device apart
    (
        "qwen3-30b-a3b",
        replace(BASE, layer_weights=("CUDA0",) * 24 + ("CUDA1",) * 24),
        (
            (*R(0, 3), *R(4, 15), *R(18, 33), *R(36, 48)),
            (Cut(2, 4), Cut(12, 18, 3), Cut(30, 36, 3)),
        ),
    ),
    # the experts of blocks 0..9 on the host: 6..9 too few, 10..39 in 10 units, 41..46 alike
    # (41 by the every-third rule, 42..46 by the last eighth's)
    (
        "qwen3-30b-a3b",
        replace(BASE, overrides=_cpu_experts(range(10))),
        (
            (*R(0, 3), *R(4, 19), *R(34, 44), *R(45, 48)),
            (Cut(2, 4), Cut(16, 34, 3), Cut(43, 45)),
        ),
    ),
    # llama3.1-8b, 32 blocks: 4..27 in 8 units of 3
    ("llama3.1-8b", BASE, ((*R(0, 12), *R(21, 32)), (Cut(9, 21, 3),))),
    # its cache of blocks 0..19 on the host: 4..19 and 20..27 too few units (5 and 2)
    ("llama3.1-8b", replace(BASE, layer_kv=("CPU",) * 20 + ("Vulkan0",) * 12), None),
    # builders that tell blocks apart by their index: not shortened
    ("smollm3-3b", BASE, None),
    ("llama4-scout", BASE, None),
]


@pytest.mark.parametrize(("shape", "config", "want"), SHORTEN)
def test_shorten(
    shape: str,
    config: GraphConfig,
    want: tuple[tuple[int, ...], tuple[Cut, ...]] | None,
    shapes_dir: Path,
) -> None:
    facts = build_facts(read_model(make_shapes.write_shape(shape, shapes_dir)))
    got = shorten(facts, config)
    assert got == (None if want is None else Shortened(*want))
    if got is not None:  # a short graph's config is not shortened again
        assert shorten(facts, replace(config, layers=got.layers)) is None


# plans whose replays take short graphs: two GPUs with experts on the host, one Vulkan device,
# a CPU-only server
PLANS = [
    ("qwen3-30b-a3b", ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]),
    ("llama3.1-8b", ["--gpu", "6GiB", "--backend", "vulkan", "--ram", "64GiB"]),
    ("llama3.1-8b", ["--gpu", "cpu", "--ram", "64GiB"]),
]


def _plan(path: Path, args: list[str]) -> str:
    result = CliRunner().invoke(cli, ["plan", str(path), *args, "--json", "--no-llama-check"])
    assert result.exit_code == 0, result.output
    return result.output


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[bool]:
    """What each short reserve's proof answered."""
    answers: Counter[bool] = Counter()
    proves = periodic.proves

    def counted(m: Marked | None, short: Shortened, graph: Graph) -> bool:
        answers[out := proves(m, short, graph)] += 1
        return out

    monkeypatch.setattr(replay, "proves", counted)
    return answers


@pytest.mark.parametrize(("shape", "args"), PLANS)
def test_a_short_plan_is_the_full_one(
    shape: str, args: list[str], shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same plan, its replays of short graphs (every one proven) and of full ones."""
    path = make_shapes.write_shape(shape, shapes_dir)
    answers = _counted(monkeypatch)
    short = _plan(path, args)
    assert answers[True] > 0 and answers[False] == 0
    monkeypatch.setattr(replay, "shorten", lambda facts, config: None)
    assert _plan(path, args) == short


def test_a_blind_signature_is_caught(shapes_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature blind to the blocks' buffers makes one run of blocks on two GPUs and on the
    host: the short graph's windows then differ, the proof declines, and the full graph gives
    the plan's figures."""
    path = make_shapes.write_shape("qwen3-30b-a3b", shapes_dir)
    args = ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]
    want = _plan(path, args)
    monkeypatch.setattr(
        periodic,
        "signatures",
        lambda facts, config: [(il == facts.n_layer - 1,) for il in range(facts.n_layer)],
    )
    answers = _counted(monkeypatch)
    assert _plan(path, args) == want
    assert answers[False] > 0


def test_a_blocks_own_inputs_are_caught(shapes_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """UMT5's encoder reads each block's relative-position buckets through a view of its own of
    the input; with pipeline parallelism (two GPUs, every block offloaded) the scheduler copies
    each as a graph input that ggml-alloc allocates before its walk, once per block. A short
    graph let through there (replay._device_short takes it) is declined by the proof, and the
    plan is the full graph's; without that check it would be under."""
    path = make_shapes.write_shape("umt5-xxl-encoder", shapes_dir)
    args = ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]
    want = _plan(path, args)
    monkeypatch.setattr(
        replay, "_device_short", lambda facts, config, copies: shorten(facts, config)
    )
    answers = _counted(monkeypatch)
    assert _plan(path, args) == want
    assert answers[False] > 0
    monkeypatch.setattr(periodic, "_no_block_inputs", lambda m, graph: True)
    assert _plan(path, args) != want


# one of each way blocks repeat: every block (f16 MoE), every 3rd (K-quant mixes), SWA pairs
# (gpt-oss), hybrid recurrent and attention runs (granite4-h), an encoder
COUNTED = ["qwen3-30b-a3b", "llama3.1-8b", "gpt-oss-20b", "granite4-h-micro", "bge-small-en-v1.5"]


@pytest.mark.parametrize("shape", COUNTED)
def test_count_short_is_the_full_count(shape: str, shapes_dir: Path) -> None:
    """The scheduler's hash set is sized by the full graph's tensors (replay.scheduler_overflow):
    the short graph's count with its units left out is the full build's."""
    facts = build_facts(read_model(make_shapes.write_shape(shape, shapes_dir)))
    hp = graph_hparams_of(facts)
    config = replace(BASE, n_outputs=BASE.n_tokens)
    short = shorten(facts, config)
    assert short is not None
    assert count_short(facts, config, hp, short) == count_direct(facts, config, hp)
