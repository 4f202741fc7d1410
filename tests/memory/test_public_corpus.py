"""The held-out public corpora of issue #36 (fixtures/calibration/gpu-corpus-2026.jsonl: logs of
2026 builds on CUDA, ROCm and Metal; gpu-sweep-b10687.jsonl: gguf-parser-go's CUDA sweep) and their
bench, scripts/bench/bench_public_compute.py: every row parses, names a public source and a shape
that exists, the KV its log prints is what the row's settings give on that shape (so the settings
and the shape are the log's), and the bench runs on one row. The compute figures themselves are the
bench's report, not a test: they measure the replay, which other work changes."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests.support import FIXTURES
from tests.support.scripts import script

bench = script("bench_public_compute")
make_shapes = script("make_shapes")
make_shape_header = script("make_shape_header")

CORPORA = [
    FIXTURES / "calibration" / n for n in ("gpu-corpus-2026.jsonl", "gpu-sweep-b10687.jsonl")
]
ROWS = [(path.name, row) for path in CORPORA for row in bench.load_rows(path)]
IDS = [row["id"] for _, row in ROWS]
MIB = 1 << 20
PRINTED = 0.005 * MIB + 1  # two decimals


def _shape_names(shape_from: str) -> set[str]:
    if shape_from in bench.SHAPE_FILES:
        return set(make_shapes.load_specs(bench.SHAPE_FILES[shape_from]))
    return set(make_shape_header.load_specs())


def test_corpora_are_where_the_bench_reads_them() -> None:
    assert list(bench.CORPORA) == CORPORA
    assert len({row["id"] for _, row in ROWS}) == len(ROWS)


def test_sweep_rows_name_one_of_the_sweeps_architectures() -> None:
    """Every sweep row names the architecture of its sweep entry, one the sweep lists (125 entries
    in the file's alphabetical order, none twice)."""
    listed = bench.sweep_architectures()
    assert len(listed) == len(set(listed)) == 125 and listed == sorted(listed)
    sweep = [row for corpus, row in ROWS if corpus == "gpu-sweep-b10687.jsonl"]
    assert {row["architecture"] for row in sweep} <= set(listed)
    for row in sweep:
        assert row["note"].startswith(f"{row['architecture']}: ") or row["id"].startswith(
            "sweep-b10687-qwen3-0.6b-"
        ), row["id"]


PENDING = bench.load_rows(bench.SWEEP_PENDING)


def test_pending_sweep_rows_are_new_rows_of_listed_architectures() -> None:
    """The pending rows (shapes another branch adds) are sweep rows in the corpus' format: ids
    apart from the corpus', an architecture the sweep lists and the corpus has no row of yet, the
    note of its sweep entry, a shape and settings, a CUDA0 figure."""
    listed = set(bench.sweep_architectures())
    covered = {row.get("architecture") for _, row in ROWS}
    ids = [row["id"] for row in PENDING]
    assert len(set(ids)) == len(ids) and not set(ids) & set(IDS)
    for row in PENDING:
        assert row["architecture"] in listed - covered, row["id"]
        assert row["note"].startswith(f"{row['architecture']}: "), row["id"]
        assert row["id"].startswith(f"sweep-b10687-{row['architecture']}-")
        assert row["shape"] and row["shape_from"] in bench.SHAPE_FILES
        assert row["settings"]["n_gpu_layers"] > 0
        assert list(row["measured"]["compute"]) == ["CUDA0"]


@pytest.mark.parametrize(("corpus", "row"), ROWS, ids=IDS)
def test_row_names_its_public_source_build_shape_and_buffers(corpus: str, row: dict) -> None:
    assert row["url"].startswith("https://github.com/")
    assert (
        isinstance(row["build"], int) and row["build"] >= 7600
    )  # 2026 builds (llamafit/builds.py)
    assert row["build_note"]
    assert row["backend"] in ("cuda", "rocm", "metal")
    assert row["shape"] in _shape_names(row.get("shape_from", "gpu-shapes"))
    assert set(row["settings"]) >= {
        "n_ctx",
        "n_batch",
        "n_ubatch",
        "flash_attn",
        "type_k",
        "type_v",
        "n_seq_max",
        "n_gpu_layers",
    }
    compute = row["measured"]["compute"]
    gpus = [d for d in compute if not bench.is_host(d)]
    assert gpus and set(gpus) <= set(row["gpus"])


@pytest.mark.parametrize(
    "row",
    [row for _, row in ROWS if "kv" in row["measured"]],
    ids=[row["id"] for _, row in ROWS if "kv" in row["measured"]],
)
def test_kv_is_what_the_log_prints(row: dict) -> None:
    """KV per device to the print precision: the row's context, slots, cache types, split and
    shape are the log's."""
    bd = bench.row_model(row).estimate(
        bench.row_config(row), bench.row_gpus(row), bench.HOST, reserve_bytes=0
    )
    by_name = {d.name: d for d in bd.devices}
    for dev, mib in row["measured"]["kv"].items():
        assert abs(by_name[dev].kv_bytes - mib * MIB) <= PRINTED, (dev, by_name[dev].kv_bytes / MIB)


# (shape, a row's shape_overrides, the file size of the shape the bench writes): the logged file's
# quantization over the spec's (make_shapes.py: an F16 orion, falcon's legacy Q4_K_M, Qwen3-Next's
# legacy ssm_in projection)
@pytest.mark.parametrize(
    ("shape", "overrides", "size"),
    [
        ("orion-14b", {}, 8813275840),
        ("orion-14b", {"mix": "f16"}, 29001615040),
        ("falcon-40b", {}, 25755023712),
        ("falcon-40b", {"legacy_quant": True}, 25487669600),
        ("mpt-7b", {"legacy_quant": True}, 4274055680),
        ("nomic-embed-text-v1.5", {"legacy_quant": True}, 90305312),
        # Qwen3-Coder-Next Q5_K_M of b8233's log (52.81 GiB): ssm_in, the Q5_K_M mix
        ("qwen3-next-80b-a3b", {"mix": "q5_k_m", "ssm_in": True}, 56705886848),
    ],
)
def test_shape_overrides_set_the_files_quantization(
    shape: str, overrides: dict[str, object], size: int
) -> None:
    row = {"shape": shape, "shape_from": "shapes", "shape_overrides": overrides}
    assert bench.row_model(row).facts.file_size == size


def test_bench_runs_on_one_row(tmp_path: Path) -> None:
    """One sweep row through the bench: its line, its figure and the summary over it."""
    row = next(r for _, r in ROWS if r["id"] == "sweep-b10687-qwen3-0.6b-f16kv-full")
    corpus = tmp_path / "one-sweep-row.jsonl"
    corpus.write_text(json.dumps(row) + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        assert bench.main(["--corpus", str(corpus)]) == 0
    (fig,) = bench.figures(row)
    assert (fig.device, fig.measured, fig.gpu) == ("CUDA0", round(30.01 * MIB), True)
    assert fig.source in ("graph", "estimate")
    text = out.getvalue()
    assert f"{row['id']:<45}CUDA0" in text and "    30.01" in text
    s = bench.summary([fig])
    assert s["n"] == 1 and s["graph"] == (fig.source == "graph")
    assert s["median"] == s["p90"] == abs(fig.error) and s["worst"] == fig.error
    assert "GPU buffers: 1  " in text and "p90 |err| <= 10% (#36)" in text
    graph = int(fig.source == "graph")
    assert (
        f"architectures: 1 of the sweep's 125 have rows (1%), {graph} ({graph / 125:.0%}) with"
        " every GPU figure from the graph" in text
    )


@pytest.mark.parametrize(
    ("rows", "sources", "expected"),
    [
        # rows' architectures, each row's GPU figure sources -> listed, covered, all from the graph
        (["a", "a", "b"], ["graph", "graph", "graph"], {"listed": 3, "covered": 2, "graph": 2}),
        (["a", "a", "b"], ["graph", "estimate", "graph"], {"listed": 3, "covered": 2, "graph": 1}),
        (["a", "z", None], ["graph", "graph", "estimate"], {"listed": 3, "covered": 1, "graph": 1}),
        ([], [], {"listed": 3, "covered": 0, "graph": 0}),
    ],
)
def test_coverage_counts_the_listed_architectures(
    rows: list[str | None], sources: list[str], expected: dict[str, int]
) -> None:
    """An architecture counts once however many rows it has, and from the graph only when every
    GPU figure of its rows is; architectures the list lacks, and rows without one, do not count."""
    table = [{"id": f"r{i}"} | ({"architecture": a} if a else {}) for i, a in enumerate(rows)]
    figs = [bench.Figure(f"r{i}", "CUDA0", 1000, 1000, src) for i, src in enumerate(sources)]
    figs.append(bench.Figure("r0", "CUDA_Host", 1000, 1000, "estimate"))  # host buffers apart
    assert bench.coverage(table, figs, ["a", "b", "c"]) == expected


@pytest.mark.parametrize(
    ("errors", "expected"),
    [
        # (median |err|, worst, worst under, p90 |err|) over GPU figures
        ([0.1, -0.2, 0.05], (0.1, -0.2, -0.2, 0.2)),
        ([0.01, 0.02], (0.015, 0.02, 0.0, 0.02)),
        ([0.0] * 9 + [0.5], (0.0, 0.5, 0.0, 0.0)),
    ],
)
def test_summary_statistics(errors: list[float], expected: tuple[float, ...]) -> None:
    figs = [bench.Figure("r", "CUDA0", 1000, round(1000 * (1 + e)), "estimate") for e in errors] + [
        bench.Figure("r", "CUDA_Host", 1000, 5000, "graph")
    ]  # host buffers are left out
    s = bench.summary(figs)
    got = (s["median"], s["worst"], s["worst_under"], s["p90"])
    assert got == pytest.approx(expected) and s["n"] == len(errors) and s["graph"] == 0
