"""llama.cpp's tensor-name rules (facts/tensor_names.py), the one place the expert and dense-FFN
patterns of common/common.h live (fit/speed.py and fit/mtp.py use them)."""

from __future__ import annotations

import pytest

from llamafit.facts.tensor_names import is_dense_ffn, is_expert, split_block


@pytest.mark.parametrize(
    "name, expert, dense",
    [
        ("blk.0.ffn_up_exps.weight", True, False),
        ("blk.0.ffn_gate_up_exps.weight", True, False),
        ("blk.3.ffn_down_chexps.weight", True, False),
        ("blk.0.ffn_gate_inp.weight", False, False),  # the router stays
        ("blk.0.ffn_up_shexp.weight", False, False),  # shared experts stay
        ("blk.0.ffn_up.weight", False, True),
        ("blk.0.ffn_gate.weight", False, True),
        ("blk.0.attn_q.weight", False, False),
        ("token_embd.weight", False, False),
    ],
)
def test_expert_and_dense_ffn_names(name: str, expert: bool, dense: bool) -> None:
    assert (is_expert(name), is_dense_ffn(name)) == (expert, dense)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("blk.12.attn_q.weight", (12, "attn_q.weight")),
        ("output.weight", None),
        ("blk.x.attn_q.weight", None),
    ],
)
def test_split_block(name: str, expected: tuple[int, str] | None) -> None:
    assert split_block(name) == expected
