"""The catalog's models and GPUs as the lesson pages offer them: keys in catalog order and their display names.

A page's select box takes its options and its `format_func` from here, so no page looks up the catalog itself.
"""

from __future__ import annotations

from engine.memory.catalog import GPUS, MODELS

MODEL_KEYS: tuple[str, ...] = tuple(MODELS)  # every catalog model, the demo model included
GPU_KEYS: tuple[str, ...] = tuple(GPUS)


def model_name(key: str) -> str:
    """The model's display name ("Llama-3-8B"); an unknown key is a ValueError listing the known ones."""
    return MODELS[key].name


def gpu_name(key: str) -> str:
    """The GPU's display name ("H100 SXM 80GB"); an unknown key is a ValueError listing the known ones."""
    return GPUS[key].name
