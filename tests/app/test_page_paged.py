"""Lesson 5 page (AppTest): block size and max context at their extremes; waste falls and tables grow as blocks
shrink; the sharing steps show a copy-on-write."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import open_chart_tables


def numbers(at: AppTest) -> tuple[float, float]:
    shown = {m.label: m.value for m in at.metric}
    return float(shown["Internal waste"].rstrip("%")), float(shown["Block-table entries"].replace(",", ""))


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("paged", timeout=60)
    app.run()
    assert not app.exception and not app.error
    return app


def test_waste_drops_and_entries_grow_as_blocks_shrink(at):
    seen = {}
    for bs in (256, 64, 16, 4, 1):
        at.select_slider(key="paged_block").set_value(bs).run()
        assert not at.exception and not at.error
        seen[bs] = numbers(at)
    sizes = sorted(seen)  # 1 … 256
    assert seen[1][0] == 0.0 and seen[256][0] > 10
    assert all(seen[a][0] < seen[b][0] for a, b in zip(sizes, sizes[1:], strict=False))
    assert all(seen[a][1] > seen[b][1] for a, b in zip(sizes, sizes[1:], strict=False))
    shown = {m.label: m.value for m in at.metric}
    assert shown["Table width (max entries)"] == "2,048"  # 2048-token max context in 1-token blocks


def test_max_context_extremes_change_the_table_width(at):
    at.select_slider(key="paged_block").set_value(16)
    for ctx, width in ((512, "32"), (8192, "512"), (2048, "128")):
        at.select_slider(key="paged_context").set_value(ctx).run()
        assert not at.exception and not at.error
        assert {m.label: m.value for m in at.metric}["Table width (max entries)"] == width


def test_sharing_steps_show_fork_and_copy_on_write(at):
    at.select_slider(key="paged_block").set_value(16).run()
    at.select_slider(key="paged_stage").set_value(2).run()
    assert not at.exception
    assert any("Copy-on-write" in i.value for i in at.info)
    for stage in (0, 4, 1):
        at.select_slider(key="paged_stage").set_value(stage).run()
        assert not at.exception and not any("Copy-on-write" in i.value for i in at.info)
    tables = [t.value for t in open_chart_tables(at).dataframe if "stage" in t.value.columns]
    assert tables and len(tables[0]) == 5
    radio = next(r for r in at.radio if r.key.startswith("quiz_paged."))
    radio.set_value(radio.options[-1]).run()
    assert not at.exception and radio.key.removeprefix("quiz_") in at.session_state["progress"]["quiz"]


def test_throughput_carries_the_kernel_cost_and_vllm_refusals_are_marked(at):
    at.select_slider(key="paged_context").set_value(2048)
    at.select_slider(key="paged_block").set_value(16).run()
    refusals = lambda: [w.value for w in at.warning if "vLLM would not run" in w.value]  # noqa: E731
    assert not at.exception and not refusals()
    shown = {m.label: m.value for m in at.metric}
    assert shown["vLLM accepts this block size"] == "yes"
    assert float(shown["Kernel cost vs best block size (fitted)"].rstrip("×")) >= 1.0
    assert int(shown["Best block size here"]) in (1, 2, 4, 8, 16, 32, 64, 128, 256)
    kernel = [t.value for t in open_chart_tables(at).dataframe if "ns per cached token" in t.value.columns]
    assert kernel and list(kernel[0]["block size"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert min(kernel[0]["kernel cost vs best"]) == 1.0  # relative to the fastest block size
    assert min(kernel[0]["kernel cost, fitted"]) == pytest.approx(1.0)
    sweep = next(t.value for t in open_chart_tables(at).dataframe if "tokens/s, free kernel" in t.value.columns)
    peak = max(zip(sweep["tokens/s"], -sweep["block size"], strict=True))  # most tokens/s, smaller on a tie
    assert int(shown["Best block size here"]) == -peak[1]
    assert list(sweep["kernel cost vs best"]) == pytest.approx(list(kernel[0]["kernel cost, fitted"]))
    # a peak below 8-token blocks (a CPU's small per-block cost) is explained, never taught as the lesson
    noted = [i.value for i in at.info if "cannot show the kernel's side" in i.value]
    assert len(noted) == (1 if -peak[1] < 8 else 0)
    text = " ".join(m.value for m in at.markdown)
    # 2,048 tokens in 16-token blocks: 128 int32 entries, 512 bytes
    assert "A 2,048-token sequence needs up to 128 table entries (512 bytes of int32 per sequence)" in text
    assert "at most 15 idle slots per sequence" in text
    for bs, words in ((2, "multiple of 16"), (4, "multiple of 16"), (8, "multiple of 16")):
        at.select_slider(key="paged_block").set_value(bs).run()
        assert not at.exception and len(refusals()) == 1 and words in refusals()[0]
        assert {m.label: m.value for m in at.metric}["vLLM accepts this block size"] != "yes"


def test_the_sliding_window_table_follows_the_block_size(app_test):
    at = app_test("paged", timeout=180)
    at.run()
    assert not at.exception
    table = next(d for d in open_chart_tables(at).dataframe if "blocks, window 4,096" in d.value.columns)
    full, windowed = table.value["blocks, full attention"].tolist(), table.value["blocks, window 4,096"].tolist()
    assert windowed[-1] < full[-1] and windowed[-1] == windowed[-2]  # capped at the window, whatever the length
    assert full == [2048 // 16, 8192 // 16, 32768 // 16]  # the default 16-token blocks
    assert any(c.value.startswith("Mistral-7B, block size 16, during decode") for c in at.caption)
    idle = next(c.value for c in at.caption if c.value.startswith("Allocated slots"))
    found = re.match(r"Allocated slots ([\d,]+), holding tokens ([\d,]+): ([\d,]+) idle slots", idle)
    allocated, used, unused = (int(n.replace(",", "")) for n in found.groups())
    assert allocated - used == unused


def test_hybrid_section_shows_the_sliding_group_handing_blocks_back(at):
    """The live hybrid run: the full group keeps every block, the sliding one gives blocks back (both windows'
    extremes and a small block size)."""
    at.select_slider(key="paged_block").set_value(16)
    seen = {}
    for window in (64, 8):
        at.select_slider(key="paged_hybrid_window").set_value(window).run()
        assert not at.exception and not at.error
        shown = {m.label: m.value for m in at.metric}
        seen[window] = int(shown["Blocks the sliding group gave back"])
        assert int(shown["Full group's blocks at the end"]) == -(-198 // 16)  # 160 + 40 tokens, the last uncached
        assert int(shown["Sliding group's blocks at the end"]) < int(shown["Full group's blocks at the end"])
    assert seen[8] > seen[64] > 0  # a narrower window needs fewer blocks, so more go back
    table = next(t.value for t in open_chart_tables(at).dataframe if "sliding group's blocks" in t.value.columns)
    assert list(table["full group's blocks"]) == sorted(table["full group's blocks"])  # the full group only grows
