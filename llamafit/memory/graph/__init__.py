"""The compute graph llama.cpp reserves buffers for, and a replay of how ggml places it.

Laid out after llama.cpp's own files; this package imports nothing else of llamafit.memory:

- cparams.py: ResolvedConfig, the values libllama runs with (src/llama-cparams.h).
- params.py: GraphConfig, GraphHParams, GraphBuildError (src/llama-graph.h llm_graph_params).
- reserve.py: the reserves of llama_context::sched_reserve and their GraphConfigs.
- nodes.py: the graph as data (ggml_tensor / ggml_cgraph fields the scheduler and allocator read).
- ggml.py: the ggml ops the builders call (shapes, strides, views, names, the visit order).
- shapes.py: ggml's shape predicates over nodes.Tensor.
- loader.py: the model's tensors as llama_model_loader makes them (buffers, RoPE factors).
- kv_cache.py: llama_kv_cache and llama_memory_recurrent as a reserve sees them (views, stores).
- build.py: llm_graph_context's helpers (src/llama-graph.cpp: inputs, norm, attn, ffn, moe_ffn).
- models/: one builder per src/models/<arch>.cpp, and MODELS, the registry of the archs.
- template.py: build_graph (llama_model::build_graph) and its template cache.
- sched.py: ggml_backend_sched_split_graph (ggml/src/ggml-backend.cpp).
- alloc.py: ggml-alloc's graph allocator (ggml/src/ggml-alloc.c ggml_gallocr_reserve_n).
- backends/: each backend's supports_op, offload_op, buffer types and graph optimizer (cpu.py,
  vulkan.py with vulkan_optimize.py, metal.py, rpc.py).
- replay.py: compute buffers from the graph itself, where the replay covers model and devices.
"""
