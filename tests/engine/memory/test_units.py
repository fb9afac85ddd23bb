"""engine/memory/units.py: the binary units, the bytes per element of each dtype name, and one token's KV bytes."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from engine.memory.units import DTYPE_BYTES, GiB, KiB, MiB, dtype_bytes, kv_bytes


def test_units_are_binary():
    assert (KiB, MiB, GiB) == (1 << 10, 1 << 20, 1 << 30)
    assert 80 * GiB == 85_899_345_920  # an "80 GB" A100 as nvidia-smi counts it (81920 MiB)


def test_dtype_sizes_are_torch_element_sizes():
    torch_dtypes = {
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp8": torch.float8_e4m3fn,
        "int8": torch.int8,
    }
    for name, dtype in torch_dtypes.items():
        assert dtype_bytes(name) == DTYPE_BYTES[name] == torch.empty(0, dtype=dtype).element_size(), name
    assert dtype_bytes("int4") == 0.5  # two 4-bit values per byte
    assert dtype_bytes("auto") == 2  # vLLM's "auto" KV dtype is the model's bf16 / fp16
    assert set(DTYPE_BYTES) == {*torch_dtypes, "int4", "auto"}


def test_dtype_sizes_are_read_only():
    with pytest.raises(TypeError):
        DTYPE_BYTES["fp8"] = 2  # type: ignore[index]
    assert dtype_bytes("fp8") == 1


def test_a_number_of_bytes_passes_through_as_a_float():
    assert dtype_bytes(2) == 2.0 and isinstance(dtype_bytes(2), float)
    assert dtype_bytes(0.5) == 0.5


@pytest.mark.parametrize("bad", [0, -2, -0.5, float("nan"), float("inf")])
def test_a_byte_count_that_is_not_finite_and_positive_is_refused(bad):
    with pytest.raises(ValueError, match="dtype bytes must be a finite number > 0"):
        dtype_bytes(bad)


@pytest.mark.parametrize("bad", ["float8", "BF16", "", True, None])
def test_an_unknown_dtype_names_the_known_ones(bad):
    with pytest.raises(ValueError, match=r"unknown dtype .*use one of \['fp32', 'bf16', 'fp16', 'auto', 'fp8'"):
        dtype_bytes(bad)


def test_kv_bytes_of_published_models():
    # vLLM logs 128 KiB per token for Llama-3-8B in bf16: 32 layers, 8 KV heads, head_dim 128.
    assert kv_bytes(32, 8, 128, 2) == 128 * KiB
    assert kv_bytes(32, 8, 128, 0.5) == 32 * KiB  # int4: a quarter
    assert kv_bytes(32, 32, 128, 2) == 512 * KiB  # Llama-2-7B, MHA: 4x the GQA model's


@given(
    st.integers(1, 128), st.integers(1, 128), st.sampled_from([64, 80, 96, 128, 256]), st.sampled_from([0.5, 1, 2, 4])
)
def test_kv_bytes_is_k_and_v_for_every_layer_and_head(layers, heads, head_dim, elem):
    one_layer_k = heads * head_dim * elem  # one token's K in one layer; V is the same size
    assert kv_bytes(layers, heads, head_dim, elem) == int(layers * 2 * one_layer_k)
