"""The shapes of the public CUDA sweep's rows (fixtures/calibration/gpu-sweep-b10687.jsonl) on a
real llama-server: the b11434 Vulkan/RPC build's lavapipe Vulkan0, at the sweep's settings
(-c, -fa on, q8_0 caches, -b 2048 -ub 512 -np 1) with the sweep's -ngl 4 and full offload, and
with no layer offloaded. Both compute buffers it prints (Vulkan0, Vulkan_Host) are the replay's
to print precision.

The sweep itself ran CUDA at b10687, which this machine cannot run; this checks the same graph,
placement and scheduler splits where a real llama.cpp can (bench_public_compute.py reports the
CUDA figures)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.support import VK_RPC_BIN_ABSENT, vulkan_rpc_bin_dir
from tests.support.scripts import script

bench = script("bench_public_compute")
device_lab = script("device_lab")
make_shapes = script("make_shapes")

MIB = 1 << 20
PRINTED = 0.005 * MIB + 1  # the log's two decimals of MiB

# (shapes.json key, -c, -ngl, Vulkan0 MiB, Vulkan_Host MiB) as the real start prints them
CASES = [
    # jina-bert-v2 (jina-reranker-v1-tiny-en): 4 blocks + output; head size 32
    ("jina-reranker-v1-tiny-en", 4096, 4, 12.01, 3.51),
    ("jina-reranker-v1-tiny-en", 4096, 5, 12.51, 3.51),
    ("jina-reranker-v1-tiny-en", 4096, 0, 12.01, 3.51),
    # falcon-h1 (Falcon-H1-Tiny-90M-Instruct): 24 blocks + output; the mixer without ssm_norm
    ("falcon-h1-tiny-90m", 4096, 4, 17.05, 13.03),
    ("falcon-h1-tiny-90m", 4096, 25, 17.86, 9.48),
    ("falcon-h1-tiny-90m", 4096, 0, 10.81, 13.03),
]
IDS = [f"{key}-c{ctx}-ngl{ngl}" for key, ctx, ngl, _, _ in CASES]


def _row(key: str, ctx: int, ngl: int) -> dict:
    """A corpus row (bench_public_compute's format) of this start on lavapipe's Vulkan0."""
    return {
        "id": f"{key}-ngl{ngl}",
        "shape": key,
        "shape_from": "shapes",
        "backend": "vulkan",
        "gpus": ["Vulkan0"],
        "build": 11434,
        "settings": {
            "n_ctx": ctx,
            "n_batch": 2048,
            "n_ubatch": 512,
            "flash_attn": True,
            "type_k": "q8_0",
            "type_v": "q8_0",
            "n_seq_max": 1,
            "n_gpu_layers": ngl,
        },
        "measured": {"compute": {"Vulkan0": 0.0, "Vulkan_Host": 0.0}},
    }


def _flags(ctx: int, ngl: int) -> list[str]:
    return f"-c {ctx} -fa on -ctk q8_0 -ctv q8_0 -b 2048 -ub 512 -np 1 -ngl {ngl}".split()


@functools.cache
def _written(shapes_dir: Path, key: str) -> Path:
    return Path(make_shapes.write_shape(key, shapes_dir))


@pytest.mark.parametrize(("key", "ctx", "ngl", "vk0", "host"), CASES, ids=IDS)
def test_replay_gives_the_real_starts_compute_buffers(
    key: str, ctx: int, ngl: int, vk0: float, host: float
) -> None:
    """The replay's figures are the table's (the real start's, below) to print precision, from
    the graph."""
    got = {f.device: f for f in bench.figures(_row(key, ctx, ngl))}
    assert {d: f.source for d, f in got.items()} == {"Vulkan0": "graph", "Vulkan_Host": "graph"}
    assert abs(got["Vulkan0"].predicted - vk0 * MIB) <= PRINTED
    assert abs(got["Vulkan_Host"].predicted - host * MIB) <= PRINTED


@pytest.mark.slow
@pytest.mark.skipif(vulkan_rpc_bin_dir() is None, reason=VK_RPC_BIN_ABSENT)
@pytest.mark.parametrize(("key", "ctx", "ngl", "vk0", "host"), CASES, ids=IDS)
def test_real_start_prints_the_tables_compute_buffers(
    shapes_dir: Path, key: str, ctx: int, ngl: int, vk0: float, host: float
) -> None:
    loaded = device_lab.load(_written(shapes_dir, key), _flags(ctx, ngl))
    assert loaded.ok, loaded.failure
    assert loaded.buffers["compute"] == {"Vulkan0": vk0, "Vulkan_Host": host}
