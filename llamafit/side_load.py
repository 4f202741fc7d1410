"""Find and read the side models a launch names (the I/O edge of side_models.py): the draft model's
header (a path, URL or hf: reference, as the main model), its vocabulary against the target's."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .errors import InputError
from .facts import ModelFacts, build_facts
from .findings import Notice
from .memory import MemoryModel
from .projector import ProjectorFacts, is_projector, local_mmproj, projector_facts
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
    projector = None
    if flags.mmproj and not flags.no_mmproj:
        projector, why = load_projector(flags.mmproj, model_path=facts.path, env=env)
        if why:
            notes.append(Notice("mmproj_found", {"path": projector.path, "why": why}))
        if projector.projection_dim and projector.projection_dim != facts.n_embd:
            raise InputError(f"{projector.path}: mismatch between text model (n_embd = {facts.n_embd}) and mmproj "
                             f"(n_embd = {projector.projection_dim}): llama-server refuses this pair (mtmd.cpp)")  # fmt: skip
        limits = projector.limits
        if limits.warmup_tokens is not None and projector.max_image_tokens(flags.image_max_tokens):
            notes.append(Notice("mmproj_warmup_small", {"warmup_tokens": limits.warmup_tokens,
                                                        "max_tokens": projector.max_image_tokens(flags.image_max_tokens)}))
    return SidePlan(flags, draft, flags.draft_model, projector, notes=tuple(notes))


def load_projector(spec: str, *, model_path: str, env: Mapping[str, str]) -> tuple[ProjectorFacts, str | None]:
    """The projector named by --mmproj (a path, URL, hf: reference, or "auto"), and why it was picked
    when llamafit picked it."""
    from .prepare import load_model

    why = None
    if spec == "auto":
        spec, why = find_mmproj(model_path)
    gguf = load_model(spec, demo=False, hf_repo=None, env=env)
    if not is_projector(gguf.metadata):
        raise InputError(f"--mmproj {spec}: not a projector (general.architecture is "
                         f"{gguf.metadata.get('general.architecture')!r}, not 'clip')")  # fmt: skip
    return projector_facts(gguf.path, gguf.metadata, gguf.tensors), why


def find_mmproj(model_path: str) -> tuple[str, str]:
    """`--mmproj auto` for a local model: mmproj*.gguf in the model's directory (llama.cpp's -hf rule
    among several: the closest quantization to the model's)."""
    directory = os.path.dirname(os.path.abspath(model_path))
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise InputError(f"--mmproj auto: cannot list {directory}: {e.strerror}") from None
    picked = local_mmproj(os.path.basename(model_path), names)
    if picked is None:
        raise InputError(f"--mmproj auto: no mmproj*.gguf next to {model_path}")
    others = [n for n in names if n != picked and n.lower().startswith("mmproj") and n.endswith(".gguf")]
    why = "mmproj*.gguf next to the model" + (f"; closest quantization among {len(others) + 1}" if others else "")
    return os.path.join(directory, picked), why
