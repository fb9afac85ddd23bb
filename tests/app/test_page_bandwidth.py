"""Lesson 1 page (AppTest): every widget at its extremes, the fit warnings, the live measurements and MBU."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from engine.memory.catalog import GPUS, MODELS
from lessons.labs import bandwidth as lab
from tests.app.conftest import open_chart_tables


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def gb(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


number = gb  # the number before the unit: "1,234.5 GB/s" -> 1234.5


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
    machine = at.session_state["bw_measurements"]
    assert machine.gemm.intensity > 10 * machine.gemv.intensity  # the GEMM reuses each byte; the GEMV cannot
    table = next(
        t.value for t in open_chart_tables(at).dataframe if "GFLOP_per_s" in t.value.columns and len(t.value) == 2
    )
    assert list(table["name"]) == [machine.gemv.name, machine.gemm.name]
    gain = float(next(m.value for m in at.markdown if "more useful work" in m.value).split("**")[1].rstrip("×"))
    assert gain == pytest.approx(machine.gemm.flops_per_s / machine.gemv.flops_per_s, abs=0.5)
    radios = [r for r in at.radio if r.key.startswith("quiz_bandwidth.")]
    assert 1 <= len(radios) <= 3
    radios[0].set_value(radios[0].options[0]).run()
    assert "bandwidth.bound" in at.session_state["progress"]["quiz"]


def shown_mbu(at: AppTest, step, machine) -> None:
    """The MBU the page shows: the step's bytes/s over the machine's best when that is possible (<= 100 %),
    else the words "too noisy to measure now" and no percentage anywhere in the demo's figures."""
    best = max(machine.gemv.bytes_per_s, machine.gemm.bytes_per_s)
    shown = metrics(at)
    mbu = shown["Model bandwidth utilization (MBU)"]
    if step.bytes_per_s <= best:
        assert float(mbu.rstrip("%")) == pytest.approx(100 * step.bytes_per_s / best, abs=0.06)
        assert float(mbu.rstrip("%")) <= 100.0
        assert number(shown["Demo model: bytes moved per second"]) == pytest.approx(step.bytes_per_s / 1e9, abs=0.006)
    else:  # a later machine measurement slowed by other work: the step now looks impossible, so it is not shown
        assert mbu == lab.TOO_NOISY and shown["Demo model: bytes moved per second"] == lab.TOO_NOISY


def test_demo_decode_button_measures_or_explains(at):
    # real timing on whatever machine runs the suite: every branch a busy machine can take is a valid outcome
    at.button(key="bw_measure_demo").click().run()
    assert not at.exception
    demo = at.session_state["bw_demo_measurement"] if "bw_demo_measurement" in at.session_state else None
    if demo is None:  # weights not installed, or too noisy on every try: a guided error, never a traceback
        assert any("demo model" in e.value or lab.TOO_NOISY in e.value for e in at.error)
        assert "Model bandwidth utilization (MBU)" not in metrics(at)
        return
    step = demo.step
    assert step.seconds > 0 and step.bytes_moved > 0
    spec = MODELS["demo"]
    # every weight (fp32 on CPU) plus the KV the steps read: 16-token prompt, 8 new tokens -> mean 20 tokens
    kv = 20 * spec.kv_bytes_per_token(4)
    assert step.bytes_moved == pytest.approx(spec.num_params * 4 + kv, rel=0.01)
    machine = at.session_state["bw_measurements"]
    assert step.bytes_per_s <= max(machine.gemv.bytes_per_s, machine.gemm.bytes_per_s)  # checked when measured
    shown_mbu(at, step, machine)
    assert number(metrics(at)["Demo model: time per generated token"]) == pytest.approx(1e3 * step.seconds, abs=0.006)
    # measuring the machine again: MBU follows the new measurement, the demo step stays
    at.button(key="bw_measure").click().run()
    assert not at.exception and at.session_state["bw_demo_measurement"].step is step
    shown_mbu(at, step, at.session_state["bw_measurements"])


def timed(name: str, bytes_moved: float, seconds: float, batch: int = 1):
    return lab.Measurement(name, "s", "float32", "cpu", 1, bytes_moved, 2.0, seconds, 1, batch)


@pytest.fixture
def fake_timings(monkeypatch):
    """Deterministic timings for the page: `machines` (MachineBandwidth per press) and `steps` (a Measurement,
    or an exception to raise, per decode timing) are consumed in order."""
    script = {"machines": [], "steps": []}
    monkeypatch.setattr(lab, "measure_here", lambda: script["machines"].pop(0))

    def decode(max_bytes_per_s):
        step = script["steps"].pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    monkeypatch.setattr(lab, "measure_demo_decode", decode)
    return script


def test_a_busy_machine_gets_too_noisy_to_measure_not_a_number(app_test, fake_timings):
    fast = lab.MachineBandwidth(timed("gemv", 64e6, 0.01), timed("gemm", 8e6, 0.02, 256))  # 6.4 GB/s
    slow = lab.MachineBandwidth(timed("gemv", 64e6, 1.0), fast.gemm)  # 0.4 GB/s best (the GEMM's)
    at = app_test("bandwidth", timeout=30).run()
    # every round of timing impossible, even after measuring the machine again: the page says so, shows no MBU
    noisy = lab.TooNoisy("too noisy to measure now: 3 rounds of timing gave per-token times of -0.1 ms")
    fake_timings["machines"] += [fast, fast]
    fake_timings["steps"] += [noisy, noisy]
    at.button(key="bw_measure_demo").click().run()
    assert not at.exception and any(lab.TOO_NOISY in e.value for e in at.error)
    assert "bw_demo_measurement" not in at.session_state and "Model bandwidth utilization (MBU)" not in metrics(at)
    # then a good timing: 3.2 MB in 2 ms is 1.6 GB/s, 25 % of 6.4 GB/s
    fake_timings["machines"].append(fast)  # nothing was kept from the failed press: the machine is measured first
    fake_timings["steps"].append(timed("demo", 3.2e6, 0.002))
    at.button(key="bw_measure_demo").click().run()
    assert metrics(at)["Model bandwidth utilization (MBU)"] == "25.0%" and not at.error
    # a noisy retry keeps what was measured (no lost state) and says why nothing new is shown
    fake_timings["steps"] += [noisy, noisy]
    fake_timings["machines"].append(slow)
    at.button(key="bw_measure_demo").click().run()
    assert any(lab.TOO_NOISY in e.value for e in at.error)
    assert metrics(at)["Model bandwidth utilization (MBU)"] == "25.0%"
    # the machine measured again while busy (0.4 GB/s): the 1.6 GB/s step is now impossible, so no MBU of 400 %
    fake_timings["machines"].append(slow)
    at.button(key="bw_measure").click().run()
    shown = metrics(at)
    assert shown["Model bandwidth utilization (MBU)"] == lab.TOO_NOISY and "400" not in str(shown)
    assert shown["Demo model: bytes moved per second"] == lab.TOO_NOISY and not at.exception
    assert fake_timings == {"machines": [], "steps": []}  # every scripted timing was used, none more


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
    sweep = next(t.value for t in open_chart_tables(at).dataframe if "fits in memory" in t.value.columns)
    assert list(sweep["fits in memory"]) == ["yes" if b <= fit.max_batch else "no" for b in sweep["batch"]]
    assert fit.max_batch in list(sweep["batch"]) and sweep["fits in memory"].iloc[-1] == "no"
    caption = next(c.value for c in at.caption if "levels off" in c.value)
    assert "stays at 4.0 FLOP/byte (the group size, 4 query heads per KV head)" in caption
    # KV of 256 sequences x 4,096 tokens x 128 KiB over the step's bytes (weights are ~16 GB of it)
    share = 100 * 256 * 4096 * 128 * 1024 / lab.batch_sweep("llama-3-8b", "h100-sxm", 4096).largest.step_bytes
    shown = re.search(r"at batch 256 KV is (\d+)% of the bytes moved", caption)
    assert shown and abs(int(shown.group(1)) - share) <= 1
    at.slider(key="bw_batch").set_value(1).run()
