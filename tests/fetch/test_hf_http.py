"""`hf:` reads over plain HTTP (issue #26): the Hub API and ranged resolve reads through the stdlib,
the token from HF_TOKEN or huggingface_hub's token file, sent to the Hub's host only.

The Hub here is http.server on 127.0.0.1 (HF_ENDPOINT points at it), its resolve URLs redirect to a
second server, the 'CDN', which serves the GGUF with Range support. Nothing touches the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llamafit.errors import InputError
from llamafit.fetch import hf
from llamafit.fetch.hf import (
    HfSettings,
    RepoListing,
    list_repo,
    parse_listing,
    read_token,
    token_path,
)
from llamafit.reader.model import read_model
from tests.support import FIXTURES, ROOT

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
TOKEN = "hf_from_the_file"
MODEL = FIXTURES / "dense-llama.gguf"


@dataclass
class Route:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    drip: float = 0.0  # seconds between body bytes


@dataclass
class Site:
    routes: dict[str, Route] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        site: Site = self.server.site  # type: ignore[attr-defined]
        path = urllib.parse.urlsplit(self.path).path
        site.seen.append((path, self.headers.get("Authorization")))
        if path in site.files:
            data = site.files[path].read_bytes()
            a, _, b = self.headers.get("Range", "bytes=0-").removeprefix("bytes=").partition("-")
            start, end = int(a), min(int(b or len(data) - 1), len(data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            self.wfile.write(data[start : end + 1])
            return
        route = site.routes.get(path, Route(404))
        self.send_response(route.status)
        for k, v in {"Content-Length": str(len(route.body)), **route.headers}.items():
            self.send_header(k, v)
        self.end_headers()
        if not route.drip:
            self.wfile.write(route.body)
            return
        try:
            for i in range(len(route.body)):
                self.wfile.write(route.body[i : i + 1])
                self.wfile.flush()
                time.sleep(route.drip)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up


@pytest.fixture
def servers() -> Iterator[tuple[str, Site, str, Site]]:
    """(hub URL, hub, CDN URL, CDN)."""
    out: list[object] = []
    stops = []
    for _ in range(2):
        site = Site()
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.daemon_threads = True
        srv.site = site  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        out += [f"http://127.0.0.1:{srv.server_address[1]}", site]
        stops.append(srv)
    yield out[0], out[1], out[2], out[3]  # type: ignore[misc]
    for srv in stops:
        srv.shutdown()
        srv.server_close()


def publish(
    hub_site: Site, cdn_url: str, cdn_site: Site, repo: str, files: dict[str, Path]
) -> None:
    info = {"id": repo, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]}
    for rev in ("main", COMMIT):
        hub_site.routes[f"/api/models/{repo}/revision/{rev}"] = Route(
            200, {}, json.dumps(info).encode()
        )
        for name, p in files.items():
            hub_site.routes[f"/{repo}/resolve/{rev}/{name}"] = Route(
                302, {"Location": f"{cdn_url}/cdn/{repo}/{name}", "X-Linked-Etag": f'"{p.name}"'}
            )
            cdn_site.files[f"/cdn/{repo}/{name}"] = p


def test_hf_reads_over_plain_http_without_huggingface_hub(
    servers: tuple[str, Site, str, Site], tmp_path: Path
) -> None:
    """A fresh process where huggingface_hub cannot be imported: the token comes from the file
    `huggingface-cli login` writes, goes to the Hub's API and resolve URLs, never to the CDN."""
    hub_url, hub_site, cdn_url, cdn_site = servers
    publish(
        hub_site,
        cdn_url,
        cdn_site,
        "acme/tiny-GGUF",
        {"tiny-Q8_0.gguf": MODEL, "tiny-F16.gguf": MODEL},
    )
    hf_home = tmp_path / "hf"
    hf_home.mkdir()
    (hf_home / "token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=hub_url,
        HF_HOME=str(hf_home),
        LLAMAFIT_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=str(ROOT),
    )
    code = (
        "import os, sys; sys.modules['huggingface_hub'] = None\n"
        "from llamafit.fetch.model_source import open_model\n"
        "m = open_model('hf:acme/tiny-GGUF:Q8_0', os.environ)\n"
        "print(len(m.tensors), m.shards[0].path, sys.modules['huggingface_hub'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    n = len(read_model(str(MODEL)).tensors)
    assert done.stdout.split() == [
        str(n),
        f"{hub_url}/acme/tiny-GGUF/resolve/main/tiny-Q8_0.gguf",
        "None",
    ]
    # the listing, then the file the tag picks at the listing's commit
    assert [p for p, _ in hub_site.seen] == [
        "/api/models/acme/tiny-GGUF/revision/main",
        f"/acme/tiny-GGUF/resolve/{COMMIT}/tiny-Q8_0.gguf",
    ]
    assert {a for p, a in hub_site.seen} == {f"Bearer {TOKEN}"}
    assert cdn_site.seen and {a for _, a in cdn_site.seen} == {None}


@pytest.mark.parametrize(
    ("env", "path"),
    [
        ({}, "/home/u/.cache/huggingface/token"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/token"),
        ({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/token"),
        ({"HF_TOKEN_PATH": "/t/tok", "HF_HOME": "/h"}, "/t/tok"),
    ],
)
def test_token_path_follows_huggingface_hub(env: dict[str, str], path: str) -> None:
    assert token_path(env, "/home/u") == path


def test_token_path_agrees_with_huggingface_hub_constants(tmp_path: Path) -> None:
    """The reference: huggingface_hub (the test extra) read in a process with only these
    variables."""
    envs = (
        {},
        {"HF_HOME": str(tmp_path / "h")},
        {"XDG_CACHE_HOME": str(tmp_path)},
        {"HF_TOKEN_PATH": str(tmp_path / "t"), "HF_HOME": str(tmp_path / "h")},
    )
    for env in envs:
        full = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), **env}
        out = subprocess.run(
            [sys.executable, "-c", "import huggingface_hub.constants as c; print(c.HF_TOKEN_PATH)"],
            env=full,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert token_path(full, full["HOME"]) == out


@pytest.mark.parametrize(
    ("content", "token"),
    [
        (b"hf_abc\n", "hf_abc"),
        (b"  hf_abc  ", "hf_abc"),
        (b"", None),
        (b"\n", None),
        (b"hf_a\nhf_b\n", None),
        (b"\xff\xfe", None),
        (None, None),
        ("dir", None),
    ],
)
def test_token_file(content: bytes | str | None, token: str | None, tmp_path: Path) -> None:
    path = tmp_path / "token"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    assert read_token(str(path)) == token


def test_hf_token_prefers_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("hf_file")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    assert (
        hf.hf_token({"HF_TOKEN": "hf_env"}),
        hf.hf_token({"HUGGING_FACE_HUB_TOKEN": "hf_old"}),
        hf.hf_token({}),
    ) == ("hf_env", "hf_old", "hf_file")


def settings(url: str, token: str | None = None) -> HfSettings:
    return HfSettings(url, token, offline=False)


def test_listing_at_a_revision_quotes_it_and_follows_a_renamed_repo(
    servers: tuple[str, Site, str, Site],
) -> None:
    hub_url, hub_site, _, _ = servers
    info = {"sha": COMMIT, "siblings": [{"rfilename": "a.gguf"}, {"rfilename": "sub/b.gguf"}]}
    hub_site.routes["/api/models/old/name/revision/refs%2Fpr%2F1"] = Route(
        307, {"Location": "/api/models/new/name/revision/refs%2Fpr%2F1"}
    )
    hub_site.routes["/api/models/new/name/revision/refs%2Fpr%2F1"] = Route(
        200, {}, json.dumps(info).encode()
    )
    got = list_repo(settings(hub_url, "hf_t"), "old/name", "refs/pr/1")
    assert got == RepoListing("old/name", "refs/pr/1", COMMIT, ("a.gguf", "sub/b.gguf"))
    assert [a for _, a in hub_site.seen] == ["Bearer hf_t", "Bearer hf_t"]


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, ["HTTP 401", "does not exist or is gated or private", "HF_TOKEN"]),
        (403, ["HTTP 403", "does not exist or is gated or private"]),
        (404, ["HTTP 404: no such repository or revision"]),
        (500, ["HTTP 500"]),
    ],
)
def test_listing_errors_are_one_line(
    status: int, words: list[str], servers: tuple[str, Site, str, Site]
) -> None:
    hub_url, hub_site, _, _ = servers
    hub_site.routes["/api/models/acme/x/revision/main"] = Route(status)
    with pytest.raises(InputError) as e:
        list_repo(settings(hub_url), "acme/x")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{hub_url}/acme/x (revision main): ")
    assert all(w in msg for w in words), msg


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"<html>", "the Hub's answer is not JSON"),
        (b"[1, 2]", "the Hub's answer has no file list (siblings)"),
        (b'{"siblings": {}}', "the Hub's answer has no file list (siblings)"),
        (b'{"siblings": [{"rfilename": 7}]}', "the Hub's file list is malformed"),
        (b'{"siblings": ["a.gguf"]}', "the Hub's file list is malformed"),
        (b"[" * 100_000, "the Hub's answer is not JSON"),
    ],
)
def test_a_broken_listing_is_one_line(body: bytes, error: str) -> None:
    with pytest.raises(InputError) as e:
        parse_listing("acme/x", "main", body, "HUB")
    assert str(e.value) == f"HUB: {error}"


@pytest.mark.parametrize(
    ("body", "commit"),
    [
        (b'{"sha": "' + COMMIT.encode() + b'", "siblings": []}', COMMIT),
        (b'{"siblings": []}', "main"),  # no commit: the revision names it
        (b'{"sha": "../../x", "siblings": []}', "main"),  # it goes into URLs: a commit or nothing
    ],
)
def test_the_listing_commit(body: bytes, commit: str) -> None:
    assert parse_listing("acme/x", "main", body, "HUB").commit == commit


def test_a_huge_listing_is_refused(
    servers: tuple[str, Site, str, Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub_url, hub_site, _, _ = servers
    monkeypatch.setattr(hf, "MAX_LISTING_BYTES", 1000)
    hub_site.routes["/api/models/acme/x/revision/main"] = Route(
        200, {}, b'{"siblings": []}' + b" " * 2000
    )
    with pytest.raises(InputError, match="the listing is larger than 1,000 bytes"):
        list_repo(settings(hub_url), "acme/x")


def test_a_dribbled_listing_is_given_up_at_the_deadline(
    servers: tuple[str, Site, str, Site], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub_url, hub_site, _, _ = servers
    monkeypatch.setattr(hf, "DEFAULT_DEADLINE", 1.0)
    hub_site.routes["/api/models/acme/x/revision/main"] = Route(
        200, {}, b'{"siblings": []}' + b" " * 100, drip=0.1
    )
    t0 = time.monotonic()
    with pytest.raises(
        InputError, match=r"acme/x \(revision main\): gave up reading the listing after 1 s"
    ):
        list_repo(settings(hub_url), "acme/x")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    "spec",
    [
        "hf:../x",
        "hf:a/..",
        "hf:a/b/c",
        "hf:a/-b",
        "hf:a/b c",
        "hf:a%2F/b",
        "hf:/b",
        "hf:a/b\u00e9",
        "hf:a/.b",
    ],
)
def test_repository_names_that_are_not_names_are_refused(spec: str) -> None:
    with pytest.raises(InputError, match="expected a Hugging Face repository as org/repo"):
        hf.parse_repo_spec(spec)


@pytest.mark.parametrize(
    ("spec", "repo", "tag"),
    [
        ("hf:unsloth/gemma-3-270m-it-GGUF:Q4_K_M", "unsloth/gemma-3-270m-it-GGUF", "Q4_K_M"),
        ("_org/repo.v2_x", "_org/repo.v2_x", ""),
        ("hf:a/b:", "a/b", ""),
    ],
)
def test_repository_names(spec: str, repo: str, tag: str) -> None:
    assert hf.parse_repo_spec(spec) == hf.RepoSpec(repo, tag)
