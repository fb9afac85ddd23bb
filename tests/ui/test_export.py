"""Exports (ui/export.py): ragged rows give one rectangular CSV; JSON falls back to str() for odd values."""

import csv
import io
import json

import torch

from ui.export import columns_of, rows_to_csv, to_json


def test_csv_and_json_round_trip_ragged_rows():
    rows = [{"a": 1, "b": 2.5}, {"b": "x", "c": True}]
    assert columns_of(rows) == ["a", "b", "c"]
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert parsed == [{"a": "1", "b": "2.5", "c": ""}, {"a": "", "b": "x", "c": "True"}]
    assert json.loads(to_json({"t": torch.float32, "rows": rows}))["t"] == "torch.float32"
