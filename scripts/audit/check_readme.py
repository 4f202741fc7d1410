"""Run the README's main command and its first request, as a newcomer would, and report.

The commands are read from README.md: the code block after `<!-- main-command -->` (the install
and `llamafit run --demo`) and the one after `<!-- first-request -->` (a curl to /v1/completions).
By default the install step (`pip install … &&`) is skipped and `llamafit` runs from this checkout
(`python -m llamafit`); `--with-install` runs the README's line as it is. `--port N` moves both
the server and the request to port N (the README uses llamafit's default, 8080).

It prints what it measured: seconds from start to Ready, the request's status and latency, the
text the model wrote, and how the stop went (`Stopped.`, exit code). Exit 0 when every step
worked, 1 otherwise.

    python scripts/audit/check_readme.py --port 18350
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def block_after(readme: str, marker: str) -> str:
    """The first fenced code block after `<!-- marker -->`, as one line."""
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", readme, re.S)
    if not m:
        raise SystemExit(f"README.md has no code block after <!-- {marker} -->")
    return " ".join(m.group(1).replace("\\\n", " ").split())


def main_argv(command: str, *, with_install: bool, port: int | None) -> list[str]:
    """The README's main command as argv: the part after `&&` unless with_install (then the whole
    line in sh)."""
    if with_install:
        line = command + (f" --port {port}" if port else "")
        return ["sh", "-c", line]
    run = command.split("&&")[-1].strip()
    argv = shlex.split(run)
    if argv[0] == "llamafit":
        argv = [sys.executable, "-m", "llamafit", *argv[1:]]
    return argv + (["--port", str(port)] if port else [])


def request_argv(command: str, port: int | None) -> list[str]:
    argv = shlex.split(command)
    if port:
        argv = [re.sub(r"(https?://[^/:]+):\d+", rf"\g<1>:{port}", a) for a in argv]
    return argv


def run_check(readme_path: Path, *, with_install: bool, port: int | None, timeout: float) -> int:
    readme = readme_path.read_text(encoding="utf-8")
    server = main_argv(block_after(readme, "main-command"), with_install=with_install, port=port)
    request = request_argv(block_after(readme, "first-request"), port)
    print("main command:  " + shlex.join(server))
    print("first request: " + shlex.join(request))
    start = time.monotonic()
    proc = subprocess.Popen(
        server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    lines: list[str] = []
    ok = True
    try:
        ready = None
        while time.monotonic() - start < timeout:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("Ready"):
                ready = time.monotonic() - start
                break
        if ready is None:
            print(
                "FAIL  the server never said Ready; its last lines:\n  " + "\n  ".join(lines[-15:])
            )
            return 1
        print(f"ready after   {ready:.1f} s")
        t0 = time.monotonic()
        answer = subprocess.run(request, capture_output=True, text=True, timeout=300, check=False)
        latency = time.monotonic() - t0
        try:
            text = json.loads(answer.stdout)["choices"][0]["text"]
        except (ValueError, KeyError, IndexError, TypeError):
            text = None
        print(f"request       exit {answer.returncode}, {latency:.1f} s")
        print(f"model wrote   {text!r}")
        ok = answer.returncode == 0 and bool(text and text.strip())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    tail = (lines + rest.splitlines())[-1:] if rest or lines else []
    stopped = tail == ["Stopped."] and proc.returncode in (0, 130)
    print(f"stop          exit {proc.returncode}, last line {tail[0] if tail else '-'!r}")
    ok = ok and stopped
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--with-install", action="store_true", help="Run the README's pip install too.")
    ap.add_argument("--port", type=int, help="Serve and ask on this port instead of the README's.")
    ap.add_argument("--timeout", type=float, default=600.0, help="Seconds to wait for Ready.")
    args = ap.parse_args()
    raise SystemExit(
        run_check(args.readme, with_install=args.with_install, port=args.port, timeout=args.timeout)
    )


if __name__ == "__main__":
    main()
