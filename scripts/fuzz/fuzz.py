#!/usr/bin/env python3
"""Fuzz and fault campaign for llamafit (issue #16): hostile headers, command lines and HTTP
servers.

    python scripts/fuzz/fuzz.py                  # default: ~2,000 cases, a few minutes on 2 cores
    python scripts/fuzz/fuzz.py --cases 20000    # the long run
    python scripts/fuzz/fuzz.py --seed 7 --only cli

Five families, all in this process (CLI through click's CliRunner, so every case is cheap):
  header-api   mutated GGUF headers (bit flips, huge counts, cuts, hostile key values) through
               read_header + build_facts, every 8th also through check/plan's prepare and solver
  header-cli   mutated headers through `inspect`, `check` and `plan`
  cmdline      hostile command lines: huge/negative/odd numbers, sizes, -ot regexes, ports, paths
  sizes        head and embedding sizes of 0, 1 and 2^31-1 (and removed) on every seed architecture,
               through `check -ctk q8_0` and `plan`
  http         hostile loopback servers (scripts/fuzz/hostile_http.py) through `inspect URL`
  replay       the graph replay itself (issue #37 F1): one seed per architecture it builds
               (memory/graph/models MODELS: the fixtures, else scripts/fixtures/make_shapes.py's
               header), each numeric hyperparameter set to 0, 1, 3, 2^31-1, half, double or
               removed, through `check` on the CPU and on a Vulkan device (both replayed)

Printed: cases, tracebacks (any exception that is not a one-line `Error:` with exit 2), hangs over
1 s of CPU time or 10 s of wall time (a case over 20 s is stopped and counted; CPU time, because on
a shared 2-core machine a plan's wall time varies tenfold with the load; the slowest wall time is
printed too), peak RSS, exit codes other than 0/1/2, and multi-line errors. Targets: 0 tracebacks,
0 hangs, peak RSS < 200 MB (300 MB with the replay family), every failure one line with exit 2.
Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.fuzz.gguf_patch import drop, patch  # noqa: E402
from scripts.fuzz.hostile_http import MODES  # noqa: E402

FIXTURES = ROOT / "fixtures"
HANG_S = 1.0  # of CPU time: a case that works this long is a finding
# of wall time: a case that waits this long (a FIFO, a lock) is one too, on any machine load
WAIT_S = 10.0
STOP_S = 20.0
PORTS = range(18400, 18420)  # this campaign's loopback range
SEEDS = [
    "dense-llama.gguf",
    "swa-gemma3.gguf",
    "moe-qwen3.gguf",
    "nextn-glm4moe.gguf",
    "mla-deepseek2.gguf",
    "recurrent-mamba2.gguf",
    "hybrid-granite.gguf",
    "per-layer-kv.gguf",
    "swa-gptoss.gguf",
]
# Head and embedding sizes that describe no model (issue #23: a key head size of 0 looped forever in
# _rot_inputs with a quantized K cache): each key at each value, on every seed architecture.
SIZE_KEYS = [
    "embedding_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_swa",
    "attention.value_length_swa",
]
SIZE_VALUES = [0, 1, 2**31 - 1, None]  # None: the key removed
BIG = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
HOSTILE_INTS = [
    (5, -1),
    (4, 0),
    (4, 1),
    (4, 3),
    (4, 4097),
    (4, 2**32 - 1),
    (11, -(2**63)),
    (10, 2**64 - 1),
]
HOSTILE_STRINGS = [
    "",
    "\x1b[2J\x1b]0;pwned\x07",
    "a" * 70000,
    "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    "llama\nEvil: 1",
    "../../etc/passwd",
]


class Stop(Exception):
    """A case ran past STOP_S."""


@dataclass
class Tally:
    cases: Counter[str] = field(default_factory=Counter)
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    bad_exits: list[str] = field(default_factory=list)
    multi_line: list[str] = field(default_factory=list)
    exits: Counter[int] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)  # by the clock each family is bound on
    slowest_wall: dict[str, float] = field(default_factory=dict)


def headers() -> dict[str, bytes]:
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    out = {}
    for name in SEEDS:
        data = (FIXTURES / name).read_bytes()
        out[name] = data[: read_header(BytesSource(data)).data_offset]
    return out


def mutate(rng: random.Random, data: bytes, keys: list[tuple[str, object]]) -> bytes:
    """Byte-level damage or one hostile key value."""
    if keys and rng.random() < 0.5:
        key, value = rng.choice(keys)
        if isinstance(value, list):
            n = len(value) if rng.random() < 0.7 else rng.choice([0, 1, len(value) + 1, 100000])
            vals = [rng.choice([-1, 0, 1, 2**31, 7]) for _ in range(min(n, 100000))]
            try:
                return patch(data, key, 9, (5, vals))
            except struct.error:
                return data
        if isinstance(value, str):
            return patch(data, key, 8, rng.choice(HOSTILE_STRINGS))
        vtype, v = rng.choice(HOSTILE_INTS)
        return patch(data, key, vtype, v)
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["flip", "u64", "u32", "cut", "insert"])
        at = rng.randrange(len(buf)) if buf else 0
        if kind == "flip" and buf:
            buf[at] ^= 1 << rng.randrange(8)
        elif kind == "u64":
            buf[at : at + 8] = struct.pack("<Q", rng.choice(BIG))
        elif kind == "u32":
            buf[at : at + 4] = struct.pack("<I", rng.choice(BIG[:5]))
        elif kind == "cut":
            del buf[at:]
        else:
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
    return bytes(buf)


def timed(
    tally: Tally,
    family: str,
    label: str,
    fn: Callable[[], None],
    bound: float = HANG_S,
    clock: str = "cpu",
) -> None:
    """Run one case. `bound` is on this process's CPU time (`clock` "cpu": work such as an endless
    loop, which a shared, overloaded machine does not inflate; and WAIT_S of wall time for a case
    that waits) or on wall time ("wall": the http family, which waits on a server); a case blocked
    for STOP_S of wall time is stopped either way."""
    tally.cases[family] += 1
    outer = signal.getitimer(signal.ITIMER_REAL)[0]  # a case inside a case (header-api's deep plan)
    signal.setitimer(signal.ITIMER_REAL, min(STOP_S, outer) if outer else STOP_S)
    t0, c0 = time.monotonic(), time.process_time()
    try:
        fn()
    except Stop:
        tally.hangs.append(f"{family}: {label}: stopped after {STOP_S:g} s")
        return
    except Exception:  # noqa: BLE001 - the point: anything else escaping is a finding
        tally.tracebacks.append(f"{family}: {label}\n{traceback.format_exc(limit=-3)}")
    finally:  # the outer case's stop timer goes on with what it had left
        signal.setitimer(
            signal.ITIMER_REAL, max(outer - (time.monotonic() - t0), 1e-3) if outer else 0
        )
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    took = cpu if clock == "cpu" else wall
    tally.slowest[family] = max(tally.slowest.get(family, 0.0), took)
    tally.slowest_wall[family] = max(tally.slowest_wall.get(family, 0.0), wall)
    if took > bound or (clock == "cpu" and wall > WAIT_S):
        tally.hangs.append(
            f"{family}: {label}: {took:.1f} s {clock} (bound {bound:g} s; {wall:.1f} s wall)"
        )


def cli(
    tally: Tally,
    family: str,
    label: str,
    args: list[str],
    env: dict[str, str] | None = None,
    bound: float = HANG_S,
    clock: str = "cpu",
) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli as main

    def go() -> None:
        result = CliRunner().invoke(main, args, env=env)
        code = result.exit_code
        tally.exits[code] += 1
        if isinstance(result.exception, Stop):
            raise Stop
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            exc = result.exception
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from exc
        if family == "http" and code != 2:
            tally.bad_exits.append(
                f"{family}: {label}: exit {code}, expected 2: {result.output[-200:]!r}"
            )
        if code not in (0, 1, 2):
            tally.bad_exits.append(f"{family}: {label}: exit {code}")
        err = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        if code == 2 and (
            len(err) != 1 or not result.stderr.rstrip("\n").splitlines()[-1].startswith("Error:")
        ):
            tally.multi_line.append(f"{family}: {label}: {result.stderr[:200]!r}")

    timed(tally, family, label, go, bound, clock)


def warm_up(tmp: Path) -> None:
    """One untimed plan per seed model and one of each command: imports and first-call caches are
    not hangs."""
    from click.testing import CliRunner

    from llamafit.cli import cli as main

    for name in SEEDS:
        for args in (["inspect"], ["plan", "--gpu", "8GiB"], ["check", "--gpu", "cpu"]):
            CliRunner().invoke(main, [args[0], str(FIXTURES / name), *args[1:]])
    CliRunner().invoke(
        main, ["script", str(FIXTURES / SEEDS[0]), "--gpu", "8GiB", "--", "-ot", "blk=CPU"]
    )


def header_api(
    tally: Tally, rng: random.Random, n: int, seeds: dict[str, bytes], tmp: Path
) -> None:
    from llamafit.errors import LlamafitError
    from llamafit.facts.hparams import build_facts
    from llamafit.reader.header import read_header
    from llamafit.reader.model import GGUFModel
    from llamafit.reader.source import BytesSource

    keyed = {name: list(read_header(BytesSource(h)).metadata.items()) for name, h in seeds.items()}
    for i in range(n):
        name = rng.choice(SEEDS)
        data = mutate(rng, seeds[name], keyed[name])

        def go(data: bytes = data, deep: bool = i % 8 == 0, name: str = name, i: int = i) -> None:
            try:
                facts = build_facts(
                    GGUFModel("fuzz.gguf", (read_header(BytesSource(data, "fuzz.gguf")),))
                )
                if deep:
                    path = tmp / "deep.gguf"
                    path.write_bytes(data)
                    cli(
                        tally,
                        "header-api",
                        f"plan {name} #{i}",
                        ["plan", str(path), "--gpu", "8GiB"],
                    )
                del facts
            except LlamafitError:
                pass

        timed(tally, "header-api", f"{name} #{i}", go)


def header_cli(
    tally: Tally, rng: random.Random, n: int, seeds: dict[str, bytes], tmp: Path
) -> None:
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    keyed = {name: list(read_header(BytesSource(h)).metadata.items()) for name, h in seeds.items()}
    for i in range(n):
        name = rng.choice(SEEDS)
        path = tmp / f"cli-{i % 4}.gguf"
        path.write_bytes(mutate(rng, seeds[name], keyed[name]))
        command = rng.choice(["inspect", "check", "plan"])
        args = [command, str(path)] + (
            ["--gpu", rng.choice(["8GiB", "cpu", "24GiB,12GiB"])] if command != "inspect" else []
        )
        cli(tally, "header-cli", f"{command} {name} #{i}", args)


def sizes(tally: Tally, seeds: dict[str, bytes], tmp: Path) -> None:
    """Every SIZE_KEYS x SIZE_VALUES on every seed through `check -ctk q8_0` (the quantized-K path)
    and `plan`."""
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    for name, header in seeds.items():
        arch = read_header(BytesSource(header)).metadata["general.architecture"]
        for key in SIZE_KEYS:
            for value in SIZE_VALUES:
                full = f"{arch}.{key}"
                path = tmp / "sizes.gguf"
                path.write_bytes(
                    drop(header, full) if value is None else patch(header, full, 4, value)
                )
                for args in (
                    [
                        "check",
                        str(path),
                        "--gpu",
                        "8GiB",
                        "--",
                        "-ctk",
                        "q8_0",
                        "-ctv",
                        "q8_0",
                        "-fa",
                        "on",
                    ],
                    ["plan", str(path), "--gpu", "8GiB"],
                ):
                    cli(tally, "sizes", f"{args[0]} {name} {key}={value}", args)


NUMBERS = [
    "0",
    "-1",
    "1",
    "255",
    "256",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9" * 30,
    "9" * 5000,
    "1e9",
    "0x10",
    " 12 ",
    "+5",
    "",
    "nan",
    "inf",
    "١٢",
    "12abc",
]
SIZES = [
    "0",
    "0GiB",
    "0.0000001GiB",
    "24",
    "24GiB",
    "9" * 400 + "GiB",
    "-1GiB",
    "1.5T",
    "1e3GiB",
    "GiB",
    "24 GiB",
    "24GiB,",
    ",",
    "2x" + "9" * 50,
    "rtx4090",
    "99xrtx4090",
    "cpu,24GiB",
]
REGEXES = [
    "(((",
    "[",
    "(.*)*(.*)*x",
    "(a|a)*x",
    "(?i)blk",
    "\\Ablk",
    "blk.*+",
    "blk\\.\\d+",
    "",
    ".*.*.*.*x",
    "(" * 500,
    "a{99999999999}",
    "\\c",
    "[z-a]",
    "blk\\.(1[0-9])\\.ffn_.*_exps",
]
FLAGS = [
    "-c",
    "-ngl",
    "-b",
    "-ub",
    "-np",
    "-ncmoe",
    "-mg",
    "-cram",
    "-fitt",
    "-ts",
    "-ctk",
    "-fa",
    "-sm",
    "--rpc",
    "-dev",
    "-lm",
]


def cmdline(tally: Tally, rng: random.Random, n: int, tmp: Path) -> None:
    model = str(FIXTURES / "dense-llama.gguf")
    for _ in range(n):
        kind = rng.randrange(8)
        env = None
        if kind == 0:
            args = ["check", model, "--gpu", "8GiB", "--", rng.choice(FLAGS), rng.choice(NUMBERS)]
        elif kind == 1:
            args = ["plan", model, "--gpu", rng.choice(SIZES)]
        elif kind == 2:
            buft = rng.choice(["CPU", "CUDA0", "CUDA7", "", "cuda0_host"])
            args = ["plan", model, "--gpu", "8GiB", "--", "-ot", f"{rng.choice(REGEXES)}={buft}"]
        elif kind == 3:
            opt = rng.choice(["--ctx", "--ctx-max", "--min-ctx", "--reserve", "--llama-build"])
            args = ["plan", model, "--gpu", "8GiB", opt, rng.choice(NUMBERS)]
        elif kind == 4:
            args = [
                "plan",
                model,
                "--gpu",
                "8GiB",
                "--rpc",
                rng.choice(
                    [
                        "h:1=" + rng.choice(SIZES),
                        "h:1=1GiB,h:1=1GiB",
                        "h=1GiB",
                        ":1=1GiB",
                        "h:0=1GiB",
                        "h:99999=1G",
                    ]
                ),
            ]
        elif kind == 6:  # a GPU count: a 5,000-digit one was a traceback (#23)
            args = [
                "plan",
                model,
                "--gpu",
                f"{rng.choice(NUMBERS)}x{rng.choice(['h100', '24GiB', 'cpu'])}",
            ]
        elif kind == 7:  # an RPC port
            args = [
                "plan",
                model,
                "--gpu",
                "8GiB",
                "--rpc",
                f"h:{rng.choice(NUMBERS + ['²'])}=1GiB",
            ]
        else:
            env = {
                "LLAMA_ARG_"
                + rng.choice(
                    ["CTX_SIZE", "N_GPU_LAYERS", "BATCH", "OVERRIDE_TENSOR", "N_PARALLEL"]
                ): rng.choice(NUMBERS + REGEXES)
            }
            args = ["plan", model, "--gpu", "8GiB"]
        cli(
            tally,
            "cmdline",
            " ".join(a[:40] for a in args[2:]) + (f" {env}"[:60] if env else ""),
            args,
            env,
        )
    names = [f"{n}.gguf" for n in ("m-00000-of-00000", "m-00002-of-00001", "a\x1b[31mb", "t\tx")]
    for name in names:
        path = tmp / name
        path.write_bytes((FIXTURES / "dense-llama.gguf").read_bytes())
        for fmt in ("sh", "systemd", "llama-swap", "models-ini", "docker"):
            cli(
                tally,
                "cmdline",
                f"script {name!r} {fmt}",
                ["script", str(path), "--gpu", "8GiB", "--format", fmt],
            )


HTTP_DEADLINE = 5.0  # remote.DEFAULT_DEADLINE for this family, so that its bound is checked quickly


def http(tally: Tally, rounds: int, port_base: int = PORTS.start) -> None:
    """Each hostile server must be refused within the remote deadline (+1 s) and the byte budget."""
    from llamafit.fetch import remote

    remote.DEFAULT_DEADLINE = HTTP_DEADLINE
    # each server gone before its port comes round
    ports = itertools.cycle(range(port_base, port_base + len(PORTS)))
    for mode in MODES:
        if mode == "cross-redir":
            continue  # needs request headers to matter; covered by tests/cli/test_hostile.py
        if mode == "empty-vocab":
            # a well-formed (vocabulary-only) header, not refused: its cost is bench_hostile.py's
            continue
        for _ in range(rounds):
            server = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "scripts" / "fuzz" / "hostile_http.py"),
                    mode,
                    str(next(ports)),
                    "60",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert server.stdout is not None
                url = server.stdout.readline().strip()
                cli(
                    tally,
                    "http",
                    f"inspect {mode}",
                    ["inspect", url],
                    bound=HTTP_DEADLINE + HANG_S,
                    clock="wall",
                )
            finally:
                server.kill()
                server.wait()


# peak RSS targets: the replay family's real-shape seeds (Qwen3-Next 80B's 48 layers of graph)
# hold more than the small fixtures (measured: 243 MB over 600 replay cases)
RSS_MB, RSS_REPLAY_MB = 200, 300
# the replay family's seeds: a fixture per architecture where there is one, else the smallest
# scripts/fixtures/make_shapes.py shape of it
REPLAY_FIXTURES = {
    "llama": "dense-llama.gguf",
    "qwen3moe": "moe-qwen3.gguf",
    "gemma3": "swa-gemma3.gguf",
    "deci": "per-layer-kv.gguf",
    "gpt-oss": "swa-gptoss.gguf",
    "glm4moe": "nextn-glm4moe.gguf",
    "deepseek2": "mla-deepseek2.gguf",
    "mamba2": "recurrent-mamba2.gguf",
    "granitehybrid": "hybrid-granite.gguf",
    "cohere2moe": "variant:cohere2moe",  # make_fixtures.variant, written to tmp
}
REPLAY_SHAPES = {
    "jamba": "jamba-reasoning-3b",
    "mamba": "mamba-130m",
    "qwen2": "qwen2.5-7b",
    "qwen3": "qwen3-8b",
    "gemma4": "gemma4-e2b",
    "gemma3n": "gemma3n-e2b",
    "granitemoe": "granite3-1b-a400m",
    "nemotron_h_moe": "nemotron3-nano-30b-a3b",
    "qwen3next": "qwen3-next-80b-a3b",
    "qwen35moe": "qwen3.5-35b-a3b",
    "qwen35": "qwen3.5-27b",
    "mistral3": "ministral3-8b",
    "phi3": "phi-4",
    "smollm3": "smollm3-3b",
    "seed_oss": "seed-oss-36b",
    "ernie4_5": "ernie4.5-0.3b",
    "ernie4_5-moe": "ernie4.5-21b-a3b",
    "olmo2": "olmo3-7b",
    "exaone4": "exaone4-32b",
    "glm4": "glm-z1-32b",
    "command-r": "command-r-v01",
    "cohere2": "command-r7b",
    "qwen2vl": "qwen2.5-vl-7b",
    "qwen3vl": "qwen3-vl-8b",
    "qwen3vlmoe": "qwen3-vl-30b-a3b",
    "granite": "granite3-8b",
    "llama4": "llama4-scout",
    "hunyuan-dense": "hunyuan-7b",
    "hunyuan-moe": "hunyuan-a13b",
    "lfm2": "lfm2-1.2b",
    "minimax-m2": "minimax-m2",
    "falcon-h1": "falcon-h1-3b",
    "gemma2": "gemma2-9b",
    "nemotron_h": "nemotron-nano-9b-v2",
    "bailingmoe2": "ling-mini-2.0",
    "lfm2moe": "lfm2-8b-a1b",
    "qwen2moe": "qwen1.5-moe-a2.7b",
    "gemma": "gemma-2b",
    "phi2": "phi-2",
    "starcoder2": "starcoder2-3b",
    "exaone": "exaone3.5-7.8b",
    "olmoe": "olmoe-1b-7b",
    "arcee": "afm-4.5b",
    "deepseek": "deepseek-moe-16b",
    "internlm2": "internlm2.5-7b",
    "gpt2": "gpt2",
    "stablelm": "stablelm2-1.6b",
    "gptneox": "pythia-1.4b",
    "falcon": "falcon-40b",
    "starcoder": "starcoder-15b",
    "bloom": "bloom-560m",
    "mpt": "mpt-7b",
    "olmo": "olmo-1b",
    "baichuan": "baichuan2-13b",
    "phimoe": "phi3.5-moe",
    "minicpm": "minicpm-1b",
    "apertus": "apertus-8b",
    "bailingmoe": "ling-lite-1.5",
    "afmoe": "trinity-mini",
    "smallthinker": "smallthinker-4b",
    "qwen": "qwen-7b",
    "orion": "orion-14b",
    "plamo": "plamo-13b",
    "refact": "refact-1.6b",
    "chatglm": "glm4-9b-chat",
    "dream": "dream-v0-7b",
    "llama-embed": "llama-nemotron-embed-1b-v2",
    "rnd1": "rnd1-30b-a3b",
    "llada": "llada-8b",
    "xverse": "xverse-7b",
    "nemotron": "nemotron-mini-4b",
    "llada-moe": "llada-moe-7b-a1b",
    "dbrx": "dbrx-instruct",
    "openelm": "openelm-3b",
    "codeshell": "codeshell-7b",
    "jais": "jais-30b",
    "mistral4": "mistral-small-4-119b",
    "hunyuan_vl": "hunyuan-ocr",
    "t5encoder": "umt5-xxl-encoder",
    "minicpm3": "minicpm3-4b",
    "bert": "bge-small-en-v1.5",
    "nomic-bert": "nomic-embed-text-v1.5",
    "nomic-bert-moe": "nomic-embed-text-v2-moe",
    "jina-bert-v2": "jina-embeddings-v2-base-en",
    "jina-bert-v3": "jina-embeddings-v3",
    "gemma-embedding": "embeddinggemma-300m",
    "modern-bert": "modernbert-base",
    "eurobert": "eurobert-210m",
}


def replay_seeds(tmp: Path) -> dict[str, bytes]:
    """arch → a header of that architecture, for every architecture the replay builds; an
    architecture without a seed is an error (the family must cover them all)."""
    from llamafit.memory.graph.models import MODELS as FAMILIES
    from llamafit.reader.model import read_model
    from scripts.fixtures.make_fixtures import variant
    from scripts.fixtures.make_shapes import write_shape

    missing = set(FAMILIES) - set(REPLAY_FIXTURES) - set(REPLAY_SHAPES)
    if missing:
        raise SystemExit(f"replay: no seed for {', '.join(sorted(missing))}")
    out = {}
    for arch in FAMILIES:
        name = REPLAY_FIXTURES.get(arch, "")
        if name.startswith("variant:"):
            path = variant(name.removeprefix("variant:")).write(tmp)[0]
        elif name:
            path = FIXTURES / name
        else:
            path = write_shape(REPLAY_SHAPES[arch], tmp / "shapes")
        with open(path, "rb") as f:  # the header alone: a header-only file of that model
            out[arch] = f.read(read_model(str(path)).shards[0].data_offset)
    return out


def replay(tally: Tally, rng: random.Random, n: int, tmp: Path) -> None:
    """n cases over every architecture the replay builds (round robin): one numeric
    hyperparameter of the architecture made hostile, through `check` on the CPU and on a Vulkan
    device, both of which the replay models."""
    from llamafit.reader.header import read_header
    from llamafit.reader.source import BytesSource

    seeds = replay_seeds(tmp)
    archs = list(seeds)
    keyed = {
        arch: [
            (k, v)
            for k, v in read_header(BytesSource(h)).metadata.items()
            if k.startswith(f"{arch}.") and isinstance(v, int) and not isinstance(v, bool)
        ]
        for arch, h in seeds.items()
    }
    for i in range(n):
        arch = archs[i % len(archs)]
        key, value = rng.choice(keyed[arch])
        new = rng.choice([0, 1, 3, 2**31 - 1, value // 2, value * 2, value + 1, None])
        header = seeds[arch]
        path = tmp / "replay.gguf"
        path.write_bytes(drop(header, key) if new is None else patch(header, key, 4, new))
        device = ["--gpu", "cpu"] if i % 2 == 0 else ["--gpu", "8GiB", "--backend", "vulkan"]
        cli(tally, "replay", f"{arch} {key}={new} {device[1]}", ["check", str(path), *device])


def report(tally: Tally, elapsed: float) -> bool:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = sum(tally.cases.values())
    print(f"cases            {total:,} ({', '.join(f'{k} {v:,}' for k, v in tally.cases.items())})")
    print(f"exit codes       {dict(sorted(tally.exits.items()))}")
    print(f"tracebacks       {len(tally.tracebacks)}")
    print(
        f"hangs            {len(tally.hangs)} (over {HANG_S:g} s of CPU or {WAIT_S:g} s wall; "
        f"http: over its {HTTP_DEADLINE:g} s deadline + {HANG_S:g} s wall)"
    )
    print(
        f"slowest case     {', '.join(f'{k} {v:.2f} s' for k, v in tally.slowest.items())} "
        "(CPU; http wall)"
    )
    print(
        f"slowest wall     {', '.join(f'{k} {v:.2f} s' for k, v in tally.slowest_wall.items())} "
        f"(this machine's load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    print(f"peak RSS         {peak_mb:,.0f} MB")
    print(f"bad exit codes   {len(tally.bad_exits)}")
    print(f"multi-line errs  {len(tally.multi_line)}")
    print(f"time             {elapsed:,.0f} s")
    for title, items in (
        ("TRACEBACK", tally.tracebacks),
        ("HANG", tally.hangs),
        ("EXIT", tally.bad_exits),
        ("MULTI-LINE", tally.multi_line),
    ):
        for item in items[:10]:
            print(f"--- {title}: {item}")
    ok = not (
        tally.tracebacks or tally.hangs or tally.bad_exits or tally.multi_line
    ) and peak_mb < (RSS_REPLAY_MB if tally.cases["replay"] else RSS_MB)
    print("targets          " + ("met" if ok else "NOT met"))
    return ok


def run(
    cases: int, seed: int, only: str | None = None, port_base: int = PORTS.start
) -> tuple[Tally, bool]:
    def stop(_sig: int, _frame: object) -> None:
        raise Stop

    previous = signal.signal(signal.SIGALRM, stop)
    saved = {
        k: os.environ.get(k)
        for k in (
            "LLAMAFIT_CACHE_DIR",
            "LLAMAFIT_CALIBRATION",
            "LLAMAFIT_HOST_BANDWIDTH",
            "LLAMAFIT_HOST_FLOPS",
        )
    }
    try:
        return _run(cases, seed, only, port_base)
    finally:
        signal.signal(signal.SIGALRM, previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(cases: int, seed: int, only: str | None, port_base: int) -> tuple[Tally, bool]:
    rng = random.Random(seed)
    tally = Tally()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llamafit-fuzz-") as tmp:
        os.environ["LLAMAFIT_CACHE_DIR"] = os.path.join(tmp, "cache")
        os.environ.pop("LLAMAFIT_CALIBRATION", None)
        # the speed model's host probe (256 MiB, once per fresh cache) is no hostile input: fixed
        # figures keep it out of the peak RSS measured here
        os.environ.update(LLAMAFIT_HOST_BANDWIDTH="50e9", LLAMAFIT_HOST_FLOPS="1e12")
        seeds = headers()
        warm_up(Path(tmp))
        if only in (None, "header-api"):
            header_api(tally, rng, cases * 6 // 10, seeds, Path(tmp))
        if only in (None, "header-cli"):
            header_cli(tally, rng, cases * 2 // 10, seeds, Path(tmp))
        if only in (None, "cmdline"):
            cmdline(tally, rng, cases * 2 // 10, Path(tmp))
        if only in (None, "sizes"):
            sizes(tally, seeds, Path(tmp))
        if only in (None, "http"):
            http(tally, max(1, cases // 2000), port_base)
        if only in (None, "replay"):
            n_replay = max(2 * (len(REPLAY_FIXTURES) + len(REPLAY_SHAPES)), cases // 10)
            replay(tally, rng, n_replay, Path(tmp))
    return tally, report(tally, time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--cases", type=int, default=2000, help="cases over the header and command-line families"
    )
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument(
        "--only", choices=["header-api", "header-cli", "cmdline", "sizes", "http", "replay"]
    )
    ap.add_argument(
        "--port-base",
        type=int,
        default=PORTS.start,
        help=f"first of the {len(PORTS)} loopback ports of the http family (default %(default)s)",
    )
    a = ap.parse_args(argv)
    return 0 if run(a.cases, a.seed, a.only, a.port_base)[1] else 1


if __name__ == "__main__":
    raise SystemExit(main())
