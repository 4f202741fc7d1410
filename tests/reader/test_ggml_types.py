"""The ggml type table written out in llamafit.reader.ggml_types agrees with the gguf package's."""

from __future__ import annotations

import subprocess
import sys

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from llamafit.reader.ggml_types import _BY_ID, GGMLType
from tests.support import FIXTURES


def test_every_gguf_type_is_in_the_table_with_the_same_sizes() -> None:
    reference = {
        int(q): (q.name, *GGML_QUANT_SIZES[q])
        for q in GGMLQuantizationType
        if q in GGML_QUANT_SIZES
    }
    ours = {t.id: (t.name, t.block_size, t.type_size) for t in _BY_ID.values()}
    assert {k: ours.get(k) for k in reference} == reference


def test_lookup_by_id_and_name() -> None:
    assert GGMLType.of(8) == GGMLType(8, "Q8_0", 32, 34) == GGMLType.named("q8_0")
    assert GGMLType.named("BF16").row_size(4096) == 8192


def test_reading_a_header_loads_neither_gguf_nor_numpy() -> None:
    """The reader is the standard library's struct: gguf (and the numpy and yaml it imports) is for
    fixtures and this test's reference only."""
    code = (
        "import sys, llamafit.fit.solver, llamafit.fetch.model_source\n"
        "import llamafit.facts.hparams as f, llamafit.reader.model as g\n"
        "f.build_facts(g.read_model(sys.argv[1]))\n"
        "print(sorted(m for m in ('gguf', 'numpy', 'yaml') if m in sys.modules))"
    )
    model = str(FIXTURES / "moe-qwen3.gguf")
    out = subprocess.run(
        [sys.executable, "-c", code, model], capture_output=True, text=True, check=True
    ).stdout
    assert out == "[]\n"


def test_file_type_and_architecture_names_match_gguf() -> None:
    from gguf.constants import MODEL_ARCH_NAMES, LlamaFileType

    from llamafit.reader.names import ARCH_NAMES, FILE_TYPES

    assert FILE_TYPES == {
        int(f): f.name.removeprefix("MOSTLY_").removeprefix("ALL_") for f in LlamaFileType
    }
    assert frozenset(MODEL_ARCH_NAMES.values()) <= ARCH_NAMES
