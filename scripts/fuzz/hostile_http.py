"""Hostile HTTP servers on loopback for tests and scripts/fuzz/fuzz.py: each mode misbehaves one
way.

    lying-range   a 206 whose Content-Range claims far more than asked, then streams it (bounded)
    huge-vocab    a GGUF header claiming a 2**40-token vocabulary, served lazily for any range
    long-vocab    a 2**20-token vocabulary of 1,000-byte tokens (1 GB): plausible until 64 MiB are
                  read
    empty-vocab   8,000,000 empty tokens: 64 MB, inside the budget: the most strings a read walks
    huge-string   a GGUF header whose general.name claims 2**60 bytes
    slowloris     a 206 that dribbles one byte every `dribble` seconds
    slow-headers  the status line and headers one byte at a time
    scheme-redir  a redirect to file:///etc/passwd
    cross-redir   a redirect to another host name (localhost), which records the headers it got
    redir-chain   redirects without end, each to the next path on the other host name (127.0.0.1 /
                  localhost)

Every loop is bounded (at most STREAM_LIMIT bytes, DRIBBLE_LIMIT dribbles).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STREAM_LIMIT = 600 << 20
DRIBBLE_LIMIT = 400
MODES = (
    "lying-range",
    "huge-vocab",
    "long-vocab",
    "empty-vocab",
    "huge-string",
    "slowloris",
    "slow-headers",
    "scheme-redir",
    "cross-redir",
    "redir-chain",
)


def _gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def _kv_u32(key: bytes, v: int) -> bytes:
    return _gstr(key) + struct.pack("<II", 4, v)


_PREFIX = (
    b"GGUF"
    + struct.pack("<IQQ", 3, 0, 6)
    + _gstr(b"general.architecture")
    + struct.pack("<I", 8)
    + _gstr(b"llama")
)
_PREFIX += _kv_u32(b"llama.block_count", 1) + _kv_u32(b"llama.context_length", 256)
_PREFIX += _kv_u32(b"llama.embedding_length", 32) + _kv_u32(b"llama.attention.head_count", 2)
_VOCAB = _PREFIX + _gstr(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 40)
_TOKEN = _gstr(b"tok")  # repeats forever after _VOCAB
_LONG_VOCAB = _PREFIX + _gstr(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 20)
_LONG_TOKEN = _gstr(b"t" * 992)  # 1,000 bytes with its length
_EMPTY_VOCAB = _PREFIX + _gstr(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 8_000_000)
_NAME = _PREFIX + _gstr(b"general.name") + struct.pack("<IQ", 8, 1 << 60)
CLAIMED_SIZE = 1 << 50


def lazy_bytes(head: bytes, unit: bytes, start: int, n: int) -> bytes:
    """Bytes [start, start+n) of head followed by unit repeated forever."""
    out = head[start : start + n]
    pos = max(start, len(head))
    k = (pos - len(head)) % len(unit)
    rest = n - len(out)
    return out + (unit[k:] + unit * (rest // len(unit) + 1))[:rest]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _range(self) -> tuple[int, int]:
        a, _, b = self.headers.get("Range", "bytes=0-1023")[6:].partition("-")
        return int(a), int(b)

    def _answer(self, body: bool) -> None:
        srv: Any = self.server
        srv.seen.append(dict(self.headers))
        mode = srv.mode
        try:
            if mode in ("huge-vocab", "long-vocab", "empty-vocab", "huge-string"):
                head, unit = {
                    "huge-vocab": (_VOCAB, _TOKEN),
                    "long-vocab": (_LONG_VOCAB, _LONG_TOKEN),
                    "empty-vocab": (_EMPTY_VOCAB, _gstr(b"")),
                    "huge-string": (_NAME, b"x"),
                }[mode]
                start, end = self._range()
                data = lazy_bytes(head, unit, start, end - start + 1) if body else b""
                self._head(
                    206,
                    {
                        "Content-Range": f"bytes {start}-{end}/{CLAIMED_SIZE}",
                        "Content-Length": str(end - start + 1),
                    },
                )
                self.wfile.write(data)
            elif mode == "lying-range":
                self._head(
                    206,
                    {
                        "Content-Range": f"bytes 0-536870911/{CLAIMED_SIZE}",
                        "Content-Length": str(1 << 29),
                    },
                )
                sent, block = 0, _VOCAB + b"\0" * ((1 << 16) - len(_VOCAB))
                while body and sent < min(STREAM_LIMIT, 1 << 29):
                    self.wfile.write(block)
                    sent += len(block)
            elif mode == "slowloris":
                self._head(
                    206, {"Content-Range": f"bytes 0-1023/{CLAIMED_SIZE}", "Content-Length": "1024"}
                )
                for i in range(min(DRIBBLE_LIMIT, 1024) if body else 0):
                    self.wfile.write(_VOCAB[i : i + 1] or b"\0")
                    self.wfile.flush()
                    time.sleep(srv.dribble)
            elif mode == "slow-headers":
                raw = (
                    b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-1023/4096\r\n"
                    + b"X-Pad: a\r\n" * 40
                )
                for i in range(min(DRIBBLE_LIMIT, len(raw))):
                    self.wfile.write(raw[i : i + 1])
                    self.wfile.flush()
                    time.sleep(srv.dribble)
            elif mode == "scheme-redir":
                self._head(302, {"Location": "file:///etc/passwd", "Content-Length": "0"})
            elif mode == "redir-chain":
                port, n = (
                    srv.server_address[1],
                    int("".join(c for c in self.path if c.isdigit()) or 0),
                )
                host = (
                    "127.0.0.1"
                    if self.headers.get("Host", "").startswith("localhost")
                    else "localhost"
                )
                self._head(
                    302, {"Location": f"http://{host}:{port}/m{n + 1}.gguf", "Content-Length": "0"}
                )
            elif mode == "cross-redir":
                port = srv.server_address[1]
                if self.headers.get("Host", "").startswith("localhost"):
                    self._head(404, {"Content-Length": "0"})
                else:
                    self._head(
                        302, {"Location": f"http://localhost:{port}/m.gguf", "Content-Length": "0"}
                    )
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: what we want

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()


@contextmanager
def hostile_server(
    mode: str, *, port: int = 0, dribble: float = 0.05
) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(URL of a model file on it, the request headers it saw); loopback only."""
    srv: Any = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    srv.daemon_threads = True
    srv.mode, srv.dribble, srv.seen = mode, dribble, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/m.gguf", srv.seen
    finally:
        srv.shutdown()
        srv.server_close()


def main() -> None:
    """`python scripts/fuzz/hostile_http.py MODE PORT [SECONDS]`: serve in a process of its own (so
    that its memory is not counted as the client's), print the URL, stop after SECONDS (default
    60)."""
    import sys

    mode, port = sys.argv[1], int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    with hostile_server(mode, port=port, dribble=0.02) as (url, _):
        print(url, flush=True)
        time.sleep(seconds)


if __name__ == "__main__":
    main()
