"""Hugging Face Hub names to resolve URLs (an edge: the Hub's public HTTP API, stdlib only).

Two spellings name a model on the Hub:
  hf://org/repo/path/file.gguf[@revision]  (or hf://org/repo@revision/path/file.gguf)
  org/repo[:quant]                          (llama-server's `-hf`; `hf:org/repo[:quant]` here)
The quant tag picks a file as llama.cpp does (common/download.cpp, find_best_model and
get_split_files): the first model GGUF whose path contains the tag followed by `.` or `-`,
case-insensitively (`Q4_K_M`, then `Q8_0`, then any model file when no tag is given), never an
mmproj/imatrix/draft file nor a shard other than the first; a split model brings all its shards.
The file listing and commit come from one Hub API call, the one huggingface_hub's
`HfApi.model_info` makes (GET {endpoint}/api/models/{repo}/revision/{revision}: `sha` and
`siblings[].rfilename`), sent with fetch.remote's request (redirects followed by hand, credentials
only to the endpoint's own host); files are then read from {endpoint}/{repo}/resolve/{commit}/{path}
with HttpRangeSource. No huggingface_hub: the token comes from HF_TOKEN or the file
`huggingface-cli login` writes (huggingface_hub.constants.HF_TOKEN_PATH), and the endpoint from
HF_ENDPOINT, as huggingface_hub reads them.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..reader.names import split_info
from .remote import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, LOGIN_HINT, RemoteUnreachable, one_line

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")  # llama.cpp's choice when `-hf` has no :quant
# gguf_filename_is_model
_NOT_MODELS = (
    "mmproj",
    "imatrix",
    "mtp-",
    "eagle3-",
    "dflash-",
    "dspark-",
)
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REPO_PART = re.compile(r"\w[\w.-]*", re.ASCII)  # huggingface_hub validate_repo_id, in short
# a model's API answer: ~100 bytes per file; the largest repos hold ~10k files
MAX_LISTING_BYTES = 32 << 20


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
    """`org/repo`, each part of letters, digits, `.`, `_`, `-` (it goes into a URL path as it
    is)."""
    parts = repo.split("/")
    if len(parts) != 2 or not all(_REPO_PART.fullmatch(p) and ".." not in p for p in parts):
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
    return (
        f"{endpoint}/{repo}/resolve/{urllib.parse.quote(revision, safe='')}/"
        f"{urllib.parse.quote(path)}"
    )


def is_model_file(path: str) -> bool:
    return path.endswith(".gguf") and not any(
        word in path.rsplit("/", 1)[-1] for word in _NOT_MODELS
    )


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
    shards = [
        (i.index, f)
        for f in files
        if (i := split_info(f)) and (i.prefix, i.count) == (info.prefix, info.count)
    ]
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


def token_path(env: Mapping[str, str], home: str) -> str:
    """huggingface_hub.constants.HF_TOKEN_PATH: HF_TOKEN_PATH, else HF_HOME/token, HF_HOME being
    XDG_CACHE_HOME/huggingface or ~/.cache/huggingface by default."""
    if env.get("HF_TOKEN_PATH"):
        return env["HF_TOKEN_PATH"]
    cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(env.get("HF_HOME") or os.path.join(cache, "huggingface"), "token")


def read_token(path: str) -> str | None:
    """The token in the file (stripped; huggingface_hub _get_token_from_file), None when absent,
    empty, unreadable, not a regular file or not one printable line."""
    from ..safe_io import SMALL_FILE, read_regular

    try:
        text = read_regular(path, SMALL_FILE, follow=True).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text and text.isprintable() else None


def _saved_token() -> str | None:
    return read_token(token_path(os.environ, os.path.expanduser("~")))


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.fullmatch(revision))


def api_url(endpoint: str, repo: str, revision: str) -> str:
    return f"{endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"


def list_repo(
    settings: HfSettings,
    repo: str,
    revision: str = DEFAULT_REVISION,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> RepoListing:
    """The repository's files and commit at `revision` (the answer huggingface_hub's
    HfApi.model_info reads), over plain HTTP; the token only to the endpoint's own host."""
    from .remote import request

    url = api_url(settings.endpoint, _check_repo(repo, repo), revision)
    where = f"{settings.endpoint}/{repo} (revision {revision})"
    answer = request(
        "GET",
        url,
        {**auth_headers(settings.token), "Accept": "application/json"},
        timeout,
        deadline=DEFAULT_DEADLINE,
    )
    try:
        if answer.status >= 300:
            raise _api_error(where, answer.status, getattr(answer.body, "reason", ""))
        body = _read_body(
            answer.body, MAX_LISTING_BYTES + 1, time.monotonic() + DEFAULT_DEADLINE, where
        )
    finally:
        answer.close()
    if len(body) > MAX_LISTING_BYTES:
        raise InputError(
            f"{where}: the listing is larger than {MAX_LISTING_BYTES:,} bytes; not a model's"
        )
    return parse_listing(repo, revision, body, where)


def _read_body(body: Any, limit: int, deadline: float, where: str) -> bytes:
    """Up to `limit` bytes, one recv at a time, given up at `deadline` however slowly they come."""
    read = getattr(body, "read1", body.read)
    out = bytearray()
    try:
        while len(out) < limit:
            if time.monotonic() > deadline:
                raise RemoteUnreachable(
                    f"{where}: gave up reading the listing after {DEFAULT_DEADLINE:g} s"
                )
            chunk = read(min(1 << 16, limit - len(out)))
            if not chunk:
                break
            out += chunk
    except OSError as e:
        raise RemoteUnreachable(
            f"{where}: the connection failed while reading the listing: {one_line(e)}"
        ) from e
    return bytes(out)


def parse_listing(repo: str, revision: str, body: bytes, where: str) -> RepoListing:
    """The API answer's commit (`sha`) and file names (`siblings[].rfilename`); anything else is
    a one-line error."""
    try:
        info = json.loads(body.decode("utf-8"), parse_constant=lambda c: None)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InputError(f"{where}: the Hub's answer is not JSON") from None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list):
        raise InputError(f"{where}: the Hub's answer has no file list (siblings)")
    files = [s.get("rfilename") for s in siblings if isinstance(s, dict)]
    if not all(isinstance(f, str) for f in files) or len(files) != len(siblings):
        raise InputError(f"{where}: the Hub's file list is malformed")
    sha = info.get("sha")
    commit = sha if isinstance(sha, str) and is_commit(sha) else revision
    return RepoListing(repo, revision, commit, tuple(str(f) for f in files))


def _api_error(where: str, status: int, reason: str) -> InputError:
    if status in (401, 403):
        return InputError(
            f"{where}: HTTP {status}: the repository does not exist or is {LOGIN_HINT}"
        )
    if status == 404:
        return InputError(f"{where}: HTTP 404: no such repository or revision")
    return InputError(f"{where}: HTTP {status} {one_line(reason)[:200]}".rstrip())
