"""Lesson 4 page (AppTest): every widget at its extremes, guided errors, and the waste numbers move as they should."""

import re

import pytest
from streamlit.testing.v1 import AppTest


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def callout(at: AppTest) -> str:
    """The "N slots are never used" box (the page header adds other info boxes)."""
    return next(i.value for i in at.info if "slots are never used" in i.value)


def pct(at: AppTest, label: str) -> float:
    return float(metrics(at)[label].rstrip("%"))


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("fragmentation", timeout=60)
    app.run()
    assert not app.exception and not app.error
    return app


def test_defaults_show_the_callout_and_static_vs_paged(at):
    shown = metrics(at)
    assert "2,048 reserved" in callout(at)
    assert int(shown["Running at once, paged"]) > int(shown["Running at once, static Max"])
    assert 0 < pct(at, "KV holding live tokens, static Max") < 50  # the paper's Orca (Max): 20.4%
    assert "fragmentation" in at.session_state["progress"]["visited"]
    table = next(t.value for t in at.dataframe if "paper: stored %" in t.value.columns)
    assert list(table["paper: stored %"]) == [20.4, 26.8, 38.2, 96.3]
    assert [s.split(" (")[0] for s in table["server"]] == ["static Max", "static Pow2", "static Oracle", "paged"]
    assert table["stored %"].iloc[3] > table["stored %"].iloc[:3].max()  # paged stores the most, same trace
    text = " ".join(m.value for m in at.markdown)
    assert "Orca (Max) 20.4%, Orca (Pow2) 26.8%, Orca (Oracle) 38.2%, vLLM 96.3%" in text
    reserving = ("max_model_len", "a power of two", "the exact final length")
    for stored, how in zip(table["stored %"].iloc[:3], reserving, strict=True):
        assert f"**{stored:.1f}%** reserving {how}" in text  # the sentence says what the table says
    assert f"**{table['stored %'].iloc[3]:.1f}%** paged" in text
    held, stored = (int(n.replace(",", "")) for n in re.search(r"held ([\d,]+) slots and only ([\d,]+)", text).groups())
    assert shown["Unused slots at the peak"] == f"{held - stored:,}"
    assert "20.4%–38.2%" not in text  # never one range for "real systems"


def test_shorter_reservations_hold_more_live_tokens(at):
    at.select_slider(key="frag_max_len").set_value(512).run()
    short = pct(at, "KV holding live tokens, static Max")
    assert "512 reserved" in callout(at)
    at.select_slider(key="frag_max_len").set_value(4096).run()
    assert not at.exception and not at.error
    assert short > pct(at, "KV holding live tokens, static Max")
    at.select_slider(key="frag_max_len").set_value(32768).run()  # more than one reservation fits in the pool?
    assert not at.exception
    assert len(at.error) == 1 and "less than one 32,768-token reservation" in at.error[0].value
    assert "How to fix" in at.error[0].value
    at.select_slider(key="frag_max_len").set_value(2048).run()
    assert not at.error


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("frag_rate", [0.5, 64.0, 8.0]),
        ("frag_requests", [20, 400, 200]),
    ],
)
def test_sliders_at_extremes(at, key, values):
    for v in values:
        at.slider(key=key).set_value(v).run()
        assert not at.exception and not at.error, (key, v)
        assert metrics(at)["Running at once, static Max"]


def test_model_gpu_and_traffic_choices(at):
    at.selectbox(key="frag_model").set_value("llama-2-70b").run()  # 140 GB of weights on a 40 GB card
    assert not at.exception and "pick a bigger GPU" in at.error[0].value
    at.selectbox(key="frag_gpu").set_value("h200").run()  # 128 GiB of weights: still no room for KV at 0.9
    assert not at.exception and "leaves room for 0 KV tokens" in at.error[0].value
    at.selectbox(key="frag_model").set_value("llama-3.1-8b").run()
    assert not at.exception and not at.error
    at.selectbox(key="frag_dataset").set_value("rag").run()  # long prompts need max_model_len >= 2048
    assert not at.exception and not at.error
    at.select_slider(key="frag_max_len").set_value(512).run()
    assert "too short for rag" in at.error[0].value
    at.selectbox(key="frag_model").set_value("qwen2.5-0.5b")
    at.select_slider(key="frag_max_len").set_value(8192)
    at.selectbox(key="frag_dataset").set_value("alpaca").run()
    assert not at.exception and not at.error
    radio = next(r for r in at.radio if r.key.startswith("quiz_fragmentation."))
    radio.set_value(radio.options[0]).run()
    assert radio.key.removeprefix("quiz_") in at.session_state["progress"]["quiz"]
