"""Find and read the side models a launch names (the I/O edge of side_models.py): the draft model's
header (a path, URL or hf: reference, as the main model), its vocabulary against the target's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InputError
from .facts import ModelFacts, build_facts
from .findings import Notice
from .memory import MemoryModel
from .server_flags import ParsedServerArgs
from .side_models import SidePlan, parse_side_flags, vocab_info, vocab_mismatch


def load_side_plan(parsed: ParsedServerArgs, metadata: Mapping[str, Any], facts: ModelFacts,
                   env: Mapping[str, str]) -> SidePlan | None:  # fmt: skip
    """The side models of this launch, read and checked; None when there are none."""
    from .prepare import load_model

    flags = parse_side_flags(parsed.passthrough, env)
    if not flags.any:
        return None
    notes: list[Notice] = []
    draft = None
    if flags.draft_model:
        dmodel = load_model(flags.draft_model, demo=False, hf_repo=None, env=env)
        dfacts = build_facts(dmodel)
        bad = vocab_mismatch(vocab_info(metadata, facts.n_vocab), vocab_info(dmodel.metadata, dfacts.n_vocab))
        if bad:
            notes.append(Notice("draft_incompatible", {"reason": bad}))
        elif not flags.spec_types or flags.spec_types == ("none",):
            notes.append(Notice("draft_without_spec_type"))
        draft = MemoryModel(dfacts)
    if flags.mtp and not facts.n_layer_nextn:
        raise InputError(f"--spec-type draft-mtp: {facts.path} has no NextN/MTP layers "
                         f"({facts.architecture}.nextn_predict_layers is 0)")  # fmt: skip
    if flags.draft_ctx is not None:
        notes.append(Notice("draft_ctx_ignored"))
    return SidePlan(flags, draft, flags.draft_model, notes=tuple(notes))
