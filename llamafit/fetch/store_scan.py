"""Model stores, the edge: walk each store's directories (layouts and names: llamafit.fetch.stores).

Nothing here raises on a broken store: a dangling symlink, a manifest naming a missing blob, a
partial download or an unreadable directory becomes a Note, and the walk goes on.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Iterable, Mapping, Sequence

from ..reader.names import split_info
from ..safe_io import SMALL_FILE, read_regular
from .stores import (
    OLLAMA_MODEL,
    Found,
    Note,
    Root,
    blob_name,
    default_roots,
    group_files,
    ollama_layers,
    ollama_name,
    repo_name,
)

_PARTIAL = (".incomplete", ".downloadInProgress")  # huggingface_hub; common/download.cpp
# what a hub ref holds: a commit hash (huggingface_hub writes the 40-digit SHA-1 of the revision;
# #37 F9: a ref of `/` or `../../../..` made `ls` walk the whole file system)
_COMMIT = re.compile(r"[0-9a-fA-F]{7,64}")


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _list(path: str, store: str, notes: list[Note]) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as e:
        notes.append(Note(store, path, "unreadable", _why(e)))
        return []


def _is_dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def _gguf_files(top: str, store: str, notes: list[Note]) -> list[str]:
    """Relative paths of the *.gguf files below `top` that exist (links followed to files);
    dangling links, partial downloads and unreadable directories become notes."""
    out: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        for e in _list(os.path.join(top, rel), store, notes):
            sub = f"{rel}/{e.name}" if rel else e.name
            if _is_dir(e):
                if not e.is_symlink():
                    stack.append(sub)
            elif e.name.endswith(_PARTIAL):
                notes.append(Note(store, e.path, "partial-download", "unfinished download"))
            elif e.name.endswith(".gguf"):
                if e.is_symlink() and not os.path.exists(e.path):
                    notes.append(Note(store, e.path, "dangling-symlink", "its target is gone"))
                else:
                    out.append(sub)
    return sorted(out)


def _hub_repo(repo_dir: str, store: str, notes: list[Note]) -> list[Found]:
    """One `models--org--repo` folder: the snapshot its refs name (main first: common/hf-cache.cpp
    get_cached_ref), else its newest snapshot."""
    repo = os.path.basename(repo_dir).removeprefix("models--").replace("--", "/")
    for e in _list(os.path.join(repo_dir, "blobs"), store, notes):
        if e.name.endswith(_PARTIAL):
            notes.append(Note(store, e.path, "partial-download", "unfinished download"))
    commit = None
    refs = _list(os.path.join(repo_dir, "refs"), store, notes)
    for e in sorted(refs, key=lambda e: e.name != "main"):
        try:  # a small regular file (never a FIFO that blocks `ls`)
            text = read_regular(e.path, SMALL_FILE, follow=True).decode("utf-8", "replace")
            commit = text.partition("\n")[0].strip() or None
        except OSError:
            continue
        if commit and not _COMMIT.fullmatch(commit):  # `/`, `../../..`: never outside the cache
            notes.append(Note(store, e.path, "bad-ref", "names no commit hash; ignored"))
            commit = None
        if commit:
            break
    snapshots = os.path.join(repo_dir, "snapshots")
    if commit is None or not os.path.isdir(os.path.join(snapshots, commit)):
        found = [e for e in _list(snapshots, store, notes) if _is_dir(e)]
        if not found:
            return []
        commit = max(found, key=lambda e: e.stat().st_mtime_ns).name
    top = os.path.join(snapshots, commit)
    files = _gguf_files(top, store, notes)
    return _found(store, repo, top, files, notes, prefix="hf")


def _found(
    store: str, repo: str, top: str, files: Sequence[str], notes: list[Note], *, prefix: str
) -> list[Found]:
    groups, problems = group_files(files)
    notes.extend(Note(store, os.path.join(top, p), code, detail) for p, code, detail in problems)
    out = []
    for g in groups:
        name = repo_name(repo, g.shards[0], files)
        ref = f"{prefix}:{name}" if ":" in name else os.path.join(top, g.shards[0])
        mmproj = os.path.join(top, g.mmproj) if g.mmproj else None
        out.append(Found(store, name, ref, tuple(os.path.join(top, s) for s in g.shards), mmproj))
    return out


def scan_hub(root: str, store: str = "hf") -> tuple[list[Found], list[Note]]:
    """A hub-layout cache (huggingface_hub's, or llama.cpp's -hf cache)."""
    notes: list[Note] = []
    found: list[Found] = []
    for e in _list(root, store, notes):
        if e.name.startswith("models--") and _is_dir(e):
            found += _hub_repo(e.path, store, notes)
    return found, notes


def scan_llama_cache(root: str) -> tuple[list[Found], list[Note]]:
    """llama.cpp's cache directory: hub-layout repos (-hf) and flat files (-mu, -dr, older -hf)."""
    found, notes = scan_hub(root, "llama.cpp")
    flat = []
    for e in _list(root, "llama.cpp", notes):
        if e.name.endswith(_PARTIAL):
            notes.append(Note("llama.cpp", e.path, "partial-download", "unfinished download"))
        elif e.name.endswith(".gguf") and not _is_dir(e):
            if e.is_symlink() and not os.path.exists(e.path):
                notes.append(Note("llama.cpp", e.path, "dangling-symlink", "its target is gone"))
            else:
                flat.append(e.name)
    return found + _plain(root, flat, "llama.cpp", notes), notes


def _plain(
    top: str, files: Sequence[str], store: str, notes: list[Note], base: str = ""
) -> list[Found]:
    """Files named by their path below the store (split suffix and .gguf dropped)."""
    groups, problems = group_files(files)
    notes.extend(Note(store, os.path.join(top, p), code, detail) for p, code, detail in problems)
    out = []
    for g in groups:
        shards = tuple(os.path.join(top, s) for s in g.shards)
        info = split_info(g.shards[0])  # `x-00001-of-00003.gguf` → `x`
        name = info.prefix if info else g.shards[0]
        name = f"{base}/{name}" if base else name
        out.append(
            Found(store, name, shards[0], shards, os.path.join(top, g.mmproj) if g.mmproj else None)
        )
    return out


def scan_ollama(root: str) -> tuple[list[Found], list[Note]]:
    """`manifests/<registry>/<namespace>/<model>/<tag>` → blobs (see llamafit.fetch.stores)."""
    notes: list[Note] = []
    found: list[Found] = []
    blobs = os.path.join(root, "blobs")
    for e in _list(blobs, "ollama", notes):
        if (
            e.name.endswith("-partial") or "-partial-" in e.name
        ):  # server/download.go: <blob>-partial[-N]
            notes.append(Note("ollama", e.path, "partial-download", "unfinished pull"))
    for reg in _dirs(os.path.join(root, "manifests"), notes):
        for ns in _dirs(reg.path, notes):
            for model in _dirs(ns.path, notes):
                for tag in _list(model.path, "ollama", notes):
                    if _is_dir(tag):
                        continue
                    name = ollama_name(reg.name, ns.name, model.name, tag.name)
                    found += _ollama_model(tag.path, name, blobs, notes)
    return found, notes


def _dirs(path: str, notes: list[Note]) -> Iterable[os.DirEntry[str]]:
    return [e for e in _list(path, "ollama", notes) if _is_dir(e)]


def _ollama_model(manifest_path: str, name: str, blobs: str, notes: list[Note]) -> list[Found]:
    try:  # a small regular file: not a FIFO, not /dev/zero
        manifest = json.loads(read_regular(manifest_path, 16 * SMALL_FILE, follow=True))
    except OSError as e:
        notes.append(Note("ollama", manifest_path, "unreadable", f"{name}: {_why(e)}"))
        return []
    except (ValueError, RecursionError):
        notes.append(Note("ollama", manifest_path, "bad-manifest", f"{name}: not JSON"))
        return []
    layers = ollama_layers(manifest)
    if layers is None or layers.model is None:
        notes.append(
            Note(
                "ollama", manifest_path, "bad-manifest", f"{name}: no layer of type {OLLAMA_MODEL}"
            )
        )
        return []
    paths: list[str | None] = []
    for digest in (layers.model, layers.projector):
        if digest is None:
            paths.append(None)
            continue
        blob = blob_name(digest)
        path = os.path.join(blobs, blob) if blob else None
        if path is None or not os.path.isfile(path):
            notes.append(
                Note(
                    "ollama", path or manifest_path, "missing-blob", f"{name}: its blob is missing"
                )
            )
            if digest == layers.model:
                return []
        paths.append(path if path and os.path.isfile(path) else None)
    if layers.adapters:
        notes.append(
            Note(
                "ollama",
                manifest_path,
                "lora-adapter",
                f"{name}: its LoRA adapter layer is not modelled",
            )
        )
    model_path = paths[0]
    assert model_path is not None
    return [Found("ollama", name, f"ollama:{name}", (model_path,), paths[1])]


def scan_lmstudio(root: str) -> tuple[list[Found], list[Note]]:
    """`<publisher>/<repo>/…/*.gguf`, named `publisher/repo:TAG`."""
    notes: list[Note] = []
    found: list[Found] = []
    for pub in _list(root, "lmstudio", notes):
        if not _is_dir(pub) or pub.name.startswith("."):
            continue
        for repo in _list(pub.path, "lmstudio", notes):
            if _is_dir(repo):
                files = _gguf_files(repo.path, "lmstudio", notes)
                found += _found(
                    "lmstudio",
                    f"{pub.name}/{repo.name}",
                    repo.path,
                    files,
                    notes,
                    prefix="lmstudio",
                )
    return found, notes


def scan_dir(root: str) -> tuple[list[Found], list[Note]]:
    """Any directory: every *.gguf below it, grouped per folder, named by its path below `root`."""
    notes: list[Note] = []
    files = _gguf_files(root, "dir", notes)
    by_folder: dict[str, list[str]] = {}
    for f in files:
        folder, _, name = f.rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    found: list[Found] = []
    for folder, names in sorted(by_folder.items()):
        found += _plain(
            os.path.join(root, folder) if folder else root, names, "dir", notes, base=folder
        )
    return found, notes


def scan_root(root: Root) -> tuple[list[Found], list[Note]]:
    if root.store == "ollama":
        return scan_ollama(root.path)
    if root.store == "lmstudio":
        return scan_lmstudio(root.path)
    if root.store == "hf":
        return scan_hub(root.path)
    if root.store == "llama.cpp":
        return scan_llama_cache(root.path)
    return scan_dir(root.path)


def root_for_path(path: str) -> Root:
    """What a directory given on the command line is: an Ollama store, a hub cache, or plain."""
    if os.path.isdir(os.path.join(path, "manifests")) and os.path.isdir(
        os.path.join(path, "blobs")
    ):
        return Root("ollama", path)
    try:
        with os.scandir(path) as it:
            if any(e.name.startswith("models--") for e in it):
                return Root("hf", path)
    except OSError:
        pass
    return Root("dir", path)


def this_machine_roots(env: Mapping[str, str]) -> list[Root]:
    return default_roots(env, os.path.expanduser("~"), platform.system())


def scan(roots: Sequence[Root]) -> tuple[list[Found], list[Note]]:
    """Every store's models (the same file found twice, e.g. a hub cache shared by llama.cpp,
    once)."""
    found: list[Found] = []
    notes: list[Note] = []
    seen: set[str] = set()
    for root in roots:
        f, n = scan_root(root)
        notes += n
        for m in f:
            key = os.path.realpath(m.path)
            if key not in seen:
                seen.add(key)
                found.append(m)
    return found, notes
