"""Many models: llama-swap config (checked against llama-swap's documented schema) and router presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import FIXTURES

from llamafit.cli import cli
from llamafit.many import pack, shares, swap_groups

jsonschema = pytest.importorskip("jsonschema", reason="the test extra's jsonschema checks llama-swap's schema")

# llama-swap's configuration schema as documented (config-schema.json, docs/configuration.md):
# the keys llamafit writes and their constraints.
SCHEMA = {
    "type": "object", "required": ["models"], "additionalProperties": False,
    "properties": {
        "macros": {"type": "object", "propertyNames": {"pattern": "^[a-zA-Z0-9_-]+$", "maxLength": 64,
                                                       "not": {"enum": ["PORT", "MODEL_ID"]}},
                   "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "models": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["cmd"], "additionalProperties": False,
            "properties": {"cmd": {"type": "string", "minLength": 1}, "proxy": {"type": "string"},
                           "ttl": {"type": "integer", "minimum": 0}, "metadata": {"type": "object"}}}},
        "groups": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["members"], "additionalProperties": False,
            "properties": {"swap": {"type": "boolean"}, "exclusive": {"type": "boolean"},
                           "persistent": {"type": "boolean"},
                           "members": {"type": "array", "items": {"type": "string"}}}}},
    },
}  # fmt: skip
QWEN = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"
SMALL = [FIXTURES / "dense-llama.gguf", FIXTURES / "moe-qwen3.gguf"]


@pytest.mark.parametrize("fps, caps, sets", [
    ([(10,), (10,), (10,)], (25,), [[0, 1], [2]]),
    ([(5,), (20,), (5,)], (25,), [[1, 0], [2]]),
    ([(30,), (1,)], (25,), [[0], [1]]),
    ([None, (1,), (1,)], (25,), [[0], [1, 2]]),
    ([(10, 1), (1, 10), (10, 10)], (12, 12), [[2], [0, 1]]),
])  # fmt: skip
def test_pack_first_fit_decreasing(fps: list, caps: tuple, sets: list) -> None:
    assert pack(fps, caps) == sets


def test_shares_split_the_leftover() -> None:
    assert shares([(10, 2), (4, 4)], (20, 10)) == [(13, 4), (7, 6)]


def test_swap_groups() -> None:
    assert swap_groups([["a", "b"], ["c"], ["d"]]) == [("together-1", False, ["a", "b"]), ("swap", True, ["c", "d"])]


def _swap(args: list[str]) -> dict:
    result = CliRunner().invoke(cli, ["script", "--format", "llama-swap", *args])
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.output)
    jsonschema.validate(config, SCHEMA)
    members = [m for g in config["groups"].values() for m in g["members"]]
    assert sorted(members) == sorted(config["models"])  # every model in exactly one group
    for m in config["models"].values():
        assert m["cmd"].startswith("${llama-server} -m /") and "--port ${PORT}" in m["cmd"]
    return config


def test_llama_swap_models_that_fit_together_share_a_group() -> None:
    config = _swap([str(QWEN), *map(str, SMALL), "--gpu", "24GiB", "--ctx", "8192"])
    assert config["groups"] == {"together-1": {"swap": False, "exclusive": True,
                                               "members": ["qwen2.5-32b-like-q4_k_m", "moe-qwen3", "dense-llama"]}}
    together = sum(m["metadata"]["predicted_mib"]["CUDA0"] - 1024 for m in config["models"].values())
    assert together <= 24 * 1024 - 1024


def test_llama_swap_models_that_do_not_fit_together_swap(tmp_path: Path) -> None:
    d = tmp_path / "models"
    d.mkdir()
    for name, p in (("a.gguf", QWEN), *((p.name, p) for p in SMALL)):
        (d / name).symlink_to(p)
    (d / "b.gguf").write_bytes(QWEN.read_bytes())  # a copy: a second link to one file is one model
    config = _swap([str(d), "--gpu", "24GiB"])
    groups = config["groups"]
    assert groups["swap"] == {"swap": True, "exclusive": True, "members": ["b"]}
    assert groups["together-1"]["swap"] is False and groups["together-1"]["members"][0] == "a"
    assert sorted(groups["together-1"]["members"][1:]) == ["dense-llama", "moe-qwen3"]
    # the set that runs together fits the GPU less the reserve, with the reserve counted once
    mib = {n: m["metadata"]["predicted_mib"]["CUDA0"] - 1024 for n, m in config["models"].items()}
    assert mib["a"] + mib["dense-llama"] + mib["moe-qwen3"] <= 23 * 1024 < mib["a"] + mib["b"]


def test_models_ini_many() -> None:
    result = CliRunner().invoke(cli, ["script", "--format", "models-ini", *map(str, SMALL), "--gpu", "8GiB",
                                      "--ctx", "4096"])  # fmt: skip
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.splitlines()[:3] == [
        "; llama-server router presets written by llamafit: each section fitted",
        "; fit in memory at once: moe-qwen3, dense-llama",
        "; start with: llama-server --models-preset FILE --models-max 2",
    ]
    assert "[moe-qwen3]\n" in text and "[dense-llama]\n" in text and "ctx-size = 4096\n" in text
