"""Every StepTrace carries the scheduler's running totals, the counters a vLLM operator scrapes: preemptions
(vllm:num_preemptions_total) and the tokens computed again because of them. Checked on the tiny model with a
pool small enough that requests must be preempted."""

from __future__ import annotations

import pytest

from engine import LLM
from engine.sampling_params import SamplingParams
from tests.conftest import DEVICE
from tests.tiny_model import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), "the cache holds keys and values " * 8)


def test_step_traces_carry_running_totals(tiny):
    llm = LLM(str(tiny), block_size=4, num_gpu_blocks=8, device=DEVICE, max_num_batched_tokens=64)
    prompts = [[1 + i, 2, 3, 4, 5, 6, 7][: 6 + (i % 2)] for i in range(4)]
    traces = []
    outs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), on_step=traces.append)
    per_step = [len(t.preempted) for t in traces]
    assert sum(per_step) > 0  # 8 blocks of 4 cannot hold four 14-token sequences at once
    running = 0
    for t, n in zip(traces, per_step, strict=True):
        running += n
        assert t.num_preemptions_total == running  # a counter: the sum of every step's preemptions so far
    assert traces[-1].num_preemptions_total == llm.scheduler.num_preemptions == sum(o.num_preemptions for o in outs)
    recomputed = [t.num_recomputed_tokens_total for t in traces]
    assert recomputed == sorted(recomputed) and recomputed[-1] == llm.scheduler.num_recomputed_tokens > 0
    # every recomputed token was computed by some step: the totals cannot exceed the work done
    assert recomputed[-1] <= sum(t.num_batched_tokens for t in traces) - sum(len(p) for p in prompts)
