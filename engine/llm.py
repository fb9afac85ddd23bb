"""The engine's front door: `LLM(model).generate(prompts, SamplingParams(...))`, vLLM's offline API.

One `LLM` owns its validated limits (engine/config.py), a model runner (engine/worker/runner.py: the model
and its paged KV cache), a block manager and a scheduler (engine/core/). A request walks through the code
like this:
1. `LLM.add_request` / `generate` encode the prompt and queue a `Sequence` (engine/core/sequence.py) that
   carries everything about the request: token ids, sampling parameters, its RNG, the prompt text.
2. `LLM.step` asks `Scheduler.schedule` for a batch: a `SchedulerOutput` listing `ScheduledSequence`s.
3. `ModelRunner.run` packs their new tokens into one `ForwardMeta` (engine/model/forward_meta.py), whose
   attention plan kernels.ops validates once for the step (every kind of step is one paged attention call),
   runs the model's forward once (engine/model/llama.py) and samples (engine/worker/sampler.py) for every
   sequence that reached its last token.
4. `Scheduler.update` appends the tokens, applies stop rules and frees finished requests' blocks.
Continuous batching as in Orca (Yu et al., OSDI 2022) over PagedAttention memory (Kwon et al., SOSP 2023);
the layout follows nano-vllm's `llm_engine.py`.

Every step can be observed: `step()` returns a `StepTrace` (what ran, what was preempted, block tables,
an allocator snapshot, KV usage, time) and `generate(..., on_step=fn)` calls `fn` with each one, which is
what the app's playground draws. All state lives on the instance, never in module globals, so learners'
sessions in different threads never share a batch. The KV cache is sized by engine/config.py through the
memory model when `num_gpu_blocks` is None.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq

import torch

from engine.config import EngineConfig
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence
from engine.memory.startup import DEFAULT_GPU_MEMORY_UTILIZATION
from engine.model.loader import load_model
from engine.model.tokenizer import ByteBPETokenizer
from engine.outputs import RequestOutput, StepTrace
from engine.sampling_params import SamplingParams
from engine.worker.kv_cache import PagedKVCache
from engine.worker.runner import ModelRunner
from engine.worker.sampler import make_generator
from kernels.validate import is_whole

Prompt = str | list[int]


class PromptTooLongError(ValueError):
    """A prompt longer than the engine's max_model_len; says whether the KV pool is what set that limit."""

    def __init__(self, index: int, num_tokens: int, max_model_len: int, pool_tokens: int | None) -> None:
        self.index, self.num_tokens, self.max_model_len, self.pool_tokens = (
            index,
            num_tokens,
            max_model_len,
            pool_tokens,
        )
        if pool_tokens is not None:  # the pool, not the model, set max_model_len
            fix = f"the KV pool holds only {pool_tokens} tokens; shorten it, or give the engine more or larger blocks"
        else:
            fix = "shorten it or raise max_model_len"
        super().__init__(f"prompt {index} has {num_tokens} tokens, more than max_model_len={max_model_len}; {fix}")


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
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        preloaded: tuple | None = None,
        kv_cache_dtype: str = "auto",
        kv_cache_memory_bytes: int | None = None,
    ) -> None:
        """preloaded: a (model, config, tokenizer) from load_model, shared read-only between engines (the app
        loads weights once per process); the model must already live on this engine's device.
        kv_cache_dtype: "auto" (the model's dtype) or "fp8" (float8 e4m3 K/V with per-layer scales).
        kv_cache_memory_bytes: the KV pool's byte budget (vLLM's name) instead of sizing it from the device.
        Every argument is checked once, by engine/config.py, before the model loads."""
        self.engine_config = cfg = EngineConfig(
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            device=device,
            backend=backend,
            enable_prefix_caching=enable_prefix_caching,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
        )
        self.device, self.backend, self.block_size = cfg.device, cfg.backend, cfg.block_size
        try:
            self.model, self.config, self.tokenizer = preloaded or load_model(model, self.device, cfg.dtype)
        except FileNotFoundError as exc:  # a user's bad path: a ValueError like every other bad argument
            raise ValueError(str(exc)) from exc
        self.dtype = self.model.lm_head.weight.dtype
        self.cache_config = cache = cfg.size_cache(self.config, self.dtype)
        self.kv_cache_dtype, self.kv_bytes_per_token, self.max_model_len = (
            cache.dtype,
            cache.kv_bytes_per_token,
            cache.max_model_len,
        )
        self.runner = ModelRunner(self.model, cache, self.device, self.backend)
        self.block_manager = BlockManager(
            cache.num_blocks,
            cache.block_size,
            cache.enable_prefix_caching,
            None if cache.kv_groups else cache.sliding_window,
            cache.kv_groups or None,
        )
        self.scheduler = Scheduler(cfg.scheduler_config(cache), self.block_manager)
        eos = set(self.config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = tuple(sorted(eos))
        self._ids = itertools.count()
        self._requests: dict[int, Sequence] = {}  # every request added and not yet released
        self._step = 0

    @property
    def kv_cache(self) -> PagedKVCache:
        """The paged K/V tensors (owned by the model runner)."""
        return self.runner.kv_cache

    @property
    def kv_cache_bytes(self) -> int:
        """Total K+V bytes of the paged pool the engine allocated."""
        return self.runner.kv_cache.nbytes

    @property
    def num_gpu_blocks(self) -> int:
        """Blocks in the paged KV cache."""
        return self.block_manager.num_blocks

    @property
    def num_steps(self) -> int:
        """Engine steps run so far (each one forward pass)."""
        return self._step

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
        elif isinstance(prompt, (list, tuple)) and all(map(is_whole, prompt)):
            ids = [int(t) for t in prompt]
            vocab = self.config.vocab_size
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"prompt {index} has token ids {bad[:5]} outside the vocabulary [0, {vocab})")
        else:
            raise ValueError(f"prompt {index} must be a str or a list of int token ids, got {type(prompt).__name__}")
        if not ids:
            raise ValueError(f"prompt {index} is empty; give at least one token")
        if len(ids) > self.max_model_len:
            raise PromptTooLongError(index, len(ids), self.max_model_len, self.cache_config.pool_tokens)
        return ids

    def add_request(self, prompt: Prompt, sampling_params: SamplingParams | None = None) -> int:
        """Queue one request; returns its id. Validates the prompt and parameters first."""
        params = SamplingParams() if sampling_params is None else sampling_params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        return self._add(self._encode(prompt, 0), params, prompt if isinstance(prompt, str) else None)

    def _add(self, ids: list[int], params: SamplingParams, prompt: str | None) -> int:
        seq = Sequence(
            next(self._ids),
            ids,
            self.block_size,
            params,
            arrival_time=time.perf_counter(),
            prompt=prompt,
            generator=make_generator(params, self.device),
        )
        self.scheduler.add(seq)
        self._requests[seq.seq_id] = seq
        return seq.seq_id

    def has_unfinished_requests(self) -> bool:
        """True while some request waits or runs."""
        return self.scheduler.has_unfinished

    def get_output(self, request_id: int) -> RequestOutput:
        """The current state of a request (finished or not) as a RequestOutput."""
        if request_id not in self._requests:
            raise ValueError(f"unknown request id {request_id}")
        return RequestOutput.of(self._requests[request_id], self.tokenizer)

    def release(self, request_id: int) -> None:
        """Forget a finished request's bookkeeping (generate() does this for its own requests)."""
        self._requests.pop(request_id, None)

    def abort_request(self, request_id: int | Iterable[int]) -> None:
        """Abort one request or an iterable of them (vLLM's `LLMEngine.abort_request(request_id: str |
        Iterable[str])`): a waiting or running one leaves the scheduler's queues and frees its KV blocks, and
        every one named is forgotten (get_output no longer knows it). Unknown or already released ids are
        skipped, as in vLLM, so aborting twice is harmless."""
        ids = self._request_ids(request_id)
        self.scheduler.finish_requests(i for i in ids if i in self._requests and not self._requests[i].is_finished)
        for i in ids:
            self.release(i)

    @staticmethod
    def _request_ids(request_id: object) -> list[int]:
        """One id or an iterable of ids as a list of ints; anything else is a ValueError."""
        ids = [request_id] if isinstance(request_id, int) or not isinstance(request_id, Iterable) else request_id
        ids = list(ids) if not isinstance(ids, (str, bytes)) else [ids]
        bad = [i for i in ids if not is_whole(i)]
        if bad:
            raise ValueError(
                f"request_id {bad[0]!r} is not a request id; pass the int add_request() returned (or a list of them)"
            )
        return ids

    # ---- one step ----------------------------------------------------------------------------------------

    def step(self, trace: bool = True) -> StepTrace | None:
        """Schedule, run and sample one batch; returns its StepTrace (None when there was nothing to do).

        If the model or the sampler raises, the step is not applied: no counter moves and no block is
        published to the prefix cache, so the requests can run the step again, or be aborted
        (`abort_request`) with their blocks freed; generate() aborts its own requests itself.
        """
        start = time.perf_counter()
        out = self.scheduler.schedule()
        if out.is_empty:
            if self.scheduler.has_unfinished:
                raise RuntimeError(f"scheduler made no progress with {self.scheduler!r}; this is a bug")
            return None
        sampled = self.runner.run(out)
        finished = self.scheduler.update(out, sampled, self.eos_token_ids, now=time.perf_counter())
        self._step += 1
        if not trace:
            return None
        return StepTrace.capture(self._step, start, out, sampled, finished, self.scheduler, self.kv_bytes_per_token)

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
        if all(map(is_whole, prompts)):
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
        seqs: dict[int, Sequence] = {}
        try:
            for tok, sp, p in zip(encoded, params, prompts, strict=True):
                request_id = self._add(tok, sp, p if isinstance(p, str) else None)
                seqs[request_id] = self._requests[request_id]
            pending = set(seqs)
            while pending:
                step = self.step(trace=on_step is not None)
                if step is not None and on_step is not None:
                    on_step(step)
                pending = {i for i in pending if not seqs[i].is_finished}
            return [RequestOutput.of(seq, self.tokenizer) for seq in seqs.values()]
        finally:
            # Also on an exception (a failing step, a raising on_step, KeyboardInterrupt, a Streamlit rerun's
            # BaseException): nothing this call queued stays waiting, running or holding blocks.
            self.abort_request(list(seqs))
