"""bench.allocator's block-manager workload at tiny sizes: cold and warm caches and the hit rate each measures."""

import json
import sys

import pytest

from bench import allocator
from bench.allocator import ManagerRuns, manager_sequences, shared_prefix_prompts
from engine.core.block_manager import BlockManager

NUM_SEQS, SEQ_LEN, BLOCK = 6, 8, 2  # the shared prefix is 4 tokens = 2 blocks
# Cold: prompts 0, 2, 4 share the prefix; the first of them computes it, the other two hit it.
COLD_HIT_RATE = 2 * (SEQ_LEN // 2) / (NUM_SEQS * SEQ_LEN)
# Warm: every prompt is cached except its last block (the last token is always computed).
WARM_HIT_RATE = (SEQ_LEN - BLOCK) / SEQ_LEN


def test_prompts_share_half_of_every_other_prompt():
    prompts = shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0)
    assert [len(p) for p in prompts] == [SEQ_LEN] * NUM_SEQS
    head = prompts[0][: SEQ_LEN // 2]
    assert all(p[: SEQ_LEN // 2] == head for p in prompts[::2])
    assert not any(p[: SEQ_LEN // 2] == head for p in prompts[1::2])
    assert shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0) == prompts  # fixed seed


def test_manager_sequences_counts_prefix_hits_and_frees_everything():
    prompts = shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0)
    manager = BlockManager(64, BLOCK, enable_prefix_caching=True)
    assert manager_sequences(manager, prompts, BLOCK) == (COLD_HIT_RATE * NUM_SEQS * SEQ_LEN, NUM_SEQS * SEQ_LEN)
    assert manager.num_free_blocks == 64 and not manager.sequences
    hits, total = manager_sequences(manager, prompts, BLOCK)  # the same prompts again: now cached
    assert hits / total == WARM_HIT_RATE


def test_cold_runs_get_a_fresh_manager_each_call():
    prompts = shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0)
    cold = ManagerRuns(prompts, 64, BLOCK, warm=False, calls=3)
    for _ in range(3):
        cold()
    assert cold.hit_rates == [COLD_HIT_RATE] * 3
    with pytest.raises(RuntimeError, match="more often"):
        cold()


def test_warm_runs_start_with_the_cache_populated():
    prompts = shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0)
    warm = ManagerRuns(prompts, 64, BLOCK, warm=True, calls=3)
    for _ in range(3):
        warm()
    assert warm.hit_rates == [WARM_HIT_RATE] * 3


def test_summary_rates_and_timed_hit_rate():
    prompts = shared_prefix_prompts(NUM_SEQS, SEQ_LEN, seed=0)
    runs = ManagerRuns(prompts, 64, BLOCK, warm=False, calls=1)
    runs.hit_rates = [0.0, 0.5, 0.25]  # a warm-up call, then two timed ones
    row = runs.summary(seconds=2.0, repeats=2)
    assert row == {"seqs_per_s": NUM_SEQS / 2.0, "blocks_per_s": NUM_SEQS * SEQ_LEN / BLOCK / 2.0, "hit_rate": 0.375}


def test_main_reports_cold_and_warm_apart(monkeypatch, capsys):
    argv = f"allocator --json --num-blocks 64 --block-size {BLOCK} --pairs 40 --burst 10 --num-seqs {NUM_SEQS}"
    argv += f" --seq-len {SEQ_LEN} --repeats 2 --warmup 1"
    monkeypatch.setattr(sys, "argv", argv.split())
    allocator.main()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["block_manager_cold"]["hit_rate"] == COLD_HIT_RATE
    assert record["block_manager_warm"]["hit_rate"] == WARM_HIT_RATE
    for side in ("block_manager_cold", "block_manager_warm"):
        assert set(record[side]) == {"seqs_per_s", "blocks_per_s", "hit_rate"} and record[side]["seqs_per_s"] > 0
    assert "block_manager_seqs_per_s" not in record  # the mixed cold/warm figure is gone
