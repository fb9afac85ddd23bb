"""The engine's front door: `LLM(model).generate(prompts, SamplingParams(...))`, vLLM's offline API.

One `LLM` owns a model, a paged KV cache (engine/kv_cache.py), a block manager and a scheduler
(engine/scheduler.py). Each `step()` asks the scheduler for a batch, packs its new tokens into one
`ForwardMeta` (engine/forward_meta.py), runs the model once, samples (engine/sampling.py) and lets the
scheduler advance, stop and free requests. Continuous batching as in Orca (Yu et al., OSDI 2022) over
PagedAttention memory (Kwon et al., SOSP 2023); the layout follows nano-vllm's `llm_engine.py`.

Every step can be observed: `step()` returns a `StepTrace` (what ran, what was preempted, block tables,
an allocator snapshot, KV usage, time) and `generate(..., on_step=fn)` calls `fn` with each one, which is
what the app's playground draws. All state lives on the instance, never in module globals, so learners'
sessions in different threads never share a batch.

KV sizing when `num_gpu_blocks` is None: on CUDA, `gpu_memory_utilization` of the device's total memory,
minus what is already in use (weights, other processes) and an activation reserve for one full step; on
CPU, 256 MiB. Either is capped at what `max_num_seqs` sequences of `max_model_len` tokens can use.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq

import torch

from engine.core.block_manager import BlockManager
from engine.core.kv_cache import PagedKVCache, kv_bytes_per_slot
from engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.core.sequence import Sequence, check_block_size
from engine.forward_meta import ForwardMeta
from engine.model.loader import load_model
from engine.model.tokenizer import ByteBPETokenizer
from engine.outputs import RequestOutput, StepTrace
from engine.sampling import SamplingParams, make_generator, sample
from kernels.backend import resolve_backend

CPU_KV_BUDGET_BYTES = 256 * 2**20  # documented CPU default: small enough for a laptop, plenty for tiny models
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

Prompt = str | list[int]


def _parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(_DTYPES)} or a torch.dtype")
    return _DTYPES[dtype]


class LLM:
    """A small vLLM: continuous batching over a paged KV cache for one Llama-family model."""

    def __init__(
        self,
        model: str = "demo",
        block_size: int = 16,
        num_gpu_blocks: int | None = None,
        device: torch.device | str | None = None,
        backend: str = "auto",
        enable_prefix_caching: bool = False,
        max_model_len: int | None = None,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        dtype: torch.dtype | str | None = None,
        gpu_memory_utilization: float = 0.9,
        preloaded: tuple | None = None,
    ) -> None:
        check_block_size(block_size)
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self.backend = resolve_backend(backend, self.device)
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]")
        try:
            # preloaded: a (model, config, tokenizer) from load_model, shared read-only between engines (the
            # app loads weights once per process); the model must already live on this engine's device.
            self.model, self.config, self.tokenizer = preloaded or load_model(
                model, self.device, _parse_dtype(dtype), self.backend
            )
        except FileNotFoundError as exc:  # a user's bad path: a ValueError like every other bad argument
            raise ValueError(str(exc)) from exc
        cfg = self.config
        self.dtype = self.model.lm_head.weight.dtype
        self.block_size = block_size
        limit = cfg.max_model_len
        if max_model_len is not None and not 1 <= max_model_len <= limit:
            raise ValueError(
                f"max_model_len={max_model_len} must be in 1..{limit} (the model's max_position_embeddings"
                f"{' / sliding window' if cfg.sliding_window else ''})"
            )
        bytes_per_slot = kv_bytes_per_slot(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, self.dtype)
        wanted_len = max_model_len or limit
        if num_gpu_blocks is None:
            num_gpu_blocks = self._auto_num_blocks(
                bytes_per_slot, wanted_len, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization
            )
        elif isinstance(num_gpu_blocks, bool) or not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks={num_gpu_blocks!r} must be an integer >= 1, or None to size it")
        capacity = num_gpu_blocks * block_size
        if max_model_len is None:
            max_model_len = min(limit, capacity)  # the model's limit, unless the cache is smaller
        elif max_model_len > capacity:
            raise ValueError(
                f"max_model_len={max_model_len} is larger than the maximum number of tokens the KV cache can hold "
                f"({num_gpu_blocks} blocks x {block_size} = {capacity}); lower max_model_len or raise num_gpu_blocks"
            )
        self.max_model_len = max_model_len
        self.kv_cache = PagedKVCache(
            cfg.num_hidden_layers, num_gpu_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim,
            dtype=self.dtype, device=self.device,
        )  # fmt: skip
        self.block_manager = BlockManager(num_gpu_blocks, block_size, enable_prefix_caching)
        sched_cfg = SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_model_len)
        self.scheduler = Scheduler(sched_cfg, self.block_manager)
        eos = set(cfg.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = tuple(sorted(eos))
        self._ids = itertools.count()
        self._requests: dict[int, Sequence] = {}  # every request added and not yet collected
        self._generators: dict[int, torch.Generator | None] = {}
        self._prompts: dict[int, str | None] = {}
        self._num_preemptions: dict[int, int] = {}
        self._step = 0

    # ---- sizing ----------------------------------------------------------------------------------------

    def _auto_num_blocks(
        self, bytes_per_slot: int, max_len: int, max_num_seqs: int, max_num_batched_tokens: int, utilization: float
    ) -> int:
        """Blocks that fit the KV budget: free CUDA memory under `utilization`, or the CPU default."""
        block_bytes = bytes_per_slot * self.block_size
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            cfg = self.config
            # One step's activations: a few hidden/intermediate vectors per batched token, plus fp32 logits.
            per_token = 4 * cfg.hidden_size + 3 * cfg.intermediate_size + 3 * cfg.num_attention_heads * cfg.head_dim
            reserve = max_num_batched_tokens * per_token * 4 + max_num_seqs * cfg.vocab_size * 8 + 256 * 2**20
            budget = min(free, int(total * utilization) - (total - free)) - reserve
        else:
            budget = CPU_KV_BUDGET_BYTES
        # More than max_num_seqs full-length sequences can never be resident at once; a bigger pool would
        # only cost memory and make every allocator snapshot the playground draws longer.
        budget = min(budget, max_num_seqs * max_len * bytes_per_slot)
        num_blocks = budget // block_bytes
        if num_blocks < 1:
            raise ValueError(
                f"no memory left for the KV cache (budget {budget} bytes, one block is {block_bytes} bytes); "
                "raise gpu_memory_utilization, use a smaller model, or pass num_gpu_blocks"
            )
        return int(num_blocks)

    @property
    def num_steps(self) -> int:
        """Engine steps run so far (each one forward pass)."""
        return self._step

    @property
    def num_gpu_blocks(self) -> int:
        """Blocks in the paged KV cache."""
        return self.block_manager.num_blocks

    # ---- requests ----------------------------------------------------------------------------------------

    def _encode(self, prompt: object, index: int) -> list[int]:
        """A prompt (text or token ids) -> validated token ids."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    f"prompt {index} is text but this model folder has no tokenizer the engine can read; "
                    "pass token ids (list[int]) instead"
                )
            add_bos = (
                not isinstance(self.tokenizer, ByteBPETokenizer) and self.config.architecture != "Qwen2ForCausalLM"
            )
            ids = self.tokenizer.encode(prompt, add_bos=add_bos)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            vocab = self.config.vocab_size
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"prompt {index} has token ids {bad[:5]} outside the vocabulary [0, {vocab})")
        else:
            raise ValueError(f"prompt {index} must be a str or a list of int token ids, got {type(prompt).__name__}")
        if not ids:
            raise ValueError(f"prompt {index} is empty; give at least one token")
        if len(ids) > self.max_model_len:
            raise ValueError(
                f"prompt {index} has {len(ids)} tokens, more than max_model_len={self.max_model_len}; "
                "shorten it or raise max_model_len"
            )
        return ids

    def add_request(self, prompt: Prompt, sampling_params: SamplingParams | None = None) -> int:
        """Queue one request; returns its id. Validates the prompt and parameters first."""
        params = SamplingParams() if sampling_params is None else sampling_params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        return self._add(self._encode(prompt, 0), params, prompt if isinstance(prompt, str) else None)

    def _add(self, ids: list[int], params: SamplingParams, prompt: str | None) -> int:
        request_id = next(self._ids)
        seq = Sequence(request_id, ids, self.block_size, params, arrival_time=time.perf_counter())
        self.scheduler.add(seq)
        self._requests[request_id] = seq
        self._generators[request_id] = make_generator(params, self.device)
        self._prompts[request_id] = prompt
        self._num_preemptions[request_id] = 0
        return request_id

    def has_unfinished_requests(self) -> bool:
        """True while some request waits or runs."""
        return self.scheduler.has_unfinished

    def get_output(self, request_id: int) -> RequestOutput:
        """The current state of a request (finished or not) as a RequestOutput."""
        if request_id not in self._requests:
            raise ValueError(f"unknown request id {request_id}")
        seq = self._requests[request_id]
        tokens = seq.completion_token_ids
        return RequestOutput(
            request_id=request_id,
            prompt=self._prompts[request_id],
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=tokens,
            text=self.tokenizer.decode(tokens) if self.tokenizer is not None else "",
            finish_reason=seq.finish_reason,
            arrival_time=seq.arrival_time,
            first_token_time=seq.first_token_time,
            finish_time=seq.finish_time,
            num_cached_tokens=seq.num_cached_tokens,
            num_preemptions=self._num_preemptions[request_id],
        )

    def release(self, request_id: int) -> None:
        """Forget a finished request's bookkeeping (generate() does this for its own requests)."""
        for table in (self._requests, self._generators, self._prompts, self._num_preemptions):
            table.pop(request_id, None)

    # ---- one step ----------------------------------------------------------------------------------------

    def _run(self, out: SchedulerOutput) -> list[int | None]:
        """Run the model on a scheduled batch; sample where a sequence reached its last token."""
        self.kv_cache.copy_blocks(out.copies)
        input_ids: list[int] = []
        for seq, n, start in zip(out.seqs, out.num_new_tokens, out.num_computed_tokens, strict=True):
            input_ids.extend(seq.token_ids[start : start + n])
        meta = ForwardMeta.build(
            out.num_new_tokens, out.num_computed_tokens, [s.block_table for s in out.seqs], self.block_size, self.device
        )
        with torch.inference_mode():
            logits = self.model(torch.tensor(input_ids, device=self.device), meta, self.kv_cache.kv_caches)  # [S, V]
        rows = [
            i for i, (seq, n, c) in enumerate(zip(out.seqs, out.num_new_tokens, out.num_computed_tokens, strict=True))
            if c + n == seq.num_tokens
        ]  # fmt: skip
        sampled: list[int | None] = [None] * len(out.seqs)
        if rows:
            seqs = [out.seqs[i] for i in rows]
            tokens = sample(logits[rows], [s.sampling_params for s in seqs], [self._generators[s.seq_id] for s in seqs])
            for i, token in zip(rows, tokens, strict=True):
                sampled[i] = token
        return sampled

    def step(self, trace: bool = True) -> StepTrace | None:
        """Schedule, run and sample one batch; returns its StepTrace (None when there was nothing to do)."""
        start = time.perf_counter()
        out = self.scheduler.schedule()
        for seq_id in out.preempted:
            self._num_preemptions[seq_id] += 1
        if out.is_empty:
            if self.scheduler.has_unfinished:
                raise RuntimeError(f"scheduler made no progress with {self.scheduler!r}; this is a bug")
            return None
        sampled = self._run(out)
        finished = self.scheduler.update(out, sampled, self.eos_token_ids, now=time.perf_counter())
        self._step += 1
        if not trace:
            return None
        return StepTrace.capture(
            self._step, start, out, sampled, finished, self.scheduler, self.kv_cache.bytes_per_slot
        )

    # ---- batch API ---------------------------------------------------------------------------------------

    def generate(
        self,
        prompts: Seq[Prompt] | str,
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        on_step: Callable[[StepTrace], None] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts (texts or token-id lists) to completion; outputs in prompt order."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(f"prompts must be a list of str or of token-id lists, got {type(prompts).__name__}")
        if not prompts:
            raise ValueError("prompts is empty; pass at least one prompt")
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompts):
            raise ValueError("prompts looks like one list of token ids; wrap it in a list: generate([[1, 2, 3]])")
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts) or not all(isinstance(p, SamplingParams) for p in params):
                raise ValueError(
                    f"sampling_params must be one SamplingParams or a list of {len(prompts)} (one per prompt)"
                )
        encoded = [self._encode(p, i) for i, p in enumerate(prompts)]  # validate everything before queueing
        ids = [
            self._add(tok, sp, p if isinstance(p, str) else None)
            for tok, sp, p in zip(encoded, params, prompts, strict=True)
        ]
        pending = set(ids)
        while pending:
            step = self.step(trace=on_step is not None)
            if step is not None and on_step is not None:
                on_step(step)
            pending = {i for i in pending if not self._requests[i].is_finished}
        outputs = [self.get_output(i) for i in ids]
        for i in ids:
            self.release(i)
        return outputs
