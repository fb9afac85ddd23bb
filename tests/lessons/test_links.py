"""lessons/links.py: lesson settings parsed from and written to the URL, what a bad value falls back to, README's
table. How a page words a bad value (Markdown, the value inert) is tests/ui/test_link_notes.py."""

import math
import re

import pytest

from engine.memory.catalog import MODELS
from lessons import links
from ui.course import COURSE, ROOT, page

LESSON_PAGES = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "diagnosis")


def test_every_lesson_with_settings_has_a_spec_on_its_real_url_path():
    assert set(LESSON_PAGES) <= set(links.SPECS)
    assert set(links.SPECS) <= {p.id for p in COURSE}
    for spec in links.SPECS.values():
        # The path app.py's navigation gives the page (tests/ui/test_course.py: also Streamlit's own inference).
        assert spec.url_path == page(spec.page_id).url
        assert len(set(spec.names)) == len(spec.names)
    assert links.SPECS["paged"].url_path == "paged_attention"


def test_widget_keys_are_the_pages_own():
    # Every key a spec names is written in its page script (so the link really drives that widget).
    for spec in links.SPECS.values():
        source = (ROOT / page(spec.page_id).file).read_text()
        for p in spec.params:
            assert f'view.keys["{p.name}"]' in source, (spec.page_id, p.name)
    assert links.SPECS["gqa"].param("groups").key_for({"model": "llama-2-70b"}) == "gqa_groups_llama-2-70b"


def test_the_issue_example_resolves_without_notes():
    values, notes = links.resolve(links.SPECS["paged"], {"block_size": "64", "max_context": "4096"})
    assert values == {"block_size": 64, "max_context": 4096} and notes == {}
    assert links.link(links.SPECS["paged"], values) == "paged_attention?block_size=64&max_context=4096"


def test_absent_parameters_take_the_pages_defaults():
    assert links.resolve(links.SPECS["paged"], {})[0] == {"block_size": 16, "max_context": 2048}
    values, notes = links.resolve(links.SPECS["bandwidth"], {})
    assert values == {"model": "llama-3-8b", "gpu": "h100-sxm", "dtype": "bf16", "batch": 1, "context": 4096}
    assert notes == {}
    assert links.resolve(links.SPECS["packing"], {})[0] == {"lengths": "50, 400, 30, 1000, 120, 7", "causal": True}


@pytest.mark.parametrize(
    ("page_id", "name", "raw", "accepted"),
    [
        ("paged", "block_size", "7", "one of 1, 2, 4, 8, 16, 32, 64, 128, 256"),
        ("paged", "max_context", "lots", "one of 512, 1024, 2048, 4096, 8192"),
        ("bandwidth", "batch", "0", "1 … 256"),
        ("bandwidth", "batch", "2.5", "1 … 256"),
        ("bandwidth", "batch", "1e3", "1 … 256"),
        ("bandwidth", "model", "gpt-5", "one of llama-2-7b, "),
        ("bandwidth", "context", "8193", "1 … 8192"),  # Llama-3-8B reads at most 8,192 tokens
        ("gqa", "groups", "3", "one of 1, 2, 4, 8, 16, 32"),  # divisors of Llama-3-8B's 32 query heads
        ("gqa", "seq_len", "20", "16 … 256 in steps of 16"),
        ("fragmentation", "rate", "1.25", "0.5 … 64 in steps of 0.5"),
        ("fragmentation", "rate", "nan", "0.5 … 64 in steps of 0.5"),
        ("fragmentation", "rate", "inf", "0.5 … 64 in steps of 0.5"),
        ("fragmentation", "model", "demo", "one of llama-2-7b, "),  # the page offers no demo model
        ("packing", "causal", "maybe", "true or false"),
        ("packing", "lengths", "0, 5", "length 0 is outside 1 … 1024"),
        ("diagnosis", "variant", "-1", "0 … 999"),
        ("diagnosis", "incident", "", "one of chat-oom, "),
    ],
)
def test_a_bad_value_falls_back_to_the_default_with_what_it_accepts(page_id, name, raw, accepted):
    spec = links.SPECS[page_id]
    values, bad = links.resolve(spec, {name: raw})
    assert values == links.resolve(spec, {})[0]  # every setting at its default
    assert list(bad) == [name]
    b = bad[name]
    assert (b.name, b.raw, b.default) == (name, raw, links.encode(values[name]))
    assert accepted in f"{b.reason}; it takes {b.accepts}"
    assert (b.reason is None) == (spec.param(name).check is None)  # only a free-text check explains itself


def test_a_free_text_parameter_says_why_and_what_it_takes():
    (b,) = links.resolve(links.SPECS["packing"], {"lengths": "0, 5"})[1].values()
    assert "length 0 is outside 1 … 1024" in b.reason and b.accepts == links.SPECS["packing"].param("lengths").accepts
    (b,) = links.resolve(links.SPECS["packing"], {"causal": "maybe"})[1].values()
    assert b.reason is None and b.accepts == "true or false" and b.default == "true"


def test_one_bad_parameter_does_not_reset_the_good_ones():
    values, notes = links.resolve(links.SPECS["paged"], {"block_size": "64", "max_context": "3000"})
    assert values == {"block_size": 64, "max_context": 2048} and list(notes) == ["max_context"]


def test_dependent_parameters_follow_the_linked_model():
    spec = links.SPECS["gqa"]
    values, notes = links.resolve(spec, {"model": "qwen2.5-0.5b", "groups": "7"})  # 14 query heads: 7 divides
    assert values["groups"] == 7 and notes == {}
    values, notes = links.resolve(spec, {"model": "qwen2.5-0.5b", "groups": "8"})
    assert values["groups"] == MODELS["qwen2.5-0.5b"].num_kv_heads == 2
    assert notes["groups"].accepts == "one of 1, 2, 7, 14"
    assert links.resolve(spec, {"model": "llama-2-70b"})[0]["groups"] == 8  # the model's real KV heads
    # a model whose whole context is shorter than the usual default starts at its own limit
    assert links.resolve(links.SPECS["bandwidth"], {"model": "demo"})[0]["context"] == MODELS["demo"].max_context


def test_values_are_parsed_to_the_widgets_types():
    values, notes = links.resolve(
        links.SPECS["playground"],
        {"temperature": "0.3", "top_p": " 0.35 ", "prefix_caching": "YES", "block_size": "+16", "seed": "7"},
    )
    assert notes == {}
    assert values["temperature"] == 0.3 and isinstance(values["temperature"], float)
    assert math.isclose(values["top_p"], 0.35) and values["top_p"] == round(values["top_p"], 9)
    assert values["prefix_caching"] is True and values["block_size"] == 16 and values["seed"] == 7
    assert links.resolve(links.SPECS["packing"], {"causal": "0"})[0]["causal"] is False
    assert links.resolve(links.SPECS["fragmentation"], {"dataset": "ALPACA"})[0]["dataset"] == "alpaca"
    # typed lengths are normalised the way the page shows them
    assert links.resolve(links.SPECS["packing"], {"lengths": "7 9;3"})[0]["lengths"] == "7, 9, 3"


def test_query_round_trip_for_every_spec():
    examples = {
        "bandwidth": {"model": "mistral-7b", "gpu": "l4", "dtype": "int4", "batch": 200, "context": 30000},
        "fragmentation": {"rate": 0.5, "requests": 400, "max_model_len": 32768},
        "playground": {"temperature": 0.0, "top_p": 0.05, "num_blocks": 256},
    }
    for page_id, spec in links.SPECS.items():
        values = {**links.resolve(spec, {})[0], **examples.get(page_id, {})}
        query = links.query_for(spec, values)
        assert list(query) == list(spec.names) and all(isinstance(v, str) for v in query.values())
        assert links.resolve(spec, query) == (values, {})
    assert links.query_for(links.SPECS["fragmentation"], {"rate": 8.0}) == {"rate": "8"}


def test_other_pages_params_are_what_the_current_page_does_not_use():
    others = links.other_pages_params(links.SPECS["paged"])
    assert "block_size" not in others and "max_context" not in others
    assert {"model", "lengths", "incident"} <= others
    assert "embed" not in others


def test_readme_table_matches_the_specs():
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- lesson-parameters:start -->\n(.*?)\n<!-- lesson-parameters:end -->", readme, re.S)
    assert found, "README lacks the lesson-parameters table markers"
    assert found.group(1) == links.markdown_table(), "README's table is stale: paste `python -m lessons.links` in"
    rows = [line for line in found.group(1).splitlines()[2:]]
    assert len(rows) == sum(len(s.params) for s in links.SPECS.values())
    assert "| `/paged_attention` | `block_size` |" in found.group(1)


def test_unknown_parameter_name_is_a_valueerror():
    with pytest.raises(ValueError, match="paged has no parameter 'block'; use one of block_size, max_context"):
        links.SPECS["paged"].param("block")


@pytest.mark.parametrize(
    "raw",
    [
        "６４",
        "٦٤",
        "६४",
        "6_4",
        "64\u200f",
        "\u200e64",
        "6 4",
        "64\u00a0",
        "\u300064",
        "1e3",
        "6.4e1",
        "0x40",
        "inf",
        "nan",
        "-inf",
        "6,4",
        "1" * 40,
        "+-64",
        "64\x00",
        "６٤",
        "𝟔𝟒",
    ],
)
def test_numbers_in_links_are_ascii_digits_only(raw):
    # int() and float() take all of these (any script's digits, underscores, exponents, inf); a link does not
    for spec, name in ((links.SPECS["bandwidth"], "batch"), (links.SPECS["fragmentation"], "rate")):
        values, bad = links.resolve(spec, {name: raw})
        assert list(bad) == [name] and values[name] == links.resolve(spec, {})[0][name], (name, raw)
        assert bad[name].raw == raw  # kept as given: the page shows it inertly


def test_what_a_number_in_a_link_may_look_like():
    # an optional sign, ASCII digits, a decimal point for floats; spaces, tabs and newlines around are trimmed
    bandwidth, fragmentation = links.SPECS["bandwidth"], links.SPECS["fragmentation"]
    for raw in ("64", "+64", "064", " 64 ", "\t64\n"):
        assert links.resolve(bandwidth, {"batch": raw}) == ({**links.resolve(bandwidth, {})[0], "batch": 64}, {})
    for raw, rate in (("4.5", 4.5), (".5", 0.5), ("4.", 4.0), ("+8", 8.0), ("8.00", 8.0)):
        values, notes = links.resolve(fragmentation, {"rate": raw})
        assert notes == {} and values["rate"] == rate, raw
    assert list(links.resolve(bandwidth, {"batch": "-1"})[1]) == ["batch"]  # a sign is read, then the range refuses


def test_choices_match_ascii_only():
    # "K" (Kelvin sign) lowers to "k" and "ı" uppers to "I": a look-alike never selects a real choice
    for raw in ("llama-3-8\u212ab", "fp\u0665", "ALP\u0391CA", "ｂｆ16"):
        for spec in links.SPECS.values():
            for p in spec.params:
                if p.kind is str and p.check is None:
                    values, notes = links.resolve(spec, {p.name: raw})
                    assert list(notes) == [p.name], (p.name, raw)


def test_a_kelvin_sign_never_selects_the_128k_incident():
    # "default-128\u212a" (Kelvin sign) lowers to "default-128k"; without the ASCII check it selects that incident
    spec = links.SPECS["diagnosis"]
    values, notes = links.resolve(spec, {"incident": "default-128\u212a"})
    assert list(notes) == ["incident"] and notes["incident"].raw == "default-128\u212a"
    assert values["incident"] == links.resolve(spec, {})[0]["incident"] != "default-128k"
    assert links.resolve(spec, {"incident": "default-128K"}) == ({**values, "incident": "default-128k"}, {})
