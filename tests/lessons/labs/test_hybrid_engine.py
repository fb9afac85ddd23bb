"""lessons.labs.hybrid_engine: the real engine's two KV-cache groups, step by step, against the block arithmetic."""

import pytest

from lessons.labs import hybrid_engine as hybrid


@pytest.fixture(scope="module")
def run():
    return hybrid.hybrid_run(16, 16)


def test_full_group_keeps_every_block_and_sliding_group_only_its_window(run):
    bs, w = 16, 16
    for s in run.steps:
        assert s.full_blocks == -(-s.context // bs)  # every block of the context (the newest token's included)
        # At most W - 1 positions before a step's first new token plus that step's 32 tokens, plus one block.
        assert s.sliding_blocks <= -(-(w - 1 + hybrid.CHUNK) // bs) + 1
        assert s.free_blocks == run.num_blocks - s.full_blocks - s.sliding_blocks  # one pool, nothing else in it
    last = run.steps[-1]
    assert last.context == hybrid.PROMPT_TOKENS + hybrid.NEW_TOKENS - 2  # the last step's trace lists it finished
    assert run.given_back == last.full_blocks - last.sliding_blocks > 0
    assert run.all_full_blocks == 2 * last.full_blocks
    assert str(run.given_back) in run.summary() and len(run.rows()) == len(run.steps)


def test_a_window_not_offered_is_refused_by_value():
    with pytest.raises(ValueError, match="window=5 is not offered"):
        hybrid.hybrid_run(16, 5)


def test_playground_step_view_names_each_groups_table():
    """A hybrid model's step in the playground: a table row per request and KV-cache group, and the story says
    what each group holds (the same counts as the trace's tables)."""
    from engine import LLM, SamplingParams
    from lessons.labs import playground

    model, config = hybrid.tiny_hybrid(8)
    llm = LLM("hybrid", device="cpu", block_size=4, num_gpu_blocks=64, preloaded=(model, config, None))
    traces = []
    outs = llm.generate([list(range(1, 30))], SamplingParams(max_tokens=3, ignore_eos=True), on_step=traces.append)
    run = playground.PlaygroundRun(outs, traces, 0.0, 4, 64)
    view = playground.step_view(run, 0)
    (name_full, name_sliding) = view.tables
    assert name_full.endswith("· full") and name_sliding.endswith("· sliding 8")
    full, sliding = view.tables[name_full], view.tables[name_sliding]
    assert len(full) == len(sliding) == -(-29 // 4) and not set(full) & set(sliding)
    assert f"full {len(full)}, sliding 8 {len(sliding)}" in view.story  # before the window lets go of any
    later = playground.step_view(run, 1)
    kept = sum(b >= 0 for b in later.tables[name_sliding])
    assert kept < len(later.tables[name_full]) and f"sliding 8 {kept}." in later.story
    assert all(f == 0 for b, f in zip(later.tables[name_sliding], later.fills[name_sliding], strict=True) if b < 0)
