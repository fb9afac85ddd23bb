"""A small byte-level BPE tokenizer for the demo model, stored as one JSON file in the model folder.

Byte-pair encoding (Sennrich et al., 2016, arXiv 1508.07909) over UTF-8 bytes as in GPT-2 (Radford et al.,
2019): every string encodes losslessly because the 256 byte values are always in the vocabulary, and the
learned merges let a tiny model see about three characters per token instead of one. Text is first split
into "words" (a leading space stays with its word, runs of spaces stay together) so merges never cross a
word boundary and training only counts distinct words.

Real checkpoints ship a Hugging Face `tokenizer.json`; `engine/model/loader.py` wraps that with the optional
`tokenizers` library instead. Both expose `encode`, `decode`, `eos_token_id`, `vocab_size`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

FILENAME = "kvlab_tokenizer.json"
SPECIAL_TOKENS = ("<|bos|>", "<|eos|>")
# A leading space joins its word; whitespace runs keep their last space for the next word (GPT-2 style).
_WORD_RE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+")


def _merge_pair(word: tuple[int, ...], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """Replace every non-overlapping occurrence of `pair` in `word` by `new_id`, left to right."""
    out: list[int] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


class ByteBPETokenizer:
    """Byte-level BPE: ids 0..255 are bytes, then one id per merge, then the special tokens."""

    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: 256 + i for i, pair in enumerate(self.merges)}
        self.token_bytes: list[bytes] = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            if a >= len(self.token_bytes) or b >= len(self.token_bytes):
                raise ValueError(f"merge ({a}, {b}) refers to a token that is defined later; the file is corrupt")
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self.bos_token_id = len(self.token_bytes)
        self.eos_token_id = self.bos_token_id + 1
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of ids: 256 bytes + merges + special tokens."""
        return len(self.token_bytes) + len(SPECIAL_TOKENS)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> ByteBPETokenizer:
        """Learn `vocab_size - 256 - 2` merges from `text`, most frequent adjacent pair first (ties: smallest pair)."""
        num_merges = vocab_size - 256 - len(SPECIAL_TOKENS)
        if num_merges < 0:
            raise ValueError(f"vocab_size={vocab_size} must be at least {256 + len(SPECIAL_TOKENS)}")
        counts = Counter(_WORD_RE.findall(text))
        words = [tuple(w.encode("utf-8")) for w in counts]
        freqs = list(counts.values())
        # Pair counts and which words hold each pair, updated incrementally after each merge.
        pairs: Counter[tuple[int, int]] = Counter()
        where: dict[tuple[int, int], set[int]] = {}
        for idx, word in enumerate(words):
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += freqs[idx]
                where.setdefault(pair, set()).add(idx)
        merges: list[tuple[int, int]] = []
        for step in range(num_merges):
            pairs = +pairs  # drop pairs whose count fell to zero
            if not pairs:
                break
            best_count = max(pairs.values())
            best = min(p for p, c in pairs.items() if c == best_count)  # deterministic tie-break
            merges.append(best)
            for idx in sorted(where.pop(best, ())):
                word = words[idx]
                for pair in zip(word, word[1:], strict=False):
                    pairs[pair] -= freqs[idx]
                word = _merge_pair(word, best, 256 + step)
                words[idx] = word
                for pair in zip(word, word[1:], strict=False):
                    pairs[pair] += freqs[idx]
                    where.setdefault(pair, set()).add(idx)
        return cls(merges)

    def _encode_word(self, word: str) -> list[int]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        ids = tuple(word.encode("utf-8"))
        while len(ids) > 1:
            # Apply the earliest-learned merge present, exactly as training did.
            pair = min(zip(ids, ids[1:], strict=False), key=lambda p: self.ranks.get(p, 1 << 30))
            if pair not in self.ranks:
                break
            ids = _merge_pair(ids, pair, self.ranks[pair])
        if len(self._cache) < 100_000:
            self._cache[word] = list(ids)
        return list(ids)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Text -> token ids (optionally prefixed with the BOS id)."""
        ids = [self.bos_token_id] if add_bos else []
        for word in _WORD_RE.findall(text):
            ids.extend(self._encode_word(word))
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Token ids -> text; invalid UTF-8 (a cut-off multi-byte character) becomes U+FFFD."""
        parts: list[bytes] = []
        for i in ids:
            i = int(i)
            if 0 <= i < len(self.token_bytes):
                parts.append(self.token_bytes[i])
            elif i in (self.bos_token_id, self.eos_token_id):
                if not skip_special_tokens:
                    parts.append(SPECIAL_TOKENS[i - self.bos_token_id].encode())
            else:
                raise ValueError(f"token id {i} is outside the vocabulary of {self.vocab_size} ids")
        return b"".join(parts).decode("utf-8", errors="replace")

    def save(self, folder: str | Path) -> Path:
        """Write the tokenizer as `kvlab_tokenizer.json` in `folder`; returns the file path."""
        path = Path(folder) / FILENAME
        data = {"type": "byte_bpe", "special_tokens": list(SPECIAL_TOKENS), "merges": [list(m) for m in self.merges]}
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> ByteBPETokenizer:
        """Read a tokenizer written by `save` (a folder or the JSON file itself)."""
        path = Path(path)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file {path} does not exist")
        try:
            data = json.loads(path.read_text())
            merges = [(int(a), int(b)) for a, b in data["merges"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a valid {FILENAME}: {exc}") from exc
        if data.get("type") != "byte_bpe":
            raise ValueError(f"{path} has tokenizer type {data.get('type')!r}; only 'byte_bpe' is supported")
        return cls(merges)
