"""lessons/measure.py: the bytes/FLOPs accounting of the live measurements and the timing helpers."""

import pytest
import torch

from engine.memory.units import MiB
from lessons import measure
from lessons.measure import Measurement, measure_weight_streaming, time_interleaved


class FakeClock:
    """perf_counter replacement that only moves when the code under test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter", fake)
    return fake


def test_gemv_accounts_weights_vector_and_output():
    m = measure_weight_streaming(2 * MiB, batch=1, dtype=torch.float32, repeats=2, warmup=0)
    rows, cols = 2 * MiB // (4096 * 4), 4096
    assert m.shape == f"[{rows}, {cols}] x [{cols}, 1]"
    assert m.bytes_moved == (rows * cols + cols + rows) * 4
    assert m.flops == 2 * rows * cols
    assert m.intensity == pytest.approx(0.5, rel=0.01)  # fp32 GEMV: 2 FLOPs per 4-byte weight
    assert m.seconds > 0 and m.bytes_per_s == pytest.approx(m.bytes_moved / m.seconds)
    row = m.row()
    assert row["GB_per_s"] == pytest.approx(m.bytes_per_s / 1e9) and row["batch"] == 1


def test_gemm_reuses_weights_so_intensity_grows_with_batch():
    small = measure_weight_streaming(1 * MiB, batch=8, repeats=1, warmup=0)
    large = measure_weight_streaming(1 * MiB, batch=128, repeats=1, warmup=0)
    assert large.intensity > 4 * small.intensity > 4 * 0.5
    assert large.name.startswith("prefill-like") and large.batch == 128


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"weight_bytes": 10}, "between 1 MiB"), ({"weight_bytes": 2**40}, "between 1 MiB"), ({"batch": 0}, "batch=0")],
)
def test_weight_streaming_rejects_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure_weight_streaming(**kwargs)


def test_time_interleaved_round_robin_and_medians(clock):
    calls: list[str] = []

    def make(name: str, cost: float):
        def fn():
            calls.append(name)
            clock.now += cost

        return fn

    times = time_interleaved({"a": make("a", 2.0), "b": make("b", 5.0)}, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4  # one warm-up round, then three interleaved timed rounds
    assert times == {"a": 2.0, "b": 5.0}
    with pytest.raises(ValueError, match="repeats"):
        time_interleaved({"a": make("a", 1.0)}, repeats=0)


def test_time_interleaved_min_and_cpu_clock(monkeypatch):
    wall, cpu = FakeClock(), FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter", wall)
    monkeypatch.setattr(measure.time, "process_time", cpu)
    costs = iter([9.0, 3.0, 5.0, 1.0])  # warm-up, then three timed calls: fastest is 1.0 CPU-second

    def fn():
        cpu.now += next(costs)
        wall.now += 100.0  # descheduled time the CPU clock does not charge

    assert time_interleaved({"k": fn}, repeats=3, warmup=1, statistic="min", clock="cpu") == {"k": 1.0}
    with pytest.raises(ValueError, match="statistic"):
        time_interleaved({"k": fn}, statistic="mean")
    with pytest.raises(ValueError, match="clock"):
        time_interleaved({"k": fn}, clock="gpu")
    with pytest.raises(ValueError, match="CPU work only"):
        time_interleaved({"k": fn}, clock="cpu", device="meta")


class ScriptedLLM:
    """generate() advances the fake clock by cost(call number, max_tokens); it records every length it ran."""

    def __init__(self, clock: FakeClock, cost) -> None:
        self.model = torch.nn.Linear(8, 4)  # 36 parameters: 144 bytes in fp32
        self.clock, self.cost, self.calls = clock, cost, []

    def generate(self, prompts, params):
        self.clock.now += self.cost(len(self.calls), params.max_tokens)
        self.calls.append(params.max_tokens)
        return []


def test_measure_llm_decode_fits_the_cost_per_token_over_several_lengths(clock):
    llm = ScriptedLLM(clock, lambda i, n: 10.0 + 3.0 * n)  # 10 s of prefill, 3 s per generated token
    m = measure.measure_llm_decode(llm, prompt_len=4, new_tokens=5, repeats=2)
    assert m.seconds == pytest.approx(3.0)
    assert m.bytes_moved == 36 * 4 and m.flops == 2 * 36
    assert llm.calls == [1] + [1, 3, 5] * 2  # one warm-up call, two timed rounds, the lengths interleaved
    with pytest.raises(ValueError, match="new_tokens"):
        measure.measure_llm_decode(llm, new_tokens=1)
    with pytest.raises(ValueError, match="no torch `model`"):
        measure.measure_llm_decode(object())


def test_one_disturbed_run_does_not_decide_the_step_time(clock):
    # the machine stalls 50 s during the second timed 8-token run: each length keeps its fastest run
    llm = ScriptedLLM(clock, lambda i, n: 10.0 + 2.0 * n + (50.0 if i == 6 else 0.0))
    assert measure.measure_llm_decode(llm, new_tokens=8, repeats=3).seconds == pytest.approx(2.0)


def test_a_busy_machine_where_the_longer_run_is_faster_is_measured_again(clock):
    # first round (a warm-up call + 3 timed rounds of lengths 1, 4, 8 = 10 calls): the short runs were slowed so that
    # the longest run is the fastest; the old `max(full - short, 1e-9)` showed a 1 ns step (an MBU of millions %)
    def cost(i, n):
        return (40.0 - 3.0 * n) if i < 10 else 5.0 + 0.5 * n

    llm = ScriptedLLM(clock, cost)
    m = measure.measure_llm_decode(llm, new_tokens=8, repeats=3)
    assert m.seconds == pytest.approx(0.5) and len(llm.calls) == 10 + 9  # a second round, without warm-up


def test_a_machine_too_busy_on_every_round_is_too_noisy_to_measure(clock):
    llm = ScriptedLLM(clock, lambda i, n: 40.0 - 3.0 * n)  # the longer run is always the faster one
    with pytest.raises(measure.TooNoisy, match="too noisy to measure now: 3 rounds .* -3,000.000 ms"):
        measure.measure_llm_decode(llm, new_tokens=8, repeats=3)
    assert len(llm.calls) == 1 + 3 * 9  # warm-up, then three rounds: bounded, then it gives up
    flat = ScriptedLLM(clock, lambda i, n: 7.0)  # no cost per token at all: not a measurement either
    with pytest.raises(measure.TooNoisy):
        measure.measure_llm_decode(flat, new_tokens=8, repeats=1, attempts=2)


def test_a_step_faster_than_the_machines_best_bandwidth_is_measured_again(clock):
    # 144 bytes per step; at 100 bytes/s the fastest possible step is 1.44 s. A 1 s slope is impossible.
    def cost(i, n):
        return 10.0 + (1.0 if i < 7 else 2.0) * n

    llm = ScriptedLLM(clock, cost)
    m = measure.measure_llm_decode(llm, new_tokens=8, repeats=2, max_bytes_per_s=100.0)
    assert m.seconds == pytest.approx(2.0) and m.bytes_per_s <= 100.0
    always = ScriptedLLM(clock, lambda i, n: 10.0 + 1.0 * n)
    with pytest.raises(measure.TooNoisy, match="faster than 0.00 GB/s allows"):
        measure.measure_llm_decode(always, new_tokens=8, repeats=2, max_bytes_per_s=100.0)


def test_per_token_slope_is_the_least_squares_fit():
    assert measure.per_token_slope([1, 4, 8], [12.0, 18.0, 26.0]) == pytest.approx(2.0)
    # numpy's polyfit as the independent reference, on scattered points
    ns, ts = [1, 2, 4, 8], [3.0, 2.5, 7.0, 9.5]
    import numpy as np

    assert measure.per_token_slope(ns, ts) == pytest.approx(np.polyfit(ns, ts, 1)[0])
    assert measure.per_token_slope([1, 8], [9.0, 2.0]) < 0  # what the caller must re-measure, never show
    with pytest.raises(ValueError, match="two distinct lengths"):
        measure.per_token_slope([4, 4], [1.0, 2.0])
    assert measure.decode_lengths(8) == (1, 4, 8) and measure.decode_lengths(2) == (1, 2)


def test_measurement_rates():
    m = Measurement("x", "s", "float32", "cpu", 1, bytes_moved=100.0, flops=50.0, seconds=2.0, repeats=1)
    assert (m.bytes_per_s, m.flops_per_s, m.intensity) == (50.0, 25.0, 0.5)


def test_measure_machine_pairs_a_gemv_with_a_gemm_on_this_device():
    gemv, gemm = measure.measure_machine(weight_bytes=2 * MiB, prefill_batch=16, repeats=1)
    assert (gemv.batch, gemm.batch) == (1, 16)
    assert gemm.intensity > gemv.intensity
    assert gemv.device == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_call_that_took_no_measurable_time_is_not_a_measurement(clock):
    # a clock that did not advance (or went back) would make every rate and speed-up of this time infinite
    def free():
        pass

    def costly():
        clock.now += 1.0

    with pytest.raises(measure.TooNoisy, match="too noisy to measure now: 'free' took no measurable time"):
        time_interleaved({"free": free, "costly": costly}, repeats=3, statistic="min")
    assert isinstance(measure.TooNoisy("x"), ValueError)  # pages show it through their ValueError path
    assert time_interleaved({"costly": costly}, repeats=2) == {"costly": 1.0}


def test_decode_reads_one_row_of_an_untied_embedding_table_and_all_of_a_tied_one():
    class Tiny(torch.nn.Module):
        def __init__(self, tied: bool) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(100, 8)  # 800 fp32 values
            self.mlp = torch.nn.Linear(8, 8, bias=False)  # 64
            self.lm_head = torch.nn.Linear(8, 100, bias=False)  # 800, or the embedding's own table
            if tied:
                self.lm_head.weight = self.embed.weight

    untied, tied = Tiny(False), Tiny(True)
    assert measure.model_weight_bytes(untied) == (800 + 64 + 800) * 4
    assert measure.decode_weight_bytes(untied) == (8 + 64 + 800) * 4  # one gathered row, the lm_head whole
    assert measure.model_weight_bytes(tied) == measure.decode_weight_bytes(tied) == (800 + 64) * 4
