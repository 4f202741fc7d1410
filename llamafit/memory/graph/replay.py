"""Compute buffers from the graph itself: the graph llama.cpp reserves (build.py), placed on the
backends (all on the CPU so far; the scheduler's split for GPUs is sched.py's), allocated by a
replay of ggml-alloc (alloc.py). Where the replay covers a model and a config, its figure is the
compute buffer llama.cpp allocates, to the byte; elsewhere it returns None and the hand-derived
peaks of memory/compute.py stand.

llama_context::sched_reserve (src/llama-context.cpp) reserves the prompt-sized graph, the
one-token graph and the prompt-sized one again (build.reserves), each through
ggml_backend_sched_reserve into one ggml_gallocr per scheduler, whose buffer grows to the largest;
ggml_backend_sched_get_buffer_size reports it after the last (alloc.Gallocr.reserve_n).
"""

from __future__ import annotations

from dataclasses import replace

from ...facts.hparams import ModelFacts
from ..resolve import ResolvedConfig, since
from .alloc import CPU, Gallocr
from .build import FAMILIES, GraphBuildError, GraphHParams, build_graph, reserve_configs


def graph_hparams_of(facts: ModelFacts) -> GraphHParams:
    """build.GraphHParams from the facts that carry them."""
    softcap = facts.final_logit_softcapping if facts.architecture == "gemma3" else 0.0
    return GraphHParams(softcap, facts.expert_weights_scale)


# The newest graph change the builder follows (resolve.py's build rules): build.py builds b11434's
# graphs, which have every rule of the table up to the mixed token/embedding input (PR #29622); for
# an older build the hand-derived peaks, which follow each rule's build, stand.
REPLAY_SINCE = "mixed_batch"


def covers_model(facts: ModelFacts, build: int | None) -> bool:
    """Whether the replay models this model's graphs at this build (CPU only; most configs)."""
    return facts.architecture in FAMILIES and since(REPLAY_SINCE, build)


def covers(facts: ModelFacts, rc: ResolvedConfig) -> bool:
    """Whether the replay models this model's graph under this config and build (CPU only)."""
    return facts.architecture in FAMILIES and not rc.embeddings and since(REPLAY_SINCE, rc.build)


def cpu_compute_bytes(facts: ModelFacts, rc: ResolvedConfig) -> int | None:
    """The CPU backend's compute buffer of a CPU-only llama-server, or None where the graph is not
    modelled (build.GraphBuildError: an architecture or a variant build.py does not build)."""
    if not covers(facts, rc):
        return None
    hp = graph_hparams_of(facts)
    gallocr = Gallocr((CPU,))
    size = 0
    try:
        for _reserve, config in reserve_configs(rc):
            graph = build_graph(facts, config, hp)
            graph = replace(
                graph,
                node_buffer_ids=(0,) * len(graph.nodes),
                leaf_buffer_ids=(0,) * len(graph.leafs),
            )
            size = gallocr.reserve_n(graph)[0]
    except GraphBuildError:
        return None
    return size
