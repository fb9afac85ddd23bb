"""vLLM V1's KV-cache groups and one request's blocks (engine/memory/kv_pool.py), against hand counts and properties.

Grouping follows `_get_kv_cache_groups_uniform_page_size` (vllm/v1/core/kv_cache_utils.py): the smallest bucket of
same-kind layers sets the group size unless the largest is under 1.5x of it; buckets are padded to whole groups.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.memory import (
    FullAttention,
    SlidingWindow,
    custom_model,
    kv_bytes_per_token,
    kv_groups,
    kv_request_bytes,
    model_from_config,
    pool_bytes_per_block,
)


def hybrid(num_sliding: int, num_full: int, window: int = 128, kv_heads: int = 2, head_dim: int = 64):
    layers = (SlidingWindow(kv_heads, head_dim, window),) * num_sliding + (
        FullAttention(kv_heads, head_dim),
    ) * num_full
    return custom_model(
        "hybrid", num_sliding + num_full, 256, 4, num_kv_heads=kv_heads, head_dim=head_dim, layers=layers
    )


def test_a_near_even_split_pads_the_smaller_bucket_to_the_larger():
    # vLLM's own example: gpt-oss-20b + an eagle drafter, 12 sliding + 13 full -> groups of 13, one padding slot
    groups = kv_groups(hybrid(12, 13))
    assert [(g.num_layers, g.slots) for g in groups] == [(12, 13), (13, 13)]


def test_an_n_to_one_pattern_groups_by_the_smaller_bucket():
    groups = kv_groups(hybrid(52, 10))  # Gemma 3 27B: six sliding groups (the last padded) and one full group
    assert [g.num_layers for g in groups] == [10, 10, 10, 10, 10, 2, 10]
    assert {g.slots for g in groups} == {10}


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 40),
    st.sampled_from([16, 32]),
    st.integers(1, 512),
    st.integers(0, 20_000),
)
def test_groups_cover_every_layer_and_requests_grow_by_whole_blocks(num_sliding, num_full, block, window, n):
    m = hybrid(num_sliding, num_full, window)
    groups = kv_groups(m)
    assert sum(g.num_layers for g in groups) == num_sliding + num_full
    assert len({g.slots for g in groups}) == 1 and all(g.num_layers <= g.slots for g in groups)
    per_block = pool_bytes_per_block(m, block_size=block)
    held = kv_request_bytes(m, n, block_size=block)
    assert held % per_block == 0  # whole block ids, each costing the same
    assert kv_request_bytes(m, n + 1, block_size=block) >= held  # never shrinks as the request grows
    # at most every layer slot holding every token's blocks, plus the sliding groups' extra block
    full_blocks = -(-n // block)
    assert held <= len(groups) * (full_blocks + 1) * per_block
    # long context: one more block of tokens costs one block id in each full group
    full_groups = sum(1 for g in groups if isinstance(g.kind, FullAttention))
    long = 10 * (window + 2048)
    step = kv_request_bytes(m, long + block, block_size=block) - kv_request_bytes(m, long, block_size=block)
    assert step == full_groups * per_block
    assert step >= block * kv_bytes_per_token(m)  # padding slots only ever add


def test_a_uniform_model_is_one_group_and_keeps_the_dense_numbers():
    (group,) = kv_groups("llama-3-8b")
    assert (group.num_layers, group.slots) == (32, 32)
    assert pool_bytes_per_block("llama-3-8b") == 16 * 131072


@pytest.mark.parametrize("model", ["gpt-oss-120b", "llama-3-8b", "deepseek-v3"])
@pytest.mark.parametrize("bad", [0, -16, 2.0, None])
def test_bad_block_size_or_in_flight_is_a_value_error(model, bad):
    with pytest.raises(ValueError, match="block_size"):
        kv_request_bytes(model, 100, block_size=bad)
    with pytest.raises(ValueError, match="in_flight_tokens"):
        kv_request_bytes(model, 100, in_flight_tokens=bad)


_VALUES = st.one_of(st.none(), st.integers(-4, 300), st.booleans(), st.text(max_size=3), st.floats(allow_nan=True))


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "num_hidden_layers": st.integers(1, 6),
            "hidden_size": st.sampled_from([64, 96]),
            "num_attention_heads": st.just(4),
        },
        optional={
            "model_type": st.sampled_from(["gpt_oss", "gemma3", "qwen3_next", "llama4", "deepseek_v3", "qwen3", "x"]),
            "layer_types": st.lists(
                st.sampled_from(["full_attention", "sliding_attention", "chunked_attention", "linear_attention", "y"]),
                max_size=7,
            ),
            "sliding_window": _VALUES,
            "attention_chunk_size": _VALUES,
            "kv_lora_rank": _VALUES,
            "qk_rope_head_dim": _VALUES,
            "qk_nope_head_dim": _VALUES,
            "v_head_dim": _VALUES,
            "linear_num_key_heads": _VALUES,
            "linear_num_value_heads": _VALUES,
            "linear_key_head_dim": _VALUES,
            "linear_value_head_dim": _VALUES,
            "linear_conv_kernel_dim": _VALUES,
            "n_routed_experts": _VALUES,
            "num_experts_per_tok": _VALUES,
            "moe_intermediate_size": _VALUES,
            "first_k_dense_replace": _VALUES,
            "sliding_window_pattern": _VALUES,
        },
    )
)
def test_any_todays_config_gives_a_model_with_sane_kv_or_a_value_error(cfg):
    from engine.memory import model_from_config

    try:
        m = model_from_config(cfg)
    except ValueError as e:
        assert str(e)
        return
    assert len(m.layer_kinds) == m.num_layers
    for n in (0, 1, 100, 5000):
        held = kv_request_bytes(m, n)
        assert held >= 0 and isinstance(held, int)
    assert kv_bytes_per_token(m) >= 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("first_k_dense_replace", ""),
        ("first_k_dense_replace", -1),
        ("n_shared_experts", 1.5),
        ("moe_intermediate_size", "wide"),
        ("n_routed_experts", 0),
    ],
)
def test_a_bad_moe_count_is_a_value_error_naming_it(field, value):
    """Hypothesis found first_k_dense_replace='' reaching arithmetic as a TypeError; each count is checked first."""
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "n_routed_experts": 8}
    cfg["num_experts_per_tok"] = 2
    cfg[field] = value
    with pytest.raises(ValueError, match="experts|" + field):
        model_from_config(cfg)
