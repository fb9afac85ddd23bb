"""Untrusted text, shown as text: the one way a page echoes what a user supplied (a link value, a paste, a path,
a name, a prompt, an exception message that quotes one of them).

Streamlit renders alert bodies, captions, labels and `st.markdown` as Markdown with its own extensions
(colour and icon directives, emoji shortcodes, LaTeX), and GitHub-flavoured Markdown turns a bare
``https://…`` or ``www.…`` into a link. Escaping every special character is a contest with all of those
parsers. A CommonMark code span is not: its content is never parsed, and a fence of more backticks than any
run inside the text cannot be closed by the text (CommonMark 0.31, "Code spans"). So:

- `inert(value)` makes the value safe to read: control, format and direction characters (which can reorder
  or hide what a learner sees) become visible ``\\u202e`` escapes, newlines become ``⏎``, and long text is
  shortened with the number of characters left out;
- `inert_md(value)` is that text as a code span, to place inside any Markdown string;
- `echo(value)` shows a longer untrusted text (a pasted log line) as a plain code block.

Trusted text (the course's own prose, numbers the engine computed) needs none of this.
"""

from __future__ import annotations

import re
import unicodedata

import streamlit as st

SHORT = 120  # characters of an untrusted value shown inline
LONG = 2_000  # characters of an untrusted value shown as a block
_BACKTICKS = re.compile(r"`+")
_VISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}  # controls, format (bidi, zero-width), unassigned


def _visible(ch: str) -> str:
    if ch == "\n":
        return "⏎"
    if ch == " ":
        return ch
    if ch == "\t" or unicodedata.category(ch) in _VISIBLE_CATEGORIES or ch.isspace():
        return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
    return ch


def inert(value: object, limit: int = SHORT) -> str:
    """``value`` as plain, visible, bounded text: hidden characters escaped, newlines as ⏎, at most ``limit``."""
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\r\n", "\n")
    if len(text) > limit:
        head = "".join(_visible(ch) for ch in text[:limit])
        return f"{head}… ({len(text) - limit:,} more characters)"
    return "".join(_visible(ch) for ch in text)


def code_span(text: str) -> str:
    """``text`` as a CommonMark code span that the text cannot close: the fence is longer than any backtick run."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def inert_md(value: object, limit: int = SHORT) -> str:
    """An untrusted value to place inside Markdown (an alert, a caption, a label): shown as code, never parsed."""
    return code_span(inert(value, limit))


def echo(value: object, limit: int = LONG) -> None:
    """Show a longer untrusted text as a plain block (no Markdown, no HTML, no links)."""
    st.code(inert(value, limit).replace("⏎", "\n"), language=None)
