"""`llamafit check --verify URL`: verify a llama-server that is already running (after a
deployment)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import click

from ..errors import InputError
from ..paths import is_url
from ..report.run import progress_line
from ..server.verify import VerifyError, server_slots, verify, verify_lines


def check_verify(url: str, *, as_json: bool, env: Mapping[str, str]) -> int:
    """0: the server answered a full-context request; 1: it failed; bad input raises InputError
    (exit 2)."""
    url = url.rstrip("/")
    if not is_url(url):  # the same http(s) test, here for a server's URL
        raise InputError(
            f"--verify needs the server's http(s) URL, e.g. http://127.0.0.1:8080 (got {url!r})"
        )
    key = env.get("LLAMA_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        server_slots(url, headers)  # a llama-server at all? else the error is the only line
        click.echo(
            f"Verify     {url}: a prompt that fills the context per slot, then a short generation",
            err=True,
        )
        result = verify(
            url, headers=headers, progress=lambda e: click.echo(progress_line(e), err=True)
        )
    except VerifyError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{url}: no answer ({e})") from None
    click.echo(
        json.dumps(result.as_json(), indent=2) if as_json else "\n".join(verify_lines(result))
    )
    return 0 if result.ok else 1
