"""A learner's own config.json, read for every calculator: the parsed model and what it costs in KV (no Streamlit).

"What about my model?" is the first question an engineer asks. Every calculator (lessons 1, 2, 4, 6 and 7) shows
one paste box (ui/own_config.py) whose text comes here: `read_config` checks its size, hands it to the memory
model's `engine.memory.model_from_config` (which names the field a broken config gets wrong) and returns an
`OwnModel`: the `ModelSpec` plus the rows and sentence the page shows back (layers, attention kind, layer
kinds, KV bytes per token, per request). The pasted text is never shown back: a page echoes numbers the memory
model computed, and the model is called "your config.json", never by a name the paste chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.memory import (
    ChunkedLocal,
    LatentAttention,
    LayerKind,
    LinearState,
    SlidingWindow,
    kv_bytes_per_token,
    kv_request_bytes,
    model_from_config,
)
from engine.memory.specs import ModelSpec
from engine.memory.units import KiB, MiB

# A real config.json is 1–6 KB (DeepSeek-V3's, with its quantization block, is under 2 KB; Llama 4's nested
# text and vision configs about 3 KB): 64 KiB leaves room for any of them and keeps a paste from costing the
# server more than a JSON parse of that size.
MAX_CONFIG_CHARS = 64 * 1024
OWN_NAME = "your config.json"  # the parsed model's name: the paste never names what the page shows


@dataclass(frozen=True)
class OwnModel:
    """A model read from a learner's config.json: its spec and the KV arithmetic the pages show back."""

    spec: ModelSpec

    @property
    def attention_kind(self) -> str:
        """ "MHA", "GQA", "MQA" or "MLA", as the memory model reads the config."""
        return self.spec.attention_kind

    def layer_kinds(self) -> str:
        """The layers by KV-cache kind, in words and in layer order ("18 full attention, 18 sliding window of 128")."""
        counts: dict[str, int] = {}
        for kind in self.spec.layer_kinds:
            label = _kind_label(kind)
            counts[label] = counts.get(label, 0) + 1
        return ", ".join(f"{n} {label}" for label, n in counts.items())

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", tensor_parallel: int = 1) -> int:
        """What each further token adds to the cache on one GPU (engine.memory.kv_bytes_per_token)."""
        return kv_bytes_per_token(self.spec, kv_dtype, tensor_parallel)

    def rows(self, kv_dtype: str = "bf16", context: int | None = None) -> list[dict[str, Any]]:
        """The parsed model shown back, one row per figure: layers, heads, kinds, KV per token (and per request)."""
        s = self.spec
        per_token = self.kv_bytes_per_token(kv_dtype)
        rows: list[dict[str, Any]] = [
            {"figure": "layers (num_hidden_layers)", "value": f"{s.num_layers:,}"},
            {"figure": "attention", "value": self.attention_kind},
            {"figure": "query heads", "value": f"{s.num_heads:,}"},
            *self._cache_rows(),
            {"figure": "layer kinds", "value": self.layer_kinds()},
            {"figure": f"KV per token ({kv_dtype})", "value": f"{per_token:,} bytes = {per_token / KiB:,.1f} KiB"},
            {"figure": "longest context (max_position_embeddings)", "value": f"{s.max_context:,} tokens"},
        ]
        if context is not None:
            held = kv_request_bytes(s, context, kv_dtype)  # whole blocks per layer kind, as vLLM V1 allocates
            rows.append({"figure": f"KV of one {context:,}-token request", "value": f"{held / MiB:,.1f} MiB"})
        return rows

    def _cache_rows(self) -> list[dict[str, Any]]:
        """What each token's cache entry is made of: KV heads and head dim, or an MLA model's latent."""
        s = self.spec
        if s.is_mla:
            lat = next(k for k in s.layer_kinds if isinstance(k, LatentAttention))
            latent = f"{lat.kv_lora_rank} kv_lora_rank + {lat.qk_rope_head_dim} qk_rope_head_dim = {lat.latent_dim}"
            return [
                {"figure": "latent per token and layer (MLA)", "value": latent},
                {"figure": "num_key_value_heads (not cached by MLA)", "value": f"{s.num_kv_heads:,}"},
            ]
        return [
            {"figure": "KV heads cached", "value": f"{s.num_kv_heads:,}"},
            {"figure": "head dim", "value": f"{s.head_dim:,}"},
        ]

    def summary(self, kv_dtype: str = "bf16") -> str:
        """The parsed model in one sentence (course text and computed numbers only, no pasted text)."""
        per_token = self.kv_bytes_per_token(kv_dtype)
        return (
            f"Your config.json describes {self.spec.num_layers:,} layers ({self.layer_kinds()}), "
            f"{self.attention_kind} attention: {per_token / KiB:,.1f} KiB of KV per token in {kv_dtype}."
        )


def _kind_label(kind: LayerKind) -> str:
    """One layer's KV kind in the course's words."""
    if isinstance(kind, SlidingWindow):
        return f"sliding window of {kind.window:,}"
    if isinstance(kind, ChunkedLocal):
        return f"chunked local of {kind.chunk:,}"
    if isinstance(kind, LatentAttention):
        return f"MLA latent of {kind.latent_dim}"
    if isinstance(kind, LinearState):
        return "linear attention (fixed state)"
    return "full attention"


def read_config(text: object) -> OwnModel | None:
    """The learner's pasted config.json as an `OwnModel`; None when the box is empty.

    A paste of MAX_CONFIG_CHARS or more (the box cuts a longer paste at its limit, so a full box was cut), text
    that is not a JSON object, or a config the memory model cannot read exactly is a ValueError naming what is
    wrong (the field, for a broken config) and the fix."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"config.json must be pasted as text, got {type(text).__name__}")
    if not text.strip():
        return None
    if len(text) >= MAX_CONFIG_CHARS:
        raise ValueError(
            f"the paste is {len(text):,} characters, the box's limit of {MAX_CONFIG_CHARS:,} or more, so it was "
            "cut or is not a config.json (real ones are a few thousand); paste only the model's config.json, not "
            "its weights index or tokenizer"
        )
    return OwnModel(model_from_config(text, name=OWN_NAME, source="your config.json"))
