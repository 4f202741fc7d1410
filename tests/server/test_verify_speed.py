"""--verify judges speed: the measured generation against the plan's range at that fill, and why
it lies outside (a busy machine: llama.cpp's threads wait for one another)."""

from __future__ import annotations

import pytest

from llamafit.server.verify import VerifyResult, speed_lines, verify_lines


def _result(tps: float | None, load: float | None = 0.5, cpus: int | None = 2) -> VerifyResult:
    return VerifyResult(
        True,
        32768,
        32752,
        16,
        120.0,
        272.9,
        tps,
        180.0,
        (),
        None,
        None,
        load_average=load,
        cpus=cpus,
    )


@pytest.mark.parametrize(
    ("tps", "load", "lines"),
    [
        (
            22.3,
            0.5,
            [
                "Speed      as planned: 22.3 tokens/s at 32,760 tokens of context, in 18.0-27.0",
                "           tokens/s",
            ],
        ),
        (
            0.6,
            9.3,
            [
                "Warning    generation 0.6 tokens/s at 32,760 tokens of context is below the",
                "           plan's 18.0-27.0 tokens/s: the machine was busy (load average 9.3 on",
                "           2 CPUs): llama.cpp's threads wait for one another at every step of a",
                "           token, so a thread that loses its core stalls them all; the plan is",
                "           for free cores, and on a busy machine fewer threads (llama-server -t)",
                "           lose less",
            ],
        ),
        (
            9.0,
            0.5,
            [
                "Warning    generation 9.0 tokens/s at 32,760 tokens of context is below the",
                "           plan's 18.0-27.0 tokens/s: the estimate is too high for this machine;",
                "           runs like this one calibrate later plans",
            ],
        ),
        (
            40.0,
            None,
            [
                "Warning    generation 40.0 tokens/s at 32,760 tokens of context is above the",
                "           plan's 18.0-27.0 tokens/s: the estimate is too low for this machine;",
                "           runs like this one calibrate later plans",
            ],
        ),
    ],
)
def test_speed_lines(tps: float, load: float | None, lines: list[str]) -> None:
    assert speed_lines(_result(tps, load), (18.0, 22.5, 27.0), 32760) == lines
    assert all(len(line) <= 80 for line in lines)


def test_no_judgment_without_a_measurement_or_an_estimate() -> None:
    assert speed_lines(_result(None), (18.0, 22.5, 27.0), 100) == []  # nothing measured
    assert speed_lines(_result(22.3), None, 100) == []  # a device of unknown bandwidth: no range


@pytest.mark.parametrize(
    ("load", "cpus", "busy"),
    [(9.3, 2, True), (2.0, 2, False), (0.1, 16, False), (None, 2, False), (3.0, None, False)],
)
def test_a_busy_machine_is_said_under_the_timings(
    load: float | None, cpus: int | None, busy: bool
) -> None:
    r = _result(0.6, load, cpus)
    assert r.busy is busy
    tail = [
        "           the machine was busy (load average 9.3 on 2 CPUs): these speeds are",
        "           not what it gives with its cores free",
    ]
    assert (verify_lines(r)[-2:] == tail) is busy
    assert (r.as_json()["load_average"], r.as_json()["cpus"]) == (load, cpus)


def test_the_timings_fit_80_columns_and_the_busy_note_gives_way_to_the_judgment() -> None:
    r = _result(0.5, 6.7)
    assert verify_lines(r)[1:3] == [
        "           time to first token 120.0 s (272.9 tokens/s prompt); generation 0.5",
        "           tokens/s at a full context",
    ]
    assert not any("busy" in line for line in verify_lines(r, busy_note=False))


def test_the_device_memory_note_wraps_at_80_columns() -> None:
    from dataclasses import replace

    note = (
        "no GPU memory reading: neither NVML nor amdgpu sysfs reports a device (CPU only or "
        "another driver)"
    )
    assert verify_lines(replace(_result(22.3), device_memory_note=note))[3:] == [
        "           no GPU memory reading: neither NVML nor amdgpu sysfs reports a device",
        "           (CPU only or another driver)",
    ]
