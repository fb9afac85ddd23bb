"""lessons/labs/bandwidth.py: which batches fit, the plateau's cause, MBU and the page's claims (no timing asserts)."""

import pytest
import torch

from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import serving_footprint
from lessons import measure
from lessons.labs import bandwidth as lab

GiB = 2**30


def timed(name: str, bytes_moved: float, flops: float, seconds: float, batch: int = 1) -> measure.Measurement:
    return measure.Measurement(name, "s", "float32", "cpu", 1, bytes_moved, flops, seconds, 1, batch)


def test_fit_boundary_is_vllms_kv_budget_at_the_context():
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    fp = serving_footprint("llama-3-8b", "h100-sxm", max_model_len=4096, gpu_memory_utilization=0.92)
    per_seq = 4096 * 128 * 1024  # Llama-3-8B: 128 KiB of KV per token (8 KV heads x 128 x 32 layers x 2 x 2 B)
    assert fit.kv_bytes_per_token == 128 * 1024 and fit.kv_bytes(1) == per_seq
    assert fit.max_batch == fp.num_blocks // (4096 // 64)  # whole 64-token blocks (vLLM v0.34.0's default) each
    assert fit.kv_bytes(fit.max_batch) <= fit.kv_budget_bytes < fit.kv_bytes(fit.max_batch + 1)
    assert fit.fits(fit.max_batch) and not fit.fits(fit.max_batch + 1)
    assert fit.kv_bytes(256) == 128 * GiB and not fit.fits(256)  # the 256 x 4096 x 128 KiB = 128 GiB
    assert f"at most **{fit.max_batch:,}**" in fit.why(256) and "does not fit" in fit.why(256)
    assert "and fits" in fit.why(1)
    assert fit.kv_gib(256) == 128.0 and fit.kv_budget_gib == fit.kv_budget_bytes / GiB
    assert fit.gpu_name == "H100 SXM 80GB" and "H100 SXM 80GB has" in fit.why(1)


def test_weights_that_leave_no_room_fit_no_batch():
    fit = lab.batch_fit("llama-2-70b", "a100-40gb", 4096)  # 140 GB of bf16 weights on a 40 GB card
    assert fit.max_batch == 0 and not fit.fits(1) and "Not even one" in fit.why(1)
    assert fit.kv_budget_bytes < 0 and fit.kv_budget_gib == 0.0  # nothing left is shown as 0, not negative
    int4 = lab.batch_fit("llama-2-70b", "a100-40gb", 4096, "int4").weights_bytes
    assert fit.weights_bytes // 4 < int4 < fit.weights_bytes // 3.9  # the embedding and lm_head stay in bf16


def test_sweep_marks_each_batch_and_adds_the_largest_that_fits():
    sweep = lab.batch_sweep("llama-3-8b", "h100-sxm", 4096)
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    assert sweep.fit == fit and sweep.group_size == 4  # Llama-3-8B: 32 query heads over 8 KV heads
    assert [p.batch for p in sweep.points] == sorted({*lab.SWEEP_BATCHES, fit.max_batch})
    assert sweep.largest.batch == 256 and not sweep.largest.fits
    for p in sweep.points:
        assert p.fits == (p.kv_bytes <= fit.kv_budget_bytes)
        assert p.kv_bytes == p.batch * 4096 * 128 * 1024
        # attention's intensity is the group size (32 query / 8 KV heads) at every batch; the total's grows
        assert p.attention_intensity == pytest.approx(4.0, rel=0.01)
        # attention reads every sequence's KV (32 layers x 8 KV heads x 128 x K and V x 2 bytes) plus q in / out
        assert p.kv_bytes <= p.attention_bytes <= 1.01 * p.kv_bytes < p.step_bytes
        assert p.kv_share_pct == pytest.approx(100 * p.attention_bytes / p.step_bytes)
    assert sweep.attention_intensity == sweep.points[0].attention_intensity
    shares = [p.kv_share_pct for p in sweep.points]
    assert shares == sorted(shares) and shares[-1] > 80  # KV reads take over the step: the plateau
    assert [p.intensity for p in sweep.points] == sorted(p.intensity for p in sweep.points)


def test_sweep_rows_keep_the_table_columns():
    sweep = lab.batch_sweep("llama-3-8b", "h100-sxm", 4096)
    rows = sweep.rows()
    assert list(rows[0]) == [
        "batch",
        "fits in memory",
        "KV GiB",
        "FLOP per byte",
        "attention FLOP per byte",
        "KV share of bytes %",
        "tokens per s",
        "bound",
    ]
    for r, p in zip(rows, sweep.points, strict=True):
        assert r["batch"] == p.batch and r["fits in memory"] == ("yes" if p.fits else "no")
        assert r["KV GiB"] == p.batch * 4096 * 128 * 1024 / GiB and r["KV share of bytes %"] == p.kv_share_pct
        assert (r["tokens per s"], r["bound"]) == (p.tokens_per_s, p.bound) and r["bound"] in ("memory", "compute")


def test_context_problem_names_the_models_limit():
    assert lab.context_problem("llama-2-7b", 4096) is None
    message, fix = lab.context_problem("llama-2-7b", 4097)
    assert message == "llama-2-7b reads at most 4,096 tokens of context; 4,097 is an impossible setting."
    assert fix == "lower the context length to 4,096 or less, or pick a model with a longer context."
    with pytest.raises(ValueError, match="unknown model"):
        lab.context_problem("gpt-9", 1)


def test_mbu_is_achieved_bytes_over_the_machines_best():
    machine = [timed("gemv", 20e9, 1.0, 1.0), timed("gemm", 2e9, 1.0, 1.0)]  # 20 and 2 GB/s
    assert lab.model_bandwidth_utilization(timed("demo", 5e9, 1.0, 1.0), machine) == 0.25
    with pytest.raises(ValueError, match="no machine bandwidth"):
        lab.model_bandwidth_utilization(timed("demo", 5e9, 1.0, 1.0), [])


def test_machine_and_demo_measurements_in_the_pages_units():
    # GEMV: 64 MB in 10 ms (6.4 GB/s), 32 MFLOP; GEMM: 8 MB in 20 ms, 1,024 MFLOP, 256 tokens per byte read
    machine = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.01), timed("gemm", 8e6, 1024e6, 0.02, batch=256))
    assert machine.gemv_gb_per_s == pytest.approx(6.4) and machine.best_gb_per_s == pytest.approx(6.4)
    assert machine.gemv_gflops == pytest.approx(3.2) and machine.gemm_gflops == pytest.approx(51.2)
    assert machine.reuse_gain == pytest.approx(16.0)  # 51.2 / 3.2 GFLOP/s
    assert [r["name"] for r in machine.rows()] == ["gemv", "gemm"] and machine.rows()[1]["GFLOP_per_s"] == 51.2
    demo = lab.DemoDecode(timed("demo", 3.2e6, 1e6, 0.002), machine)  # 3.2 MB in 2 ms: 1.6 GB/s
    assert demo.gb_per_s == pytest.approx(1.6) and demo.mbu == pytest.approx(0.25)
    assert demo.ms_per_token == pytest.approx(2.0) and demo.mb_per_step == pytest.approx(3.2)
    assert demo.rows() == [demo.step.row()]
    faster = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.005), machine.gemm)  # 12.8 GB/s
    assert demo.against(faster).mbu == pytest.approx(0.125) and demo.against(faster).step is demo.step


def test_measure_demo_times_the_machine_only_when_it_is_not_measured(monkeypatch):
    calls = []
    gemv, gemm = timed("gemv", 64e6, 32e6, 0.01), timed("gemm", 8e6, 1024e6, 0.02, batch=256)
    monkeypatch.setattr(lab, "measure_machine", lambda: calls.append("machine") or [gemv, gemm])
    ceilings = []

    def demo_decode(max_bytes_per_s):
        ceilings.append(max_bytes_per_s)
        return calls.append("demo") or timed("demo", 3.2e6, 1, 0.002)

    monkeypatch.setattr(lab, "measure_demo_decode", demo_decode)
    assert lab.measure_here() == lab.MachineBandwidth(gemv, gemm) and calls == ["machine"]
    demo = lab.measure_demo()
    # the machine first: its best bandwidth is the ceiling the step is checked against
    assert demo.machine == lab.MachineBandwidth(gemv, gemm) and calls == ["machine", "machine", "demo"]
    given = lab.MachineBandwidth(gemm, gemv)
    assert lab.measure_demo(given).machine is given and calls[-1] == "demo"
    assert ceilings == [6.4e9, gemv.bytes_per_s]  # the step may not stream faster than the machine's best


def test_bytes_per_op_add_up_to_the_bytes_per_token():
    for batch in (1, 64):
        lesson = lab.lesson("llama-3-8b", "h100-sxm", batch, 4096)
        ops = lesson.bytes_per_op()
        assert [o.op for o in ops] == ["attention", "qkv/o projections", "mlp", "lm_head"]
        assert sum(o.mb_per_token for o in ops) * 1e6 == pytest.approx(lesson.bytes_per_token)
        assert lesson.bytes_per_token_rows() == [{"op": o.op, "MB per token": o.mb_per_token} for o in ops]
        # the KV cache each sequence reads is its own: 4096 tokens x 128 KiB whatever the batch
        assert ops[0].mb_per_token * 1e6 == pytest.approx(4096 * 128 * 1024, rel=0.01)
    assert lesson.gb_per_token == pytest.approx(lesson.bytes_per_token / 1e9)
    assert (lesson.bandwidth_tb_per_s, lesson.peak_tflops) == (3.35, 989.0)  # H100 SXM datasheet
    assert lesson.decode_limit == "bandwidth" and lesson.gpu.name == "H100 SXM 80GB"


def test_decode_step_bytes_are_weights_plus_the_kv_it_reads():
    # token k (2..n) attends over prompt + k - 1 tokens: for prompt 16 and n = 8, a mean of 20 tokens
    assert measure.decode_kv_read_bytes(4096, 16, 8) == 4096 * 20
    with pytest.raises(ValueError, match="new_tokens"):
        measure.decode_kv_read_bytes(4096, 16, 1)

    class FakeLLM:
        kv_bytes_per_token = 1000

        def __init__(self) -> None:
            self.model = torch.nn.Linear(8, 4)  # 36 fp32 parameters

        def generate(self, prompts, params):
            return []

    with pytest.MonkeyPatch.context() as mp:  # a fake clock: each generated token costs 1 s
        clock = [0.0]
        mp.setattr(measure.time, "perf_counter", lambda: clock[0])
        FakeLLM.generate = lambda self, prompts, params: clock.__setitem__(0, clock[0] + params.max_tokens)
        m = measure.measure_llm_decode(FakeLLM(), prompt_len=4, new_tokens=6, repeats=1)
    assert m.bytes_moved == 36 * 4 + 1000 * (4 + 3) and m.seconds == pytest.approx(1.0)


def test_claims_check_the_fit_marks_and_report_mbu(monkeypatch):
    gemv, gemm = timed("gemv", 40e9, 1.0, 2.0), timed("gemm", 1e9, 1.0, 2.0, batch=256)  # 20 and 0.5 GB/s
    demo = timed("demo", 1e9, 1.0, 0.5)  # 2 GB/s
    monkeypatch.setattr(lab, "measure_machine", lambda: [gemv, gemm])
    monkeypatch.setattr(lab, "measure_demo_decode", lambda max_bytes_per_s: demo)
    entry = lab.claims()["bandwidth"]
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    assert entry["holds"] is True and entry["mbu"] == 0.1 and entry["max_batch"] == fit.max_batch
    assert (entry["machine_GB_per_s"], entry["demo_GB_per_s"], entry["demo_ms_per_step"]) == (20.0, 2.0, 500.0)
    assert entry["sweep"][256] == "no" and entry["sweep"][1] == "yes" and entry["shown_fitting_beyond_capacity"] == []
    assert entry["attention_FLOP_per_byte"] == [4.0]

    def missing(max_bytes_per_s):
        raise FileNotFoundError("models/demo")

    monkeypatch.setattr(lab, "measure_demo_decode", missing)
    assert lab.claims()["bandwidth"]["holds"] is False


def test_defaults_are_a_real_catalog_setting():
    d = lab.DEFAULTS
    assert d["model"] in MODELS and d["context"] <= MODELS[d["model"]].max_context and d["batch"] <= lab.MAX_BATCH


def test_decode_bytes_are_weights_plus_kv_and_time_is_bytes_over_bandwidth():
    spec, gpu = MODELS["llama-3-8b"], GPUS["h100-sxm"]
    lesson = lab.lesson("llama-3-8b", "h100-sxm", 1, 4096)
    # Decode streams every weight except the embedding table (one row is looked up) plus the KV cache;
    # activations add a little traffic on top, nothing else should.
    streamed_params = spec.num_params - spec.vocab_size * spec.hidden_size
    weights_and_kv = streamed_params * 2 + spec.kv_bytes_per_token(2) * 4096
    assert weights_and_kv <= lesson.bytes_per_token <= 1.02 * weights_and_kv
    assert lesson.ms_per_token == pytest.approx(lesson.decode.bytes / gpu.bandwidth_bytes_per_s * 1e3)
    assert lesson.decode.bound == "memory" and lesson.prefill.bound == "compute"
    assert lesson.decode.intensity < 2 < gpu.ridge_point < lesson.prefill.intensity
    decode, prefill = lesson.points()
    assert (decode.name, prefill.name) == ("decode (batch 1)", "prefill (batch 1)")
    assert decode.intensity == lesson.decode.intensity and prefill.intensity == lesson.prefill.intensity
    # a memory-bound step attains intensity x bandwidth; a compute-bound one the peak
    assert decode.flops == pytest.approx(lesson.decode.intensity * gpu.bandwidth_bytes_per_s, rel=1e-9)
    assert prefill.flops == pytest.approx(gpu.bf16_flops, rel=1e-9)
    assert "bandwidth-limited" in lesson.verdict()


def test_batch_sweep_throughput_rises():
    sweep = lab.batch_sweep("llama-3-8b", "h100-sxm", 1024)
    tps = [p.tokens_per_s for p in sweep.points]
    assert tps == sorted(tps) and tps[-1] > 10 * tps[0]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("nope", "h100-sxm", 1, 10), "unknown model"),
        (("llama-3-8b", "nope", 1, 10), "unknown GPU"),
        (("llama-3-8b", "h100-sxm", 0, 10), "batch size"),
        (("llama-3-8b", "h100-sxm", 1, 10**6), "maximum context"),
    ],
)
def test_lesson_rejects_bad_config(args, match):
    with pytest.raises(ValueError, match=match):
        lab.lesson(*args)


def test_an_mbu_no_machine_can_produce_is_never_shown_as_a_measurement():
    # the page once showed an MBU of 210,973,748.7 %: a 0.14 ns step against a 6.4 GB/s machine
    machine = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.01), timed("gemm", 8e6, 1024e6, 0.02, batch=256))
    impossible = lab.DemoDecode(timed("demo", 3.2e6, 1e6, 1.4e-10), machine)
    assert impossible.mbu > 1 and not impossible.measured and impossible.mbu_text == lab.TOO_NOISY
    shown = [value for _, value, _ in impossible.metrics()] + [impossible.caption()]
    assert not any("%" in text for text in shown) and shown[1:3] == [lab.TOO_NOISY, lab.TOO_NOISY]
    assert "no MBU is shown" in impossible.caption()
    exactly_full = lab.DemoDecode(timed("demo", 6.4e6, 1e6, 0.001), machine)  # 6.4 GB/s: 100 %, possible
    assert exactly_full.measured and exactly_full.mbu_text == "100.0%"
    possible = lab.DemoDecode(timed("demo", 3.2e6, 1e6, 0.002), machine)
    labels = [label for label, _, _ in possible.metrics()]
    assert [value for _, value, _ in possible.metrics()] == ["2.00 ms", "1.60 GB/s", "25.0%"]
    assert labels[2] == "Model bandwidth utilization (MBU)" and "25.0% of the 6.4 GB/s" in possible.caption()
    # a later, slower measurement of the machine makes the same step impossible: then it is not shown either
    slower = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.1), machine.gemm)  # 0.64 GB/s
    assert possible.against(slower).mbu_text == lab.TOO_NOISY


def test_a_too_noisy_step_measures_the_machine_again_then_says_so(monkeypatch):
    slow = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.1), timed("gemm", 8e6, 1024e6, 0.02, batch=256))
    fast = lab.MachineBandwidth(timed("gemv", 64e6, 32e6, 0.01), slow.gemm)
    machines, ceilings = iter([fast, slow]), []
    monkeypatch.setattr(lab, "measure_here", lambda: next(machines))

    def demo_decode(max_bytes_per_s):
        ceilings.append(max_bytes_per_s)
        if len(ceilings) == 1:
            raise measure.TooNoisy("too noisy to measure now: ...")
        return timed("demo", 3.2e6, 1e6, 0.002)

    monkeypatch.setattr(lab, "measure_demo_decode", demo_decode)
    demo = lab.measure_demo(slow)  # a machine measurement slowed by load: the honest step looked impossible
    assert demo.machine is fast and ceilings == [slow.best_bytes_per_s, fast.best_bytes_per_s] and demo.measured

    def never(max_bytes_per_s):
        raise measure.TooNoisy("too noisy to measure now: ...")

    machines = iter([slow, slow])
    monkeypatch.setattr(lab, "measure_demo_decode", never)
    with pytest.raises(lab.TooNoisy, match="too noisy to measure now"):
        lab.measure_demo(fast)
    monkeypatch.setattr(lab, "measure_here", lambda: fast)
    entry = lab.claims()["bandwidth"]
    assert entry["holds"] is False and "too noisy" in entry["error"]
