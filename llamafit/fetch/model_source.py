"""Open a model by local path, URL or Hugging Face name, reading only its header(s).

    /path/model.gguf                   read_model, as always
    https://host/model.gguf            HTTP Range requests (every shard of a split name)
    hf://org/repo/path/file.gguf[@rev] one file of a Hub repository
    hf:org/repo[:quant]                llama-server's `-hf org/repo[:quant]`

A remote header is cached under cache_dir()/headers/ as the bytes the parser read (a
header-only GGUF prefix up to the tensor data; what it skipped, such as token scores, is left as
zeros) plus a JSON sidecar with the URL, a validator (the ETag; for the Hub, the commit) and the
file's real size. A later open that finds the same validator, or finds no network (or
HF_HUB_OFFLINE set), re-parses the cached prefix and transfers nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..paths import cache_dir, is_url
from ..reader.model import GGUFModel, read_model
from ..reader.source import ByteSource, BytesSource
from ..safe_io import SMALL_FILE, read_regular, write_atomic
from ..units import GIB
from .hf import (
    DEFAULT_REVISION,
    HfFile,
    HfSettings,
    RepoListing,
    auth_headers,
    hf_settings,
    hf_token,
    hub_endpoint,
    is_commit,
    is_offline,
    list_repo,
    parse_hf_url,
    parse_repo_spec,
    pick_model_files,
    resolve_url,
)
from .remote import (
    DEFAULT_TIMEOUT,
    HttpRangeSource,
    RemoteUnreachable,
    probe,
    same_origin,
)

Progress = Callable[[int], None]
_FORMAT = 1  # bump when the cache layout changes
MAX_HEADER_BYTES = GIB  # a cached header larger than this is not ours


def open_model(
    arg: str,
    env: Mapping[str, str],
    *,
    progress: Progress | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> GGUFModel:
    """A model's headers from a local path, an http(s) URL, `hf://…` or `hf:org/repo[:quant]`, or a
    store reference (`ollama:…`, `lmstudio:…`; `hf:…` from the local hub cache first:
    llamafit.fetch.refs)."""
    from .refs import local_path

    if (local := local_path(arg, env)) is not None:
        return read_model(local)
    if is_url(arg):
        return open_url(arg, env, progress=progress, timeout=timeout)
    if arg.startswith("hf://"):
        return open_hf_file(parse_hf_url(arg), env, progress=progress, timeout=timeout)
    if arg.startswith("hf:"):
        return open_hf_repo(arg, env, progress=progress, timeout=timeout)
    return read_model(arg)


def open_url(
    url: str,
    env: Mapping[str, str],
    *,
    progress: Progress | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> GGUFModel:
    """A GGUF at a plain URL (all shards of a split name); the Hub token goes only to the Hub."""
    on_hub = same_origin(url, hub_endpoint(env) + "/")
    headers = auth_headers(hf_token(env)) if on_hub else {}

    def locate(name: str) -> _Remote:
        if is_offline(env):
            raise RemoteUnreachable(
                f"{name}: offline (HF_HUB_OFFLINE is set) and its header is not cached"
            )
        info = probe(name, headers=headers, timeout=timeout)
        return _Remote(name, headers, info.validator if info else None)

    return _read_remote(url, locate, progress=progress, timeout=timeout)


def open_hf_file(
    ref: HfFile,
    env: Mapping[str, str],
    *,
    progress: Progress | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> GGUFModel:
    """`hf://org/repo/path/file.gguf[@rev]` (and its sibling shards when split)."""
    settings = hf_settings(env)
    listing, stale = _hub_listing(settings, ref.repo, ref.revision, timeout)
    return _read_hf(settings, listing, stale, ref, progress=progress, timeout=timeout)


def open_hf_repo(
    spec: str,
    env: Mapping[str, str],
    *,
    progress: Progress | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> GGUFModel:
    """`org/repo[:quant]` as llama-server's `-hf` takes it (`hf:` prefix optional): the file the
    quant tag picks (llama.cpp's rule, see llamafit.fetch.hf) and all its shards; from the local hub
    cache when they are all there (llamafit.fetch.refs)."""
    from .refs import hf_cached_path

    if (local := hf_cached_path(spec, env)) is not None:
        return read_model(local)
    repo_spec = parse_repo_spec(spec)
    settings = hf_settings(env)
    listing, stale = _hub_listing(settings, repo_spec.repo, DEFAULT_REVISION, timeout)
    files = pick_model_files(listing.files, repo_spec)
    ref = HfFile(repo_spec.repo, files[0], DEFAULT_REVISION)
    model = _read_hf(settings, listing, stale, ref, progress=progress, timeout=timeout)
    prefix = resolve_url(settings.endpoint, ref.repo, ref.revision, "")
    read = [urllib.parse.unquote(s.path.removeprefix(prefix)) for s in model.shards]
    if read != files:
        raise InputError(
            f"{repo_spec.repo}: llama.cpp would load {files}, but the shard names give {read}"
        )
    return model


# --- the Hub ----------------------------------------------------------------------------------


def _hub_listing(
    settings: HfSettings, repo: str, revision: str, timeout: float
) -> tuple[RepoListing, str | None]:
    """The repository's files: fresh from the Hub (and cached), else the cached listing with the
    reason it could not be refreshed (offline, unreachable)."""
    cached = _load_listing(settings.endpoint, repo, revision)
    if cached and is_commit(revision):
        return cached, None  # a commit never changes
    try:
        if settings.offline:
            raise RemoteUnreachable(f"{settings.endpoint}/{repo}: offline (HF_HUB_OFFLINE is set)")
        listing = list_repo(settings, repo, revision, timeout=timeout)
    except RemoteUnreachable as e:
        if cached is None:
            raise InputError(f"{e} and the repository listing is not cached") from None
        return cached, str(e)
    _save_listing(settings.endpoint, listing)
    return listing, None


def _read_hf(
    settings: HfSettings,
    listing: RepoListing,
    stale: str | None,
    ref: HfFile,
    *,
    progress: Progress | None,
    timeout: float,
) -> GGUFModel:
    """Read `ref` (and its shards) from resolve URLs pinned to the listing's commit."""
    prefix = resolve_url(settings.endpoint, ref.repo, ref.revision, "")

    def locate(name: str) -> _Remote:
        path = urllib.parse.unquote(name.removeprefix(prefix))
        if path not in listing.files:
            ggufs = ", ".join(f for f in listing.files if f.endswith(".gguf")) or "none"
            raise InputError(
                f"{ref.repo}: no file {path} at revision {ref.revision} (GGUF files: {ggufs})"
            )
        if stale:
            raise RemoteUnreachable(f"{stale}; no cached header for {path}")
        url = resolve_url(settings.endpoint, ref.repo, listing.commit, path)
        return _Remote(url, auth_headers(settings.token), listing.commit)

    return _read_remote(
        prefix + urllib.parse.quote(ref.path), locate, progress=progress, timeout=timeout
    )


# --- reading through the cache ------------------------------------------------------------------


@dataclass(frozen=True)
class _Remote:
    """Where to read one file and the validator of its current version (None: unknown)."""

    url: str
    headers: Mapping[str, str]
    validator: str | None


class RecordingSource:
    """A byte source that keeps what the parser read, to cache the header prefix afterwards
    (remote reads here, local files in fetch.local_headers). It passes on the source's first
    window (the reader's first read size) where the source has one."""

    def __init__(self, src: ByteSource) -> None:
        self.src = src
        self.name = src.name
        if (window := getattr(src, "first_window", None)) is not None:
            self.first_window = window
        self.chunks: list[tuple[int, bytes | bytearray]] = []

    @property
    def size(self) -> int:
        return self.src.size

    @property
    def read_budget(self) -> int | None:
        """The source's (reader._Cursor.must_read), where it has one."""
        return getattr(self.src, "read_budget", None)

    def read(self, offset: int, n: int) -> bytes | bytearray:
        data = self.src.read(offset, n)
        self.chunks.append((offset, data))
        return data

    def close(self) -> None:
        if (close := getattr(self.src, "close", None)) is not None:
            close()


class CachedSource(BytesSource):
    """A cached header prefix that reports the whole file's size."""

    def __init__(self, entry: CachedHeader, name: str | None = None) -> None:
        super().__init__(entry.prefix, entry.url if name is None else name)
        self._total = entry.size

    @property
    def size(self) -> int:
        return self._total


def _read_remote(
    first: str, locate: Callable[[str], _Remote], *, progress: Progress | None, timeout: float
) -> GGUFModel:
    """read_model over remote shards: each from the cache when its validator matches (or the
    network is out), else over HTTP; fetched headers are cached afterwards."""
    recorders: dict[str, tuple[RecordingSource, HttpRangeSource, str | None]] = {}

    def report(_: int) -> None:
        if progress:
            progress(sum(http.bytes_transferred for _, http, _ in recorders.values()))

    def open_source(name: str) -> ByteSource:
        cached = load_header(name)
        try:
            remote = locate(name)
        except RemoteUnreachable:
            if cached is None:
                raise
            return CachedSource(cached)
        if cached and remote.validator is not None and remote.validator == cached.validator:
            return CachedSource(cached)
        src = HttpRangeSource(
            remote.url, name=name, headers=remote.headers, timeout=timeout, progress=report
        )
        recorders[name] = (RecordingSource(src), src, remote.validator)
        return recorders[name][0]

    try:
        model = read_model(first, open_source)
        for shard in model.shards:
            if shard.path in recorders:
                rec, http, given = recorders[shard.path]
                validator = given or http.validator
                prefix = header_prefix(rec.chunks, min(shard.data_offset, shard.file_size))
                save_header(CachedHeader(shard.path, validator, shard.file_size, prefix))
        return model
    finally:
        # `report` closes over `recorders` and each source holds `report`: a reference cycle that,
        # left to the garbage collector, kept every recorded header (up to 64 MiB) alive until a
        # collection happened to run. Break it here, on success and on failure alike.
        recorders.clear()


# --- the cache ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedHeader:
    url: str
    validator: str | None
    size: int  # the whole remote file's
    prefix: bytes | bytearray  # its first data_offset bytes as the parser read them


def header_prefix(chunks: list[tuple[int, bytes | bytearray]], n: int) -> bytearray:
    """The first `n` bytes from (offset, bytes) reads; bytes never read stay zero. Takes the reads
    out of `chunks` as it copies them, and builds on the largest read when it is a bytearray (a
    remote window: nothing else holds it), so a 64 MiB header is held about once at the peak, not
    three times (the reads, a new buffer, a bytes copy of it)."""
    chunks.sort(key=lambda c: (isinstance(c[1], bytearray) and c[0] < n, len(c[1])))
    largest = chunks[-1][1] if chunks else b""
    if isinstance(largest, bytearray) and chunks[-1][0] < n:
        offset, out = chunks.pop()[0], largest  # grown and shifted in place: realloc, one memmove
        del largest
        del out[n - offset :]
        out[0:0] = bytes(offset)
        out += bytes(n - len(out))
    else:
        out = bytearray(n)
    # memoryview to memoryview: one memcpy (bytearray slice assignment copies first)
    view = memoryview(out)
    while chunks:
        offset, data = chunks.pop()
        if offset < n:
            k = min(len(data), n - offset)
            view[offset : offset + k] = memoryview(data)[:k]
        del data
    view.release()
    return out


def _cache_file(kind: str, key: str, ext: str) -> Path:
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_dir() / "headers" / f"{kind}-{digest}.{ext}"


# the cache's file rules for the other caches in the cache directory (ls_cli's rows): a JSON entry
# carries "format": CACHE_FORMAT and is read back only at that format; writes are atomic or nothing
CACHE_FORMAT = _FORMAT


def load_cache_json(path: Path) -> dict[str, Any] | None:
    """A JSON cache entry of CACHE_FORMAT, or None (absent, unreadable, another format)."""
    return _load_json(path)


def write_cache_file(path: Path, data: bytes) -> None:
    """Atomically, or not at all (an unwritable cache costs the next run the work again)."""
    _write(path, data)


def load_header(url: str) -> CachedHeader | None:
    """The cached header for `url`, or None (absent, unreadable or inconsistent)."""
    meta = _load_json(_cache_file("header", url, "json"))
    if not meta or meta.get("url") != url:
        return None
    size, validator, n, digest = (
        meta.get("size"),
        meta.get("validator"),
        meta.get("header_bytes"),
        meta.get("sha256"),
    )
    if (
        not isinstance(n, int)
        or isinstance(n, bool)
        or not 0 < n <= MAX_HEADER_BYTES
        or not isinstance(digest, str)
    ):
        return None
    try:
        prefix = read_regular(_cache_file("header", url, "gguf"), n)
    except OSError:
        return None
    if len(prefix) != n or not isinstance(size, int) or size < len(prefix):
        return None
    if hashlib.sha256(prefix).hexdigest() != digest:  # damaged or replaced since it was written
        return None
    return CachedHeader(url, validator if isinstance(validator, str) else None, size, prefix)


def save_header(entry: CachedHeader) -> None:
    """Cache a header; the sidecar is written last (it marks the entry complete)."""
    meta = {
        "format": _FORMAT,
        "url": entry.url,
        "validator": entry.validator,
        "size": entry.size,
        "header_bytes": len(entry.prefix),
        "sha256": hashlib.sha256(entry.prefix).hexdigest(),
    }
    _write(_cache_file("header", entry.url, "gguf"), entry.prefix)
    _write(_cache_file("header", entry.url, "json"), json.dumps(meta, indent=1).encode())


def _listing_key(endpoint: str, repo: str, revision: str) -> str:
    return f"{endpoint}\n{repo}\n{revision}"


def _load_listing(endpoint: str, repo: str, revision: str) -> RepoListing | None:
    meta = _load_json(_cache_file("listing", _listing_key(endpoint, repo, revision), "json"))
    if not meta or (meta.get("repo"), meta.get("revision")) != (repo, revision):
        return None
    commit, files = meta.get("commit"), meta.get("files")
    if not isinstance(commit, str) or not isinstance(files, list):
        return None
    return RepoListing(repo, revision, commit, tuple(str(f) for f in files))


def _save_listing(endpoint: str, listing: RepoListing) -> None:
    meta = {
        "format": _FORMAT,
        "endpoint": endpoint,
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "files": list(listing.files),
    }
    _write(
        _cache_file("listing", _listing_key(endpoint, listing.repo, listing.revision), "json"),
        json.dumps(meta, indent=1).encode(),
    )


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(read_regular(path, SMALL_FILE * 64), parse_constant=lambda c: None)
    except (OSError, ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == _FORMAT else None


def _write(path: Path, data: bytes | bytearray) -> None:
    """Atomically, or not at all: an unwritable cache only costs the next open a download."""
    with contextlib.suppress(OSError):
        write_atomic(path, data)
