"""Every input error kernels.ops can see raises a ValueError that names the bad value (and never reaches a kernel).

Device mismatches use the "meta" device, so they are testable on a CPU-only machine.
"""

import pytest
import torch

from kernels.ops import paged_attention, store_kv, varlen_attention
from tests.conftest import DEVICE, TRITON_OK, requires_triton

TRITON_CHECKS = TRITON_OK  # the Triton backend's checks run (on CUDA, or on CPU through the interpreter)

CU = torch.tensor([0, 2, 5], dtype=torch.int32)


def on_device(args: dict) -> dict:
    """Move every tensor argument to DEVICE (the Triton checks run on CUDA, or on CPU via the interpreter)."""
    return {name: x.to(DEVICE) if isinstance(x, torch.Tensor) else x for name, x in args.items()}


def varlen_args(**over):
    """Valid varlen arguments (2 sequences of 2 and 3 tokens, 4 query heads, 2 KV heads), with overrides."""
    args = {
        "q": torch.randn(5, 4, 8),
        "k": torch.randn(5, 2, 8),
        "v": torch.randn(5, 2, 8),
        "cu_seqlens_q": CU,
        "cu_seqlens_k": CU,
        "max_seqlen_q": 3,
        "max_seqlen_k": 3,
    }
    args.update(over)
    return args


VARLEN_ERRORS = [
    ({"q": [[1.0]]}, "q must be a torch.Tensor"),
    ({"q": torch.randn(5, 32)}, r"q has shape \(5, 32\) but must be 3-D"),
    ({"k": torch.randn(5, 2, 8, device="meta")}, "devices"),
    ({"k": torch.randn(5, 2, 8, dtype=torch.float64)}, "dtypes"),
    (
        {"q": torch.ones(5, 4, 8, dtype=torch.int32), "k": torch.ones(5, 2, 8, dtype=torch.int32)}
        | {"v": torch.ones(5, 2, 8, dtype=torch.int32)},
        "use float32, float16 or bfloat16",
    ),
    ({"v": torch.randn(5, 1, 8)}, "k has shape .* but v has"),
    ({"k": torch.randn(5, 2, 4), "v": torch.randn(5, 2, 4)}, "q has head_dim 8 but k has 4"),
    ({"k": torch.randn(5, 3, 8), "v": torch.randn(5, 3, 8)}, "q has 4 heads but k has 3; Hq must be a multiple of Hkv"),
    (
        {"q": torch.randn(5, 4, 512), "k": torch.randn(5, 2, 512), "v": torch.randn(5, 2, 512)},
        "head_dim=512 is not supported",
    ),
    ({"causal": 1}, "causal=1 must be True or False"),
    ({"scale": float("nan")}, "scale=nan must be a finite"),
    ({"scale": torch.tensor(0.1)}, "scale=.* must be a finite"),
    ({"cu_seqlens_q": [0, 2, 5]}, "cu_seqlens_q must be a torch.Tensor"),
    ({"cu_seqlens_q": CU.long()}, r"cu_seqlens_q has dtype torch.int64; pass cu_seqlens_q.to\(torch.int32\)"),
    ({"cu_seqlens_k": CU.to("meta")}, "cu_seqlens_k is on meta but q is on cpu"),
    ({"cu_seqlens_q": CU[:0]}, "cu_seqlens_q is empty"),
    ({"cu_seqlens_q": torch.tensor([1, 2, 5], dtype=torch.int32)}, r"cu_seqlens_q\[0\] is 1"),
    ({"cu_seqlens_q": torch.tensor([0, 4, 3, 5], dtype=torch.int32)}, "decreases at index 2"),
    (
        {"cu_seqlens_k": torch.tensor([0, 2, 4], dtype=torch.int32)},
        r"cu_seqlens_k\[-1\] is 4 but the packed tensor has 5",
    ),
    ({"cu_seqlens_k": torch.tensor([0, 5], dtype=torch.int32)}, "describes 2 sequences but cu_seqlens_k 1"),
    ({"max_seqlen_q": 3.0}, "max_seqlen_q=3.0 must be a Python int"),
    ({"max_seqlen_k": 2}, "max_seqlen_k=2 but the longest sequence has 3 tokens"),
    ({"backend": "cuda"}, "backend='cuda' is not supported"),
]


@pytest.mark.parametrize(("over", "match"), VARLEN_ERRORS)
def test_varlen_errors(over, match):
    backend = over.pop("backend", "torch")
    with pytest.raises(ValueError, match=match):
        varlen_attention(**varlen_args(**over), backend=backend)


@requires_triton
def test_varlen_triton_needs_unit_stride():
    q = torch.randn(5, 4, 16, device=DEVICE)[:, :, ::2]  # stride(-1) == 2, sliced on the device itself
    with pytest.raises(ValueError, match=r"q.stride\(-1\) is 2 but must be 1 for Triton; pass q.contiguous\(\)"):
        varlen_attention(**on_device(varlen_args()) | {"q": q}, backend="triton")


def paged_args(**over):
    """Valid paged arguments: 2 sequences, 6 blocks of 4 slots, tables 3 wide, 4 query heads on 2 KV heads."""
    args = {
        "q": torch.randn(2, 4, 8),
        "k_cache": torch.randn(6, 4, 2, 8),
        "v_cache": torch.randn(6, 4, 2, 8),
        "block_tables": torch.tensor([[5, 0, 2], [1, 3, 4]], dtype=torch.int32),
        "seq_lens": torch.tensor([9, 4], dtype=torch.int32),
    }
    args.update(over)
    return args


PAGED_ERRORS = [
    ({"q": torch.randn(2, 32)}, r"q has shape \(2, 32\) but must be 3-D"),
    ({"k_cache": torch.randn(6, 4, 16)}, "k_cache has shape .* must be 4-D"),
    ({"v_cache": torch.randn(6, 4, 1, 8)}, "k_cache has shape .* but v_cache"),
    ({"q": torch.randn(2, 4, 8, dtype=torch.float16)}, "dtypes"),
    ({"q": torch.randn(2, 4, 8, device="meta")}, "seq_lens is on cpu but q is on meta"),
    ({"q": torch.randn(2, 4, 16)}, "q has head_dim 16 but k_cache has 8"),
    ({"q": torch.randn(2, 3, 8)}, "q has 3 heads but k_cache has 2"),
    ({"scale": float("inf")}, "scale=inf"),
    ({"block_tables": torch.tensor([5, 0, 2], dtype=torch.int32)}, "block_tables has shape .* must be 2-D"),
    (
        {"block_tables": torch.tensor([[5, 0, 2], [1, 3, 4]])},
        r"block_tables has dtype torch.int64; pass block_tables.to\(torch.int32\)",
    ),
    ({"seq_lens": torch.tensor([9, 4])}, "seq_lens has dtype torch.int64"),
    ({"seq_lens": torch.tensor([9, 4], dtype=torch.int32, device="meta")}, "seq_lens is on meta but q is on cpu"),
    ({"seq_lens": torch.tensor([9], dtype=torch.int32)}, "seq_lens has 1 rows but there are 2 sequences"),
    ({"seq_lens": torch.tensor([9, -1], dtype=torch.int32)}, r"seq_lens\[1\] = -1 is negative"),
    (
        {"seq_lens": torch.tensor([13, 4], dtype=torch.int32)},
        r"seq_lens\[0\] = 13 but a block table row holds 12 slots",
    ),
    (
        {"block_tables": torch.tensor([[5, 0, 6], [1, 3, 4]], dtype=torch.int32)},
        r"block_tables\[0, 2\] = 6 is outside the cache's 6 blocks",
    ),
    ({"block_tables": torch.tensor([[5, 0, 2], [-1, 3, 4]], dtype=torch.int32)}, r"block_tables\[1, 0\] = -1"),
    ({"backend": "gpu"}, "backend='gpu' is not supported"),
]


@pytest.mark.parametrize(("over", "match"), PAGED_ERRORS)
def test_paged_errors(over, match):
    backend = over.pop("backend", "torch")
    with pytest.raises(ValueError, match=match):
        paged_attention(**paged_args(**over), backend=backend)


def test_paged_unused_table_entries_are_not_checked():
    """Entries past a sequence's last used block are padding (never read), so any value is accepted."""
    tables = torch.tensor([[5, 0, 2], [1, -1, 99]], dtype=torch.int32)  # seq 1 uses only its first block
    out = paged_attention(**paged_args(block_tables=tables), backend="torch")
    assert out.shape == (2, 4, 8) and not out.isnan().any()


@requires_triton
def test_paged_triton_needs_unit_stride():
    k_cache = torch.randn(6, 4, 2, 16, device=DEVICE)[..., ::2]
    with pytest.raises(ValueError, match=r"k_cache.stride\(-1\) is 2"):
        paged_attention(**on_device(paged_args()) | {"k_cache": k_cache, "v_cache": k_cache.clone()}, backend="triton")


def store_args(**over):
    """Valid store arguments: 3 new tokens into 4 blocks of 4 slots, 2 KV heads."""
    args = {
        "k": torch.randn(3, 2, 8),
        "v": torch.randn(3, 2, 8),
        "k_cache": torch.zeros(4, 4, 2, 8),
        "v_cache": torch.zeros(4, 4, 2, 8),
        "slot_mapping": torch.tensor([5, -1, 15], dtype=torch.int64),
    }
    args.update(over)
    return args


STORE_ERRORS = [
    ({"k": torch.randn(3, 16)}, r"k has shape \(3, 16\) but must be 3-D"),
    ({"v": torch.randn(2, 2, 8)}, "k has shape .* but v has"),
    ({"k_cache": torch.zeros(4, 4, 2, 8, dtype=torch.float16)}, "dtypes"),
    ({"k": torch.randn(3, 1, 8), "v": torch.randn(3, 1, 8)}, r"k rows are \[1, 8\] .* cache holds \[2, 8\]"),
    ({"slot_mapping": torch.tensor([5.0, 1.0, 2.0])}, "slot_mapping has dtype torch.float32"),
    ({"slot_mapping": torch.tensor([[5, 1, 2]])}, "slot_mapping has shape"),
    ({"slot_mapping": torch.tensor([5, 1, 2], device="meta")}, "slot_mapping is on meta but the cache is on cpu"),
    ({"slot_mapping": torch.tensor([5, 1])}, "slot_mapping has 2 slots but k has 3 tokens"),
    ({"slot_mapping": torch.tensor([5, 1, 16])}, "slot 16 but the cache has 4 blocks x 4 = 16 slots"),
    ({"slot_mapping": torch.tensor([5, 1, 5], dtype=torch.int32)}, "writes the same slot twice"),
    ({"backend": "fast"}, "backend='fast' is not supported"),
]


@pytest.mark.parametrize(("over", "match"), STORE_ERRORS)
def test_store_errors(over, match):
    backend = over.pop("backend", "torch")
    args = store_args(**over)
    before = args["k_cache"].clone()
    with pytest.raises(ValueError, match=match):
        store_kv(**args, backend=backend)
    assert torch.equal(args["k_cache"], before)  # nothing was written


def test_store_skips_negative_slots():
    args = store_args()
    store_kv(**args, backend="torch")
    flat = args["k_cache"].view(16, 2, 8)  # [num_blocks * block_size, Hkv, D]
    assert torch.equal(flat[5], args["k"][0]) and torch.equal(flat[15], args["k"][2])
    assert int((flat.abs().sum((1, 2)) > 0).sum()) == 2  # only the two live slots were written


@requires_triton
@pytest.mark.parametrize("op", ["varlen", "paged varlen", "plan", "store"])
def test_skipped_validation_still_guards_the_triton_strides(op):
    """check=False (varlen) and a step plan skip validation, but a Triton launcher never gets a head dim it would
    read out of bounds: a plan refuses a strided cache when it is built, and a strided q or k in a planned call."""
    from kernels.ops import paged_varlen_attention_planned, plan_attention, store_kv_planned
    from kernels.plan import KVCache

    strided = torch.randn(6, 4, 2, 16, device=DEVICE)[..., ::2]  # a [6, 4, 2, 8] cache with stride(-1) == 2
    meta = on_device(paged_varlen_args(k_cache=torch.randn(6, 4, 2, 8), v_cache=torch.randn(6, 4, 2, 8)))
    steps = (meta["cu_seqlens_q"], meta["seq_lens"], meta["block_tables"], meta["max_seqlen_q"])
    slots = torch.tensor([0, 1, 8], device=DEVICE)

    def plan(k_cache, v_cache):
        return plan_attention(*steps, slots, k_cache, v_cache, num_heads=4, q_dtype=torch.float32, backend="triton")

    if op == "varlen":
        args = on_device(varlen_args()) | {"k": torch.randn(5, 2, 16, device=DEVICE)[..., ::2]}
        call, name = lambda: varlen_attention(**args, backend="triton", check=False), "k"
    elif op == "plan":
        call, name = lambda: plan(strided, strided.clone()), "k_cache"
    elif op == "paged varlen":
        p = plan(meta["k_cache"], meta["v_cache"])
        q = torch.randn(3, 4, 16, device=DEVICE)[..., ::2]
        call, name = lambda: paged_varlen_attention_planned(q, KVCache(meta["k_cache"], meta["v_cache"]), p), "q"
    else:
        p = plan(meta["k_cache"], meta["v_cache"])
        k = torch.randn(3, 2, 16, device=DEVICE)[..., ::2]
        call, name = lambda: store_kv_planned(k, k.clone(), KVCache(meta["k_cache"], meta["v_cache"]), p), "k"
    with pytest.raises(ValueError, match=rf"{name}.stride\(-1\) is 2 but must be 1 for Triton"):
        call()


# ---- scales and degenerate shapes, at every public entry point -------------------------------------------

BAD_SCALES = [
    # The exact message: a zero or negative scale is refused as such, not only by the float32 range check.
    (0.0, r"^scale=0.0 must be a finite number > 0 \(or None for head_dim \*\* -0.5\)$"),
    (0, r"^scale=0 must be a finite number > 0 \(or None for head_dim \*\* -0.5\)$"),
    (-0.0, r"^scale=-0.0 must be a finite number > 0 \(or None for head_dim \*\* -0.5\)$"),
    (-0.125, r"^scale=-0.125 must be a finite number > 0 \(or None for head_dim \*\* -0.5\)$"),
    (-1e30, r"scale=-1e\+30 must be a finite number > 0"),
    (True, r"scale=True must be a finite number > 0 .*pass a Python float"),
    (False, r"scale=False must be a finite number > 0"),
    ("0.1", r"scale='0.1' must be a finite number > 0"),
    (float("nan"), "scale=nan must be a finite number > 0"),
    (float("-inf"), "scale=-inf must be a finite number > 0"),
    (1e-45, r"scale=1e-45 .* the kernels compute in float32, so use a scale between 1.18e-38 and 3.4e\+38"),
    (1e39, r"scale=1e\+39 .* float32"),
    (10**400, r"scale=1000000000.*\.\.\. must be a finite number > 0 .* float32"),
]


def paged_varlen_args(**over):
    """Valid paged varlen arguments: 2 sequences (5 tokens with 2 queries, 6 with 1) over 4 blocks of 4 slots."""
    args = {
        "q": torch.randn(3, 4, 8),
        "k_cache": torch.randn(4, 4, 2, 8),
        "v_cache": torch.randn(4, 4, 2, 8),
        "cu_seqlens_q": torch.tensor([0, 2, 3], dtype=torch.int32),
        "seq_lens": torch.tensor([5, 6], dtype=torch.int32),
        "block_tables": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        "max_seqlen_q": 2,
    }
    args.update(over)
    return args


def entry_points():
    """(name, call(**overrides)) for every public kernels.ops entry point that takes a scale."""
    from kernels.ops import paged_varlen_attention

    return [
        ("varlen", lambda **o: varlen_attention(**varlen_args(**o), backend="torch")),
        ("varlen causal", lambda **o: varlen_attention(**varlen_args(**o), causal=True, backend="torch")),
        ("paged", lambda **o: paged_attention(**paged_args(**o), backend="torch")),
        ("paged varlen", lambda **o: paged_varlen_attention(**paged_varlen_args(**o), backend="torch")),
    ]


@pytest.mark.parametrize(("scale", "match"), BAD_SCALES)
def test_every_entry_point_refuses_a_bad_scale(scale, match):
    """A scale <= 0 (causal SDPA gave NaN for it), a bool, NaN, inf or outside float32 is a ValueError."""
    for _name, call in entry_points():
        with pytest.raises(ValueError, match=match):
            call(scale=scale)


@pytest.mark.parametrize("scale", [1.2e-38, 1e-30, 0.125, 1, 1e30, 3.4e38])
def test_extreme_but_valid_scales_are_accepted_and_finite(scale):
    for name, call in entry_points():
        out = call(scale=scale)
        assert out.isfinite().all() or scale > 1e29, name  # from 1e30 on q . k x scale may overflow, as in fp32 math


def test_backends_refuse_bad_scales_before_dispatch():
    """The smallest positive step: scale > 0, not scale >= 0; and the check runs for the Triton backend too."""
    args = varlen_args(scale=0.0)
    with pytest.raises(ValueError, match="scale=0.0"):
        varlen_attention(**args, backend="auto")
    if TRITON_CHECKS:
        with pytest.raises(ValueError, match="scale=0.0"):
            paged_attention(**on_device(paged_args()), scale=0.0, backend="triton")


DEGENERATE_CACHES = [
    ((6, 0, 2, 8), r"k_cache has block_size=0 \(shape \(6, 0, 2, 8\)\); a paged cache .* needs block_size >= 1"),
    ((6, 4, 0, 8), r"k_cache has num_kv_heads=0 .* needs num_kv_heads >= 1"),
    ((6, 4, 2, 0), r"k_cache has head_dim=0 .* needs head_dim >= 1"),
]


@pytest.mark.parametrize(("shape", "match"), DEGENERATE_CACHES)
def test_degenerate_caches_are_refused_everywhere(shape, match):
    """Block size 0 divided by zero in the paged kernels; zero heads / head_dim failed inside torch reshapes."""
    from kernels.ops import paged_varlen_attention

    cache = {"k_cache": torch.randn(*shape), "v_cache": torch.randn(*shape)}
    heads, dim = shape[2], shape[3]
    with pytest.raises(ValueError, match=match):
        paged_attention(**paged_args(q=torch.randn(2, max(heads, 1) * 2, dim), **cache), backend="torch")
    with pytest.raises(ValueError, match=match):
        paged_varlen_attention(**paged_varlen_args(q=torch.randn(3, max(heads, 1) * 2, dim), **cache), backend="torch")
    kv = {"k": torch.randn(3, heads, dim), "v": torch.randn(3, heads, dim)}
    with pytest.raises(ValueError, match=match):
        store_kv(**store_args(**kv, **cache), backend="torch")


@pytest.mark.parametrize(
    ("q_heads", "kv_heads", "match"),
    [(0, 2, "q has 0 heads and k has 2; attention needs at least one query head"), (4, 0, "k has 0; attention")],
)
def test_zero_heads_are_refused(q_heads, kv_heads, match):
    q, k = torch.randn(5, q_heads, 8), torch.randn(5, kv_heads, 8)
    with pytest.raises(ValueError, match=match):
        varlen_attention(**varlen_args(q=q, k=k, v=k.clone()), backend="torch")


def test_zero_head_dim_is_refused():
    x = torch.randn(5, 2, 0)
    with pytest.raises(ValueError, match="head_dim=0 is not supported"):
        varlen_attention(**varlen_args(q=x, k=x.clone(), v=x.clone()), backend="torch")
