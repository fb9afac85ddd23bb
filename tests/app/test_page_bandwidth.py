"""Lesson 1 page (AppTest) and its arithmetic (lessons/labs/bandwidth.py)."""

import pytest
from streamlit.testing.v1 import AppTest

from engine.memory.catalog import GPUS, MODELS
from lessons.labs import bandwidth as lab


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def gb(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("bandwidth", timeout=30).run()
    assert not app.exception and not app.error
    return app


def test_widgets_at_extremes_rerun_cleanly(at):
    for model in (list(MODELS)[0], list(MODELS)[-1], "llama-3-8b"):
        at.selectbox(key="bw_model").set_value(model).run()
        assert not at.exception
    for gpu in (list(GPUS)[0], list(GPUS)[-1], "h100-sxm"):
        at.selectbox(key="bw_gpu").set_value(gpu).run()
        assert not at.exception
    for dtype in lab.WEIGHT_DTYPES[::-1]:
        at.selectbox(key="bw_dtype").set_value(dtype).run()
        assert not at.exception
    for batch in (1, 256, 8):
        at.slider(key="bw_batch").set_value(batch).run()
        assert not at.exception
    for context in (1, MODELS["llama-3-8b"].max_context, 4096):
        at.number_input(key="bw_context").set_value(context).run()
        assert not at.exception and not at.error
    assert "visited" in at.session_state["progress"] and "bandwidth" in at.session_state["progress"]["visited"]


def test_batch_shares_weight_bytes_and_faster_memory_shortens_the_step(at):
    at.selectbox(key="bw_model").set_value("llama-3-8b")
    at.selectbox(key="bw_dtype").set_value("bf16")
    at.selectbox(key="bw_gpu").set_value("h100-sxm")
    at.number_input(key="bw_context").set_value(1024)
    at.slider(key="bw_batch").set_value(1).run()
    one = metrics(at)
    assert one["Decode is limited by"] == "bandwidth"
    at.slider(key="bw_batch").set_value(64).run()
    many = metrics(at)
    assert gb(many["Bytes moved per generated token"]) < gb(one["Bytes moved per generated token"]) / 10
    at.slider(key="bw_batch").set_value(1)
    at.selectbox(key="bw_gpu").set_value("h200").run()
    faster = metrics(at)
    ms = lambda m: float(m["Decode step (roofline bound)"].split()[0])
    assert ms(faster) == pytest.approx(ms(one) * 3.35 / 4.8, rel=0.02)  # same bytes, 4.8 vs 3.35 TB/s


def test_impossible_context_shows_error_not_traceback(at):
    at.selectbox(key="bw_model").set_value("llama-2-7b")
    at.number_input(key="bw_context").set_value(100_000).run()
    assert not at.exception
    assert at.error and "4,096" in at.error[0].value and "How to fix" in at.error[0].value
    at.number_input(key="bw_context").set_value(2048).run()
    assert not at.error


def test_live_measurement_and_check(at):
    at.button(key="bw_measure").click().run()
    assert not at.exception
    shown = metrics(at)
    assert float(shown["Decode-like: achieved bandwidth"].split()[0].replace(",", "")) > 0
    rows = at.session_state["bw_measurements"]
    assert rows[1]["intensity"] > 10 * rows[0]["intensity"]  # the GEMM reuses each byte; the GEMV cannot
    radios = [r for r in at.radio if r.key.startswith("quiz_bandwidth.")]
    assert 1 <= len(radios) <= 3
    radios[0].set_value(radios[0].options[0]).run()
    assert "bandwidth.bound" in at.session_state["progress"]["quiz"]


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
    assert [p["name"] for p in lesson.points()] == ["decode (batch 1)", "prefill (batch 1)"]
    assert "bandwidth-limited" in lesson.verdict()


def test_batch_sweep_throughput_rises():
    rows = lab.batch_sweep("llama-3-8b", "h100-sxm", 1024)
    tps = [r["tokens per s"] for r in rows]
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


def test_demo_decode_button_measures_or_explains(at):
    at.button(key="bw_measure_demo").click().run()
    assert not at.exception
    demo = at.session_state["bw_demo_measurement"] if "bw_demo_measurement" in at.session_state else None
    if demo is None:  # weights not installed: a guided error, never a traceback
        assert any("demo model" in e.value for e in at.error)
    else:
        assert demo["seconds"] > 0 and demo["bytes_moved"] > 0
        spec = MODELS["demo"]
        # every weight (fp32 on CPU) plus the KV the steps read: 16-token prompt, 8 new tokens -> mean 20 tokens
        kv = 20 * spec.kv_bytes_per_token(4)
        assert demo["bytes_moved"] == pytest.approx(spec.num_params * 4 + kv, rel=0.01)
        mbu = metrics(at)["Model bandwidth utilization (MBU)"]
        machine = max(r["GB_per_s"] for r in at.session_state["bw_measurements"])
        assert float(mbu.rstrip("%")) == pytest.approx(100 * demo["GB_per_s"] / machine, abs=0.06)


def test_batches_beyond_the_kv_budget_are_marked_and_explained(at):
    at.selectbox(key="bw_model").set_value("llama-3-8b")
    at.selectbox(key="bw_gpu").set_value("h100-sxm")
    at.selectbox(key="bw_dtype").set_value("bf16")
    at.number_input(key="bw_context").set_value(4096)
    at.slider(key="bw_batch").set_value(64).run()
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    blocked = lambda: [w.value for w in at.warning if "does not fit" in w.value]  # noqa: E731
    assert not at.exception and not blocked()
    assert metrics(at)["Largest batch that fits"] == f"{fit.max_batch:,}"
    assert f"at most {fit.max_batch:,} sequences fit" in at.slider(key="bw_batch").help
    at.slider(key="bw_batch").set_value(256).run()
    assert not at.exception and len(blocked()) == 1 and "128.0 GiB of KV" in blocked()[0]
    shown = metrics(at)
    assert shown["KV cache of this batch"] == "128.0 GiB" and shown["Largest batch that fits"] == f"{fit.max_batch:,}"
    assert shown["KV budget on this GPU"] == f"{fit.kv_budget_bytes / 2**30:,.1f} GiB"
    sweep = next(t.value for t in at.dataframe if "fits in memory" in t.value.columns)
    assert list(sweep["fits in memory"]) == ["yes" if b <= fit.max_batch else "no" for b in sweep["batch"]]
    assert fit.max_batch in list(sweep["batch"]) and sweep["fits in memory"].iloc[-1] == "no"
    at.slider(key="bw_batch").set_value(1).run()
