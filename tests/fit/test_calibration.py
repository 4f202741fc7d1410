"""Corrections learned from earlier runs (the calibration file `llamafit run` appends to)."""

from __future__ import annotations

import json

import pytest

from llamafit.memory.calibration import Correction, compute_correction, parse_records


def record(build, hardware, predicted, actual, scale=1.0):
    return {
        "server": {"build": build},
        "hardware": [{"name": n, "backend": b} for n, b in hardware],
        "compute_scale": scale,
        "buffers": [
            {
                "device": "CUDA0",
                "kind": "compute",
                "predicted_mib": predicted,
                "actual_mib": actual,
            },
            {"device": "CUDA0", "kind": "KV", "predicted_mib": 100.0, "actual_mib": 100.0},
        ],
    }


GPU = [("CUDA0", "cuda")]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([record(9500, GPU, 100.0, 110.0)], Correction(1.1, 1)),
        (
            [
                record(9500, GPU, 100.0, 110.0),
                record(9500, GPU, 100.0, 90.0),
                record(9500, GPU, 100.0, 120.0),
            ],
            Correction(1.1, 3),
        ),  # the median
        ([record(9400, GPU, 100.0, 150.0)], None),  # another build
        ([record(9500, [("CUDA0", "rocm")], 100.0, 150.0)], None),  # other devices
        (
            [record(9500, GPU, 110.0, 121.0, scale=1.1)],
            Correction(1.21, 1),
        ),  # undo the correction applied then
        ([record(9500, GPU, 100.0, 900.0)], Correction(2.0, 1)),  # clamped
    ],
)
def test_compute_correction(records: list, expected: Correction | None) -> None:
    got = compute_correction(records, devices=GPU, build=9500)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.runs == expected.runs
        assert got.compute_scale == pytest.approx(expected.compute_scale)


def test_damaged_lines_are_skipped() -> None:
    lines = [json.dumps(record(1, GPU, 1.0, 1.0)), "{not json", "[]", ""]
    assert len(parse_records(lines)) == 1
