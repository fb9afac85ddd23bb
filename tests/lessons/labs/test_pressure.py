"""Page 6's lab (lessons/labs/pressure.py) on the real engine: the settings' checks, the runs' counters against
the engine's own, which limit binds, the token budget's caps, the simulator's sweep, and the page's claims."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lessons import predictions
from lessons.diagnosis.metrics import BINDS_KV_POOL, BINDS_MAX_NUM_SEQS, BINDS_NEITHER, BINDS_UNKNOWN
from lessons.labs import pressure as lab


@pytest.fixture(scope="module")
def loaded():
    return lab.load_demo()


@pytest.fixture(scope="module")
def default_run(loaded):
    return lab.run(lab.Traffic(), loaded)


def test_percentile_is_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert lab.percentile(values, 50) == 3.0 and lab.percentile(values, 95) == 5.0
    assert lab.percentile(values, 20) == 1.0 and lab.percentile([], 50) == 0.0


def test_arrivals_are_seeded_poisson_in_steps():
    slow, fast = lab.arrival_steps(0.05), lab.arrival_steps(0.5)
    assert slow == lab.arrival_steps(0.05) and slow[0] == fast[0] == 0
    assert slow == sorted(slow) and len(slow) == lab.NUM_REQUESTS
    assert fast[-1] < slow[-1]  # more traffic: the same requests arrive sooner
    assert len({tuple(p) for p in lab.prompts(48)}) == lab.NUM_REQUESTS  # distinct prompts, no shared prefix


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rate": 0.0}, "traffic 0.0"),
        ({"rate": float("nan")}, "traffic nan"),
        ({"prompt_len": 50}, "prompt_len=50"),
        ({"num_blocks": 7}, "num_blocks=7"),
        ({"max_num_seqs": True}, "max_num_seqs=True"),
        ({"budget": 100}, "budget=100"),
    ],
)
def test_settings_that_cannot_run_name_the_value(change, words):
    with pytest.raises(ValueError, match="pick one of|must be a number") as err:
        replace(lab.Traffic(), **change).check()
    assert words in str(err.value)


def test_a_budget_below_max_num_seqs_is_refused_as_vllm_does():
    with pytest.raises(ValueError) as err:
        lab.Traffic(max_num_seqs=32, budget=16).check()
    text = str(err.value)
    assert "must be greater than or equal to max_num_seqs (32)" in text and "max_num_batched_tokens (16)" in text
    assert "raise the token budget to at least 32" in text and "lower max_num_seqs to at most 16" in text


def test_a_request_longer_than_the_pool_is_refused(monkeypatch):
    # every offered pool holds one request of every offered prompt; longer outputs would not fit
    monkeypatch.setattr(lab, "OUTPUT_TOKENS", 200)
    with pytest.raises(ValueError, match="one request ends with 328 tokens .* at least 21 blocks"):
        lab.Traffic(prompt_len=128, num_blocks=16).check()


def test_default_run_preempts_and_its_counters_are_the_engines(default_run):
    r = default_run
    assert r.preemptions > 0 and r.recomputed_tokens > 0 and r.binding == "KV pool"
    assert r.peak_kv_usage == 1.0 and r.peak_waiting > 0
    assert sum(q.preemptions for q in r.requests) == r.preemptions  # per request (RequestOutput) = the counter
    assert len(r.requests) == lab.NUM_REQUESTS
    counters = [s.preemptions for s in r.steps]
    assert counters == sorted(counters)  # a counter never falls
    for s in r.steps:
        assert 0.0 <= s.kv_usage <= 1.0 and s.running <= r.traffic.max_num_seqs
        assert s.running + s.waiting <= lab.NUM_REQUESTS
        assert s.prefill_tokens + s.decode_tokens <= r.traffic.budget
    assert all(q.ttft_steps >= 1 and q.ttft_ms > 0 and q.tpot_ms > 0 for q in r.requests)
    # a preempted request recomputes at most what it had: prompt + output, each time
    assert r.recomputed_tokens <= r.preemptions * r.traffic.request_tokens
    assert "KV pool" in r.binding_sentence() and f"{r.preemptions} times" in r.binding_sentence()


def test_runs_are_the_same_on_every_machine(loaded, default_run):
    again = lab.run(lab.Traffic(), loaded)
    strip = [(s.running, s.waiting, s.kv_usage, s.preemptions, s.recomputed_tokens) for s in again.steps]
    assert strip == [(s.running, s.waiting, s.kv_usage, s.preemptions, s.recomputed_tokens) for s in default_run.steps]
    assert [q.ttft_steps for q in again.requests] == [q.ttft_steps for q in default_run.requests]


def test_a_larger_pool_or_less_traffic_removes_preemptions(loaded):
    grown = lab.run(replace(lab.Traffic(), num_blocks=lab.GROWN_POOL), loaded)
    light = lab.run(replace(lab.Traffic(), rate=lab.LOW_RATE), loaded)
    for r in (grown, light):
        assert r.preemptions == 0 and r.recomputed_tokens == 0 and r.binding == "neither"
        assert r.peak_waiting == 0 and "Neither" in r.binding_sentence()


def test_few_seats_make_max_num_seqs_bind(loaded):
    r = lab.run(replace(lab.Traffic(), max_num_seqs=2, budget=16), loaded)
    assert r.binding == "max_num_seqs" and r.peak_running == 2 and r.preemptions == 0 and r.peak_kv_usage < 1
    assert "raise max_num_seqs" in r.binding_sentence()


def test_token_budget_caps_every_step_and_delays_first_tokens(loaded):
    sweep = lab.budget_sweep(lab.Traffic(), loaded)
    assert [r.traffic.budget for r in sweep.runs] == list(lab.SWEEP_BUDGETS)
    assert all(r.traffic.num_blocks == lab.GROWN_POOL and r.burst for r in sweep.runs)
    for r in sweep.runs:
        assert r.max_step_tokens <= r.traffic.budget and r.preemptions == 0
    small, large = sweep.smallest, sweep.largest
    assert small.ttft_steps(50) > large.ttft_steps(50)
    assert large.max_step_tokens > small.traffic.budget  # the burst's prompts went into one step together
    # The page's sentence and caption are the runs' own numbers, smallest budget first.
    outcome = sweep.outcome()
    assert outcome.startswith(f"With a budget of **{small.traffic.budget}** tokens")
    assert f"**{large.traffic.budget}**" in outcome and f"a {large.max_step_tokens}-token step" in outcome
    assert f"after {small.ttft_steps(50):g} steps" in outcome and f"after {large.ttft_steps(50):g} steps" in outcome
    caption = sweep.caption()
    assert f"a {lab.GROWN_POOL}-block pool with {small.traffic.prompt_len}-token prompts" in caption
    assert f"max_num_seqs {small.traffic.max_num_seqs}," in caption


def test_budget_settings_respect_max_num_seqs():
    assert [t.budget for t in lab.budget_settings(lab.Traffic(max_num_seqs=32, budget=32))] == [64, 256, 512]
    assert [t.budget for t in lab.budget_settings(lab.Traffic(max_num_seqs=64, budget=64))] == [64, 256, 512]
    assert all(t.budget >= t.max_num_seqs for t in lab.budget_settings(lab.Traffic(max_num_seqs=64, budget=64)))


def test_rate_settings_sweep_only_the_rate():
    runs = lab.rate_settings(lab.Traffic(num_blocks=48))
    assert [t.rate for t in runs] == list(lab.SWEEP_RATES) and {t.num_blocks for t in runs} == {48}


def test_gpu_sweep_is_simulated_and_a_bigger_gpu_preempts_less():
    small, big = lab.gpu_sweep("a100-40gb"), lab.gpu_sweep("a100-80gb")
    assert [p.rate for p in small.points] == list(lab.GPU_RATES)
    assert small.points[0].preemptions == 0 and small.points[-1].preemptions > 0
    assert big.capacity_tokens > 2 * small.capacity_tokens
    assert sum(p.preemptions for p in big.points) < sum(p.preemptions for p in small.points)
    assert all(0 <= p.peak_kv_usage <= 1 for p in small.points)
    with pytest.raises(ValueError, match="pick one of a100-40gb"):
        lab.gpu_sweep("rtx-3090")  # Llama-2-13B's bf16 weights alone fill a 24 GB card


def test_scrape_verdicts_all_have_words():
    assert set(lab.SCRAPE_BINDING) == {BINDS_KV_POOL, BINDS_MAX_NUM_SEQS, BINDS_NEITHER, BINDS_UNKNOWN}


def test_prediction_uses_the_page_defaults():
    d = lab.DEFAULTS
    assert (predictions.PRESSURE_BLOCKS, predictions.PRESSURE_PROMPT, predictions.PRESSURE_OUTPUT) == (
        d["num_blocks"],
        d["prompt_len"],
        lab.OUTPUT_TOKENS,
    )
    pred = predictions.for_page("pressure")
    assert pred.answer == d["num_blocks"] // lab.Traffic().request_blocks == 4
    assert (
        predictions.check("pressure", "8").close is False
        and "prompts' blocks" in predictions.check("pressure", "8").feedback
    )


def test_claims_hold_at_the_defaults():
    found = lab.claims()
    assert set(found) == {"pressure", "pressure.budget"}
    p, b = found["pressure"], found["pressure.budget"]
    assert p["holds"], p
    assert p["preemptions"]["low_traffic"] == 0 < p["preemptions"]["default"] and p["preemptions"]["grown_pool"] == 0
    assert b["holds"], b
    assert b["ttft_p50_steps"][0] > b["ttft_p50_steps"][-1]


def test_chart_summaries_say_the_numbers_the_charts_draw(loaded, default_run):
    said = default_run.chart_summary()
    assert f"peaks at {default_run.peak_kv_usage:.0%} of {lab.Traffic().num_blocks} blocks" in said
    assert f"preempts {lab.count_times(default_run.preemptions)}," in said and f"binds: {default_run.binding}." in said
    assert (lab.count_times(1), lab.count_times(0), lab.count_times(3)) == ("1 time", "0 times", "3 times")
    sweep = lab.rate_sweep(lab.Traffic(), loaded)
    lo, hi = sweep.runs[0], sweep.runs[-1]
    assert (
        f"At {lo.traffic.rate:g} new requests per step the engine preempts {lab.count_times(lo.preemptions)}"
        in sweep.summary()
    )
    assert f"at {hi.traffic.rate:g} it preempts {lab.count_times(hi.preemptions)}" in sweep.summary()
    budgets = lab.budget_sweep(lab.Traffic(), loaded)
    a, b = budgets.smallest, budgets.largest
    assert f"A budget of {a.traffic.budget} tokens" in budgets.summary()
    assert f"a {b.max_step_tokens}-token step" in budgets.summary()
    small, big = lab.gpu_sweep("a100-40gb"), lab.gpu_sweep("a100-80gb")
    first = next(p for p in small.points if p.preemptions)
    assert f"first preempts at {first.rate:g} requests/s ({lab.count_times(first.preemptions)})" in small.summary()
    assert big.summary().startswith("Simulated: ") and big.summary().endswith(".")
    if not any(p.preemptions for p in big.points):
        assert "preempts nothing up to" in big.summary()


def test_a_runs_point_carries_its_numbers_and_its_row_the_tables_columns(default_run):
    p = default_run.point()
    assert p.traffic == default_run.traffic and p.preemptions == default_run.preemptions
    assert (p.ttft_p50_steps, p.ttft_p95_steps) == (default_run.ttft_steps(50), default_run.ttft_steps(95))
    assert (p.ttft_p50_ms, p.tpot_p50_ms) == (default_run.ttft_ms(50), default_run.tpot_ms(50))
    assert (p.max_step_tokens, p.stall_ms) == (default_run.max_step_tokens, default_run.stall_ms)
    assert (p.binding, p.steps) == (default_run.binding, default_run.num_steps)
    row = p.row()
    assert list(row)[:6] == [
        "requests per step",
        "prompt tokens",
        "KV blocks",
        "max_num_seqs",
        "max_num_batched_tokens",
        "preemptions",
    ]
    assert row["TTFT p50 ms"] == round(p.ttft_p50_ms, 1) and row["its duration ms"] == round(p.stall_ms, 1)
    assert row["peak KV usage %"] == round(100 * default_run.peak_kv_usage, 1) and row["binding limit"] == p.binding
    assert lab.RateSweep((default_run,)).rows() == [row] == lab.BudgetSweep((default_run,)).rows()
    assert lab.RateSweep((default_run, default_run)).points() == (p, p)


def test_the_signals_are_named_as_vllm_exports_them():
    # vLLM v0.34.0, vllm/v1/metrics/loggers.py: counters gain `_total` in the scrape; the waiting gauge's split by
    # reason carries the label reason="capacity" (and "deferred")
    assert lab.METRICS == {
        "kv_usage": "vllm:kv_cache_usage_perc",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "waiting_capacity": 'vllm:num_requests_waiting_by_reason{reason="capacity"}',
        "preemptions": "vllm:num_preemptions_total",
        "ttft": "vllm:time_to_first_token_seconds",
        "tpot": "vllm:request_time_per_output_token_seconds",
        "itl": "vllm:inter_token_latency_seconds",
    }


def test_the_pasted_scrape_reader_knows_every_waiting_signal_the_page_names():
    from lessons.diagnosis import metrics

    assert lab.METRICS["waiting"] == metrics.WAITING
    assert lab.METRICS["waiting_capacity"].startswith(metrics.WAITING_BY_REASON + "{")
    assert lab.METRICS["kv_usage"] == metrics.KV_NEW and lab.METRICS["preemptions"] == metrics.PREEMPTIONS
