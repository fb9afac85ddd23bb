"""Learner names and class codes: one normal form, one script, a few safe characters (no database, no Streamlit).

Names and class codes are compared in one normal form (``name_key``: Unicode NFKC, then case folding), so
"Ａｎａ", "ANA" and "ana" are one learner and "Straße" is "STRASSE"; the form the learner typed is kept for
display. A name may not mix scripts ("аdmin" with a Cyrillic "а" is refused), so a lookalike cannot pass
for a classmate (Han, Hiragana and Katakana together are one Japanese script).
"""

from __future__ import annotations

import unicodedata

NAME_MAX_LEN = 40
NAME_EXTRA_CHARS = " -_."
JAPANESE_SCRIPTS = frozenset({"HAN", "HIRAGANA", "KATAKANA"})  # written together; one script for the mix rule
SCRIPT_ALIASES = (("CJK", "HAN"), ("IDEOGRAPHIC", "HAN"), ("KATAKANA-HIRAGANA", "KATAKANA"))


def _script(ch: str) -> str | None:
    """Script of a letter: the first word of its Unicode name (None for digits and punctuation)."""
    if not ch.isalpha():
        return None
    word = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
    return dict(SCRIPT_ALIASES).get(word, word)


def _mixed_scripts(text: str) -> list[tuple[str, str]]:
    """(script, first letter) of each script in ``text`` when it mixes scripts, else []."""
    first: dict[str, str] = {}
    for ch in text:
        script = _script(ch)
        if script is not None:
            first.setdefault(script, ch)
    if len(first) <= 1 or set(first) <= JAPANESE_SCRIPTS:
        return []
    return list(first.items())


def name_key(value: str) -> str:
    """The form names are stored and compared in: NFKC, case-folded, NFKC again (case folding can decompose)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())


def validate_name(value: object, what: str = "learner name") -> str:
    """``value`` in NFKC, trimmed, spaces collapsed; ValueError unless it is 1–40 letters of one script,
    digits, space, - _ . (the length counts the normalised form, :func:`name_key`)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text, got {type(value).__name__}")
    text = unicodedata.normalize("NFKC", value)  # fullwidth letters, ligatures, odd spaces: their plain forms
    text = " ".join(part for part in text.split(" ") if part)  # trim, collapse spaces; tabs/newlines refused below
    length = max(len(text), len(name_key(text)))
    if length == 0:
        raise ValueError(f"{what} is empty; type one (1–{NAME_MAX_LEN} letters or digits)")
    if length > NAME_MAX_LEN:
        raise ValueError(f"{what} must be 1–{NAME_MAX_LEN} characters, got {length}; type a shorter one")
    bad = sorted({ch for ch in text if not (ch.isalnum() or ch in NAME_EXTRA_CHARS)})
    if bad:
        shown = " ".join(repr(ch) for ch in bad[:5])
        raise ValueError(f"{what} may use letters, digits, space, '-', '_' and '.' only; remove {shown}")
    if not any(ch.isalnum() for ch in text):  # "." or "-" alone names nobody a teacher could recognise
        raise ValueError(f"{what} {text!r} has no letter or digit; type a name with at least one")
    mixed = _mixed_scripts(text)
    if mixed:
        scripts = " and ".join(s.title() for s, _ in mixed)
        letters = ", ".join(f"{ch!r} is {s.title()}" for s, ch in mixed)
        raise ValueError(
            f"{what} mixes {scripts} letters ({letters}); use letters of one script, "
            "so that it cannot pass for someone else's name"
        )
    return text
