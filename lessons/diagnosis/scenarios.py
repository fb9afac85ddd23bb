"""What a lesson-6 incident is made of: the deployment, its traffic, candidate diagnoses, and the results of running it.

An incident (`Scenario`) is a serving configuration (`ServeConfig`: model, GPU, policy, vLLM-style knobs), a
traffic pattern and a product requirement (`Traffic`: context length, queueing-delay target), and candidate
explanations (`Diagnosis`). A learner's fix is a set of parameter changes (`FIX_PARAMS`, `apply_fixes`);
`vllm_command` shows a configuration as the `vllm serve` line that deploys it, with flags current vLLM (V1)
accepts; a model swap serves the model's chat (*-Instruct*) checkpoint (`CHAT_REPOS`), since a chat service needs
a chat template. Running a configuration gives
an `Outcome` (lessons.diagnosis.replay), grading gives a `Grade` (lessons.diagnosis.grading); the incidents
themselves are in lessons.diagnosis.incidents. Plain data, no Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.memory.catalog import MODELS
from engine.memory.footprint import ServingFootprint
from engine.memory.startup import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION
from engine.memory.units import GiB
from kernels.validate import is_whole
from lessons.sim.metrics import SimResult, SimSummary

AUTO_MAX_MODEL_LEN = "auto"  # --max-model-len auto: vLLM fits the context to the KV cache at start-up
# The knobs a learner may turn, with the values the page offers (ints in between are accepted too).
# block_size: vLLM's CacheConfig.block_size takes any positive integer, but each attention backend limits the kernel's
# block sizes and FlashAttention, the default on these CUDA GPUs, needs a multiple of 16
# (`get_supported_kernel_block_sizes` -> `MultipleOf(16)`), so the page offers multiples of 16 around vLLM's default
# of 64 (engine.memory.startup.DEFAULT_BLOCK_SIZE).
# kv_cache_memory_bytes 0 means "not set".
FIX_PARAMS: dict[str, tuple[Any, ...]] = {
    "policy": ("static", "paged"),
    "block_size": (16, 32, 64, 128),
    "model": tuple(k for k in MODELS if k != "demo"),
    "quantization": ("none", "fp8"),
    "kv_cache_dtype": ("auto", "fp8"),
    # "auto": vLLM v0.34.0's --max-model-len auto (ModelConfig.max_model_len -1): the model's own context if its KV
    # fits, else the longest that does (`_auto_fit_max_model_len` in vllm/v1/core/kv_cache_planning.py)
    "max_model_len": (2048, 4096, 8192, 16384, 32768, 131072, AUTO_MAX_MODEL_LEN),
    "max_num_seqs": (4, 8, 16, 32, 64, 128, 256),
    "max_num_batched_tokens": (512, 1024, 2048, 4096, 8192),
    "enforce_eager": (False, True),
    "kv_cache_memory_bytes": tuple(g * GiB for g in (0, 2, 3, 4, 5, 6, 8)),
    "tensor_parallel_size": (1, 2, 4, 8),
    "gpu_memory_utilization": (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.92, 0.93, 0.95),
}
_WHOLE = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
# The chat checkpoint of each catalog model (Hugging Face repo ids): a chat service swaps to these.
CHAT_REPOS: dict[str, str] = {
    "llama-2-7b": "meta-llama/Llama-2-7b-chat-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-chat-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-chat-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.1",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
}
# Chat checkpoints whose config.json advertises less context than the base model's: the Qwen2.5 -Instruct
# configs set max_position_embeddings 32768 (the base 7B / 72B: 131072) and leave YaRN to the operator ("The
# current config.json is set for context length up to 32,768 tokens", Qwen2.5 model cards).
CHAT_MAX_CONTEXT: dict[str, int] = {"qwen2.5-0.5b": 32768, "qwen2.5-7b": 32768, "qwen2.5-72b": 32768}


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """A deployment: `static` is a naive server reserving max_model_len per request; `paged` is vLLM."""

    model: str
    gpu: str
    hf_repo: str
    policy: str = "paged"
    block_size: int = DEFAULT_BLOCK_SIZE
    max_model_len: int | str | None = None  # None: the model's max context, as vLLM defaults; "auto": fitted
    max_num_seqs: int = 256
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION  # vLLM's estimate-based default since v0.20.0
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    quantization: str = "none"  # "fp8": vLLM's --quantization fp8 (weights in fp8 from a bf16 checkpoint)
    max_num_batched_tokens: int | None = None  # None: V1's default for the GPU
    enforce_eager: bool = False  # True: no CUDA graphs
    kv_cache_memory_bytes: int = 0  # 0: not set (vLLM sizes KV from gpu_memory_utilization)

    @property
    def checkpoint_max_context(self) -> int:
        """max_position_embeddings of the checkpoint served: a chat checkpoint may advertise less than its base."""
        if self.hf_repo == CHAT_REPOS.get(self.model) and self.model in CHAT_MAX_CONTEXT:
            return CHAT_MAX_CONTEXT[self.model]
        return MODELS[self.model].max_context

    @property
    def context_len(self) -> int:
        """The effective max_model_len (vLLM's default: the checkpoint's max_position_embeddings).

        With "auto" this is the checkpoint's context, the most vLLM tries; `replay.run_outcome` resolves "auto" to
        the length vLLM fits before it runs anything.
        """
        if self.max_model_len == AUTO_MAX_MODEL_LEN or not self.max_model_len:
            return self.checkpoint_max_context
        return int(self.max_model_len)


@dataclass(frozen=True, slots=True)
class Traffic:
    """The load and what the product promises: context length and p95 time waiting for a slot."""

    dataset: str
    num_requests: int
    request_rate: float
    required_context: int
    slo_p95_wait_s: float
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A candidate explanation the learner may pick; `explanation` says why it is right or wrong."""

    id: str
    text: str
    correct: bool
    explanation: str


@dataclass(frozen=True)
class Scenario:
    """One incident: story, deployment, traffic, candidate diagnoses and a fix set known to resolve it."""

    id: str
    title: str
    story: str
    config: ServeConfig
    traffic: Traffic
    diagnoses: tuple[Diagnosis, ...]
    reference_fix: dict[str, Any]
    hint: str
    other_process_bytes: int = 0
    max_gpus: int = 1
    allowed_models: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Outcome:
    """A configuration run against the scenario: memory arithmetic, simulation, and what is still wrong."""

    config: ServeConfig
    footprint: ServingFootprint
    startup_error: str | None
    result: SimResult | None
    problems: tuple[str, ...]

    @property
    def summary(self) -> SimSummary | None:
        """The simulator's summary, or None when the server did not start."""
        return self.result.summary if self.result else None

    @property
    def resolved(self) -> bool:
        """True when nothing in `problems` remains."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class MemoryPart:
    """One part of a GPU's memory as the memory bar draws it (a negative one: the GPU is oversold by that much)."""

    part: str  # the course's words: "weights", "KV cache", "other processes", ...
    bytes: float

    @property
    def gib(self) -> float:
        """The part in GiB."""
        return self.bytes / GiB

    def row(self) -> dict[str, float | str]:
        """The memory table's row: part, GiB (3 decimals), bytes."""
        return {"part": self.part, "GiB": round(self.gib, 3), "bytes": self.bytes}


@dataclass(frozen=True)
class Symptoms:
    """What the on-call engineer sees: the GPU's memory by part, log lines and traffic numbers."""

    memory: tuple[MemoryPart, ...]
    logs: list[str]
    traffic: dict[str, float | int | str]

    def memory_rows(self) -> list[dict[str, float | str]]:
        """The memory bar's table: one row per part (`MemoryPart.row`)."""
        return [p.row() for p in self.memory]


@dataclass(frozen=True)
class Grade:
    """The verdict on a diagnosis plus fix set, explained with numbers."""

    resolved: bool
    diagnosis_correct: bool
    diagnosis_feedback: list[str]
    explanation: list[str]
    costs: list[str]
    command: str
    before: Outcome
    after: Outcome
    fixes: dict[str, Any] = field(default_factory=dict)


def apply_fixes(config: ServeConfig, fixes: dict[str, Any]) -> ServeConfig:
    """The configuration with the learner's parameter changes, each checked for type and range."""
    changes: dict[str, Any] = {}
    for key, value in fixes.items():
        if key not in FIX_PARAMS:
            raise ValueError(f"unknown fix {key!r}; fixes are parameter changes among {list(FIX_PARAMS)}")
        options = FIX_PARAMS[key]
        if key == "max_model_len" and value == AUTO_MAX_MODEL_LEN:
            ok = True
        elif key in _WHOLE:
            ok = is_whole(value) and value >= 1
        elif key == "kv_cache_memory_bytes":
            ok = is_whole(value) and value >= 0
        elif key == "gpu_memory_utilization":
            ok = isinstance(value, (int, float)) and 0 < value <= 1
        else:
            ok = value in options
        if not ok:
            raise ValueError(f"fix {key}={value!r} is not allowed; use one of {list(options)}")
        changes[key] = value
    if "model" in changes and changes["model"] != config.model:
        changes["hf_repo"] = CHAT_REPOS.get(changes["model"], MODELS[changes["model"]].source)
    return replace(config, **changes)


def vllm_command(scenario: Scenario, fixes: dict[str, Any] | None = None) -> str:
    """The `vllm serve` command line equivalent to the scenario's deployment with the fixes applied."""
    cfg = apply_fixes(scenario.config, fixes or {})
    parts = [
        f"vllm serve {cfg.hf_repo}",
        f"--max-model-len {cfg.max_model_len if cfg.max_model_len == AUTO_MAX_MODEL_LEN else cfg.context_len}",
        f"--gpu-memory-utilization {cfg.gpu_memory_utilization:g}",
        f"--max-num-seqs {cfg.max_num_seqs}",
        f"--block-size {cfg.block_size}",
    ]
    optional = [
        (cfg.max_num_batched_tokens is not None, f"--max-num-batched-tokens {cfg.max_num_batched_tokens}"),
        (cfg.quantization == "fp8", "--quantization fp8"),
        (cfg.kv_cache_dtype == "fp8", "--kv-cache-dtype fp8"),
        (cfg.enforce_eager, "--enforce-eager"),
        (cfg.kv_cache_memory_bytes > 0, f"--kv-cache-memory-bytes {cfg.kv_cache_memory_bytes}"),
        (cfg.tensor_parallel_size > 1, f"--tensor-parallel-size {cfg.tensor_parallel_size}"),
        # The incidents' numbers are the estimate-based sizing (total x utilization less the profile), which
        # v0.34.0 uses only with this flag or --kv-cache-memory-bytes: its default on CUDA and ROCm, the extensible
        # KV cache, measures the memory left after warm-up (lessons/sections/extensible_kv.md) and skips the
        # free-memory check a shared card fails
        (cfg.policy == "paged" and not cfg.kv_cache_memory_bytes, "--no-enable-extensible-kv-cache"),
    ]
    parts += [flag for wanted, flag in optional if wanted]
    cmd = " \\\n    ".join(parts)
    if cfg.policy == "static":
        cmd = "# vLLM has no static-reservation mode; this is the paged engine with the same limits\n" + cmd
    return cmd
