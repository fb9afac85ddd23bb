"""ui/linked_view.py's `link_note`: how a page words a link parameter it did not take. The course's words stay
Markdown; the link's value (and a free-text parameter's complaint that quotes it) is only ever inside code
spans, whatever it holds."""

import pytest

from lessons import links
from ui.inert import inert_md, prose_md
from ui.linked_view import link_note

PAYLOAD = (
    "[click](https://evil.example/x) ![i](https://evil.example/i.png) <img src=https://evil.example/h.png> "
    "https://evil.example/auto :material/warning: $x^2$ ``` `` `\u202e"
)


def test_a_choice_note_names_the_parameter_the_value_what_it_takes_and_the_default():
    (bad,) = links.resolve(links.SPECS["paged"], {"block_size": "7"})[1].values()
    assert link_note(bad) == (
        "Link parameter `block_size` has the value `7`, which is not valid (it takes one of 1, 2, 4, 8, 16, 32, "
        "64, 128, 256); showing the default, `16`."
    )


def test_a_free_text_note_says_why_then_what_it_takes():
    (bad,) = links.resolve(links.SPECS["packing"], {"lengths": "0, 5"})[1].values()
    note = link_note(bad)
    assert note.startswith(f"Link parameter `lengths` has the value {inert_md('0, 5')}, which is not valid (")
    assert f"({prose_md(bad.reason)}; it takes {bad.accepts})" in note
    assert note.endswith(f"showing the default, {inert_md(bad.default)}.")


def test_a_reason_quoting_the_value_is_inert_too():
    parser = pytest.importorskip("markdown_it").MarkdownIt("commonmark")
    bad = links.BadValue("lengths", "x", "whole numbers", "7", reason="`x` is **bold** :red[alarm] $y$ <b>b</b>")
    note = link_note(bad)
    tokens = [c for block in parser.parse(note) if block.type == "inline" for c in block.children]
    assert {t.type for t in tokens} <= {"text", "code_inline"}, note  # no bold, no HTML
    plain = "".join(t.content for t in tokens if t.type == "text")
    assert "bold" not in plain and ":red" not in plain and "$" not in plain and "<b>" not in plain
    assert "it takes whole numbers" in plain  # the course's own words stay prose


@pytest.mark.parametrize("spec", links.SPECS.values(), ids=lambda s: s.page_id)
def test_a_markdown_payload_is_only_ever_inside_code_spans(spec):
    markdown_it = pytest.importorskip("markdown_it")
    parser = markdown_it.MarkdownIt("commonmark")
    _, bad = links.resolve(spec, {name: PAYLOAD for name in spec.names})
    assert list(bad) == list(spec.names)
    for name, b in bad.items():
        note = link_note(b)
        tokens = [c for block in parser.parse(note) if block.type == "inline" for c in block.children]
        assert {t.type for t in tokens} <= {"text", "code_inline"}, (name, note)
        text = "".join(t.content for t in tokens if t.type == "text")
        assert "evil" not in text and "$" not in text and ":material" not in text and "\u202e" not in note
        assert f"`{name}`" in note  # the parameter is named (trusted: from the spec)
