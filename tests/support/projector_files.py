"""Write projector (mmproj) GGUFs that real llama.cpp loads: the Gemma 3 SigLIP projector with
clip.cpp's keys and tensor names (tools/mtmd/clip-impl.h TN_*, clip_model_loader::load_tensors), at
the real Gemma 3 4B mmproj shape (SigLIP so400m: 27 blocks, n_embd 1152, n_ff 4304, 16 heads, 896
px, 14 px patches) or smaller. Tensor data is a sparse run of zeros (os.truncate): llama.cpp does
not check it."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np

from tests.support import FIXTURES

F16, F32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
ALIGN = 32  # GGUF_DEFAULT_ALIGNMENT


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def write_gemma3_projector(
    path: Path,
    *,
    projection_dim: int,
    n_layer: int = 27,
    n_embd: int = 1152,
    n_ff: int = 4304,
    n_head: int = 16,
    image_size: int = 896,
    patch_size: int = 14,
    f32_tensors: tuple[str, ...] = (),
) -> Path:
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.name", "gemma-3 siglip projector (zeros)")
    w.add_uint32("general.file_type", 1)
    w.add_string("clip.projector_type", "gemma3")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.projection_dim", projection_dim)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    n_patches = (image_size // patch_size) ** 2
    total = 0

    def tensor(name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType = F16) -> None:
        nonlocal total
        # converters keep some tensors F32 (see the mmproj corpus)
        qtype = F32 if name in f32_tensors else qtype
        nbytes = int(np.prod(shape)) * (2 if qtype == F16 else 4)
        w.add_tensor_info(
            name,
            shape,
            np.dtype(np.float16 if qtype == F16 else np.float32),
            nbytes,
            raw_dtype=qtype,
        )
        total += _pad(nbytes)

    # numpy order (outermost first): ggml ne is the reverse
    tensor("v.patch_embd.weight", (n_embd, 3, patch_size, patch_size))
    tensor("v.patch_embd.bias", (n_embd,), F32)
    tensor("v.position_embd.weight", (n_patches, n_embd))
    for i in range(n_layer):
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"v.blk.{i}.{part}.weight", (n_embd, n_embd))
            tensor(f"v.blk.{i}.{part}.bias", (n_embd,), F32)
        for norm in ("ln1", "ln2"):
            tensor(f"v.blk.{i}.{norm}.weight", (n_embd,), F32)
            tensor(f"v.blk.{i}.{norm}.bias", (n_embd,), F32)
        tensor(f"v.blk.{i}.ffn_up.weight", (n_ff, n_embd))
        tensor(f"v.blk.{i}.ffn_up.bias", (n_ff,), F32)
        tensor(f"v.blk.{i}.ffn_down.weight", (n_embd, n_ff))
        tensor(f"v.blk.{i}.ffn_down.bias", (n_embd,), F32)
    tensor("v.post_ln.weight", (n_embd,), F32)
    tensor("v.post_ln.bias", (n_embd,), F32)
    tensor("mm.input_projection.weight", (n_embd, projection_dim))
    tensor("mm.soft_emb_norm.weight", (n_embd,), F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = os.path.getsize(path)
    os.truncate(path, _pad(header) + total)
    return path


MMPROJ_CORPUS = FIXTURES / "calibration" / "mmproj-corpus.jsonl"


def mmproj_corpus_rows() -> list[dict]:
    """The public logs of fixtures/calibration/mmproj-corpus.jsonl, one dict a row."""
    import json

    return [json.loads(line) for line in MMPROJ_CORPUS.read_text().splitlines() if line.strip()]


def predict_mmproj_row(row: dict, tmp_dir: Path) -> dict[str, dict[str, float]]:
    """Rebuild a row's projector (write_gemma3_projector at the logged shape) and llamafit's
    prediction in MiB: {"weights": {device: MiB}, "compute": {device: MiB, "CPU": host input}}."""
    from llamafit.facts.projector import projector_facts
    from llamafit.fetch.model_source import open_model
    from llamafit.memory.projector import encoder_compute, encoder_host_input

    s, st = row["projector"], row["settings"]
    if s["projector_type"] != "gemma3":
        raise NotImplementedError(f"no writer for projector type {s['projector_type']}")
    path = write_gemma3_projector(
        tmp_dir / f"{row['id']}.gguf",
        projection_dim=s["projection_dim"],
        n_layer=s["n_layer"],
        n_embd=s["n_embd"],
        n_ff=s["n_ff"],
        n_head=s["n_head"],
        image_size=s["image_size"],
        patch_size=s["patch_size"],
        f32_tensors=tuple(s.get("f32_tensors", ())),
    )
    m = open_model(str(path), {})
    p = projector_facts(m.path, m.metadata, m.tensors)
    assert p.n_tensors == s["n_tensors"]
    on_gpu = st["mmproj_offload"] and bool(row["gpus"])
    dev = row["gpus"][0] if on_gpu else "CPU"
    px, mib = st["warmup_image_px"], 1024 * 1024
    backend = row["backend"] if on_gpu else "cpu"
    compute = {
        dev: encoder_compute(p, image_px=px, flash_attn=st["flash_attn"], backend=backend) / mib
    }
    if on_gpu:
        compute["CPU"] = encoder_host_input(p, image_px=px) / mib
    return {"weights": {dev: p.weights_bytes / mib}, "compute": compute}
