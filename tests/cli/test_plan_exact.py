"""`plan`'s verdict follows the exact figures (the graph replay) where the hand-derived peaks the
searches run on disagree with them (solver.solve_exact, issue #36 item 3), and `check` of the
printed command agrees that it fits."""

from __future__ import annotations

import json

from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES

GPTOSS = str(FIXTURES / "swa-gptoss.gguf")
GRANITE = str(FIXTURES / "hybrid-granite.gguf")
PINNED = ("--ram", "32GiB", "--no-llama-check")


def _run(*args: str):
    """The command with RAM pinned and no llama-fit-params, before any `--` (llama-server's)."""
    cut = args.index("--") if "--" in args else len(args)
    return CliRunner().invoke(cli, [*args[:cut], *PINNED, *args[cut:]])


def _checks(command: list[str]) -> None:
    """`check` of the plan's command (its flags after -m MODEL) fits: the replay confirms it."""
    model, flags = command[2], command[3:]
    result = _run("check", model, "--gpu", GPU_OF[model], "--", *flags)
    assert result.exit_code == 0, result.output
    assert "Verdict    fits:" in result.output


GPU_OF = {GPTOSS: "1056MiB", GRANITE: "1036MiB"}

# gpt-oss's 32-wide heads under -fa on: CUDA has no flash-attention kernel for them, the CPU runs
# the attention, and the GPU's compute buffer is all but empty; the hand-derived peaks count it on
# the GPU, found nothing that fits 65,536 tokens, and said so
AGENT_ON_1056_MIB = """\
Model      {model}
           gpt-oss, MXFP4_MOE, trained 131,072 tokens
Hardware   CUDA0 (cuda) 1,056 MiB usable; CPU (cpu) 32,768 MiB usable
Command    llama-server \\
           -m {model} \\
           -c 99584 -ngl 5 -fa on -ctk f16 -ctv q4_0 -b 2048 -ub 128 -np 1 \\
           --fit off
(MiB)      usable weights      KV     RS compute  output reserve    used    left
CUDA0       1,056       0      31      0       0       0   1,024   1,056       0
CPU        32,768       0       0      0      40       0       0      40  32,728
Memory     W weights  K KV  C compute  R reserve  . free
CUDA0      [WKCRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRR.] 1,056/1,056 MiB
CPU        [WC..........................................] 40/32,768 MiB
Trade-offs (largest context per slot at this offload):
  fa  K     V      -ngl cpu-moe  max context  tokens/s  vs the pick
  on  f16   f16       5       0       64,000    1,827+  -35,584 ctx, better KV
  off f16   f16       5       0       61,440    1,877+  -38,144 ctx, better KV
  on  f16   q8_0      5       0       83,456    1,830+  -16,128 ctx, better KV
  on  f16   q4_0      5       0       99,584    1,832+  the pick
  better/worse KV: the cache's quality against the pick's, by llama.cpp's
    measured KL divergence (PR #7412): q8_0 loses a negligible amount, a 4-bit V
    some, a 4-bit K and V the most
  1,827+: at least 1,827 tokens/s (at a full context), more while it is emptier
Marginal   0.3 MiB per 1,000 tokens per slot; 0.2 MiB per block on the GPU: each
           block moved to the CPU buys about 489 tokens
Speed      generation ~1,832-5,632 tokens/s (full to empty context)
           likely 1,374-2,290 full, 4,224-7,040 empty tokens/s (±25%, not
             measured here yet) (assumed bandwidth)
           CUDA0: 0-32 MiB/token, 112.0 GB/s x 0.79 + 0.2 ms (assumed;
             --bandwidth GB/s gives it)
Verdict    for agent (1 slot, at least 65,536 tokens per slot): fits 99,584
           tokens per slot with all layers on the GPU, f16/q4_0 KV (some quality
           loss: V in 4 bits), flash attention on; 131,072 would need about 10
           MiB more GPU memory (each block moved to the CPU frees 0 MiB: about
           65 blocks); -ngl 3 fits 131,072 tokens but generation drops from
           ~1,832 to ~246 tokens/s; the smallest GPU that holds all 131,072
           tokens this way is NVIDIA GeForce GTX 1050 (2 GiB); -np 1 instead of
           llama-server's 4 automatic slots saves 21 MiB
Warning    CUDA0: compute capability unknown: the flash-attention F16 copies of
           the quantized cache are counted for every batch, the most llama.cpp
           allocates (name the card with --gpu)
"""


def test_the_proxy_over_the_replay_still_finds_the_fit() -> None:
    result = _run("plan", GPTOSS, "--gpu", "1056MiB", "--for", "agent")
    assert result.exit_code == 0, result.output
    assert result.output == AGENT_ON_1056_MIB.format(model=GPTOSS)
    d = json.loads(_run("plan", GPTOSS, "--gpu", "1056MiB", "--for", "agent", "--json").stdout)
    assert [x["compute_source"] for x in d["devices"]] == ["graph", "graph"]
    _checks(d["command"])


def test_the_proxy_under_the_replay_prints_no_config_over_the_gpu() -> None:
    """hybrid-granite on 1,036 MiB with -fa off: the hand-derived peaks put every layer on the GPU
    at 4,096 tokens, which the replay puts 199,040 bytes over; -ngl 5 fits by the replay."""
    result = _run("plan", GRANITE, "--gpu", "1036MiB", "--fa", "off", "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["command"] == [
        "llama-server",
        "-m",
        GRANITE,
        "-c",
        "4096",
        "-ngl",
        "5",
        "-fa",
        "off",
        "-ctk",
        "f16",
        "-ctv",
        "f16",
        "-b",
        "2048",
        "-ub",
        "128",
        "--fit",
        "off",
    ]
    gpu = d["devices"][0]
    assert (gpu["compute_source"], gpu["used_bytes"] <= gpu["usable_bytes"]) == ("graph", True)
    assert (d["verdict"]["fits"], d["verdict"]["placement"]) == (True, "layers_on_cpu")
    _checks(d["command"])
