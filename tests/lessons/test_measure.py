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


def test_measure_llm_decode_subtracts_prefill(clock):
    class FakeLLM:
        """generate() costs 10 s of prefill plus 3 s per generated token on the fake clock."""

        def __init__(self) -> None:
            self.model = torch.nn.Linear(8, 4)  # 36 parameters

        def generate(self, prompts, params):
            clock.now += 10.0 + 3.0 * params.max_tokens
            return []

    m = measure.measure_llm_decode(FakeLLM(), prompt_len=4, new_tokens=5, repeats=2)
    assert m.seconds == pytest.approx(3.0)
    assert m.bytes_moved == 36 * 4 and m.flops == 2 * 36
    with pytest.raises(ValueError, match="new_tokens"):
        measure.measure_llm_decode(FakeLLM(), new_tokens=1)
    with pytest.raises(ValueError, match="no torch `model`"):
        measure.measure_llm_decode(object())


def test_measurement_rates():
    m = Measurement("x", "s", "float32", "cpu", 1, bytes_moved=100.0, flops=50.0, seconds=2.0, repeats=1)
    assert (m.bytes_per_s, m.flops_per_s, m.intensity) == (50.0, 25.0, 0.5)


def test_measure_machine_pairs_a_gemv_with_a_gemm_on_this_device():
    gemv, gemm = measure.measure_machine(weight_bytes=2 * MiB, prefill_batch=16, repeats=1)
    assert (gemv.batch, gemm.batch) == (1, 16)
    assert gemm.intensity > gemv.intensity
    assert gemv.device == ("cuda" if torch.cuda.is_available() else "cpu")
