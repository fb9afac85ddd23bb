"""engine/tokenizer.py: byte-level BPE round trips, training determinism, file format, error messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.model.loader import DEMO_DIR
from engine.model.tokenizer import FILENAME, ByteBPETokenizer

CORPUS = (
    "def add(a, b):\n    return a + b\n\n"
    "def sub(a, b):\n    return a - b\n\n"
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n"
) * 3


@pytest.fixture(scope="module")
def tok() -> ByteBPETokenizer:
    return ByteBPETokenizer.train(CORPUS, vocab_size=300)


def test_training_learns_merges_and_compresses(tok):
    assert tok.vocab_size == 300
    assert len(tok.merges) == 300 - 256 - 2
    ids = tok.encode(CORPUS)
    assert len(ids) < len(CORPUS.encode()) / 2  # frequent words became single tokens
    assert b" self" in tok.token_bytes  # a leading space joins its word, as in GPT-2


def test_training_is_deterministic(tok):
    assert ByteBPETokenizer.train(CORPUS, vocab_size=300).merges == tok.merges


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_any_text(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size - 2 for i in ids)
    assert tok.decode(ids) == text


def test_each_token_is_its_bytes(tok):
    # Independent check of encode: concatenating the byte strings of the ids gives the UTF-8 input back.
    text = "self.x = x  # \u00e9t\u00e9 \U0001f600"
    assert b"".join(tok.token_bytes[i] for i in tok.encode(text)) == text.encode("utf-8")


def test_special_tokens(tok):
    ids = tok.encode("def", add_bos=True) + [tok.eos_token_id]
    assert ids[0] == tok.bos_token_id == 298 and tok.eos_token_id == 299
    assert tok.decode(ids) == "def"
    assert tok.decode(ids, skip_special_tokens=False) == "<|bos|>def<|eos|>"
    with pytest.raises(ValueError, match="token id 300 is outside the vocabulary of 300"):
        tok.decode([300])
    assert tok.decode([0xE2]) == "\ufffd"  # a cut-off multi-byte character, not an exception


def test_save_load(tmp_path, tok):
    path = tok.save(tmp_path)
    assert path.name == FILENAME
    again = ByteBPETokenizer.load(tmp_path)
    assert again.merges == tok.merges and again.encode(CORPUS) == tok.encode(CORPUS)


def test_bad_files_and_sizes(tmp_path):
    with pytest.raises(FileNotFoundError, match=FILENAME):
        ByteBPETokenizer.load(tmp_path)
    (tmp_path / FILENAME).write_text('{"type": "wordpiece", "merges": []}')
    with pytest.raises(ValueError, match="only 'byte_bpe'"):
        ByteBPETokenizer.load(tmp_path)
    (tmp_path / FILENAME).write_text("{oops")
    with pytest.raises(ValueError, match="not a valid"):
        ByteBPETokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="vocab_size=100 must be at least 258"):
        ByteBPETokenizer.train("abc", vocab_size=100)
    with pytest.raises(ValueError, match="corrupt"):
        ByteBPETokenizer([(5, 400)])


def test_demo_tokenizer_round_trips_code():
    tok = ByteBPETokenizer.load(DEMO_DIR)
    text = 'def main(argv=None):\n    """Run the program."""\n    return 0\n'
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text) / 2  # the demo vocabulary knows Python
