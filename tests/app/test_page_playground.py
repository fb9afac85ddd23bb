"""Engine playground page (AppTest): guided errors for bad prompts and folders, a real generation on a local
folder, stepping through the scheduler, the knobs at their extremes, the server's model policy
(KVLAB_MODEL_DIRS, KVLAB_MAX_MODEL_BYTES) and a run interrupted part-way."""

import gc
import itertools
import weakref
from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.testing.v1 import AppTest

from lessons.labs import playground as lab
from lessons.labs.playground import DEMO_DIR
from tests.app.conftest import open_chart_tables
from tests.lessons.labs.test_playground import make_tiny_model

PROMPTS = "def add(a, b):\nclass Stack:\nself.items\nreturn a + b"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny_page") / "tiny"))


@pytest.fixture(scope="module")
def at(app_test, tiny):
    with pytest.MonkeyPatch.context() as mp:  # this server allows the folder that holds the tiny model
        mp.setenv(lab.MODEL_DIRS_ENV, str(Path(tiny).parent))
        mp.delenv(lab.MAX_BYTES_ENV, raising=False)
        app = app_test("playground", timeout=120)
        app.run()
        assert not app.exception and not app.error
        yield app


def error_text(at: AppTest) -> str:
    """The one error shown, read as plain words (show_error puts quoted values in code spans)."""
    assert len(at.error) == 1, [e.value for e in at.error]
    return at.error[0].value.replace("`", "")


def generate(at: AppTest) -> AppTest:
    at.button(key="pg_generate").click().run()
    assert not at.exception
    return at


def test_demo_model_generates_or_explains_why_not(at):
    generate(at)
    if any(DEMO_DIR.glob("*.safetensors")):
        assert not at.error and {m.label for m in at.metric} >= {"Tokens/s", "Generated tokens"}
    else:
        assert "demo model's weights are not installed" in at.error[0].value and "How to fix" in at.error[0].value


def test_bad_folder_and_prompts_show_guidance(at, tiny, tmp_path):
    at.radio(key="pg_source").set_value("folder").run()
    (Path(tiny).parent / "empty").mkdir(exist_ok=True)
    for path, match in (("", "empty"), ("empty", "empty has no config.json"), ("~root", "starting with ~")):
        at.text_input(key="pg_path").set_value(path)
        generate(at)
        assert match in error_text(at)


def test_paths_outside_the_allowed_folders_all_get_the_same_message(at, tiny, tmp_path):
    make_tiny_model(tmp_path / "outside")
    (Path(tiny).parent / "link-out").symlink_to(tmp_path / "outside")
    at.radio(key="pg_source").set_value("folder").run()  # enables the path box, whatever test ran before
    shown = set()
    typed = ["/root", "/etc", "/nonexistent", "/proc/self", "/etc/passwd", str(tmp_path / "outside"), str(tmp_path)]
    typed += [f"{Path(tiny).parent}-evil", "../outside", "link-out", f"{tiny}/config.json"]
    for path in typed:
        at.text_input(key="pg_path").set_value(path)
        generate(at)
        assert len(at.error) == 1
        shown.add(at.error[0].value)
    assert len(shown) == 1, shown
    (message,) = shown
    assert message.startswith("No model folder the server allows at that path") and "How to fix" in message
    assert (
        "/root" not in message
        and "/etc" not in message
        and str(tmp_path) not in message.replace(str(Path(tiny).parent), "")
    )


def test_folder_model_generates_and_steps(at, tiny):
    at.radio(key="pg_source").set_value("folder").run()  # enables the path box, whatever test ran before
    at.text_input(key="pg_path").set_value("tiny")  # relative: under the first allowed folder
    at.text_area(key="pg_prompts").set_value(PROMPTS)
    generate(at)
    assert not at.error
    shown = {m.label: m.value for m in at.metric}
    assert int(shown["Generated tokens"]) > 0 and float(shown["Tokens/s"].replace(",", "")) > 0
    assert 0 < int(shown["Peak KV usage"].rstrip("%")) <= 100 and int(shown["Preemptions"]) >= 0
    outputs = next(d.value for d in open_chart_tables(at).dataframe if "generated text" in d.value.columns)
    assert len(outputs) == 4 and outputs["generated tokens"].sum() == int(shown["Generated tokens"])
    assert outputs["generated text"].str.len().sum() > 0  # the engine produced text
    steps = int(shown["Scheduler steps"])
    timeline = next(d.value for d in open_chart_tables(at).dataframe if "KV blocks used" in d.value.columns)
    assert list(timeline["step"]) == list(range(1, steps + 1))
    run = at.session_state["pg_run"]
    assert shown["Peak KV usage"] == f"{round(100 * max(t.kv_usage for t in run.traces))}%"
    for step in (steps, max(1, steps // 2), 1):
        at.slider(key="pg_step").set_value(step).run()
        assert not at.exception and not at.error
        assert any(m.value.startswith(f"**Step {step}.**") for m in at.markdown)
    assert "Joined" in next(m.value for m in at.markdown if m.value.startswith("**Step 1.**"))


def test_knobs_at_extremes(at, tiny):
    at.radio(key="pg_source").set_value("folder").run()  # enables the path box, whatever test ran before
    at.text_input(key="pg_path").set_value(tiny)
    at.text_area(key="pg_prompts").set_value("def add(a, b):\nclass Stack:")
    at.slider(key="pg_max_tokens").set_value(1)
    at.slider(key="pg_temperature").set_value(2.0)
    at.slider(key="pg_top_p").set_value(0.05)
    at.number_input(key="pg_top_k").set_value(1024)
    at.number_input(key="pg_seed").set_value(2**31 - 1)
    at.select_slider(key="pg_block").set_value(256)
    at.slider(key="pg_blocks").set_value(256)
    at.toggle(key="pg_prefix").set_value(True)
    generate(at)
    assert not at.error and {m.label: m.value for m in at.metric}["Generated tokens"] == "2"
    assert any(c.value.startswith("The pool holds 65,536 tokens") for c in at.caption)  # 256 blocks x 256 tokens
    at.select_slider(key="pg_block").set_value(1)
    at.slider(key="pg_blocks").set_value(1)  # one 1-token block: no prompt fits
    generate(at)
    assert "accepts at most 1: the KV pool holds 1 token " in at.error[0].value and "How to fix" in at.error[0].value
    at.text_area(key="pg_prompts").set_value("")
    generate(at)
    assert "no prompts" in at.error[0].value
    at.text_area(key="pg_prompts").set_value("x\n" * 9)
    generate(at)
    assert "9 prompts" in at.error[0].value
    at.slider(key="pg_max_tokens").set_value(64)
    at.slider(key="pg_temperature").set_value(0.0)
    at.slider(key="pg_top_p").set_value(1.0)
    at.number_input(key="pg_top_k").set_value(0)
    at.number_input(key="pg_seed").set_value(0)
    at.slider(key="pg_blocks").set_value(64)
    at.text_area(key="pg_prompts").set_value("class Stack:")
    generate(at)
    assert not at.error and int({m.label: m.value for m in at.metric}["Generated tokens"]) >= 1
    radio = next(r for r in at.radio if r.key.startswith("quiz_playground."))
    radio.set_value(radio.options[0]).run()
    assert not at.exception


def test_the_prefix_cache_hit_rate_of_a_repeated_prompt(at, tiny):
    at.radio(key="pg_source").set_value("folder").run()  # enables the path box, whatever test ran before
    at.text_input(key="pg_path").set_value(tiny)
    at.text_area(key="pg_prompts").set_value("def add(a, b): return a + b")
    at.select_slider(key="pg_block").set_value(4)
    at.slider(key="pg_blocks").set_value(64)
    at.toggle(key="pg_prefix").set_value(True)
    generate(at)
    generate(at)  # the same engine and prompt: its full blocks are in the prefix cache now
    run = at.session_state["pg_run"]
    assert not at.error and run.prefix_cache_hits > 0
    (line,) = [c.value for c in at.caption if c.value.startswith("Prefix cache:")]
    assert f"{run.prefix_cache_hits:,} of {run.prefix_cache_queries:,} prompt tokens" in line
    assert f"hit rate of {run.prefix_cache_hit_rate:.0%}" in line


def test_folders_switched_off_by_the_operator(app_test, monkeypatch, tiny):
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, "")
    app = app_test("playground", timeout=120)
    app.run()
    assert not app.exception and not app.error
    assert app.radio(key="pg_source").options == ["Demo model"]
    assert not [t for t in app.text_input if t.key == "pg_path"]
    assert any("does not allow model folders" in i.value and lab.MODEL_DIRS_ENV in i.value for i in app.info)


def test_a_model_over_the_byte_limit_is_refused_with_its_size(app_test, monkeypatch, tiny):
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, str(Path(tiny).parent))
    monkeypatch.setenv(lab.MAX_BYTES_ENV, "4096")
    app = app_test("playground", timeout=120)
    app.run()
    app.radio(key="pg_source").set_value("folder").run()
    app.text_input(key="pg_path").set_value(tiny)
    generate(app)
    assert "too large for this server: the weights on disk take" in error_text(app)
    assert "limit of 4.00 KiB (KVLAB_MAX_MODEL_BYTES=4096)" in error_text(app)
    monkeypatch.setenv(lab.MAX_BYTES_ENV, "a lot")
    app.run()
    assert "KVLAB_MAX_MODEL_BYTES='a lot' must be a whole number" in error_text(app)


def rerun_data() -> RerunData:
    return RerunData()


@pytest.mark.parametrize(
    "interrupt",
    [lambda: RerunException(rerun_data()), StopException, lambda: RuntimeError("the progress line broke")],
    ids=["generate-pressed-again", "tab-closed", "callback-raises"],
)
def test_an_interrupted_run_leaves_no_phantom_requests(app_test, monkeypatch, tiny, interrupt, playground_pool):
    pool = playground_pool()
    app = folder_app(app_test, monkeypatch, tiny)
    app.slider(key="pg_blocks").set_value(9)  # tight: requests wait and get preempted
    app.select_slider(key="pg_block").set_value(4)
    real_line, calls = lab.live_line, itertools.count(1)

    def line_that_interrupts_once(*args):
        if next(calls) == 2:  # the second step: some requests run, some wait
            raise interrupt()
        return real_line(*args)

    monkeypatch.setattr(lab, "live_line", line_that_interrupts_once)
    app.button(key="pg_generate").click().run()  # interrupted inside the engine's generate
    assert next(calls) > 2  # it did interrupt
    monkeypatch.setattr(lab, "live_line", real_line)
    generate(app)  # Generate again on the same engine
    assert not app.error
    outputs = next(d.value for d in open_chart_tables(app).dataframe if "generated text" in d.value.columns)
    assert list(outputs["prompt"]) == PROMPTS.split("\n") and list(outputs["request"]) == ["r0", "r1", "r2", "r3"]
    steps = next(d.value for d in open_chart_tables(app).dataframe if "KV blocks used" in d.value.columns)
    assert steps["waiting"].max() <= 4 and steps["running"].max() <= 4  # no phantom request queued
    assert set(" ".join(steps["joined"]).split()) <= {"r0", "r1", "r2", "r3", "—"}
    assert steps["KV blocks used"].iloc[-1] == 0
    llm = pool.engine(app.session_state["pg_ticket"])
    assert lab.pending_requests(llm) == [] and llm.block_manager.num_free_blocks == llm.num_gpu_blocks


def test_the_text_boxes_hold_at_most_their_limits(at):
    at.radio(key="pg_source").set_value("folder").run()
    at.text_input(key="pg_path").set_value("p" * (lab.MAX_PATH_CHARS + 5))
    at.text_area(key="pg_prompts").set_value("q" * (lab.MAX_PROMPTS_TEXT_CHARS + 5)).run()
    assert not at.exception
    assert len(at.session_state["pg_path"]) == lab.MAX_PATH_CHARS
    assert len(at.session_state["pg_prompts"]) == lab.MAX_PROMPTS_TEXT_CHARS
    at.radio(key="pg_source").set_value("demo")
    at.text_input(key="pg_path").set_value("")
    at.text_area(key="pg_prompts").set_value(lab.DEFAULT_PROMPTS).run()


def folder_app(app_test, monkeypatch, tiny) -> AppTest:
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, str(Path(tiny).parent))
    app = app_test("playground", timeout=120)
    app.run()
    app.radio(key="pg_source").set_value("folder").run()
    app.text_input(key="pg_path").set_value(tiny)
    app.text_area(key="pg_prompts").set_value(PROMPTS)
    return app


def test_a_full_playground_says_it_is_busy_and_keeps_the_learners_run(app_test, monkeypatch, tiny, playground_pool):
    pool = lab.EnginePool(1 << 20, wait_s=0.0)  # this server's playground: 1 MiB of KV cache in all
    playground_pool(pool)
    app = folder_app(app_test, monkeypatch, tiny)
    generate(app)
    assert not app.error and pool.engines == 1
    kept = app.session_state["pg_run"]
    with pool.lease(pool.ticket(), "a classmate", (1 << 20) - pool.used_bytes, object):
        app.slider(key="pg_blocks").set_value(64)  # new settings: a bigger engine than the room left
        generate(app)
        assert "the playground is busy: 1 learners' engine holds" in error_text(app)
        assert "How to fix" in app.error[0].value and pool.used_bytes <= 1 << 20
    assert app.session_state["pg_run"] is kept and [m for m in app.metric if m.label == "Tokens/s"]  # still shown
    app.select_slider(key="pg_block").set_value(256)  # 64 x 256 tokens is more than the whole budget
    generate(app)
    assert "more than this server's playground holds for all learners together (1.00 MiB" in error_text(app)


def test_a_closed_session_gives_its_engine_back(app_test, monkeypatch, tiny, playground_pool):
    pool = lab.EnginePool(1 << 30, wait_s=0.0)
    playground_pool(pool)
    app = folder_app(app_test, monkeypatch, tiny)
    generate(app)
    assert not app.error and pool.engines == 1
    del app  # the session's state goes, and the ticket with it
    gc.collect()
    assert pool.engines == 0 and pool.used_bytes == 0


def test_a_freed_engine_is_gone_at_once_not_at_the_next_garbage_collection(
    app_test, monkeypatch, tiny, playground_pool
):
    # The page's script namespace lives on in a reference cycle (its functions point back at it) until the
    # cyclic collector runs, which Streamlit no longer forces after each run (postScriptGC = false): an
    # engine named there would outlive its session. The pool must hold the only reference.
    pool = lab.EnginePool(1 << 30, wait_s=0.0)
    playground_pool(pool)
    app = folder_app(app_test, monkeypatch, tiny)
    gc.collect()
    gc.disable()
    try:
        generate(app)
        assert not app.error
        ticket = app.session_state["pg_ticket"]
        cache = weakref.ref(pool.engine(ticket).kv_cache.kv)
        app.run()  # a rerun that does not generate
        assert pool.release(ticket.id) and cache() is None
    finally:
        gc.enable()
