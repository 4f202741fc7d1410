"""The projector (mmproj) model against public llama.cpp logs
(fixtures/calibration/mmproj-corpus.jsonl).

Each row is one public log with the projector's shape (load_hparams) and the buffers it printed
(load_hparams: model size, alloc_compute_meta: <dev> compute buffer size); the projector is rebuilt
at that shape (tests/projector_files.py) and its weights and encoder compute per device are compared
with the log's, exact to the log's print precision (0.01 MiB). Both CUDA and Metal print 121.25 MiB
for the Gemma 3 SigLIP encoder with flash attention, the CPU rule: the extra n_embd x n_pos tensor
is Vulkan's alone (projector.REORDERING_BACKENDS: ggml_vk_graph_optimize).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.projector_files import mmproj_corpus_rows, predict_mmproj_row

ROWS = mmproj_corpus_rows()
PRINTED = 0.005  # MiB: the logs print two decimals


def test_corpus_rows_cite_a_public_log() -> None:
    assert ROWS and len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["url"].startswith("https://github.com/")
        assert r["measured"]["compute"]  # weights where the log prints `load_hparams: model size`


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_projector_against_public_log(row: dict, tmp_path: Path) -> None:
    pred = predict_mmproj_row(row, tmp_path)
    for kind in ("weights", "compute"):
        logged = row["measured"].get(kind)
        if logged is None:
            continue
        assert set(pred[kind]) == set(logged), kind
        for dev, mib in logged.items():
            assert pred[kind][dev] == pytest.approx(mib, abs=PRINTED), (kind, dev)
