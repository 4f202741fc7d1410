"""Model stores, pure part: where each tool keeps its GGUFs, how it names them, how files group.

Stores and their layouts (each from the tool's own source or docs):
  hf        Hugging Face hub cache: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub,
            else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
            (huggingface_hub.constants); `models--org--repo/{refs/main, snapshots/<commit>/…,
            blobs/<etag>}`, a partial download is `blobs/<etag>.incomplete`.
  llama.cpp llama.cpp's `-hf` downloads go to the same hub layout, at LLAMA_CACHE when set
            (common/hf-cache.cpp get_cache_directory); its flat cache (`-mu`, `-dr` and older
            builds' `-hf`: common/common.cpp fs_get_cache_directory) is LLAMA_CACHE, else
            %LOCALAPPDATA%/llama.cpp, ~/Library/Caches/llama.cpp, XDG_CACHE_HOME/llama.cpp or
            ~/.cache/llama.cpp; a partial download there ends in `.downloadInProgress`.
  ollama    OLLAMA_MODELS, else ~/.ollama/models (the Linux service's /usr/share/ollama/.ollama/models
            too): `manifests/<registry>/<namespace>/<model>/<tag>` (schema v2 JSON) → the layer of
            media type application/vnd.ollama.image.model (…projector: the mmproj; …adapter: a
            LoRA) → `blobs/sha256-<hex>`.
  lmstudio  ~/.lmstudio/models/<publisher>/<repo>/*.gguf (LM Studio 0.3+), formerly
            ~/.cache/lm-studio/models/<publisher>/<repo>/*.gguf.
  dir       any directory given: every *.gguf below it.

Names: Ollama's short form (`qwen2.5:32b`; the registry and `library/` are dropped only for
registry.ollama.ai, as `ollama list` shows them), `org/repo:TAG` for the hub cache and LM Studio
when that tag picks the file back (llama.cpp's -hf rule), else `org/repo/path/file.gguf`.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..reader.names import quant_bits, split_info, tag_bits

OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_MODEL = "application/vnd.ollama.image.model"
OLLAMA_PROJECTOR = "application/vnd.ollama.image.projector"
OLLAMA_ADAPTER = "application/vnd.ollama.image.adapter"
STORES = ("hf", "llama.cpp", "ollama", "lmstudio", "dir")


@dataclass(frozen=True)
class Root:
    """One place to look: a store kind and a directory."""

    store: str
    path: str


@dataclass(frozen=True)
class Found:
    """One model in a store: its name there, the reference llamafit accepts, its files."""

    store: str
    name: str
    ref: str  # what run/plan/check take: `ollama:…`, `hf:…`, `lmstudio:…`, or the path
    shards: tuple[str, ...]  # absolute paths, first shard first
    mmproj: str | None = None

    @property
    def path(self) -> str:
        return self.shards[0]


@dataclass(frozen=True)
class Note:
    """Something skipped or broken, as data: `code` is one of NOTE_CODES."""

    store: str
    path: str
    code: str
    detail: str = ""


NOTE_CODES = (
    "dangling-symlink",
    "missing-blob",
    "partial-download",
    "unreadable",
    "bad-manifest",
    "missing-shard",
    "lora-adapter",
    "vocab-only",
    "imatrix",
    "unreadable-header",
    "bad-ref",
)


# --- where the stores are -----------------------------------------------------------------


def hf_hub_cache(env: Mapping[str, str], home: str) -> str:
    """huggingface_hub.constants.HF_HUB_CACHE computed from `env` instead of os.environ."""
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return hub
    cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    hf_home = env.get("HF_HOME") or os.path.join(cache, "huggingface")
    return os.path.join(hf_home, "hub")


def llama_hf_cache(env: Mapping[str, str], home: str) -> str:
    """common/hf-cache.cpp get_cache_directory: LLAMA_CACHE, else the hub cache's own rule."""
    return env.get("LLAMA_CACHE") or hf_hub_cache(env, home)


def llama_flat_cache(env: Mapping[str, str], home: str, system: str) -> str:
    """common/common.cpp fs_get_cache_directory (`system` as platform.system() names it)."""
    if env.get("LLAMA_CACHE"):
        return env["LLAMA_CACHE"]
    if system == "Windows":
        return os.path.join(
            env.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local"), "llama.cpp"
        )
    if system == "Darwin":
        return os.path.join(home, "Library", "Caches", "llama.cpp")
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "llama.cpp")


def ollama_dirs(env: Mapping[str, str], home: str) -> list[str]:
    if env.get("OLLAMA_MODELS"):
        return [env["OLLAMA_MODELS"]]
    return [os.path.join(home, ".ollama", "models"), "/usr/share/ollama/.ollama/models"]


def lmstudio_dirs(home: str) -> list[str]:
    return [
        os.path.join(home, ".lmstudio", "models"),
        os.path.join(home, ".cache", "lm-studio", "models"),
    ]


def default_roots(env: Mapping[str, str], home: str, system: str) -> list[Root]:
    """Every store's directory on this machine, duplicates (same path) dropped."""
    roots = [
        Root("hf", hf_hub_cache(env, home)),
        Root("llama.cpp", llama_hf_cache(env, home)),
        Root("llama.cpp", llama_flat_cache(env, home, system)),
    ]
    roots += [Root("ollama", d) for d in ollama_dirs(env, home)]
    roots += [Root("lmstudio", d) for d in lmstudio_dirs(home)]
    seen: set[str] = set()
    out = []
    for r in roots:
        key = os.path.normpath(r.path)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


# --- names ------------------------------------------------------------------------------------


def file_tag(path: str) -> str:
    """llama.cpp's tag of a GGUF name: `…-Q4_K_M.gguf` → `Q4_K_M` (uppercased; split suffix
    dropped)."""
    info = split_info(path)
    return info.tag if info else ""


def repo_name(repo: str, path: str, files: Sequence[str]) -> str:
    """`repo:TAG` when llama.cpp's -hf rule picks `path` back from `files` with that tag, else
    `repo/path`."""
    from .hf import find_best_model  # the Hub's rules (and its HTTP code) only where they apply

    tag = file_tag(path)
    if tag and find_best_model(files, tag) == path:
        return f"{repo}:{tag}"
    return f"{repo}/{path}"


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's short display name (types/model Name.DisplayShortest, as `ollama list` prints)."""
    if registry == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == OLLAMA_NAMESPACE else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def parse_ollama_ref(ref: str) -> tuple[str, str, str, str]:
    """`[registry/][namespace/]model[:tag]` → (registry, namespace, model, tag), Ollama's defaults
    filled."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    parts = name.split("/")
    if not all(parts) or len(parts) > 3:
        raise ValueError(ref)
    if len(parts) == 1:
        return OLLAMA_REGISTRY, OLLAMA_NAMESPACE, parts[0], tag or "latest"
    if len(parts) == 2:
        return OLLAMA_REGISTRY, parts[0], parts[1], tag or "latest"
    return parts[0], parts[1], parts[2], tag or "latest"


def blob_name(digest: str) -> str | None:
    """`sha256:<64 hex>` → the blob file name `sha256-<hex>` (None when not a sha256 digest)."""
    algo, _, hexdigest = digest.partition(":")
    if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        return None
    return f"sha256-{hexdigest}"


@dataclass(frozen=True)
class OllamaLayers:
    model: str | None  # digests
    projector: str | None
    adapters: tuple[str, ...]


def ollama_layers(manifest: object) -> OllamaLayers | None:
    """The model, projector and adapter digests of a schema v2 manifest (None when malformed)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("layers"), list):
        return None
    by_type: dict[str, list[str]] = {}
    for layer in manifest["layers"]:
        if (
            isinstance(layer, dict)
            and isinstance(layer.get("mediaType"), str)
            and isinstance(layer.get("digest"), str)
        ):
            by_type.setdefault(layer["mediaType"], []).append(layer["digest"])
    model = by_type.get(OLLAMA_MODEL, [None])[0]
    return OllamaLayers(
        model, by_type.get(OLLAMA_PROJECTOR, [None])[0], tuple(by_type.get(OLLAMA_ADAPTER, []))
    )


# --- grouping files -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileGroup:
    """A model's files in one folder: its shards (relative paths) and the mmproj llama.cpp would
    pair."""

    shards: tuple[str, ...]
    mmproj: str | None


def best_sibling(
    files: Sequence[str], model: str, keyword: str = "mmproj", tag: str = ""
) -> str | None:
    """common/download.cpp find_best_sibling: among the .gguf files whose path contains `keyword`
    and whose directory is the model's or one above it, the deepest directory first, then an exact
    `-TAG.` match (case-insensitive), then the closest quantization bits to the tag's (or, without
    a tag, the model's); the first of equals."""
    model_dir = model.split("/")[:-1]
    model_bits = tag_bits(tag.upper()) if tag else quant_bits(model)
    best: tuple[int, bool, int] | None = None
    chosen = None
    for f in files:
        if not f.endswith(".gguf") or keyword not in f:
            continue
        sib_dir = f.split("/")[:-1]
        if (
            model_dir[: len(sib_dir)] != sib_dir
        ):  # the sibling's directory must be a prefix of the model's
            continue
        depth, diff = len(sib_dir), abs(quant_bits(f) - model_bits)
        exact = bool(tag) and f"-{tag.upper()}." in f.upper()
        if (
            best is None
            or depth > best[0]
            or (depth == best[0] and exact and not best[1])
            or (depth == best[0] and exact == best[1] and diff < best[2])
        ):
            best, chosen = (depth, exact, diff), f
    return chosen


def local_mmproj(model_path: str, names: Sequence[str]) -> str | None:
    """`--mmproj auto` for a local model: mmproj*.gguf among `names` (the model's directory), by the
    same rule as -hf (closest quantization to the model's)."""
    found = [
        n
        for n in names
        if posixpath.basename(n).lower().startswith("mmproj") and n.endswith(".gguf")
    ]
    return best_sibling(found, posixpath.basename(model_path)) if found else None


class _Siblings:
    """best_sibling(files, model) without a tag for many models of one folder, each in time
    independent of the number of files (#37 F12: `ls` was quadratic in files per folder): the
    candidates by directory, and per directory the first file of each quantization's bits, in
    `files`' order."""

    def __init__(self, files: Sequence[str], keyword: str = "mmproj") -> None:
        self.by_dir: dict[tuple[str, ...], dict[int, tuple[int, str]]] = {}
        for i, f in enumerate(files):
            if f.endswith(".gguf") and keyword in f:
                firsts = self.by_dir.setdefault(tuple(f.split("/")[:-1]), {})
                firsts.setdefault(quant_bits(f), (i, f))

    def best(self, model: str) -> str | None:
        model_dir = tuple(model.split("/")[:-1])
        bits = quant_bits(model)
        for depth in range(len(model_dir), -1, -1):  # the deepest directory first
            firsts = self.by_dir.get(model_dir[:depth])
            if firsts:  # the closest bits, then the first in `files`
                return min((abs(b - bits), i, f) for b, (i, f) in firsts.items())[2]
        return None


def group_files(files: Sequence[str]) -> tuple[list[FileGroup], list[tuple[str, str, str]]]:
    """Model GGUFs of one folder (relative paths) grouped into split models with their mmproj;
    problems as (path, code, detail): a split model with a shard missing."""
    from .hf import is_model_file

    groups: list[FileGroup] = []
    problems: list[tuple[str, str, str]] = []
    by_split: dict[tuple[str, int], dict[int, str]] = {}
    siblings = _Siblings(files)
    for f in sorted(files):
        info = split_info(f)
        if info is None or not is_model_file(f):
            continue
        if info.count <= 1:
            groups.append(FileGroup((f,), siblings.best(f)))
        else:
            by_split.setdefault((info.prefix, info.count), {})[info.index] = f
    for (_, count), shards in sorted(by_split.items()):
        first = shards[min(shards)]
        missing = [i for i in range(1, count + 1) if i not in shards]
        if missing:
            problems.append((first, "missing-shard", f"shard {missing[0]} of {count} is missing"))
            continue
        ordered = tuple(shards[i] for i in range(1, count + 1))
        groups.append(FileGroup(ordered, siblings.best(ordered[0])))
    return sorted(groups, key=lambda g: g.shards[0]), problems
