"""kernels.ops.plan_attention: one step validated once, then each layer's store_kv_planned and
paged_varlen_attention_planned through the plan, which carries the step's tensors.

The plan path must compute exactly what the unplanned path computes, and both what the slow reference does,
for every step kind (prefill, chunked prefill over a cached prefix, decode, a mix), with a window and with an
fp8 cache, on both backends (Triton through the interpreter on CPU, tiny sizes). Each case first blanks the
new tokens' slots (NaN), stores their K/V through the plan, then attends through it: a slot mapping or a
block table the plan misreads shows up as NaN or a wrong row. A plan is refused, before anything is written,
by any layer call it was not built for: another cache layout, q, k or v of another shape or dtype, scales
that do not match the cache, a plan of another use. (The metadata, window and backend travel in the plan, so
a call cannot hand in others.)
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.fp8 import FP8_DTYPE
from kernels.ops import (
    paged_varlen_attention,
    paged_varlen_attention_planned,
    plan_attention,
    store_kv_planned,
)
from kernels.plan import AttentionPlan, HostStep, KVCache, check_call, check_rows
from kernels.reference import paged_varlen_attention_ref, store_kv_ref
from tests.conftest import DEVICE, TRITON_OK
from tests.kernels.test_paged_varlen_attention import MIX, make_case

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]
KINDS = {
    "prefill": [(12, 12), (5, 5), (1, 1)],
    "chunked": [(20, 5), (10, 4), (9, 0), (6, 2)],
    "decode": [(7, 1), (33, 1), (1, 1), (9, 0)],
    "mixed": MIX,
}
NAN_BYTE = 0x7F  # float8_e4m3fn NaN


def new_token_slots(args: dict, mix: list[tuple[int, int]]) -> torch.Tensor:
    """int64 [T]: the slot of each sequence's last len_q tokens through its block-table row."""
    tables, block_size = args["block_tables"].cpu(), args["k_cache"].shape[1]
    slots = [
        int(tables[i, p // block_size]) * block_size + p % block_size
        for i, (n, q) in enumerate(mix)
        for p in range(n - q, n)
    ]
    return torch.tensor(slots, dtype=torch.int64, device=DEVICE)


def new_token_kv(ks: list[torch.Tensor], mix: list[tuple[int, int]]) -> torch.Tensor:
    """[T, Hkv, D]: each sequence's last len_q rows of its contiguous K (or V), packed."""
    return torch.cat([k[n - q :] for k, (n, q) in zip(ks, mix, strict=True)]).to(DEVICE)


def blank(cache: torch.Tensor, slots: torch.Tensor) -> None:
    """NaN in the given slots of a [num_blocks, block_size, Hkv, D] cache (through uint8 for fp8)."""
    flat = cache.view(torch.uint8) if cache.dtype == FP8_DTYPE else cache
    flat = flat.view(-1, *cache.shape[2:])
    flat[slots] = NAN_BYTE if cache.dtype == FP8_DTYPE else float("nan")


def quantized(args: dict, k_scale: torch.Tensor, v_scale: torch.Tensor) -> dict:
    """The case's caches as e4m3 (x / scale; NaN stays NaN)."""
    k8 = (args["k_cache"].float() / k_scale.reshape(-1, 1)).to(FP8_DTYPE)
    v8 = (args["v_cache"].float() / v_scale.reshape(-1, 1)).to(FP8_DTYPE)
    return args | {"k_cache": k8, "v_cache": v8}


def reference(args: dict, causal: bool = True, **scales) -> torch.Tensor:
    return paged_varlen_attention_ref(**{k: v for k, v in args.items() if k != "max_seqlen_q"}, causal=causal, **scales)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("fp8", [False, True])
def test_plan_path_equals_the_unplanned_path_and_the_reference(backend, kind, window, fp8):
    mix = KINDS[kind]
    args, ks, vs = make_case(mix, 4, 2, 8, 4, window=window)
    scales = {}
    if fp8:
        scales = {"k_scale": torch.tensor([0.02], device=DEVICE), "v_scale": torch.tensor([0.03], device=DEVICE)}
        args = quantized(args, **scales)
    slots = new_token_slots(args, mix)
    original = args["k_cache"].clone(), args["v_cache"].clone()
    for cache in (args["k_cache"], args["v_cache"]):
        blank(cache, slots)
    q = args["q"]
    plan = plan_attention(
        args["cu_seqlens_q"],
        args["seq_lens"],
        args["block_tables"],
        args["max_seqlen_q"],
        slots,
        args["k_cache"],
        args["v_cache"],
        num_heads=q.shape[1],
        q_dtype=q.dtype,
        sliding_window=window,
        backend=backend,
        **scales,
    )
    assert plan.backend == backend and plan.num_tokens == q.shape[0] and (plan.index is None) == (backend == "triton")
    k_new, v_new = new_token_kv(ks, mix), new_token_kv(vs, mix)
    cache = KVCache(args["k_cache"], args["v_cache"], scales.get("k_scale"), scales.get("v_scale"))
    store_kv_planned(k_new, v_new, cache, plan)
    if not fp8 or backend == "torch":  # the interpreter's float8 cast rounds some values a binade low
        for stored, before in zip((args["k_cache"], args["v_cache"]), original, strict=True):
            assert stored.view(torch.uint8).equal(before.view(torch.uint8)), "store_kv wrote another slot or value"
    meta = (args["cu_seqlens_q"], args["seq_lens"], args["block_tables"], args["max_seqlen_q"])
    planned = paged_varlen_attention_planned(q, cache, plan)
    unplanned = paged_varlen_attention(
        q, args["k_cache"], args["v_cache"], *meta, sliding_window=window, backend=backend, **scales
    )
    assert torch.equal(planned, unplanned)
    assert not planned.isnan().any()
    tol = 1e-4 if fp8 else 2e-5
    torch.testing.assert_close(planned.cpu(), reference(args, **scales).cpu(), atol=tol, rtol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_plan_serves_every_layer_of_one_layout(backend):
    """Layers' caches are views of one pool with the same layout: the plan of layer 0 attends layer 1 right."""
    args, ks, vs = make_case(MIX, 4, 2, 8, 4)
    pool = torch.stack([torch.stack([args["k_cache"], args["v_cache"]])] * 2)  # [layers, 2, blocks, bs, H, D]
    pool[1] = pool[1] * 2 + 1  # layer 1 holds other values
    layers = [(pool[i, 0], pool[i, 1]) for i in range(2)]
    slots = new_token_slots(args, MIX)
    plan = plan_attention(
        args["cu_seqlens_q"],
        args["seq_lens"],
        args["block_tables"],
        args["max_seqlen_q"],
        slots,
        *layers[0],
        num_heads=4,
        q_dtype=args["q"].dtype,
        backend=backend,
    )
    for k_cache, v_cache in layers:
        out = paged_varlen_attention_planned(args["q"], KVCache(k_cache, v_cache), plan)
        expected = reference(args | {"k_cache": k_cache, "v_cache": v_cache})
        torch.testing.assert_close(out.cpu(), expected.cpu(), atol=2e-5, rtol=2e-5)


def test_plan_decides_the_torch_decode_path():
    """fp32 contiguous CPU caches decode through the sparse index; other dtypes or strided caches gather."""
    args, _, _ = make_case([(7, 1), (30, 1), (12, 3)], 4, 2, 8, 4)
    meta = (args["cu_seqlens_q"], args["seq_lens"], args["block_tables"], args["max_seqlen_q"], None)

    def plan_for(k_cache, v_cache, dtype, **kw):
        return plan_attention(*meta, k_cache, v_cache, num_heads=4, q_dtype=dtype, backend="torch", **kw)

    fp32 = plan_for(args["k_cache"], args["v_cache"], torch.float32)
    assert fp32.index.decode == [0, 1] and fp32.index.groups == {(3, 12): [(2, 0)]}
    assert (fp32.index.decode_slots.sparse is not None) == (DEVICE == "cpu")
    half = args["k_cache"].bfloat16(), args["v_cache"].bfloat16()
    assert plan_for(*half, torch.bfloat16).index.decode_slots.sparse is None
    wide = torch.cat([args["k_cache"], args["k_cache"]], dim=2)[:, :, :2]  # same shape, other strides
    assert plan_for(wide, wide, torch.float32).index.decode_slots.sparse is None
    windowed = plan_for(args["k_cache"], args["v_cache"], torch.float32, sliding_window=4)
    assert windowed.index.decode_slots is None and windowed.index.decode_tok is not None


# ---------------------------------------------------------------------------------------- mismatches
def planned_case(backend="torch", fp8=False, window=None):
    """A valid decode + chunk step (torch backend) with its plan and the per-layer call arguments."""
    mix = [(6, 2), (9, 1)]
    args, ks, vs = make_case(mix, 4, 2, 8, 4, window=window)
    scales = {}
    if fp8:
        scales = {"k_scale": torch.tensor(0.02, device=DEVICE), "v_scale": torch.tensor(0.03, device=DEVICE)}
        args = quantized(args, **scales)
    slots = new_token_slots(args, mix)
    plan = plan_attention(
        args["cu_seqlens_q"],
        args["seq_lens"],
        args["block_tables"],
        args["max_seqlen_q"],
        slots,
        args["k_cache"],
        args["v_cache"],
        num_heads=4,
        q_dtype=torch.float32,
        sliding_window=window,
        backend=backend,
        **scales,
    )
    attend = {"q": args["q"], "k_cache": args["k_cache"], "v_cache": args["v_cache"], **scales}
    store = {
        "k": new_token_kv(ks, mix),
        "v": new_token_kv(vs, mix),
        "k_cache": args["k_cache"],
        "v_cache": args["v_cache"],
        **scales,
    }
    return plan, attend, store


def cache_of(call: dict) -> KVCache:
    """The KVCache of a planned_case call dict."""
    return KVCache(call["k_cache"], call["v_cache"], call.get("k_scale"), call.get("v_scale"))


def attend(call: dict, plan) -> torch.Tensor:
    """paged_varlen_attention_planned with a call dict's q, cache and scale."""
    return paged_varlen_attention_planned(call["q"], cache_of(call), plan, scale=call.get("scale"))


def store(call: dict, plan) -> None:
    """store_kv_planned with a call dict's k, v and cache."""
    store_kv_planned(call["k"], call["v"], cache_of(call), plan)


def other_layout(cache: torch.Tensor) -> torch.Tensor:
    """A cache of the same shape and dtype whose strides differ (a view of a wider pool)."""
    return torch.cat([cache, cache], dim=2)[:, :, : cache.shape[2]]


ATTEND_MISMATCHES = [
    ({"q": lambda a: [[1.0]]}, "q must be a torch.Tensor"),
    ({"q": lambda a: a["q"][0]}, r"q has shape \(4, 8\) but must be 3-D"),
    ({"q": lambda a: a["q"][:2]}, r"the plan's step packs 3 tokens \(cu_seqlens_q\[-1\]\) but q has 2 tokens"),
    ({"q": lambda a: a["q"][:, :2]}, "q has 2 heads but the plan was built for 4"),
    ({"q": lambda a: a["q"][..., :4]}, "q has head_dim 4 but k_cache has 8"),
    ({"q": lambda a: a["q"].double()}, "q has dtype torch.float64 but the plan was built for q_dtype=torch.float32"),
    ({"q": lambda a: a["q"].to("meta")}, "q is on meta but the cache is on"),
    ({"k_cache": lambda a: a["k_cache"][:-1]}, "k_cache is .* but the plan was built for a cache"),
    ({"v_cache": lambda a: other_layout(a["v_cache"])}, "v_cache is .* but the plan was built for a cache"),
    ({"k_cache": lambda a: a["k_cache"].half()}, "k_cache is .* but the plan was built for a cache"),
    ({"k_scale": lambda a: torch.tensor(0.1, device=DEVICE)}, "k_scale was given but the plan's cache is"),
    ({"scale": lambda a: -1.0}, "scale=-1.0 must be a finite number > 0"),
]


@pytest.mark.parametrize(("over", "match"), ATTEND_MISMATCHES)
def test_attention_refuses_a_call_the_plan_was_not_built_for(over, match):
    plan, call, _ = planned_case()
    call = call | {name: make(call) for name, make in over.items()}
    with pytest.raises(ValueError, match=match):
        attend(call, plan)


STORE_MISMATCHES = [
    ({"k": lambda a: a["k"][0]}, r"k has shape \(2, 8\) but must be 3-D"),
    ({"k": lambda a: a["k"][:2], "v": lambda a: a["v"][:2]}, "slot_mapping has 3 slots but k has 2 tokens"),
    ({"v": lambda a: a["v"][:, :1]}, r"k has shape \(3, 2, 8\) but v has \(3, 1, 8\)"),
    ({"k": lambda a: a["k"][:, :1], "v": lambda a: a["v"][:, :1]}, r"k rows are \[1, 8\] .* cache holds \[2, 8\]"),
    ({"k": lambda a: a["k"].half(), "v": lambda a: a["v"].half()}, "k, v have dtypes torch.float16, torch.float16"),
    ({"k": lambda a: a["k"].to("meta"), "v": lambda a: a["v"].to("meta")}, "k is on meta but the cache is on"),
    ({"k_cache": lambda a: other_layout(a["k_cache"])}, "k_cache is .* but the plan was built for a cache"),
    ({"v_scale": lambda a: torch.tensor(0.1, device=DEVICE)}, "v_scale was given but the plan's cache is"),
]


@pytest.mark.parametrize(("over", "match"), STORE_MISMATCHES)
def test_store_refuses_a_call_the_plan_was_not_built_for(over, match):
    plan, _, call = planned_case()
    before = call["k_cache"].clone(), call["v_cache"].clone()
    call = call | {name: make(call) for name, make in over.items()}
    with pytest.raises(ValueError, match=match):
        store(call, plan)
    for cache, old in zip((call["k_cache"], call["v_cache"]), before, strict=True):
        assert cache.view(torch.uint8).equal(old.view(torch.uint8)), "a refused call wrote into the cache"


def test_a_planned_call_needs_a_plan_of_its_use_and_a_cache():
    plan, attend_call, store_call = planned_case()
    for call in (lambda p, c: attend(attend_call | c, p), lambda p, c: store(store_call | c, p)):
        with pytest.raises(ValueError, match="plan must be an AttentionPlan from kernels.ops.plan_attention"):
            call("a plan", {})
    with pytest.raises(ValueError, match="cache must be a kernels.plan.KVCache"):
        paged_varlen_attention_planned(attend_call["q"], attend_call["k_cache"].sum(), plan)
    with pytest.raises(ValueError, match="cache must be a kernels.plan.KVCache"):
        store_kv_planned(store_call["k"], store_call["v"], 3, plan)
    slots_only = dataclasses.replace(plan, cu_seqlens_q=None)  # what store_kv without a plan builds
    with pytest.raises(ValueError, match="the plan holds slots only"):
        attend(attend_call, slots_only)


FP8_MISMATCHES = [
    ({"k_scale": None}, "k_scale is None but the plan was built for an fp8 cache"),
    ({"v_scale": torch.tensor([0.1, 0.2])}, r"v_scale is .* but the plan was built for an fp8 cache with v_scale"),
]


@pytest.mark.parametrize(("over", "match"), FP8_MISMATCHES)
def test_fp8_plan_refuses_missing_or_other_scales(over, match):
    plan, attend_call, store_call = planned_case(fp8=True)
    over = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in over.items()}
    with pytest.raises(ValueError, match=match):
        attend(attend_call | over, plan)
    with pytest.raises(ValueError, match=match):
        store(store_call | over, plan)


def test_a_plan_without_slot_mapping_serves_attention_only():
    plan, attend_call, store_call = planned_case()
    attention_only = dataclasses.replace(plan, slot_mapping=None)
    out = attend(attend_call, attention_only)
    assert torch.equal(out, attend(attend_call, plan))
    with pytest.raises(ValueError, match="the plan was built without a slot_mapping"):
        store(store_call, attention_only)


def test_plan_is_frozen():
    plan, _, _ = planned_case()
    assert isinstance(plan, AttentionPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.backend = "triton"


def test_the_per_call_checks_read_nothing_from_the_device(monkeypatch):
    """With a plan, a layer's call checks only Python attributes of its arguments (no .tolist, .item, bool)."""
    plan, attend_call, store_call = planned_case(fp8=True, window=3)

    def refuse(*args, **kwargs):
        raise AssertionError("the per-call plan check read a tensor's values")

    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    check_call(plan, cache_of(attend_call), store=False)
    check_rows("q", attend_call["q"], plan.num_heads, plan, "{}")
    check_call(plan, cache_of(store_call), store=True)
    for name in ("k", "v"):
        check_rows(name, store_call[name], plan.num_kv_heads, plan, "{}")


# ----------------------------------------------------------------------------------- plan validation
def plan_args(**over):
    """Valid plan_attention arguments: 2 sequences (5 tokens with 2 queries, 6 with 1), 4 blocks of 4 slots."""
    args = {
        "cu_seqlens_q": torch.tensor([0, 2, 3], dtype=torch.int32),
        "seq_lens": torch.tensor([5, 6], dtype=torch.int32),
        "block_tables": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        "max_seqlen_q": 2,
        "slot_mapping": torch.tensor([3, 4, 13]),
        "k_cache": torch.zeros(4, 4, 2, 8),
        "v_cache": torch.zeros(4, 4, 2, 8),
        "num_heads": 4,
        "q_dtype": torch.float32,
    }
    return args | over


FP8_CACHE = {"k_cache": torch.zeros(4, 4, 2, 8, dtype=FP8_DTYPE), "v_cache": torch.zeros(4, 4, 2, 8, dtype=FP8_DTYPE)}
PLAN_ERRORS = [
    ({"slot_mapping": torch.tensor([3, 4])}, "slot_mapping has 2 slots but cu_seqlens_q packs 3 query tokens"),
    ({"slot_mapping": torch.tensor([3, 4, 16])}, "slot 16 but the cache has 4 blocks x 4 = 16 slots"),
    ({"slot_mapping": torch.tensor([3, 4, 3])}, r"writes the same slot twice \(slot 3\)"),
    ({"slot_mapping": torch.tensor([3.0, 4.0, 5.0])}, "slot_mapping has dtype torch.float32"),
    ({"slot_mapping": torch.tensor([[3, 4, 5]])}, "slot_mapping has shape"),
    ({"slot_mapping": torch.tensor([3, 4, 5], device="meta")}, "slot_mapping is on meta but the cache is on cpu"),
    ({"num_heads": 4.0}, "num_heads=4.0 must be a Python int"),
    ({"num_heads": True}, "num_heads=True must be a Python int"),
    ({"num_heads": 3}, "q has 3 heads but k_cache has 2"),
    ({"q_dtype": torch.float64}, "q has dtype torch.float64; use float32, float16 or bfloat16"),
    ({"q_dtype": torch.float16}, "q, k_cache, v_cache have dtypes torch.float16, torch.float32, torch.float32"),
    ({"v_cache": torch.zeros(4, 4, 2, 8, device="meta")}, "k_cache is on cpu but v_cache on meta"),
    (FP8_CACHE, "the cache is torch.float8_e4m3fn but k_scale is None"),
    (FP8_CACHE | {"k_scale": torch.tensor(-1.0), "v_scale": torch.tensor(1.0)}, r"hold \[-1.0, 1.0\]; scales must"),
    (FP8_CACHE | {"k_scale": torch.tensor(1.0), "v_scale": torch.tensor(float("nan"))}, "must be finite and >= 0"),
    (FP8_CACHE | {"k_scale": torch.tensor(1.0), "v_scale": torch.tensor(float("inf"))}, "must be finite and >= 0"),
    (FP8_CACHE | {"k_scale": torch.tensor(1.0), "v_scale": torch.tensor(1, dtype=torch.float64)}, "must be a float32"),
    (FP8_CACHE | {"k_scale": torch.ones(3), "v_scale": torch.ones(1)}, r"k_scale has shape \(3,\)"),
    ({"k_scale": torch.tensor(1.0)}, "k_scale was given but the cache is torch.float32"),
    ({"sliding_window": 2, "causal": False}, "sliding_window=2 needs causal=True"),
    ({"sliding_window": 0}, "sliding_window=0 must be a positive int"),
    ({"causal": 1}, "causal=1 must be True or False"),
    ({"max_seqlen_q": 1}, "max_seqlen_q=1 but the longest sequence has 2 tokens"),
    ({"block_tables": torch.tensor([[0, 1], [2, 4]], dtype=torch.int32)}, r"block_tables\[1, 1\] = 4 is outside"),
    ({"seq_lens": torch.tensor([1, 6], dtype=torch.int32)}, r"sequence 0 has 2 queries but seq_lens\[0\] = 1"),
    ({"cu_seqlens_q": torch.tensor([0, 3, 2], dtype=torch.int32)}, "decreases at index 2"),
    ({"backend": "cuda"}, "backend='cuda' is not supported"),
]


@pytest.mark.parametrize(("over", "match"), PLAN_ERRORS)
def test_plan_errors_name_the_value_and_fix(over, match):
    with pytest.raises(ValueError, match=match):
        plan_attention(**plan_args(**over))


def test_plan_accepts_host_lists_negative_slots_and_unset_scales():
    host_step = HostStep([0, 2, 3], [5, 6], [[0, 1], [2, 3]], [3, -1, 13])
    plan = plan_attention(**plan_args(host_step=host_step, slot_mapping=torch.tensor([3, -1, 13])))
    assert (plan.starts_q, plan.lens, plan.all_slots_live) == ([0, 2, 3], [5, 6], False)
    assert plan_attention(**plan_args()).all_slots_live
    unset = {"k_scale": torch.zeros(1), "v_scale": torch.zeros(2)}  # 0: not calibrated yet
    assert plan_attention(**plan_args(**FP8_CACHE, **unset)).k_scale_layout.shape == (1,)


# ------------------------------------------------------------------------------------ store and window
@pytest.mark.parametrize("backend", BACKENDS)
def test_planned_store_matches_the_reference_store(backend):
    """Negative slots are skipped through the plan too, and only the live slots change."""
    plan, _, store_call = planned_case(backend=backend)
    slots = plan.slot_mapping.clone()
    slots[1] = -1
    plan = plan_attention(
        plan.cu_seqlens_q,
        plan.seq_lens,
        plan.block_tables,
        plan.max_seqlen_q,
        slots,
        store_call["k_cache"],
        store_call["v_cache"],
        num_heads=4,
        q_dtype=torch.float32,
        backend=backend,
    )
    expected_k, expected_v = store_call["k_cache"].clone(), store_call["v_cache"].clone()
    store_kv_ref(store_call["k"], store_call["v"], expected_k, expected_v, slots)
    store(store_call, plan)
    assert store_call["k_cache"].view(torch.uint8).equal(expected_k.view(torch.uint8))
    assert store_call["v_cache"].view(torch.uint8).equal(expected_v.view(torch.uint8))


def test_a_call_without_a_plan_plans_itself_and_takes_the_planned_path(monkeypatch):
    """One validation path: the public store_kv and paged_varlen_attention build a plan (plan_store /
    plan_step) and run the planned calls with it; a plan_step that refuses the step refuses the public call."""
    import kernels.ops as ops

    plan, attend_call, store_call = planned_case()
    seen = []
    for name in ("plan_step", "plan_store", "store_kv_planned", "paged_varlen_attention_planned"):
        real = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _real=real, _name=name, **k: seen.append(_name) or _real(*a, **k))
    ops.store_kv(store_call["k"], store_call["v"], store_call["k_cache"], store_call["v_cache"], plan.slot_mapping)
    meta = (plan.cu_seqlens_q, plan.seq_lens, plan.block_tables, plan.max_seqlen_q)
    out = ops.paged_varlen_attention(attend_call["q"], attend_call["k_cache"], attend_call["v_cache"], *meta)
    assert seen == ["plan_store", "store_kv_planned", "plan_step", "paged_varlen_attention_planned"]
    assert torch.equal(out, attend(attend_call, plan))

    def refuse(*args, **kwargs):
        raise ValueError("refused by the plan")

    monkeypatch.setattr(ops, "plan_step", refuse)
    with pytest.raises(ValueError, match="refused by the plan"):
        ops.paged_varlen_attention(attend_call["q"], attend_call["k_cache"], attend_call["v_cache"], *meta)
