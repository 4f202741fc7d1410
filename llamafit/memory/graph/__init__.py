"""The compute graph llama.cpp reserves buffers for, and a replay of how ggml places it.

nodes.py: the graph as data (ggml_tensor / ggml_cgraph fields the scheduler and allocator read).
alloc.py: ggml-alloc's graph allocator replayed over a split graph: each buffer's bytes
(llama.cpp: ggml/src/ggml-alloc.c ggml_gallocr_reserve_n).
"""
