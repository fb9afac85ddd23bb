"""Learner names and class codes: one normal form, one script, a few safe characters (no database, no Streamlit).

Names and class codes are compared in one normal form (``name_key``: Unicode NFKC, then case folding), so
"Ａｎａ", "ANA" and "ana" are one learner and "Straße" is "STRASSE"; the form the learner typed is kept for
display. A name may not mix scripts ("аdmin" with a Cyrillic "а" is refused), so a lookalike cannot pass
for a classmate (Han, Hiragana and Katakana together are one Japanese script), and may not hold a character
that renders as nothing (Hangul fillers, zero-width and other default-ignorable code points).

A whole-script lookalike ("Ѕаѕһа" in Cyrillic beside "Sasha") is one script, so the rules above let it
through; :func:`looks_alike` compares names by Unicode's confusable skeleton (UTS #39, section 4: each
character replaced by the prototype it is confusable with, from Unicode's confusables data as the
``confusable_homoglyphs`` package ships it), and progress/store.py makes a new name that looks like a
classmate's that classmate's name.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from importlib import resources

NAME_MAX_LEN = 40
NAME_EXTRA_CHARS = " -_."
JAPANESE_SCRIPTS = frozenset({"HAN", "HIRAGANA", "KATAKANA"})  # written together; one script for the mix rule
SCRIPT_ALIASES = (("CJK", "HAN"), ("IDEOGRAPHIC", "HAN"), ("KATAKANA-HIRAGANA", "KATAKANA"))
# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties) plus the blank-looking fillers: code points a
# font draws as nothing, so a name (or passphrase) made of them looks empty. Ranges are inclusive.
INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
BIDI_MARKS = "\u200e\u200f"  # the confusables data wraps right-to-left characters in these (display only)


def is_invisible(ch: str) -> bool:
    """Whether ``ch`` renders as nothing: a control, format or separator character (other than the plain
    space), a default-ignorable code point, or a blank filler (Hangul fillers U+3164, U+115F, U+1160)."""
    code = ord(ch)
    if any(low <= code <= high for low, high in INVISIBLE_RANGES):
        return True
    return ch != " " and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp")


@functools.cache
def _prototypes() -> dict[str, str]:
    """Each confusable character -> one representative of its confusable class (read once per process).

    The package's data lists every source -> prototype pair of Unicode's confusables.txt in both directions;
    a source maps to exactly one prototype and no prototype is a source (UTS #39), so the connected classes
    of that graph are the skeleton's classes. A class's representative is its multi-character prototype if
    it has one ("m" -> "rn"), else its smallest member: only equality of skeletons matters here."""
    try:
        text = resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    except ModuleNotFoundError as exc:  # a deployment that skipped requirements.txt: say what to install
        raise RuntimeError(
            "lookalike names need the confusable_homoglyphs package; pip install -r requirements.txt"
        ) from exc
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for source, entries in json.loads(text).items():
        a = source.strip(BIDI_MARKS)
        for entry in entries:
            b = str(entry["c"]).strip(BIDI_MARKS)
            if a and b:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb, key=_rank)] = min(ra, rb, key=_rank)
    return {member: find(member) for member in list(parent) if len(member) == 1}


def _rank(member: str) -> tuple[int, str]:
    return (-len(member), member)  # a multi-character prototype first, then the smallest string


def skeleton(text: str) -> str:
    """UTS #39's skeleton of ``text`` (case-sensitive): NFD, each character replaced by its confusable
    class's representative, NFD again. Two strings with one skeleton look the same."""
    table = _prototypes()
    mapped = "".join(table.get(ch, ch) for ch in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


def _skeletons(name: str) -> set[str]:
    # Names are compared without case ("ANA" is "ana"), skeletons with it ("Α" looks like "A", "α" does not
    # look like "a"): a name looks like another if any of its spellings' skeletons match one of the other's.
    return {skeleton(form) for form in (name, name.upper(), name.lower())}


def looks_alike(a: str, b: str) -> bool:
    """Whether names ``a`` and ``b`` look the same (confusable skeletons, any case) but are different names."""
    return name_key(a) != name_key(b) and not _skeletons(a).isdisjoint(_skeletons(b))


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


def _blank(ch: str) -> bool:
    plain = unicodedata.normalize("NFKC", ch)
    return unicodedata.category(ch) not in ("Cc", "Zs", "Zl", "Zp") and any(is_invisible(c) for c in plain or ch)


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
    # Named as typed (NFKC turns U+3164 into U+1160, still blank); controls and odd spaces get the message below.
    blank = sorted({ch for ch in value if _blank(ch)})
    if blank:  # a Hangul filler is a "letter" to isalnum, and shows as nothing: a blank row in the teacher's table
        shown = ", ".join(f"U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')})" for ch in blank[:3])
        raise ValueError(f"{what} has characters that show as nothing ({shown}); remove them and type a name")
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
