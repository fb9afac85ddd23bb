"""lessons/labs/diagnosis.py: widget values -> fix sets, grading by re-simulation, progress records, page rows."""

import pytest

from engine.memory.catalog import GPUS, MODELS
from lessons.diagnosis import FIX_PARAMS, get_scenario, own_log, read_vllm_log, scenario_ids, symptoms
from lessons.labs import diagnosis as lab


def test_current_values_cover_every_fix_and_match_the_deployment():
    for sid in scenario_ids():
        cfg = get_scenario(sid).config
        now = lab.current_values(cfg)
        assert set(now) == set(FIX_PARAMS) == set(lab.FIX_LABELS)
        assert now["max_model_len"] == cfg.context_len and now["policy"] == cfg.policy
        assert lab.changed_fixes(cfg, now) == {}  # untouched widgets change nothing
        for param, value in now.items():
            opts = lab.options_for(param, value)
            assert value in opts and set(FIX_PARAMS[param]) <= set(opts)
            if all(isinstance(o, (int, float)) for o in opts):
                assert opts == sorted(opts)


def test_changed_fixes_keeps_only_differences_and_rejects_unknown_knobs():
    cfg = get_scenario("chat-oom").config
    chosen = {**lab.current_values(cfg), "policy": "paged", "max_num_seqs": cfg.max_num_seqs}
    assert lab.changed_fixes(cfg, chosen) == {"policy": "paged"}
    with pytest.raises(ValueError, match="unknown fixes"):
        lab.changed_fixes(cfg, {"swap_space": 4})
    with pytest.raises(ValueError, match="unknown fix"):
        lab.options_for("swap_space", 4)


@pytest.mark.parametrize("variant", [-1, 1000, 2.5, True])
def test_bad_variant_is_a_clear_error(variant):
    with pytest.raises(ValueError, match="variant"):
        lab.scenario_for("chat-oom", variant)


@pytest.mark.parametrize("sid", scenario_ids())
def test_reference_fix_resolves_and_doing_nothing_does_not(sid):
    scenario = get_scenario(sid)
    right = tuple(d.id for d in scenario.diagnoses if d.correct)
    chosen = {**lab.current_values(scenario.config), **scenario.reference_fix}
    good = lab.run_grade(sid, 0, right, chosen)
    assert good.resolved and good.diagnosis_correct
    assert lab.verdict(good).startswith("RESOLVED") and "diagnosis right" in lab.verdict(good)
    rec = lab.record(good, 0, right)
    assert rec["resolved"] and rec["fixes"] == scenario.reference_fix and rec["problems"] == []
    nothing = lab.run_grade(sid, 0, (), lab.current_values(scenario.config))
    assert not nothing.resolved and not nothing.diagnosis_correct
    assert lab.verdict(nothing).startswith("NOT RESOLVED")
    rows = {r["measure"]: r for r in lab.before_after_rows(good)}
    assert rows["problems left"]["with your fixes"] == "0" and rows["problems left"]["as deployed"] != "0"


def test_seeded_variant_grades_too():
    scenario = lab.scenario_for("mha-rag", 7)
    g = lab.run_grade("mha-rag", 7, ("mha-kv",), {**lab.current_values(scenario.config), **scenario.reference_fix})
    assert g.resolved and lab.model_label("llama-3-8b").endswith("(8 KV heads)")


def test_graded_run_lays_out_the_grade_for_the_page():
    scenario = get_scenario("chat-oom")
    right = tuple(d.id for d in scenario.diagnoses if d.correct)
    chosen = {**lab.current_values(scenario.config), **scenario.reference_fix}
    g = lab.run_grade("chat-oom", 0, right, chosen)
    run = lab.graded_run("chat-oom", 0, right, chosen)
    assert run.verdict == lab.verdict(g) and run.resolved is g.resolved is True
    assert run.explanation == tuple(g.explanation) and run.costs == tuple(g.costs)
    assert run.diagnosis_feedback == tuple(g.diagnosis_feedback) and run.command == g.command
    assert run.rows == tuple(lab.before_after_rows(g)) and run.record == lab.record(g, 0, right)
    assert run.command.startswith("vllm serve ")
    with pytest.raises(AttributeError):
        run.resolved = False  # frozen: a cached result is never changed by a later run


def test_memory_title_and_traffic_rows_name_what_was_deployed():
    scenario = lab.scenario_for("mha-rag", 0)
    title = lab.memory_title(scenario)
    assert GPUS[scenario.config.gpu].name in title and MODELS[scenario.config.model].name in title
    sym = symptoms(scenario)
    rows = lab.traffic_rows(sym)
    assert [r["measure"] for r in rows] == list(sym.traffic)
    assert {r["measure"]: r["value"] for r in rows}["requests"] == str(scenario.traffic.num_requests)
    assert all(isinstance(r["value"], str) for r in rows)  # one column type, so the table never mixes kinds


def test_the_paste_box_offers_every_catalog_model_but_the_demo_and_starts_at_the_logs():
    assert lab.PASTE_MODELS[0] == "" and set(lab.PASTE_MODELS[1:]) == set(MODELS) - {"demo"}
    assert lab.paste_model_index(None) == 0 and lab.paste_model_index("demo") == 0
    assert lab.PASTE_MODELS[lab.paste_model_index("llama-3-8b")] == "llama-3-8b"
    assert lab.model_label_or_log("") == "(from the log)"
    guess = own_log.guess_model(read_vllm_log("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192"))
    assert guess in MODELS and lab.PASTE_MODELS[lab.paste_model_index(guess)] == guess
