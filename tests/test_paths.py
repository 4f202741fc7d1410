"""paths.is_url: the one http(s) test (a remote model, or a running server for check --verify)."""

from __future__ import annotations

import pytest

from llamafit.paths import is_url


@pytest.mark.parametrize(
    "text, expected",
    [
        ("https://huggingface.co/o/r/resolve/main/m.gguf", True),
        ("http://127.0.0.1:8080", True),
        ("HTTP://x", False),
        ("ftp://x", False),
        ("m.gguf", False),
        ("/models/https:/m.gguf", False),
    ],
)
def test_is_url(text: str, expected: bool) -> None:
    assert is_url(text) is expected
