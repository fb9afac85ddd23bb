"""No request breaks the engine: a generate that fails or is interrupted leaves nothing queued or allocated.

Every failure a learner's session can cause is injected into `LLM.generate` - an exception, a KeyboardInterrupt
or a Streamlit rerun (a BaseException) from the on_step callback on the first or a later step, the model
runner or the sampler raising on the k-th step - with prefix caching on and off. Afterwards the engine is
idle (every block free, no waiting or running request, no bookkeeping left) and its next generate gives
exactly the outputs of a fresh engine, greedy and seeded. The poisoned-cache case writes NaN into the
slots the failing step was about to fill before it raises: if an aborted step could publish a block hash
for K/V it never wrote, the next run's prefix hit would read NaN and its tokens would differ.
The one-line bugs these catch: the `finally` in generate removed (phantom waiting requests, blocks held),
`Scheduler.abort` forgetting the waiting queue or the blocks, a block published to the prefix cache before
its step completed (num_computed_tokens advanced early), an extreme temperature raising in the sampler.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException

import engine.worker.kv_cache as kv_cache_module
from engine import LLM, SamplingParams
from engine.core.block_manager import slots_of
from engine.worker.device import available_memory
from engine.worker.kv_cache import PagedKVCache
from tests.tiny_model import make_tiny_model

TEXT = "the cache holds keys and values; the scheduler fills blocks with the tokens of every request. " * 4
BASE = list(range(5, 27))  # 22 shared tokens: 5 full blocks of 4 that a prefix cache can hit
PROMPTS = [BASE + [40], BASE + [41, 42], BASE[:9] + [43, 44, 45], list(range(60, 75))]
PARAMS = [
    SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True),
    SamplingParams(max_tokens=5, temperature=0.8, seed=7, ignore_eos=True),
    SamplingParams(max_tokens=4, temperature=1.3, top_k=20, top_p=0.9, seed=11, ignore_eos=True),
    SamplingParams(max_tokens=7, temperature=1e-30, seed=3, ignore_eos=True),  # exact argmax, never NaN
]


class Interrupt(BaseException):
    """A BaseException that is not an Exception, like Streamlit's RerunException / StopException."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), TEXT)


@pytest.fixture(scope="module")
def weights(tiny):
    """(model, config, tokenizer) loaded once and shared read-only by every engine here."""
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=8)
    return llm.model, llm.config, llm.tokenizer


def engine(weights, prefix: bool, **kw) -> LLM:
    """Small budgets on purpose: chunked prefill (16 tokens a step) and requests that wait for a seat."""
    args = {"block_size": 4, "num_gpu_blocks": 40, "max_num_batched_tokens": 16, "max_num_seqs": 2} | kw
    return LLM("tiny", device="cpu", enable_prefix_caching=prefix, preloaded=weights, **args)


def tokens(outputs) -> list[list[int]]:
    return [o.token_ids for o in outputs]


def assert_idle(llm: LLM) -> None:
    """Nothing queued, nothing allocated, nothing remembered."""
    bm = llm.block_manager
    assert not llm.has_unfinished_requests()
    assert not llm.scheduler.waiting and not llm.scheduler.running
    assert bm.num_free_blocks == llm.num_gpu_blocks
    assert not bm.sequences and not bm._hashes and not bm._num_slots
    assert all(count == 0 for count in bm.allocator.ref_counts)
    assert not llm._requests


@pytest.fixture(scope="module")
def expected(weights):
    """What a fresh engine generates for PROMPTS / PARAMS (the same with and without prefix caching)."""
    fresh = engine(weights, prefix=False).generate(PROMPTS, PARAMS)
    return tokens(fresh)


def raise_on_step(k: int, exc: BaseException):
    """An on_step callback that raises `exc` at its k-th call."""
    calls = []

    def on_step(trace) -> None:
        calls.append(trace)
        if len(calls) == k:
            raise exc

    return on_step


def fail_runner(llm: LLM, k: int, exc: BaseException, poison: bool = False, where: str = "run") -> None:
    """Make the k-th runner call raise; with poison, first write NaN into every slot that step was to fill."""
    runner = llm.runner
    original = getattr(runner, where)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == k:
            if poison:
                out = args[0]
                kv = runner.kv_cache.kv  # [L, 2, num_blocks, block_size, Hkv, D]
                flat = kv.view(kv.shape[0], 2, -1, *kv.shape[4:])
                for s in out.scheduled:
                    start = s.num_computed_tokens
                    slots = slots_of(s.seq.block_table, start, start + s.num_new_tokens, llm.block_size)
                    flat[:, :, slots] = float("nan")
            raise exc
        return original(*args, **kwargs)

    setattr(runner, where, failing)


FAILURES = {
    "callback raises on the first step": lambda llm: {"on_step": raise_on_step(1, ValueError("page bug"))},
    "callback raises on a later step": lambda llm: {"on_step": raise_on_step(4, RuntimeError("closed tab"))},
    "callback raises a BaseException": lambda llm: {"on_step": raise_on_step(2, Interrupt())},
    "KeyboardInterrupt in the callback": lambda llm: {"on_step": raise_on_step(3, KeyboardInterrupt())},
    "Streamlit rerun in the callback": lambda llm: {"on_step": raise_on_step(2, RerunException(None))},
    "Streamlit stop in the callback": lambda llm: {"on_step": raise_on_step(5, StopException())},
    "runner raises on the first step": lambda llm: fail_runner(llm, 1, RuntimeError("CUDA error")) or {},
    "runner raises on the third step": lambda llm: fail_runner(llm, 3, RuntimeError("CUDA error")) or {},
    "runner writes garbage, then raises": lambda llm: fail_runner(llm, 3, RuntimeError("boom"), poison=True) or {},
    "garbage, then KeyboardInterrupt": lambda llm: fail_runner(llm, 2, KeyboardInterrupt(), poison=True) or {},
    "sampler raises on a later step": lambda llm: fail_runner(llm, 4, RuntimeError("sampler"), where="sample") or {},
}


@pytest.mark.parametrize("prefix", [False, True], ids=["no-prefix-cache", "prefix-cache"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_generate_leaves_the_engine_as_good_as_new(weights, expected, prefix, failure):
    llm = engine(weights, prefix)
    kwargs = FAILURES[failure](llm)
    with pytest.raises(BaseException) as info:
        llm.generate(PROMPTS, PARAMS, **kwargs)
    assert not isinstance(info.value, AssertionError)
    assert_idle(llm)
    vars(llm.runner).pop("run", None)  # the real runner again (the patches are instance attributes)
    vars(llm.runner).pop("sample", None)
    assert tokens(llm.generate(PROMPTS, PARAMS)) == expected  # what a fresh engine gives
    assert_idle(llm)
    assert tokens(llm.generate(PROMPTS, PARAMS)) == expected  # and again, now with a warm prefix cache
    assert_idle(llm)


def test_the_failure_happened_mid_run(weights):
    """The injected failures really strike with requests running and waiting and blocks allocated."""
    llm = engine(weights, prefix=True)
    seen = {}

    def on_step(trace) -> None:
        if trace.step == 3:
            seen["waiting"], seen["running"] = len(llm.scheduler.waiting), len(llm.scheduler.running)
            seen["free"] = llm.block_manager.num_free_blocks
            raise Interrupt

    with pytest.raises(Interrupt):
        llm.generate(PROMPTS, PARAMS, on_step=on_step)
    assert seen["waiting"] >= 1 and seen["running"] >= 1 and seen["free"] < llm.num_gpu_blocks
    assert_idle(llm)


def test_other_requests_survive_a_failed_generate(weights, expected):
    """generate aborts only its own requests: one queued with add_request keeps running afterwards."""
    llm = engine(weights, prefix=True)
    mine = llm.add_request(PROMPTS[0], PARAMS[0])
    with pytest.raises(ValueError, match="page bug"):
        llm.generate(PROMPTS[1:], PARAMS[1:], on_step=raise_on_step(2, ValueError("page bug")))
    assert llm.has_unfinished_requests() and [s.seq_id for s in llm.scheduler.running] == [mine]
    while llm.has_unfinished_requests():
        llm.step()
    assert llm.get_output(mine).token_ids == expected[0]
    llm.release(mine)
    assert_idle(llm)


def test_abort_request_takes_one_id_or_many(weights):
    llm = engine(weights, prefix=True)
    a, b, c = (llm.add_request(p, s) for p, s in zip(PROMPTS[:3], PARAMS[:3], strict=True))
    llm.step()  # a's first 16-token chunk
    llm.step()  # the rest of a, and b: both run (max_num_seqs=2), c waits
    assert {s.seq_id for s in llm.scheduler.running} == {a, b} and [s.seq_id for s in llm.scheduler.waiting] == [c]
    llm.abort_request(c)  # waiting
    assert not llm.scheduler.waiting
    with pytest.raises(ValueError, match="unknown request id"):
        llm.get_output(c)
    llm.abort_request(iter([a, b, 12345]))  # running, and an unknown id skipped as in vLLM
    llm.abort_request([a, b, c])  # twice is harmless
    assert_idle(llm)
    for bad in (True, "0", [1.5], None):
        with pytest.raises(ValueError, match="is not a request id"):
            llm.abort_request(bad)


def test_abort_from_the_callback_ends_that_request(weights, expected):
    """A callback that aborts one of generate's own requests gets it back with finish_reason 'abort'."""
    llm = engine(weights, prefix=False)

    def on_step(trace) -> None:
        if trace.step == 2:
            llm.abort_request(0)  # a fresh engine numbers its requests 0, 1, ...: the first prompt

    outputs = llm.generate(PROMPTS, PARAMS, on_step=on_step)
    assert outputs[0].request_id == 0 and outputs[0].finish_reason == "abort"
    assert tokens(outputs)[1:] == expected[1:]
    assert_idle(llm)


def test_extreme_temperatures_never_break_the_engine(weights, expected):
    llm = engine(weights, prefix=False)
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    for temperature in (1e-30, 1e-45, 5e-324):  # an exact argmax: the greedy tokens (no ties in random logits)
        params = SamplingParams(max_tokens=6, temperature=temperature, ignore_eos=True)
        assert tokens(llm.generate(PROMPTS[:1], params)) == [expected[0]]
    huge = SamplingParams(max_tokens=6, temperature=1e300, seed=0, ignore_eos=True)
    (out,) = llm.generate(PROMPTS[:1], huge)
    assert len(out.token_ids) == 6 and all(0 <= t < llm.config.vocab_size for t in out.token_ids)
    assert tokens(llm.generate(PROMPTS[:1], greedy)) == [expected[0]]
    assert_idle(llm)


def test_max_tokens_beyond_max_model_len_stops_at_the_limit(weights):
    llm = engine(weights, prefix=False, max_model_len=30)
    (out,) = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=10**18, temperature=0.0, ignore_eos=True))
    assert out.finish_reason == "length" and len(PROMPTS[0]) + len(out.token_ids) == 30
    assert_idle(llm)


# ---- KV cache bigger than memory -------------------------------------------------------------------------


def test_num_gpu_blocks_beyond_memory_is_a_clear_value_error(weights):
    with pytest.raises(ValueError) as info:
        engine(weights, prefix=False, num_gpu_blocks=10**9)
    message = str(info.value)
    per_block = 2 * 2 * 4 * 2 * 8 * 4  # layers x (K, V) x block_size x KV heads x head_dim x fp32 bytes
    assert f"num_gpu_blocks=1000000000 blocks x {per_block} bytes = {10**9 * per_block} bytes" in message
    assert "does not fit on cpu" in message and "is available" in message
    assert "pass a smaller num_gpu_blocks" in message and "blocks fit now" in message
    with pytest.raises(ValueError, match="kv_cache_memory_bytes|num_gpu_blocks"):
        engine(weights, prefix=False, num_gpu_blocks=None, kv_cache_memory_bytes=2**62)


def test_the_check_runs_before_allocating():
    with mock.patch.object(kv_cache_module, "available_memory", return_value=(10_000, "a test's budget")):
        with mock.patch.object(torch, "zeros", side_effect=AssertionError("allocated anyway")):
            with pytest.raises(
                ValueError, match=r"only 9.31e-06 GiB is available \(a test's budget\); at most 9 blocks"
            ):
                PagedKVCache(2, 20, 4, 2, 8)  # 20 blocks of 2 x 2 x 4 x 2 x 8 x 4 = 1024 bytes > 10,000


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: not enough memory: you tried ..."),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"),
    ],
)
def test_an_allocator_failure_becomes_the_same_clear_error(error):
    with mock.patch.object(torch, "zeros", side_effect=error):
        with pytest.raises(ValueError, match=r"num_gpu_blocks=5 blocks x 1024 bytes .* the allocator could not"):
            PagedKVCache(2, 5, 4, 2, 8)


def test_other_allocation_errors_pass_through():
    with mock.patch.object(torch, "zeros", side_effect=RuntimeError("some other failure")):
        with pytest.raises(RuntimeError, match="some other failure"):
            PagedKVCache(2, 5, 4, 2, 8)


def test_available_memory_is_known_on_this_machine():
    available, source = available_memory("cpu")
    assert available is None or (available > 0 and source)
