"""Untrusted text, shown as text: the one way a page echoes what a user supplied (a link value, a paste, a path,
a name, a prompt, an exception message that quotes one of them).

Streamlit renders alert bodies, captions, labels, toasts and `st.markdown` as Markdown with its own extensions
(colour and icon directives such as ``:red[…]`` and ``:material/…:``, emoji shortcodes, ``$…$`` LaTeX), and
GitHub-flavoured Markdown turns a bare ``https://…`` or ``www.…`` into a link. Escaping every special character
is a contest with all of those parsers (a backslash escape does not stop Streamlit's icon pass, which runs on
the text after escapes are resolved). A CommonMark code span is not: its content is never parsed, and a fence
of more backticks than any run inside the text cannot be closed by the text (CommonMark 0.31, "Code spans").
So:

- `inert(value)` makes the value safe to read: control, format and direction characters (which can reorder
  or hide what a learner sees) become visible ``\\u202e`` escapes, newlines become ``⏎``, a pile of combining
  marks is escaped after the first two, and long text is shortened (the result is at most ``limit``
  characters plus the note of how many were left out);
- `inert_md(value)` is that text as a code span, to place inside any Markdown string;
- `prose_md(value)` is untrusted prose (an exception message that quotes a bad value) as Markdown that still
  reads as a sentence: ordinary words stay as they are, and every run of words holding a character that
  Markdown or Streamlit could act on becomes one code span;
- `echo(value)` shows a longer untrusted text (a pasted log line) as a plain code block;
- `plotly_text(value)` is untrusted text for a plotly title, label, annotation or hover text (plotly reads
  ``<a href>``, ``<b>``, ``<br>`` tags and entities in all of them).

The Markdown around an `inert_md` span must be the course's own and hold no unpaired ``$`` (inline LaTeX
that opens before the span would swallow its fence). Trusted text (the course's own prose, numbers the
engine computed) needs none of this.
"""

from __future__ import annotations

import html
import re
import unicodedata

SHORT = 120  # characters of an untrusted value shown inline
PROSE = 600  # characters of an untrusted message (an exception's text) shown as prose
LONG = 2_000  # characters of an untrusted value shown as a block
MAX_MARKS = 2  # combining marks kept on one base character; more are escaped (no "Zalgo" text over the page)
_BACKTICKS = re.compile(r"`+")
_VISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}  # controls, format (bidi, zero-width), unassigned
_MARKS = {"Mn", "Me"}
_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.;'\"()%/?!=+-")
_LINE_START = re.compile(r"[-+=]|\d+[.)]")  # a list item, a setext underline or an ordered item at a line start


def _escape(ch: str) -> str:
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def _visible(ch: str) -> str:
    if ch == "\n":
        return "⏎"
    if ch == " ":
        return ch
    if ch == "\t" or unicodedata.category(ch) in _VISIBLE_CATEGORIES or ch.isspace():
        return _escape(ch)
    return ch


def inert(value: object, limit: int = SHORT) -> str:
    """``value`` as plain, visible, bounded text: hidden characters escaped, newlines as ⏎, at most ``limit``
    characters (then a note of how many characters of the value were left out). An exception is its message,
    anything else that is not text its repr."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, BaseException) else repr(value)
    text = text.replace("\r\n", "\n")
    out: list[str] = []
    size = marks = 0
    for used, ch in enumerate(text):
        marks = marks + 1 if unicodedata.category(ch) in _MARKS else 0
        shown = _escape(ch) if marks > MAX_MARKS or (marks and used == 0) else _visible(ch)
        if size + len(shown) > limit:
            return f"{''.join(out)}… ({len(text) - used:,} more characters)"
        out.append(shown)
        size += len(shown)
    return "".join(out)


def code_span(text: str) -> str:
    """``text`` as a CommonMark code span that the text cannot close: the fence is longer than any backtick run.

    Padded with a space where CommonMark would otherwise eat a backtick or a space of the text."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def inert_md(value: object, limit: int = SHORT) -> str:
    """An untrusted value to place inside Markdown (an alert, a caption, a label): shown as code, never parsed."""
    return code_span(inert(value, limit))


def _plain_word(word: str, first: bool) -> bool:
    """True when ``word`` means nothing to Markdown or Streamlit: letters and digits of any script, harmless
    ASCII punctuation and at most one colon at its end ("fix:"), no ``www.``, and no list marker first."""
    body = word[:-1] if word.endswith(":") else word
    if not body or "www." in body.lower() or (first and _LINE_START.match(word)):
        return False
    return all(ch in _SAFE_ASCII or not ch.isascii() for ch in body)


def prose_md(value: object, limit: int = PROSE) -> str:
    """Untrusted prose as Markdown that reads as prose: `inert` text whose words with a Markdown-active
    character (`` ` * _ [ ] < > $ : # | ~ \\ & @ { } ^ ``, ``www.``, a list marker first) are code spans."""
    out: list[str] = []  # plain words and code spans, joined by single spaces
    run: list[str] = []  # consecutive words with an active character: one code span
    for word in inert(value, limit).split(" "):
        if word and _plain_word(word, first=not out and not run):
            if run:
                out.append(code_span(" ".join(run)))
                run = []
            out.append(word)
        else:
            (run if run or word else out).append(word)  # an empty word is a second space: kept where it falls
    if run:
        out.append(code_span(" ".join(run)))
    return " ".join(out)


def plotly_text(value: object, limit: int = SHORT) -> str:
    """Untrusted text for a plotly figure (title, tick label, legend name, cell or hover text): tags and
    entities shown as typed, never as markup or a link."""
    return html.escape(inert(value, limit), quote=True)


def echo(value: object, limit: int = LONG) -> None:
    """Show a longer untrusted text as a plain block (no Markdown, no HTML, no links)."""
    import streamlit as st  # here, so the text helpers above import without Streamlit (ui/charts_memory.py)

    st.code(inert(value, limit).replace("⏎", "\n"), language=None)
