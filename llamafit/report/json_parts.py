"""The JSON objects that check, plan and run share (keys documented in docs/check.md and docs/plan.md): the resolved
config, a device's bytes, the side models, the model. Data only: bytes as ints, no English."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..facts.hparams import ModelFacts
    from ..memory.model import Breakdown, DeviceUsage
    from ..memory.resolve import ResolvedConfig


def config_json(rc: ResolvedConfig) -> dict[str, Any]:
    """The resolved values llama.cpp runs with (the `config` object of check and plan)."""
    return {
        "engine": rc.engine,
        "n_ctx": rc.n_ctx,
        "n_ctx_seq": rc.n_ctx_seq,
        "n_parallel": rc.n_seq_max,
        "n_stream": rc.n_stream,
        "kv_unified": rc.kv_unified,
        "flash_attn": "on" if rc.flash_attn else "off",
        "type_k": rc.type_k.name.lower(),
        "type_v": rc.type_v.name.lower(),
        "n_gpu_layers": rc.n_gpu_layers,
        "n_batch": rc.n_batch,
        "n_ubatch": rc.n_ubatch,
        "n_outputs_max": rc.n_outputs_max,
        "n_swa_cells": rc.n_swa_cells,
        "swa_full": rc.swa_full,
        "kv_offload": rc.kv_offload,
        "override_tensor": [f"{rx}={buft}" for rx, buft in rc.all_overrides],
        "tensor_split": list(rc.tensor_split),
        "split_mode": rc.split_mode,
        "main_gpu": rc.main_gpu,
        "load_mode": rc.load_mode,
        "cache_ram_bytes": rc.cache_ram_bytes,
        "embeddings": rc.embeddings,
        "pooling": rc.pooling,
    }


def device_json(d: DeviceUsage) -> dict[str, Any]:
    return {
        "name": d.name,
        "kind": d.kind,
        "total_bytes": d.total_bytes,
        "usable_bytes": d.usable_bytes,
        "weights_bytes": d.weights_bytes,
        "kv_bytes": d.kv_bytes,
        "recurrent_bytes": d.recurrent_bytes,
        "compute_bytes": d.compute_bytes,
        "output_bytes": d.output_bytes,
        "reserve_bytes": d.reserve_bytes,
        "overhead_bytes": d.overhead_bytes,
        "pinned_bytes": d.pinned_bytes,
        "repack_bytes": d.repack_bytes,
        "side_bytes": d.side_bytes,
        "used_bytes": d.used_bytes,
        "free_after_bytes": d.free_after_bytes,
    }


def side_models_json(b: Breakdown) -> list[dict[str, Any]]:
    """One object per side model (draft, mtp, mmproj) with its bytes per device."""
    return [
        {
            "kind": u.kind,
            "path": u.path,
            "n_ctx": u.n_ctx,
            "total_bytes": u.total_bytes,
            "details": dict(u.details),
            "devices": [
                {
                    "name": d.name,
                    "weights_bytes": d.weights_bytes,
                    "kv_bytes": d.kv_bytes,
                    "compute_bytes": d.compute_bytes,
                    "output_bytes": d.output_bytes,
                    "total_bytes": d.total_bytes,
                }
                for d in u.devices
                if d.total_bytes
            ],
        }
        for u in b.side_models
    ]


def model_json(facts: ModelFacts) -> dict[str, Any]:
    return {
        "path": facts.path,
        "architecture": facts.architecture,
        "name": facts.name,
        "file_type": facts.file_type,
        "n_ctx_train": facts.n_ctx_train,
        "n_layer_all": facts.n_layer_all,
        "file_size": facts.file_size,
    }


def strict_json(data: Any) -> tuple[str, list[str]]:
    """`data` as strict JSON text (indent 2; RFC 8259 has no Infinity or NaN) and, for each
    non-finite number in it (a hostile file's +inf expert_weights_scale, a NaN), a note naming
    where it was written as null (issue #37 F2)."""
    import json
    import math

    notes: list[str] = []

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            notes.append(f"{where or 'the value'} = {value} is not a JSON number: written as null")
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    return json.dumps(clean(data, ""), indent=2, allow_nan=False), notes
