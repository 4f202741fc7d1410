"""What users see in `plan` (issue #25): a speed with its band for every plan (an assumption,
labelled, for a GPU given by size; --bandwidth), presets (--for), why each trade-off row lost, and
the bars."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.errors import InputError
from llamafit.fit.presets import PRESETS, Preset, Turn, min_ctx_for, preset_named
from llamafit.fit.speed import EFFICIENCY
from tests.support import FIXTURES, QWEN

GPTOSS = str(FIXTURES / "swa-gptoss.gguf")  # trained 131,072 tokens, SWA layers


def plan_json(*args: str) -> dict:
    """plan --json (before any `--`: what follows it is llama-server's)."""
    mine, dash, server = (
        (args[: args.index("--")], ["--"], args[args.index("--") + 1 :])
        if "--" in args
        else (args, [], ())
    )
    result = CliRunner().invoke(cli, ["plan", *mine, "--json", *dash, *server])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _band(low: float, high: float, share: float) -> list[float]:
    return [round(low * (1 - share), 2), round(high * (1 + share), 2)]


CUDA = EFFICIENCY[
    "cuda"
]  # CUDA on GDDR: the efficiency, the layer cost and the band fit/speed.py holds


def _tps(bandwidth: float, read: int) -> float:
    """The reads at CUDA's share of the bandwidth, and its fixed cost per layer (64 layers: kernel
    launches and synchronisation)."""
    return 1 / (read / (bandwidth * CUDA.generation) + 64 * CUDA.layer_seconds)


def test_a_gpu_given_by_size_gets_the_median_of_its_catalog_cards_and_their_range() -> None:
    """16 NVIDIA cards of 24 GiB in the catalog, from the L4 (300 GB/s) to the RTX 4090 (1,008):
    the median 720 GB/s (between the RTX 6000's 672 and the A5000's 768)."""
    speed = plan_json(str(QWEN), "--gpu", "24GiB")["speed"]
    gpu = speed["inputs"]["devices"][0]
    assert (gpu["bandwidth_bytes_per_s"], gpu["bandwidth_source"]) == (
        720 * 10**9,
        (
            "assumed: the median of 16 catalog cards with 24 GiB (300-1,008 GB/s); --bandwidth "
            "GB/s or a catalog name (--gpu rtx4090) gives the card's own"
        ),
    )
    empty, full = speed["inputs"]["bytes_per_token"]
    assert speed["generation_tps"] == [round(_tps(720e9, full), 2), round(_tps(720e9, empty), 2)]
    # the band: the slowest card with the model's error below, the fastest with it above
    assert speed["generation_tps_empty"] == _band(
        _tps(300e9, empty), _tps(1008e9, empty), CUDA.band
    )
    assert speed["generation_tps_full"] == _band(_tps(300e9, full), _tps(1008e9, full), CUDA.band)
    assert speed["assumed"] is True
    low, high = speed["prompt_tps_band"]
    assert low < speed["prompt_tps"] < high
    assert (
        speed["turn"]["context"] == 4096
        and speed["turn"]["prompt"] == 200
        and speed["turn"]["generated"] == 400
    )
    assert 0 < speed["turn"]["seconds"][0] < speed["turn"]["seconds"][1]


def test_a_catalog_card_has_a_band_of_the_models_error_only() -> None:
    speed = plan_json(str(QWEN), "--gpu", "rtx4090")["speed"]
    empty, full = speed["inputs"]["bytes_per_token"]
    assert speed["generation_tps"] == [round(_tps(1008e9, full), 2), round(_tps(1008e9, empty), 2)]
    assert speed["generation_tps_empty"] == _band(
        _tps(1008e9, empty), _tps(1008e9, empty), CUDA.band
    )
    assert speed["prompt_tps_band"] == pytest.approx(
        _band(speed["prompt_tps"], speed["prompt_tps"], 0.4), abs=0.01
    )
    assert speed["assumed"] is False


@pytest.mark.parametrize(
    ("gpu", "bandwidth", "source"),
    [
        ("24GiB", "500", "--bandwidth 500 GB/s"),
        ("rtx4090", "1500", "--bandwidth 1500 GB/s"),  # it replaces the catalog's too
        ("24GiB", "800GB/s", "--bandwidth 800 GB/s"),
    ],
)
def test_bandwidth_gives_a_gpus_own(gpu: str, bandwidth: str, source: str) -> None:
    speed = plan_json(str(QWEN), "--gpu", gpu, "--bandwidth", bandwidth)["speed"]
    dev = speed["inputs"]["devices"][0]
    gbs = float(bandwidth.removesuffix("GB/s"))
    assert (dev["bandwidth_bytes_per_s"], dev["bandwidth_source"]) == (gbs * 1e9, source)
    empty = speed["inputs"]["bytes_per_token"][0]
    assert speed["generation_tps_empty"] == _band(
        _tps(gbs * 1e9, empty), _tps(gbs * 1e9, empty), CUDA.band
    )
    assert speed["assumed"] is False


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--gpu", "24GiB", "--bandwidth", "0"],
            "--bandwidth 0: GB/s per GPU, e.g. --bandwidth 1008 or 1008,936",
        ),
        (
            ["--gpu", "24GiB", "--bandwidth", "fast"],
            "--bandwidth fast: GB/s per GPU, e.g. --bandwidth 1008 or 1008,936",
        ),
        (
            ["--gpu", "24GiB", "--bandwidth", "900,800"],
            "--bandwidth gives 2 values for 1 GPUs: one, or one per GPU",
        ),
        (
            ["--gpu", "24GiB", "--for", "batch"],
            "--for batch: one of chat, agent, long, serve (serve:N for N concurrent users)",
        ),
        (
            ["--gpu", "24GiB", "--for", "chat:2"],
            "--for chat:2: only serve takes a number of users, 1-256 (serve:8)",
        ),
        (
            ["--gpu", "24GiB", "--for", "serve:0"],
            "--for serve:0: only serve takes a number of users, 1-256 (serve:8)",
        ),
    ],
)
def test_bad_bandwidth_and_preset_are_bad_input(args: list[str], error: str) -> None:
    result = CliRunner().invoke(cli, ["plan", str(QWEN), *args])
    assert (result.exit_code, result.stderr) == (2, f"Error: {error}\n")


def test_preset_names() -> None:
    assert preset_named("agent") == PRESETS["agent"]
    assert preset_named(" Serve:8 ") == Preset(
        "serve", 8192, 8, "speed", (512, 256, 128), Turn(2048, 200, 400)
    )
    assert preset_named("serve:8").label == "serve:8" and preset_named("chat").label == "chat"
    with pytest.raises(InputError):
        preset_named("")
    assert [min_ctx_for(PRESETS["agent"], wanted) for wanted in (131072, 65536, 32768)] == [
        65536,
        65536,
        32768,
    ]


@pytest.mark.parametrize("preset", ["chat", "agent"])
def test_chat_and_agent_are_one_slot_at_the_trained_maximum_of_the_demo(preset: str) -> None:
    """The demo (Gemma 3 270M) is trained for 32,768 tokens: less than agent's floor of 65,536."""
    d = plan_json("--demo", "--gpu", "24GiB", "--for", preset)
    command = d["command"]
    assert command[command.index("-np") + 1] == "1" and d["context_per_slot"] == 32768
    assert d["verdict"]["preset"]["name"] == preset and d["preset"] == d["verdict"]["preset"]
    floor = {"chat": "16,384", "agent": "32,768 tokens per slot rather than 65,536"}[preset]
    assert d["verdict"]["text"].startswith(f"for {preset} (1 slot, at least {floor}")
    # llama-server's automatic 4 slots would keep 4 windows of SWA cache for one user
    assert d["preset"]["n_parallel_auto"] == 4 and d["preset"]["saved_bytes"] > 0
    assert d["verdict"]["text"].endswith(
        "; -np 1 instead of llama-server's 4 automatic slots saves "
        f"{d['preset']['saved_bytes'] / 2**20:,.0f} MiB"
    )


# swa-gptoss.gguf (trained 131,072) on a GPU with 40 MiB after the reserve; K stays f16 (gpt-oss
# has attention sinks: solver.SINK_ARCHS). CUDA has no flash-attention kernel for its 32-wide
# heads: with -fa on the CPU runs the attention, and the GPU's compute buffer is all but empty
@pytest.mark.parametrize(
    ("preset", "ctx", "np", "ub", "ngl", "text"),
    [
        (None, 124672, None, "128", "5", "fits 124,672 tokens per slot with all layers on the GPU"),
        (
            "chat",
            125184,
            "1",
            "128",
            "5",
            "for chat (1 slot, at least 16,384 tokens per slot): fits 125,184",
        ),
        (
            "agent",
            125184,
            "1",
            "128",
            "5",
            "for agent (1 slot, at least 65,536 tokens per slot): fits 125,184 tokens "
            "per slot with all layers on the GPU",
        ),
        # long's trained maximum first moves layers (and experts) to the CPU
        (
            "long",
            131072,
            "1",
            "1024",
            "3",
            "for long (1 slot, the trained maximum first, at least 32,768 tokens per "
            "slot): fits 131,072 tokens per slot with 2 of 5 layers and the experts of 4 blocks "
            "on the CPU",
        ),
        (
            "serve:3",
            41472,
            "3",
            "128",
            "5",
            "for serve:3 (3 slots, at least 8,192 tokens per slot): fits 41,472",
        ),
    ],
)
def test_presets_on_a_small_gpu(
    preset: str | None, ctx: int, np: str | None, ub: str, ngl: str, text: str
) -> None:
    d = plan_json(GPTOSS, "--gpu", "1064MiB", *(["--for", preset] if preset else []))
    command = d["command"]
    assert d["context_per_slot"] == ctx
    assert (command[command.index("-np") + 1] if np else "-np" in command) == (np or False)
    assert (command[command.index("-ub") + 1], command[command.index("-ngl") + 1]) == (ub, ngl)
    assert d["verdict"]["text"].startswith(text)


def test_long_reaches_the_trained_maximum_where_layers_on_the_cpu_allow_it() -> None:
    d = plan_json(GPTOSS, "--gpu", "1064MiB", "--for", "long")
    assert d["context_per_slot"] == 131072 and d["verdict"]["placement"] == "experts_on_cpu"
    assert d["preset"]["turn"] == {"context": 0, "prompt": 32768, "generated": 500}
    assert d["speed"]["turn"]["prompt"] == 32768


def test_the_users_flags_win_over_the_preset() -> None:
    d = plan_json(
        GPTOSS,
        "--gpu",
        "1100MiB",
        "--for",
        "agent",
        "--min-ctx",
        "8192",
        "--",
        "-np",
        "2",
        "-ub",
        "256",
    )
    command = d["command"]
    assert (command[command.index("-np") + 1], command[command.index("-ub") + 1]) == ("2", "256")
    # -np was the user's
    assert d["preset"]["min_ctx"] == 8192 and d["preset"]["saved_bytes"] is None
    assert d["verdict"]["text"].startswith(
        "for agent (1 slot, at least 8,192 tokens per slot rather than 65,536): "
    )


def test_trade_off_rows_say_what_they_change_against_the_pick(fixed_host) -> None:
    """rtx4080: q4_0/q4_0 reaches 7,168 tokens with 13 layers on the CPU; each other row less, a
    little faster."""
    d = plan_json(str(QWEN), "--gpu", "rtx4080")
    rows = {(t["flash_attn"], t["type_k"], t["type_v"]): t for t in d["tradeoffs"]}
    pick = rows[("on", "q4_0", "q4_0")]
    assert pick["vs_pick"] == {
        "pick": True,
        "llama_cpp_aborts": False,
        "context_delta": 0,
        "generation_tps_delta": 0.0,
        "flash_attn": None,
        "type_k": None,
        "type_v": None,
        "n_gpu_layers_delta": None,
        "quality": None,
        "pick_quality": "most_loss",
    }
    f16 = rows[("off", "f16", "f16")]
    assert f16["vs_pick"] == {
        "pick": False,
        "llama_cpp_aborts": False,
        "context_delta": 1792 - 7168,
        # from the unrounded speeds: within a rounding step of the rounded ones' difference
        "generation_tps_delta": pytest.approx(
            f16["generation_tps"][0] - pick["generation_tps"][0], abs=0.011
        ),
        "flash_attn": "off",
        "type_k": "f16",
        "type_v": "f16",
        "n_gpu_layers_delta": None,
        "quality": "full",
        "pick_quality": "most_loss",
    }
    assert f16["vs_pick"]["generation_tps_delta"] > 0


def test_vs_pick_text_keeps_what_fits() -> None:
    from llamafit.report.plan import vs_pick_text

    d = {
        "pick": False,
        "llama_cpp_aborts": False,
        "context_delta": -8192,
        "generation_tps_delta": 33.4,
        "flash_attn": None,
        "type_k": "q8_0",
        "type_v": None,
        "n_gpu_layers_delta": -2,
        "quality": "negligible_loss",
        "pick_quality": "full",
    }
    # the KV cache's quality against the pick's before the speed: the tokens/s column shows that
    assert vs_pick_text(d, 60) == "-8,192 ctx, worse KV, +33 t/s, -2 layers"
    assert vs_pick_text(d, 24) == "-8,192 ctx, worse KV"
    better = {**d, "quality": "full", "pick_quality": "some_loss", "n_gpu_layers_delta": None}
    assert vs_pick_text(better, 60) == "-8,192 ctx, better KV, +33 t/s"
    assert vs_pick_text({**d, "quality": None}, 60) == "-8,192 ctx, +33 t/s, -2 layers"
    # a row that reaches nothing has nothing else to compare
    assert vs_pick_text({**d, "context_delta": None}, 24) == "no fit"
    assert vs_pick_text({**d, "pick": True}, 24) == "the pick"
    assert vs_pick_text(None, 24) == ""


def test_bars_are_coloured_only_on_a_terminal() -> None:
    from llamafit.report.colour import paint

    line = "CUDA0      [WWKC....] 1,446/24,576 MiB"
    assert paint(line) == (
        "CUDA0      [\x1b[44mWW\x1b[0m\x1b[45mK\x1b[0m\x1b[43mC\x1b[0m....] 1,446/24,576 MiB"
    )
    text = CliRunner().invoke(cli, ["plan", str(QWEN), "--gpu", "24GiB"]).stdout  # not a terminal
    assert "\x1b[" not in text and "CUDA0      [" in text


def test_plan_output_fits_80_columns_with_every_new_line() -> None:
    for args in (["--gpu", "24GiB", "--for", "agent"], ["--gpu", "rtx4080", "--for", "serve:2"]):
        text = CliRunner().invoke(cli, ["plan", str(QWEN), *args]).stdout
        too_long = [line for line in text.splitlines() if len(line) > 80 and str(QWEN) not in line]
        assert too_long == []


def test_serve_states_no_saving_its_slots_are_for_its_users() -> None:
    d = plan_json(GPTOSS, "--gpu", "1100MiB", "--for", "serve:3")
    assert (
        d["preset"]["n_parallel"],
        d["preset"]["saved_bytes"],
        d["preset"]["n_parallel_auto"],
    ) == (3, None, None)
    assert "automatic slots" not in d["verdict"]["text"]
