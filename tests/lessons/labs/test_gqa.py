"""lessons/labs/gqa.py: the decode and prefill runs (sizes, bytes, which side is which) and claims() logic."""

import pytest
import torch

from engine.attention.fmha import memory_efficient_attention
from engine.memory.catalog import MODELS, MiB
from kernels.reference import attention_ref
from lessons.labs import gqa as lab
from tests.conftest import DEVICE

TOL = 1e-5 if DEVICE == "cpu" else 2e-2


@pytest.mark.parametrize(("heads", "groups"), [(8, 2), (6, 1), (4, 4)])
def test_decode_run_is_one_query_per_sequence_over_the_cache(heads, groups):
    run = lab.run_gqa_decode(heads, groups, head_dim=16, batch=3, context=40, repeats=1, device=DEVICE)
    h = heads // groups
    assert run.name == "decode"
    assert run.query_shape == (3, 1, groups, h, 16) and run.output_shape == run.query_shape
    assert run.key_shape == (3, 40, groups, h, 16)  # the view the kernel sees
    assert h == 1 or run.key_stride[3] == 0  # GQA's K/V: one stored head per group, expanded without a copy
    assert run.mha_key_shape == (3, 40, heads, 16)  # the MHA model's cache holds every query head
    assert run.gqa_kv_bytes == 2 * 3 * 40 * groups * 16 * 4  # K and V, fp32, one head per group
    assert run.mha_kv_bytes == h * run.gqa_kv_bytes
    assert run.max_abs_err < TOL


def test_decode_output_matches_the_reference_per_sequence():
    q = torch.randn(2, 1, 2, 3, 8)
    k, v = torch.randn(2, 17, 2, 1, 8), torch.randn(2, 17, 2, 1, 8)
    out = memory_efficient_attention(q, k.expand(2, 17, 2, 3, 8), v.expand(2, 17, 2, 3, 8))
    for b in range(2):  # reference over the stored (un-repeated) KV heads: query head g * 3 + j reads KV head g
        ref = attention_ref(q[b].flatten(1, 2), k[b, :, :, 0], v[b, :, :, 0])
        torch.testing.assert_close(out[b].flatten(1, 2), ref, atol=1e-5, rtol=1e-5)


def test_decode_context_fits_the_budget_and_defaults_to_4096_for_small_models():
    for name in ("llama-3-8b", "llama-3.1-405b", "qwen2.5-0.5b", "demo"):
        spec = MODELS[name]
        n = lab.decode_context(spec.num_heads, spec.head_dim)
        mha_bytes = lab.DECODE_BATCH * n * 2 * spec.num_heads * spec.head_dim * 4
        assert mha_bytes <= lab.DECODE_MHA_BUDGET and n & (n - 1) == 0  # a power of two within budget
        assert n == lab.DECODE_MAX_CONTEXT or 2 * mha_bytes > lab.DECODE_MHA_BUDGET  # the largest that fits
    assert lab.decode_context(32, 128) == 1024  # Llama-3-8B: 8 x 1024 x 32 KiB = 256 MiB of MHA K+V
    assert lab.decode_context(4, 64) == 4096
    with pytest.raises(ValueError, match="context"):
        lab.run_gqa_decode(8, 2, 16, context=lab.DECODE_MAX_CONTEXT + 1)
    with pytest.raises(ValueError, match="do not divide"):
        lab.run_gqa_decode(8, 3, 16)


def test_rows_name_each_side_and_derive_bandwidth():
    run = lab.run_gqa_decode(8, 2, 16, batch=2, context=32, repeats=1, device=DEVICE)
    gqa, mha = run.rows()
    assert gqa["run"].startswith("GQA") and mha["run"].startswith("MHA")
    assert (gqa["shape"], mha["shape"]) == ("decode", "decode")
    assert gqa["K+V MiB read"] == run.gqa_kv_bytes / MiB and mha["K+V MiB read"] == 4 * gqa["K+V MiB read"]
    assert gqa["GB/s"] == pytest.approx(run.gqa_kv_bytes / run.gqa_seconds / 1e9)
    assert run.speedup == pytest.approx(run.mha_seconds / run.gqa_seconds)
    with pytest.raises(ValueError, match="side"):
        run.gb_per_s("both")


def fake(name: str, gqa_s: float, mha_s: float) -> lab.GqaRun:
    return lab.GqaRun(
        name,
        (8, 1, 8, 4, 128),
        (8, 1024, 8, 4, 128),
        (0, 0, 0, 0, 1),
        (8, 1, 8, 4, 128),
        (8, 1024, 32, 128),
        0.0,
        gqa_s,
        mha_s,
        1,
        4,
    )


@pytest.mark.parametrize(
    ("dec", "pre", "holds"),
    [
        ((1.0, 2.0), (1.0, 1.0), (True, True)),
        ((2.0, 2.0), (1.05, 1.0), (False, True)),
        ((1.0, 3.0), (1.2, 1.0), (True, False)),
    ],
)
def test_claims_compare_the_right_sides_at_the_page_defaults(monkeypatch, dec, pre, holds):
    seen = {}

    def decode(heads, groups, dim, repeats):
        seen["decode"] = (heads, groups, dim)
        seen["repeats"] = [repeats]
        return fake("decode", *dec)

    def prefill(heads, groups, dim, seq_len, repeats):
        seen["prefill"] = (heads, groups, dim, seq_len)
        seen["repeats"].append(repeats)
        return fake("prefill", *pre)

    monkeypatch.setattr(lab, "run_gqa_decode", decode)
    monkeypatch.setattr(lab, "run_gqa", prefill)
    found = lab.claims(repeats=3)
    spec = MODELS[lab.DEFAULT_MODEL]
    assert seen == {
        "decode": (spec.num_heads, spec.num_kv_heads, spec.head_dim),
        "repeats": [3, 12],
        "prefill": (spec.num_heads, spec.num_kv_heads, spec.head_dim, lab.DEFAULT_SEQ_LEN),
    }
    assert (found["gqa_decode"]["holds"], found["gqa_prefill"]["holds"]) == holds
    assert found["gqa_decode"]["speedup"] == round(dec[1] / dec[0], 3)
    assert all(isinstance(e["claim"], str) and isinstance(e["holds"], bool) for e in found.values())


def test_footprint_caps_a_sliding_window_model_at_its_window():
    windowed = lab.footprint("mistral-7b", 8, "bf16", 32768, 2)
    full = lab.footprint("llama-3-8b", 8, "bf16", 32768, 2)  # same KV shape per token, no window
    assert windowed.bytes_per_token == full.bytes_per_token == 128 * 1024
    assert windowed.held_tokens == 4096 and full.held_tokens == 32768
    assert windowed.total_bytes == 128 * 1024 * 4096 * 2
    assert lab.footprint("mistral-7b", 8, "bf16", 1000, 1).held_tokens == 1000  # inside the window: all of it
