"""The memory model: flags resolved by llama.cpp's rules, KV cache, placement, compute buffers, the
per-device Breakdown, calibration, side models (draft, MTP, projector)."""
