"""What a model is as llama.cpp loads it: metadata, per-architecture rules, SWA, weights by role,
tensor names, and ModelFacts (hparams)."""
