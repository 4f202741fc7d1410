"""`plan -- -fa auto` where llama.cpp settles flash attention off (GLM-4.5's 32-wide heads: CUDA
has no kernel for them, fattn.cu ggml_cuda_get_best_fattn_kernel): every figure the plan prints
is for flash attention as it settles, the same as check's for those flags (explain.settled)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.fit.search import STEP
from llamafit.units import MIB
from tests.support import FIXTURES

GLM4MOE = str(FIXTURES / "nextn-glm4moe.gguf")  # heads of 32
MINE = ["--gpu", "rtx4090", "--reserve", "0"]

pytestmark = pytest.mark.usefixtures("fixed_host")


def _json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*args[:1], GLM4MOE, *MINE, "--json", *args[1:]])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _gpu_used(data: dict[str, Any]) -> int:
    return sum(d["used_bytes"] for d in data["devices"] if d["kind"] == "gpu")


def _with(flags: list[str], flag: str, value: int) -> list[str]:
    out = list(flags)
    out[out.index(flag) + 1] = str(value)
    return out


def test_plan_figures_are_checks_for_the_settled_config() -> None:
    plan = _json("plan", "--", "-fa", "auto")
    flags = plan["command"][3:]  # after llama-server -m <model>
    # the command says -fa auto, which the figures are for (the cache made for flash attention,
    # the graph without it); the config and the warning say it runs off
    assert " ".join(flags) == (
        "-c 65536 -ngl 5 -fa auto -ctk f16 -ctv f16 -b 2048 -ub 512 --fit off --spec-type draft-mtp"
    )
    assert plan["config"]["flash_attn"] == "off"
    assert [w["code"] for w in plan["warnings"]] == ["fa_auto_off", "mtp_auto", "small_reserve"]
    # each row as it would run: f16 V settled off as the pick, a quantized V turns auto on
    rows = [(t["flash_attn"], t["type_k"], t["type_v"]) for t in plan["tradeoffs"]]
    assert rows == [
        ("off", "f16", "f16"),
        ("on", "f16", "q8_0"),
        ("on", "q8_0", "q8_0"),
        ("on", "f16", "q4_0"),
        ("on", "q8_0", "q4_0"),
        ("on", "q4_0", "q4_0"),
    ]
    assert plan["tradeoffs"][0]["vs_pick"]["pick"] is True
    # check of the printed flags: the plan's own figures, also one step of context and one
    # block away (the marginal costs); -fa off makes another graph (7.8 MiB less on CUDA0)
    assert _json("check", "--", *flags)["devices"] == plan["devices"]
    off = _json("check", "--", *flags[:5], "off", *flags[6:])
    assert [d["compute_bytes"] for d in off["devices"]] == [672540800, 135018560]
    assert [d["compute_bytes"] for d in plan["devices"]] == [680671360, 134760512]
    ctx = plan["context_per_slot"]
    smaller = _json("check", "--", *_with(flags, "-c", ctx - 4 * STEP))
    fewer = _json("check", "--", *_with(flags, "-ngl", 4))
    assert [w["code"] for w in smaller["warnings"] + fewer["warnings"]] == ["fa_auto_off"] * 2
    per_tokens = (_gpu_used(plan) - _gpu_used(smaller)) / (4 * STEP) * 1000 / MIB
    per_layer = (_gpu_used(plan) - _gpu_used(fewer)) / MIB
    assert (plan["mib_per_1000_tokens"], plan["mib_per_layer"]) == (per_tokens, per_layer)
    # before settling, the MTP context's figures were for flash attention on: 574.6 and 576.5
    assert (round(per_tokens, 1), round(per_layer, 2)) == (20.6, 0.23)


def test_plan_text_shows_the_settled_rows() -> None:
    """The rows say what each runs with (was `auto` run into the K column) and the pick's row is
    the pick."""
    res = CliRunner().invoke(cli, ["plan", GLM4MOE, *MINE, "--", "-fa", "auto"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    start = lines.index("Trade-offs (largest context per slot at this offload):")
    assert lines[start + 1 : start + 8] == [
        "  fa  K     V      -ngl cpu-moe  max context  tokens/s  vs the pick",
        "  off f16   f16       5       0       65,536    4,245+  the pick",
        "  on  f16   q8_0      5       0       65,536    4,530+  worse KV, +285 t/s",
        "  on  q8_0  q8_0      5       0       65,536    4,856+  worse KV, +611 t/s",
        "  on  f16   q4_0      5       0       65,536    4,698+  worse KV, +453 t/s",
        "  on  q8_0  q4_0      5       0       65,536    5,049+  worse KV, +804 t/s",
        "  on  q4_0  q4_0      5       0       65,536    5,259+  worse KV, +1,014 t/s",
    ]
    marginal = lines.index(next(x for x in lines if x.startswith("Marginal")))
    assert lines[marginal : marginal + 2] == [
        "Marginal   20.6 MiB per 1,000 tokens per slot; 0.2 MiB per block on the GPU:",
        "           each block moved to the CPU buys about 11 tokens",
    ]
