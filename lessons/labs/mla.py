"""Lesson 2's MLA part: what an MLA model (DeepSeek-V3, Kimi K2) caches per token, three ways of reading its
config.json, and what tensor parallelism does to it (no Streamlit).

Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434) caches one latent of ``kv_lora_rank +
qk_rope_head_dim`` values per token and layer (vLLM's `MLAAttentionSpec`, vllm/v1/kv_cache_interface.py: one
"head", no separate V), the same on every tensor-parallel rank (`ModelConfig.get_num_kv_heads` returns 1 for MLA,
vllm/config/model.py). The config.json still states ``num_key_value_heads`` (128 for DeepSeek-V3): a calculator
that multiplies it by a head dim counts heads that are never stored. `mla_lesson` puts the three readings side
by side, the engine's number first (`engine.memory.kv_bytes_per_token`), and `tp_rows` sets the latent against a
GQA model whose KV heads do split over the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.memory import MODELS, LatentAttention, kv_bytes_per_token
from engine.memory.specs import ModelSpec
from engine.memory.units import GiB, KiB, dtype_bytes

MLA_MODEL = "deepseek-v3"  # the lesson's MLA model (DeepSeek-R1 has the same architecture)
GQA_MODEL = "llama-3.1-70b"  # the contrast under TP: 8 KV heads, split over up to 8 GPUs
TP_SIZES: tuple[int, ...] = (1, 2, 4, 8)
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")


def is_mla(model: str) -> bool:
    """Whether the catalog model caches an MLA latent; an unknown key is a ValueError listing the known ones."""
    return MODELS[model].is_mla


def latent_of(spec: ModelSpec) -> LatentAttention:
    """The model's MLA layer (every layer of DeepSeek-V3 and Kimi K2 is one); ValueError for a model without MLA."""
    for kind in spec.layer_kinds:
        if isinstance(kind, LatentAttention):
            return kind
    raise ValueError(f"{spec.name} has no MLA layers ({spec.attention_kind}); pick an MLA model such as {MLA_MODEL}")


@dataclass(frozen=True)
class Reading:
    """One way to read the config: what it multiplies and the bytes per token it gets."""

    reading: str
    formula: str
    bytes_per_token: int


@dataclass(frozen=True)
class MlaLesson:
    """An MLA model's cache per token, read three ways; the first reading is the engine's (vLLM's) number."""

    model: str
    name: str
    kv_dtype: str
    readings: tuple[Reading, ...]

    @property
    def bytes_per_token(self) -> int:
        """What vLLM stores per token on each GPU (the latent)."""
        return self.readings[0].bytes_per_token

    @property
    def kib_per_token(self) -> float:
        """The same, in KiB (68.6 for DeepSeek-V3 in bf16)."""
        return self.bytes_per_token / KiB

    def overcount(self, index: int) -> float:
        """How many times reading `index` over-states the latent."""
        return self.readings[index].bytes_per_token / self.bytes_per_token

    def total_gib(self, context: int, users: int) -> float:
        """KV of `users` requests of `context` tokens each, in GiB (on every GPU, whatever the TP)."""
        return self.bytes_per_token * context * users / GiB

    def rows(self) -> list[dict[str, Any]]:
        """The readings table: what each multiplies, bytes and KiB per token, times the latent."""
        return [
            {
                "reading of config.json": r.reading,
                "formula": r.formula,
                "bytes per token": r.bytes_per_token,
                "KiB per token": round(r.bytes_per_token / KiB, 1),
                "x the latent": round(r.bytes_per_token / self.bytes_per_token, 1),
            }
            for r in self.readings
        ]

    def summary(self) -> str:
        """The readings in one sentence."""
        return (
            f"{self.name} stores {self.bytes_per_token:,} bytes ({self.kib_per_token:,.1f} KiB) per token in "
            f"{self.kv_dtype}; reading num_key_value_heads gives {self.overcount(1):,.1f}× that, and the "
            f"decompressed heads {self.overcount(2):,.1f}×."
        )


def mla_lesson(model: str = MLA_MODEL, kv_dtype: str = "bf16") -> MlaLesson:
    """The three readings of an MLA model's config; ValueError for an unknown key or a model without MLA."""
    spec = MODELS[model]
    lat, b, n = latent_of(spec), dtype_bytes(kv_dtype), spec.num_layers
    generic_dim = spec.hidden_size // spec.num_heads
    qk_dim = lat.qk_nope_head_dim + lat.qk_rope_head_dim
    readings = (
        Reading(
            "the latent, as vLLM stores it (MLAAttentionSpec)",
            f"{n} layers × ({lat.kv_lora_rank} kv_lora_rank + {lat.qk_rope_head_dim} qk_rope_head_dim) × {b:g} bytes",
            kv_bytes_per_token(spec, kv_dtype),
        ),
        Reading(
            "num_key_value_heads × hidden_size / heads (a generic calculator)",
            f"2 × {n} layers × {spec.num_kv_heads} KV heads × {generic_dim} × {b:g} bytes",
            int(2 * n * spec.num_kv_heads * generic_dim * b),
        ),
        Reading(
            "every head's decompressed K and V (MHA over the same heads)",
            f"{n} layers × {spec.num_heads} heads × ({qk_dim} K + {lat.v_head_dim} V) × {b:g} bytes",
            int(n * spec.num_heads * (qk_dim + lat.v_head_dim) * b),
        ),
    )
    return MlaLesson(model, spec.name, kv_dtype, readings)


def tp_rows(kv_dtype: str = "bf16", model: str = MLA_MODEL, gqa_model: str = GQA_MODEL) -> list[dict[str, Any]]:
    """KV bytes per token on each GPU at each of TP_SIZES: the MLA latent (replicated) against a GQA model (split)."""
    mla, gqa = MODELS[model], MODELS[gqa_model]
    return [
        {
            "tensor parallel": tp,
            f"{mla.name} (MLA), KiB per token per GPU": round(kv_bytes_per_token(mla, kv_dtype, tp) / KiB, 2),
            f"{gqa.name} (GQA), KiB per token per GPU": round(kv_bytes_per_token(gqa, kv_dtype, tp) / KiB, 2),
        }
        for tp in TP_SIZES
    ]


def tp_series(kv_dtype: str = "bf16", model: str = MLA_MODEL, gqa_model: str = GQA_MODEL) -> dict[str, list[float]]:
    """The TP chart's two lines: KiB per token per GPU at each of TP_SIZES."""
    rows = tp_rows(kv_dtype, model, gqa_model)
    names = [k for k in rows[0] if k != "tensor parallel"]
    return {name.removesuffix(", KiB per token per GPU"): [r[name] for r in rows] for name in names}


def tp_summary(kv_dtype: str = "bf16", model: str = MLA_MODEL, gqa_model: str = GQA_MODEL) -> str:
    """The TP chart in one sentence."""
    mla, gqa = MODELS[model], MODELS[gqa_model]
    lo, hi = TP_SIZES[0], TP_SIZES[-1]
    m1, m8 = (kv_bytes_per_token(mla, kv_dtype, t) / KiB for t in (lo, hi))
    g1, g8 = (kv_bytes_per_token(gqa, kv_dtype, t) / KiB for t in (lo, hi))
    return (
        f"From TP {lo} to TP {hi}, {gqa.name}'s KV per token on each GPU falls from {g1:,.1f} to {g8:,.1f} KiB "
        f"(its {gqa.num_kv_heads} KV heads split), while {mla.name}'s stays at {m1:,.1f} KiB, then {m8:,.1f} KiB "
        f"(every GPU keeps the whole latent)."
    )
