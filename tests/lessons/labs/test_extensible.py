"""Lesson 7's sizing comparison (lessons/labs/extensible.py): the estimate at 0.92 beside v0.34.0's measured cache."""

from __future__ import annotations

import pytest

from engine.memory.catalog import GPUS, MODELS
from engine.memory.units import GiB
from lessons.labs import extensible as lab


def test_at_the_pages_defaults_the_measured_cache_holds_more():
    c = lab.compare()
    assert c.estimate.gpu_memory_utilization == 0.92 and c.measured.gpu_memory_utilization is None
    assert c.estimate.block_size == 64 and c.estimate.cuda_graph_bytes > 0
    assert c.gain_blocks == c.measured.num_blocks - c.estimate.num_blocks > 0
    assert c.gain_gib == pytest.approx(c.gain_blocks * c.estimate.pool_block_bytes / GiB)
    rows = {r["term"]: r for r in c.rows()}
    assert rows["gpu_memory_utilization"]["measured"] == "unset (1.0)"
    assert rows["KV blocks of 64 tokens"] == {
        "term": "KV blocks of 64 tokens",
        "estimate": f"{c.estimate.num_blocks:,}",
        "measured": f"{c.measured.num_blocks:,}",
    }
    assert rows["safety margin"]["measured"] == "1.00"  # the 1 GiB floor: this peak is under 1.34 GiB


def test_every_catalog_server_that_starts_gains_from_the_default():
    assert "demo" not in lab.MODEL_CHOICES and "cpu" not in lab.GPU_CHOICES
    for model in lab.MODEL_CHOICES:
        for gpu in lab.GPU_CHOICES:
            try:
                c = lab.compare(model, gpu)
            except ValueError:
                continue  # the weights alone do not fit this card
            if c.estimate.num_blocks:
                assert c.gain_blocks > 0, (model, gpu)


def test_an_old_utilization_habit_gives_blocks_away_and_is_warned_about():
    unset, habit = lab.compare(utilization=None), lab.compare(utilization=0.9)
    assert habit.measured.num_blocks < unset.measured.num_blocks and habit.measured.warns
    assert "caps this instance" in habit.measured.log_lines()[0]
    assert not lab.compare(utilization=0.6).measured.warns  # a deliberate share, below 0.7


def test_the_graphs_are_those_the_gpu_captures():
    # a B200 (compute capability 10.x) captures batches up to 1024, other GPUs up to 512
    from engine.memory.startup import cuda_graph_bytes

    spec, b200 = MODELS["llama-3.1-8b"], GPUS["b200"]
    graphs = lab.compare(gpu="b200").estimate.cuda_graph_bytes
    assert graphs == cuda_graph_bytes(spec, 1024, 16384, False, b200) > cuda_graph_bytes(spec, 1024, 16384, False)


def test_rocm_keeps_a_larger_margin():
    c = lab.compare("llama-3.1-8b", "mi300x")
    assert c.measured.platform == "rocm" and c.measured.margin_bytes >= 3 * GiB


@pytest.mark.parametrize(("model", "gpu", "named"), [("gpt-5", "h100-sxm", "gpt-5"), ("llama-3.1-8b", "tpu", "tpu")])
def test_unknown_names_are_refused_by_name(model, gpu, named):
    with pytest.raises(ValueError, match=f"unknown .*'{named}'"):
        lab.compare(model, gpu)
