"""`llamafit check --verify URL`: verify a llama-server that is already running (after a
deployment)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import InputError
from ..paths import is_url
from ..report.layout import wrap_line
from ..report.run import progress_line
from ..server.verify import VerifyError, server_slots, verify, verify_lines
from .prepared import Report


def check_verify(url: str, *, env: Mapping[str, str], say: Callable[[str], None]) -> Report:
    """Whether the server answered a full-context request (Report.fits), its JSON and its text;
    progress lines go to `say` as they come; bad input raises InputError (exit 2)."""
    url = url.rstrip("/")
    if not is_url(url):  # the same http(s) test, here for a server's URL
        raise InputError(
            f"--verify needs the server's http(s) URL, e.g. http://127.0.0.1:8080 (got {url!r})"
        )
    key = env.get("LLAMA_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        server_slots(url, headers)  # a llama-server at all? else the error is the only line
        for line in wrap_line(
            f"Verify     {url}: a prompt that fills the context per slot, then a short generation"
        ):
            say(line)
        result = verify(url, headers=headers, progress=lambda e: say(progress_line(e)))
    except VerifyError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{url}: no answer ({e})") from None
    return Report(result.ok, result.as_json(), "\n".join(verify_lines(result)))
