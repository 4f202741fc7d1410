"""Hugging Face Hub names to resolve URLs (an edge: the Hub API through huggingface_hub).

Two spellings name a model on the Hub:
  hf://org/repo/path/file.gguf[@revision]  (or hf://org/repo@revision/path/file.gguf)
  org/repo[:quant]                          (llama-server's `-hf`; `hf:org/repo[:quant]` here)
The quant tag picks a file as llama.cpp does (common/download.cpp, find_best_model and
get_split_files): the first model GGUF whose path contains the tag followed by `.` or `-`,
case-insensitively (`Q4_K_M`, then `Q8_0`, then any model file when no tag is given), never an
mmproj/imatrix/draft file nor a shard other than the first; a split model brings all its shards.
The file listing and commit come from one Hub API call, `HfApi.model_info`
(GET {endpoint}/api/models/{repo}/revision/{revision}); files are then read from
{endpoint}/{repo}/resolve/{commit}/{path} with HttpRangeSource.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import InputError
from .remote import DEFAULT_TIMEOUT, LOGIN_HINT, RemoteUnreachable, one_line

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")  # llama.cpp's choice when `-hf` has no :quant
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")  # gguf_filename_is_model
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES
_COMMIT = re.compile(r"[0-9a-f]{40}")


# --- pure: names, settings, the quant rule ---------------------------------------------------


@dataclass(frozen=True)
class HfSettings:
    endpoint: str
    token: str | None
    offline: bool


@dataclass(frozen=True)
class HfFile:
    """One file in a repository at a revision (a branch, tag or commit)."""

    repo: str
    path: str
    revision: str = DEFAULT_REVISION


@dataclass(frozen=True)
class RepoSpec:
    """`org/repo[:quant]`; an empty tag means llama.cpp's default choice."""

    repo: str
    tag: str = ""


@dataclass(frozen=True)
class RepoListing:
    """A repository's files at one commit."""

    repo: str
    revision: str
    commit: str
    files: tuple[str, ...]


def is_offline(env: Mapping[str, str]) -> bool:
    return (env.get("HF_HUB_OFFLINE") or "").strip().upper() in _TRUE


def _check_repo(repo: str, arg: str) -> str:
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts):
        raise InputError(f"{arg}: expected a Hugging Face repository as org/repo")
    return repo


def parse_hf_url(arg: str) -> HfFile:
    """`hf://org/repo/path/file.gguf[@rev]` or `hf://org/repo@rev/path/file.gguf`."""
    rest = arg.removeprefix("hf://")
    parts = rest.split("/", 2)
    if len(parts) < 3 or not parts[2]:
        raise InputError(f"{arg}: expected hf://org/repo/path/to/file.gguf[@revision]")
    org, name, path = parts
    revision = DEFAULT_REVISION
    if "@" in name:
        name, revision = name.split("@", 1)
    elif "@" in path.rsplit("/", 1)[-1]:
        path, revision = path.rsplit("@", 1)
    if not revision:
        raise InputError(f"{arg}: empty revision after @")
    return HfFile(_check_repo(f"{org}/{name}", arg), path, urllib.parse.unquote(revision))


def parse_repo_spec(spec: str) -> RepoSpec:
    """llama.cpp's common_download_split_repo_tag: the tag is after the last `:`."""
    parts = spec.removeprefix("hf:").split(":")
    return RepoSpec(_check_repo(parts[0], spec), parts[-1] if len(parts) > 1 else "")


def resolve_url(endpoint: str, repo: str, revision: str, path: str) -> str:
    return f"{endpoint}/{repo}/resolve/{urllib.parse.quote(revision, safe='')}/{urllib.parse.quote(path)}"


@dataclass(frozen=True)
class SplitInfo:
    """llama.cpp's gguf_split_info: `prefix-00002-of-00003.gguf` is (prefix, 2, 3)."""

    prefix: str
    index: int
    count: int


def split_info(path: str) -> SplitInfo | None:
    """None when the name does not end in `.gguf`."""
    if not path.endswith(".gguf"):
        return None
    prefix = path[: -len(".gguf")]
    m = _SPLIT.match(prefix)
    return SplitInfo(m.group(1), int(m.group(2)), int(m.group(3))) if m else SplitInfo(prefix, 1, 1)


def is_model_file(path: str) -> bool:
    return path.endswith(".gguf") and not any(word in path.rsplit("/", 1)[-1] for word in _NOT_MODELS)


def _first_shard_or_single(path: str) -> bool:
    info = split_info(path)
    return info is not None and (info.count <= 1 or info.index == 1)


def find_best_model(files: Sequence[str], tag: str = "") -> str | None:
    """llama.cpp's find_best_model: the first model file matching the tag (see module doc)."""
    candidates = [f for f in files if is_model_file(f) and _first_shard_or_single(f)]
    for t in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        for f in candidates:
            if pattern.search(f):
                return f
    return candidates[0] if candidates and not tag else None


def split_files(files: Sequence[str], primary: str) -> list[str]:
    """llama.cpp's get_split_files: every shard of `primary`'s split, by index."""
    info = split_info(primary)
    if info is None or info.count <= 1:
        return [primary]
    shards = [(i.index, f) for f in files if (i := split_info(f)) and (i.prefix, i.count) == (info.prefix, info.count)]
    return [f for _, f in sorted(shards)]


def pick_model_files(files: Sequence[str], spec: RepoSpec) -> list[str]:
    primary = find_best_model(files, spec.tag)
    if primary is None:
        ggufs = ", ".join(f for f in files if f.endswith(".gguf")) or "none"
        wanted = f"matching the tag '{spec.tag}'" if spec.tag else "of a model"
        raise InputError(f"{spec.repo}: no GGUF file {wanted} (GGUF files: {ggufs})")
    return split_files(files, primary)


# --- edges: the environment and the Hub API ----------------------------------------------------


def hf_settings(env: Mapping[str, str]) -> HfSettings:
    return HfSettings(hub_endpoint(env), hf_token(env), is_offline(env))


def hub_endpoint(env: Mapping[str, str]) -> str:
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_token(env: Mapping[str, str]) -> str | None:
    """HF_TOKEN, else the login huggingface_hub saved (`huggingface-cli login`)."""
    return env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or _saved_token() or None


def _saved_token() -> str | None:
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.fullmatch(revision))


def list_repo(settings: HfSettings, repo: str, revision: str = DEFAULT_REVISION,
              *, timeout: float = DEFAULT_TIMEOUT) -> RepoListing:
    """The repository's files and commit at `revision` (HfApi.model_info)."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    except ImportError:
        raise InputError("reading models from Hugging Face needs huggingface_hub: "
                         "pip install huggingface_hub") from None
    api = HfApi(endpoint=settings.endpoint, token=settings.token or False, library_name="llamafit")
    where = f"{settings.endpoint}/{repo} (revision {revision})"
    try:
        info = api.model_info(repo, revision=revision, timeout=timeout)
    except HfHubHTTPError as e:
        raise _api_error(where, getattr(e.response, "status_code", None), e) from None
    except HFValidationError as e:
        raise InputError(f"{repo}: {one_line(e)}") from None
    except Exception as e:
        if not _is_network_error(e):
            raise
        raise RemoteUnreachable(f"{where}: cannot reach the Hub: {one_line(e)}") from e
    files = tuple(s.rfilename for s in info.siblings or ())
    return RepoListing(repo, revision, info.sha or revision, files)


def _is_network_error(e: Exception) -> bool:
    """A connection or timeout error of whichever HTTP client huggingface_hub uses
    (requests' errors are OSErrors; httpx's and httpx2's are TransportErrors)."""
    return isinstance(e, OSError) or any(c.__name__ == "TransportError" for c in type(e).__mro__)


def _api_error(where: str, status: int | None, e: Exception) -> InputError:
    if status in (401, 403):
        return InputError(f"{where}: HTTP {status}: the repository does not exist or is {LOGIN_HINT}")
    if status == 404:
        return InputError(f"{where}: HTTP 404: no such repository or revision")
    return InputError(f"{where}: HTTP {status}: {one_line(e)[:200]}")
