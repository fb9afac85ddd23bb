"""read_vllm_metrics on real /metrics scrapes from public issues (fixtures/metrics/, each naming its source),
on crafted scrapes (one per verdict), on what a learner can paste by mistake, and under fuzzing."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons.diagnosis import read_vllm_metrics
from lessons.diagnosis.metrics import (
    BINDS_KV_POOL,
    BINDS_MAX_NUM_SEQS,
    BINDS_NEITHER,
    BINDS_UNKNOWN,
    FIX_BUDGET,
    FIX_DEFERRED,
    FIX_KV_POOL,
    FIX_MAX_NUM_SEQS,
    FIX_NONE,
    KV_FULL,
    MAX_SCRAPE_BYTES,
    MAX_SCRAPE_LINES,
    RELEASE_BOTH,
    RELEASE_BY_REASON,
    RELEASE_NEW,
    RELEASE_OLD,
    RELEASE_V0,
    VllmMetrics,
    metrics_rows,
)

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_fixture_names_its_source():
    files = sorted(FIXTURES.glob("*.prom"))
    assert len(files) >= 5
    for path in files:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: https://github.com/"), path.name


# Numbers below are read off each fixture's text by eye.
def test_v0_scrape_old_names_with_cache_config():
    r = read_vllm_metrics(fixture("qwen3-vl-55-v0-old-names.prom"))
    assert r.ok and r.error is None
    assert (r.running, r.waiting, r.swapped, r.kv_cache_usage) == (0, 0, 0, 0.0)
    assert r.preemptions is None  # the excerpt stops before vllm:num_preemptions_total
    assert (r.num_gpu_blocks, r.block_size) == (2048, 16)
    assert r.model == "qwenvl" and r.models == ("qwenvl",)
    assert r.naming == "old" and r.kv_metric == "vllm:gpu_cache_usage_perc"
    assert "V0" in r.release
    assert r.binding == BINDS_NEITHER and r.fix == FIX_NONE
    assert [(e.engine, e.model) for e in r.engines] == [(None, "qwenvl")]


def test_v1_scrape_before_the_rename():
    r = read_vllm_metrics(fixture("production-stack-318-v1-old-names.prom"))
    assert r.ok
    assert (r.running, r.waiting, r.kv_cache_usage) == (0, 0, 0.0)
    assert r.swapped is None and r.preemptions is None
    assert (r.num_gpu_blocks, r.block_size) == (None, None)
    assert r.model == "Qwen/Qwen2.5-Coder-32B-Instruct"
    assert r.naming == "old" and r.kv_metric == "vllm:gpu_cache_usage_perc"
    assert r.release.startswith("vLLM 0.9.1 or earlier")
    assert r.binding == BINDS_NEITHER


def test_v0_10_scrape_new_names_engine_label():
    r = read_vllm_metrics(fixture("production-stack-617-v0.10.0-new-names.prom"))
    assert r.ok
    assert r.kv_cache_usage == 9.75010481363281e-06
    assert r.naming == "new" and r.kv_metric == "vllm:kv_cache_usage_perc"
    # the excerpt stops before vllm:gpu_cache_usage_perc, but its deprecated gpu_prefix_cache counters date it
    assert r.release == RELEASE_BOTH
    assert r.model == "zai-org/GLM-4.5"
    assert [(e.engine, e.model) for e in r.engines] == [("0", "zai-org/GLM-4.5")]
    # the excerpt has no running/waiting lines: values are None and the verdict says it cannot tell
    assert (r.running, r.waiting, r.preemptions) == (None, None, None)
    assert r.binding == BINDS_UNKNOWN
    assert "vllm:num_requests_running" in r.reason and "vllm:num_requests_waiting" in r.reason


def test_real_scrape_without_kv_metric_is_an_error():
    r = read_vllm_metrics(fixture("vllm-pr-22227-v1-engine1-no-kv.prom"))
    assert not r.ok
    assert "vllm:kv_cache_usage_perc" in r.error and "vllm:gpu_cache_usage_perc" in r.error
    assert r.models == ("/home/jovyan/qwen3-8b",)
    assert r.kv_cache_usage is None and r.binding == BINDS_UNKNOWN


def test_real_scrape_of_another_engine_is_not_vllm():
    r = read_vllm_metrics(fixture("scalellm-pr-210-not-vllm.prom"))
    assert not r.ok
    assert "not from a vLLM server" in r.error
    assert "15 metrics" in r.error  # 9 + 2 + 1 + 1 + 1 + 1 sample lines in the fixture
    assert metrics_rows(r) == []


# Crafted scrapes, in the release's names (one engine unless said).
def scrape(running, waiting, usage, preemptions=None, *, engine="0", model="m", kv="vllm:kv_cache_usage_perc"):
    labels = f'engine="{engine}",model_name="{model}"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {waiting}",
        f"# TYPE {kv} gauge",
        f"{kv}{{{labels}}} {usage}",
    ]
    if preemptions is not None:
        lines += ["# TYPE vllm:num_preemptions counter", f"vllm:num_preemptions_total{{{labels}}} {preemptions}"]
    return "\n".join(lines) + "\n"


def test_kv_pool_binds_when_full():
    r = read_vllm_metrics(scrape("37.0", "12.0", "0.991"), max_num_seqs=256)
    assert (r.running, r.waiting, r.kv_cache_usage) == (37, 12, 0.991)
    assert r.binding == BINDS_KV_POOL and r.fix == FIX_KV_POOL
    assert "--gpu-memory-utilization" in r.fix and "--kv-cache-dtype fp8" in r.fix
    assert "99.1%" in r.reason


def test_kv_pool_binds_at_the_threshold_not_below():
    assert read_vllm_metrics(scrape(10, 3, KV_FULL), max_num_seqs=256).binding == BINDS_KV_POOL
    assert read_vllm_metrics(scrape(10, 3, KV_FULL - 0.01), max_num_seqs=256).binding == BINDS_NEITHER


def test_kv_pool_binds_when_preempting_with_room():
    r = read_vllm_metrics(scrape(40, 9, "0.81", "57.0"), max_num_seqs=256)
    assert r.preemptions == 57
    assert r.binding == BINDS_KV_POOL and "57" in r.reason


def test_max_num_seqs_binds_when_batch_full_and_pool_has_room():
    r = read_vllm_metrics(scrape(64, 20, "0.42"), max_num_seqs=64)
    assert r.binding == BINDS_MAX_NUM_SEQS and r.fix == FIX_MAX_NUM_SEQS
    assert "--max-num-seqs" in r.fix
    assert (r.max_num_seqs, r.max_num_seqs_source) == (64, "argument")


def test_max_num_seqs_from_the_default_when_not_given():
    for default in (256, 1024, 512, 2048, 128):
        r = read_vllm_metrics(scrape(default, 5, "0.30"))
        assert r.binding == BINDS_MAX_NUM_SEQS
        assert (r.max_num_seqs, r.max_num_seqs_source) == (default, "vLLM's default")
        assert any("default" in n for n in r.notes)
    # 255 running is no default: without max_num_seqs nothing says the batch is full
    assert read_vllm_metrics(scrape(255, 5, "0.30")).binding == BINDS_NEITHER


def test_max_num_seqs_from_a_config_info_label_wins_over_the_argument():
    text = scrape(32, 4, "0.2") + 'vllm:scheduler_config_info{max_num_seqs="32"} 1.0\n'
    r = read_vllm_metrics(text, max_num_seqs=128)
    assert r.binding == BINDS_MAX_NUM_SEQS and (r.max_num_seqs, r.max_num_seqs_source) == (32, "scrape")
    assert any("128" in n for n in r.notes)


def test_full_pool_beats_full_batch():
    assert read_vllm_metrics(scrape(64, 20, "0.97"), max_num_seqs=64).binding == BINDS_KV_POOL


def test_neither_binds_when_nothing_waits():
    r = read_vllm_metrics(scrape(3, 0, "0.99", 12), max_num_seqs=3)
    assert r.binding == BINDS_NEITHER and r.fix == FIX_NONE
    assert any("12 times" in n for n in r.notes)  # past preemptions still get a note


def test_neither_limit_at_its_cap_while_requests_wait():
    r = read_vllm_metrics(scrape(20, 40, "0.32", 0), max_num_seqs=256)
    assert r.binding == BINDS_NEITHER and r.fix == FIX_BUDGET
    assert "--max-num-batched-tokens" in r.fix


def test_old_names_give_the_same_verdict():
    r = read_vllm_metrics(scrape(37, 12, "0.991", kv="vllm:gpu_cache_usage_perc"))
    assert r.binding == BINDS_KV_POOL and r.naming == "old" and r.kv_metric == "vllm:gpu_cache_usage_perc"


def test_both_names_prefer_the_new_one():
    text = scrape(5, 1, "0.5") + 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
    r = read_vllm_metrics(text, max_num_seqs=256)
    assert r.naming == "new" and r.kv_cache_usage == 0.5 and r.release == RELEASE_BOTH


def test_several_engines_are_summed_and_the_most_pressed_one_decides():
    text = scrape(100, 0, "0.40", 0, engine="0") + scrape(90, 7, "0.98", 5, engine="1")
    r = read_vllm_metrics(text, max_num_seqs=256)
    assert [e.engine for e in r.engines] == ["0", "1"]
    assert (r.running, r.waiting, r.preemptions) == (190, 7, 5)
    assert r.kv_cache_usage == 0.98  # the highest engine's, not the mean 0.69
    assert [e.binding for e in r.engines] == [BINDS_NEITHER, BINDS_KV_POOL]
    assert r.binding == BINDS_KV_POOL and r.reason.startswith("Engine 1 (m)")
    rows = {row["signal"]: row for row in metrics_rows(r)}
    assert rows["Running requests"]["value"] == "190 (engines 0: 100, 1: 90)"
    assert rows["KV-cache usage"]["value"] == "98.0% (engines 0: 40.0%, 1: 98.0%)"


def test_several_models_are_listed():
    text = scrape(1, 0, "0.1", model="a") + scrape(2, 0, "0.2", model="b")
    r = read_vllm_metrics(text)
    assert r.model is None and r.models == ("a", "b") and len(r.engines) == 2


def test_rows_name_each_signal_and_metric():
    r = read_vllm_metrics(scrape(64, 20, "0.42", 3) + 'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1')
    rows = metrics_rows(r)
    assert all(set(row) == {"signal", "metric", "value", "meaning"} for row in rows)
    assert all(isinstance(v, str) for row in rows for v in row.values())
    by = {row["signal"]: row for row in rows}
    assert by["Running requests"]["metric"] == "vllm:num_requests_running" and by["Running requests"]["value"] == "64"
    assert by["Waiting requests"]["value"] == "20"
    assert by["KV-cache usage"]["metric"] == "vllm:kv_cache_usage_perc" and by["KV-cache usage"]["value"] == "42.0%"
    assert by["Preemptions"]["metric"] == "vllm:num_preemptions_total" and by["Preemptions"]["value"] == "3"
    assert by["KV blocks"]["value"] == "1,000" and "16,000 tokens" in by["KV blocks"]["meaning"]
    assert by["Limit that binds"]["value"] == "the KV pool"
    assert by["Flag to change"]["meaning"] == FIX_KV_POOL


def test_log_lines_and_fences_around_a_scrape_are_skipped():
    text = "```\nINFO 07-24 09:55:30 metrics.py:334] Running: 247 reqs\n" + scrape(7, 2, "0.99") + "```\n"
    r = read_vllm_metrics(text)
    assert r.ok and (r.running, r.waiting, r.kv_cache_usage) == (7, 2, 0.99)
    assert any("3 lines are not Prometheus text" in n and "line 1" in n for n in r.notes)


@pytest.mark.parametrize(
    "value, field",
    [("NaN", "kv"), ("1.5", "kv"), ("-0.1", "kv"), ("+Inf", "kv"), ("87.5", "kv")],
)
def test_impossible_kv_usage_is_left_out_with_a_note(value, field):
    r = read_vllm_metrics(scrape(1, 1, value))
    assert r.kv_cache_usage is None and r.binding == BINDS_UNKNOWN
    assert any("fraction from 0 to 1" in n for n in r.notes)


@pytest.mark.parametrize("value", ["-3", "NaN", "1e30", "+Inf"])
def test_impossible_counts_are_left_out_with_a_note(value):
    r = read_vllm_metrics(scrape(value, 1, "0.5"))
    assert r.running is None and r.binding == BINDS_UNKNOWN
    assert any("vllm:num_requests_running" in n and "left out" in n for n in r.notes)


def test_bad_max_num_seqs_argument_is_ignored_with_a_note():
    for bad in (0, -5, 2.5, "64", True):
        r = read_vllm_metrics(scrape(64, 3, "0.4"), max_num_seqs=bad)
        assert r.binding == BINDS_NEITHER and any("ignored" in n for n in r.notes)


@pytest.mark.parametrize(
    "paste, words",
    [
        ("", "empty"),
        ("   \n\t\n", "empty"),
        (None, "Nothing was pasted"),
        (12345, "Expected the scrape as text"),
        ("hello, this is not a scrape {", "No Prometheus metrics"),
        (b"\x00\x01\x02\xff\xfe" * 50, "binary"),
        ("\x01\x02\x03\x04" * 100, "binary"),
        ('# HELP foo bar\n# TYPE foo gauge\nfoo{a="b"} 1\n', "not from a vLLM server"),
        ('vllm:num_requests_running{engine="0"} 1\n', "no KV-cache usage"),
    ],
)
def test_bad_pastes_give_a_message(paste, words):
    r = read_vllm_metrics(paste)
    assert isinstance(r, VllmMetrics) and not r.ok
    assert words in r.error


def test_huge_paste_is_refused_with_the_limit_named():
    big = scrape(1, 0, "0.1") * (MAX_SCRAPE_BYTES // len(scrape(1, 0, "0.1")) + 1)
    for paste in (big, big.encode()):
        r = read_vllm_metrics(paste)
        assert not r.ok and "2 MB" in r.error and "grep" in r.error
    # characters count as their UTF-8 bytes: 1,100,000 two-byte characters are 2.2 MB
    assert "2 MB" in read_vllm_metrics("é" * 1_100_000).error
    # just under the limit is read (a long comment line: the byte limit, not the line limit, is what this checks)
    fits = scrape(1, 0, "0.1")
    fits += "# " + "x" * (MAX_SCRAPE_BYTES - len(fits) - 3) + "\n"
    assert len(fits.encode()) == MAX_SCRAPE_BYTES and read_vllm_metrics(fits).ok


def test_bytes_are_decoded():
    r = read_vllm_metrics(scrape(4, 0, "0.25").encode())
    assert r.ok and r.running == 4 and r.kv_cache_usage == 0.25


_NAMES = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:num_requests_swapped",
        "vllm:cache_config_info",
        "process_open_fds",
    ]
)
_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "0x10", "", "1.0.0"]),
)
_LABELS = st.dictionaries(
    st.sampled_from(["engine", "model_name", "num_gpu_blocks", "block_size", "max_num_seqs", "le"]),
    st.text(max_size=12).map(lambda s: s.replace("\\", "").replace('"', "").replace("\n", "")),
    max_size=3,
)


@st.composite
def _scrape_lines(draw):
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        labels = ",".join(f'{k}="{v}"' for k, v in draw(_LABELS).items())
        lines.append(f"{draw(_NAMES)}{{{labels}}} {draw(_VALUES)}")
        if draw(st.booleans()):
            lines.append(draw(st.text(max_size=30)))  # a stray line among them
    return "\n".join(lines)


def _check(r: VllmMetrics) -> None:
    assert isinstance(r, VllmMetrics)
    assert r.error is None or (isinstance(r.error, str) and r.error)
    assert r.binding in (BINDS_KV_POOL, BINDS_MAX_NUM_SEQS, BINDS_NEITHER, BINDS_UNKNOWN)
    assert r.kv_cache_usage is None or 0.0 <= r.kv_cache_usage <= 1.0
    for count in (r.running, r.waiting, r.preemptions, r.swapped):
        assert count is None or (isinstance(count, int) and count >= 0)
    for row in metrics_rows(r):
        assert all(isinstance(v, str) for v in row.values())


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_fuzz_text_never_raises(text):
    _check(read_vllm_metrics(text))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_fuzz_bytes_never_raise(data):
    _check(read_vllm_metrics(data))
    _check(read_vllm_metrics(data.decode("latin-1")))


@settings(max_examples=300, deadline=None)
@given(_scrape_lines(), st.one_of(st.none(), st.integers(-5, 2000)), st.one_of(st.none(), _scrape_lines()))
def test_fuzz_scrape_like_text_never_raises(text, limit, earlier):
    r = read_vllm_metrics(text, max_num_seqs=limit, earlier=earlier)
    _check(r)
    assert r.preemptions_since_earlier is None or r.preemptions_since_earlier >= 0


def test_earlier_scrape_tells_whether_preemptions_still_rise():
    now = scrape(40, 9, "0.81", "57.0")
    # the counter rose 57 -> 57: no new preemption, so the old ones do not make the pool the limit
    steady = read_vllm_metrics(now, max_num_seqs=256, earlier=scrape(40, 3, "0.80", "57.0"))
    assert steady.preemptions == 57 and steady.preemptions_since_earlier == 0
    assert steady.binding == BINDS_NEITHER and steady.fix == FIX_BUDGET
    # 50 -> 57: still rising, the pool binds
    rising = read_vllm_metrics(now, max_num_seqs=256, earlier=scrape(40, 3, "0.80", "50.0"))
    assert rising.preemptions_since_earlier == 7 and rising.binding == BINDS_KV_POOL
    assert "7 times since the earlier scrape" in rising.reason
    by = {row["signal"]: row for row in metrics_rows(rising)}
    assert by["Preemptions"]["value"] == "57; 7 since the earlier scrape"


def test_earlier_scrape_with_a_higher_counter_means_a_restart():
    r = read_vllm_metrics(scrape(40, 9, "0.81", "5"), max_num_seqs=256, earlier=scrape(40, 3, "0.8", "900"))
    assert r.preemptions_since_earlier is None and r.binding == BINDS_KV_POOL  # falls back to the total
    assert any("restarted" in n for n in r.notes)


def test_unreadable_earlier_scrape_is_left_aside_with_a_note():
    r = read_vllm_metrics(scrape(40, 9, "0.81", "5"), max_num_seqs=256, earlier=b"\x00\x01garbage")
    assert r.ok and r.preemptions_since_earlier is None
    assert any("earlier scrape is left aside" in n and "binary" in n for n in r.notes)


def test_long_label_values_are_cut_before_they_are_echoed():
    r = read_vllm_metrics(scrape(1, 0, "0.1", model="x" * 10_000))
    assert len(r.model) == 200 and r.model.endswith("…")
    r = read_vllm_metrics(scrape(1, 0, "0.1"), max_num_seqs="9" * 10_000)
    assert all(len(n) < 400 for n in r.notes)


@pytest.fixture
def parsed_lines(monkeypatch):
    """The lines handed to the Prometheus parser, summed over its calls (the reader's work, not its time)."""
    from lessons.diagnosis import metrics

    fed: list[int] = []
    real = metrics.text_string_to_metric_families

    def counting(text):
        fed.append(text.count("\n") + (not text.endswith("\n")))
        return real(text)

    monkeypatch.setattr(metrics, "text_string_to_metric_families", counting)
    return fed


def test_two_mb_of_one_character_lines_are_refused_before_any_parsing(parsed_lines):
    # the line-by-line fallback used to hand each of these 1,000,000 lines to the parser (seconds of server CPU)
    for paste in ("a\n" * 1_000_000, b"a\n" * 1_000_000, "\n".join("x" * 1_000_000)):
        r = read_vllm_metrics(paste)
        assert not r.ok and "1,000,000 lines" in r.error and f"{MAX_SCRAPE_LINES:,}" in r.error and "grep" in r.error
    assert parsed_lines == []


def test_the_line_limit_is_exact_and_bounds_the_fallback(parsed_lines):
    # the worst paste the reader takes: all its lines, a bad one last so the whole-text parse fails late
    good = scrape(3, 1, "0.97")
    body = good + "# filler\n" * (MAX_SCRAPE_LINES - good.count("\n") - 1) + "not a metric line\n"
    assert body.count("\n") == MAX_SCRAPE_LINES
    r = read_vllm_metrics(body)
    assert r.ok and (r.running, r.waiting, r.binding) == (3, 1, BINDS_KV_POOL)
    assert any("1 line is not Prometheus text" in n for n in r.notes)
    assert sum(parsed_lines) <= 2 * MAX_SCRAPE_LINES  # once whole, then the sample lines one by one
    assert len(parsed_lines) == 1 + good.count("\n") // 2 + 1  # the whole, each sample line, the bad line
    parsed_lines.clear()
    r = read_vllm_metrics(body + "one more\n")
    assert not r.ok and f"{MAX_SCRAPE_LINES + 1:,} lines" in r.error and parsed_lines == []


def test_lines_end_at_newlines_only_as_the_parser_reads_them(parsed_lines):
    # splitlines() also breaks at \r, \x0b, \x1c, \u2028: a paste of those would pass a "\n" count and then
    # be parsed as a million lines
    for sep in ("\r", "\x0b", "\x1c", "\u2028", "\x85"):
        r = read_vllm_metrics(sep.join("a" * 600_000))
        assert not r.ok
        assert len(parsed_lines) <= 2, sep
        parsed_lines.clear()
    crlf = scrape(2, 0, "0.5").replace("\n", "\r\n")
    r = read_vllm_metrics(crlf)
    assert r.ok and r.running == 2 and r.kv_cache_usage == 0.5


# Scrapes shaped like each release's (the names each vllm/v1/metrics/loggers.py declares), and what they date.
_OLD = ("vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits")
_NEW = ("vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
_BY_REASON = ("vllm:num_requests_waiting_by_reason",)
RELEASE_NAMES = {
    "0.8.5": _OLD,
    "0.9.0": _OLD,
    "0.9.1": _OLD,  # the rename came in 0.9.2, not 0.9.0
    "0.9.2": _OLD + _NEW,  # the old names deprecated beside the new ones
    "0.10.0": _OLD + _NEW,
    "0.10.1": _OLD + _NEW,
    "0.11.0": _NEW,  # the old names hidden
    "0.11.0 --show-hidden-metrics-for-version=0.10": _OLD + _NEW,
    "0.12.0": _NEW,  # the old names removed
    "0.19.1": _NEW,
    "0.20.0": _NEW + _BY_REASON,
    "0.29.0": _NEW + _BY_REASON,
    "0.34.0": _NEW + _BY_REASON,
}
EXPECTED_RELEASE = {
    "0.8.5": RELEASE_OLD,
    "0.9.0": RELEASE_OLD,
    "0.9.1": RELEASE_OLD,
    "0.9.2": RELEASE_BOTH,
    "0.10.0": RELEASE_BOTH,
    "0.10.1": RELEASE_BOTH,
    "0.11.0": RELEASE_NEW,
    "0.11.0 --show-hidden-metrics-for-version=0.10": RELEASE_BOTH,
    "0.12.0": RELEASE_NEW,
    "0.19.1": RELEASE_NEW,
    "0.20.0": RELEASE_BY_REASON,
    "0.29.0": RELEASE_BY_REASON,
    "0.34.0": RELEASE_BY_REASON,
}


def release_scrape(release: str, running=3, waiting=2, usage="0.42", capacity=None) -> str:
    labels = 'engine="0",model_name="m"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {waiting}",
    ]
    for name in RELEASE_NAMES[release]:
        if name.endswith("usage_perc"):
            lines += [f"# TYPE {name} gauge", f"{name}{{{labels}}} {usage}"]
        elif name.endswith("by_reason"):
            cap = waiting if capacity is None else capacity
            lines += [
                f"# TYPE {name} gauge",
                f'{name}{{{labels},reason="capacity"}} {cap}',
                f'{name}{{{labels},reason="deferred"}} {waiting - cap}',
            ]
        else:  # a counter: prometheus_client exposes _total and _created
            lines += [f"# TYPE {name} counter", f"{name}_total{{{labels}}} 16.0", f"{name}_created{{{labels}}} 1.7e9"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("release", sorted(RELEASE_NAMES))
def test_each_releases_scrape_is_dated_by_its_names(release):
    r = read_vllm_metrics(release_scrape(release), max_num_seqs=256)
    assert r.ok and r.release == EXPECTED_RELEASE[release]
    new = "vllm:kv_cache_usage_perc" in RELEASE_NAMES[release]
    assert r.kv_metric == ("vllm:kv_cache_usage_perc" if new else "vllm:gpu_cache_usage_perc")
    assert r.naming == ("new" if new else "old") and r.kv_cache_usage == 0.42


def test_the_release_words_name_each_boundary():
    assert "0.9.1 or earlier" in RELEASE_OLD and "0.9.2" in RELEASE_OLD and "0.12" in RELEASE_OLD
    assert "0.9.2 to 0.10" in RELEASE_BOTH and "--show-hidden-metrics-for-version=0.10" in RELEASE_BOTH
    assert RELEASE_NEW.startswith("vLLM 0.11 or later") and RELEASE_BY_REASON.startswith("vLLM 0.20 or later")
    assert "V0" in RELEASE_V0


def test_a_scrape_cut_before_its_kv_line_is_dated_by_its_prefix_cache_counters():
    text = release_scrape("0.10.0").replace('vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.42\n', "")
    r = read_vllm_metrics(text)
    assert r.kv_metric == "vllm:kv_cache_usage_perc" and r.release == RELEASE_BOTH


# vllm:num_requests_waiting_by_reason (v0.34.0: reason "capacity" and "deferred", summing to the waiting gauge).
def test_only_the_requests_waiting_for_capacity_count():
    r = read_vllm_metrics(release_scrape("0.34.0", running=40, waiting=14, usage="0.99", capacity=12))
    assert (r.waiting, r.waiting_capacity, r.waiting_deferred) == (14, 12, 2)
    assert r.binding == BINDS_KV_POOL and "12 requests for capacity (of 14 waiting)" in r.reason
    row = next(x for x in metrics_rows(r) if x["signal"] == "Waiting for capacity")
    assert row["metric"] == 'vllm:num_requests_waiting_by_reason{reason="capacity"}'
    assert row["value"] == "12; 2 deferred"


def test_deferred_requests_alone_bind_no_limit():
    # a full pool and requests waiting, but every one of them deferred (LoRA budget, KV transfer, blocked status)
    r = read_vllm_metrics(release_scrape("0.34.0", running=40, waiting=3, usage="0.99", capacity=0))
    assert r.binding == BINDS_NEITHER and r.fix == FIX_DEFERRED
    assert "none for capacity" in r.reason
    # the same scrape without the split reads the waiting gauge: the pool binds
    older = read_vllm_metrics(release_scrape("0.19.1", running=40, waiting=3, usage="0.99"))
    assert older.waiting_capacity is None and older.binding == BINDS_KV_POOL
    assert not any(x["signal"] == "Waiting for capacity" for x in metrics_rows(older))


def test_waiting_for_capacity_is_summed_over_engines():
    one = release_scrape("0.34.0", running=10, waiting=4, usage="0.5", capacity=3)
    two = one.replace('engine="0"', 'engine="1"')
    r = read_vllm_metrics(one + two.replace("# TYPE", "# HELP"), max_num_seqs=256)
    assert (r.waiting, r.waiting_capacity, r.waiting_deferred) == (8, 6, 2)
    assert [e.waiting_capacity for e in r.engines] == [3, 3]
