"""Issue #27's Metal row (repo-jonsjoberg-mistral-small-24b-fit-90k-metal-m3pro, llama-server b7960):
scripts/audit/audit_metal_b7960.py replays b7960's reserve graph (F32 KQ mask cast to F16 on MTL0,
no mixed-batch branch) through the scheduler with Metal's graph_optimize reorder as it stood before
PR #19555, and ggml-alloc. The log printed MTL0 348.26 MiB, CPU 197.51 MiB; the variants show which
rule moves the buffer (the hand model in compute.py, 308.76, has no candidate for this layout)."""

from __future__ import annotations

import pytest

from tests.memory.test_gpu_corpus import MIB, PRINTED, ROWS
from tests.support.scripts import script

audit = script("audit_metal_b7960")
ROW = next(r for r in ROWS if r["id"] == audit.ROW)

CASES = (  # (variant, replayed MTL0 bytes, replayed CPU bytes)
    ("b7960", {}, 365178880, 207108096),
    ("no_fa_extras", {"fa_extras": False}, 365178880, 207108096),
    ("no_graph_optimize", {"reorder": None}, 384053248, 207108096),
    (
        "reorder_pr_19555",
        {"reorder": (audit.SAFE_19555, audit.N_FORWARD_19555)},
        367276032,
        207108096,
    ),
    ("f16_mask_only", {"f32_mask": False}, 351441664, 114046976),
)


@pytest.mark.parametrize(
    ("kwargs", "mtl0", "cpu"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_replayed_buffers(kwargs: dict, mtl0: int, cpu: int) -> None:
    assert audit.replayed(ROW, **kwargs) == (mtl0, cpu)


def test_b7960_replay_is_the_printed_buffers() -> None:
    """The b7960 variant is the log's MTL0 and CPU compute buffers to their printed decimals."""
    mtl0, cpu = audit.replayed(ROW)
    assert abs(mtl0 - round(ROW["measured"]["compute"]["MTL0"] * MIB)) <= PRINTED
    assert abs(cpu - round(ROW["measured"]["compute"]["CPU"] * MIB)) <= PRINTED


def test_the_audit_is_the_production_replay() -> None:
    """The audit's b7960 variant is what MemoryModel.estimate gives (no monkeypatching left)."""
    assert audit.production(ROW) == audit.replayed(ROW) == (365178880, 207108096)
