"""Store references (an edge: reads the stores' directories), as `llamafit ls` names models:

    ollama:qwen2.5:32b                   Ollama's name → its model blob (OLLAMA_MODELS or ~/.ollama/models)
    lmstudio:publisher/repo[:quant]      a file in LM Studio's models folder, picked by llama.cpp's -hf rule
    hf:org/repo[:quant]                  the file -hf would pick, from the local hub cache when all its
                                         shards are there (no network); else None, and the Hub is asked

Layouts and names: llamafit.fetch.stores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import InputError
from ..safe_io import SMALL_FILE, read_regular
from .hf import parse_repo_spec, pick_model_files
from .store_scan import _gguf_files, scan_ollama
from .stores import (
    Found,
    Note,
    hf_hub_cache,
    llama_hf_cache,
    lmstudio_dirs,
    ollama_dirs,
    parse_ollama_ref,
)

PREFIXES = ("ollama:", "lmstudio:", "hf:")


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def local_path(arg: str, env: Mapping[str, str]) -> str | None:
    """The local file a store reference names; None when `arg` is not one (or, for hf:, not
    cached)."""
    if arg.startswith("ollama:"):
        return ollama_path(arg.removeprefix("ollama:"), env)
    if arg.startswith("lmstudio:"):
        return lmstudio_path(arg.removeprefix("lmstudio:"), env)
    if arg.startswith("hf:") and not arg.startswith("hf://"):
        return hf_cached_path(arg, env)
    return None


def ollama_path(ref: str, env: Mapping[str, str]) -> str:
    return ollama_found(ref, env).path


def ollama_found(ref: str, env: Mapping[str, str]) -> Found:
    """The Ollama model `ref` names, with the projector its manifest pairs with it
    (Found.mmproj)."""
    try:
        parts = parse_ollama_ref(ref)
    except ValueError:
        raise InputError(
            f"ollama:{ref}: expected an Ollama model name such as qwen2.5:32b"
        ) from None
    searched = ollama_dirs(env, _home(env))
    names = []
    for root in searched:
        found, notes = scan_ollama(root)
        for f in found:
            if _same_ollama(f.name, parts):
                return f
        names += [f.name for f in found]
        for n in notes:
            if n.code == "missing-blob" and n.detail.startswith(f"{ref}:"):
                raise InputError(
                    f"ollama:{ref}: the manifest names a blob that is missing ({n.path}); "
                    f"pull it again: ollama pull {ref}"
                )
    have = ", ".join(sorted(names)) or "none"
    raise InputError(
        f"ollama:{ref}: no such model in {' or '.join(searched)} (models there: {have})"
    )


def _same_ollama(name: str, parts: tuple[str, str, str, str]) -> bool:
    try:
        return parse_ollama_ref(name) == parts
    except ValueError:
        return False


def lmstudio_path(ref: str, env: Mapping[str, str]) -> str:
    repo_spec = parse_repo_spec(ref)
    for root in lmstudio_dirs(_home(env)):
        top = os.path.join(root, repo_spec.repo)
        if os.path.isdir(top):
            files = _gguf_files(top, "lmstudio", [])
            return os.path.join(top, pick_model_files(files, repo_spec)[0])
    raise InputError(
        f"lmstudio:{ref}: no folder {repo_spec.repo} in {' or '.join(lmstudio_dirs(_home(env)))}"
    )


def hf_cached_path(arg: str, env: Mapping[str, str]) -> str | None:
    """The file `-hf org/repo[:quant]` would load, when every shard is in a local hub cache
    (huggingface_hub's, then llama.cpp's LLAMA_CACHE); the snapshot of refs/main."""
    repo_spec = parse_repo_spec(arg)
    home = _home(env)
    for cache in dict.fromkeys((hf_hub_cache(env, home), llama_hf_cache(env, home))):
        top = _snapshot(os.path.join(cache, "models--" + repo_spec.repo.replace("/", "--")))
        if top is None:
            continue
        notes: list[Note] = []
        files = _gguf_files(top, "hf", notes)
        try:
            picked = pick_model_files(files, repo_spec)
        except InputError:
            continue
        return os.path.join(top, picked[0])
    return None


def _snapshot(repo_dir: str) -> str | None:
    try:  # a small regular file (never a FIFO that blocks)
        commit = (
            read_regular(os.path.join(repo_dir, "refs", "main"), SMALL_FILE, follow=True)
            .decode("utf-8", "replace")
            .partition("\n")[0]
            .strip()
        )
    except OSError:
        return None
    top = os.path.join(repo_dir, "snapshots", commit)
    return top if commit and os.path.isdir(top) else None
