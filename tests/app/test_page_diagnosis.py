"""Lesson 7 page (AppTest): symptoms render, the reference fix resolves an incident and doing nothing does not,
fix widgets at their extremes never crash, the result is recorded; a pasted vLLM log is read into numbers."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lessons.diagnosis import get_scenario, scenario_ids
from lessons.labs import diagnosis as lab
from tests.app.conftest import open_chart_tables


@pytest.fixture
def at(app_test):
    app = app_test("diagnosis", timeout=60)
    app.run()
    assert not app.exception and not app.error
    return app


def set_fix(at: AppTest, param: str, value, suffix: str) -> None:
    key = f"diag_fix_{param}_{suffix}"
    if param == "model":
        at.selectbox(key=key).set_value(value)
    elif param in ("policy", "kv_cache_dtype", "quantization", "enforce_eager"):
        at.radio(key=key).set_value(value)
    else:
        at.select_slider(key=key).set_value(value)


def test_nothing_changed_is_not_resolved(at):
    assert any("OutOfMemoryError" in c.value for c in at.code)  # the incident's log lines
    at.button(key="diag_run").click().run()
    assert not at.exception
    assert at.warning and at.warning[0].value.startswith("NOT RESOLVED")
    assert not at.session_state["progress"]["diagnosis"]["chat-oom"]["resolved"]


@pytest.mark.parametrize("sid", scenario_ids())
def test_right_diagnosis_and_reference_fix_resolve(at, sid):
    at.selectbox(key="diag_scenario").set_value(sid).run()
    scenario = get_scenario(sid)
    suffix = f"{sid}_0"
    for d in scenario.diagnoses:
        if d.correct:
            at.checkbox(key=f"diag_dx_{d.id}_{suffix}").check()
    for param, value in scenario.reference_fix.items():
        set_fix(at, param, value, suffix)
    at.run()
    assert any(f"{next(iter(scenario.reference_fix))}" in m.value for m in at.markdown if "Changed" in m.value)
    at.button(key="diag_run").click().run()
    assert not at.exception and not at.error
    assert at.success and at.success[0].value.startswith("RESOLVED") and "diagnosis right" in at.success[0].value
    record = at.session_state["progress"]["diagnosis"][sid]
    assert record["resolved"] and record["diagnosis_correct"] and record["fixes"] == scenario.reference_fix
    assert any(c.value.startswith("vllm serve") or "vllm serve" in c.value for c in at.code)


def test_fix_widgets_at_extremes_and_variants(at):
    scenario = get_scenario("chat-oom")
    now = lab.current_values(scenario.config)
    for pick in (0, -1):
        for param, current in now.items():
            opts = lab.options_for(param, current)
            set_fix(at, param, opts[pick], "chat-oom_0")
        at.run()
        at.button(key="diag_run").click().run()
        assert not at.exception  # an impossible configuration is graded or shown as a guided error
        assert at.success or at.warning or (at.error and "How to fix" in at.error[0].value)
    at.number_input(key="diag_variant").set_value(lab.MAX_VARIANT).run()
    assert not at.exception and not at.error
    at.checkbox(key=f"diag_dx_weights-too-big_chat-oom_{lab.MAX_VARIANT}").check().run()
    at.button(key="diag_run").click().run()
    assert not at.exception and "diagnosis incomplete or wrong" in at.warning[0].value


FIXTURES = Path(__file__).parents[1] / "lessons" / "diagnosis" / "fixtures"


def table(at: AppTest, column: str) -> list[dict]:
    """The rows of the last table on the page with this column (the paste box comes after the incident)."""
    return [t.value for t in open_chart_tables(at).dataframe if column in t.value.columns][-1].to_dict("records")


def test_paste_a_real_v0_log_with_the_max_len_error(at):
    at.text_area(key="diag_paste_log").input((FIXTURES / "vllm-10517-29k-v0-maxlen-error.log").read_text()).run()
    assert not at.exception and not at.error
    found = {r["figure"]: r["value"] for r in table(at, "figure")}
    assert found["GPU blocks"] == "1478" and found["KV cache (GiB)"] == "2.89" and found["log format"] == "V0"
    assert any("max seq len (29000)" in w.value for w in at.warning)
    at.number_input(key="diag_paste_len").set_value(4000).run()
    room = next(m.value for m in at.markdown if "Your KV pool holds" in m.value)
    assert "23,648 tokens" in room and "**5 such requests fit at once**" in room  # 1478 blocks // 250 blocks each
    fixes = table(at, "change")
    by_change = {r["change"]: r for r in fixes}
    assert by_change["--kv-cache-dtype fp8"]["requests at once"] >= 2 * 5
    assert "--max-model-len 23552" in by_change
    bar = table(at, "part")  # the data table behind the memory bar
    assert {r["part"]: r["GiB"] for r in bar}["KV cache"] == 2.89


def test_paste_a_v1_log_and_an_oom_message(at):
    at.text_area(key="diag_paste_log").input((FIXTURES / "gpustack-runner-251-v1-cuda-graph.log").read_text())
    at.text_area(key="diag_paste_oom").set_value((FIXTURES / "vllm-2140-torch-oom.log").read_text()).run()
    assert not at.exception and not at.error
    found = {r["figure"]: r["value"] for r in table(at, "figure")}
    assert found["CUDA graphs (GiB)"] == "0.36" and found["OOM: tried to allocate (GiB)"] == "3.5"
    at.selectbox(key="diag_paste_model").set_value("llama-3-8b").run()  # KV bytes per token from the catalog
    fixes = {r["change"]: r for r in table(at, "change")}
    assert fixes["--enforce-eager"]["KV cache (GiB)"] == pytest.approx(6.87 + 0.36, abs=0.01)


@pytest.mark.parametrize("junk", ["hello", "\x00\x01 binary \ufffd" * 500, "GPU blocks: " + "9" * 3000])
def test_paste_garbage_gets_a_clear_message(at, junk):
    at.text_area(key="diag_paste_log").input(junk).run()
    assert not at.exception and not at.error
    assert any("No vLLM start-up figures" in i.value for i in at.info)


def outside_code_spans(markdown: str) -> str:
    """The text of ``markdown`` that CommonMark does not read as a code span (asserting nothing else is there)."""
    parser = pytest.importorskip("markdown_it").MarkdownIt("commonmark")
    tokens = [c for b in parser.parse(markdown) if b.type == "inline" for c in b.children]
    kinds = {t.type for t in tokens} - {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    assert not kinds, (kinds, markdown)
    return "".join(t.content for t in tokens if t.type == "text")


def test_paste_absurd_numbers_gets_notes_never_a_crash(at):
    # two lines: 10^14 KV tokens and a concurrency of 1e30 (the crash was 10^20 tokens beside a KV size)
    at.text_area(key="diag_paste_log").input(
        "INFO GPU KV cache size: 99999999999999999999 tokens\nINFO Available KV cache memory: 6.87 GiB\n"
        "INFO Maximum concurrency for 1000000000000 tokens per request: 1e30x\n"
        "INFO Loading model weights took 1000000000 GiB\ntotal_gpu_memory=80GiB gpu_memory_utilization=1.5"
    ).run()
    assert not at.exception and not at.error
    notes = [w.value for w in at.warning if "looks wrong" in w.value]
    assert len(notes) == 5, notes  # tokens, max_model_len, concurrency, weights, utilization
    at.selectbox(key="diag_paste_model").set_value("llama-3-8b").run()
    assert not at.exception and not at.error
    at.number_input(key="diag_paste_len").set_value(10_000_000).run()
    assert not at.exception and not at.error


def test_paste_impossible_combination_is_flagged(at):
    at.text_area(key="diag_paste_log").input(
        "total_gpu_memory=23.58GiB gpu_memory_utilization=0.90 model weights take 40.00GiB; reserved for KV Cache "
        "is 30.00GiB"
    ).run()
    assert not at.exception and not at.error
    assert any("cannot be larger than the GPU's total memory" in w.value for w in at.warning)


def test_a_pasted_error_line_is_shown_as_text(at):
    evil = "[click](https://evil.example/x) ![i](https://evil.example/i.png) :material/warning: $x^2$ ``` <b>b</b>"
    at.text_area(key="diag_paste_log").input(
        f"ValueError: The model's max seq len (40000) {evil} is larger than the maximum number of tokens that can be "
        "stored in KV cache (23648)."
    ).run()
    assert not at.exception and not at.error
    (shown,) = [w.value for w in at.warning if "Your log reports" in w.value]
    plain = outside_code_spans(shown)
    assert "max seq len (40000)" in plain and "evil" not in plain and "$" not in plain and ":material" not in plain
    assert "https://evil.example/x" in shown  # still there to read, inside a code span


def test_the_paste_boxes_hold_at_most_their_limits(at):
    from lessons.diagnosis import own_log
    from lessons.diagnosis.readlog import MAX_LOG_CHARS

    at.text_area(key="diag_paste_log").set_value("INFO x\n" * (MAX_LOG_CHARS // 7 + 10))
    at.text_area(key="diag_paste_oom").set_value("y" * (own_log.MAX_OOM_CHARS + 5)).run()
    assert not at.exception
    assert len(at.session_state["diag_paste_log"]) == MAX_LOG_CHARS  # cut on the server, not kept whole
    assert len(at.session_state["diag_paste_oom"]) == own_log.MAX_OOM_CHARS
