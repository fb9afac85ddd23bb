"""bench/app/page_cost.py: its table of lessons and moves, the widget states it sends, and its JSON's keys
(from a run against the real app, two cheap lessons; the figures themselves are never checked)."""

from __future__ import annotations

import json
import subprocess
import sys

from streamlit.proto.Radio_pb2 import Radio
from streamlit.proto.Slider_pb2 import Slider
from streamlit.proto.TextInput_pb2 import TextInput

from bench.app import page_cost
from bench.app.client import PageRun
from bench.app_server import ROOT
from ui.course import LESSON_IDS


def test_every_lesson_has_a_move_and_a_route():
    assert set(page_cost.MOVES) == set(LESSON_IDS)
    assert page_cost.route_of("paged") == "paged_attention"  # from the file name, as Streamlit derives it
    assert page_cost.route_of("golden_rules") == "golden_rules"


def _run_with(kind: str, proto, fragment: str = "") -> PageRun:
    shown = PageRun(widgets=[(kind, proto)])
    if fragment:
        shown.widget_fragments[proto.id] = fragment
    return shown


def test_a_slider_alternates_with_its_neighbour_and_keeps_its_fragment():
    slider = Slider(id="$$ID-abc-gqa_groups_llama-3-8b", label="KV groups", options=["1", "2", "4", "8"])
    slider.raw_value.append("8")  # the last option: the neighbour is the one below
    states, fragment = page_cost.two_states(_run_with("slider", slider, "frag1"), page_cost.MOVES["gqa"])
    assert [s.string_array_value.data[0] for s in states] == ["4", "8"]
    assert fragment == "frag1"


def test_text_inputs_and_radios_send_their_two_values_as_full_runs():
    text = TextInput(id="$$ID-x-pack_lengths", label="Lengths")
    states, fragment = page_cost.two_states(_run_with("text_input", text), page_cost.MOVES["packing"])
    assert [s.string_value for s in states] == list(page_cost.MOVES["packing"].values) and fragment == ""
    radio = Radio(id="$$ID-y-quiz_golden_rules.decode", label="Q", options=["a", "b", "c"])
    states, _ = page_cost.two_states(_run_with("radio", radio), page_cost.MOVES["golden_rules"])
    assert [s.string_value for s in states] == ["b", "a"]


def test_a_missing_widget_names_the_table_to_fix():
    try:
        page_cost.two_states(PageRun(), page_cost.MOVES["bandwidth"])
    except LookupError as exc:
        assert "bw_batch" in str(exc)
    else:
        raise AssertionError("a page without the widget must raise")


def test_the_json_has_every_figure_per_page_and_first_contact():
    cmd = [sys.executable, "-m", "bench.app.page_cost", "--json", "--batch", "1", "--repeats", "1"]
    done = subprocess.run(
        [*cmd, "--pages", "golden_rules,diagnosis"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bench"] == "page_cost" and list(result["pages"]) == ["golden_rules", "diagnosis"]
    for figures in result["pages"].values():
        assert {"defaults_cpu_ms_per_run", "move_cpu_ms_per_run", "moved", "move_is_fragment_run"} <= set(figures)
        assert {"first_render_ms", "first_render_cpu_ms"} <= set(figures)
    contact = result["first_contact"]
    assert contact["page"] == "golden_rules"
    assert {"server_start_to_first_render_ms", "server_start_to_healthy_ms", "first_render_after_start_ms"} <= set(
        contact
    )
    assert set(contact["new_learner_warm_server"]) == {"golden_rules", "diagnosis"}
    assert {"median_cpu_ms_per_run", "load_average_1m_before", "load_average_1m_after"} <= set(result)
