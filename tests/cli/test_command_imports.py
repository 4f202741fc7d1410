"""A command imports what it uses (issue #34): the plan of a local file loads no fetch code (HTTP,
the Hub, the model stores), no HTML writer without --html and no launch-script writer, which only
`script` needs. Each command runs in a fresh interpreter; its sys.modules is the evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import FIXTURES, ROOT

# what a local plan must not load: llamafit's fetch code, the HTTP stack, the HTML and script writers
UNWANTED = (
    "llamafit.fetch",
    "http.client",
    "urllib.request",
    "ssl",
    "huggingface_hub",
    "llamafit.report.html",
    "llamafit.server.scripts",
    "llamafit.commands.script",
)


def loaded(args: list[str], tmp_path: Path, unwanted: tuple[str, ...] = UNWANTED) -> list[str]:
    """The `unwanted` modules (or a package below one) that `llamafit ARGS` leaves in
    sys.modules."""
    code = (
        "import json, sys\nfrom llamafit.cli import cli\n"
        f"try:\n    cli({args!r}, prog_name='llamafit')\nexcept SystemExit:\n    pass\n"
        f"unwanted = {unwanted!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if any(m == u or m.startswith(u + '.') for u in unwanted))))"
    )
    env = {"PATH": "", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    found: list[str] = json.loads(out.splitlines()[-1])
    return found


MODEL = str(FIXTURES / "dense-llama.gguf")
PLAN = ["plan", MODEL, "--gpu", "24GiB", "--ram", "64GiB", "--no-llama-check"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (PLAN, []),
        (["check", MODEL, "--gpu", "24GiB", "--ram", "64GiB"], []),
        (PLAN + ["--json"], []),
        # the writers load where they are used: the test sees a module that is there
        (PLAN + ["--html", "{tmp}/plan.html"], ["llamafit.report.html"]),
    ],
    ids=["plan", "check", "plan-json", "plan-html"],
)
def test_a_local_plan_loads_no_fetch_http_html_or_script_code(
    args: list[str], expected: list[str], tmp_path: Path
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert loaded(args, tmp_path) == expected


# what a plan on given GPUs with nothing measured yet leaves out (issues #34, #36: a plan's time
# is mostly imports): psutil (the RAM from /proc/meminfo on Linux), NVML's process list,
# statistics (no measured runs), difflib (no misspelt GPU name)
UNUSED_BY_A_PLAN = ("llamafit.machine.gpu_processes", "statistics", "difflib") + (
    ("psutil",) if sys.platform.startswith("linux") else ()
)


@pytest.mark.parametrize("args", [PLAN, PLAN + ["--json"]], ids=["plan", "plan-json"])
def test_a_plan_on_given_gpus_loads_only_what_it_uses(args: list[str], tmp_path: Path) -> None:
    assert loaded(args, tmp_path, UNUSED_BY_A_PLAN) == []
