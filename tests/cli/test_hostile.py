"""Hostile input (issue #16): each finding reproduced, each failure one line `Error: …` and exit
2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.reader.header import read_header
from llamafit.reader.source import BytesSource
from tests.support import FIXTURES
from tests.support.scripts import script

patch = script("gguf_patch").patch

U32, I32, U64, I64 = 4, 5, 10, 11


def _header(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data[: read_header(BytesSource(data)).data_offset]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---- facts: impossible counts name the key and the value ---------------------------------------

FACT_CASES = [
    (
        "nextn-glm4moe.gguf",
        "glm4moe.nextn_predict_layers",
        I32,
        -1,
        "key glm4moe.nextn_predict_layers = -1 is negative",
    ),
    (
        "nextn-glm4moe.gguf",
        "glm4moe.nextn_predict_layers",
        U32,
        4,
        "key glm4moe.nextn_predict_layers = 4 leaves no layer of block_count 4 to run",
    ),
    (
        "dense-llama.gguf",
        "llama.nextn_predict_layers",
        I64,
        -(2**63),
        ("key llama.nextn_predict_layers = -9223372036854775808 is negative"),
    ),
    (
        "dense-llama.gguf",
        "llama.embedding_length",
        U32,
        0,
        "key llama.embedding_length = 0 must be at least 1",
    ),
    (
        "dense-llama.gguf",
        "llama.context_length",
        U64,
        2**40,
        ("key llama.context_length = 1099511627776 is larger than a 32-bit count"),
    ),
    (
        "dense-llama.gguf",
        "llama.attention.head_count_kv",
        9,
        (I32, [2, -1, 2, 2]),
        "key llama.attention.head_count_kv = -1 is negative",
    ),
    (
        "moe-qwen3.gguf",
        "qwen3moe.expert_used_count",
        U32,
        9,
        "key qwen3moe.expert_used_count = 9 must be 1..expert_count (8)",
    ),
    (
        "moe-qwen3.gguf",
        "qwen3moe.expert_count",
        U32,
        4096,
        "key qwen3moe.expert_count = 4096 exceeds LLAMA_MAX_EXPERTS (1024)",
    ),
    (
        "swa-gemma3.gguf",
        "gemma3.attention.sliding_window",
        I32,
        -5,
        "key gemma3.attention.sliding_window = -5 is negative",
    ),
]


@pytest.mark.parametrize(
    ("fixture", "key", "vtype", "value", "message"),
    FACT_CASES,
    ids=[c[1] + "=" + str(c[3])[:12] for c in FACT_CASES],
)
@pytest.mark.parametrize("command", ["check", "plan", "inspect"])
def test_impossible_fact_is_one_line_naming_key_and_value(
    tmp_path: Path, command: str, fixture: str, key: str, vtype: int, value: object, message: str
) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(patch(_header(fixture), key, vtype, value))
    args = [command, str(path)] + (["--gpu", "8GiB"] if command != "inspect" else [])
    assert _invoke(*args) == (2, "", f"Error: {path}: {message}\n")


def test_good_fixture_beside_the_patched_ones(tmp_path: Path) -> None:
    path = tmp_path / "good.gguf"
    path.write_bytes(patch(_header("nextn-glm4moe.gguf"), "glm4moe.nextn_predict_layers", U32, 1))
    code, _out, err = _invoke("plan", str(path), "--gpu", "8GiB")
    assert (code, err) == (0, "")


# ---- numbers bounded at parse time; every refusal says why -------------------------------------

_BIG = "9" * 5000
_M = str(FIXTURES / "dense-llama.gguf")
_CUT = "9" * 39 + "…"

NUMBER_CASES = [
    (
        ["plan", _M, "--gpu", "8GiB", "--", "-c", _BIG],
        {},
        f"Error: -c is out of range, got {_CUT}\n",
    ),
    (
        ["plan", _M, "--gpu", "8GiB"],
        {"LLAMA_ARG_CTX_SIZE": _BIG},
        f"Error: LLAMA_ARG_CTX_SIZE is out of range, got {_CUT}\n",
    ),
    (
        ["plan", _M, "--gpu", _BIG + "GiB"],
        {},
        f"Error: memory size '{_CUT}' is too large (at most 1 EiB)\n",
    ),
    (
        ["plan", _M, "--gpu", "8GiB", "--rpc", "h:1=" + _BIG],
        {},
        f"Error: memory size '{_CUT}' is too large (at most 1 EiB)\n",
    ),
    (
        ["plan", _M, "--gpu", "8GiB", "--reserve", "99999999999999"],
        {},
        "Error: Invalid value for '--reserve': 99999999999999 is not in the range 0<=x<=1073741824 "
        "(see cli plan -h)\n",
    ),
    (
        ["plan", _M, "--gpu", "8GiB", "--ctx", "99999999999"],
        {},
        "Error: Invalid value for '--ctx': 99999999999 is not in the range 256<=x<=2147483647 "
        "(see cli plan -h)\n",
    ),
    (
        ["plan", _M, "--gpu", "8GiB", "--rpc", "h:1=1GiB,h:1=2GiB"],
        {},
        "Error: --rpc names h:1 twice; give each worker once\n",
    ),
    (
        ["check", _M, "--gpu", "8GiB", "--", "-c", "2147483648"],
        {},
        "Error: -c is out of range, got 2147483648\n",
    ),
    (
        ["check", _M, "--gpu", "8GiB", "--", "-fitt", _BIG],
        {},
        f"Error: -fitt is out of range, got '{_CUT}'\n",
    ),
    (
        ["check", _M, "--gpu", "8GiB", "--", "-ts", "1," + _BIG],
        {},
        f"Error: -ts is out of range, got '1,{_CUT[:-3]}…'\n",
    ),
]


@pytest.mark.parametrize(
    ("args", "env", "message"), NUMBER_CASES, ids=[" ".join(c[0][2:])[:30] for c in NUMBER_CASES]
)
def test_huge_numbers_are_one_line_errors(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], message: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = _invoke(*args)
    assert (code, out, err) == (2, "", message)


def test_largest_context_llama_server_takes_is_planned_with_a_verdict() -> None:
    code, out, err = _invoke("check", _M, "--gpu", "8GiB", "--", "-c", "2147483647")
    assert code == 1 and err == ""
    assert "Verdict    does not fit" in out


# ---- -ot: std::regex syntax, bounded cost, known devices ---------------------------------------

OT_CASES = [
    (
        "(((=CPU",
        "Error: -ot regex '(((' is invalid: missing ), unterminated subpattern at position 2\n",
    ),
    ("[=CPU", "Error: -ot regex '[' is invalid: unterminated character set at position 0\n"),
    (
        "(.*)*(.*)*(.*)*(.*)*x=CPU",
        (
            "Error: -ot regex '(.*)*(.*)*(.*)*(.*)*x' is too expensive to match (a quantifier "
            "inside a quantified group: exponential backtracking)\n"
        ),
    ),
    (
        "(blk|ffn)+x=CPU",
        (
            "Error: -ot regex '(blk|ffn)+x' is too expensive to match (alternatives inside a "
            "quantified group: exponential backtracking)\n"
        ),
    ),
    (
        ".*a.*b.*c.*d=CPU",
        "Error: -ot regex '.*a.*b.*c.*d' is too expensive to match (4 unbounded repeats; at "
        "most 3)\n",
    ),
    ("(?i)BLK=CPU", "Error: -ot regex '(?i)BLK': '(?i' is not std::regex (ECMAScript) syntax\n"),
    (r"\Ablk=CPU", "Error: -ot regex '\\Ablk': '\\A' is not std::regex (ECMAScript) syntax\n"),
    ("blk.*+=CPU", "Error: -ot regex 'blk.*+': '*+' is not std::regex (ECMAScript) syntax\n"),
    (
        "blk=CUDA7",
        "Error: unknown buffer type 'CUDA7' in --override-tensor (devices: CPU, cuda0)\n",
    ),
]


@pytest.mark.parametrize(("rule", "message"), OT_CASES, ids=[c[0] for c in OT_CASES])
@pytest.mark.parametrize("command", ["check", "plan"])
def test_override_tensor_rules_are_checked_up_front(command: str, rule: str, message: str) -> None:
    assert _invoke(command, _M, "--gpu", "8GiB", "--", "-ot", rule) == (2, "", message)


@pytest.mark.parametrize(
    "rule",
    [
        r"blk\.(1[0-9]|2)\.ffn_.*_exps=CPU",
        r"\.ffn_(up|down)\.=CPU",
        "(ffn)+=CUDA0",
        r"blk\.\d+\.attn=CUDA0_Host",
        r"\\A=CPU",
    ],
)
def test_ordinary_override_rules_still_plan(rule: str) -> None:
    code, _, err = _invoke("plan", _M, "--gpu", "8GiB", "--", "-ot", rule)
    assert (code, err) == (0, "")


# ---- the cache directory: schema-checked records, regular files only, bounded, private ---------

_GOOD_RECORD = {
    "server": {"build": None},
    "architecture": "llama",  # calibration is kept per model class (issue #10)
    "hardware": [{"name": "CUDA0", "backend": "cuda"}],
    "compute_scale": 1.0,
    "buffers": [
        {"device": "CUDA0", "kind": "compute", "predicted_mib": 100.0, "actual_mib": 110.0}
    ],
}
BAD_RECORDS = [
    ({"server": "b9000"}, "server is not an object with an integer build"),
    ({"server": [1]}, "server is not an object with an integer build"),
    ({"buffers": "compute"}, "buffers is not a list of objects"),
    (
        {"buffers": [{"kind": "compute", "predicted_mib": "100", "actual_mib": 110.0}]},
        "a buffer size is not a number",
    ),
    ({"compute_scale": "NaN"}, "compute_scale is not a positive number"),
    ({"hardware": {"name": "CUDA0"}}, "hardware is not a list of objects"),
]


def _plan_with_calibration(monkeypatch: pytest.MonkeyPatch, path: Path) -> tuple[int, str, str]:
    monkeypatch.setenv("LLAMAFIT_CALIBRATION", str(path))
    return _invoke("plan", _M, "--gpu", "8GiB")


@pytest.mark.parametrize(("change", "problem"), BAD_RECORDS, ids=[p for _, p in BAD_RECORDS])
def test_a_damaged_calibration_record_is_skipped_with_a_note(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, change: dict, problem: str
) -> None:
    import json

    path = tmp_path / "calibration.jsonl"
    path.write_text(json.dumps({**_GOOD_RECORD, **change}) + "\n" + json.dumps(_GOOD_RECORD) + "\n")
    code, out, err = _plan_with_calibration(monkeypatch, path)
    assert (code, err) == (0, "")
    text = " ".join(out.split())
    assert (
        "compute buffers scaled by 1.100: the median of 1 earlier run of llama models on "
        f"CUDA0 ({path})" in text
    )
    assert f"calibration: skipped 1 damaged record(s) in {path} ({problem})" in text


@pytest.mark.parametrize(
    ("backend", "build", "scaled"),
    [("cuda", None, True), ("vulkan", None, False), ("metal", 8000, True), ("vulkan", 8121, True)],
)
def test_calibration_is_not_applied_where_the_replay_gives_the_compute_buffers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str, build: int | None, scaled: bool
) -> None:
    """A record for the same device name scales the hand-derived peaks of a CUDA plan; on Vulkan
    the graph replay gives the compute buffers themselves (memory/graph/replay.py). On Metal at a
    build the replay covers, it covers some configs only (one device, every layer, an f16 cache),
    as on Vulkan before b11400 (some caches, known device limits): the correction stays for the
    hand peaks of the others."""
    import json

    device = {"cuda": "CUDA0", "vulkan": "Vulkan0", "metal": "MTL0"}[backend]
    record = json.loads(json.dumps(_GOOD_RECORD).replace("CUDA0", device).replace("cuda", backend))
    record["server"] = {"build": build}
    path = tmp_path / "calibration.jsonl"
    path.write_text(json.dumps(record) + "\n")
    monkeypatch.setenv("LLAMAFIT_CALIBRATION", str(path))
    pinned = [] if build is None else ["--llama-build", str(build)]
    code, out, err = _invoke("plan", _M, "--gpu", "8GiB", "--backend", backend, *pinned)
    assert (code, err) == (0, "")
    assert ("compute buffers scaled by 1.100" in " ".join(out.split())) == scaled


@pytest.mark.parametrize(
    "text", ['{"compute_scale": NaN}', '{"buffers": [{"predicted_mib": Infinity}]}', "[" * 100000]
)
def test_nan_infinity_and_deep_json_are_damaged_records(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str
) -> None:
    path = tmp_path / "calibration.jsonl"
    path.write_text(text + "\n")
    code, out, err = _plan_with_calibration(monkeypatch, path)
    assert (code, err) == (0, "")
    assert f"skipped 1 damaged record(s) in {path}" in " ".join(out.split())


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "directory"])
def test_calibration_file_that_is_not_a_regular_file_is_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    import os

    path = tmp_path / "calibration.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    code, out, err = _plan_with_calibration(monkeypatch, path)
    assert (code, err) == (0, "")
    why = {
        "fifo": "is not a regular file",
        "dev-zero-link": "is a symbolic link",
        "directory": "is not a regular file",
    }
    assert f"calibration: {path} not read: {why[kind]}" in " ".join(out.split())


def test_calibration_append_refuses_a_planted_symlink(tmp_path: Path) -> None:
    from llamafit.safe_io import UnsafeFile, append_line

    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "calibration.jsonl").symlink_to(victim)
    with pytest.raises(UnsafeFile, match="is a symbolic link"):
        append_line(tmp_path / "cache" / "calibration.jsonl", "{}")
    assert victim.read_text() == "theirs\n"


def test_cache_writes_are_private_and_never_follow_a_planted_link(tmp_path: Path) -> None:
    import stat

    from llamafit.safe_io import UnsafeFile, write_atomic

    cache = tmp_path / "cache" / "server-dialects"
    write_atomic(cache / "a.json", b"{}")
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE((cache / "a.json").stat().st_mode) == 0o600
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    (cache / "b.json").symlink_to(victim)
    with pytest.raises(UnsafeFile, match="is a symbolic link"):
        write_atomic(cache / "b.json", b"{}")
    assert victim.read_text() == "theirs\n"
    # no temp file left behind
    assert sorted(p.name for p in cache.iterdir()) == [
        "a.json",
        "b.json",
    ]


@pytest.mark.parametrize(
    "content", ["[1, 2]", '"text"', '{"format": 1, "build": "x"}', "{" * 50000, "NaN"]
)
def test_a_damaged_dialect_record_is_probed_again(tmp_path: Path, content: str) -> None:
    from llamafit.server.find import _load_cached

    path = tmp_path / "d.json"
    path.write_text(content)
    assert _load_cached(str(path)) is None


def test_a_junk_cached_header_of_the_right_length_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.fetch.model_source import (
        CachedHeader,
        _cache_file,
        load_header,
        save_header,
    )

    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path))
    url = "http://127.0.0.1:1/m.gguf"
    save_header(CachedHeader(url, '"etag"', 1000, _header("dense-llama.gguf")[:500]))
    assert load_header(url) == CachedHeader(url, '"etag"', 1000, _header("dense-llama.gguf")[:500])
    _cache_file("header", url, "gguf").write_bytes(b"\0" * 500)
    assert load_header(url) is None


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "huge"])
def test_api_key_file_is_a_small_regular_file(tmp_path: Path, kind: str) -> None:
    import os

    path = tmp_path / "key"
    if kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"k" * (1 << 20))
    code, _out, err = _invoke("run", _M, "--gpu", "8GiB", "--dry-run", "--api-key-file", str(path))
    why = {
        "dev-zero": "is not a regular file",
        "fifo": "is not a regular file",
        "huge": "is larger than 65,536 bytes",
    }
    assert (code, err) == (2, f"Error: --api-key-file {path}: {why[kind]}\n")


# ---- remote reads: bounded bytes and time, credentials stay home, http(s) only -----------------


@pytest.mark.parametrize(
    ("mode", "message", "transferred", "requests"),
    [  # a budget the header cannot fit in fails before the read; one it might fit in, at the budget
        (
            "huge-vocab",
            "at byte 263: the value of 'tokenizer.ggml.tokens' needs at least 8,796,093,022,208 "
            "more bytes, more than the 67,108,864 bytes left of this source's header budget",
            1024,
            1,
        ),
        (
            "long-vocab",
            "the header would need more than 67,108,864 bytes; not a plausible GGUF header",
            56_404_005,
            7,
        ),
        (
            "huge-string",
            "string length 1152921504606846976 in the value of 'general.name' exceeds",
            1024,
            1,
        ),
    ],
)
def test_a_header_that_lies_about_its_size_reads_a_bounded_amount(
    mode: str, message: str, transferred: int, requests: int
) -> None:
    hostile_server = script("hostile_http").hostile_server

    from llamafit.errors import InputError
    from llamafit.fetch.remote import HttpRangeSource

    with hostile_server(mode) as (url, _):
        src = HttpRangeSource(url)
        with pytest.raises(InputError, match=message):
            read_header(src)
    assert (src.bytes_transferred, src.requests) == (transferred, requests)


def test_a_server_sending_more_than_asked_is_cut_off() -> None:
    hostile_server = script("hostile_http").hostile_server

    from llamafit.errors import InputError
    from llamafit.fetch.remote import FIRST_WINDOW, HttpRangeSource

    with hostile_server("lying-range") as (url, _):
        src = HttpRangeSource(url)
        with pytest.raises(InputError):
            read_header(src)
    assert src.bytes_transferred <= 2 * FIRST_WINDOW


@pytest.mark.parametrize("mode", ["slowloris"])
def test_a_dribbling_server_meets_the_total_deadline(mode: str) -> None:
    hostile_server = script("hostile_http").hostile_server

    from llamafit.fetch.remote import HttpRangeSource, RemoteUnreachable

    with hostile_server(mode, dribble=0.05) as (url, _):
        src = HttpRangeSource(url, deadline=0.5)
        with pytest.raises(RemoteUnreachable, match=r"gave up after 0.5 s \(\d+ bytes received\)"):
            read_header(src)


def test_credentials_never_follow_a_redirect_to_another_host() -> None:
    hostile_server = script("hostile_http").hostile_server

    from llamafit.errors import InputError
    from llamafit.fetch.remote import HttpRangeSource

    with hostile_server("cross-redir") as (url, seen):
        with pytest.raises(InputError, match="HTTP 404"):
            read_header(
                HttpRangeSource(url, headers={"Authorization": "Bearer secret", "Cookie": "c=1"})
            )
    assert [("Authorization" in h, "Cookie" in h, h["Host"].split(":")[0]) for h in seen] == [
        (True, True, "127.0.0.1"),
        (False, False, "localhost"),
    ]


def test_a_redirect_to_another_scheme_is_refused() -> None:
    hostile_server = script("hostile_http").hostile_server

    with hostile_server("scheme-redir") as (url, _):
        assert _invoke("inspect", url) == (
            2,
            "",
            f"Error: {url}: refusing a redirect to file:///etc/passwd (only http and https)\n",
        )


@pytest.mark.parametrize(
    ("name", "no", "count"),
    [
        ("m-00000-of-00000.gguf", 0, 0),
        ("m-00002-of-00001.gguf", 2, 1),
        ("m-00000-of-00003.gguf", 0, 3),
    ],
)
@pytest.mark.parametrize("command", ["inspect", "check", "plan"])
def test_impossible_split_names_are_one_line(
    tmp_path: Path, command: str, name: str, no: int, count: int
) -> None:
    path = tmp_path / name
    path.write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
    args = [command, str(path)] + (["--gpu", "8GiB"] if command != "inspect" else [])
    assert _invoke(*args) == (
        2,
        "",
        f"Error: {path}: the name says shard {no} of {count}; split models number "
        "their shards 1 to N (-00001-of-0000N.gguf)\n",
    )


# ---- generated scripts refuse what a format cannot carry; terminal escapes from GGUFs escaped ---

_ESC = "a\x1b[31mb"


@pytest.mark.parametrize("kind", ["sh", "systemd", "llama-swap", "models-ini", "docker"])
@pytest.mark.parametrize(
    ("stem", "shown", "why"),
    [
        (_ESC, "a\\x1b[31mb", "contains the control character \\x1b; rename it"),
        ("t\tx", "t\\tx", "contains the control character \\t; rename it"),
    ],
)
def test_scripts_refuse_control_characters(
    tmp_path: Path, kind: str, stem: str, shown: str, why: str
) -> None:
    path = tmp_path / f"{stem}.gguf"
    path.write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
    code, out, err = _invoke("script", str(path), "--gpu", "8GiB", "--format", kind)
    assert (code, out, err) == (
        2,
        "",
        f"Error: {kind} output refused: {tmp_path}/{shown}.gguf {why}\n",
    )


@pytest.mark.parametrize("kind", ["systemd", "llama-swap", "models-ini", "docker"])
def test_scripts_refuse_non_utf8_paths_but_sh_keeps_the_bytes(tmp_path: Path, kind: str) -> None:
    import os

    raw = os.fsencode(str(tmp_path)) + b"/n\xffx.gguf"
    with open(raw, "wb") as f:
        f.write((FIXTURES / "dense-llama.gguf").read_bytes())
    path = os.fsdecode(raw)
    code, out, err = _invoke("script", path, "--gpu", "8GiB", "--format", kind)
    assert (code, err) == (
        2,
        f"Error: {kind} output refused: {tmp_path}/n\\udcffx.gguf is not valid UTF-8, which "
        f"{kind} files must be; rename it (or use --format sh)\n",
    )
    result = CliRunner().invoke(cli, ["script", path, "--gpu", "8GiB", "--format", "sh"])
    assert result.exit_code == 0
    assert b"-m '" + raw + b"'" in result.stdout_bytes  # the path as it is on disk, not altered


def test_systemd_refuses_a_tab_in_the_server_path() -> None:
    code, _, err = _invoke(
        "script", _M, "--gpu", "8GiB", "--format", "systemd", "--server", "/opt/a\tb/llama-server"
    )
    assert (code, err) == (
        2,
        "Error: systemd output refused: /opt/a\\tb/llama-server contains the control "
        "character \\t; rename it\n",
    )


def test_terminal_escapes_from_a_model_are_printed_escaped(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(
        patch(_header("dense-llama.gguf"), "general.name", 8, "\x1b]0;pwned\x07\x1b[2J")
    )
    code, out, _ = _invoke("inspect", str(path))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "Name           \\x1b]0;pwned\\x07\\x1b[2J\n" in out
    bad = tmp_path / "k.gguf"
    bad.write_bytes(patch(_header("dense-llama.gguf"), "llama.context_length", 8, "\x1b[31mred"))
    code, out, err = _invoke("plan", str(bad), "--gpu", "8GiB")
    assert (code, err) == (
        2,
        f"Error: {bad}: key llama.context_length has type str, expected int\n",
    )
    esc = tmp_path / "e.gguf"
    esc.write_bytes(patch(_header("dense-llama.gguf"), "general.architecture", 8, "ll\x1b[2Jama"))
    code, out, err = _invoke("plan", str(esc), "--gpu", "8GiB")
    assert "\x1b" not in out + err


@pytest.mark.parametrize("flag", ["-ncmoe", "-ncffn"])
def test_cpu_moe_and_ffn_counts_beyond_the_model_are_bounded(flag: str) -> None:
    """Found by scripts/fuzz/fuzz.py: -ncmoe 2147483647 built 2**31 override rules (minutes,
    gigabytes)."""
    code, out, err = _invoke("check", _M, "--gpu", "8GiB", "--", flag, "2147483647")
    assert (code, err) == (0, "")
    assert "Verdict" in out


def test_a_path_with_terminal_escapes_is_printed_escaped_in_plan(tmp_path: Path) -> None:
    path = tmp_path / "a\x1b[2Jb.gguf"
    path.write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
    code, out, err = _invoke("plan", str(path), "--gpu", "8GiB")
    assert (code, err) == (0, "")
    assert "\x1b" not in out
    assert out.count("/a\\x1b[2Jb.gguf") == 2  # the Model line and the Command line
