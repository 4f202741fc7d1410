"""The second hostile-input campaign (issue #23): each finding reproduced before its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from gguf_patch import drop, patch

from llamafit.cli import cli
from llamafit.reader.header import read_header
from llamafit.reader.source import BytesSource

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
    ("dense-llama.gguf", _HC, 0, "key llama.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
     "has 2 KV head(s)"),
    ("dense-llama.gguf", _HC, None, "key llama.attention.head_count is missing, which leaves no head size, yet "
     "layer 0 has 2 KV head(s)"),
    ("dense-llama.gguf", _HC, 2**31 - 1, "key llama.attention.head_count = 2147483647 with embedding_length 64 "
     "gives a key head size of 0, yet layer 0 has 2 KV head(s)"),
    ("dense-llama.gguf", _EL, 1, "key llama.attention.head_count = 4 with embedding_length 1 gives a key head "
     "size of 0, yet layer 0 has 2 KV head(s)"),
    ("dense-llama.gguf", "attention.key_length", 0, "key llama.attention.key_length = 0 must be at least 1, yet "
     "layer 0 has 2 KV head(s)"),
    ("swa-gemma3.gguf", _HC, 0, "key gemma3.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
     "has 2 KV head(s)"),
    ("swa-gptoss.gguf", "attention.key_length", 0, "key gpt-oss.attention.key_length = 0 must be at least 1, yet "
     "layer 0 has 2 KV head(s)"),
    ("moe-qwen3.gguf", _HC, 0, "key qwen3moe.attention.head_count = 0 on layer 0 leaves no head size, yet layer 0 "
     "has 2 KV head(s)"),
    ("nextn-glm4moe.gguf", _HC, 0, "key glm4moe.attention.head_count = 0 on layer 0 leaves no head size, yet "
     "layer 0 has 2 KV head(s)"),
    ("mla-deepseek2.gguf", _HC, 0, "key deepseek2.attention.head_count = 0 on layer 0 leaves no head size, yet "
     "layer 0 has 1 KV head(s)"),
    ("hybrid-granite.gguf", _HC, 2**31 - 1, "key granitehybrid.attention.head_count = 2147483647 with "
     "embedding_length 64 gives a key head size of 0, yet layer 2 has 2 KV head(s)"),
    ("hybrid-granite.gguf", _EL, 1, "key granitehybrid.attention.head_count = 4 with embedding_length 1 gives a "
     "key head size of 0, yet layer 2 has 2 KV head(s)"),
    ("per-layer-kv.gguf", _EL, 1, "key deci.attention.head_count = 4 with embedding_length 1 gives a key head "
     "size of 0, yet layer 0 has 2 KV head(s)"),
]  # fmt: skip


def _with(fixture: str, key: str, value: int | None) -> bytes:
    header = _header(fixture)
    arch = read_header(BytesSource((FIXTURES / fixture).read_bytes())).metadata["general.architecture"]
    name = f"{arch}.{key}"
    return drop(header, name) if value is None else patch(header, name, U32, value)


@pytest.mark.parametrize(("fixture", "key", "value", "message"), HEAD_CASES,
                         ids=[f"{c[0]}-{c[1]}={c[2]}" for c in HEAD_CASES])  # fmt: skip
@pytest.mark.parametrize("args", [["check", "--gpu", "8GiB", "--", "-ctk", "q8_0", "-fa", "on"],
                                  ["plan", "--gpu", "8GiB"], ["inspect"]])  # fmt: skip
def test_a_head_size_of_zero_is_refused_where_facts_are_read(
    tmp_path: Path, fixture: str, key: str, value: int | None, message: str, args: list[str]
) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(_with(fixture, key, value))
    assert _invoke(args[0], str(path), *args[1:]) == (2, "", f"Error: {path}: {message}\n")


@pytest.mark.parametrize("fixture", ["recurrent-mamba2.gguf", "swa-gemma3.gguf"])
def test_models_without_the_broken_heads_still_check_with_a_quantized_k(tmp_path: Path, fixture: str) -> None:
    # mamba2 has no attention (its head_count does not matter); gemma3 names key_length itself
    path = tmp_path / "ok.gguf"
    path.write_bytes(_with(fixture, _EL, 1) if fixture.startswith("swa") else _with(fixture, _HC, 0))
    code, _out, err = _invoke("check", str(path), "--gpu", "8GiB", "--", "-ctk", "q8_0", "-fa", "on")
    assert (code, err) == (0, "")


# ---- tracebacks: odd tensor names, non-UTF-8 names, a 5,000-digit GPU count -------------------


@pytest.mark.parametrize("name", [b"blk.x.ffn_gate.weight", b"blk.\xd9\xa1.ffn_gate.weight"[:21]])
def test_a_tensor_whose_layer_field_is_not_a_number_is_no_layer(tmp_path: Path, name: bytes) -> None:
    data = (FIXTURES / "dense-llama.gguf").read_bytes()
    assert data.count(b"blk.1.ffn_gate.weight") == 1 and len(name) == 21
    path = tmp_path / "odd.gguf"
    path.write_bytes(data.replace(b"blk.1.ffn_gate.weight", name))
    code, out, err = _invoke("plan", str(path), "--gpu", "8GiB")
    assert (code, err) == (0, "") and "Verdict" in out


def test_a_5000_digit_gpu_count_is_one_line() -> None:
    code, out, err = _invoke("plan", str(FIXTURES / "dense-llama.gguf"), "--gpu", "9" * 5000 + "xh100")
    assert (code, out, err) == (2, "", f"Error: --gpu {'9' * 39}…: a count must be 1 to 16 (e.g. 2xrtx4090)\n")


def test_ls_lists_a_model_whose_file_name_is_not_utf8(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "ok.gguf").write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
    with open(os.fsencode(models) + b"/\xff\xfe.gguf", "wb") as f:
        f.write((FIXTURES / "dense-llama.gguf").read_bytes())
    code, out, err = _invoke("ls", str(models), "--gpu", "8GiB", "--json",
                             env={"LLAMAFIT_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert (code, err) == (0, "")
    assert sorted(m["name"] for m in json.loads(out)["models"]) == ["ok", "\udcff\udcfe"]


def test_a_server_path_that_is_not_utf8_is_probed_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import NEW_HELP, NEW_VERSION, fake_server

    from llamafit.server.find import probe

    exe = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    odd = os.fsdecode(os.fsencode(tmp_path / "bin") + b"/srv\xff")
    os.rename(exe, odd)
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))
    first, second = probe(odd, os.environ), probe(odd, os.environ)  # probed, then read from the dialect cache
    assert first == second and first[1].startswith("version: 0.6.0-dev")
    assert (tmp_path / "bin" / "calls.log").read_text() == "--version\n--help\n"
    assert len(os.listdir(tmp_path / "cache" / "server-dialects")) == 1
