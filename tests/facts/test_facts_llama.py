"""The facts agree with real llama.cpp: every fixture and the real Gemma 3 270M loaded with
llama-cpp-python; each KV cache's cells, layers and K/V sizes, and the recurrent state, as
llama.cpp logs them (MiB with two decimals, so 65,536 cells pin the bytes per cell exactly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafit.facts.hparams import ModelFacts, build_facts
from llamafit.memory.kv import swa_cells
from llamafit.reader.ggml_types import GGMLType
from llamafit.reader.model import read_model
from tests.support import FIXTURES, needs_llama_cpp
from tests.support.llama_probe import KVLine, RSLine, kv_lines, load_logs, rs_lines

pytestmark = [pytest.mark.slow, needs_llama_cpp]
F16 = GGMLType.named("f16")
MIB = 1 << 20
CONFIGS = [
    {"n_ctx": 65536, "flash_attn": True, "swa_full": False, "n_ubatch": 512},
    {"n_ctx": 4096, "flash_attn": False, "swa_full": True, "n_ubatch": 512},
]
LOADABLE = sorted(
    p.name for p in FIXTURES.glob("*.gguf") if "-0000" not in p.name or "-00001-" in p.name
)


def predicted_kv(f: ModelFacts, n_ctx: int, flash_attn: bool, swa_full: bool) -> list[KVLine]:
    """One line per cache llama.cpp builds: the non-SWA cache first, then the SWA one."""
    groups = [
        [il for il in range(f.n_layer_all) if f.has_kv[il] and f.swa.is_swa[il] == swa]
        for swa in (False, True)
    ]
    lines = []
    for swa, group in zip((False, True), groups, strict=False):
        if swa and f.swa.swa_type == "none" or not group:
            continue
        cells = (
            swa_cells(n_ctx, f.swa.n_swa, 1, 512, unified=False, swa_full=swa_full)
            if swa
            else n_ctx
        )
        v_width = (lambda il: f.n_embd_v_gqa(il)) if flash_attn else (lambda il: f.n_embd_v_gqa_max)
        k = sum(F16.row_size(f.n_embd_k_gqa(il)) for il in group) * cells
        v = 0 if f.mla else sum(F16.row_size(v_width(il)) for il in group) * cells
        lines.append(KVLine(cells, len(group), k / MIB, v / MIB))
    return lines


def assert_same(logged: list[KVLine], predicted: list[KVLine]) -> None:
    assert [(x.cells, x.layers) for x in logged] == [(x.cells, x.layers) for x in predicted]
    for got, want in zip(logged, predicted, strict=False):
        assert got.k_mib == pytest.approx(want.k_mib, abs=0.0051)
        assert got.v_mib == pytest.approx(want.v_mib, abs=0.0051)


@pytest.mark.parametrize("name", LOADABLE)
def test_fixture_kv_matches_llama_cpp(name: str) -> None:
    path = FIXTURES / name
    f = build_facts(read_model(path))
    logs = load_logs(str(path), CONFIGS)
    for cfg, log in zip(CONFIGS, logs, strict=False):
        assert_same(
            kv_lines(log), predicted_kv(f, cfg["n_ctx"], cfg["flash_attn"], cfg["swa_full"])
        )
        if f.recurrent:
            n_recr = sum(f.is_recurrent)
            want = RSLine(
                1, 4 * f.recurrent.n_embd_r * n_recr / MIB, 4 * f.recurrent.n_embd_s * n_recr / MIB
            )
            got = rs_lines(log)
            assert len(got) == 1 and got[0].cells == 1
            assert (got[0].r_mib, got[0].s_mib) == (
                pytest.approx(want.r_mib, abs=0.0051),
                pytest.approx(want.s_mib, abs=0.0051),
            )
        else:
            assert rs_lines(log) == []


def test_gemma3_270m_kv_matches_llama_cpp(demo_path: Path) -> None:
    f = build_facts(read_model(demo_path))
    logs = load_logs(str(demo_path), CONFIGS)
    for cfg, log in zip(CONFIGS, logs, strict=False):
        assert_same(
            kv_lines(log), predicted_kv(f, cfg["n_ctx"], cfg["flash_attn"], cfg["swa_full"])
        )
