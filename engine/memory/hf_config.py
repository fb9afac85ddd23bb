"""A model's `ModelSpec` from its Hugging Face config.json: the layer kinds, MoE shape and weight format it states.

Reads the config.json of today's decoder families as their repos publish them (and as transformers reads them):
Llama / Mistral / Qwen2 / Mixtral; ``qwen3`` and ``qwen3_moe`` (``num_experts``, ``moe_intermediate_size``);
``deepseek_v3`` and Kimi K2 (MLA: ``kv_lora_rank``, ``qk_rope_head_dim``; MoE: ``n_routed_experts``,
``n_shared_experts``, ``first_k_dense_replace``; ``num_key_value_heads`` is not what MLA caches); ``gpt_oss``
(``layer_types`` alternating sliding / full, ``num_local_experts``, MXFP4 experts); ``gemma3`` (nested
``text_config``; ``layer_types``, or in older files only ``sliding_window_pattern``); ``llama4`` (nested
``text_config``; ``no_rope_layers``: its NoPE layers attend globally, the others in chunks of
``attention_chunk_size``, vllm/model_executor/models/llama4.py); ``qwen3_next`` (``layer_types`` or
``full_attention_interval``: Gated DeltaNet layers between full-attention ones). Each layer becomes one kind of
engine/memory/layers.py. A broken config is a ValueError naming the field, never a wrong number.
"""

from __future__ import annotations

import json
from typing import Any

from engine.memory.layers import ChunkedLocal, FullAttention, LatentAttention, LayerKind, LinearState, SlidingWindow
from engine.memory.specs import ModelSpec, custom_model
from kernels.validate import is_whole

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
# Families whose transformers config ties the lm_head to the embedding when config.json does not say (Gemma 3's
# published text_config leaves tie_word_embeddings out; Gemma3TextConfig defaults it to true).
TIED_BY_DEFAULT = ("gemma3", "gemma3_text")
_MLA_FIELDS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _parse(config: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"config is not valid JSON ({e.msg} at line {e.lineno}); paste the whole config.json"
            ) from None
    if not isinstance(config, dict):
        raise ValueError(f"config.json must be a JSON object, got {type(config).__name__}")
    return config


def _decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json (multimodal wrappers nest it in text_config), keys checked."""
    cfg = config.get("text_config", config)
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json: text_config must be a JSON object, got {type(cfg).__name__}")
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads")
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"config.json lacks {missing}; a decoder config needs {list(required)}")
    for key in required:
        if not is_whole(cfg[key]) or cfg[key] <= 0:
            raise ValueError(f"config.json: {key} must be a positive integer, got {cfg[key]!r}")
    return cfg


class _Fields:
    """Typed reads of one config dict; JSON null means "not set", as in transformers."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def opt(self, key: str, default: Any = None) -> Any:
        value = self.cfg.get(key)
        return default if value is None else value

    def first(self, *keys: str, default: Any = None) -> Any:
        """The first of several spellings of one field that the config sets (families name it differently)."""
        for key in keys:
            if self.cfg.get(key) is not None:
                return self.cfg[key]
        return default

    def count(self, key: str, default: Any = None) -> Any:
        """A whole number >= 0 the config may set (an MoE count or width), or the default when it does not."""
        value = self.opt(key)
        if value is None:
            return default
        if not is_whole(value) or value < 0:
            raise ValueError(f"config.json: {key} must be a whole number >= 0, got {value!r}")
        return int(value)

    def positive(self, key: str, why: str) -> int:
        if key not in self.cfg or self.cfg[key] is None:
            raise ValueError(f"config.json: {key} is missing; {why} needs it")
        value = self.cfg[key]
        if not is_whole(value) or value <= 0:
            raise ValueError(f"config.json: {key} must be a positive integer, got {value!r}")
        return int(value)


def _layer_types(f: _Fields, model_type: str, num_layers: int) -> list[str] | None:
    """The config's per-layer attention types, or the rule its family derives them by; None: one kind for all."""
    types = f.opt("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            got = len(types) if isinstance(types, list) else type(types).__name__
            raise ValueError(f"config.json: layer_types has {got} entries for num_hidden_layers={num_layers}")
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if unknown:
            raise ValueError(f"config.json: layer_types has unknown type(s) {unknown}; known: {list(LAYER_TYPES)}")
        return types
    if model_type in ("gemma3", "gemma3_text"):
        has_pattern = "sliding_window_pattern" in f.cfg
        pattern = f.positive("sliding_window_pattern", "gemma3") if has_pattern else 6  # transformers' default
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if model_type == "gpt_oss":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    if model_type == "qwen3_next":
        interval = f.positive("full_attention_interval", "qwen3_next") if "full_attention_interval" in f.cfg else 4
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]
    if model_type in ("llama4_text", "llama4"):
        return _llama4_layer_types(f, num_layers)
    if model_type in ("qwen3", "qwen3_moe", "qwen2") and f.opt("use_sliding_window", False):
        first = f.opt("max_window_layers", num_layers)  # transformers: layers from max_window_layers on slide
        return ["sliding_attention" if i >= first else "full_attention" for i in range(num_layers)]
    return None


def _llama4_layer_types(f: _Fields, num_layers: int) -> list[str]:
    """Llama 4: NoPE layers (``no_rope_layers[i] == 0``, every 4th by default) attend globally, the rest in chunks."""
    no_rope = f.opt("no_rope_layers")
    if not no_rope:
        interval = f.opt("no_rope_layer_interval", 4)
        no_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(no_rope, list) or len(no_rope) != num_layers:
        raise ValueError(f"config.json: no_rope_layers must list one 0/1 per layer ({num_layers})")
    chunked = f.opt("attention_chunk_size") is not None
    return ["chunked_attention" if rope and chunked else "full_attention" for rope in no_rope]


def _mla_layer(f: _Fields, model_type: str) -> LatentAttention:
    why = f"an MLA ({model_type or 'deepseek'}) config"
    dims = {k: f.positive(k, why) for k in _MLA_FIELDS}
    q_lora = f.opt("q_lora_rank")
    return LatentAttention(q_lora_rank=None if q_lora is None else f.positive("q_lora_rank", why), **dims)


def _layers(f: _Fields, model_type: str, num_layers: int, kv_heads: int, head_dim: int) -> tuple[LayerKind, ...]:
    """One KV kind per layer; () when every layer is plain full attention or one shared window (the dense path)."""
    if model_type in MLA_MODEL_TYPES or "kv_lora_rank" in f.cfg:
        return (_mla_layer(f, model_type),) * num_layers
    types = _layer_types(f, model_type, num_layers)
    if types is None:
        return ()
    kinds: dict[str, LayerKind] = {"full_attention": FullAttention(kv_heads, head_dim)}
    if "sliding_attention" in types:
        kinds["sliding_attention"] = SlidingWindow(kv_heads, head_dim, f.positive("sliding_window", "a sliding layer"))
    if "chunked_attention" in types:
        chunk = f.positive("attention_chunk_size", "a chunked_attention layer")
        kinds["chunked_attention"] = ChunkedLocal(kv_heads, head_dim, chunk)
    if "linear_attention" in types:
        why = "a linear_attention (Gated DeltaNet) layer"
        n_k, n_v, d_k, d_v, kernel = (f.positive(k, why) for k in _LINEAR_FIELDS)
        kinds["linear_attention"] = LinearState(n_k, n_v, d_k, d_v, kernel)
    return tuple(kinds[t] for t in types)


def _weight_format(f: _Fields) -> str:
    """How the checkpoint ships its weights, from quantization_config (absent: bf16)."""
    q = f.opt("quantization_config")
    if q is None:
        return "bf16"
    method = q.get("quant_method") if isinstance(q, dict) else None
    if method == "fp8" and q.get("weight_block_size") is not None:
        return "fp8_block"
    if method == "mxfp4":
        return "mxfp4"
    raise ValueError(
        f"config.json: quantization_config.quant_method={method!r} is not a format this calculator sizes "
        "(bf16, block-wise fp8, mxfp4); remove quantization_config to size the model as bf16"
    )


def _moe(f: _Fields, model_type: str, num_layers: int, intermediate: int | None) -> dict[str, Any]:
    """Experts, experts per token, routed / shared expert widths and the dense layers of an MoE config."""
    num_experts = f.first("n_routed_experts", "num_local_experts", "num_experts", default=1)
    if not is_whole(num_experts) or num_experts < 1:
        raise ValueError(
            f"config.json: the number of experts (n_routed_experts / num_local_experts / num_experts) must be a "
            f"positive integer, got {num_experts!r}"
        )
    if num_experts == 1:
        return {"num_experts": 1, "experts_per_token": f.first("num_experts_per_tok", "experts_per_token", default=1)}
    top_k = f.first("num_experts_per_tok", "experts_per_token", default=1)
    expert = f.count("moe_intermediate_size", intermediate)
    shared = 0
    dense = 0
    if f.count("n_shared_experts"):  # DeepSeek: n shared experts, each as wide as a routed one
        shared = f.count("n_shared_experts") * expert
    shared = f.count("shared_expert_intermediate_size", shared)  # Qwen2-MoE / Qwen3-Next: one width for all
    if model_type in ("llama4_text", "llama4"):  # one shared expert as wide as a routed one
        shared = expert
        moe_layers = f.opt("moe_layers")
        step = f.count("interleave_moe_layer_step", 1)
        if step < 1:
            raise ValueError(f"config.json: interleave_moe_layer_step must be at least 1, got {step}")
        n_moe = len(moe_layers) if isinstance(moe_layers, list) else len(range(step - 1, num_layers, step))
        dense = num_layers - n_moe
    dense = f.count("first_k_dense_replace", dense)
    mlp_only = f.opt("mlp_only_layers", [])
    if isinstance(mlp_only, list):
        dense += len(mlp_only)
    return {
        "num_experts": num_experts,
        "experts_per_token": top_k,
        "moe_intermediate_size": expert,
        "shared_expert_intermediate_size": shared,
        "num_dense_layers": dense,
    }


def model_from_config(
    config: str | dict[str, Any], name: str = "custom", source: str = "pasted config.json"
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json (a dict or its JSON text), validating every field."""
    outer = _parse(config)
    cfg = _decoder_config(outer)
    f = _Fields(cfg)
    model_type = str(cfg.get("model_type") or outer.get("model_type") or "")
    num_layers, hidden, heads = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = f.opt("num_key_value_heads", heads)
    head_dim = f.opt("head_dim", None)
    if model_type in MLA_MODEL_TYPES or "kv_lora_rank" in cfg:
        head_dim = None  # MLA configs' head_dim (if any) is the RoPE part; the naive formula uses hidden / heads
    dense_dims = {"num_kv_heads": kv_heads, "head_dim": head_dim}
    if not (is_whole(kv_heads) and kv_heads > 0):
        raise ValueError(f"config.json: num_key_value_heads must be a positive integer, got {kv_heads!r}")
    resolved_head_dim = head_dim if head_dim is not None else (hidden // heads if hidden % heads == 0 else None)
    if resolved_head_dim is None:
        raise ValueError(
            f"config.json: hidden_size={hidden} is not divisible by num_attention_heads={heads}; give head_dim"
        )
    if not (is_whole(resolved_head_dim) and resolved_head_dim > 0):
        raise ValueError(f"config.json: head_dim must be a positive integer, got {resolved_head_dim!r}")
    layers = _layers(f, model_type, num_layers, kv_heads, resolved_head_dim)
    window = f.opt("sliding_window") if cfg.get("use_sliding_window", True) else None
    if layers:
        window = None  # the per-layer kinds carry it
    elif window is not None and not (is_whole(window) and window > 0):
        raise ValueError(f"config.json: sliding_window must be a positive integer or null, got {window!r}")
    tied_default = model_type in TIED_BY_DEFAULT
    intermediate = f.first("intermediate_size", "intermediate_size_mlp")
    if model_type in ("llama4_text", "llama4"):
        intermediate = f.opt("intermediate_size_mlp", intermediate)  # dense layers; experts use intermediate_size
        moe = _moe(f, model_type, num_layers, f.opt("intermediate_size"))
    else:
        moe = _moe(f, model_type, num_layers, intermediate)
    return custom_model(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden,
        num_heads=heads,
        intermediate_size=intermediate,
        vocab_size=f.opt("vocab_size", 32000),
        max_context=f.opt("max_position_embeddings", 4096),
        sliding_window=window,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", outer.get("tie_word_embeddings", tied_default))),
        source=source,
        layers=layers,
        weight_format=_weight_format(_Fields(outer)) if "quantization_config" in outer else _weight_format(f),
        **dense_dims,
        **moe,
    )
