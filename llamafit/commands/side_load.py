"""Find and read the side models a launch names (the I/O edge of side_models.py): the draft model's
header (a path, URL or hf: reference, as the main model), its vocabulary against the target's."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..errors import InputError
from ..facts.hparams import ModelFacts, build_facts
from ..facts.projector import ProjectorFacts, is_projector, projector_facts
from ..findings import Notice
from ..memory.model import MemoryModel
from ..memory.side_models import (
    BUILD_UNIFIED_DRAFT,
    SideFlags,
    SidePlan,
    vocab_info,
    vocab_mismatch,
)
from ..paths import is_url
from ..reader.model import GGUFModel
from ..server.flags import ParsedServerArgs
from ..server.side_flags import parse_side_flags

# prepare.load_model: (reference, demo=, hf_repo=, env=) → the model's header(s)
LoadModel = Callable[..., GGUFModel]


def load_side_plan(
    parsed: ParsedServerArgs,
    metadata: Mapping[str, Any],
    facts: ModelFacts,
    env: Mapping[str, str],
    *,
    load_model: LoadModel,
    auto_mmproj: bool = False,
    build: int | None = None,
) -> SidePlan | None:
    """The side models of this launch, read and checked; None when there are none. With
    `auto_mmproj` (plan, run, script) a projector found next to the model is used unless --no-mmproj
    says not to. `load_model` reads a model reference's header (prepare.load_model)."""
    # -cd: a flag of older builds
    flags = parse_side_flags((*parsed.passthrough, *parsed.unknown), env)
    notes: list[Notice] = []
    defaulted = (
        auto_mmproj
        and flags.mmproj is None
        and not flags.no_mmproj
        and _has_mmproj_next_to(facts.path, env)
    )
    if defaulted:
        flags = replace(flags, mmproj="auto", given=flags.given | {"mmproj"})
    if (
        not flags.any and "spec_types" not in flags.given
    ):  # --spec-type none is kept: --prefer speed reads it
        return None
    draft, same_file = _draft(flags, metadata, facts, env, load_model, notes)
    _check_mtp(flags, facts)
    if flags.draft_ctx is not None and (build is None or build >= BUILD_UNIFIED_DRAFT):
        notes.append(Notice("draft_ctx_ignored"))
    projector = None
    if flags.mmproj and not flags.no_mmproj:
        try:
            projector = _projector(flags, facts, env, load_model, notes, defaulted=defaulted)
        except InputError as e:
            if not defaulted:
                raise
            # found by default: not worth failing for
            notes.append(Notice("mmproj_skipped", {"reason": str(e)}))
            flags = replace(flags, mmproj=None)
            if not flags.any:
                return None
    return SidePlan(
        flags, draft, flags.draft_model, projector, notes=tuple(notes), draft_same_file=same_file
    )


def _draft(
    flags: SideFlags,
    metadata: Mapping[str, Any],
    facts: ModelFacts,
    env: Mapping[str, str],
    load_model: LoadModel,
    notes: list[Notice],
) -> tuple[MemoryModel | None, bool]:
    """The draft model (-md) and whether it is the target's own file; its vocabulary checked
    against the target's (a note when they differ, or when no --spec-type uses it)."""
    if not flags.draft_model:
        return None, False
    dmodel = load_model(flags.draft_model, demo=False, hf_repo=None, env=env)
    dfacts = build_facts(dmodel)
    bad = vocab_mismatch(
        vocab_info(metadata, facts.n_vocab), vocab_info(dmodel.metadata, dfacts.n_vocab)
    )
    if bad:
        notes.append(Notice("draft_incompatible", {"reason": bad}))
    elif not flags.spec_types or flags.spec_types == ("none",):
        notes.append(Notice("draft_without_spec_type"))
    return MemoryModel(dfacts), _same_file(dmodel.path, facts.path)


def _check_mtp(flags: SideFlags, facts: ModelFacts) -> None:
    if flags.mtp and not facts.n_layer_nextn:
        raise InputError(
            f"--spec-type draft-mtp: {facts.path} has no NextN/MTP layers "
            f"({facts.architecture}.nextn_predict_layers is 0)"
        )


def _projector(
    flags: SideFlags,
    facts: ModelFacts,
    env: Mapping[str, str],
    load_model: LoadModel,
    notes: list[Notice],
    *,
    defaulted: bool,
) -> ProjectorFacts:
    """The projector (--mmproj, or found next to the model when `defaulted`), checked against the
    text model (mtmd.cpp refuses a pair of different n_embd); notes on where it was found and on
    a warm-up smaller than the images it takes."""
    projector, why = load_projector(
        flags.mmproj or "", model_path=facts.path, env=env, load_model=load_model
    )
    if projector.projection_dim and projector.projection_dim != facts.n_embd:
        raise InputError(
            f"{projector.path}: mismatch between text model (n_embd = {facts.n_embd}) and "
            f"mmproj (n_embd = {projector.projection_dim}): llama-server refuses this pair "
            "(mtmd.cpp)"
        )
    if why:
        why += "; used by default, --no-mmproj leaves it out" if defaulted else ""
        notes.append(Notice("mmproj_found", {"path": projector.path, "why": why}))
    limits = projector.limits
    max_tokens = projector.max_image_tokens(flags.image_max_tokens)
    if limits.warmup_tokens is not None and max_tokens:
        found = {"warmup_tokens": limits.warmup_tokens, "max_tokens": max_tokens}
        notes.append(Notice("mmproj_warmup_small", found))
    return projector


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # a URL, or a file gone: not the same local file
        return False


def load_projector(
    spec: str, *, model_path: str, env: Mapping[str, str], load_model: LoadModel
) -> tuple[ProjectorFacts, str | None]:
    """The projector named by --mmproj (a path, URL, hf: reference, or "auto"), and why it was
    picked when llamafit picked it."""
    why = None
    if spec == "auto":
        spec, why = find_mmproj(model_path, env)
    gguf = load_model(spec, demo=False, hf_repo=None, env=env)
    if not is_projector(gguf.metadata):
        raise InputError(
            f"--mmproj {spec}: not a projector (general.architecture is "
            f"{gguf.metadata.get('general.architecture')!r}, not 'clip')"
        )
    return projector_facts(gguf.path, gguf.metadata, gguf.tensors), why


def _has_mmproj_next_to(model_path: str, env: Mapping[str, str]) -> bool:
    try:
        find_mmproj(model_path, env)
    except InputError:
        return False
    return True


_HF_RESOLVE = re.compile(
    r"^(?P<endpoint>https?://[^/]+)/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"
)


def find_mmproj(model_path: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """`--mmproj auto`: for a model from a Hugging Face repo, llama.cpp's -hf rule over the repo's
    files (common/download.cpp find_best_sibling: the same or a parent directory, the closest
    quantization); for a local model, mmproj*.gguf in its directory by the same rule."""
    m = _HF_RESOLVE.match(model_path)
    if m:
        return _find_remote_mmproj(m, env or {})
    if is_url(model_path):
        raise InputError(
            f"--mmproj auto: {model_path} is not in a Hugging Face repository; give --mmproj URL"
        )
    ollama = _ollama_projector(model_path)
    if ollama is not None:
        return ollama
    directory = os.path.dirname(os.path.abspath(model_path))
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise InputError(f"--mmproj auto: cannot list {directory}: {e.strerror}") from None
    picked = None
    if any(n.lower().startswith("mmproj") and n.endswith(".gguf") for n in names):
        from ..fetch.stores import local_mmproj  # the store code only when there is one to pick

        picked = local_mmproj(os.path.basename(model_path), names)
    if picked is None:
        raise InputError(f"--mmproj auto: no mmproj*.gguf next to {model_path}")
    others = [
        n for n in names if n != picked and n.lower().startswith("mmproj") and n.endswith(".gguf")
    ]
    why = "mmproj*.gguf next to the model" + (
        f"; closest quantization among {len(others) + 1}" if others else ""
    )
    return os.path.join(directory, picked), why


_OLLAMA_BLOB = re.compile(r"^sha256-[0-9a-f]{64}$")


def _ollama_projector(model_path: str) -> tuple[str, str] | None:
    """A model blob of an Ollama store (<root>/blobs/sha256-<hex>, what `ollama:NAME` resolves to):
    the projector layer (application/vnd.ollama.image.projector) of a manifest whose model layer is
    this blob; None when the path is not such a blob. Ollama keeps the projector as its own blob,
    never next to the model under an mmproj name."""
    path = os.path.abspath(model_path)
    blobs = os.path.dirname(path)
    if os.path.basename(blobs) != "blobs" or not _OLLAMA_BLOB.match(os.path.basename(path)):
        return None
    from ..fetch.store_scan import scan_ollama

    found, _ = scan_ollama(os.path.dirname(blobs))
    mine = [f for f in found if os.path.abspath(f.path) == path]
    if not mine:
        return None  # a blob no manifest names: the directory rule applies
    with_proj = [f for f in mine if f.mmproj]
    if not with_proj:
        raise InputError(
            f"--mmproj auto: the Ollama manifest of {mine[0].name} has no projector layer"
        )
    return with_proj[
        0
    ].mmproj or "", f"the projector layer of the Ollama manifest {with_proj[0].name}"


def _find_remote_mmproj(m: re.Match[str], env: Mapping[str, str]) -> tuple[str, str]:
    from ..fetch.hf import hf_settings, resolve_url
    from ..fetch.model_source import _hub_listing
    from ..fetch.remote import DEFAULT_TIMEOUT
    from ..fetch.stores import best_sibling

    repo, rev = m.group("repo"), urllib.parse.unquote(m.group("rev"))
    path = urllib.parse.unquote(m.group("path"))
    settings = hf_settings(env)
    listing, _ = _hub_listing(settings, repo, rev, DEFAULT_TIMEOUT)
    picked = best_sibling(listing.files, path)
    if picked is None:
        raise InputError(f"--mmproj auto: no mmproj*.gguf in {repo} next to {path}")
    n = sum(1 for f in listing.files if f.endswith(".gguf") and "mmproj" in f)
    why = f"in {repo}, by llama.cpp's -hf rule" + (f" among {n} projectors" if n > 1 else "")
    return resolve_url(m.group("endpoint"), repo, rev, picked), why
