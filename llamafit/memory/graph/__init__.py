"""The compute graph llama.cpp reserves buffers for, and a replay of how ggml places it.

nodes.py: the graph as data (ggml_tensor / ggml_cgraph fields the scheduler and allocator read).
"""
