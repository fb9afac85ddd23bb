"""The live round's projector figures (ui/charts_live.py): bars per bin, the engine's line only after the reveal,
the slips' shares, large type, the colour rules every course figure keeps, and their one-sentence summaries."""

import json
import re

import pytest

from lessons import live
from tests.ui import test_chart_colours as colours
from ui import charts_live

VALUES = [300, 310, 350, 420, 1708, 1708, 137.25, 0]  # gqa answers: the engine's 68.625 KiB is none of them
ANSWER = 61 * 576 * 2 / 1024  # DeepSeek-V3's MLA latent per token in bf16 (lesson 2's prediction), in KiB


def bars(fig):
    return [t for t in fig.data if t.type == "bar"]


def test_one_bar_per_bin_with_its_count_on_it():
    cr = live.class_round("gqa", VALUES, revealed=False)
    (bar,) = bars(charts_live.class_histogram(cr))
    assert list(bar.y) == [b.count for b in cr.bins] and list(bar.text) == [str(b.count) for b in cr.bins]
    assert list(bar.x) == list(range(len(cr.bins))) and sum(bar.y) == len(VALUES)


def leaves(value):
    """Every number and string in a figure's JSON."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in leaves(v)]
    return [value]


def test_before_the_reveal_nothing_in_the_figure_hints_at_the_answer():
    for page, values in (("gqa", VALUES), ("diagnosis", [30, 31, 40, 64, 0.5])):
        cr = live.class_round(page, values, revealed=False)
        fig = charts_live.class_histogram(cr)
        answer = live.predictions.for_page(page).answer
        assert not fig.layout.shapes and not fig.layout.annotations
        spec = fig.to_plotly_json()
        spec["layout"].pop("template", None)  # plotly's theme (Streamlit's, once imported): not this figure's
        text = json.dumps(spec)
        assert not re.search(rf"(?<![\d.]){answer:g}(?![\d])", text) and "engine" not in text, page
        assert answer not in [x for x in leaves(spec) if isinstance(x, float | int)]
        said = charts_live.histogram_summary(cr)
        assert (
            said.endswith("the engine's answer is hidden until the teacher reveals it.") and f"{answer:g}" not in said
        )


def test_after_the_reveal_a_line_marks_the_answer_inside_its_bar():
    cr = live.class_round("gqa", VALUES, revealed=True)
    fig = charts_live.class_histogram(cr)
    (line,) = fig.layout.shapes
    (label,) = fig.layout.annotations
    assert line.x0 == line.x1 == label.x == charts_live.answer_x(cr.bins, ANSWER)
    i = charts_live.bin_index(cr.bins, ANSWER)
    assert cr.bins[i].low <= ANSWER < cr.bins[i].high and i - 0.5 <= line.x0 <= i + 0.5
    assert label.text == "engine: 68.62 KiB"
    low, high = cr.bins[i].low, cr.bins[i].high
    assert line.x0 == pytest.approx(i - 0.5 + (ANSWER - low) / (high - low))  # as far along its bar as between edges
    assert charts_live.histogram_summary(cr).endswith(
        f"is in the {live.range_text(cr.bins[i], 'KiB')} range with 0 answers."
    )


def test_the_axis_is_in_the_unit_with_the_bins_edges_and_zero_first():
    cr = live.class_round("gqa", VALUES, revealed=False)
    fig = charts_live.class_histogram(cr)
    assert fig.layout.xaxis.title.text == "KiB" and fig.layout.yaxis.title.text == "answers"
    assert cr.bins[0].label == "0" and fig.layout.xaxis.ticktext[0] == "0"
    assert list(fig.layout.xaxis.ticktext[1:]) == [live.edge_text(b.high) for b in cr.bins]
    share = charts_live.class_histogram(live.class_round("packing", [40, 45, 50], True))
    assert share.layout.xaxis.title.text == "percent" and share.layout.annotations[0].text == "engine: 53.1%"


def test_type_is_large_enough_for_a_projector():
    cr = live.class_round("gqa", VALUES, revealed=True)
    for fig in (charts_live.class_histogram(cr), charts_live.slip_chart(cr)):
        assert fig.layout.font.size >= 20 and fig.layout.title.font.size > fig.layout.font.size
        assert all(t.textfont.size >= 20 for t in bars(fig))
        assert all(a.font.size is None or a.font.size >= 20 for a in fig.layout.annotations)


def test_figures_are_deterministic_for_equal_rounds():
    for revealed in (False, True):
        a = live.class_round("diagnosis", [16, 64, 17.18, 8, 0], revealed)
        b = live.class_round("diagnosis", (16.0, 64.0, 17.18, 8.0, 0.0), revealed)
        for build in (charts_live.class_histogram, charts_live.slip_chart):
            assert build(a).to_json() == build(b).to_json()


def test_the_slip_chart_writes_share_and_count_on_each_bar_close_in_its_own_colour():
    cr = live.class_round("gqa", [68.6, 1708, 1708, 137.25, 7], revealed=True)
    (bar,) = bars(charts_live.slip_chart(cr))
    assert list(bar.y) == [
        "close (within 2%)",
        "read num_key_value_heads",
        "stored the latent twice, as K and V",
        "other",
    ]
    assert list(bar.text) == ["20% (1)", "40% (2)", "20% (1)", "20% (1)"]
    assert list(bar.x) == [20.0, 40.0, 20.0, 20.0] and bar.orientation == "h"
    fills = list(zip(bar.marker.color, bar.marker.pattern.shape, strict=True))
    assert fills[0] not in fills[1:] and fills[0][0] not in [c for c, _ in fills[1:]]
    assert charts_live.slip_summary(cr) == (
        "Of 5 answers, close (within 2%): 1 (20%); read num_key_value_heads: 2 (40%); "
        "stored the latent twice, as K and V: 1 (20%); other: 1 (20%)."
    )


def test_no_answers_and_no_reveal_get_a_note_not_an_empty_plot():
    hidden = live.class_round("gqa", VALUES, revealed=False)
    fig = charts_live.slip_chart(hidden)
    assert not fig.data and "reveals" in fig.layout.annotations[0].text and "68.6" not in fig.to_json()
    assert "once the teacher reveals" in charts_live.slip_summary(hidden)
    empty = live.class_round("paged", [], revealed=True)
    assert not charts_live.class_histogram(empty).data and not charts_live.slip_chart(empty).data
    assert charts_live.histogram_summary(empty) == "No answers yet."
    with pytest.raises(ValueError, match="value 5000.0 is in none of the"):  # the bins end at 2,000 KiB
        charts_live.answer_x(hidden.bins, 5000.0)


@pytest.mark.parametrize("revealed", [False, True])
def test_colour_is_never_the_only_signal(revealed):
    cr = live.class_round("diagnosis", [16, 64, 17.18, 8, 0, 3], revealed)
    for name, fig in (("live histogram", charts_live.class_histogram(cr)), ("live slips", charts_live.slip_chart(cr))):
        colours.FIGURES[name] = fig
        try:
            colours.test_legend_or_labels_name_every_colour(name)
            colours.test_legend_entries_differ_in_more_than_colour(name)
            colours.test_lines_and_marks_keep_3_to_1_on_both_themes(name)
        finally:
            del colours.FIGURES[name]
