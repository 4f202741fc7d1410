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
from llamafit.machine.devices import DeviceSpec
from llamafit.memory.config import LaunchConfig
from llamafit.memory.graph import periodic, replay
from llamafit.memory.graph.alloc import Marked
from llamafit.memory.graph.models import graph_hparams_of
from llamafit.memory.graph.nodes import Graph
from llamafit.memory.graph.params import GraphConfig
from llamafit.memory.graph.periodic import Cut, Shortened, shorten
from llamafit.memory.graph.template import count_direct, count_short
from llamafit.memory.model import MemoryModel
from llamafit.memory.resolve import ResolvedConfig, resolve
from llamafit.reader.model import read_model
from scripts.fixtures import make_shapes
from tests.memory.test_replay_devices import LAVAPIPE

BASE = GraphConfig(n_tokens=512, n_seqs=1, n_outputs=1, kv_size=4096)
EXPS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def _cpu_experts(blocks: range) -> tuple[tuple[str, str], ...]:
    """--n-cpu-moe's overrides: these blocks' experts in the host buffer."""
    return tuple((f"blk.{il}.{part}", "CPU") for il in blocks for part in EXPS)


def _write(shape: str, shapes_dir: Path) -> Path:
    """A make_shapes shape by key, or "<key>@<mix>" / "<key>@x<n_layer>": that spec in another
    mix (q8_0: one type in every block, as llama.cpp's Q8_0 and --pure files) or block count."""
    key, _, variant = shape.partition("@")
    if not variant:
        return make_shapes.write_shape(key, shapes_dir)
    spec = dict(make_shapes.load_specs()[key])
    if variant.startswith("x"):
        spec["n_layer"] = int(variant[1:])
    else:
        spec["mix"] = variant
    spec["key"] = name = f"{key}-{variant}"
    return make_shapes.write_shape(name, shapes_dir, {name: spec})


# shape, config, the short graph's blocks and cuts (None: the full graph). A Q4_K_M mix repeats
# every 3 blocks between its first and last eighth (llama_tensor_get_type's use_more_bits gives
# attn_v and ffn_down more bits there, src/llama-quant.cpp), a Q8_0 file every block; the last
# block is alone (its output rows)
R = range
Q8 = "qwen3-30b-a3b@q8_0"  # 48 blocks
SHORTEN = [
    # 0..46 alike
    (Q8, BASE, ((0, 1, 2, 45, 46, 47), (Cut(2, 45),))),
    # two GPUs: a run per device
    (
        Q8,
        replace(BASE, layer_weights=("CUDA0",) * 24 + ("CUDA1",) * 24),
        ((0, 1, 2, 22, 23, 24, 25, 26, 45, 46, 47), (Cut(2, 22), Cut(26, 45))),
    ),
    # the experts of blocks 0..9 on the host: they differ from the rest
    (
        Q8,
        replace(BASE, overrides=_cpu_experts(range(10))),
        ((0, 1, 2, 8, 9, 10, 11, 12, 45, 46, 47), (Cut(2, 8), Cut(12, 45))),
    ),
    # a run of 5 (0..4) is kept whole
    (
        Q8,
        replace(BASE, overrides=_cpu_experts(range(5))),
        ((*R(0, 8), 45, 46, 47), (Cut(7, 45),)),
    ),
    # Q4_K_M, 96 blocks: 0..11 alike, 12..83 in 24 units of 3, 84..94 alike
    (
        "qwen3-30b-a3b@x96",
        BASE,
        (
            (*R(0, 3), 10, 11, *R(12, 21), *R(78, 87), 93, 94, 95),
            (Cut(2, 10), Cut(18, 78, 3), Cut(86, 93)),
        ),
    ),
    # Q4_K_M, 32 blocks: 4..27 in 8 units of 3, but 23 of the 32 blocks kept: over MAX_KEPT
    ("llama3.1-8b", BASE, None),
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
    facts = build_facts(read_model(_write(shape, shapes_dir)))
    got = shorten(facts, config)
    assert got == (None if want is None else Shortened(*want))
    if got is not None:  # a short graph's config is not shortened again
        assert shorten(facts, replace(config, layers=got.layers)) is None


# plans whose replays take short graphs: two GPUs with experts on the host, two that hold every
# block (pipeline parallelism: copies of each graph input), one Vulkan device, a CPU-only server
PLANS = [
    (Q8, ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]),
    (Q8, ["--gpu", "64GiB,64GiB", "--ram", "64GiB"]),
    ("llama3.1-8b@q8_0", ["--gpu", "6GiB", "--backend", "vulkan", "--ram", "64GiB"]),
    ("llama3.1-8b@q8_0", ["--gpu", "cpu", "--ram", "64GiB"]),
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
    path = _write(shape, shapes_dir)
    answers = _counted(monkeypatch)
    short = _plan(path, args)
    assert answers[True] > 0 and answers[False] == 0
    monkeypatch.setattr(replay, "shorten", lambda facts, config: None)
    assert _plan(path, args) == short


def test_a_blind_signature_is_caught(shapes_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature blind to the blocks' buffers makes one run of blocks on two GPUs and on the
    host: the short graph's windows then differ, the proof declines, and the full graph gives
    the plan's figures."""
    path = _write(Q8, shapes_dir)
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
    each as a graph input that ggml-alloc allocates before its walk, once per block. The short
    graph is declined by the proof, and the plan is the full graph's; without that check it
    would be under."""
    path = make_shapes.write_shape("umt5-xxl-encoder", shapes_dir)
    args = ["--gpu", "12GiB,12GiB", "--ram", "64GiB"]
    with monkeypatch.context() as full:
        full.setattr(replay, "shorten", lambda facts, config: None)
        want = _plan(path, args)
    answers = _counted(monkeypatch)
    assert _plan(path, args) == want
    assert answers[False] > 0
    monkeypatch.setattr(periodic, "_no_block_inputs", lambda m, graph: True)
    assert _plan(path, args) != want


# one of each way blocks repeat: every block (a Q8_0 MoE and a dense one), every 3rd (a long
# K-quant mix), SWA pairs (gpt-oss), an encoder
COUNTED = [Q8, "llama3.1-8b@q8_0", "qwen3-30b-a3b@x96", "gpt-oss-20b", "bge-small-en-v1.5"]


@pytest.mark.parametrize("shape", COUNTED)
def test_count_short_is_the_full_count(shape: str, shapes_dir: Path) -> None:
    """The scheduler's hash set is sized by the full graph's tensors (replay.scheduler_overflow):
    the short graph's count with its units left out is the full build's."""
    facts = build_facts(read_model(_write(shape, shapes_dir)))
    hp = graph_hparams_of(facts)
    config = replace(BASE, n_outputs=BASE.n_tokens)
    short = shorten(facts, config)
    assert short is not None
    assert count_short(facts, config, hp, short) == count_direct(facts, config, hp)


ADA = DeviceSpec("CUDA0", "gpu", "cuda", 24 << 30, 24 << 30, cc=890)
TWO_ADA = [ADA, replace(ADA, name="CUDA1")]
HOST = DeviceSpec("CPU", "host", "cpu", 64 << 30, 64 << 30)

# -fa auto's probe (replay.fa_auto_mismatch) on partial offloads: a run of host blocks, one of
# GPU blocks, a block each side of the boundary kept
FA_PROBES = [
    (Q8, [ADA], 10),
    (Q8, TWO_ADA, 30),
    (Q8, [LAVAPIPE], 20),
    ("llama3.1-8b@q8_0", [LAVAPIPE], 10),
    ("falcon-h1-3b", [ADA], 20),
]


def _fa_settled(path: Path, gpus: list[DeviceSpec], ngl: int) -> ResolvedConfig:
    facts = build_facts(read_model(path))
    rc = resolve(LaunchConfig(fit=False, n_ctx=4096, n_gpu_layers=ngl), facts)
    return MemoryModel(facts).settle_flash_attn(rc, gpus, HOST)


@pytest.mark.parametrize(("shape", "gpus", "ngl"), FA_PROBES)
def test_the_fa_probe_takes_the_short_graph(
    shape: str, gpus: list[DeviceSpec], ngl: int, shapes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-fa auto settled from the short graph, its units L-1, L and R placed alike, is the full
    graph's answer; a signature blind to the blocks' buffers makes a run across the host and
    the GPU, whose units are placed apart: declined, and the full graph answers."""
    path = _write(shape, shapes_dir)
    with monkeypatch.context() as full:
        full.setattr(replay, "shorten", lambda facts, config: None)
        want = _fa_settled(path, gpus, ngl)
    taken: list[bool] = []
    alike = replay._placed_alike

    def counted(graph: Graph, backend_of: list[int], short: Shortened) -> bool:
        taken.append(alike(graph, backend_of, short))
        return taken[-1]

    monkeypatch.setattr(replay, "_placed_alike", counted)
    assert _fa_settled(path, gpus, ngl) == want
    assert taken == [True]
    monkeypatch.setattr(
        periodic,
        "signatures",
        lambda facts, config: [(il == facts.n_layer - 1,) for il in range(facts.n_layer)],
    )
    taken.clear()
    assert _fa_settled(path, gpus, ngl) == want
    assert taken == [False]
