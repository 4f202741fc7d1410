"""Remote headers: HTTP Range reads, the Hugging Face layout, the header cache, one-line errors.

Every server here is http.server in a thread on 127.0.0.1 (port 0); nothing touches the real
network. Bytes transferred are counted by the servers (body bytes written).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llamafit.errors import InputError
from llamafit.fetch import hf, model_source
from llamafit.fetch.hf import (
    RepoSpec,
    find_best_model,
    parse_hf_url,
    parse_repo_spec,
    pick_model_files,
    split_files,
)
from llamafit.fetch.model_source import header_prefix, load_header, open_hf_repo, open_model
from llamafit.fetch.remote import (
    HttpRangeSource,
    RemoteUnreachable,
    headers_for,
    parse_content_range,
    same_origin,
)
from llamafit.reader.header import read_header
from llamafit.reader.model import GGUFModel, read_model
from tests.support import FIXTURES, needs_llama_cpp
from tests.support.scripts import script

SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_good"
SPLIT = [FIXTURES / f"split-llama-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
# stops before its tensor data
HEADER_ONLY = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"
SINGLE = [*sorted(p for p in FIXTURES.glob("*.gguf") if "-of-" not in p.name), HEADER_ONLY]


# --- test servers ---------------------------------------------------------------------------------


@dataclass
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    sent: int = 0  # body bytes written


@dataclass
class Site:
    """What one server answers; the handler looks every request up here."""

    files: dict[str, Path] = field(default_factory=dict)
    ranges: bool = True
    redirects: dict[str, str] = field(default_factory=dict)
    json: dict[str, object] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    # path -> answered once the event is set
    held: dict[str, threading.Event] = field(default_factory=dict)
    auth: dict[str, str] = field(default_factory=dict)  # path prefix -> required Authorization
    extra: dict[str, dict[str, str]] = field(default_factory=dict)  # path -> extra headers
    hits: list[Hit] = field(default_factory=list)

    def sent(self, method: str = "GET") -> int:
        return sum(h.sent for h in self.hits if h.method == method)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        site: Site = self.server.site  # type: ignore[attr-defined]
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        hit = Hit(self.command, path, dict(self.headers))
        site.hits.append(hit)
        if path in site.held:
            site.held[path].wait(60)
        for prefix, wanted in site.auth.items():
            if path.startswith(prefix) and self.headers.get("Authorization") != wanted:
                return self._empty(403 if self.headers.get("Authorization") else 401)
        if path in site.status:
            return self._empty(site.status[path])
        if path in site.redirects:
            return self._empty(302, {"Location": site.redirects[path], **site.extra.get(path, {})})
        if path in site.json:
            data = json.dumps(site.json[path]).encode()
            self._start(200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
            if body:
                self.wfile.write(data)
            return None
        if path in site.files:
            return self._file(site, site.files[path], hit, body)
        return self._empty(404)

    def _start(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self._start(status, {"Content-Length": "0", **(headers or {})})

    def _file(self, site: Site, p: Path, hit: Hit, body: bool) -> None:
        size = p.stat().st_size
        start, end, status = 0, size - 1, 200
        headers = {"ETag": f'"{size:x}-{p.stat().st_mtime_ns:x}"'}
        wanted = self.headers.get("Range", "")
        if site.ranges and wanted.startswith("bytes="):
            a, _, b = wanted[6:].partition("-")
            start, end, status = int(a), min(int(b), size - 1), 206
            if start >= size:
                return self._empty(416, {"Content-Range": f"bytes */{size}"})
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._start(
            status, {**headers, "Content-Length": str(end - start + 1), "Accept-Ranges": "bytes"}
        )
        if not body:
            return
        with p.open("rb") as f:
            f.seek(start)
            left = end - start + 1
            try:
                while left:
                    chunk = f.read(min(left, 1 << 16))
                    self.wfile.write(chunk)
                    hit.sent += len(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client hung up (it refused a whole-file answer)


@contextmanager
def serve(site: Site) -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.site = site  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@dataclass
class Hub:
    """A Hugging Face lookalike: API and resolve URLs on one server, files on a 'CDN' server."""

    url: str
    site: Site
    cdn: Site
    repos: dict[str, dict[str, Path]]

    @property
    def env(self) -> dict[str, str]:
        return {"HF_ENDPOINT": self.url}

    def reset(self) -> None:
        self.site.hits.clear()
        self.cdn.hits.clear()


def _hub_repos(demo: Path | None) -> dict[str, dict[str, Path]]:
    tiny = {
        "README.md": FIXTURES / "README.md",
        "mmproj-tiny-Q8_0.gguf": FIXTURES / "swa-gemma3.gguf",
        "tiny-Q8_0.gguf": FIXTURES / "dense-llama.gguf",
        "tiny-Q4_K_M.gguf": FIXTURES / "tied-llama.gguf",
        "tiny-iq4_xs.gguf": FIXTURES / "moe-qwen3.gguf",
        **{f"F16/tiny-F16-{i:05d}-of-00003.gguf": p for i, p in enumerate(SPLIT, 1)},
    }
    repos = {
        "acme/tiny-GGUF": tiny,
        "acme/gated-GGUF": {"gated-Q4_K_M.gguf": FIXTURES / "dense-llama.gguf"},
    }
    if demo is not None:  # the demo extra
        repos["unsloth/gemma-3-270m-it-GGUF"] = {"gemma-3-270m-it-Q4_K_M.gguf": demo}
    return repos


def _publish(
    hub_site: Site, cdn_site: Site, cdn_url: str, repos: dict[str, dict[str, Path]]
) -> None:
    for repo, files in repos.items():
        info = {"id": repo, "sha": SHA, "siblings": [{"rfilename": f} for f in files]}
        for rev in ("main", SHA):
            hub_site.json[f"/api/models/{repo}/revision/{rev}"] = info
            for name, p in files.items():
                resolve = f"/{repo}/resolve/{rev}/{name}"
                hub_site.redirects[resolve] = f"{cdn_url}/cdn/{repo}/{name}"
                hub_site.extra[resolve] = {
                    "X-Repo-Commit": SHA,
                    "X-Linked-Etag": f'"{p.name}"',
                    "X-Linked-Size": str(p.stat().st_size),
                }
        for name, p in files.items():
            cdn_site.files[f"/cdn/{repo}/{name}"] = p
    for prefix in ("/api/models/acme/gated-GGUF/", "/acme/gated-GGUF/"):
        hub_site.auth[prefix] = f"Bearer {TOKEN}"


@pytest.fixture(scope="module")
def hub_server(demo_path_if_installed: Path | None) -> Iterator[Hub]:
    hub_site, cdn_site = Site(), Site()
    with serve(hub_site) as url, serve(cdn_site) as cdn_url:
        repos = _hub_repos(demo_path_if_installed)
        _publish(hub_site, cdn_site, cdn_url, repos)
        yield Hub(url, hub_site, cdn_site, repos)


@pytest.fixture
def hub(hub_server: Hub, fresh_cache: Path) -> Hub:
    hub_server.reset()
    return hub_server


@pytest.fixture(scope="module")
def plain_server(demo_path_if_installed: Path | None) -> Iterator[tuple[str, Site]]:
    """Range support, the fixtures, the demo model (with the demo extra), and the failure modes."""
    demo = [demo_path_if_installed] if demo_path_if_installed else []
    site = Site(files={f"/m/{p.name}": p for p in [*SINGLE, *SPLIT, *demo]})
    site.status.update({"/private.gguf": 401, "/forbidden.gguf": 403})
    site.redirects.update(
        {
            "/loop-a.gguf": "/loop-b.gguf",
            "/loop-b.gguf": "/loop-a.gguf",
            "/moved.gguf": "/m/dense-llama.gguf",
            "/to-file.gguf": "file:///etc/passwd",
        }
    )
    site.files["/slow.gguf"] = FIXTURES / "dense-llama.gguf"
    with serve(site) as url:
        yield url, site


@pytest.fixture
def plain(plain_server: tuple[str, Site], fresh_cache: Path) -> tuple[str, Site]:
    plain_server[1].hits.clear()
    # /slow.gguf answers only when a test sets it
    plain_server[1].held["/slow.gguf"] = threading.Event()
    return plain_server


@pytest.fixture(scope="module")
def norange_server() -> Iterator[tuple[str, Site]]:
    site = Site(files={"/m/dense-llama.gguf": FIXTURES / "dense-llama.gguf"}, ranges=False)
    with serve(site) as url:
        yield url, site


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private header cache, and no Hugging Face login from the machine running the tests."""
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hf, "_saved_token", lambda: None)
    return tmp_path / "cache"


def assert_same(remote: GGUFModel, local: GGUFModel) -> None:
    assert remote.tensors == local.tensors
    assert dict(remote.metadata) == dict(local.metadata)
    assert remote.file_size == local.file_size
    assert [s.data_offset for s in remote.shards] == [s.data_offset for s in local.shards]
    assert remote.header_only == local.header_only


def auth(hit: Hit) -> str | None:
    return next((v for k, v in hit.headers.items() if k.lower() == "authorization"), None)


def header_bytes(model: GGUFModel) -> int:
    return sum(s.data_offset for s in model.shards)


def one_line_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and msg
    return msg


# --- plain URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*SINGLE, SPLIT[1]], ids=lambda p: p.name)
def test_url_equals_local_file_and_fetches_under_twice_the_header(
    path: Path, plain: tuple[str, Site]
) -> None:
    url, site = plain
    model = open_model(f"{url}/m/{path.name}", {})
    local = read_model(path)
    assert_same(model, local)
    assert model.path == f"{url}/m/{local.path.rsplit('/', 1)[-1]}"
    assert 0 < site.sent() < 2 * header_bytes(local)


def test_split_url_reads_every_shard(plain: tuple[str, Site]) -> None:
    url, site = plain
    model = open_model(f"{url}/m/{SPLIT[2].name}", {})
    assert len(model.shards) == 3
    assert_same(model, read_model(SPLIT[0]))
    assert {h.path for h in site.hits if h.method == "GET"} == {f"/m/{p.name}" for p in SPLIT}


def test_gemma_over_http_fetches_under_twice_the_header(
    plain: tuple[str, Site], demo_path: Path
) -> None:
    url, site = plain
    src = HttpRangeSource(f"{url}/m/{demo_path.name}")
    header = read_header(src)
    local = read_model(demo_path)
    assert header.tensors == local.tensors and header.file_size == local.file_size
    assert src.bytes_transferred == site.sent() < 2 * header.data_offset
    assert src.requests <= 8  # a 6.5 MB header in a handful of round trips


def test_cache_makes_the_second_open_free_and_works_offline(
    plain: tuple[str, Site], demo_path: Path
) -> None:
    url, site = plain
    arg = f"{url}/m/{demo_path.name}"
    first = open_model(arg, {})
    assert site.sent() > 0
    cached = load_header(arg)
    assert (
        cached
        and cached.size == demo_path.stat().st_size
        and len(cached.prefix) == first.shards[0].data_offset
    )
    site.hits.clear()
    assert_same(open_model(arg, {}), first)
    # revalidated by ETag only
    assert site.sent() == 0 and [h.method for h in site.hits] == ["HEAD"]
    site.hits.clear()
    assert_same(open_model(arg, {"HF_HUB_OFFLINE": "1"}), first)
    assert site.hits == []


def test_header_only_file_is_cached_and_reread(plain: tuple[str, Site]) -> None:
    url, site = plain
    arg = f"{url}/m/{HEADER_ONLY.name}"
    first = open_model(arg, {})
    site.hits.clear()
    assert_same(open_model(arg, {"HF_HUB_OFFLINE": "1"}), read_model(HEADER_ONLY))
    assert first.header_only and site.hits == []


def test_cache_serves_when_the_server_is_gone(fresh_cache: Path) -> None:
    site = Site(files={"/x/dense-llama.gguf": FIXTURES / "dense-llama.gguf"})
    with serve(site) as url:
        first = open_model(f"{url}/x/dense-llama.gguf", {})
    assert_same(open_model(f"{url}/x/dense-llama.gguf", {}), first)
    with pytest.raises(InputError) as e:
        open_model(f"{url}/x/other.gguf", {})
    assert "cannot connect" in one_line_error(e)


def test_offline_without_cache_says_so(plain: tuple[str, Site]) -> None:
    url, site = plain
    with pytest.raises(InputError) as e:
        open_model(f"{url}/m/dense-llama.gguf", {"HF_HUB_OFFLINE": "1"})
    assert "offline" in one_line_error(e) and "not cached" in str(e.value)
    assert site.hits == []


def test_cache_is_refetched_when_the_etag_changes(plain: tuple[str, Site]) -> None:
    url, site = plain
    arg = f"{url}/m/dense-llama.gguf"
    open_model(arg, {})
    entry = load_header(arg)
    assert entry is not None
    model_source.save_header(model_source.CachedHeader(arg, '"old"', entry.size, entry.prefix))
    site.hits.clear()
    open_model(arg, {})
    assert site.sent() > 0
    assert load_header(arg).validator != '"old"'  # type: ignore[union-attr]


def test_redirect_is_followed(plain: tuple[str, Site]) -> None:
    url, _ = plain
    assert_same(open_model(f"{url}/moved.gguf", {}), read_model(FIXTURES / "dense-llama.gguf"))


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/private.gguf", ["HTTP 401", "gated or private", "huggingface-cli login", "HF_TOKEN"]),
        ("/forbidden.gguf", ["HTTP 403", "gated or private"]),
        ("/missing.gguf", ["HTTP 404", "not found"]),
        ("/loop-a.gguf", ["redirect loop"]),
        ("/to-file.gguf", ["refusing a redirect to file:///etc/passwd"]),
    ],
)
def test_http_errors_are_one_line(path: str, words: list[str], plain: tuple[str, Site]) -> None:
    url, _ = plain
    with pytest.raises(InputError) as e:
        open_model(url + path, {})
    msg = one_line_error(e)
    assert msg.startswith(url + path)
    for w in words:
        assert w in msg


def test_timeout_is_one_line(plain: tuple[str, Site]) -> None:
    """The server holds the answer until the client has given up: only the client's timeout can end
    the read (no wall-clock bound, which a busy machine breaks)."""
    url, site = plain
    try:
        with pytest.raises(RemoteUnreachable) as e:
            read_header(HttpRangeSource(f"{url}/slow.gguf", timeout=0.3))
    finally:
        site.held["/slow.gguf"].set()
    assert one_line_error(e) == f"{url}/slow.gguf: timed out after 0.3 s"


def test_connection_refused_is_one_line() -> None:
    with serve(Site()) as url:
        pass
    with pytest.raises(RemoteUnreachable) as e:
        _ = HttpRangeSource(f"{url}/m.gguf").size
    assert "cannot connect to 127.0.0.1" in one_line_error(e)


def test_server_without_range_support_is_refused(
    norange_server: tuple[str, Site], fresh_cache: Path
) -> None:
    url, _ = norange_server
    with pytest.raises(InputError) as e:
        open_model(f"{url}/m/dense-llama.gguf", {})
    msg = one_line_error(e)
    assert "ignores HTTP Range requests" in msg and "276,096-byte" in msg and "refusing" in msg
    src = HttpRangeSource(f"{url}/m/dense-llama.gguf", allow_full_download=True)
    assert read_header(src).tensors == read_model(FIXTURES / "dense-llama.gguf").tensors
    assert src.bytes_transferred == 276_096


def test_progress_reports_bytes_so_far(plain: tuple[str, Site], demo_path: Path) -> None:
    url, _ = plain
    seen: list[int] = []
    src = HttpRangeSource(f"{url}/m/{demo_path.name}", progress=seen.append, progress_after=0)
    read_header(src)
    assert seen and seen == sorted(seen) and seen[-1] == src.bytes_transferred


# --- memory over repeated reads (issue #16: RSS grew over repeated 64 MiB hostile reads)
# ---------------


@pytest.mark.parametrize(
    ("how", "path", "error"),
    [
        ("api", "/m/dense-llama.gguf", None),
        ("api", "hostile:long-vocab", "the header would need more than 67,108,864"),
        ("cli", "/m/dense-llama.gguf", None),
        ("cli", "hostile:long-vocab", "the header would need more than 67,108,864"),
    ],
)
def test_a_remote_read_leaves_nothing_for_the_garbage_collector(
    how: str, path: str, error: str | None, plain: tuple[str, Site]
) -> None:
    """Each read's sources and the header bytes they recorded (up to 64 MiB) are freed when the read
    returns or fails, by reference counting: no reference cycle waits for a collection that may not
    come for many reads. Before: `report` closed over the recorders and each source held `report`;
    the CLI's error conversion kept the failed read's frames in a frame-exception cycle."""
    import gc

    from click.testing import CliRunner

    hostile_server = script("hostile_http").hostile_server

    from llamafit.cli import cli

    with hostile_server("long-vocab") as (hostile_url, _):
        url = hostile_url if path.startswith("hostile:") else plain[0] + path
        gc.collect()
        gc.disable()
        try:
            if how == "cli":
                result = CliRunner().invoke(cli, ["inspect", url])
                assert (result.exit_code, error is None or error in result.stderr) == (
                    2 if error else 0,
                    True,
                )
                del result
            elif error is None:
                open_model(url, {})
            else:
                with pytest.raises(InputError, match=error):
                    open_model(url, {})
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            held = sorted(
                {
                    type(o).__name__
                    for o in gc.garbage
                    if isinstance(o, (HttpRangeSource, model_source.RecordingSource))
                    or isinstance(o, (bytes, bytearray))
                    and len(o) >= 1 << 20
                }
            )
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert held == []


@pytest.mark.parametrize(("offset", "n"), [(0, 8 << 20), (512, 8 << 20), (4096, 8 << 20)])
def test_a_remote_read_is_not_copied_after_it_arrives(offset: int, n: int) -> None:
    """The peak Python memory of reading n bytes stays under 1.5 n: the body is read into one buffer
    and handed over as it is (before: bytes(buffer), then the first window's bytes + that, 3 n)."""
    import subprocess
    import sys
    import tracemalloc

    from tests.support import ROOT

    # the server in a process of its own: its memory is not traced here
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "scripts" / "fuzz" / "hostile_http.py"),
            "huge-vocab",
            "0",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        src = HttpRangeSource(server.stdout.readline().strip())
        assert src.size == 1 << 50
        tracemalloc.start()
        try:
            data = src.read(offset, n)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        server.kill()
        server.wait()
    assert (len(data), peak < 1.5 * n) == (n, True)


# --- Hugging Face
# ------------------------------------------------------------------------------------


def test_hf_repo_default_tag_reads_gemma(hub: Hub, demo_path: Path) -> None:
    model = open_model("hf:unsloth/gemma-3-270m-it-GGUF", hub.env)
    local = read_model(demo_path)
    assert_same(model, local)
    assert (
        model.path
        == f"{hub.url}/unsloth/gemma-3-270m-it-GGUF/resolve/main/gemma-3-270m-it-Q4_K_M.gguf"
    )
    assert 0 < hub.cdn.sent() < 2 * header_bytes(local)
    api = [h.path for h in hub.site.hits if h.path.startswith("/api/")]
    assert api == ["/api/models/unsloth/gemma-3-270m-it-GGUF/revision/main"]
    resolved = {h.path for h in hub.site.hits if "/resolve/" in h.path}
    assert resolved == {f"/unsloth/gemma-3-270m-it-GGUF/resolve/{SHA}/gemma-3-270m-it-Q4_K_M.gguf"}


def test_hf_cache_second_open_is_free_and_offline(hub: Hub, demo_path: Path) -> None:
    first = open_hf_repo("unsloth/gemma-3-270m-it-GGUF:Q4_K_M", hub.env)
    hub.reset()
    assert_same(open_hf_repo("unsloth/gemma-3-270m-it-GGUF:Q4_K_M", hub.env), first)
    assert hub.cdn.hits == [] and [h.path for h in hub.site.hits] == [
        "/api/models/unsloth/gemma-3-270m-it-GGUF/revision/main"
    ]
    hub.reset()
    offline = open_hf_repo(
        "unsloth/gemma-3-270m-it-GGUF:Q4_K_M", {**hub.env, "HF_HUB_OFFLINE": "1"}
    )
    assert_same(offline, first)
    assert offline.path == first.path
    assert hub.site.hits == [] and hub.cdn.hits == []


@pytest.mark.parametrize(
    ("spec", "fixture"),
    [
        ("acme/tiny-GGUF:q8_0", "dense-llama.gguf"),
        ("acme/tiny-GGUF:Q8_0", "dense-llama.gguf"),
        ("hf:acme/tiny-GGUF:IQ4_XS", "moe-qwen3.gguf"),
        ("acme/tiny-GGUF", "tied-llama.gguf"),
    ],
)
def test_hf_quant_tag_picks_the_file(spec: str, fixture: str, hub: Hub) -> None:
    model = open_hf_repo(spec, hub.env)
    assert_same(model, read_model(FIXTURES / fixture))
    assert "mmproj" not in model.path


def test_hf_split_quant_reads_all_shards(hub: Hub) -> None:
    model = open_model("hf:acme/tiny-GGUF:f16", hub.env)
    assert len(model.shards) == 3
    assert_same(model, read_model(SPLIT[0]))
    assert model.path.endswith("/resolve/main/F16/tiny-F16-00001-of-00003.gguf")
    assert len({h.path for h in hub.cdn.hits}) == 3
    assert hub.cdn.sent() < 2 * header_bytes(model)


def test_hf_unknown_tag_lists_the_files(hub: Hub) -> None:
    with pytest.raises(InputError) as e:
        open_hf_repo("acme/tiny-GGUF:Q2_K", hub.env)
    msg = one_line_error(e)
    assert "no GGUF file matching the tag 'Q2_K'" in msg and "tiny-Q8_0.gguf" in msg


@pytest.mark.parametrize(
    "arg",
    [
        "hf://acme/tiny-GGUF/tiny-Q8_0.gguf",
        f"hf://acme/tiny-GGUF/tiny-Q8_0.gguf@{SHA}",
        "hf://acme/tiny-GGUF@main/tiny-Q8_0.gguf",
    ],
)
def test_hf_url_reads_one_file(arg: str, hub: Hub) -> None:
    assert_same(open_model(arg, hub.env), read_model(FIXTURES / "dense-llama.gguf"))


def test_hf_url_to_a_missing_file(hub: Hub) -> None:
    with pytest.raises(InputError) as e:
        open_model("hf://acme/tiny-GGUF/nope.gguf", hub.env)
    assert "no file nope.gguf at revision main" in one_line_error(e)


def test_hf_gated_repo_needs_the_token_and_it_stays_on_the_hub(hub: Hub) -> None:
    for env, status in (({}, 401), ({"HF_TOKEN": "hf_bad"}, 403)):
        with pytest.raises(InputError) as e:
            open_model("hf:acme/gated-GGUF", {**hub.env, **env})
        msg = one_line_error(e)
        assert f"HTTP {status}" in msg and "huggingface-cli login" in msg and "HF_TOKEN" in msg
    hub.reset()
    model = open_model("hf:acme/gated-GGUF", {**hub.env, "HF_TOKEN": TOKEN})
    assert_same(model, read_model(FIXTURES / "dense-llama.gguf"))
    assert all(auth(h) == f"Bearer {TOKEN}" for h in hub.site.hits)
    assert hub.cdn.hits and not any(auth(h) for h in hub.cdn.hits)


def test_hf_resolve_url_token_and_cache(hub: Hub) -> None:
    """A plain resolve URL on the Hub gets the token; its HEAD stops at the Hub's 302
    (X-Linked-Etag)."""
    url = f"{hub.url}/acme/gated-GGUF/resolve/main/gated-Q4_K_M.gguf"
    env = {**hub.env, "HF_TOKEN": TOKEN}
    first = open_model(url, env)
    hub.reset()
    assert_same(open_model(url, env), first)
    assert [h.method for h in hub.site.hits] == ["HEAD"] and hub.cdn.hits == []


def test_hf_unreachable_hub_without_cache() -> None:
    with serve(Site()) as url:
        pass
    with pytest.raises(InputError) as e:
        open_hf_repo("acme/tiny-GGUF", {"HF_ENDPOINT": url})
    assert "not cached" in one_line_error(e)


# --- pure parts
# ----------------------------------------------------------------------------------------


def test_find_best_model_follows_llama_cpp() -> None:
    files = [
        "README.md",
        "mmproj-model-Q8_0.gguf",
        "imatrix-Q4_K_M.gguf",
        "model-Q8_0.gguf",
        "sub/model-Q4_K_M-00002-of-00002.gguf",
        "sub/model-Q4_K_M-00001-of-00002.gguf",
        "model-Q4_K_S.gguf",
        "model.Q5_K_M.gguf",
    ]
    assert find_best_model(files, "") == "sub/model-Q4_K_M-00001-of-00002.gguf"
    assert find_best_model(files, "q8_0") == "model-Q8_0.gguf"
    assert find_best_model(files, "Q5_K_M") == "model.Q5_K_M.gguf"  # `.` after the tag counts too
    assert find_best_model(files, "Q4_K") is None  # the tag must end at `.` or `-`
    assert find_best_model(files, "Q6_K") is None
    # no default tag: first model
    assert find_best_model(["a-F16.gguf", "b.gguf"], "") == "a-F16.gguf"
    assert split_files(files, "sub/model-Q4_K_M-00001-of-00002.gguf") == [
        "sub/model-Q4_K_M-00001-of-00002.gguf",
        "sub/model-Q4_K_M-00002-of-00002.gguf",
    ]
    with pytest.raises(InputError, match="no GGUF file matching the tag 'Q6_K'"):
        pick_model_files(files, RepoSpec("o/r", "Q6_K"))


def test_names_parse() -> None:
    assert parse_repo_spec("org/repo:Q4_K_M") == RepoSpec("org/repo", "Q4_K_M")
    assert parse_repo_spec("hf:org/repo") == RepoSpec("org/repo", "")
    assert parse_hf_url("hf://org/repo/a/b.gguf@v1") == hf.HfFile("org/repo", "a/b.gguf", "v1")
    assert parse_hf_url("hf://org/repo@v1/b.gguf") == hf.HfFile("org/repo", "b.gguf", "v1")
    for bad in ("hf://org/file.gguf", "hf://org//x.gguf"):
        with pytest.raises(InputError):
            parse_hf_url(bad)
    with pytest.raises(InputError):
        parse_repo_spec("just-a-name:Q8_0")


def test_http_helpers() -> None:
    assert parse_content_range("bytes 0-1023/5000") == model_source_cr(0, 1023, 5000)
    assert parse_content_range("bytes */0") == model_source_cr(0, -1, 0)
    assert parse_content_range("bytes 0-9/*") == model_source_cr(0, 9, None)
    assert parse_content_range("nonsense") is None
    assert same_origin("https://huggingface.co/a", "https://huggingface.co:443/b")
    assert same_origin("http://h:1/a", "http://h:1/b") and not same_origin(
        "http://h:1/a", "https://h:1/a"
    )
    creds = {"Authorization": "Bearer x", "Range": "bytes=0-1"}
    assert headers_for("https://cdn.example/x", "https://hub.example/y", creds) == {
        "Range": "bytes=0-1"
    }
    assert headers_for("https://hub.example/x", "https://hub.example/y", creds) == creds


def model_source_cr(start: int, end: int, total: int | None) -> object:
    from llamafit.fetch.remote import ContentRange

    return ContentRange(start, end, total)


def test_header_prefix_zero_fills_what_was_not_read() -> None:
    assert header_prefix([(0, b"ab"), (4, b"ef"), (7, b"xyz")], 8) == b"ab\0\0ef\0x"


@pytest.mark.parametrize(
    ("chunks", "n", "prefix"),
    [
        (
            [(0, b"GGUF"), (2, bytearray(b"UFxyz"))],
            6,
            b"GGUFxy",
        ),  # built on the remote window, shifted
        ([(0, bytearray(b"ab")), (4, b"ef")], 8, b"ab\0\0ef\0\0"),
        ([(3, bytearray(b"xyz"))], 4, b"\0\0\0x"),
        (
            [(9, bytearray(b"q")), (0, b"a")],
            4,
            b"a\0\0\0",
        ),  # a read past the prefix is not the base
        ([], 3, b"\0\0\0"),
    ],
)
def test_header_prefix_table(chunks: list[tuple[int, bytes]], n: int, prefix: bytes) -> None:
    assert (header_prefix(chunks, n), chunks) == (prefix, [])


@pytest.mark.parametrize(
    "kind", [bytes, bytearray]
)  # a file's reads are bytes, a remote's bytearrays
def test_header_prefix_holds_the_header_once(kind: type) -> None:
    """The prefix is built in one buffer, each read copied once and let go (before: a slice copy of
    each read, the buffer, and a bytes copy of the buffer: three times the header at the peak)."""
    import tracemalloc

    n = 8 << 20
    chunks = [(0, kind(1024)), (1024, kind(n - 1024)), (n, kind(16))]
    tracemalloc.start()
    try:
        prefix = header_prefix(chunks, n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (len(prefix), chunks, peak < 1.25 * n) == (n, [], True)


# ---- through the CLI: inspect, check and plan accept URLs, hf:// and -hf ----------------------


def test_cli_reads_urls_hf_files_and_dash_hf(
    plain: tuple[str, Site], hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    url, _ = plain
    result = CliRunner().invoke(cli, ["inspect", f"{url}/m/dense-llama.gguf", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_tensors"] == 39
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    by_flag = CliRunner().invoke(
        cli, ["check", "--gpu", "8GiB", "--json", "--", "-hf", "acme/tiny-GGUF:q8_0", "-c", "2048"]
    )
    assert by_flag.exit_code == 0, by_flag.output
    assert json.loads(by_flag.stdout)["model"]["path"].endswith("/tiny-Q8_0.gguf")
    plan = CliRunner().invoke(
        cli, ["plan", "hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf", "--gpu", "8GiB", "--json"]
    )
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["model"]["architecture"] == "llama"


@needs_llama_cpp
def test_run_dry_run_passes_a_remote_model_as_model_url(plain: tuple[str, Site]) -> None:
    from click.testing import CliRunner

    from llamafit.cli import cli

    url = f"{plain[0]}/m/dense-llama.gguf"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            url,
            "--gpu",
            "cpu",
            "--dry-run",
            "--json",
            "--ctx",
            "2048",
            "--server",
            "embedded",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["command"][1:3] == ["-mu", url]
