"""The compute graph llama.cpp reserves buffers for, and a replay of how ggml places it.

nodes.py: the graph as data (ggml_tensor / ggml_cgraph fields the scheduler and allocator read).
build.py: the pre-split graph llama.cpp builds for one reserve, from ModelFacts and a GraphConfig
(build_graph; reserves lists the reserves of llama_context::sched_reserve).
ggml.py: the ggml ops build.py calls (shapes, strides, views, names, the graph's visit order).
alloc.py: ggml-alloc's graph allocator replayed over a split graph: each buffer's bytes
(llama.cpp: ggml/src/ggml-alloc.c ggml_gallocr_reserve_n).
"""
