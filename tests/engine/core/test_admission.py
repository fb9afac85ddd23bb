"""The shared admission / preemption rule (engine/core/admission.py) on its own."""

import pytest

from engine.core.admission import admission_headroom, fits, may_admit, preempt_newest, watermark_blocks


def test_watermark_rounds_down_as_vllm_and_rejects_bad_fractions():
    # vLLM V1's KVCacheManager: watermark_blocks = int(watermark * num_blocks), so it rounds down
    assert watermark_blocks(0.01, 100) == 1
    assert watermark_blocks(0.01, 199) == 1
    assert watermark_blocks(0.01, 24) == 0  # a 1 % watermark leaves nothing free in a small pool
    assert watermark_blocks(0.0, 100) == 0
    with pytest.raises(ValueError, match="watermark=1.0"):
        watermark_blocks(1.0, 10)


def test_admission_needs_a_seat_and_no_preemption_this_step():
    assert may_admit(3, 4, preempted_this_step=False)
    assert not may_admit(4, 4, preempted_this_step=False)
    assert not may_admit(0, 4, preempted_this_step=True)


def test_headroom_is_waived_when_nothing_runs():
    assert admission_headroom(0, 5) == 0
    assert admission_headroom(1, 5) == 5


def test_fits_keeps_the_headroom_free():
    assert fits(3, 5, 2)
    assert not fits(4, 5, 2)
    assert fits(5, 5)


def test_preempt_newest_takes_the_newest_off_the_running_list():
    running = ["old", "mid", "new"]
    assert preempt_newest(running) == "new"
    assert running == ["old", "mid"]  # chosen and removed in one call; the rest keep their order
    assert preempt_newest(running) == "mid" and running == ["old"]
    assert preempt_newest(running) == "old" and running == []
    with pytest.raises(ValueError, match="nothing is running"):
        preempt_newest(running)
