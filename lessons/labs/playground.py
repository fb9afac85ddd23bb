"""Page 9's logic: validate the learner's prompts and model folder, run the real engine, and turn its step
traces into rows and pictures (no Streamlit).

The engine is `engine.LLM`: continuous batching (Orca, Yu et al., OSDI 2022) over a paged KV cache
(PagedAttention, Kwon et al., SOSP 2023). Every `step()` yields a `StepTrace` (plain values: who ran, who
joined, finished or was preempted, block tables, the allocator's per-block snapshot); this module keeps them
so the page can replay the run one scheduler step at a time. Weights are loaded once (`load`) and shared
read-only between learners' engines (`new_engine(..., preloaded=...)`); each learner owns their LLM.

What a learner may load is the server's choice (`model_policy`, read from the environment):
  KVLAB_MODEL_DIRS       folders a learner may load models from, separated by os.pathsep (':' on Linux);
                         relative entries are relative to the project. Unset: the demo model and the project's
                         own models/ folder. Empty: the demo model only (the folder option is off).
  KVLAB_MAX_MODEL_BYTES  the largest model, in bytes, both its files on disk and its weights in memory at the
                         dtype they load as (float32 on CPU: a bf16 checkpoint takes twice its file size).
                         Default 2 GiB.
A typed folder is resolved (symlinks, `..`; a relative path is taken under the first allowed folder, a leading
~ is refused) and every file the loader opens must stay under an allowed folder (engine/model/access.py). Any
path that is missing, unreadable, not a folder or outside them gets the same answer (`ModelPolicy.refusal`),
so the box cannot be used to learn what exists on the server.

The page gets dataclasses back: the server's `ModelPolicy`, the engine knobs (`EngineSettings`), one generate
click (`PlaygroundRun`) and one recorded step drawn (`StepView`), with the rows of their tables.

Memory is the server's, not a learner's: every learner's engine is leased from one `EnginePool` per
process, which holds at most KVLAB_PLAYGROUND_KV_BYTES of KV cache (default 512 MiB: two learners at the
largest pool the sliders allow with the demo model, hundreds at the default settings) and frees an engine
nobody has used for KVLAB_PLAYGROUND_IDLE_S seconds (default 180), or whose session ended. A learner who
would take the pool past its budget waits a few seconds for room, then gets `PlaygroundBusyError` (a
ValueError) and keeps their last run.

A run interrupted part-way (Generate pressed again: Streamlit raises its RerunException inside the running
`generate`; an exception in the progress callback; a closed tab) leaves nothing in the learner's engine:
`generate` aborts whatever is still queued or running, before the run and in a `finally`.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import LLM, RequestOutput, SamplingParams
from engine.config import EngineConfig
from engine.llm import PromptTooLongError
from engine.model import access
from engine.model.loader import DEMO_DIR, ModelTooLargeError, format_bytes, load_model
from engine.outputs import StepTrace
from kernels.validate import is_whole
from kvlab import settings
from lessons.labs.pool import PoolBlock, pool_blocks
from lessons.measure import default_device

MAX_PROMPTS = 8
MAX_PROMPT_CHARS = 400
# The text boxes' own limits (Streamlit cuts longer input on the server): room for the error messages above
# (nine prompts, a 401-character prompt) but not for megabytes held in a learner's session.
MAX_PROMPTS_TEXT_CHARS = 2 * MAX_PROMPTS * (MAX_PROMPT_CHARS + 1)
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX
MAX_NEW_TOKENS = 64  # keeps one generate click to a few seconds on a 2-core CPU with the demo model
MAX_BLOCKS = 256
DEFAULT_PROMPTS = "def fibonacci(n):\nclass Stack:\nimport collections\nfor line in open(path):"
MODEL_DIRS_ENV, MAX_BYTES_ENV = "KVLAB_MODEL_DIRS", "KVLAB_MAX_MODEL_BYTES"
POOL_BYTES_ENV, IDLE_ENV = "KVLAB_PLAYGROUND_KV_BYTES", "KVLAB_PLAYGROUND_IDLE_S"
DEFAULT_POOL_BYTES = 512 * 2**20  # the largest demo pool (256 blocks x 256 tokens) takes 256 MiB
IDLE_S = 180.0  # an engine unused this long is freed (Streamlit keeps a closed tab's session 120 s)
WAIT_S = 5.0  # how long a learner waits for room in the pool before hearing that the playground is busy
MAX_ENGINES = 32  # engines at once, whatever their size (each also holds a scheduler and a runner)
DEFAULT_MAX_MODEL_BYTES = 2 * 2**30  # 2 GiB: a ~500M-parameter model in float32; the demo takes ~10 MiB
PROJECT_DIR = DEMO_DIR.parents[1]
FOLDERS_DISABLED = (
    f"this server does not allow model folders, only the demo model. The operator enables them by setting "
    f"{MODEL_DIRS_ENV} to the folders learners may load from (separated by {os.pathsep!r}), or by unsetting it "
    "(then the project's models/ folder is allowed)"
)
FOLDERS_DISABLED_NOTICE = FOLDERS_DISABLED[:1].upper() + FOLDERS_DISABLED[1:] + "."  # the page's note, a sentence


def parse_prompts(text: str) -> list[str]:
    """Prompts from a text area, one per non-empty line; ValueError says what to type instead."""
    prompts = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not prompts:
        raise ValueError("there are no prompts; type at least one prompt, one per line")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"{len(prompts)} prompts is too many for a live run; give at most {MAX_PROMPTS}, one per line")
    long = [i for i, p in enumerate(prompts) if len(p) > MAX_PROMPT_CHARS]
    if long:
        raise ValueError(
            f"prompt {long[0] + 1} has {len(prompts[long[0]])} characters; keep each prompt under {MAX_PROMPT_CHARS}"
        )
    return prompts


@dataclass(frozen=True)
class ModelPolicy:
    """What this server lets a learner load: the allowed folders (resolved, with the names the operator
    wrote for them) and the largest model in bytes."""

    roots: tuple[Path, ...]
    labels: tuple[str, ...]
    max_bytes: int = DEFAULT_MAX_MODEL_BYTES

    @property
    def folders_allowed(self) -> bool:
        """False when the operator turned the folder option off (KVLAB_MODEL_DIRS set but empty)."""
        return bool(self.roots)

    @property
    def sources(self) -> tuple[str, ...]:
        """The model sources a learner may pick: "demo", and "folder" when folders are allowed."""
        return ("demo", "folder") if self.folders_allowed else ("demo",)

    @property
    def limit_text(self) -> str:
        """The largest model this server loads, in words ("2.00 GiB")."""
        return format_bytes(self.max_bytes)

    @property
    def allowed_text(self) -> str:
        """The allowed folders as the operator named them, e.g. 'models/' or '/srv/models, /data/hf'."""
        return ", ".join(self.labels)

    def refusal(self) -> str:
        """The one answer for a typed path that is missing, unreadable, not a model folder or not allowed."""
        return (
            f"No model folder the server allows at that path. Allowed: the demo model and folders under "
            f"{self.allowed_text}; type the path of a model folder there (a relative path is taken under "
            f"{self.labels[0]})"
        )

    def display(self, real: Path) -> str:
        """A checked path inside the roots, shown under its root's operator-given name."""
        for root, label in zip(self.roots, self.labels, strict=True):
            if real.is_relative_to(root):
                rel = real.relative_to(root).as_posix()
                return label if rel == "." else f"{label.rstrip('/')}/{rel}"
        return "that folder"


def model_policy(env: Mapping[str, str] | None = None) -> ModelPolicy:
    """The server's ModelPolicy from KVLAB_MODEL_DIRS and KVLAB_MAX_MODEL_BYTES (see the module docstring)."""
    env = os.environ if env is None else env
    max_bytes = _whole(
        env, MAX_BYTES_ENV, DEFAULT_MAX_MODEL_BYTES, f"bytes >= 1, e.g. {DEFAULT_MAX_MODEL_BYTES} (2 GiB)"
    )
    if MODEL_DIRS_ENV not in env:
        return ModelPolicy(((PROJECT_DIR / "models").resolve(),), ("models/",), max_bytes)
    roots: dict[Path, str] = {}  # resolved root -> the name the operator wrote for it
    for entry in env[MODEL_DIRS_ENV].split(os.pathsep):
        if entry.strip():
            roots.setdefault(_root(entry.strip()), entry.strip())
    return ModelPolicy(tuple(roots), tuple(roots.values()), max_bytes)


def _root(entry: str) -> Path:
    """One KVLAB_MODEL_DIRS entry (the operator's: ~ is theirs to use), relative ones under the project."""
    path = Path(entry).expanduser()
    return (path if path.is_absolute() else PROJECT_DIR / path).resolve()


def resolve_model(source: str, folder: str = "", policy: ModelPolicy | None = None) -> str:
    """'demo' when its weights are installed, or the checked real path of a model folder the policy allows."""
    if source == "demo":
        if not any(DEMO_DIR.glob("*.safetensors")):
            raise ValueError(
                "the demo model's weights are not installed yet (models/demo has no model.safetensors; "
                "`python -m scripts.train_demo --out models/demo` creates them). Try again later, or choose a "
                "local Hugging Face folder"
            )
        return "demo"
    if source != "folder":
        raise ValueError(f"unknown model source {source!r}; use 'demo' or 'folder'")
    policy = model_policy() if policy is None else policy
    if not policy.folders_allowed:
        raise ValueError(FOLDERS_DISABLED)
    text = (folder or "").strip()
    if not text:
        raise ValueError(f"the folder path is empty; type the path of a model folder under {policy.allowed_text}")
    if text.startswith("~"):  # Path.expanduser would look up any user's home (~root): not the learner's to ask
        raise ValueError(
            f"a path starting with ~ is not accepted here; type the full path of a model folder under "
            f"{policy.allowed_text}, or a path relative to {policy.labels[0]}"
        )
    typed = Path(text)
    try:
        real = access.confine(typed if typed.is_absolute() else policy.roots[0] / typed, policy.roots)
    except (OSError, ValueError):  # missing, outside the roots, unreadable, a NUL byte: one answer
        raise ValueError(policy.refusal()) from None
    if not real.is_dir():  # a file, a FIFO, a device: the same answer
        raise ValueError(policy.refusal())
    shown = policy.display(real)  # inside the roots: naming what is missing there reveals nothing outside
    try:
        has_config = access.existing(real / "config.json", policy.roots, "config.json") is not None
    except ValueError:
        has_config = False
    if not has_config:
        raise ValueError(f"{shown} has no config.json; point at the folder that holds config.json and the weights")
    if not any(real.glob("*.safetensors")) and not (real / "model.safetensors.index.json").is_file():
        raise ValueError(f"{shown} has no *.safetensors weights; convert the checkpoint with safetensors first")
    return str(real)


def load(model: str, device: str | None = None, policy: ModelPolicy | None = None) -> tuple[Any, Any, Any]:
    """(model, config, tokenizer) of 'demo' or a folder the policy allows; every problem becomes a ValueError.

    A failed load frees what it took (the loader drops the half-filled model; a collection runs here)."""
    policy = model_policy() if policy is None else policy
    try:
        return load_model(model, device or default_device(), allowed_roots=policy.roots, max_bytes=policy.max_bytes)
    except ModelTooLargeError as exc:
        error = ValueError(
            f"that model is too large for this server: {exc.what} take {format_bytes(exc.size)}, more than "
            f"its limit of {format_bytes(exc.limit)} ({MAX_BYTES_ENV}={policy.max_bytes}); choose a smaller "
            f"model, or the operator raises {MAX_BYTES_ENV}"
        )
    except ValueError as exc:
        error = exc
    except FileNotFoundError as exc:  # a file the folder check saw vanished since
        error = ValueError(f"{exc}; check that the folder holds a complete Hugging Face checkpoint")
    except Exception as exc:  # a truncated or corrupt safetensors file, an unreadable shard
        error = ValueError(
            f"could not load {model}: {exc}; check that the folder holds a complete Hugging Face checkpoint "
            "(config.json + *.safetensors)"
        )
    gc.collect()  # the half-built model, if any, is unreachable now: give its memory back before answering
    raise error


@dataclass(frozen=True)
class EngineSettings:
    """The engine knobs the page exposes."""

    block_size: int = 8
    num_blocks: int = 12
    enable_prefix_caching: bool = False

    @property
    def pool_tokens(self) -> int:
        """Tokens the KV pool holds (blocks x block size): also the longest sequence it accepts."""
        return self.block_size * self.num_blocks


def new_engine(loaded: tuple[Any, Any, Any], model: str, settings: EngineSettings) -> LLM:
    """A learner's own engine around shared read-only weights: its own KV cache, allocator and scheduler."""
    net = loaded[0]
    _check_blocks(settings)
    device = next(net.parameters()).device
    return LLM(
        model,
        block_size=settings.block_size,
        num_gpu_blocks=settings.num_blocks,
        device=device,
        enable_prefix_caching=settings.enable_prefix_caching,
        preloaded=loaded,
    )


def _check_blocks(settings: EngineSettings) -> None:
    if not is_whole(settings.num_blocks) or not 1 <= settings.num_blocks <= MAX_BLOCKS:
        raise ValueError(f"num blocks {settings.num_blocks} must be a whole number in 1 … {MAX_BLOCKS}")


def kv_pool_bytes(loaded: tuple[Any, Any, Any], settings: EngineSettings) -> int:
    """Bytes of K/V the engine `new_engine(loaded, ..., settings)` would allocate, computed by the engine's own
    sizing (engine/config.py) before anything is allocated."""
    _check_blocks(settings)
    net, config = loaded[0], loaded[1]
    cfg = EngineConfig(
        block_size=settings.block_size, num_gpu_blocks=settings.num_blocks, device=next(net.parameters()).device
    )
    cache = cfg.size_cache(config, net.lm_head.weight.dtype)
    return cache.kv_bytes_per_token * settings.block_size * settings.num_blocks


class PlaygroundBusyError(ValueError):
    """The server's playground has no room for this engine right now; the message says what to do."""


class PoolTicket:
    """A learner's claim on the pool, kept in their session: when the session is dropped, so is its engine."""

    __slots__ = ("__weakref__", "id")

    def __init__(self, ticket_id: int) -> None:
        self.id = ticket_id


@dataclass(frozen=True)
class PoolStats:
    """The playground pool at one moment: engines held and running, learners waiting for room, KV bytes."""

    engines: int
    running: int
    waiting: int
    used_bytes: int
    budget_bytes: int


@dataclass
class _Held:
    key: Any
    llm: Any
    nbytes: int
    last_used: float
    in_use: bool = False


def _whole(env: Mapping[str, str], name: str, default: int, what: str) -> int:
    """A whole number >= 1 from the environment, `default` when unset or empty; parsed as the server checks it
    at start (kvlab.settings.whole_number: ASCII digits only)."""
    value = settings.whole_number(env, name, what)
    return default if value is None else value


@dataclass
class EnginePool:
    """Every learner's engine in this process, within `budget_bytes` of KV cache and `max_engines` engines.

    A learner's engine is kept between runs (its prefix cache persists) until its settings change, its
    session ends (`ticket` ties it to the session), or it sits unused for `idle_s` seconds (`sweep`, also
    run by `start_sweeper`'s thread: a closed tab's session may linger in Streamlit long after). An engine
    that is running is never taken away. `clock` is injectable for tests."""

    budget_bytes: int = DEFAULT_POOL_BYTES
    idle_s: float = IDLE_S
    wait_s: float = WAIT_S
    max_engines: int = MAX_ENGINES
    clock: Callable[[], float] = time.monotonic
    _held: dict[int, _Held] = field(default_factory=dict, init=False, repr=False)
    _reserved: int = field(default=0, init=False, repr=False)  # bytes of engines being built right now
    _waiting: int = field(default=0, init=False, repr=False)  # learners waiting for room right now
    _ids: Iterator[int] = field(default_factory=itertools.count, init=False, repr=False)
    _room: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _sweeper: threading.Thread | None = field(default=None, init=False, repr=False)
    _ended: collections.deque[int] = field(default_factory=collections.deque, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EnginePool:
        """A pool sized by KVLAB_PLAYGROUND_KV_BYTES (whole bytes >= 1; unset or empty: 512 MiB), freeing
        engines unused for KVLAB_PLAYGROUND_IDLE_S seconds (a whole number >= 1; unset or empty: 180)."""
        env = os.environ if env is None else env
        budget = _whole(env, POOL_BYTES_ENV, DEFAULT_POOL_BYTES, f"bytes >= 1, e.g. {DEFAULT_POOL_BYTES} (512 MiB)")
        idle = _whole(env, IDLE_ENV, int(IDLE_S), f"seconds >= 1, e.g. {IDLE_S:.0f}")
        return cls(budget, idle_s=float(idle))

    def ticket(self) -> PoolTicket:
        """A new learner's ticket; once nothing refers to it (their session is gone), their engine is freed."""
        ticket = PoolTicket(next(self._ids))
        # Only queued here: the finalizer may run inside a garbage collection in any thread, even one that
        # holds the pool's lock mid-iteration; the engine goes at the pool's next use (or sweep).
        weakref.finalize(ticket, self._ended.append, ticket.id)
        return ticket

    @property
    def used_bytes(self) -> int:
        """KV bytes held by every engine in the pool, and by those being built."""
        with self._room:
            self._reap()
            return self._reserved + sum(h.nbytes for h in self._held.values())

    @property
    def engines(self) -> int:
        """Engines the pool holds now."""
        with self._room:
            self._reap()
            return len(self._held)

    def stats(self) -> PoolStats:
        """What an operator watches (ui/metrics.py): engines held, running, learners waiting, KV bytes."""
        with self._room:
            self._reap()
            held = self._held.values()
            used = self._reserved + sum(h.nbytes for h in held)
            running = sum(1 for h in held if h.in_use)
            return PoolStats(len(self._held), running, self._waiting, used, self.budget_bytes)

    def engine(self, ticket: PoolTicket, key: Any = None) -> Any:
        """This learner's engine in the pool now (the one for `key`, when given), else None."""
        with self._room:
            self._reap()
            held = self._held.get(ticket.id)
            return held.llm if held is not None and (key is None or held.key == key) else None

    @contextlib.contextmanager
    def lease(self, ticket: PoolTicket, key: Any, nbytes: int, build: Callable[[], Any]) -> Iterator[Any]:
        """The learner's engine for `key` (model and settings) while the block runs: theirs from before when
        the key is the same, else built by `build()` (which allocates `nbytes` of KV cache) once there is room.

        ValueError when `nbytes` is more than the whole budget; PlaygroundBusyError when other learners'
        engines leave no room within `wait_s` seconds."""
        llm = self._acquire(ticket.id, key, nbytes, build)
        try:
            yield llm
        finally:
            with self._room:
                held = self._held.get(ticket.id)
                if held is not None and held.llm is llm:
                    held.in_use, held.last_used = False, self.clock()

    def _acquire(self, tid: int, key: Any, nbytes: int, build: Callable[[], Any]) -> Any:
        if nbytes > self.budget_bytes:
            raise ValueError(
                f"a KV pool of {format_bytes(nbytes)} is more than this server's playground holds for all learners "
                f"together ({format_bytes(self.budget_bytes)}, {POOL_BYTES_ENV}); choose fewer KV blocks or a "
                "smaller block size"
            )
        with self._room:
            held = self._held.get(tid)
            if held is not None and held.in_use:  # a run of this session that has not stopped yet
                raise PlaygroundBusyError("your previous run is still stopping; press Generate again in a moment")
            if held is not None and held.key == key:
                held.in_use, held.last_used = True, self.clock()
                return held.llm
            self._drop(tid)  # the learner's old engine (other settings) goes before the new one is counted
            deadline = time.monotonic() + self.wait_s
            self._waiting += 1
            try:
                while not self._fits(nbytes):
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._room.wait(left):
                        if not self._fits(nbytes):
                            raise PlaygroundBusyError(self._busy(nbytes)) from None
            finally:
                self._waiting -= 1
            self._reserved += nbytes
        try:
            llm = build()
        except BaseException:
            with self._room:
                self._reserved -= nbytes
                self._room.notify_all()
            raise
        with self._room:
            self._reserved -= nbytes
            self._held[tid] = _Held(key, llm, nbytes, self.clock(), in_use=True)
        return llm

    def _fits(self, nbytes: int) -> bool:
        """Room for `nbytes` more, after freeing idle engines (the caller holds the lock)."""
        self._sweep_locked()
        used = self._reserved + sum(h.nbytes for h in self._held.values())
        return used + nbytes <= self.budget_bytes and len(self._held) < self.max_engines

    def _busy(self, nbytes: int) -> str:
        used = self._reserved + sum(h.nbytes for h in self._held.values())
        return (
            f"the playground is busy: {len(self._held)} learners' engine{'s' * (len(self._held) != 1)} "
            f"hold{'s' * (len(self._held) == 1)} {format_bytes(used)} of this "
            f"server's {format_bytes(self.budget_bytes)} of KV cache, and yours needs {format_bytes(nbytes)}. Your "
            f"last run is kept; press Generate again in a minute (an engine unused for {self.idle_s / 60:.0f} "
            "minutes is freed), or choose fewer KV blocks or a smaller block size"
        )

    def release(self, ticket_id: int) -> bool:
        """Free this learner's engine now, unless it is running (then `sweep` frees it later); True if freed."""
        with self._room:
            held = self._held.get(ticket_id)
            if held is None or held.in_use:
                return False
            self._drop(ticket_id)
            return True

    def sweep(self) -> int:
        """Free every engine unused for `idle_s` seconds and not running; returns how many were freed."""
        with self._room:
            return self._sweep_locked()

    def _reap(self) -> None:
        """Free the engines of sessions that ended (the caller holds the lock); a running one waits."""
        busy = []
        while self._ended:
            tid = self._ended.popleft()
            held = self._held.get(tid)
            if held is not None and held.in_use:
                busy.append(tid)
            else:
                self._drop(tid)
        self._ended.extend(busy)

    def _sweep_locked(self) -> int:
        self._reap()
        now = self.clock()
        stale = [t for t, h in self._held.items() if not h.in_use and now - h.last_used >= self.idle_s]
        for tid in stale:
            self._drop(tid)
        return len(stale)

    def _drop(self, tid: int) -> None:
        """Forget an engine (the caller holds the lock): its KV tensors go with the last reference."""
        if self._held.pop(tid, None) is not None:  # an engine has no reference cycles: freed right here
            self._room.notify_all()

    def start_sweeper(self, interval_s: float | None = None) -> None:
        """Sweep every `interval_s` seconds (a quarter of `idle_s` by default) in a daemon thread, once."""
        with self._room:
            if self._sweeper is not None:
                return
            every = self.idle_s / 4 if interval_s is None else interval_s
            ref, stop = weakref.ref(self), self._stop

            def loop() -> None:  # holds the pool only while sweeping: a dropped pool ends the thread
                while not stop.wait(every) and (pool := ref()) is not None:
                    pool.sweep()
                    del pool

            self._sweeper = threading.Thread(target=loop, name="kvlab-playground-sweeper", daemon=True)
            self._sweeper.start()

    def close(self) -> None:
        """Stop the sweeper and free every engine that is not running."""
        self._stop.set()
        with self._room:
            for tid in [t for t, h in self._held.items() if not h.in_use]:
                self._drop(tid)
        if self._sweeper is not None:
            self._sweeper.join()


def sampling_params(max_tokens: int, temperature: float, top_p: float, top_k: int, seed: int | None) -> SamplingParams:
    """SamplingParams from the widgets (top_k 0 keeps every token); ValueError names the bad knob."""
    if not 1 <= max_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max tokens {max_tokens} must be in 1 … {MAX_NEW_TOKENS} for a live run")
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k or None, seed=seed)


@dataclass(frozen=True)
class PlaygroundRun:
    """One generate click: outputs, every step's trace and the wall time."""

    outputs: list[RequestOutput]
    traces: list[StepTrace]
    wall_s: float
    block_size: int
    num_blocks: int
    prefix_cache_queries: int = 0  # prompt tokens this run's admissions looked up in the prefix cache
    prefix_cache_hits: int = 0  # ... and found there (vLLM's vllm:prefix_cache_queries / _hits, in tokens)

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Hits over queries in tokens, as vLLM's dashboards compute it (0 when nothing was looked up)."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    @property
    def generated_tokens(self) -> int:
        """Tokens generated across all requests."""
        return sum(len(o.token_ids) for o in self.outputs)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per wall-clock second (prefill included)."""
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def num_preemptions(self) -> int:
        """Times any request was evicted and recomputed."""
        return sum(o.num_preemptions for o in self.outputs)

    @property
    def peak_kv_usage(self) -> float:
        """Highest fraction of KV blocks in use after any step."""
        return max((t.kv_usage for t in self.traces), default=0.0)

    def timeline_summary(self) -> str:
        """The batch-and-blocks chart in one sentence (its text alternative): the run's peaks."""
        running = max((len(t.running) for t in self.traces), default=0)
        waiting = max((len(t.waiting) for t in self.traces), default=0)
        used = max((t.num_blocks - t.num_free_blocks for t in self.traces), default=0)
        return (
            f"Over {len(self.traces)} scheduler steps at most {running} request(s) ran at once and {waiting} "
            f"waited; KV blocks in use peaked at {used} of {self.num_blocks} ({self.peak_kv_usage:.0%}), with "
            f"{self.num_preemptions} preemption(s)."
        )


def live_line(trace: StepTrace, generated: int, elapsed_s: float) -> str:
    """One progress line while the engine runs: batch, queue, KV usage and tokens/s so far."""
    rate = generated / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"step {trace.step}: {len(trace.running)} running, {len(trace.waiting)} waiting, "
        f"KV {100 * trace.kv_usage:.0f}% of {trace.num_blocks} blocks, {generated} tokens, {rate:,.1f} tokens/s"
    )


def pending_requests(llm: LLM) -> list[int]:
    """Ids of the requests the learner's engine still holds in its queues (waiting, then running)."""
    return [seq.seq_id for seq in (*llm.scheduler.waiting, *llm.scheduler.running)]


def abort_all(llm: LLM, also: set[int] | frozenset[int] = frozenset()) -> int:
    """Abort every request still waiting or running in `llm` (freeing its blocks) and forget those and `also`
    (finished requests of an interrupted run, whose outputs nobody will collect); returns how many it aborted.

    Uses `LLM.abort_request` where the engine has it, else the scheduler's own `abort`."""
    queued = pending_requests(llm)
    abort = getattr(llm, "abort_request", None)
    for request_id in queued:
        if abort is not None:
            abort(request_id)
        else:
            llm.scheduler.abort(request_id)
    for request_id in {*queued, *also}:
        llm.release(request_id)
    return len(queued)


def generate(
    llm: LLM, prompts: list[str], params: SamplingParams, on_progress: Callable[[str], None] | None = None
) -> PlaygroundRun:
    """Run the prompts to completion on the learner's engine, recording every scheduler step.

    on_progress, when given, receives a `live_line` after each step (the page shows it while it waits). If
    the run stops part-way (on_progress raises, Streamlit interrupts the script for a rerun or a closed tab),
    the requests it queued are aborted and their blocks freed before the exception goes on, so the next run
    sees only its own prompts; anything an older interrupted run left is cleared before this one starts.
    """
    abort_all(llm)
    traces: list[StepTrace] = []
    bm = llm.block_manager
    queries, hits = bm.prefix_cache_queries, bm.prefix_cache_hits
    start = time.perf_counter()
    generated = 0

    def record(trace: StepTrace) -> None:
        nonlocal generated
        traces.append(trace)
        generated += sum(1 for r in trace.scheduled if r.sampled_token is not None)
        if on_progress is not None:
            on_progress(live_line(trace, generated, time.perf_counter() - start))

    try:
        outputs = llm.generate(prompts, params, on_step=record)
    except PromptTooLongError as exc:  # said in the page's words: lines count from 1, the pool is a slider here
        raise ValueError(
            f"prompt {exc.index + 1} has {exc.num_tokens} tokens but the engine accepts at most {exc.max_model_len}"
            + (
                f": the KV pool holds {exc.pool_tokens} token{'s' * (exc.pool_tokens != 1)} (blocks x block size); "
                "raise the KV blocks or the "
                "block size, or shorten the prompt"
                if exc.pool_tokens is not None
                else "; shorten the prompt"
            )
        ) from None
    except BaseException:
        seen = {i for t in traces for i in (*t.admitted, *t.finished, *t.running, *t.waiting)}
        abort_all(llm, also=seen)
        raise
    wall = time.perf_counter() - start
    return PlaygroundRun(
        outputs,
        traces,
        wall,
        llm.block_size,
        llm.num_gpu_blocks,
        bm.prefix_cache_queries - queries,
        bm.prefix_cache_hits - hits,
    )


def _name(request_id: int, first_id: int) -> str:
    return f"r{request_id - first_id}"


def output_rows(run: PlaygroundRun) -> list[dict[str, Any]]:
    """One row per request: prompt, generated text, token counts, why it stopped, preemptions, timings."""
    first = min(o.request_id for o in run.outputs)
    return [
        {
            "request": _name(o.request_id, first),
            "prompt": o.prompt,
            "generated text": o.text,
            "prompt tokens": len(o.prompt_token_ids),
            "generated tokens": len(o.token_ids),
            "finish": o.finish_reason,
            "preemptions": o.num_preemptions,
            "prefix-cache tokens": o.num_cached_tokens,
            "TTFT ms": round(1e3 * o.ttft, 1) if o.ttft is not None else None,
            "latency ms": round(1e3 * o.latency, 1) if o.latency is not None else None,
        }
        for o in run.outputs
    ]


def step_rows(run: PlaygroundRun) -> list[dict[str, Any]]:
    """One row per scheduler step: batch composition, joins / leaves, KV blocks in use, time and tokens/s."""
    first = min(o.request_id for o in run.outputs)
    names = lambda ids: " ".join(_name(i, first) for i in ids) or "—"  # noqa: E731
    rows = []
    for t in run.traces:
        sampled = sum(1 for r in t.scheduled if r.sampled_token is not None)
        rows.append(
            {
                "step": t.step - run.traces[0].step + 1,
                "running": len(t.running),
                "waiting": len(t.waiting),
                "batched tokens": t.num_batched_tokens,
                "joined": names(t.admitted),
                "finished": names(t.finished),
                "preempted": names(t.preempted),
                "KV blocks used": t.num_blocks - t.num_free_blocks,
                "KV usage %": round(100 * t.kv_usage, 1),
                "ms": round(1e3 * t.duration_s, 2),
                "tokens/s": round(sampled / t.duration_s, 1) if t.duration_s > 0 else 0.0,
            }
        )
    return rows


TIMELINE: tuple[str, ...] = ("running", "waiting", "KV blocks used")  # the timeline's series (step_rows' columns)


def timeline(run: PlaygroundRun) -> tuple[list[int], dict[str, list[int]]]:
    """(x = step number, {series name: values}) of TIMELINE for the batch-and-blocks chart, read off the run's
    traces (step_rows is its table: the same numbers)."""
    first = run.traces[0].step if run.traces else 0
    series = (
        [len(t.running) for t in run.traces],
        [len(t.waiting) for t in run.traces],
        [t.num_blocks - t.num_free_blocks for t in run.traces],
    )
    return [t.step - first + 1 for t in run.traces], dict(zip(TIMELINE, series, strict=True))


@dataclass(frozen=True)
class StepView:
    """One step drawn: who ran, the block tables with fills, and the pool (for ui.charts_memory)."""

    scheduled: list[dict[str, Any]]  # one table row per request that ran in the step
    tables: dict[str, list[int]]  # request name -> physical block ids
    fills: dict[str, list[int]]  # request name -> tokens in each of its blocks
    blocks: tuple[PoolBlock, ...]  # every physical block, in id order
    story: str  # what happened in the step, in sentences

    def block_rows(self) -> list[dict[str, object]]:
        """The pool table: one row per physical block (`PoolBlock.row`)."""
        return [b.row() for b in self.blocks]

    def table_rows(self) -> list[dict[str, str]]:
        """The block tables as a table: one row per request."""
        return [{"request": name, "block table": str(table)} for name, table in self.tables.items()]


def _group_label(window: int | None) -> str:
    return "full" if window is None else f"sliding {window}"


def _group_tables(
    t: StepTrace, first: int, filled: dict[int, int]
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Each running request's block table, one row per KV-cache group for a hybrid model ("A · sliding 16");
    an entry a sliding window gave back (-1) holds nothing."""
    if len(t.group_windows) == 1:
        tables = {_name(r, first): list(tbl) for r, tbl in t.block_tables.items()}
    else:
        tables = {
            f"{_name(r, first)} · {_group_label(window)}": list(tbl)
            for r, group_tables in t.group_block_tables.items()
            for window, tbl in zip(t.group_windows, group_tables, strict=True)
        }
    return tables, {name: [filled.get(b, 0) for b in tbl] for name, tbl in tables.items()}


def step_view(run: PlaygroundRun, index: int) -> StepView:
    """The `index`-th recorded step (0-based) as tables and pictures."""
    if not 0 <= index < len(run.traces):
        raise ValueError(f"step {index + 1} does not exist; this run has {len(run.traces)} steps")
    t = run.traces[index]
    first = min(o.request_id for o in run.outputs)
    filled = {b.block_id: b.num_filled for b in t.blocks}
    tables, fills = _group_tables(t, first, filled)
    blocks = pool_blocks(t.blocks, lambda o: _name(o, first))
    scheduled = [
        {
            "request": _name(r.request_id, first),
            "phase": r.phase,
            "new tokens": r.num_new_tokens,
            "already in cache": r.num_computed_tokens,
            "sampled token": r.sampled_token if r.sampled_token is not None else "—",
        }
        for r in t.scheduled
    ]
    parts = [f"{len(t.scheduled)} request(s) ran, computing {t.num_batched_tokens} token(s)."]
    for label, ids in (
        ("Joined", t.admitted),
        ("Finished and freed its blocks", t.finished),
        ("Preempted (blocks freed, will recompute)", t.preempted),
    ):
        if ids:
            parts.append(f"{label}: {', '.join(_name(i, first) for i in ids)}.")
    if t.copies:
        parts.append(f"Copy-on-write: {', '.join(f'{s}→{d}' for s, d in t.copies)}.")
    shared = [b for b in t.blocks if b.ref_count > 1]
    if shared:
        parts.append(f"{len(shared)} block(s) shared by more than one request.")
    parts.append(f"{t.num_blocks - t.num_free_blocks} of {t.num_blocks} blocks in use; {len(t.waiting)} waiting.")
    if len(t.group_windows) > 1:  # a hybrid model: say what each KV-cache group holds
        held = ", ".join(f"{_group_label(w)} {n}" for w, n in zip(t.group_windows, t.group_held_blocks, strict=True))
        parts.append(f"Blocks per KV-cache group (one shared pool): {held}.")
    return StepView(scheduled, tables, fills, blocks, " ".join(parts))


__all__ = [
    "DEFAULT_MAX_MODEL_BYTES",
    "DEFAULT_POOL_BYTES",
    "DEFAULT_PROMPTS",
    "FOLDERS_DISABLED",
    "FOLDERS_DISABLED_NOTICE",
    "MAX_BLOCKS",
    "MAX_BYTES_ENV",
    "MAX_NEW_TOKENS",
    "MAX_PATH_CHARS",
    "MAX_PROMPTS",
    "MAX_PROMPTS_TEXT_CHARS",
    "MODEL_DIRS_ENV",
    "TIMELINE",
    "IDLE_ENV",
    "IDLE_S",
    "MAX_ENGINES",
    "POOL_BYTES_ENV",
    "WAIT_S",
    "EnginePool",
    "EngineSettings",
    "ModelPolicy",
    "PlaygroundBusyError",
    "PlaygroundRun",
    "PoolTicket",
    "StepView",
    "abort_all",
    "generate",
    "kv_pool_bytes",
    "live_line",
    "load",
    "model_policy",
    "new_engine",
    "output_rows",
    "parse_prompts",
    "pending_requests",
    "resolve_model",
    "sampling_params",
    "step_rows",
    "step_view",
    "timeline",
]
