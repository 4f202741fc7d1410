"""MTP self-speculation under `--prefer speed` (pure): whether the plan turns it on, and what it
should do to generation speed.

llama-server drafts with the model's own NextN blocks when `--spec-type draft-mtp` is given
(common/speculative.cpp common_speculative_impl_draft_mtp; PR #22673, merged 2026-05-16). Each step
drafts up to n_max tokens (--spec-draft-n-max, common_params_speculative_draft::n_max = 3), one pass
of a NextN block each (e.g. src/models/glm4-moe.cpp graph_mtp: eh_proj, one attention + MoE block,
then shared_head_head or the model's output matrix), then verifies the drafts in one batch of n_max
+ 1 tokens on the target.

Generation is memory-bound (speed.py), so a step costs what it reads:
- the target's verify batch reads every main weight once, but of the routed experts the share n+1
  tokens touch: 1 - (1 - k/N)^(n+1) (k = n_expert_used of N, tokens routed independently);
- each draft pass reads one NextN block (its routed experts at k/N; nextn.embed_tokens is a row
  lookup) and the head it multiplies by.
Tokens per step = 1 + r x n, with r the acceptance rate as llama-server reports it (accepted /
drafted). Speed-up = (1 + r x n) x bytes(one target token) / (bytes(verify of n+1) + n x bytes(draft
pass)), at an empty context: an upper bound, as verifying n+1 tokens is taken as memory-bound too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..facts.hparams import ModelFacts
from ..facts.tensor_names import is_expert
from ..memory.placement import tensor_layer

# acceptance rates public llama-server MTP runs reported (accepted / drafted, llama.cpp's
# mtp-bench): 0.59-0.85 over nine prompts (Qwen3.6, --spec-draft-n-max 2, PR #23269 thread,
# 2026-05-19)
ACCEPTANCE = (0.59, 0.85)
DRAFT_N_MAX = 3  # common/common.h common_params_speculative_draft::n_max


@dataclass(frozen=True, slots=True)
class MtpEffect:
    """The expected effect of MTP self-speculation on generation (docs/side-models.md; plan --json `mtp`)."""

    n_draft: int  # tokens drafted per step (--spec-draft-n-max)
    target_bytes: int  # one target token's weight reads
    verify_bytes: int  # the verify batch of n_draft + 1 tokens
    draft_bytes: int  # one draft pass (a NextN block and its head)
    acceptance: tuple[float, float]
    speedup: tuple[float, float]  # at the low and the high acceptance rate


def _reads(facts: ModelFacts, *, tokens: int) -> tuple[int, int]:
    """(target bytes for `tokens` tokens in one batch, bytes of one draft pass)."""
    moe = facts.moe
    k, n = (moe.n_expert_used, moe.n_expert) if moe and moe.n_expert else (1, 1)
    union = 1 - (1 - k / n) ** tokens
    target = draft = 0
    head = next_head = 0
    n_nextn = max(facts.n_layer_all - facts.n_layer, 1)
    for t in facts.tensors:
        il = tensor_layer(t.name)
        exps = is_expert(t.name)
        if il is None:
            if t.name.startswith(("output.", "output_norm.")):
                target += t.n_bytes
                head += t.n_bytes if t.name.startswith("output.") else 0
            continue
        if il < facts.n_layer:
            target += round(t.n_bytes * union) if exps else t.n_bytes
        elif ".nextn.shared_head_head" in t.name:
            next_head += t.n_bytes
        elif ".nextn.embed_tokens" not in t.name:
            draft += round(t.n_bytes * k / n) if exps else t.n_bytes
    if not head:  # a tied output multiplies by token_embd
        head = sum(t.n_bytes for t in facts.tensors if t.name == "token_embd.weight")
        target += head
    return target, draft // n_nextn + (next_head // n_nextn if next_head else head)


def mtp_effect(
    facts: ModelFacts, n_draft: int = DRAFT_N_MAX, acceptance: tuple[float, float] = ACCEPTANCE
) -> MtpEffect:
    one, draft = _reads(facts, tokens=1)
    verify, _ = _reads(facts, tokens=n_draft + 1)
    step = verify + n_draft * draft

    def speedup(r: float) -> float:
        return (1 + r * n_draft) * one / step if step else 1.0

    return MtpEffect(
        n_draft, one, verify, draft, acceptance, (speedup(acceptance[0]), speedup(acceptance[1]))
    )
