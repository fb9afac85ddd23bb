"""The serving simulator's step-by-step decisions, in the shape the scheduler comparisons check them."""

from __future__ import annotations

from lessons.sim.loop import SimConfig
from lessons.sim.simulate import simulate
from lessons.sim.traces import replay_trace

MAX_LEN = 64  # the simulator's max_model_len in the scheduler comparisons (short prompts and outputs)


def sim_decisions(lens, num_blocks, block_size, max_num_seqs, watermark, groups=()):
    """Per step: the requests the paged simulator admitted and preempted, and the blocks it held; whether a
    preempted request came back (the comparisons stop there), and its number of preemptions."""
    cfg = SimConfig(
        "paged",
        num_blocks * block_size,
        block_size=block_size,
        max_model_len=MAX_LEN,
        max_num_seqs=max_num_seqs,
        watermark=watermark,
        groups=groups,
    )
    res = simulate(replay_trace([(0.0, prompt, output) for prompt, output in lens]), cfg)
    steps, preempted = [], set()
    for row in res.to_rows():
        events = [e for e in res.events if e.step == row["step"]]
        admitted = sorted(e.request_id for e in events if e.kind == "admit")
        if preempted & set(admitted):
            return steps, True, res.summary.num_preemptions
        now = sorted(e.request_id for e in events if e.kind == "preempt")
        preempted |= set(now)
        steps.append((admitted, now, (row["stored"] + row["internal"]) // block_size))
    return steps, False, res.summary.num_preemptions
