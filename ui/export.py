"""Rows of results -> CSV / JSON text, so every table and chart on a page can be downloaded.

A "row" is a flat dict (column -> value). Columns follow the first appearance order across all rows, so
rows with optional fields still produce one rectangular CSV.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence


def columns_of(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """Union of the rows' keys in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def rows_to_csv(rows: Sequence[Mapping[str, object]]) -> str:
    """CSV text with a header line; missing values are empty cells."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns_of(rows), restval="", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({str(k): v for k, v in row.items()})
    return buf.getvalue()


def to_json(data: object) -> str:
    """Pretty JSON text; values JSON cannot encode (tensors' dtypes, paths) fall back to str()."""
    return json.dumps(data, indent=2, default=str)
