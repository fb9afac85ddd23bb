"""bench.fragmentation's JSON at a tiny trace: every policy's waste, and the trace statistics with their source."""

import json
import sys

from bench import fragmentation
from lessons.sim.traces import DATASETS, generate_trace, trace_stats


def test_main_reports_every_policy_and_the_trace(monkeypatch, capsys):
    argv = "fragmentation --json --num-requests 30 --repeats 1 --warmup 0 --seed 3".split()
    monkeypatch.setattr(sys, "argv", argv)
    fragmentation.main()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(record["waste"]) == {"static_max", "static_pow2", "static_oracle", "paged"}
    assert record["waste"] == {name: row["waste"] for name, row in record["policies"].items()}
    assert record["paged_waste"] == record["waste"]["paged"] and record["static_waste"] == record["waste"]["static_max"]
    assert all(0 <= w <= 1 for w in record["waste"].values())
    trace = record["trace"]
    expected = trace_stats(generate_trace("sharegpt", 30, 8.0, seed=3, max_len=2048))
    assert {k: trace[k] for k in expected} == expected  # the statistics of the trace that ran
    src = DATASETS["sharegpt"]
    assert trace["dataset"] == "sharegpt" and trace["seed"] == 3 and trace["source"] == src.source
    assert trace["source_lengths"] == {
        "prompt_mean": src.prompt_mean,
        "prompt_std": src.prompt_std,
        "output_mean": src.output_mean,
        "output_std": src.output_std,
    }
    assert trace["request_rate"] == 8.0 and trace["max_len"] == 2048
    assert record["setup"]["static_reservations"] == {
        "static_max": "max_model_len",
        "static_pow2": "pow2",
        "static_oracle": "oracle",
    }
