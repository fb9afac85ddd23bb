"""lessons/labs/choices.py: the select boxes' options are the catalog's keys, named as the catalog names them."""

import pytest

from engine.memory.catalog import GPUS, MODELS
from lessons.labs import choices


def test_every_catalog_entry_is_offered_once_in_catalog_order():
    assert choices.MODEL_KEYS == tuple(MODELS) and len(set(choices.MODEL_KEYS)) == len(MODELS)
    assert choices.GPU_KEYS == tuple(GPUS) and "demo" in choices.MODEL_KEYS and "h100-sxm" in choices.GPU_KEYS


def test_names_are_the_display_names():
    assert choices.model_name("llama-3-8b") == "Llama-3-8B"
    assert choices.gpu_name("h100-sxm") == "H100 SXM 80GB"
    assert all(choices.model_name(k) == MODELS[k].name for k in choices.MODEL_KEYS)
    with pytest.raises(ValueError, match="unknown GPU 'tpu'"):
        choices.gpu_name("tpu")
    with pytest.raises(ValueError, match="unknown model"):
        choices.model_name("gpt-9")
