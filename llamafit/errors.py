"""The one error hierarchy: the CLI turns any LlamafitError into `Error: …` and exit code 2."""

from __future__ import annotations


class LlamafitError(Exception):
    """Base of every error llamafit reports to the user. Its text is one line: control characters
    in it (a hostile key name's `\\r\\n`, an escape sequence quoted from a file) are escaped
    wherever it is shown, in the CLI's `Error:` line and to a caller of the API alike (#37 F3)."""

    def __str__(self) -> str:
        from .safe_text import printable

        return printable(super().__str__())


class InputError(LlamafitError, ValueError):
    """The user's input (a path, a flag, a value) is unusable."""


class GGUFError(InputError):
    """A GGUF file is malformed, truncated or unsupported; the message names file and offset."""

    def __init__(self, path: str, offset: int | None, what: str) -> None:
        self.path = path
        self.offset = offset
        self.what = what
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{path}{where}: {what}")


class DemoModelError(InputError):
    """The bundled demo model is not installed or cannot be assembled."""


class ModelFactsError(InputError):
    """A GGUF file parses but its metadata is not what llama.cpp would accept."""
