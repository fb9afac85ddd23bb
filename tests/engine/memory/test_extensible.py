"""vLLM v0.34.0's measured (extensible) KV-cache sizing, against hand arithmetic in GiB."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from engine.memory.extensible import (
    MARGIN_FLOOR_BYTES,
    margin_bytes,
    measure_kv_cache_bytes,
    measured_kv,
)
from engine.memory.footprint import serving_footprint
from engine.memory.units import GiB


def _measure(**kw):
    args = dict(init_free_bytes=80 * GiB, free_bytes=60 * GiB, committed_bytes=0, requested_bytes=80 * GiB)
    args.update(kw)
    return measure_kv_cache_bytes(**args)


def test_the_headroom_less_the_margin_and_the_peak_bounds_the_cache():
    # 20 GiB used besides KV; 60 free; peak 2 GiB -> margin max(1, 1.5) = 1.5: min(80-20, 60-1.5) - 2 = 56.5
    assert _measure(transient_peak_bytes=2 * GiB) == int(56.5 * GiB)


def test_a_lower_request_binds_before_the_headroom():
    # requested 70: min(70 - 20, 58.5) - 2 = 48
    assert _measure(requested_bytes=70 * GiB, transient_peak_bytes=2 * GiB) == 48 * GiB


def test_the_margin_has_a_floor_of_one_gib_on_cuda_and_three_on_rocm():
    assert margin_bytes(GiB) == GiB  # 0.75 GiB < the floor
    assert margin_bytes(4 * GiB) == 3 * GiB  # 0.75 x 4
    assert margin_bytes(GiB, "rocm") == 3 * GiB
    assert MARGIN_FLOOR_BYTES == {"cuda": GiB, "rocm": 3 * GiB}
    # the floor reaches the cache: a 1 GiB peak leaves 60 - 1 (floor) - 1 (peak) = 58
    assert _measure(transient_peak_bytes=GiB) == 58 * GiB
    assert _measure(transient_peak_bytes=GiB, platform="rocm") == 56 * GiB


def test_torch_reservation_growth_is_kept_free_when_larger_than_the_peak():
    assert _measure(transient_peak_bytes=GiB, torch_growth_bytes=3 * GiB) == 56 * GiB  # 60 - 1 - 3


def test_committed_blocks_count_as_headroom_not_as_engine_use():
    # 10 GiB already committed to the cache: free 50, non-KV use still 20, headroom still 60
    assert _measure(free_bytes=50 * GiB, committed_bytes=10 * GiB, transient_peak_bytes=2 * GiB) == int(56.5 * GiB)


def test_nothing_left_is_zero_not_negative():
    assert _measure(free_bytes=GiB, transient_peak_bytes=2 * GiB) == 0


@pytest.mark.parametrize("name", ["free_bytes", "transient_peak_bytes", "requested_bytes"])
def test_bad_byte_counts_are_named(name):
    with pytest.raises(ValueError, match=name):
        _measure(**{name: -1})
    with pytest.raises(ValueError, match="platform='xpu'"):
        _measure(platform="xpu")


@pytest.fixture
def fp():
    return serving_footprint("llama-3.1-8b", "h100-sxm", cuda_graph_bytes=GiB // 2)


def test_a_server_with_the_utilization_unset_gets_the_measured_rest_of_the_card(fp):
    m = measured_kv(fp)
    assert m.utilization == 1.0 and m.requested_bytes == math.ceil(fp.capacity_bytes)
    free_at_start = fp.capacity_bytes - fp.overhead_bytes
    peak = fp.activation_bytes + fp.cuda_graph_bytes  # vLLM seeds the reserve with the profiled peak + graphs
    margin = max(GiB, int(0.75 * peak))
    expected = free_at_start - fp.weights_bytes - fp.cuda_graph_bytes - margin - peak
    assert m.kv_bytes == expected
    assert m.num_blocks == expected // fp.pool_block_bytes
    # more than the estimate at 0.92 gives the same server, and within what the first pass reserved
    assert m.num_blocks > fp.num_blocks and m.num_blocks <= m.capacity_blocks
    assert not m.warns


def test_other_processes_shrink_the_headroom_not_the_request(fp):
    crowded = replace(fp, other_process_bytes=10 * GiB)
    assert measured_kv(fp).kv_bytes - measured_kv(crowded).kv_bytes == 10 * GiB


def test_an_old_habit_of_0_9_is_warned_about_when_it_withholds_a_gib(fp):
    m = measured_kv(fp, 0.9)
    assert m.requested_bytes == math.ceil(fp.capacity_bytes * 0.9)
    assert m.kv_bytes == m.requested_bytes - fp.weights_bytes - fp.cuda_graph_bytes - m.transient_peak_bytes
    assert m.withheld_bytes == measured_kv(fp).kv_bytes - m.kv_bytes >= GiB
    assert m.warns and "gpu_memory_utilization=0.9 caps this instance" in m.log_lines()[0]
    assert not measured_kv(fp, 0.6).warns  # below 0.7: deliberate, not a habit
    assert not measured_kv(fp, 1.0).warns


def test_the_capacity_reserved_by_the_first_pass_caps_the_blocks():
    # Without graphs (--enforce-eager) and a utilization set, the measurement (0.92 T - weights - peak) exceeds
    # what the first, estimate-based pass reserved address space for (which also took the non-torch memory off):
    # the cache stays at the reservation.
    fp = serving_footprint("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=0.92)
    m = measured_kv(fp, 0.92)
    assert m.kv_bytes // fp.pool_block_bytes > m.capacity_blocks
    assert m.num_blocks == m.capacity_blocks == fp.num_blocks  # the reservation is the estimate at 0.92


def test_the_log_lines_are_v0_34s(fp):
    m = measured_kv(fp)
    after, extended = m.log_lines()
    assert after.startswith("INFO [extensible_kv_cache.py] Memory after warmup: ")
    assert f"; {m.num_blocks} KV cache blocks (" in after and "fit within the requested 79.11 GiB" in after
    assert extended.endswith(f"Extended KV cache to {m.num_blocks} blocks ({m.committed_bytes / GiB:.2f} GiB).")


def test_weights_that_do_not_fit_are_named():
    big = serving_footprint("llama-3.1-70b", "l4")
    with pytest.raises(ValueError, match=r"Llama-3.1-70B on L4.*do not fit.*tensor parallelism"):
        measured_kv(big)


@pytest.mark.parametrize("u", [0.0, 1.5, -0.1])
def test_a_utilization_out_of_range_is_named(fp, u):
    with pytest.raises(ValueError, match=f"gpu_memory_utilization={u}"):
        measured_kv(fp, u)
