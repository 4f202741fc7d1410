"""Model stores laid out exactly as each tool writes them, for the store and `ls` tests.

Hugging Face: huggingface_hub's cache layout (blobs/<etag>, snapshots/<commit>/<file> as a
relative symlink into blobs, refs/<branch>) under the folder name huggingface_hub computes
(file_download.repo_folder_name); tests read each layout back with huggingface_hub's own
scan_cache_dir / try_to_load_from_cache. Ollama: schema v2 manifests with sha256 blobs.
LM Studio: <publisher>/<repo>/<file>.gguf.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import gguf
import pytest

from tests.support import FIXTURES
from tests.support.projector_files import write_gemma3_projector

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_repo(
    cache: Path, repo: str, files: dict[str, Path], *, commit: str = COMMIT, ref: str = "main"
) -> Path:
    """A repository in a hub cache: each file as a blob (named by its sha256, as for LFS files)
    and a relative snapshot symlink; refs/<ref> holds the commit."""
    from huggingface_hub.file_download import repo_folder_name

    top = cache / repo_folder_name(repo_id=repo, repo_type="model")
    (top / "blobs").mkdir(parents=True, exist_ok=True)
    (top / "refs").mkdir(exist_ok=True)
    (top / "refs" / ref).write_text(commit)
    snap = top / "snapshots" / commit
    for rel, src in files.items():
        data = src.read_bytes()
        blob = top / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return top


def ollama_model(
    root: Path,
    name: tuple[str, str, str, str],
    model: Path | None,
    projector: Path | None = None,
    adapter: Path | None = None,
    *,
    missing: bool = False,
) -> Path:
    """manifests/<registry>/<namespace>/<model>/<tag> → blobs/sha256-<hex>; `missing` leaves the
    model blob out (a manifest pointing at a blob that is gone)."""
    layers = []
    for media, src in (("model", model), ("projector", projector), ("adapter", adapter)):
        if src is None:
            continue
        data = src.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if not (missing and media == "model"):
            (root / "blobs").mkdir(parents=True, exist_ok=True)
            (root / "blobs" / f"sha256-{digest}").write_bytes(data)
        layers.append(
            {
                "mediaType": f"application/vnd.ollama.image.{media}",
                "digest": f"sha256:{digest}",
                "size": len(data),
            }
        )
    config = json.dumps({"model_format": "gguf", "model_family": "llama"}).encode()
    cdigest = hashlib.sha256(config).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{cdigest}").write_bytes(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": f"sha256:{cdigest}",
            "size": len(config),
        },
        "layers": layers,
    }
    path = root / "manifests" / name[0] / name[1] / name[2] / name[3]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def lmstudio_model(root: Path, publisher: str, repo: str, files: dict[str, Path]) -> Path:
    top = root / publisher / repo
    top.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        shutil.copyfile(src, top / name)
    return top


def _write(path: Path, arch: str, kv: dict[str, object], tensors: int = 1) -> Path:
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, int(value))  # type: ignore[call-overload]
    for i in range(tensors):
        w.add_tensor(f"t{i}.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def mmproj(path: Path) -> Path:
    """A projector as convert_hf_to_gguf --mmproj writes it: architecture clip, general.type
    mmproj."""
    return _write(path, "clip", {"general.type": "mmproj", "clip.has_vision_encoder": True})


def lora(path: Path) -> Path:
    """A LoRA adapter as convert_lora_to_gguf writes it: general.type adapter, adapter.type lora."""
    return _write(path, "llama", {"general.type": "adapter", "adapter.type": "lora"})


def vocab_only(path: Path) -> Path:
    """A tokenizer-only GGUF like llama.cpp's models/ggml-vocab-*.gguf: no tensors."""
    return _write(path, "llama", {"tokenizer.ggml.model": "gpt2"}, tensors=0)


MODEL = FIXTURES / "dense-llama.gguf"
MOE = FIXTURES / "moe-qwen3.gguf"
SPLIT = [FIXTURES / f"split-llama-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def small_projector(path: Path) -> Path:
    """A SigLIP projector llama-server loads, for dense-llama (n_embd 64): 2 blocks of 256."""
    return write_gemma3_projector(
        path, projection_dim=64, n_layer=2, n_embd=256, n_ff=1024, n_head=4, image_size=224
    )


def every_store_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory with every store in its default place (only HOME set)."""
    h = tmp_path / "home"
    for var in (
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
        "XDG_CACHE_HOME",
        "LLAMA_CACHE",
        "OLLAMA_MODELS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(h))
    # its own llamafit cache: what earlier tests assembled there (the demo) is not listed
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(h / ".cache" / "llamafit"))
    proj = small_projector(tmp_path / "mmproj-tiny-F16.gguf")
    hub = h / ".cache" / "huggingface" / "hub"
    files = {"tiny-Q8_0.gguf": MODEL, "mmproj-tiny-F16.gguf": proj, **{p.name: p for p in SPLIT}}
    hf_repo(hub, "acme/tiny-GGUF", files)
    broken = hf_repo(hub, "acme/broken-GGUF", {"b-Q4_0.gguf": MOE})
    next((broken / "blobs").iterdir()).unlink()
    (broken / "blobs" / "0a1b.incomplete").write_bytes(b"")
    ollama = h / ".ollama" / "models"
    ollama_model(ollama, ("registry.ollama.ai", "library", "moe", "tiny"), MOE)
    tied = MODEL.parent / "tied-llama.gguf"
    ollama_model(ollama, ("registry.ollama.ai", "library", "gone", "latest"), tied, missing=True)
    lms = h / ".lmstudio" / "models"
    lmstudio_model(
        lms,
        "lmstudio-community",
        "gemma-GGUF",
        {"gemma-F16.gguf": MODEL.parent / "swa-gemma3.gguf"},
    )
    lmstudio_model(
        lms,
        "acme",
        "adapters",
        {
            "style-lora.gguf": lora(tmp_path / "l.gguf"),
            "ggml-vocab-llama.gguf": vocab_only(tmp_path / "v.gguf"),
        },
    )
    return h


def count_header_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths `ls` reads a model header from (commands/ls.read_local_model), in order: the list
    grows as the test runs `ls` (a cached row reads none)."""
    from llamafit.commands import ls as ls_cli

    reads: list[str] = []
    real = ls_cli.read_local_model

    def counting(path: str) -> object:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(ls_cli, "read_local_model", counting)
    return reads
