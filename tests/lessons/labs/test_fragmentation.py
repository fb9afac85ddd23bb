"""lessons/labs/fragmentation.py: static max-length reservation replayed over a trace, checked against the trace."""

import dataclasses
import math

import pytest

from engine.memory.footprint import serving_footprint
from lessons.labs import fragmentation as lab
from lessons.sim.simulate import simulate_model
from lessons.sim.traces import generate_trace

SETTINGS = dict(model="llama-2-13b", gpu="a100-40gb", dataset="sharegpt", num_requests=60, rate=8.0)


@pytest.fixture(scope="module")
def reports():
    return {n: lab.static_report(max_model_len=n, **SETTINGS) for n in (1024, 4096)}


def test_series_add_up_to_the_capacity_every_step(reports):
    rep = reports[1024]
    fp = serving_footprint("llama-2-13b", "a100-40gb", max_model_len=1024)
    assert rep.capacity_tokens == fp.kv_budget_bytes // fp.kv_bytes_per_token
    x, ys = rep.series()
    assert len(x) == len(rep.steps) <= lab.CHART_POINTS + 1 and list(ys) == list(lab.SERIES.values())
    # the chart's series are the table's columns, row by row (the table keeps the simulator's column names)
    rows = rep.rows()
    assert list(rows[0]) == ["time_s", *lab.SERIES, "running", "waiting"] and [r["time_s"] for r in rows] == x
    for col, label in lab.SERIES.items():
        assert ys[label] == [r[col] for r in rows]
    for i in range(len(x)):
        assert sum(col[i] for col in ys.values()) == rep.capacity_tokens
    assert all(v >= 0 for col in ys.values() for v in col)
    assert x == sorted(x)


def test_callout_is_the_median_request_of_the_same_trace(reports):
    rep = reports[4096]
    trace = generate_trace("sharegpt", 60, 8.0, seed=0, max_len=4096)
    finals = sorted(r.prompt_len + r.output_len for r in trace)
    ex = rep.example
    assert ex.used == finals[len(finals) // 2] == ex.prompt + ex.output
    assert ex.unused == 4096 - ex.used and ex.reserved == 4096
    assert f"{ex.unused:,} slots are never used" in rep.callout()
    # Llama-2-13B: 40 layers x 40 KV heads x 128 x K and V x 2 bytes = 800 KiB per token
    assert rep.kv_bytes_per_token == 800 * 1024 and rep.kv_kib_per_token == 800
    assert f"— {ex.unused * 800 / 1024:,.1f} MiB of KV for one request" in rep.callout()
    assert rep.trace.num_requests == 60
    assert rep.trace.prompt_mean == round(sum(r.prompt_len for r in trace) / 60, 2)
    assert rep.trace.output_mean == round(sum(r.output_len for r in trace) / 60, 2)


def test_longer_reservations_waste_more_and_paging_fits_more(reports):
    short, long = reports[1024], reports[4096]
    assert 0 < long.stored_fraction < short.stored_fraction < 1
    assert long.static.peak_concurrency <= short.static.peak_concurrency
    for rep in reports.values():
        assert rep.paged.peak_concurrency >= rep.static.peak_concurrency
        assert rep.paged.avg_waste < 0.1 < rep.static.avg_waste
        peak = rep.peak
        assert peak.unused == peak.held - peak.stored > 0
        assert peak.held <= peak.running * rep.max_model_len  # each running request reserves max_model_len
        assert math.isclose(rep.unused_gib_at_peak, peak.unused * rep.kv_bytes_per_token / 2**30)
        # independent: the busiest step of the Max run's own columns
        cols = simulate_model(
            generate_trace("sharegpt", 60, 8.0, seed=0, max_len=rep.max_model_len),
            "llama-2-13b",
            "a100-40gb",
            "static",
            max_model_len=rep.max_model_len,
            footprint=serving_footprint("llama-2-13b", "a100-40gb", max_model_len=rep.max_model_len),
            reservation="max_model_len",
        ).columns
        held = [s + r + i for s, r, i in zip(cols["stored"], cols["reserved"], cols["internal"], strict=True)]
        assert peak.held == max(held) and peak.stored == cols["stored"][held.index(max(held))]
        gain = rep.paged.peak_concurrency / rep.static.peak_concurrency
        assert rep.paged_concurrency_gain == gain >= 1
    rows = short.waste_rows()
    assert [r["server"].split(" (")[0] for r in rows] == ["static Max", "static Pow2", "static Oracle", "paged"]
    assert [r["paper: stored %"] for r in rows] == [20.4, 26.8, 38.2, 96.3]  # Kwon et al., Fig. 2, per policy


def test_every_policy_replays_the_same_trace_in_the_same_memory(reports):
    rep = reports[1024]
    trace = generate_trace("sharegpt", 60, 8.0, seed=0, max_len=1024)
    fp = serving_footprint("llama-2-13b", "a100-40gb", max_model_len=1024)
    assert list(rep.policies) == ["Max", "Pow2", "Oracle", "paged"] and rep.policies["Max"] is rep.static
    for key, reservation in (("Max", "max_model_len"), ("Pow2", "pow2"), ("Oracle", "oracle")):
        alone = simulate_model(
            trace, "llama-2-13b", "a100-40gb", "static", max_model_len=1024, footprint=fp, reservation=reservation
        ).summary
        assert rep.policies[key] == dataclasses.replace(alone, wall_s=rep.policies[key].wall_s)
    p = rep.policies
    assert p["Oracle"].avg_internal == 0  # it reserves exactly the final length: nothing is never used
    assert p["Max"].avg_internal > p["Pow2"].avg_internal > 0  # Pow2 rounds up at most 2x, Max to max_model_len
    assert p["paged"].avg_reserved == 0 and p["paged"].avg_external == 0  # blocks come when tokens do
    assert p["paged"].avg_waste < min(p[k].avg_waste for k in ("Max", "Pow2", "Oracle"))


def test_claims_compare_paged_with_each_static_policy(monkeypatch):
    monkeypatch.setitem(lab.DEFAULTS, "requests", 40)
    entry = lab.claims()["fragmentation"]
    rep = lab.static_report("llama-2-13b", "a100-40gb", 2048, "sharegpt", 40, 8.0)
    assert entry["waste_pct"] == {k: round(100 * s.avg_waste, 2) for k, s in rep.policies.items()}
    assert entry["holds"] is (
        entry["waste_pct"]["paged"] < min(entry["waste_pct"][k] for k in ("Max", "Pow2", "Oracle"))
    )
    assert entry["paper_stored_pct"] == {"Max": 20.4, "Pow2": 26.8, "Oracle": 38.2, "paged": 96.3}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "gpt-5"}, "unknown model"),
        ({"gpu": "tpu"}, "unknown GPU"),
        ({"dataset": "reddit"}, "unknown traffic"),
        ({"dataset": "rag", "max_model_len": 1024}, "too short for rag"),
        ({"num_requests": 0}, "number of requests 0"),
        ({"num_requests": 10_000}, "number of requests 10000"),
        ({"rate": 0.0}, "request rate 0.0"),
        ({"rate": math.inf}, "request rate inf"),
        ({"model": "llama-2-70b", "gpu": "l4"}, "pick a bigger GPU"),
    ],
)
def test_bad_settings_raise_with_guidance(kwargs, match):
    args = {**SETTINGS, "max_model_len": 2048, **kwargs}
    with pytest.raises(ValueError, match=match):
        lab.static_report(**args)


def test_policy_shares_are_the_runs_step_averages_and_the_papers_figures(reports):
    rep = reports[1024]
    shares = rep.shares()
    assert [s.key for s in shares] == ["Max", "Pow2", "Oracle", "paged"]
    for share in shares:
        run = rep.policies[share.key]
        assert share == rep.share(share.key)
        assert share.stored_pct == pytest.approx(100 - 100 * run.avg_waste)
        # held memory is stored + reserved + internal + external, nothing else
        total = share.stored_pct + share.reserved_pct + share.internal_pct + share.external_pct
        assert total == pytest.approx(100.0)
        assert share.paper_stored_pct == {"Max": 20.4, "Pow2": 26.8, "Oracle": 38.2, "paged": 96.3}[share.key]
        assert share.peak_running == run.peak_concurrency
    rows = rep.waste_rows()
    assert rows == [s.row() for s in shares]
    assert list(rows[0]) == [
        "server",
        "stored %",
        "paper: stored %",
        "reserved %",
        "internal %",
        "external %",
        "peak running",
        "tokens/s",
        "p95 wait s",
    ]
    assert rows[0]["server"] == "static Max (max_model_len)" and rows[3]["server"] == "paged (64-token blocks)"
    assert rows[0]["stored %"] == round(shares[0].stored_pct, 1) and rows[0]["p95 wait s"] == round(
        shares[0].p95_wait_s, 2
    )
    with pytest.raises(ValueError, match="policy 'LRU' is not in this report"):
        rep.share("LRU")


def test_the_pages_names_and_limits(reports):
    rep = reports[4096]
    assert (rep.model_name, rep.gpu_name) == ("Llama-2-13B", "A100 40GB SXM")
    assert rep.model_max_context == 4096 and not rep.beyond_training  # Llama 2 was trained on 4,096 tokens
    longer = lab.static_report(max_model_len=8192, **SETTINGS)
    assert longer.beyond_training
    assert "demo" not in lab.MODEL_CHOICES and "llama-2-13b" in lab.MODEL_CHOICES
    assert lab.TRAFFIC == ("sharegpt", "alpaca", "rag")
    assert lab.traffic_help().startswith("Prompt / output lengths: sharegpt: vLLM paper Fig. 11 means")
    assert lab.paper_stored_sentence() == "Orca (Max) 20.4%, Orca (Pow2) 26.8%, Orca (Oracle) 38.2%, vLLM 96.3%"
