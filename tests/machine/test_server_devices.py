"""Issue #28: the devices, the identity and the dry run of the llama-server that will run (fast
part: recorded answers; tests/machine/test_server_devices_e2e.py starts the real servers)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.commands.run import devices_mismatch, unplanned_devices
from llamafit.fit.llama_check import (
    DeviceCheck,
    agrees,
    logits_quirk_bytes,
    tensor_limit_candidates,
)
from llamafit.machine.devices import DeviceSpec, host
from llamafit.machine.hardware import GPUInfo, Hardware
from llamafit.machine.server_devices import ListedDevice, parse_list_devices, server_hardware
from llamafit.machine.vulkan import parse_vulkaninfo
from llamafit.memory.calibration import compute_correction, same_server
from llamafit.server.find import build_identity, version_identity
from llamafit.server.fit_check import Estimate, parse_fit_print, question
from tests.support import DATA

MIB = 1 << 20
VULKANINFO = DATA / "vulkaninfo"
LAVAPIPE = "  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"Available devices:\n{LAVAPIPE}\n",
            (
                ListedDevice(
                    "Vulkan0", "vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", 2048 * MIB, 2048 * MIB
                ),
            ),
        ),
        (
            "ggml_cuda_init: found 2 CUDA devices:\nAvailable devices:\n"
            "  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)\n"
            "  CUDA1: NVIDIA GeForce RTX 3060 (12036 MiB, 11900 MiB free)\n",
            (
                ListedDevice("CUDA0", "cuda", "NVIDIA GeForce RTX 4090", 24080 * MIB, 23500 * MIB),
                ListedDevice("CUDA1", "cuda", "NVIDIA GeForce RTX 3060", 12036 * MIB, 11900 * MIB),
            ),
        ),
        (  # ggml_cuda_init's lines give the compute capability (DeviceSpec.cc)
            "ggml_cuda_init: found 2 CUDA devices:\n"
            "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes, VRAM: 24080 MiB\n"
            "  Device 1: Tesla V100-PCIE-16GB, compute capability 7.0, VMM: yes, VRAM: 16144 MiB\n"
            "Available devices:\n"
            "  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)\n"
            "  CUDA1: Tesla V100-PCIE-16GB (16144 MiB, 15800 MiB free)\n",
            (
                ListedDevice(
                    "CUDA0", "cuda", "NVIDIA GeForce RTX 4090", 24080 * MIB, 23500 * MIB, 890
                ),
                ListedDevice(
                    "CUDA1", "cuda", "Tesla V100-PCIE-16GB", 16144 * MIB, 15800 * MIB, 700
                ),
            ),
        ),
        (  # HIP: the gfx id, GGML_CUDA_CC_OFFSET_AMD + 0x1100
            "  Device 0: AMD Radeon RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32, "
            "VRAM: 24560 MiB\nAvailable devices:\n"
            "  ROCm0: AMD Radeon RX 7900 XTX (24560 MiB, 24400 MiB free)\n",
            (
                ListedDevice(
                    "ROCm0", "rocm", "AMD Radeon RX 7900 XTX", 24560 * MIB, 24400 * MIB, 0x1001100
                ),
            ),
        ),
        ("Available devices:\n  (none)\n", ()),
        (
            "Available devices:\n  BLAS: OpenBLAS (0 MiB, 0 MiB free)\n"
            "  MTL0: Apple M2 Max (73728 MiB, 73728 MiB free)\n",
            (ListedDevice("MTL0", "metal", "Apple M2 Max", 73728 * MIB, 73728 * MIB),),
        ),
        (
            "Available devices:\n  RPC0: 127.0.0.1:50052 (2048 MiB, 2000 MiB free)\n",
            (
                ListedDevice(
                    "RPC0[127.0.0.1:50052]", "rpc", "127.0.0.1:50052", 2048 * MIB, 2000 * MIB
                ),
            ),
        ),
        ("error: invalid argument: --list-devices\n", None),
    ],
)
def test_list_devices_is_read(text: str, expected: tuple[ListedDevice, ...] | None) -> None:
    assert parse_list_devices(text) == expected


HOST = host(64 << 30, 32 << 30)
NVML_4090 = GPUInfo(
    DeviceSpec("CUDA0", "gpu", "cuda", 24564 * MIB, 23000 * MIB, overhead_bytes=260 * MIB),
    "NVIDIA GeForce RTX 4090",
    0,
    physical_index=0,
    uuid="GPU-1",
    bandwidth_bytes_per_s=1008 * 10**9,
)


def test_a_cuda_device_takes_nvml_facts() -> None:
    listed = (ListedDevice("CUDA0", "cuda", "NVIDIA GeForce RTX 4090", 24564 * MIB, 23100 * MIB),)
    hw = server_hardware(listed, Hardware((NVML_4090,), HOST, "nvml"), (), "llama-server")
    assert hw.source == "llama-server" and hw.notes == ()
    (g,) = hw.gpus
    assert (
        g.spec.name,
        g.spec.free_bytes,
        g.spec.overhead_bytes,
        g.uuid,
        g.bandwidth_bytes_per_s,
    ) == ("CUDA0", 23000 * MIB, 260 * MIB, "GPU-1", 1008 * 10**9)


def test_where_the_server_and_detection_disagree_one_line_says_so() -> None:
    listed = (ListedDevice("CUDA0", "cuda", "NVIDIA GeForce RTX 3060", 12036 * MIB, 11900 * MIB),)
    hw = server_hardware(listed, Hardware((NVML_4090,), HOST, "nvml"), (), "llama-server")
    assert hw.notes == (
        "CUDA0: llama-server reports NVIDIA GeForce RTX 3060 (12,036 MiB), detection NVIDIA "
        "GeForce RTX 4090 (24,564 MiB); the plan uses the server's device",
    )
    assert hw.gpus[0].spec.total_bytes == 12036 * MIB


def test_a_cpu_only_server_beside_a_gpu_plans_for_the_cpu() -> None:
    hw = server_hardware((), Hardware((NVML_4090,), HOST, "nvml"), (), "llama-server")
    assert hw.gpus == ()
    assert hw.notes == (
        "nvml finds CUDA0, which this llama-server does not list (a build without that backend): "
        "planned without them",
    )


@pytest.mark.parametrize("with_vulkaninfo", [True, False])
def test_a_vulkan_device_takes_its_tensor_limit_from_vulkaninfo_or_says_it_is_unknown(
    with_vulkaninfo: bool,
) -> None:
    listed = parse_list_devices(f"Available devices:\n{LAVAPIPE}\n")
    assert listed is not None
    vk = (
        parse_vulkaninfo((VULKANINFO / "lavapipe-llvm15.txt").read_text())
        if with_vulkaninfo
        else None
    )
    hw = server_hardware(listed, Hardware((), HOST, "none"), vk, "llama-server")
    (g,) = hw.gpus
    assert (g.spec.name, g.spec.backend, g.spec.total_bytes) == ("Vulkan0", "vulkan", 2048 * MIB)
    assert g.spec.max_tensor_bytes == (128 * MIB if with_vulkaninfo else None)
    assert hw.notes == (
        ()
        if with_vulkaninfo
        else (
            "Vulkan0: the largest tensor it can use is unknown without vulkaninfo (apt install "
            "vulkan-tools); the llama.cpp check shows llama.cpp's own placement",
        )
    )


@pytest.mark.parametrize(
    ("line", "identity"),
    [
        ("version: 8763 (ff5ef8278)", "b8763-ff5ef8278"),
        ("version: 0.5.0-dev (build 11312, commit 0c1e57098)", "b11312-0c1e57098"),
        ("version: 0.6.0-dev (build 0, commit unknown)", None),
        ("version: 0.6.0-dev (build 9512, commit unknown)", "b9512"),
        ("", None),
    ],
)
def test_a_build_is_named_by_version_and_commit(line: str, identity: str | None) -> None:
    assert version_identity(line) == identity


def _exe(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "llama-server"
    exe.write_text(f"#!{sys.executable}\n# {body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (folder / "libggml-base.so").write_bytes(body.encode())
    return exe


def test_two_builds_that_say_unknown_get_two_identities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))
    unknown = "version: 0.6.0-dev (build 0, commit unknown)"
    cpu, vulkan = _exe(tmp_path / "cpu", "cpu"), _exe(tmp_path / "vk", "vulkan")
    first = build_identity(str(cpu), unknown)
    assert first.startswith("sha256:") and len(first) == 23
    assert build_identity(str(vulkan), unknown) != first
    # cached by path, size and mtime
    assert len(os.listdir(tmp_path / "cache" / "server-identity")) == 2
    assert build_identity(str(cpu), unknown) == first
    # a library changed: hashed again
    (tmp_path / "cpu" / "libggml-base.so").write_bytes(b"another build")
    assert build_identity(str(cpu), unknown) != first
    assert build_identity(str(cpu), "version: 8763 (ff5ef8278)") == "b8763-ff5ef8278"


def _record(identity: str | None, build: int | None, actual: float) -> dict:
    server: dict = {"build": build} | ({"identity": identity} if identity else {})
    return {
        "server": server,
        "hardware": [{"name": "Vulkan0", "backend": "vulkan"}],
        "compute_scale": 1.0,
        "buffers": [
            {"device": "Vulkan0", "kind": "compute", "predicted_mib": 100.0, "actual_mib": actual}
        ],
    }


@pytest.mark.parametrize(
    ("record", "build", "identity", "same"),
    [
        (_record("sha256:a", None, 1), None, "sha256:a", True),
        (_record("sha256:a", None, 1), None, "sha256:b", False),  # two "unknown" builds never share
        (
            _record(None, None, 1),
            None,
            "sha256:a",
            False,
        ),  # an old record of an unknown build: not this one
        (_record(None, 8000, 1), 8000, "b8000-abc", True),  # an old record of the same known build
        (_record(None, None, 1), None, None, True),  # a plan for given devices: old rules
        (_record("sha256:a", None, 1), None, None, False),
    ],
)
def test_calibration_is_keyed_by_the_server(
    record: dict, build: int | None, identity: str | None, same: bool
) -> None:
    assert same_server(record, build=build, identity=identity) is same


def test_calibration_from_one_server_never_changes_plans_for_another() -> None:
    records = [_record("sha256:cpu", None, 200.0), _record("sha256:vk", None, 110.0)]
    found = compute_correction(
        records, devices=[("Vulkan0", "vulkan")], build=None, identity="sha256:vk"
    )
    assert found is not None and (found.compute_scale, found.runs) == (1.1, 1)
    assert (
        compute_correction(
            records, devices=[("Vulkan0", "vulkan")], build=None, identity="sha256:other"
        )
        is None
    )


@pytest.mark.parametrize(
    ("buffers", "gpus", "expected"),
    [
        (
            {"compute": {"Vulkan0": 52.8, "Vulkan_Host": 62.3}, "KV": {"Vulkan0": 128.0}},
            [],
            ["Vulkan0"],
        ),
        ({"compute": {"Vulkan0": 52.8, "Vulkan_Host": 62.3}}, ["Vulkan0"], []),
        ({"model": {"CPU_Mapped": 10.0, "CPU_REPACK": 1.0, "CUDA_Host": 2.0}}, [], []),
        ({"model": {"RPC0[127.0.0.1:50052]": 10.0}}, ["RPC0[127.0.0.1:50052]"], []),
        ({"model": {"RPC0[127.0.0.1:50052]": 10.0}}, [], ["RPC0[127.0.0.1:50052]"]),
    ],
)
def test_buffers_on_devices_the_plan_did_not_have(
    buffers: dict, gpus: list[str], expected: list[str]
) -> None:
    assert unplanned_devices(buffers, gpus) == expected


FIT_HELP = """\
-m,    --model FNAME                    model path to load
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
-np,   --parallel N                     number of parallel sequences to decode (default: 1)
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
-ctk,  --cache-type-k TYPE              KV cache data type for K
-ctv,  --cache-type-v TYPE              KV cache data type for V
-b,    --batch-size N                   logical maximum batch size (default: 2048)
-ub,   --ubatch-size N                  physical maximum batch size (default: 512)
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
-fit,  --fit [on|off]                   whether to adjust unset arguments to fit in device memory
-fitp, --fit-print [on|off]             print the estimated required memory ('on' or 'off', default: 'off')
"""


def test_the_question_keeps_the_flags_the_tool_has() -> None:
    argv = [
        "llama-server",
        "-m",
        "m.gguf",
        "-c",
        "32768",
        "-ngl",
        "19",
        "-fa",
        "on",
        "-ctk",
        "f16",
        "-ot",
        "blk\\.1\\.=CPU",
        "-np",
        "4",
        "-kvu",
        "--fit",
        "off",
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "--rpc",
        "h:1",
    ]
    assert question(argv, FIT_HELP) == (
        [
            "-m",
            "m.gguf",
            "-c",
            "32768",
            "-ngl",
            "19",
            "-fa",
            "on",
            "-ctk",
            "f16",
            "-ot",
            "blk\\.1\\.=CPU",
            "-np",
            "4",
        ],
        ["--rpc"],
    )


def test_the_estimate_is_read() -> None:
    text = "Vulkan0 65 156 26 \nHost 170 0 514 \n"
    assert parse_fit_print(text) == (
        Estimate("Vulkan0", 65, 156, 26),
        Estimate("Host", 170, 0, 514),
    )
    assert parse_fit_print(text)[0].total_mib == 247


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        ([DeviceCheck("Vulkan0", 247, 249.2, True), DeviceCheck("CPU", 684, 188.0, False)], True),
        ([DeviceCheck("Vulkan0", 247, 419.2, True)], False),
        (
            [DeviceCheck("Vulkan0", 20, 22.9, True)],
            True,
        ),  # within the 3 MiB the three rounded columns lose
        ([DeviceCheck("Vulkan0", 20, 23.1, True)], False),
        # the device with the output layer: llama.cpp's estimate adds logits for every ubatch token
        ([DeviceCheck("RPC0[h:2]", 846, 344.9, True, quirk_mib=508.0)], True),
        ([DeviceCheck("RPC0[h:2]", 846, 344.9, True, quirk_mib=508.0, model_agrees=False)], False),
        ([DeviceCheck("RPC0[h:2]", 900, 344.9, True, quirk_mib=508.0)], False),
        (
            [DeviceCheck("RPC0[h:2]", 200, 344.9, True, quirk_mib=508.0)],
            False,
        ),  # under is never the quirk
    ],
)
def test_agreement_is_judged_on_gpus_only(checks: list[DeviceCheck], expected: bool) -> None:
    assert agrees(checks) is expected


def test_the_logits_quirk_is_the_f32_logits_of_the_ubatch_rows_the_server_does_not_reserve() -> (
    None
):
    assert logits_quirk_bytes(262144, 512, 4) == 262144 * 508 * 4
    assert logits_quirk_bytes(262144, 512, 512) == 0


def test_tensor_limit_candidates_are_the_powers_of_two_below_the_largest_tensors() -> None:
    assert tensor_limit_candidates([170 * MIB, 170 * MIB, 4 * MIB, 3 * MIB, 1]) == (
        128 * MIB,
        2 * MIB,
    )


def test_a_server_that_does_not_answer_like_llama_server_is_refused() -> None:
    result = CliRunner().invoke(
        cli, ["run", "--demo", "--server", "/bin/ls", "--dry-run", "--gpu", "2GiB"]
    )
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "Error: --server /bin/ls does not answer like llama-server: its --help lists no --port "
        "(exit 0)\n"
    )


def _fake_build(where: Path, extra_model_mib: int, build: str = "", compute_mib: int = 2) -> Path:
    """A llama-server that lists one CUDA0 of $FAKE_CUDA0_MIB (16 MiB unless set), and a
    llama-fit-params beside it whose estimate is llamafit's for the dense fixture (KV 512 bytes a
    token; compute 2 MiB, llamafit's 2,375,680 bytes for its question as printed) plus
    `extra_model_mib` of weights, and `compute_mib` on CUDA0; `build` makes another build
    (another content hash). Each question it answers is a line of asked.log beside it."""
    from tests.support import NEW_HELP, NEW_VERSION

    server = _exe(where, "fake")
    server.write_text(
        f"#!{sys.executable}\nimport os, sys\n# {build}\n"
        f"if sys.argv[1] == '--version':\n    sys.stderr.write({NEW_VERSION!r})\n"
        f"elif sys.argv[1] == '--help':\n    sys.stdout.write({NEW_HELP!r})\n"
        "elif sys.argv[1] == '--list-devices':\n    mib = os.environ.get('FAKE_CUDA0_MIB', '16')\n"
        "    print('Available devices:')\n"
        "    print(f'  CUDA0: NVIDIA GeForce RTX 4090 ({mib} MiB, {mib} MiB free)')\n"
    )
    tool = where / "llama-fit-params"
    tool.write_text(
        f"#!{sys.executable}\nimport os, sys\na = sys.argv[1:]\n"
        f"if a == ['--help']:\n    sys.stdout.write({FIT_HELP!r})\n    sys.exit(0)\n"
        "with open(os.path.join(os.path.dirname(sys.argv[0]), 'asked.log'), 'a') as f:\n"
        "    f.write(' '.join(a) + '\\n')\n"
        "c = int(a[a.index('-c') + 1])\n"
        f"print(f'CUDA0 {{0 + {extra_model_mib}}} {{c * 512 >> 20}} {compute_mib}')\n"
        "print('Host 0 0 1')\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return server


@pytest.mark.parametrize("extra", [0, 4])
def test_llama_cpp_s_larger_weights_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int
) -> None:
    import json

    from tests.support import DENSE

    server = _fake_build(tmp_path / "bin", extra)
    env = {
        "LLAMA_SERVER": str(server),
        "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache"),
        "LLAMAFIT_CALIBRATION": str(tmp_path / "none.jsonl"),
    }
    result = CliRunner(env=env).invoke(
        cli, ["plan", str(DENSE), "--reserve", "0", "--ram", "8GiB", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    gpu = plan["devices"][0]
    # its model column over llamafit's 228 KiB of weights
    room = extra and extra * MIB - gpu["weights_bytes"]
    assert (gpu["name"], gpu["total_bytes"], gpu["overhead_bytes"], gpu["weights_bytes"]) == (
        "CUDA0",
        16 * MIB,
        room,
        233472,
    )
    check = plan["llama_cpp_check"]
    assert (check["tool"], check["agrees"], check["build"][:7]) == (
        "llama-fit-params",
        extra == 0,
        "sha256:",
    )
    notes = [w["text"] for w in plan["warnings"] if w["code"] == "server_devices"]
    assert notes == (
        []
        if extra == 0
        else [
            "CUDA0: llama.cpp's own estimate holds 4 MiB more weights than llamafit's: "
            "planned with that much more room"
        ]
    )


def _plan_dense(env: dict[str, str], *flags: str) -> dict:
    from tests.support import DENSE

    argv = ["plan", str(DENSE), "--reserve", "0", "--ram", "8GiB", "--json", *flags]
    result = CliRunner(env=env).invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


RECORDED_NOTE = "CUDA0: planned with 4 MiB more room for weights, as llama.cpp's own estimate"


def test_a_recorded_difference_starts_later_plans_for_that_build_and_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first plan re-solves with llama.cpp's 4 MiB more weights and records it; later plans of
    the same build and device start from it (one solve), not with --no-llama-check (#37 F10);
    another build or another card behind the same name does not."""
    from llamafit.commands import plan as plan_command
    from llamafit.commands.records import load

    solves = []
    real = plan_command.plan
    monkeypatch.setattr(plan_command, "plan", lambda *a, **k: solves.append(1) or real(*a, **k))
    server = _fake_build(tmp_path / "bin", 4)
    cache, calibration = str(tmp_path / "cache"), str(tmp_path / "none.jsonl")
    env = {"LLAMA_SERVER": str(server), "LLAMAFIT_CACHE_DIR": cache}
    env["LLAMAFIT_CALIBRATION"] = calibration
    room = 4 * MIB - 233472  # llama.cpp's model column over llamafit's 228 KiB of weights

    def planned(env: dict[str, str], *flags: str) -> tuple[int, int, dict | None, list[str]]:
        solves.clear()
        plan = _plan_dense(env, *flags)
        codes = ("llama_cpp_recorded", "server_devices")
        notes = [w["text"] for w in plan["warnings"] if w["code"] in codes]
        overhead = plan["devices"][0]["overhead_bytes"]
        return len(solves), overhead, plan.get("llama_cpp_recorded"), notes

    solved = "CUDA0: llama.cpp's own estimate holds 4 MiB more weights than llamafit's"
    assert planned(env) == (2, room, None, [f"{solved}: planned with that much more room"])
    identity = build_identity(str(server), "version: 0.6.0-dev (build 0, commit unknown)")
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", cache)
    entries = load(identity)
    device = ("CUDA0", "NVIDIA GeForce RTX 4090", 16 * MIB, "llama:188992:267776")
    assert [(e["device"], e["card"], e["total_bytes"], e["model"]) for e in entries] == [device] * 3
    assert [(e["kind"], e["bytes"], e["agrees"], e["config"]["n_ctx"]) for e in entries] == [
        ("model", room, False, 4096),
        ("context", 0, False, 4096),
        ("compute", 2 * MIB - 1325056, False, 4096),
    ]

    assert planned(env, "--no-llama-check") == (1, 0, None, [])  # #37 F10: nothing of it
    for flags, checked in (((), True),):
        n, overhead, recorded, notes = planned(env, *flags)
        assert (n, overhead) == (1, room)  # the first solve is already right: no re-solve
        assert recorded is not None
        shown = [recorded[k] for k in ("build", "checked", "room", "tensor_limits")]
        assert shown == [identity, checked, [{"device": "CUDA0", "bytes": room}], []]
        assert [(d["kind"], d["bytes"], d["applied"]) for d in recorded["differences"]] == [
            ("model", room, True),
            ("context", 0, False),
            ("compute", 2 * MIB - 1325056, False),
        ]
        tail = "" if checked else "; llama.cpp not asked this time"
        assert notes == [f"{RECORDED_NOTE} for this build showed before{tail}"]

    other_card = planned(env | {"FAKE_CUDA0_MIB": "32"})
    another = _fake_build(tmp_path / "bin2", 4, build="another")
    other_build = planned(env | {"LLAMA_SERVER": str(another)})
    assert other_card[2] is other_build[2] is None  # solved afresh, nothing recorded applied


def test_llama_cpp_s_larger_compute_wins_and_a_cached_plan_asks_nothing(tmp_path: Path) -> None:
    """llama-fit-params' CUDA0 compute column (5 MiB) over llamafit's figure for its own graph
    (1,325,056 bytes: the graph replay's, since CUDA's refused ops are placed on the CPU) beyond print precision: a
    llama_compute_differs warning with the numbers, the plan keeps the difference as room on CUDA0,
    and the difference is recorded for the build; the next plan of the same question starts from
    the record and asks no llama-fit-params (its answer is kept on disk)."""
    server = _fake_build(tmp_path / "bin", 0, compute_mib=5)
    env = {
        "LLAMA_SERVER": str(server),
        "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache"),
        "LLAMAFIT_CALIBRATION": str(tmp_path / "none.jsonl"),
    }
    room = 5 * MIB - 1325056
    first = _plan_dense(env)
    assert first["devices"][0]["overhead_bytes"] == room
    assert [c for c in first["llama_cpp_check"]["compute"] if c["device"] == "CUDA0"] == [
        {
            "device": "CUDA0",
            "mib": 5,
            "llamafit_bytes": 1325056,
            "difference_bytes": room,
            "compute_source": "graph",
            "agrees": False,
        }
    ]
    warned = [w for w in first["warnings"] if w["code"] == "llama_compute_differs"]
    assert warned == [
        {
            "code": "llama_compute_differs",
            "device": "CUDA0",
            "llama_mib": 5,
            "llamafit_bytes": 1325056,
            "difference_bytes": room,
            "compute_source": "graph",
            "taken": "llama.cpp",
            "text": "CUDA0: llama.cpp's dry run reserves 5 MiB of compute, llamafit's graph "
            "replay 1.3 MiB for the same graph; planned with llama.cpp's larger figure",
        }
    ]
    notes = [w["text"] for w in first["warnings"] if w["code"] == "server_devices"]
    assert notes == [
        "CUDA0: llama.cpp's own estimate holds 4 MiB more compute than llamafit's: planned with "
        "that much more room"
    ]
    asked = (tmp_path / "bin" / "asked.log").read_text().splitlines()
    assert len(asked) == 1  # the re-solve picked the same config: the same question, asked once
    again = _plan_dense(env)
    assert (tmp_path / "bin" / "asked.log").read_text().splitlines() == asked  # no process
    assert again["devices"][0]["overhead_bytes"] == room
    recorded = again["llama_cpp_recorded"]
    assert [(d["kind"], d["bytes"], d["applied"]) for d in recorded["differences"]] == [
        ("model", -233472, False),
        ("context", 0, False),
        ("compute", room, True),
    ]
    assert again["llama_cpp_check"] == first["llama_cpp_check"]


@pytest.mark.parametrize(("same_graph", "applied"), [(True, True), (None, False)])
def test_a_compute_difference_recorded_before_the_same_graph_is_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same_graph: bool | None, applied: bool
) -> None:
    """A compute difference recorded by an earlier llamafit was taken at llama-server's graph: on
    the output layer's device it held llama.cpp's worst-case logits (hundreds of MiB for a large
    vocabulary), so only one that says `same_graph` is room."""
    from llamafit.commands.records import load, store

    server = _fake_build(tmp_path / "bin", 0)
    env = {
        "LLAMA_SERVER": str(server),
        "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache"),
        "LLAMAFIT_CALIBRATION": str(tmp_path / "none.jsonl"),
    }
    _plan_dense(env)  # records this build's entries (they agree)
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", env["LLAMAFIT_CACHE_DIR"])
    identity = build_identity(str(server), "version: 0.6.0-dev (build 0, commit unknown)")
    entry = next(e for e in load(identity) if e["kind"] == "compute")
    assert entry["same_graph"] is True
    old = {k: v for k, v in entry.items() if k != "same_graph"}
    extra = {} if same_graph is None else {"same_graph": same_graph}
    store(identity, [old | {"bytes": 3 * MIB, "agrees": False} | extra])
    plan = _plan_dense(env)
    assert plan["devices"][0]["overhead_bytes"] == (3 * MIB if applied else 0)
    if not applied:  # nothing recorded applies: the plan shows none
        assert "llama_cpp_recorded" not in plan
        return
    recorded = plan["llama_cpp_recorded"]["differences"]
    assert [(d["kind"], d["bytes"], d["applied"]) for d in recorded] == [
        ("model", -233472, False),
        ("context", 0, False),
        ("compute", 3 * MIB, True),
    ]


@pytest.mark.parametrize("tty", [True, False])
def test_progress_shows_while_llama_cpp_answers_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tty: bool
) -> None:
    from llamafit.commands import llama_check
    from tests.support import DENSE

    monkeypatch.setattr(llama_check, "stderr_is_tty", lambda: tty)
    server = _fake_build(tmp_path / "bin", 0)
    env = {"LLAMA_SERVER": str(server), "LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")}
    result = CliRunner(env=env).invoke(cli, ["plan", str(DENSE), "--reserve", "0", "--ram", "8GiB"])
    assert result.exit_code == 0, result.output
    shown = "\rasking llama.cpp (llama-fit-params) about this config…\r\033[K"
    assert result.stderr == (shown if tty else "")


def test_a_damaged_record_is_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamafit.commands.records import load, record_path, store

    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path))
    good = {"device": "CUDA0", "card": None, "total_bytes": 0, "model": "m", "kind": "model"}
    good["bytes"] = 5
    limit = {"device": "Vulkan0", "card": "lavapipe", "total_bytes": 1, "max_tensor_bytes": 1 << 27}
    bad = [
        {"device": "CUDA0", "kind": "weights", "bytes": 5, "model": "m"},
        {"device": "CUDA0", "kind": "model", "bytes": 1.5, "model": "m"},
        {"device": 1, "max_tensor_bytes": 1},
        {"device": "Vulkan0", "max_tensor_bytes": True},
        [],
    ]
    path = Path(record_path("b1"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": 1, "identity": "b1", "entries": [good, *bad, limit]}))
    assert load("b1") == [good, limit] and load("b2") == []
    for text in (
        "not json",
        "[]",
        '{"format": 2, "identity": "b1", "entries": []}',
        json.dumps({"format": 1, "identity": "b2", "entries": [good]}),
    ):
        path.write_text(text)
        assert load("b1") == []
    path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    path.symlink_to(elsewhere)
    elsewhere.write_text(json.dumps({"format": 1, "identity": "b1", "entries": [good]}))
    assert load("b1") == []
    store("b1", [limit])  # a link in its place is never followed: not written (write_atomic)
    assert path.is_symlink() and json.loads(elsewhere.read_text())["entries"] == [good]


def test_the_speed_estimate_uses_the_bandwidth_of_the_card_the_server_names() -> None:
    from llamafit.commands.speed_inputs import gpu_rates

    listed = (
        ListedDevice("Vulkan0", "vulkan", "NVIDIA GeForce RTX 4090", 24564 * MIB, 24000 * MIB),
        ListedDevice(
            "Vulkan1", "vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", 2048 * MIB, 2048 * MIB
        ),
    )
    hw = server_hardware(listed, Hardware((), HOST, "none"), (), "llama-server")
    rates = [gpu_rates(g)[0] for g in hw.gpus]
    assert [(r.value, r.source) if r else None for r in rates] == [
        (1008e9, "catalog: NVIDIA GeForce RTX 4090"),
        None,
    ]


@pytest.mark.parametrize(
    ("reported", "planned", "expected"),
    [
        (None, ["CUDA0"], None),  # a build that lists nothing: the buffers decide
        ([{"name": "Vulkan0", "backend": "vulkan"}], ["Vulkan0"], None),
        (
            [{"name": "Vulkan0", "backend": "vulkan"}],
            [],
            "the server lists Vulkan0, the plan has none (CPU only)",
        ),
        ([], ["CUDA0", "CUDA1"], "the server lists no GPU, the plan has CUDA0, CUDA1"),
        ([{"name": "RPC0[h:1]", "backend": "rpc"}], ["RPC0[h:1]"], None),
    ],
)
def test_a_run_on_other_devices_than_planned_is_a_mismatch(
    reported: list | None, planned: list[str], expected: str | None
) -> None:
    assert devices_mismatch(reported, planned) == expected


def test_an_integrated_gpu_and_the_host_are_one_pool() -> None:
    """Strix Halo under Vulkan: the server sums the 64 GiB carve-out and the 48 GiB GTT (112 GiB,
    111 free) while the host has 58 GiB available of its 62: the plan gets the carve-out's free and
    44 GiB of the host's RAM, and the host keeps the 14 GiB the GPU cannot map."""
    from llamafit.machine.vulkan import VulkanDevice

    gib = 1 << 30
    name = "AMD Radeon 8060S Graphics (RADV GFX1151)"
    listed = (ListedDevice("Vulkan0", "vulkan", name, 112 * gib, 111 * gib),)
    card = GPUInfo(
        DeviceSpec("ROCm0", "gpu", "rocm", 64 * gib, 63 * gib),
        "AMD Radeon 8060S Graphics",
        0,
        used_bytes=1 * gib,
        shared_total_bytes=48 * gib,
        shared_used_bytes=0,
    )
    detected = Hardware((card,), host(62 * gib, 58 * gib), "sysfs")
    vk = VulkanDevice(
        0, name, "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU", 64 * gib, None, None, None, False
    )
    hw = server_hardware(listed, detected, (vk,), "llama-server")
    (gpu,) = hw.gpus
    assert (gpu.spec.total_bytes, gpu.spec.free_bytes) == (112 * gib, 107 * gib)
    assert (hw.host.total_bytes, hw.host.free_bytes) == (62 * gib, 14 * gib)
    assert hw.notes == (
        "Vulkan0: llama-server reports 112.0 GiB, 111.0 GiB free (more than the OS has free); "
        "planned with 112.0 GiB, 107.0 GiB free, 44.0 GiB of it the host's RAM, which the CPU is "
        "planned without (14.0 GiB left to it)",
    )
    # a discrete card beside the same host: nothing borrowed, nothing said
    dgpu = (ListedDevice("Vulkan0", "vulkan", "AMD Radeon RX 7900 XTX", 24 * gib, 23 * gib),)
    discrete = VulkanDevice(
        0,
        "AMD Radeon RX 7900 XTX",
        "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU",
        None,
        None,
        None,
        None,
        False,
    )
    hw = server_hardware(dgpu, Hardware((), host(62 * gib, 58 * gib), "none"), (discrete,), "s")
    assert (hw.gpus[0].spec.free_bytes, hw.host.free_bytes, hw.notes) == (23 * gib, 58 * gib, ())
