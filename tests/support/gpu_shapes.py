"""The GPU corpus's model shapes (fixtures/calibration/gpu-shapes.json) as header-only GGUFs
(scripts/fixtures/make_shape_header.py), read once per shape, and the large host the corpus rows
assume."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from llamafit.facts.hparams import build_facts
from llamafit.machine.devices import host
from llamafit.memory.model import MemoryModel
from llamafit.reader.model import read_model
from tests.support.scripts import script

HOST = host(256 << 30, 200 << 30)
_DIR = Path(tempfile.mkdtemp(prefix="llamafit-gpu-shapes-"))
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)  # the session's headers go with it


@cache
def model(shape: str) -> MemoryModel:
    """The memory model of a corpus shape, from its header-only GGUF."""
    make_shape_header = script("make_shape_header")

    return MemoryModel(
        build_facts(read_model(make_shape_header.write(shape, _DIR / f"{shape}.gguf")))
    )
