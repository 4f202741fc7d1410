"""A remote file as a ByteSource: HTTP Range requests, stdlib only (an edge: network I/O).

The GGUF parser reads a URL as it reads a file, and only the ranges it asks for travel: a
model's header, never its tensor data. Redirects are followed by hand (Hugging Face resolve URLs
send a 302 to a CDN) so that credentials never leave the host they were meant for, and the
final location is reused for later ranges. Every failure is a one-line InputError;
RemoteUnreachable marks the network ones (timeouts, refused connections), where a cached header
may still serve.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

from ..errors import InputError
from ..version import __version__

DEFAULT_TIMEOUT = 30.0  # seconds, for each connect and each read from the socket
FIRST_WINDOW = 1 << 10  # the parser's first read: even a 1 KiB header costs < 2x its size
MAX_REDIRECTS = 10  # from a Hugging Face URL (resolve -> CDN takes 1-2)
OTHER_REDIRECTS = 3  # from any other URL: a few, then an error naming where it was sent
# and their subdomains (cdn-lfs.hf.co, cas-bridge.xethub.hf.co)
HF_HOSTS = (
    "huggingface.co",
    "hf.co",
)
# The largest header llamafit will read: 262k-token vocabularies with merges take ~20 MiB, the
# largest tensor lists well under 1 MiB. A header "needing" more is a lie of the server or file.
MAX_HEADER_BYTES = 64 << 20
DEFAULT_DEADLINE = 120.0  # seconds for a whole remote header, however the server dribbles it
PROGRESS_AFTER = 0.5  # seconds before the progress callback starts
_CHUNK = 1 << 16
_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})
_USER_AGENT = f"llamafit/{__version__}"
LOGIN_HINT = "gated or private: log in with `huggingface-cli login` or set HF_TOKEN"


class RemoteUnreachable(InputError):
    """The network failed (timeout, DNS, refused or dropped connection), not the server."""


# --- pure helpers -------------------------------------------------------------------------


@dataclass(frozen=True)
class ContentRange:
    """`Content-Range: bytes START-END/TOTAL` (END inclusive; `bytes */TOTAL` on a 416)."""

    start: int
    end: int
    total: int | None


# ASCII digits, at most 20 (a uint64): no 4,300-digit int() from a hostile server
_CONTENT_RANGE = re.compile(
    r"bytes\s+(?:([0-9]{1,20})-([0-9]{1,20})|\*)/([0-9]{1,20}|\*)", re.IGNORECASE
)


def parse_content_range(value: str | None) -> ContentRange | None:
    m = _CONTENT_RANGE.fullmatch((value or "").strip())
    if not m:
        return None
    start, end, total = m.groups()
    return ContentRange(
        int(start) if start else 0, int(end) if end else -1, None if total == "*" else int(total)
    )


def range_header(offset: int, n: int) -> str:
    return f"bytes={offset}-{offset + n - 1}"


def same_origin(a: str, b: str) -> bool:
    """Scheme, host and port all equal (credentials may follow a redirect only then)."""

    def origin(url: str) -> tuple[str, str | None, int | None]:
        p = urllib.parse.urlsplit(url)
        return p.scheme, p.hostname, p.port or _DEFAULT_PORTS.get(p.scheme)

    return origin(a) == origin(b)


def is_hf_host(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower().rstrip(".")
    return any(host == h or host.endswith("." + h) for h in HF_HOSTS)


def redirect_limit(url: str) -> int:
    """How many redirects a request starting at `url` follows: MAX_REDIRECTS from Hugging Face's own
    hosts, OTHER_REDIRECTS from any other."""
    return MAX_REDIRECTS if is_hf_host(url) else OTHER_REDIRECTS


def headers_for(url: str, origin: str, headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers for `url`, without credentials unless it is on `origin`'s host."""
    keep = same_origin(url, origin)
    return {k: v for k, v in headers.items() if keep or k.lower() not in _CREDENTIALS}


def validator_of(headers: Message) -> str | None:
    """What identifies this version of the file: its ETag, else Last-Modified and length."""
    etag = headers.get("X-Linked-Etag") or headers.get("ETag")
    if etag:
        return etag
    modified, length = headers.get("Last-Modified"), headers.get("Content-Length")
    return f"{modified}; {length} bytes" if modified and length else None


def status_message(url: str, status: int, reason: str = "") -> str:
    if status in (401, 403):
        return f"{url}: HTTP {status}: the model is {LOGIN_HINT}"
    if status in (404, 410):
        return f"{url}: HTTP {status}: not found (check the repository, revision and file name)"
    return f"{url}: HTTP {status} {reason}".rstrip()


def one_line(x: object) -> str:
    """Any message on one line (errors here are always one line)."""
    return " ".join(str(x).split())


# --- HTTP ---------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Hand 3xx answers back (as HTTPError) so that redirects are followed here."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer whose body is still unread: `url` is where it came from."""

    url: str
    status: int
    headers: Message
    body: Any  # file-like; close() it

    def close(self) -> None:
        self.body.close()


def _network_error(url: str, e: BaseException, timeout: float) -> RemoteUnreachable:
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return RemoteUnreachable(f"{url}: timed out after {timeout:g} s")
    host = urllib.parse.urlsplit(url).netloc
    return RemoteUnreachable(
        f"{url}: cannot connect to {host}: {one_line(reason) or type(e).__name__}"
    )


def _open_within(req: urllib.request.Request, timeout: float, deadline: float | None) -> Any:
    """_OPENER.open, abandoned (RemoteUnreachable) at `deadline` seconds however slowly the server
    dribbles its status line and headers; the worker thread then ends with its socket's timeout."""
    if deadline is None:
        return _OPENER.open(req, timeout=timeout)
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(_OPENER.open(req, timeout=timeout))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box.append(e)

    worker = threading.Thread(target=work, name="http-open", daemon=True)
    worker.start()
    worker.join(max(deadline, 0.0))
    if not box:
        raise RemoteUnreachable(
            f"{req.full_url}: no answer within {deadline:g} s (the deadline for the header)"
        )
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def _send(
    method: str, url: str, headers: Mapping[str, str], timeout: float, deadline: float | None = None
) -> Answer:
    """One request, redirects not followed; any status comes back as an Answer."""
    req = urllib.request.Request(url, method=method, headers={"User-Agent": _USER_AGENT, **headers})
    try:
        resp = _open_within(req, timeout, deadline)
    except urllib.error.HTTPError as e:
        return Answer(url, e.code, e.headers, e)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise _network_error(url, e, timeout) from e
    return Answer(url, resp.status, resp.headers, resp)


def request(
    method: str,
    url: str,
    headers: Mapping[str, str],
    timeout: float,
    *,
    stop: Callable[[Answer], bool] = lambda a: False,
    deadline: float | None = None,
) -> Answer:
    """Send, following redirects (credentials only to `url`'s own host: never to a host a redirect
    names), until an answer is not a redirect or `stop` accepts it. Only http(s) redirects, at most
    redirect_limit(url) of them (loops too) fail, naming where the server sent the request."""
    seen = [url]
    where = url
    limit = redirect_limit(url)
    for _ in range(limit + 1):
        answer = _send(method, where, headers_for(where, url, headers), timeout, deadline)
        location = answer.headers.get("Location")
        if answer.status not in _REDIRECTS or not location or stop(answer):
            return answer
        answer.close()
        where = urllib.parse.urljoin(where, location)
        if urllib.parse.urlsplit(where).scheme not in ("http", "https"):
            raise InputError(f"{url}: refusing a redirect to {where} (only http and https)")
        if where in seen:
            raise InputError(f"{url}: redirect loop ({len(seen)} redirects, then back to {where})")
        seen.append(where)
    raise InputError(f"{url}: more than {limit} redirects (the last to {where})")


@dataclass(frozen=True)
class RemoteInfo:
    """What a HEAD request says about a remote file."""

    url: str  # where the answer came from (after redirects)
    size: int | None
    validator: str | None


def probe(
    url: str, *, headers: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT
) -> RemoteInfo | None:
    """HEAD the file: its validator (to check a cached header) and size. None when the server
    answers with an error status (the ranged GET then reports it); network failures raise."""
    # a redirect that already names the file's version (HF: X-Linked-Etag) is not followed
    answer = request(
        "HEAD",
        url,
        headers or {},
        timeout,
        stop=lambda a: bool(a.headers.get("X-Linked-Etag")),
        deadline=DEFAULT_DEADLINE,
    )
    answer.close()
    if answer.status >= 400:
        return None
    size = answer.headers.get("X-Linked-Size") or answer.headers.get("Content-Length")
    return RemoteInfo(answer.url, _length(size), validator_of(answer.headers))


def _length(value: str | None) -> int | None:
    """A byte count a server sent: ASCII digits, at most 20 of them (else unknown)."""
    value = (value or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 20 else None


class HttpRangeSource:
    """A ByteSource over HTTP Range requests.

    The first request (on first use of `size` or `read`) asks for the first FIRST_WINDOW bytes
    and learns the total size from Content-Range; later reads ask for exactly the range wanted.
    A server that ignores Range (200 with the whole body) is refused unless
    `allow_full_download`. `progress(bytes so far)` is called as body bytes arrive once the
    source has been busy for `progress_after` seconds.
    """

    first_window = FIRST_WINDOW

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        progress: Callable[[int], None] | None = None,
        progress_after: float = PROGRESS_AFTER,
        allow_full_download: bool = False,
        name: str | None = None,
        deadline: float | None = None,
        max_bytes: int = MAX_HEADER_BYTES,
    ) -> None:
        self.url = url
        self.name = name or url
        self.timeout = timeout
        self.progress = progress
        self.progress_after = progress_after
        self.allow_full_download = allow_full_download
        self.deadline = DEFAULT_DEADLINE if deadline is None else deadline
        self.max_bytes = max_bytes
        self.bytes_transferred = 0
        self.requests = 0
        self.validator: str | None = None
        self._headers = dict(headers or {})
        self._location = url  # after the first redirect chain: the final URL (a CDN's)
        self._size: int | None = None
        # the first answer's bytes (the whole file when Range is ignored)
        self._head: bytes | bytearray = b""
        self._t0 = 0.0

    @property
    def size(self) -> int:
        if self._size is None:
            self._start()
        assert self._size is not None
        return self._size

    @property
    def read_budget(self) -> int:
        """Bytes this source will still transfer (the header budget less what came already)."""
        return max(self.max_bytes + self.first_window - self.bytes_transferred, 0)

    def read(self, offset: int, n: int) -> bytes | bytearray:
        """The bytes in one buffer, never copied after they arrive (a 64 MiB window costs 64
        MiB)."""
        n = min(n, self.size - offset)
        if n <= 0:
            return b""
        have = self._head[offset : offset + n]  # what the first answer already brought
        if len(have) == n:
            return have
        return self._fetch(offset, n, have)

    def close(self) -> None:
        self._head = b""

    # --- requests ---

    def _get(self, offset: int, n: int) -> Answer:
        """GET a range from the last known location; back to the URL itself if that expired."""
        self.requests += 1
        self._t0 = self._t0 or time.monotonic()
        if n > self.read_budget:
            raise InputError(
                f"{self.url}: the header would need more than {self.max_bytes:,} bytes; "
                "not a plausible GGUF header (refusing to read more)"
            )
        headers = {**self._headers, "Range": range_header(offset, n), "Accept-Encoding": "identity"}
        timeout = min(self.timeout, max(self._left(), 0.001))
        answer = request(
            "GET",
            self._location,
            headers_for(self._location, self.url, headers),
            timeout,
            deadline=self._left(),
        )
        if answer.status in (401, 403, 404, 410) and self._location != self.url:
            answer.close()  # a signed CDN URL expired: resolve again
            self._location = self.url
            return self._get(offset, n)
        if answer.status >= 400 and answer.status != 416:
            answer.close()
            raise InputError(
                status_message(self.url, answer.status, getattr(answer.body, "reason", ""))
            )
        self._location = answer.url
        return answer

    def _start(self) -> None:
        answer = self._get(0, self.first_window)
        try:
            if answer.status == 200:
                self._whole(answer)
                return
            cr = parse_content_range(answer.headers.get("Content-Range"))
            if answer.status == 416 and cr and cr.total == 0:
                self._size = 0  # an empty file
                return
            if answer.status != 206 or cr is None or cr.start != 0 or cr.total is None:
                raise InputError(
                    f"{self.url}: the server's answer to a range request is unusable "
                    f"(HTTP {answer.status}, Content-Range {answer.headers.get('Content-Range')!r})"
                )
            self._size = cr.total
            self.validator = validator_of(answer.headers)
            # never more than asked, whatever Content-Range claims
            self._head = self._body(answer, min(cr.end + 1, self.first_window))
        finally:
            answer.close()

    def _whole(self, answer: Answer) -> None:
        """A 200 to a range request: the server would send the whole file."""
        length = answer.headers.get("Content-Length")
        if not self.allow_full_download:
            what = (
                f"the whole {n:,}-byte file"
                if (n := _length(length)) is not None
                else "the whole file"
            )
            raise InputError(
                f"{self.url}: the server ignores HTTP Range requests (it answered 200 with "
                f"{what}); refusing to download it all: download it and pass the local path"
            )
        self._head = self._body(answer, self.max_bytes + 1)
        if len(self._head) > self.max_bytes:
            raise InputError(
                f"{self.url}: the server sends the whole file, larger than {self.max_bytes:,} "
                "bytes; download it and pass the local path"
            )
        self._size = len(self._head)
        self.validator = validator_of(answer.headers)

    def _fetch(self, offset: int, n: int, have: bytes | bytearray = b"") -> bytearray:
        """Bytes [offset, offset+n), of which the first len(have) are `have`: one request for the
        rest."""
        start, want = offset + len(have), n - len(have)
        answer = self._get(start, want)
        try:
            cr = parse_content_range(answer.headers.get("Content-Range"))
            if answer.status != 206 or cr is None or cr.start != start:
                raise InputError(
                    f"{self.url}: the server ignored the range request for bytes "
                    f"{start}-{start + want - 1} (HTTP {answer.status})"
                )
            if cr.total != self._size:
                raise InputError(
                    f"{self.url}: the file changed while its header was read "
                    f"(size {self._size} became {cr.total})"
                )
            data = self._body(answer, want, bytearray(have))
        finally:
            answer.close()
        if len(data) != n:
            raise RemoteUnreachable(
                f"{self.url}: the connection closed after {len(data) - len(have)} of {want} bytes"
            )
        return data

    def _body(self, answer: Answer, limit: int | None, out: bytearray | None = None) -> bytearray:
        """Read up to `limit` body bytes (all when None) onto `out`, counting them as they arrive.
        The buffer grows in place (realloc) and is returned as it is: no copy of the whole."""
        out = bytearray() if out is None else out
        got = 0
        # one recv at a time: the deadline holds
        read = getattr(answer.body, "read1", answer.body.read)
        try:
            while limit is None or got < limit:
                if self._left() <= 0:
                    raise RemoteUnreachable(
                        f"{self.url}: gave up after {self.deadline:g} s "
                        f"({self.bytes_transferred:,} bytes received)"
                    )
                chunk = read(_CHUNK if limit is None else min(_CHUNK, limit - got))
                if not chunk:
                    break
                out += chunk
                got += len(chunk)
                self._count(len(chunk))
        except (OSError, http.client.HTTPException) as e:
            raise _network_error(self.url, e, self.timeout) from e
        return out

    def _left(self) -> float:
        """Seconds left of the deadline for the whole read."""
        return self.deadline - (time.monotonic() - self._t0) if self._t0 else self.deadline

    def _count(self, n: int) -> None:
        self.bytes_transferred += n
        if self.progress and time.monotonic() - self._t0 >= self.progress_after:
            self.progress(self.bytes_transferred)
