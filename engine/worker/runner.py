"""ModelRunner: one engine step on the model - the step's inputs, one forward pass, the sampled tokens.

The scheduler (engine/core/scheduler.py) decides which sequences run and how many tokens each computes.
`ModelRunner.run` turns that `SchedulerOutput` into the packed input ids and one `ForwardMeta`
(engine/model/forward_meta.py, whose attention plan kernels.ops validates here, once per step), applies the
step's copy-on-write block copies to the paged KV cache, runs the model once over the whole batch
(engine/model/llama.py) and samples a next token for every sequence whose step reached the end of its tokens
(engine/worker/sampler.py). It keeps no per-request state: each sequence carries its own sampling parameters and
RNG. The kernel backend is resolved once, by the engine's config, and named in every step's plan. Follows
nano-vllm's `model_runner.py`. The runner owns the paged KV cache (engine/worker/kv_cache.py), sized by
engine/config.py.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from engine.core.kv_groups import layer_tensors
from engine.core.scheduler import ScheduledSequence, SchedulerOutput
from engine.model.forward_meta import ForwardMeta
from engine.model.llama import CausalLM
from engine.worker.kv_cache import CacheConfig, PagedKVCache
from engine.worker.latent_cache import LatentKVCache
from engine.worker.sampler import sample


class ModelRunner:
    """Runs scheduled steps of one model over its own paged KV cache."""

    def __init__(self, model: CausalLM, cache: CacheConfig, device: torch.device, backend: str) -> None:
        """cache: the pool's geometry and element type; backend: an already resolved kernels backend ("torch" or
        "triton") for `device`."""
        cfg = model.config
        self.model = model
        self.device = device
        self.backend = backend
        self.block_size = cache.block_size
        self.dtype = model.lm_head.weight.dtype
        self.kv_groups = cache.kv_groups  # () unless the model's layers attend differently
        self.window = cfg.layer_sliding_windows[0]  # every layer's window when they attend alike
        if cfg.mla is not None:  # DeepSeek-V2/V3: one latent + rope-key row per token and layer
            self.kv_cache: PagedKVCache | LatentKVCache = LatentKVCache(
                cfg.num_hidden_layers,
                cache.num_blocks,
                cache.block_size,
                cfg.mla.kv_lora_rank,
                cfg.mla.qk_rope_head_dim,
                dtype=cache.dtype,
                device=device,
            )
            return
        self.kv_cache = PagedKVCache(
            cfg.num_hidden_layers,
            cache.num_blocks,
            cache.block_size,
            cfg.num_key_value_heads,
            cfg.head_dim,
            dtype=cache.dtype,
            device=device,
            layer_tensors=layer_tensors(self.kv_groups, cfg.num_hidden_layers) if self.kv_groups else None,
        )

    def prepare(self, scheduled: list[ScheduledSequence]) -> tuple[torch.Tensor, ForwardMeta]:
        """The step's packed input ids [T] and its ForwardMeta, validated once for every layer (the ids were
        checked when their request was added, or sampled from the vocabulary)."""
        query_lens = [s.num_new_tokens for s in scheduled]
        context_lens = [s.num_computed_tokens for s in scheduled]
        if self.kv_groups:
            meta = self.hybrid_meta(query_lens, context_lens, [s.seq.block_tables for s in scheduled])
        else:
            meta = self._meta(query_lens, context_lens, [s.seq.block_table for s in scheduled], self.window)
        return torch.tensor([token for s in scheduled for token in s.token_ids], device=self.device), meta

    def inputs(
        self,
        token_ids: list[int],
        query_lens: list[int],
        context_lens: list[int],
        block_tables: list[list[int]],
    ) -> tuple[torch.Tensor, ForwardMeta]:
        """Input ids [T] and ForwardMeta of a step given as plain lists (one entry per sequence; token_ids packed),
        for a caller that drives the model by hand (a lab, a test); ids outside the vocabulary are a ValueError."""
        if len(token_ids) != sum(query_lens):
            raise ValueError(f"{len(token_ids)} token ids for {sum(query_lens)} new tokens; give one id per token")
        vocab = self.model.config.vocab_size
        bad = [t for t in token_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        if self.kv_groups:
            raise ValueError(
                "this model's layers attend differently (several KV-cache groups, one block table each); drive it "
                "through LLM.step, which gives every group its table"
            )
        return torch.tensor(token_ids, device=self.device), self._meta(
            query_lens, context_lens, block_tables, self.window
        )

    def _meta(
        self, query_lens: list[int], context_lens: list[int], block_tables: list[list[int]], window: int | None
    ) -> ForwardMeta:
        return ForwardMeta.build(
            query_lens,
            context_lens,
            block_tables,
            self.kv_cache.layers[0],
            num_heads=self.model.config.num_attention_heads,
            q_dtype=self.dtype,
            sliding_window=window,
            backend=self.backend,
        )

    def hybrid_meta(
        self, query_lens: list[int], context_lens: list[int], group_tables: list[list[list[int]]]
    ) -> ForwardMeta:
        """A hybrid model's step: one attention plan per KV-cache group (its block tables, slot mapping and
        window), handed to each of the group's layers. group_tables[i][g]: sequence i's table in group g."""
        metas = [
            self._meta(query_lens, context_lens, [tables[g] for tables in group_tables], group.sliding_window)
            for g, group in enumerate(self.kv_groups)
        ]
        per_layer = [metas[0].attention] * self.model.config.num_hidden_layers
        for meta, group in zip(metas, self.kv_groups, strict=True):
            for layer in group.layers:
                per_layer[layer] = meta.attention
        return replace(metas[0], layer_plans=tuple(per_layer))

    def forward(self, input_ids: torch.Tensor, meta: ForwardMeta) -> torch.Tensor:
        """The model over this runner's cache: fp32 logits [S, vocab] of each sequence's last new token."""
        return self.model(input_ids, meta, self.kv_cache.layers)

    def run(self, out: SchedulerOutput) -> list[int | None]:
        """Run one scheduled step; returns each scheduled sequence's sampled token (None after a partial chunk)."""
        if out.copies:  # copy-on-write pairs: a step that writes into a block another sequence shares
            self.kv_cache.copy_blocks(out.copies)
        input_ids, meta = self.prepare(out.scheduled)
        return self.sample(out.scheduled, self.model(input_ids, meta, self.kv_cache.layers))

    def sample(self, scheduled: list[ScheduledSequence], logits: torch.Tensor) -> list[int | None]:
        """Tokens from logits [S, vocab] for the sequences whose step reached their last token, None elsewhere."""
        rows = [i for i, s in enumerate(scheduled) if s.samples]
        sampled: list[int | None] = [None] * len(scheduled)
        if rows:
            seqs = [scheduled[i].seq for i in rows]
            picked = logits if len(rows) == len(scheduled) else logits[rows]  # a decode step samples every row
            tokens = sample(picked, [s.sampling_params for s in seqs], [s.generator for s in seqs])
            for i, token in zip(rows, tokens, strict=True):
                sampled[i] = token
        return sampled
