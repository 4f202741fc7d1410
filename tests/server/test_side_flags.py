"""The side-model flags of a llama-server command line (server/side_flags.py): parsing them with
their LLAMA_ARG_* variables, the ones a launch carries, and the flags a plan launches with."""

from __future__ import annotations

import pytest

from llamafit.errors import InputError
from llamafit.memory.side_models import SideFlags
from llamafit.memory.usage import SideDeviceUsage, SideUsage
from llamafit.server.side_flags import launch_tokens, parse_side_flags, side_flag_tokens


@pytest.mark.parametrize(
    "tokens, env, expected",
    [
        (
            ["-md", "d.gguf", "-ngld", "12", "-ctkd", "q8_0", "-ctvd", "q8_0"],
            {},
            SideFlags(draft_model="d.gguf", draft_ngl=12, draft_type_k="q8_0", draft_type_v="q8_0"),
        ),
        (
            [
                "--spec-draft-model",
                "d.gguf",
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                "8",
            ],
            {},
            SideFlags(draft_model="d.gguf", spec_types=("draft-simple",), draft_n_max=8),
        ),
        (
            ["-devd", "CUDA1", "-otd", "exps=CPU", "-t", "8"],
            {},
            SideFlags(draft_devices=("CUDA1",), draft_overrides=(("exps", "CPU"),)),
        ),
        (
            ["--spec-type", "draft-mtp,ngram-mod"],
            {},
            SideFlags(spec_types=("draft-mtp", "ngram-mod")),
        ),
        (
            [],
            {"LLAMA_ARG_SPEC_DRAFT_MODEL": "e.gguf", "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "all"},
            SideFlags(draft_model="e.gguf", draft_ngl=-2),
        ),
        (
            ["--mmproj", "p.gguf", "--no-mmproj-offload", "--image-max-tokens", "1024"],
            {},
            SideFlags(mmproj="p.gguf", mmproj_offload=False, image_max_tokens=1024),
        ),
    ],
)
def test_parse_side_flags(tokens: list[str], env: dict[str, str], expected: SideFlags) -> None:
    got = parse_side_flags(tokens, env)
    assert got == SideFlags(
        **{
            **{f: getattr(expected, f) for f in expected.__slots__ if f != "given"},
            "given": got.given,
        }
    )


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["-md"], "-md expects a value, but nothing follows it"),
        (["-ctkd", "q3_k"], "-ctkd expects one of"),
        (["--spec-type", "draft-magic"], "unknown speculative type 'draft-magic'"),
        (["-ngld", "x"], "-ngld expects an integer, got 'x'"),
    ],
)
def test_parse_side_flags_refuses(tokens: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        parse_side_flags(tokens)


def test_side_flag_tokens_keeps_side_flags_in_order() -> None:
    tokens = [
        "-t",
        "4",
        "-md",
        "d.gguf",
        "--no-mmproj-offload",
        "--temp",
        "0.1",
        "-ngld",
        "99",
        "--mmproj",
        "p.gguf",
    ]
    assert side_flag_tokens(tokens) == [
        "-md",
        "d.gguf",
        "--no-mmproj-offload",
        "-ngld",
        "99",
        "--mmproj",
        "p.gguf",
    ]


def _usage(kind: str, path: str, **details: int | str):
    return SideUsage(kind, path, (SideDeviceUsage("CPU", 1, 0, 0, 0),), 0, tuple(details.items()))


@pytest.mark.parametrize(
    "tokens, resident, expected",
    [
        (
            ["--mmproj", "auto", "-t", "4"],
            [("mmproj", "/m/mmproj-F16.gguf", {"offload": "on"})],
            ["--mmproj", "/m/mmproj-F16.gguf", "-t", "4"],
        ),
        (
            ["--mmproj", "p.gguf", "--image-max-tokens", "512"],
            [("mmproj", "p.gguf", {"offload": "off"})],
            ["--mmproj", "p.gguf", "--image-max-tokens", "512", "--no-mmproj-offload"],
        ),
        (
            ["--mmproj", "p.gguf", "--image-max-tokens", "512", "--temp", "0"],
            [],
            ["--temp", "0"],
        ),  # dropped
        (
            ["-md", "d.gguf", "-ngld", "99", "--spec-type", "draft-simple"],
            [],
            ["--spec-type", "draft-simple"],
        ),  # the draft dropped; the type stays (llama-server ignores it without one)
        (["--spec-type", "draft-mtp,ngram-mod"], [], ["--spec-type", "ngram-mod"]),
        (["--spec-type", "draft-mtp"], [("mtp", "m.gguf", {})], ["--spec-type", "draft-mtp"]),
        (
            ["-md", "d.gguf", "-ctkd", "q8_0"],
            [("draft", "d.gguf", {})],
            ["-md", "d.gguf", "-ctkd", "q8_0"],
        ),
    ],
)
def test_launch_tokens(tokens: list[str], resident: list, expected: list[str]) -> None:
    assert launch_tokens(tokens, [_usage(k, p, **d) for k, p, d in resident]) == expected
