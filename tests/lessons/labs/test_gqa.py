"""lessons/labs/gqa.py: the KV footprint per group count, head sharing, the 5-D layout, the decode and prefill runs
(sizes, bytes, which side is which) and claims() logic."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention.fmha import memory_efficient_attention
from engine.memory.catalog import MODELS
from kernels.reference import attention_ref
from lessons.labs import gqa as lab
from tests.conftest import DEVICE

KiB, MiB, GiB = 2**10, 2**20, 2**30
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


@pytest.mark.parametrize(
    ("model", "kib"),
    [("llama-2-7b", 512), ("llama-2-70b", 320), ("llama-3-8b", 128), ("llama-3.1-405b", 504), ("qwen2.5-7b", 56)],
)
def test_real_configs_match_published_kv_per_token(model, kib):
    spec = MODELS[model]
    fp = lab.footprint(model, spec.num_kv_heads, "bf16", 1000, 3)
    assert fp.bytes_per_token == kib * KiB
    assert fp.total_bytes == kib * KiB * 3000
    assert fp.overcount == spec.num_heads // spec.num_kv_heads  # the calculator bug


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 256))
def test_group_options_are_exactly_the_divisors(n):
    opts = lab.group_options(n)
    assert opts == sorted(d for d in range(1, n + 1) if n % d == 0)
    assert opts[0] == 1 and opts[-1] == n


def test_footprint_rows_and_bad_input():
    table = lab.kv_by_groups("llama-3-8b", "fp8", 100, 1)
    rows = table.rows()
    assert [r["kind"] for r in rows] == ["MQA", "GQA-2", "GQA-4", "GQA-8", "GQA-16", "MHA"]
    assert rows[-1]["KiB per token"] == 2 * 32 * 32 * 128 / KiB  # fp8: 1 byte per element
    assert list(rows[0]) == [
        "groups (KV heads)",
        "kind",
        "query heads per KV head",
        "KiB per token",
        "GiB at context x users",
        "x smaller than MHA",
    ]
    assert table.groups == (1, 2, 4, 8, 16, 32) == tuple(r["groups (KV heads)"] for r in rows)
    # 2 x 32 layers x G x 128 x 1 byte per token, 100 tokens, one user
    assert table.total_gib == pytest.approx(tuple(2 * 32 * g * 128 * 100 / GiB for g in table.groups))
    assert (
        [r["query heads per KV head"] for r in rows] == [32, 16, 8, 4, 2, 1] == [r["x smaller than MHA"] for r in rows]
    )
    with pytest.raises(ValueError, match="do not divide 32"):
        lab.footprint("llama-3-8b", 5)
    with pytest.raises(ValueError, match="users"):
        lab.footprint("llama-3-8b", 8, users=0)
    with pytest.raises(ValueError, match="KV dtype"):
        lab.footprint("llama-3-8b", 8, kv_dtype="fp64")


@pytest.mark.parametrize(("heads", "groups"), [(8, 8), (8, 2), (6, 1)])
def test_live_gqa_run_matches_reference_and_reads_fewer_kv_bytes(heads, groups):
    run = lab.run_gqa(heads, groups, head_dim=16, seq_len=12, repeats=1, device=DEVICE)
    per_group = heads // groups
    assert run.query_shape == (1, 12, groups, per_group, 16)
    assert per_group == 1 or run.key_stride[3] == 0  # K/V expanded over H without a copy
    assert run.max_abs_err < TOL
    assert run.mha_kv_bytes == per_group * run.gqa_kv_bytes
    # Independent check of the same computation through the plain-torch reference.
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 12, groups, per_group, 16, generator=gen)
    k = torch.randn(1, 12, groups, 1, 16, generator=gen)
    v = torch.randn(1, 12, groups, 1, 16, generator=gen)
    out = memory_efficient_attention(q, k.expand_as(q), v.expand_as(q))
    ref = attention_ref(q[0].flatten(1, 2), k[0, :, :, 0], v[0, :, :, 0])  # [M, Hq, K] vs KV [N, G, K]
    torch.testing.assert_close(out[0].flatten(1, 2), ref, atol=1e-5, rtol=1e-5)


def test_layout_shapes_name_every_dimension():
    shapes = lab.layout_shapes(32, 8, 128, 64)
    assert shapes.query == "[B=1, M=64, G=8, H=4, K=128]"
    assert "stride 0" in shapes.kv_seen and shapes.kv_stored == "[B=1, N=64, G=8, 1, K=128]"
    rows = lab.layout_shapes(32, 8, 128, 1, batch=8, keys=1024).rows()
    assert rows == [
        {"tensor": "query", "shape": "[B=8, M=1, G=8, H=4, K=128]"},
        {"tensor": "key / value (stored)", "shape": "[B=8, N=1024, G=8, 1, K=128]"},
        {"tensor": "key / value (as the kernel sees them)", "shape": "[B=8, N=1024, G=8, H=4 (stride 0), K=128]"},
        {"tensor": "output", "shape": "[B=8, M=1, G=8, H=4, K=128]"},
    ]
    with pytest.raises(ValueError, match="use one of"):
        lab.layout_shapes(32, 3, 128, 64)


def test_model_shape_is_the_catalog_models_config():
    shape = lab.model_shape("llama-3-8b")  # Meta's config.json: 32 layers, 32 / 8 heads, head dim 128, 8k context
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim) == (32, 32, 8, 128)
    assert (shape.key, shape.name, shape.max_context, shape.sliding_window) == ("llama-3-8b", "Llama-3-8B", 8192, None)
    assert shape.group_options == [1, 2, 4, 8, 16, 32] and shape.heads_per_group(8) == 4
    assert shape.decode_context == 1024  # 8 sequences x 1,024 tokens x 32 heads x 128 x K+V x fp32 = 256 MiB
    assert lab.model_shape("mistral-7b").sliding_window == 4096
    with pytest.raises(ValueError, match="unknown model"):
        lab.model_shape("gpt-9")


@pytest.mark.parametrize(("dtype", "element"), [("bf16", 2), ("fp8", 1), ("fp32", 4)])
def test_footprint_in_the_pages_units_and_its_formula(dtype, element):
    fp = lab.footprint("llama-3-8b", 8, dtype, 8192, 16)
    assert fp.element_bytes == element
    assert fp.bytes_per_token == 2 * 32 * 8 * 128 * element  # the page's "2 x layers x KV heads x dim x bytes"
    assert fp.kib_per_token == 2 * 32 * 8 * 128 * element / 1024
    assert fp.total_gib == 2 * 32 * 8 * 128 * element * 8192 * 16 / 2**30
    assert fp.naive_total_gib == 4 * fp.total_gib and fp.naive_bytes_per_token == 2 * 32 * 32 * 128 * element
    assert (fp.model, fp.num_heads, fp.kind) == ("llama-3-8b", 32, "GQA-8")
    assert not fp.windowed and not fp.beyond_training
    assert lab.footprint("llama-3-8b", 8, dtype, 8193, 1).beyond_training  # one token past its 8,192
    assert [lab.footprint("llama-3-8b", g).kind for g in (1, 4, 32)] == ["MQA", "GQA-4", "MHA"]


@pytest.mark.parametrize(("heads", "groups"), [(32, 8), (14, 7), (8, 1), (4, 4)])
def test_head_sharing_gives_each_kv_head_a_run_of_query_heads(heads, groups):
    rows = lab.head_sharing_rows(heads, groups)
    assert [r["query head"] for r in rows] == list(range(heads))
    readers = {}
    for r in rows:
        readers.setdefault(r["KV head"], []).append(r["query head"])
    assert sorted(readers) == list(range(groups))  # every KV head is read
    for kv, qs in readers.items():  # by heads / groups consecutive query heads, in order
        assert qs == list(range(kv * heads // groups, (kv + 1) * heads // groups))
    with pytest.raises(ValueError, match="do not divide"):
        lab.head_sharing_rows(heads, groups + heads + 1)


def test_run_in_the_pages_units():
    run = fake("decode", 0.002, 0.006)
    assert (run.gqa_ms, run.mha_ms, run.speedup) == (2.0, 6.0, 3.0)
    assert run.heads_per_group == 4 and run.kv_ratio == 4
    live = lab.run_gqa_decode(8, 2, 16, batch=2, context=32, repeats=1, device=DEVICE)
    assert live.gqa_kv_mib == 2 * 2 * 32 * 2 * 16 * 4 / MiB and live.mha_kv_mib == 4 * live.gqa_kv_mib
    assert (live.kv_ratio, live.heads_per_group) == (4, 4)
    assert [r["ms"] for r in live.rows()] == [live.gqa_ms, live.mha_ms]
