"""The OOM incidents of lesson 7: stories, candidate diagnoses and randomised variants, in course order.

Each builder returns a `lessons.diagnosis.scenarios.Scenario`; with a `random.Random` it perturbs traffic and
sizes within ranges where the do-nothing deployment still fails and the reference fix still resolves (the
tests check several seeds). `get_scenario(id, seed)` picks one. The incidents follow real reports: vLLM
issues 10517 and 2418 (a max_model_len the KV cache cannot hold), the GPU-shared-with-another-process check of
vLLM's start-up, and CUDA graph memory profiling (lessons/diagnosis/incident_graphs.py). Numbers quoted in the
diagnoses' explanations are computed from the same memory model the grader uses (`replay.footprint_for`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from engine.memory.catalog import GPUS
from engine.memory.units import GiB
from lessons.diagnosis.incident_graphs import SEVEN_B_CLASS, cuda_graphs
from lessons.diagnosis.incident_mla import mla_tp
from lessons.diagnosis.replay import footprint_for
from lessons.diagnosis.scenarios import Diagnosis, Scenario, ServeConfig, Traffic


def _jitter(rng: random.Random | None, value: float, spread: float = 0.15) -> float:
    return value if rng is None else value * rng.uniform(1 - spread, 1 + spread)


def chat_oom(rng: random.Random | None, seed: int | None) -> Scenario:
    """Llama-3-8B chat on one 24 GB card, static max-length reservations: OOM although the weights fit."""
    rate = round(_jitter(rng, 3.0), 2)
    users = 32 if rng is None else rng.choice((24, 32, 48))
    cfg = ServeConfig(
        "llama-3-8b",
        "rtx-4090",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        policy="static",
        max_model_len=8192,
        max_num_seqs=users,
    )
    return Scenario(
        id="chat-oom",
        title="The chat service that crashes at lunchtime",
        story=(
            f"A team serves Llama-3-8B-Instruct in bf16 from one RTX 4090 (24 GB) with a home-grown server on "
            f"transformers' static KV cache: every chat session reserves a full {cfg.max_model_len}-token cache "
            f"when it starts. The weights take 15 GB, so 9 GB looked like plenty. In testing with three users "
            f"all was fine; at lunchtime ~{rate:g} new chats per second arrive, up to {users} at once, and the "
            f"server starts answering with CUDA out-of-memory errors."
        ),
        config=cfg,
        traffic=Traffic("sharegpt", 400, rate, required_context=8192, slo_p95_wait_s=10.0, seed=seed or 0),
        diagnoses=(
            Diagnosis(
                "kv-reservation",
                "Each session reserves KV for the full 8K context up front",
                True,
                "8192 tokens x 128 KiB = 1 GiB reserved per session, although a typical chat holds ~500 "
                "tokens: only a handful of sessions fit beside the weights, the next one OOMs.",
            ),
            Diagnosis(
                "weights-too-big",
                "The 8B model is too big for a 24 GB card",
                False,
                "The weights are 15 GiB of 24; the server starts and serves a few users fine.",
            ),
            Diagnosis(
                "memory-leak",
                "A memory leak grows until the GPU is full",
                False,
                "Memory steps up by exactly 1 GiB per new session and falls when sessions end: that is "
                "reservation, not a leak.",
            ),
            Diagnosis(
                "allocator-fragmentation",
                "PyTorch allocator fragmentation (set expandable_segments)",
                False,
                "expandable_segments helps when reserved-but-unallocated memory is large; here each session "
                "really allocates 1 GiB of cache.",
            ),
        ),
        reference_fix={"policy": "paged"},
        hint="Compare the KV reserved per session with the tokens a session really holds.",
        max_gpus=1,
        allowed_models=SEVEN_B_CLASS,
        seed=seed,
    )


def mha_rag(rng: random.Random | None, seed: int | None) -> Scenario:
    """Llama-2-7B (MHA) RAG on an L4: 512 KiB/token KV caps concurrency; a GQA model of the same size fits."""
    rate = round(_jitter(rng, 0.8), 2)
    cfg = ServeConfig("llama-2-7b", "l4", "meta-llama/Llama-2-7b-chat-hf", max_model_len=4096, max_num_seqs=64)
    sc = Scenario(
        id="mha-rag",
        title="The RAG assistant whose queue never drains",
        story=(
            f"A documentation assistant runs Llama-2-7B-chat on vLLM on one L4 (24 GB). Each question arrives "
            f"with ~1,800 tokens of retrieved passages. At {rate:g} questions per second the queue keeps growing "
            f"(the metrics line's 'Waiting' count climbs) and users wait minutes, although the GPU's memory is "
            f"'only' {cfg.gpu_memory_utilization:.0%} used — vLLM's default share."
        ),
        config=cfg,
        traffic=Traffic("rag", 300, rate, required_context=4096, slo_p95_wait_s=15.0, seed=seed or 0),
        diagnoses=(),
        reference_fix={"model": "llama-3-8b"},
        hint="KV bytes per token = 2 x layers x KV heads x head_dim x 2 bytes. How many KV heads?",
        max_gpus=1,
        allowed_models=SEVEN_B_CLASS,
        seed=seed,
    )
    return replace(sc, diagnoses=_mha_rag_diagnoses(sc))


def _mha_rag_diagnoses(sc: Scenario) -> tuple[Diagnosis, ...]:
    """The RAG incident's explanations, with the pool sizes the grader computes for MHA vs GQA and for 0.95."""
    mha, need = footprint_for(sc, sc.config), sc.traffic.required_context
    gqa = footprint_for(sc, replace(sc.config, model="llama-3-8b"))
    more = footprint_for(sc, replace(sc.config, gpu_memory_utilization=0.95))
    n_mha, n_gqa, n_more = (f.kv_budget_bytes // f.kv_bytes_per_token // need for f in (mha, gqa, more))
    ratio = gqa.kv_token_capacity / mha.kv_token_capacity
    return (
        Diagnosis(
            "mha-kv",
            "Llama-2-7B's KV cache is 4x larger per token than a GQA model's",
            True,
            f"Llama-2-7B has 32 KV heads (MHA): 512 KiB/token, so its {mha.kv_budget_bytes / GiB:.1f} GiB pool holds "
            f"{mha.kv_token_capacity:,} tokens = {n_mha} full {need}-token RAG requests. Llama-3-8B (8 KV heads) "
            f"stores 128 KiB/token, but its weights are {(gqa.weights_bytes - mha.weights_bytes) / GiB:.1f} GiB "
            f"larger: {gqa.kv_token_capacity:,} tokens = {n_gqa} requests, {ratio:.1f}x the room, not 4x.",
        ),
        Diagnosis(
            "weights-too-big",
            "The weights do not fit the L4",
            False,
            f"{mha.weights_bytes / GiB:.1f} GiB of weights fit; vLLM starts and serves.",
        ),
        Diagnosis(
            "need-more-utilization",
            "gpu_memory_utilization is too low",
            False,
            f"{sc.config.gpu_memory_utilization:g} (the default) already hands vLLM "
            f"{sc.config.gpu_memory_utilization:.0%} of the card; 0.95 adds "
            f"{(more.kv_budget_bytes - mha.kv_budget_bytes) / GiB:.1f} GiB of KV, "
            f"{more.kv_token_capacity - mha.kv_token_capacity:,} tokens: {n_more} full requests at once "
            f"(was {n_mha}).",
        ),
        Diagnosis(
            "memory-leak",
            "vLLM leaks memory under load",
            False,
            f"Usage is flat at the configured {sc.config.gpu_memory_utilization:.0%}: vLLM pre-allocates its KV "
            "pool at start-up.",
        ),
    )


def default_128k(rng: random.Random | None, seed: int | None) -> Scenario:
    """Llama-3.1-8B with vLLM's default max_model_len of 131072 on a 24 GB card: refuses to start."""
    need = 16384 if rng is None else rng.choice((8192, 16384))
    cfg = ServeConfig("llama-3.1-8b", "rtx-3090", "meta-llama/Llama-3.1-8B-Instruct")
    sc = Scenario(
        id="default-128k",
        title="The upgrade that never started",
        story=(
            f"Upgrading from Llama-3-8B to Llama-3.1-8B-Instruct, a team reuses its launch command on one RTX "
            f"3090 (24 GB) without --max-model-len. The new model advertises a 128K context. The server exits at "
            f"start-up. Their documents need at most {need} tokens of context. (Modelled on vLLM issue 10517, the "
            f"same model and card.)"
        ),
        config=cfg,
        traffic=Traffic(
            "sharegpt", 300, round(_jitter(rng, 2.0), 2), required_context=need, slo_p95_wait_s=10.0, seed=seed or 0
        ),
        diagnoses=(
            Diagnosis(
                "context-too-long",
                "max_model_len defaults to 131072, more KV than the card can hold",
                True,
                "",  # filled in below from the memory model
            ),
            Diagnosis(
                "weights-too-big",
                "Llama-3.1-8B is bigger than Llama-3-8B",
                False,
                "Same architecture and weights size (8.03B parameters); only the RoPE scaling and the "
                "advertised context differ.",
            ),
            Diagnosis(
                "driver",
                "A CUDA driver / vLLM version mismatch",
                False,
                "The error message is vLLM's own capacity check, raised after the weights loaded fine.",
            ),
        ),
        reference_fix={"max_model_len": need},
        hint="Read the error: compare the two numbers in it.",
        max_gpus=1 if rng is None else rng.choice((1, 2)),
        allowed_models=("llama-3.1-8b",),
        seed=seed,
    )
    fp = footprint_for(sc, cfg)
    longest = fp.kv_token_capacity - fp.block_size
    pool = (
        f"One 131072-token sequence needs 16 GiB of KV (128 KiB/token); after {fp.weights_bytes / GiB:.1f} GiB of "
        f"weights, {fp.cuda_graph_bytes / GiB:.1f} GiB of CUDA graphs and the rest, the card holds "
        f"{fp.kv_token_capacity:,} tokens. Any --max-model-len up to {longest:,} starts (the pool less the one "
        f"null block vLLM keeps back): with chunked prefill on, the default, V1 profiles a fixed "
        f"{fp.max_num_batched_tokens}-token batch whatever max_model_len is. (In vllm#10517 the V0 engine "
        f"profiled a whole sequence below 32K, so 29,000 failed there while 35,000 started.)"
    )
    first = replace(sc.diagnoses[0], explanation=pool)
    return replace(sc, diagnoses=(first, *sc.diagnoses[1:]))


def util_neighbour(rng: random.Random | None, seed: int | None) -> Scenario:
    """vLLM at its default gpu_memory_utilization (0.92) on a card another process already uses: start-up fails."""
    other = round(_jitter(rng, 7.0, 0.25), 1) * GiB
    cfg = ServeConfig("llama-3-8b", "a100-40gb", "meta-llama/Meta-Llama-3-8B-Instruct", max_model_len=8192)
    total = GPUS["a100-40gb"].total_bytes
    return Scenario(
        id="util-neighbour",
        title="The neighbour on the GPU",
        story=(
            f"To save money, a team moves its embedding service ({other / GiB:.1f} GiB of GPU memory) onto the "
            f"A100 40GB that already runs vLLM with Llama-3-8B-Instruct at the default "
            f"gpu_memory_utilization={cfg.gpu_memory_utilization:g}, its KV cache sized from vLLM's start-up "
            f"estimate (--no-enable-extensible-kv-cache, as every release before v0.34.0 sized it). After the next "
            f"restart vLLM will not come up again."
        ),
        config=cfg,
        traffic=Traffic(
            "sharegpt", 400, round(_jitter(rng, 4.0), 2), required_context=8192, slo_p95_wait_s=10.0, seed=seed or 0
        ),
        diagnoses=(
            Diagnosis(
                "utilization-share",
                f"{cfg.gpu_memory_utilization:g} x {total / GiB:.2f} GiB = "
                f"{cfg.gpu_memory_utilization * total / GiB:.2f} GiB is more than the GPU has free beside the "
                "embedding service",
                True,
                "gpu_memory_utilization is vLLM's share of the whole card (the total CUDA reports, "
                f"{total / GiB:.2f} GiB on an A100 40GB), not of the free memory; with {other / GiB:.1f} GiB taken "
                f"only {(total - other) / GiB:.2f} GiB are free.",
            ),
            Diagnosis(
                "raise-utilization",
                "vLLM needs more memory: raise gpu_memory_utilization",
                False,
                "Raising it asks for even more of a card that is already shared.",
            ),
            Diagnosis(
                "model-too-big",
                "Llama-3-8B is too big for an A100 40GB",
                False,
                "It ran fine on this card before the embedding service moved in.",
            ),
            Diagnosis(
                "memory-leak",
                "The embedding service leaks memory",
                False,
                "Its usage is constant; the check fails at vLLM's start-up, before any traffic.",
            ),
        ),
        reference_fix={"gpu_memory_utilization": 0.75},
        hint="What does gpu_memory_utilization multiply: total memory or free memory?",
        other_process_bytes=int(other),
        max_gpus=1,
        allowed_models=SEVEN_B_CLASS,
        seed=seed,
    )


INCIDENTS: dict[str, Callable[[random.Random | None, int | None], Scenario]] = {
    "chat-oom": chat_oom,
    "mha-rag": mha_rag,
    "default-128k": default_128k,
    "util-neighbour": util_neighbour,
    "cuda-graphs": cuda_graphs,
    "mla-tp": mla_tp,
}


def scenario_ids() -> list[str]:
    """Ids of the incidents, in course order."""
    return list(INCIDENTS)


def get_scenario(scenario_id: str, seed: int | None = None) -> Scenario:
    """An incident; with a seed, a randomised variant (traffic, sizes) so a class does not share one answer."""
    if scenario_id not in INCIDENTS:
        raise ValueError(f"unknown scenario {scenario_id!r}; known: {list(INCIDENTS)}")
    return INCIDENTS[scenario_id](None if seed is None else random.Random(f"{scenario_id}:{seed}"), seed)


def all_scenarios(seed: int | None = None) -> list[Scenario]:
    """Every incident (variants of one seed)."""
    return [get_scenario(i, seed) for i in scenario_ids()]
