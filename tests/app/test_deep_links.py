"""Deep links (AppTest): for every lesson, a link sets the widgets and what the page computes, the widgets
write the view back into the URL, and bad values show a warning and the defaults, never an exception."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons import links
from ui.inert import inert_md
from ui.linked_view import LINK_OPEN

# page id -> (query, widget key -> the value that widget must show)
LINKS = {
    "bandwidth": (
        {"model": "llama-2-7b", "gpu": "a100-80gb", "dtype": "fp8", "batch": "32", "context": "2048"},
        {"bw_model": "llama-2-7b", "bw_gpu": "a100-80gb", "bw_dtype": "fp8", "bw_batch": 32, "bw_context": 2048},
    ),
    "gqa": (
        {"model": "llama-2-70b", "kv_dtype": "fp8", "groups": "2", "context": "4096", "users": "3", "seq_len": "32"},
        {
            "gqa_model": "llama-2-70b",
            "gqa_dtype": "fp8",
            "gqa_groups_llama-2-70b": 2,
            "gqa_context": 4096,
            "gqa_users": 3,
            "gqa_seq": 32,
        },
    ),
    "packing": ({"lengths": "7,9", "causal": "false"}, {"pack_lengths": "7, 9", "pack_causal": False}),
    "fragmentation": (
        {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "max_model_len": "4096",
            "dataset": "alpaca",
            "rate": "4.5",
            "requests": "60",
        },
        {
            "frag_model": "llama-2-7b",
            "frag_gpu": "a100-80gb",
            "frag_max_len": 4096,
            "frag_dataset": "alpaca",
            "frag_rate": 4.5,
            "frag_requests": 60,
        },
    ),
    "paged": ({"block_size": "64", "max_context": "4096"}, {"paged_block": 64, "paged_context": 4096}),
    "diagnosis": ({"incident": "mha-rag", "variant": "7"}, {"diag_scenario": "mha-rag", "diag_variant": 7}),
    "playground": (
        {
            "max_tokens": "5",
            "temperature": "0",
            "top_p": "0.9",
            "top_k": "0",
            "seed": "3",
            "block_size": "16",
            "num_blocks": "40",
            "prefix_caching": "true",
        },
        {
            "pg_max_tokens": 5,
            "pg_temperature": 0.0,
            "pg_top_p": 0.9,
            "pg_top_k": 0,
            "pg_seed": 3,
            "pg_block": 16,
            "pg_blocks": 40,
            "pg_prefix": True,
        },
    ),
}

CANONICAL = {"packing": {"lengths": "7, 9"}}  # how the page writes a setting back when it differs from the link

# page id -> (bad query, text each warning must hold per parameter, widget key -> default shown instead)
BAD = {
    "bandwidth": (
        {"dtype": "fp4", "batch": "0", "context": "100000"},
        {"dtype": "one of bf16, fp8, int4", "batch": "1 … 256", "context": "1 … 8192"},
        {"bw_model": "llama-3-8b", "bw_dtype": "bf16", "bw_batch": 1, "bw_context": 4096},
    ),
    "gqa": (
        {"model": "gpt-5", "groups": "3", "seq_len": "20"},
        {"model": "one of llama-2-7b", "groups": "one of 1, 2, 4, 8, 16, 32", "seq_len": "16 … 256 in steps of 16"},
        {"gqa_model": "llama-3-8b", "gqa_groups_llama-3-8b": 8, "gqa_seq": 64},
    ),
    "packing": (
        {"lengths": "0, 5", "causal": "maybe"},
        {"lengths": "length 0 is outside 1 … 1024", "causal": "true or false"},
        {"pack_lengths": "50, 400, 30, 1000, 120, 7", "pack_causal": True},
    ),
    "fragmentation": (
        {"model": "demo", "max_model_len": "3000", "rate": "1.25", "requests": "1000"},
        {
            "model": "one of llama-2-7b",
            "max_model_len": "one of 512, 1024",
            "rate": "0.5 … 64 in steps of 0.5",
            "requests": "20 … 400 in steps of 20",
        },
        {"frag_model": "llama-2-13b", "frag_max_len": 2048, "frag_rate": 8.0, "frag_requests": 200},
    ),
    "paged": (
        {"block_size": "7", "max_context": "lots"},
        {"block_size": "one of 1, 2, 4, 8, 16, 32, 64, 128, 256", "max_context": "one of 512, 1024, 2048, 4096, 8192"},
        {"paged_block": 16, "paged_context": 2048},
    ),
    "diagnosis": (
        {"incident": "nope", "variant": "-1"},
        {"incident": "one of chat-oom, mha-rag", "variant": "0 … 999"},
        {"diag_scenario": "chat-oom", "diag_variant": 0},
    ),
    "playground": (
        {"temperature": "9", "block_size": "3", "prefix_caching": "2"},
        {"temperature": "0 … 2 in steps of 0.1", "block_size": "one of 1, 2, 4", "prefix_caching": "true or false"},
        {"pg_temperature": 0.6, "pg_block": 8, "pg_prefix": False},
    ),
}


def opened(app_test, page_id: str, query: dict[str, str]) -> AppTest:
    at = app_test(page_id, timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def link_texts(at: AppTest, page_id: str) -> list[str]:
    """What the "Copy link to this view" box shows once the learner opens it (it is made only while open)."""
    at.session_state[f"{page_id}{LINK_OPEN}"] = True
    at.run()
    assert not at.exception, at.exception
    return [c.value for c in at.code]


def widget_values(at: AppTest, keys) -> dict:
    return {key: at.session_state[key] for key in keys}


@pytest.mark.parametrize("page_id", sorted(LINKS))
def test_a_deep_link_sets_the_widgets(app_test, page_id):
    query, expected = LINKS[page_id]
    at = opened(app_test, page_id, query)
    assert widget_values(at, expected) == expected
    assert not at.warning
    # the address bar now holds the view (as the page writes it), and the copy-link box shows it
    assert {k: at.query_params[k] for k in query} == {**query, **CANONICAL.get(page_id, {})}
    path = {"paged": "paged_attention"}.get(page_id, page_id)
    assert not any(c.value.startswith(f"{path}?") for c in at.code)  # closed: the box's contents are not made
    shown = link_texts(at, page_id)
    assert any(c.startswith(f"{path}?") for c in shown)
    assert any("embed=true" in c and "<iframe" in c for c in shown)


def test_the_linked_paged_view_computes_with_the_linked_settings(app_test):
    at = opened(app_test, "paged", LINKS["paged"][0])
    assert {m.label: m.value for m in at.metric}["Table width (max entries)"] == "64"  # 4096 / 64
    assert "paged_attention?block_size=64&max_context=4096" in link_texts(at, "paged")


def test_the_linked_gqa_view_computes_with_the_linked_settings(app_test):
    at = opened(app_test, "gqa", LINKS["gqa"][0])
    kv = next(m.value for m in at.metric if m.label.startswith("KV per token"))
    assert kv == "40 KiB"  # Llama-2-70B: 2 (K, V) x 80 layers x 2 KV heads x 128 dims x 1 byte (fp8)


def test_the_linked_packing_view_uses_the_linked_lengths(app_test):
    at = opened(app_test, "packing", LINKS["packing"][0])
    shown = {m.label: m.value for m in at.metric}
    assert shown["Real tokens"] == "16" and shown["Padded slots"] == "18"  # 7 + 9 real; 2 x 9 padded
    assert at.query_params["lengths"] == "7, 9" and at.query_params["causal"] == "false"


@pytest.mark.parametrize("page_id", sorted(BAD))
def test_bad_values_show_a_warning_and_the_defaults(app_test, page_id):
    query, accepted, defaults = BAD[page_id]
    at = opened(app_test, page_id, query)
    warnings = [w.value for w in at.warning if w.value.startswith("Link parameter")]
    assert len(warnings) == len(query)
    for name, raw in query.items():
        (note,) = [w for w in warnings if f"`{name}` has the value {inert_md(raw)}," in w]
        assert accepted[name] in note
    assert widget_values(at, defaults) == defaults
    # the URL now shows the view on screen, so the warning goes once the learner moves on
    assert all(at.query_params[name] != raw for name, raw in query.items())


def test_moving_a_widget_writes_the_view_back_and_drops_other_pages_params(app_test):
    at = opened(app_test, "paged", {"block_size": "64", "model": "llama-2-7b", "utm_source": "course"})
    assert at.query_params == {"block_size": "64", "max_context": "2048", "utm_source": "course"}
    at.select_slider(key="paged_block").set_value(8).run()
    at.select_slider(key="paged_context").set_value(512).run()
    assert not at.exception
    assert at.query_params == {"block_size": "8", "max_context": "512", "utm_source": "course"}
    assert "paged_attention?block_size=8&max_context=512" in link_texts(at, "paged")


def test_the_link_does_not_override_a_widget_the_learner_moved(app_test):
    # A re-run that still carries the old URL (the browser had not applied the last update yet) must keep
    # the learner's move: the link only starts widgets that are not on screen yet.
    at = opened(app_test, "paged", {"block_size": "64"})
    at.select_slider(key="paged_block").set_value(8)
    at.query_params["block_size"] = "64"  # the stale URL
    at.run()
    assert at.session_state["paged_block"] == 8 and at.query_params["block_size"] == "8"


def test_a_changed_model_starts_its_group_slider_at_the_models_own_default(app_test):
    at = opened(app_test, "gqa", {"model": "llama-2-70b", "groups": "4"})
    assert at.session_state["gqa_groups_llama-2-70b"] == 4
    at.selectbox(key="gqa_model").set_value("qwen2.5-0.5b").run()
    assert not at.exception and at.session_state["gqa_groups_qwen2.5-0.5b"] == 2  # its real KV heads, not the link's
    assert at.query_params["model"] == "qwen2.5-0.5b" and at.query_params["groups"] == "2"


PAYLOAD = (
    "[click](https://evil.example/x) ![i](https://evil.example/i.png) <img src=https://evil.example/h.png> "
    "https://evil.example/auto :material/warning: $x^2$ ``` `` `\u202e"
)


@pytest.mark.parametrize("page_id", sorted(links.SPECS))
def test_a_markdown_payload_in_every_parameter_is_shown_only_as_code(app_test, page_id):
    spec = links.SPECS[page_id]
    at = opened(app_test, page_id, {name: PAYLOAD for name in spec.names})
    notes = [w.value for w in at.warning if w.value.startswith("Link parameter")]
    assert len(notes) == len(spec.names)
    parser = pytest.importorskip("markdown_it").MarkdownIt("commonmark")
    for note in notes:
        tokens = [c for b in parser.parse(note) if b.type == "inline" for c in b.children]
        assert {t.type for t in tokens} <= {"text", "code_inline"}, note
        assert inert_md(PAYLOAD) in note  # the raw value, whole, as one code span
        plain = "".join(t.content for t in tokens if t.type == "text")
        assert "evil" not in plain and "$" not in plain and ":material" not in plain and "\u202e" not in note
