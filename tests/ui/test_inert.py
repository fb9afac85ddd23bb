"""ui/inert.py: untrusted text stays text. Property tests over any text (hypothesis) plus the payloads a hostile
user would try: a code span the text cannot close, no hidden characters, a bounded length, prose whose only
Markdown is code spans, plotly text with no tags, CSV downloads with no spreadsheet formula. A CommonMark
parser (markdown-it-py, in requirements-dev.txt) checks the spans the way a renderer reads
them."""

from __future__ import annotations

import csv
import io
import re
import unicodedata

import markdown_it
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ui.export import rows_to_csv
from ui.inert import LONG, PROSE, SHORT, code_span, inert, inert_md, plotly_text, prose_md

MD = markdown_it.MarkdownIt("commonmark")

PAYLOAD = (
    "[click](https://evil.example/x) ![i](https://evil.example/i.png) <img src=https://evil.example/h.png> "
    "https://evil.example/auto www.evil.example :material/warning: :red[red] :smile: $x^2$ ``` `` ` "
    "**bold** _it_ ~~s~~ <script>alert(1)</script> &lt;b&gt; \\` # h\n- item\n1. one\n> quote | a | b |"
)
HIDDEN = "\u202e\u2066\u200b\u200f\ufeff\x00\x1b\r\t\u2028\u00a0\u3000"
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=300) | st.sampled_from([PAYLOAD, HIDDEN, "`" * 9])
ACTIVE = set("`*_[]<>$\\#|~&@{}^")
NOTE = re.compile(r"… \([\d,]+ more characters\)$")


def inline_tokens(markdown: str) -> list:
    """The inline tokens CommonMark reads in ``markdown`` (one paragraph)."""
    blocks = MD.parse(markdown)
    return [child for block in blocks if block.type == "inline" for child in block.children or []]


def span_parts(markdown: str) -> list[tuple[str, str]]:
    """(kind, content) of each top-level piece: "code" for a code span, else the token type and its text."""
    return [(t.type, t.content) for t in inline_tokens(markdown)]


@settings(max_examples=300, deadline=None)
@given(TEXT)
@example(PAYLOAD)
@example("`")
@example("")
@example(" ")
@example(" a ")
def test_inert_md_is_one_code_span_holding_the_visible_text(text):
    md = inert_md(text)
    assert "\n" not in md
    parts = span_parts(f"Value {md}.")
    # one code span and nothing else but the surrounding words: no link, image, html, emphasis
    assert [kind for kind, _ in parts] == ["text", "code_inline", "text"], parts
    shown = parts[1][1]
    visible = inert(text)
    assert shown == visible or shown == visible.strip(" ") or (not visible.strip() and shown.strip() == "")


@settings(max_examples=300, deadline=None)
@given(TEXT, st.integers(min_value=1, max_value=400))
def test_inert_shows_no_hidden_character_and_is_bounded(text, limit):
    out = inert(text, limit)
    hidden = [ch for ch in out if unicodedata.category(ch) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}]
    assert not hidden
    assert all(ch == " " or not ch.isspace() for ch in out)
    body = NOTE.sub("", out)
    assert len(body) <= limit
    assert out == body or len(text) > 0  # the note appears only when something was left out


def test_inert_escapes_direction_and_zero_width_characters_visibly():
    assert inert("a\u202eb\u200bc\nd\r\ne\tf") == "a\\u202eb\\u200bc⏎d⏎e\\u0009f"
    assert inert("\U000e0001") == "\\U000e0001"  # a tag character (format)
    assert inert("e" + "\u0301" * 6) == "e\u0301\u0301" + "\\u0301" * 4  # no pile of combining marks
    assert inert("\u0301x") == "\\u0301x"  # nor a mark riding on the text before the value
    assert inert(ValueError("bad 'x'")) == "bad 'x'" and inert(3) == "3"


def test_long_text_is_shortened_with_a_count():
    out = inert("x" * 500, 120)
    assert out == "x" * 120 + "… (380 more characters)"
    assert NOTE.sub("", inert("\u202e" * 500, 120)).count("\\u202e") == 20  # escapes count toward the limit
    assert len(inert_md("y" * 10_000)) < SHORT + 40 and len(prose_md("y " * 10_000)) < PROSE + 60
    assert len(inert("z" * 10_000, LONG)) < LONG + 40


def test_code_span_fence_beats_any_backtick_run():
    assert code_span("a ``` b") == "````a ``` b````"
    for text in ("`", "``", "a`b", "```x```", "`start", "end`"):
        md = code_span(text)
        fence = re.match(r"`+", md).group()
        assert len(fence) > max(len(r) for r in re.findall(r"`+", text))
        assert span_parts(md) == [("code_inline", text)]


@settings(max_examples=300, deadline=None)
@given(TEXT)
@example(PAYLOAD)
@example("'abc' is not a whole number; type lengths as integers")
@example("- 3 is a list")
@example("1. ordered")
@example("fix: www.evil.example")
def test_prose_md_has_no_markdown_outside_code_spans(text):
    md = prose_md(text)
    assert "\n" not in md
    for kind, content in span_parts(md):
        assert kind in ("text", "code_inline"), (kind, md)
        if kind == "text":
            assert not ACTIVE & set(content), (content, md)
            assert "www." not in content.lower() and "://" not in content
            assert not re.search(r":[^\s:]+:", content)  # no emoji shortcode or :material/icon:
    blocks = [b.type for b in MD.parse(md)]
    assert blocks in ([], ["paragraph_open", "inline", "paragraph_close"]), blocks  # no list, heading, quote


def test_prose_md_keeps_ordinary_words_readable():
    assert prose_md("'abc' is not a whole number; type lengths") == "'abc' is not a whole number; type lengths"
    assert prose_md("length 0 is outside 1 … 1024") == "length 0 is outside 1 … 1024"
    assert prose_md("max_model_len=1 is too small: pick more") == "`max_model_len=1` is too small: pick more"
    assert prose_md("see [x](https://evil.example) now") == "see `[x](https://evil.example)` now"
    assert prose_md("- 3") == "`-` 3" and prose_md("2. x") == "`2.` x"


@settings(max_examples=200, deadline=None)
@given(TEXT)
@example(PAYLOAD)
def test_plotly_text_has_no_tags(text):
    out = plotly_text(text, LONG)
    assert "<" not in out and ">" not in out and '"' not in out
    assert re.fullmatch(r"(?:[^&]|&(?:amp|lt|gt|quot|#x27);)*", out)  # every & starts an entity html.escape wrote


def test_downloaded_csv_cells_never_run_as_spreadsheet_formulas():
    evil = '=HYPERLINK("https://evil.example","x")'
    rows = [
        {"figure": "error", "value": evil},
        {"figure": "@SUM(A1)", "value": "+1+cmd|' /C calc'!A0"},
        {"figure": "n", "value": "-3"},
        {"figure": "m", "value": -2.5},
        {"figure": "t", "value": "\t=1"},
    ]
    out = list(csv.reader(io.StringIO(rows_to_csv(rows))))
    assert out[1] == ["error", "'" + evil] and out[2] == ["'@SUM(A1)", "'+1+cmd|' /C calc'!A0"]
    assert out[3] == ["n", "-3"] and out[4] == ["m", "-2.5"] and out[5] == ["t", "'\t=1"]
