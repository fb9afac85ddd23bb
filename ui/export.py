"""Rows of results -> CSV / JSON text, so every table and chart on a page can be downloaded.

A "row" is a flat dict (column -> value). Columns follow the first appearance order across all rows, so
rows with optional fields still produce one rectangular CSV. A text cell that a spreadsheet would run as a
formula (it starts with = + - @, a tab or a carriage return: a pasted log line such as
``=HYPERLINK("https://…")``) is written with a leading ``'``, so it opens as the text it is (OWASP, "CSV
Injection"); numbers, and text that is just a number such as "-3", are written as they are.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def columns_of(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """Union of the rows' keys in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def csv_cell(value: object) -> object:
    """``value`` for a CSV cell: text a spreadsheet would run as a formula gets a leading ``'``."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def rows_to_csv(rows: Sequence[Mapping[str, object]]) -> str:
    """CSV text with a header line; missing values are empty cells; no cell is a spreadsheet formula."""
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=[str(csv_cell(c)) for c in columns_of(rows)], restval="", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({str(csv_cell(str(k))): csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


def to_json(data: object) -> str:
    """Pretty JSON text; values JSON cannot encode (tensors' dtypes, paths) fall back to str()."""
    return json.dumps(data, indent=2, default=str)
