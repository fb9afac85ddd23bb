"""The engine's front door: `LLM(model).generate(prompts, SamplingParams(...))`, vLLM's offline API.

One `LLM` owns a model runner (engine/runner.py: the model and its paged KV cache), a block manager and a
scheduler (engine/core/scheduler.py). A request walks through the code like this:
1. `LLM.add_request` / `generate` encode the prompt and queue a `Sequence` (engine/core/sequence.py) that
   carries everything about the request: token ids, sampling parameters, its RNG, the prompt text.
2. `LLM.step` asks `Scheduler.schedule` for a batch: a `SchedulerOutput` listing `ScheduledSequence`s.
3. `ModelRunner.run` packs their new tokens into one `ForwardMeta` (engine/forward_meta.py, which also
   decides prefill vs decode), runs the model's forward once (engine/model/llama.py) and samples
   (engine/sampling.py) for every sequence that reached its last token.
4. `Scheduler.update` appends the tokens, applies stop rules and frees finished requests' blocks.
Continuous batching as in Orca (Yu et al., OSDI 2022) over PagedAttention memory (Kwon et al., SOSP 2023);
the layout follows nano-vllm's `llm_engine.py`.

Every step can be observed: `step()` returns a `StepTrace` (what ran, what was preempted, block tables,
an allocator snapshot, KV usage, time) and `generate(..., on_step=fn)` calls `fn` with each one, which is
what the app's playground draws. All state lives on the instance, never in module globals, so learners'
sessions in different threads never share a batch. The KV cache is sized by engine/runner.py through the
memory model when `num_gpu_blocks` is None.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq

import torch

from engine.core.block_manager import BlockManager
from engine.core.kv_cache import PagedKVCache
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence, check_block_size
from engine.memory import kv_bytes_per_token
from engine.model.loader import load_model
from engine.model.tokenizer import ByteBPETokenizer
from engine.outputs import RequestOutput, StepTrace
from engine.runner import ModelRunner, auto_num_blocks, model_spec
from engine.sampling import SamplingParams, make_generator
from kernels.backend import resolve_backend

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

Prompt = str | list[int]


def _parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(_DTYPES)} or a torch.dtype")
    return _DTYPES[dtype]


def _check_limits(max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int | None,
                  num_gpu_blocks: int | None, util: float) -> None:  # fmt: skip
    """The engine's limits, checked before the model loads or the cache is sized (a 0 is never blamed on memory)."""
    for name, value, hint in (
        ("max_num_seqs", max_num_seqs, "requests running at once, e.g. 64"),
        ("max_num_batched_tokens", max_num_batched_tokens, "new tokens per step, e.g. 2048"),
        ("max_model_len", max_model_len, "or None for the model's limit"),
        ("num_gpu_blocks", num_gpu_blocks, "or None to size it"),
    ):
        optional = hint.startswith("or None")
        if not (optional and value is None) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r} must be an integer >= 1 ({hint})")
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0.0 < util <= 1.0:
        raise ValueError(f"gpu_memory_utilization={util!r} must be a fraction in (0, 1], e.g. 0.9")


def _resolve_device(device: torch.device | str | None) -> torch.device:
    """The engine's device: CUDA when present for None; a CUDA device that is not there is a ValueError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device; use 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} but torch sees no CUDA device (torch.cuda.is_available() is False: no GPU, or "
                "a CPU-only torch build); use device='cpu', or device=None to pick the CPU"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device={device!r} but only {count} CUDA device(s) are visible: cuda:0..cuda:{count - 1}")
    return dev


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
        """preloaded: a (model, config, tokenizer) from load_model, shared read-only between engines (the app
        loads weights once per process); the model must already live on this engine's device."""
        check_block_size(block_size)
        _check_limits(max_num_seqs, max_num_batched_tokens, max_model_len, num_gpu_blocks, gpu_memory_utilization)
        self.device = _resolve_device(device)
        self.backend = resolve_backend(backend, self.device)  # once: every step's ForwardMeta carries it
        try:
            self.model, self.config, self.tokenizer = preloaded or load_model(model, self.device, _parse_dtype(dtype))
        except FileNotFoundError as exc:  # a user's bad path: a ValueError like every other bad argument
            raise ValueError(str(exc)) from exc
        self.dtype = self.model.lm_head.weight.dtype
        self.block_size = block_size
        spec = model_spec(self.config)  # the memory model's view of this model: KV bytes, activations
        self.kv_bytes_per_token = kv_bytes_per_token(spec, self.dtype.itemsize)
        limit = self.config.max_model_len
        if max_model_len is not None and not 1 <= max_model_len <= limit:
            raise ValueError(
                f"max_model_len={max_model_len} must be in 1..{limit} (the model's max_position_embeddings"
                f"{' / sliding window' if self.config.sliding_window else ''})"
            )
        if num_gpu_blocks is None:
            num_gpu_blocks = auto_num_blocks(
                spec, self.dtype.itemsize, block_size, self.device, max_model_len or limit,
                max_num_seqs, max_num_batched_tokens, gpu_memory_utilization,
            )  # fmt: skip
        self.max_model_len = self._fit_max_model_len(max_model_len, num_gpu_blocks)
        self.runner = ModelRunner(self.model, num_gpu_blocks, block_size, self.device, self.backend)
        self.block_manager = BlockManager(num_gpu_blocks, block_size, enable_prefix_caching)
        sched_cfg = SchedulerConfig(max_num_seqs, max_num_batched_tokens, self.max_model_len)
        self.scheduler = Scheduler(sched_cfg, self.block_manager)
        eos = set(self.config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = tuple(sorted(eos))
        self._ids = itertools.count()
        self._requests: dict[int, Sequence] = {}  # every request added and not yet released
        self._step = 0

    def _fit_max_model_len(self, max_model_len: int | None, num_gpu_blocks: int) -> int:
        """The model's limit unless the cache is smaller; a requested length the cache cannot hold is an error."""
        capacity = num_gpu_blocks * self.block_size
        if max_model_len is None:
            return min(self.config.max_model_len, capacity)
        if max_model_len > capacity:
            raise ValueError(
                f"max_model_len={max_model_len} is larger than the maximum number of tokens the KV cache can hold "
                f"({num_gpu_blocks} blocks x {self.block_size} = {capacity}); lower max_model_len or raise "
                "num_gpu_blocks"
            )
        return max_model_len

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
        seq = Sequence(
            next(self._ids), ids, self.block_size, params, arrival_time=time.perf_counter(), prompt=prompt,
            generator=make_generator(params, self.device),
        )  # fmt: skip
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

    # ---- one step ----------------------------------------------------------------------------------------

    def step(self, trace: bool = True) -> StepTrace | None:
        """Schedule, run and sample one batch; returns its StepTrace (None when there was nothing to do)."""
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
