"""Lesson 6 page (AppTest): at its defaults the real engine preempts and the KV pool binds; a larger pool takes
every preemption away, few seats make max_num_seqs bind, a budget below max_num_seqs is refused with the fix;
every widget is moved once (sliders, the simulator's GPU, the /metrics paste boxes, the quiz, the prediction)."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons.labs import pressure as lab
from tests.app.conftest import open_chart_tables


def shown(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def tables(at: AppTest, column: str) -> list[list[dict]]:
    """The page's tables (charts' data tables included) that have this column, in page order, as records."""
    return [t.value.to_dict("records") for t in open_chart_tables(at).dataframe if column in t.value.columns]


def sweep(at: AppTest) -> list[dict]:
    """The "traffic grows" chart's data (the first table of run summaries; the token budget's is the second)."""
    return tables(at, "binding limit")[0]


def budget_rows(at: AppTest) -> list[dict]:
    return tables(at, "binding limit")[-1]


def gpu_rows(at: AppTest) -> list[dict]:
    return tables(at, "requests/s")[0]


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("pressure", timeout=180)
    app.run()
    assert not app.exception and not app.error
    return app


def test_defaults_preempt_and_the_pool_binds(at):
    m = shown(at)
    assert int(m["Preemptions"]) > 0 and m["Limit that binds"] == "KV pool"
    assert m["Peak KV-cache usage"] == "100%" and int(m["Recomputed tokens"].replace(",", "")) > 0
    rows = sweep(at)  # the chart's data: one engine run per traffic level
    assert [r["requests per step"] for r in rows] == list(lab.SWEEP_RATES)
    assert rows[0]["preemptions"] == 0 and rows[-1]["preemptions"] > 0
    assert any("vllm:num_preemptions_total" in m.help for m in at.metric if m.label == "Preemptions")
    waiting = next(m for m in at.metric if m.label == "Peak waiting")
    assert "vllm:num_requests_waiting;" in waiting.help
    assert 'vllm:num_requests_waiting_by_reason{reason="capacity"}' in waiting.help


def test_growing_the_pool_removes_the_preemptions(at):
    at.select_slider(key="pr_blocks").set_value(lab.GROWN_POOL).run()
    assert not at.exception and not at.error
    m = shown(at)
    assert m["Preemptions"] == "0" and m["Recomputed tokens"] == "0" and m["Limit that binds"] == "neither"
    assert all(r["preemptions"] == 0 for r in sweep(at))
    at.select_slider(key="pr_blocks").set_value(lab.DEFAULTS["num_blocks"]).run()
    assert int(shown(at)["Preemptions"]) > 0


def test_few_seats_make_max_num_seqs_bind(at):
    at.select_slider(key="pr_seqs").set_value(2).run()
    assert not at.exception and not at.error
    m = shown(at)
    assert m["Limit that binds"] == "max_num_seqs" and m["Preemptions"] == "0" and m["Peak running"] == "2"
    at.select_slider(key="pr_seqs").set_value(lab.DEFAULTS["max_num_seqs"]).run()


def test_a_budget_below_max_num_seqs_is_refused_with_the_fix(at):
    at.select_slider(key="pr_seqs").set_value(32)
    at.select_slider(key="pr_budget").set_value(16).run()
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "16" in text and "32" in text and "max_num_batched_tokens" in text and "raise the token budget" in text
    assert not at.metric  # no dashboard for a server vLLM would not start; the rest of the page still runs
    assert len(tables(at, "binding limit")) == 1 and gpu_rows(at)  # no traffic sweep; budget and GPU parts run
    at.select_slider(key="pr_seqs").set_value(lab.DEFAULTS["max_num_seqs"])
    at.select_slider(key="pr_budget").set_value(lab.DEFAULTS["budget"]).run()
    assert not at.error and at.metric


def test_traffic_and_prompt_sliders(at):
    at.select_slider(key="pr_rate").set_value(lab.LOW_RATE).run()
    assert not at.exception and not at.error and shown(at)["Preemptions"] == "0"
    at.select_slider(key="pr_prompt").set_value(lab.PROMPT_LENS[-1]).run()
    assert not at.exception and not at.error
    at.select_slider(key="pr_rate").set_value(lab.DEFAULTS["rate"])
    at.select_slider(key="pr_prompt").set_value(lab.DEFAULTS["prompt_len"]).run()
    assert int(shown(at)["Preemptions"]) > 0


def test_token_budget_section_shows_the_trade(at):
    rows = budget_rows(at)
    assert [r["max_num_batched_tokens"] for r in rows] == list(lab.SWEEP_BUDGETS)
    assert rows[0]["TTFT p50 steps"] > rows[-1]["TTFT p50 steps"]
    assert rows[0]["largest step with decodes (tokens)"] <= lab.SWEEP_BUDGETS[0]


def test_gpu_select_runs_the_simulator(at):
    before = gpu_rows(at)
    assert before[-1]["preemptions"] > 0  # the default 40 GB card preempts at the highest rate
    at.selectbox(key="pr_gpu").set_value("a100-80gb").run()
    assert not at.exception and not at.error
    after = gpu_rows(at)
    assert sum(r["preemptions"] for r in after) < sum(r["preemptions"] for r in before)
    assert at.query_params.get("gpu") == ["a100-80gb"] or at.query_params.get("gpu") == "a100-80gb"


SCRAPE = "\n".join(
    [
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 37.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 12.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.99',
        "# TYPE vllm:num_preemptions counter",
        'vllm:num_preemptions_total{engine="0",model_name="m"} 40.0',
        "",
    ]
)


def test_metrics_paste_box_reads_a_scrape(at):
    at.text_area(key="pr_scrape").input(SCRAPE)
    at.text_area(key="pr_earlier").input(SCRAPE.replace(" 40.0", " 30.0"))
    at.number_input(key="pr_seats").set_value(256).run()
    assert not at.exception
    assert any("Limit that binds: the KV pool" in i.value for i in at.info)
    rows = tables(at, "signal")[0]
    assert any(r["metric"] == "vllm:num_requests_waiting" and r["value"] == "12" for r in rows)


def test_metrics_paste_box_gives_a_message_for_garbage(at):
    at.text_area(key="pr_scrape").input("**not** a scrape :red[x] \x00\x01").run()
    assert not at.exception
    assert at.warning and not any("Limit that binds" in i.value for i in at.info)
    at.text_area(key="pr_scrape").input("").run()
    assert not at.exception


def test_quiz_and_prediction(at):
    for radio in (r for r in at.radio if r.key.startswith("quiz_pressure.")):
        radio.set_value(radio.options[0]).run()
        assert not at.exception
    assert {k for k in at.session_state["progress"]["quiz"] if k.startswith("pressure.")} == {
        "pressure.binding",
        "pressure.preempt",
        "pressure.budget",
    }
    at.number_input(key="predict_pressure").set_value(4).run()
    at.button(key="predict_pressure_check").click().run()
    assert not at.exception
    assert any("Close" in m.value and "4 requests" in m.value for m in at.success)
    assert at.session_state["progress"]["predict"]["pressure"]["close"] is True


# A setting no other test here runs: its runs are not in the process-wide cache, so each costs a real run.
UNCACHED = {"pr_rate": 0.5, "pr_prompt": 96, "pr_blocks": 128, "pr_seqs": 64, "pr_budget": 512}


def test_a_session_past_its_allowance_of_new_runs_is_told_why_and_keeps_its_settings(app_test, monkeypatch):
    from lessons.run_limit import RunAllowance

    started: list[tuple] = []
    real = lab.run

    def counted(traffic, *args, **kwargs):
        started.append((traffic, args[1] if len(args) > 1 else kwargs.get("burst", False)))
        return real(traffic, *args, **kwargs)

    monkeypatch.setattr(lab, "run", counted)
    clock = [0.0]
    at = app_test("pressure", timeout=180)
    at.session_state["pr_run_allowance"] = RunAllowance(limit=2, window_s=60, clock=lambda: clock[0])
    for key, value in UNCACHED.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception and len(started) == 2  # the dashboard's run and one of the sweep's, then refused
    refusals = [w.value for w in at.warning if "new engine runs" in w.value]
    assert len(refusals) == 2  # the traffic sweep and the token budget sections each say why they are missing
    assert "started 2 new engine runs in the last 1 minute," in refusals[0] and "can run in 60 s" in refusals[0]
    assert shown(at)["Limit that binds"]  # what did run is shown
    assert all(at.session_state[key] == value for key, value in UNCACHED.items())  # no lost settings
    passes = 1
    while any("new engine runs" in w.value for w in at.warning):
        clock[0] += 60  # the window has room again
        before = len(started)
        at.run()
        passes += 1
        assert not at.exception and len(started) - before <= 2 and passes < 8
    # every setting of the page ran exactly once: runs already made (by anyone) are never charged again
    assert len(started) == len(set(started)) == 7 and passes == 4
    assert sweep(at) and budget_rows(at) and not at.error
