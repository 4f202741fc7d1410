"""What a GGUF file is: a model, or a file llama-server would not load as one (a projector, a LoRA
adapter, an importance matrix, a tokenizer-only vocabulary), from its header alone."""

from __future__ import annotations

from collections.abc import Mapping


def gguf_kind(metadata: Mapping[str, object], n_tensors: int) -> str:
    """`model`, `mmproj`, `adapter` (a LoRA), `imatrix`, `vocab` (a tokenizer-only file such as
    llama.cpp's models/ggml-vocab-*.gguf: no tensors, a tokenizer.ggml.model, which llama_vocab::load
    requires) or `empty` (no tensors and no tokenizer: neither), from general.type (gguf-py's
    GGUFType) and the tensor count."""
    gtype = metadata.get("general.type")
    if gtype == "adapter" or "adapter.type" in metadata:
        return "adapter"
    if gtype in ("mmproj", "clip-vision") or metadata.get("general.architecture") == "clip":
        return "mmproj"
    if gtype == "imatrix":
        return "imatrix"
    if n_tensors == 0:
        return "vocab" if "tokenizer.ggml.model" in metadata else "empty"
    return "model"
