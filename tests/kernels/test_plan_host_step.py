"""plan_attention(..., host_step=HostStep(...)): a step's checks run on the Python lists its tensors were made from.

The host path must refuse exactly what the device path refuses, with the same message, and accept exactly
what it accepts with the same plan: every case of test_plan's PLAN_ERRORS, a seeded fuzz over corrupted
steps (offsets, lengths, block-table entries inside and outside the range a sequence reads, windows, slots
out of range, twice or skipped), and the engine's step builder, which hands its lists in. With host_step
the check reads nothing back from the device (a full-precision cache).
"""

from __future__ import annotations

import random

import pytest
import torch

from engine.model.forward_meta import ForwardMeta, LayerKV
from kernels.ops import HostStep, plan_attention
from tests.kernels.test_plan import FP8_CACHE, PLAN_ERRORS, plan_args


def host_of(args: dict) -> HostStep:
    """The lists of a plan_args dict's metadata tensors (empty lists for tensors that cannot be read: those
    cases are refused before the lists are looked at)."""

    def lst(t):
        ok = isinstance(t, torch.Tensor) and t.device.type != "meta"
        return t.tolist() if ok else []

    slots = args["slot_mapping"]
    return HostStep(
        lst(args["cu_seqlens_q"]),
        lst(args["seq_lens"]),
        lst(args["block_tables"]),
        None if slots is None else lst(slots),
    )


def outcome(args: dict):
    """The plan's values, or the ValueError's message."""
    try:
        plan = plan_attention(**args)
    except ValueError as e:
        return "error", str(e)
    return "plan", plan.backend, plan.starts_q, plan.lens, plan.num_tokens, plan.all_slots_live


@pytest.mark.parametrize(("over", "match"), PLAN_ERRORS)
def test_host_step_refuses_what_the_device_path_refuses(over, match):
    args = plan_args(**over)
    with pytest.raises(ValueError, match=match):
        plan_attention(**args, host_step=host_of(args))
    assert outcome(args | {"host_step": host_of(args)}) == outcome(args)


def test_an_out_of_range_block_in_the_host_lists_is_refused():
    args = plan_args(block_tables=torch.tensor([[0, 1], [2, 4]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = 4 is outside the cache's 4 blocks"):
        plan_attention(**args, host_step=host_of(args))
    args = plan_args(block_tables=torch.tensor([[0, -1], [2, 3]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"block_tables\[0, 1\] = -1 is outside the cache's 4 blocks"):
        plan_attention(**args, host_step=host_of(args))


def test_host_step_accepts_what_the_device_path_accepts():
    args = plan_args(slot_mapping=torch.tensor([3, -1, 13]))
    assert (
        outcome(args | {"host_step": host_of(args)}) == outcome(args) == ("plan", "torch", [0, 2, 3], [5, 6], 3, False)
    )
    attention_only = plan_args(slot_mapping=None)
    assert outcome(attention_only | {"host_step": host_of(attention_only)}) == outcome(attention_only)
    unset = FP8_CACHE | {"k_scale": torch.zeros(1), "v_scale": torch.zeros(1)}
    fp8 = plan_args(**unset)
    assert outcome(fp8 | {"host_step": host_of(fp8)}) == outcome(fp8)
    bad = plan_args(**FP8_CACHE, k_scale=torch.tensor(-1.0), v_scale=torch.tensor(1.0))
    assert outcome(bad | {"host_step": host_of(bad)}) == outcome(bad)
    assert outcome(bad)[0] == "error"


@pytest.mark.parametrize(
    "host_step",
    [
        ([0, 2, 3], [5, 6], [[0, 1], [2, 3]]),  # three lists
        HostStep([0, 2], [5, 6], [[0, 1], [2, 3]], [3, 4, 13]),  # cu_seqlens_q too short
        HostStep([0, 2, 3], [5], [[0, 1], [2, 3]], [3, 4, 13]),  # seq_lens too short
        HostStep([0, 2, 3], [5, 6], [[0, 1]], [3, 4, 13]),  # a row missing
        HostStep([0, 2, 3], [5, 6], [[0, 1], [2]], [3, 4, 13]),  # a row too short
        HostStep([0, 2, 3], [5, 6], [[0, 1], [2, 3]], [3, 4]),  # a slot missing
        HostStep([0, 2, 3], [5, 6], [[0, 1], [2, 3]], None),  # no slots but a slot_mapping
        HostStep(torch.tensor([0, 2, 3]), [5, 6], [[0, 1], [2, 3]], [3, 4, 13]),  # a tensor, not a list
    ],
)
def test_host_step_of_another_shape_is_refused(host_step):
    with pytest.raises(ValueError, match=r"host_step must be HostStep\(cu_seqlens_q.tolist\(\)"):
        plan_attention(**plan_args(), host_step=host_step)


def random_step(rng: random.Random, num_blocks: int, block_size: int) -> dict:
    """A valid-looking step of 1-4 sequences, then zero to two corruptions of its lists."""
    num_seqs = rng.randint(1, 4)
    width = rng.randint(1, 4)
    lens, q_lens, tables = [], [], []
    for _ in range(num_seqs):
        seq_len = rng.randint(1, width * block_size)
        lens.append(seq_len)
        q_lens.append(rng.choice([1, 1, rng.randint(0, seq_len)]))
        tables.append([rng.randrange(num_blocks) for _ in range(width)])
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    slots = rng.sample(range(max(num_blocks * block_size, cu[-1])), cu[-1])  # may run past the cache
    window = rng.choice([None, None, rng.randint(1, 2 * block_size)])
    for _ in range(rng.randint(0, 2)):
        kind = rng.randrange(7)
        seq, col = rng.randrange(num_seqs), rng.randrange(width)
        if kind == 0:
            tables[seq][col] = rng.choice([-1, num_blocks, num_blocks + 3, -7])
        elif kind == 1:
            lens[seq] = rng.choice([-1, 0, lens[seq] + block_size, width * block_size + 1])
        elif kind == 2 and len(cu) > 2:
            cu[rng.randrange(1, len(cu) - 1)] += rng.choice([-2, 1])
        elif kind == 3 and slots:
            slots[rng.randrange(len(slots))] = rng.choice([-1, -5, num_blocks * block_size, slots[0]])
        elif kind == 4 and slots:
            slots.pop()
        elif kind == 5:
            cu[0] = rng.choice([1, -1])
        elif kind == 6:
            for c in range(width):
                tables[seq][c] = -1  # freed blocks: refused only where they are read
    max_q = max((b - a for a, b in zip(cu[:-1], cu[1:], strict=True)), default=0)
    return {
        "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32),
        "seq_lens": torch.tensor(lens, dtype=torch.int32),
        "block_tables": torch.tensor(tables, dtype=torch.int32),
        "max_seqlen_q": max(max_q, 0) + rng.choice([0, 0, 1]),
        "slot_mapping": rng.choice([None, torch.tensor(slots, dtype=rng.choice([torch.int32, torch.int64]))]),
        "k_cache": torch.zeros(num_blocks, block_size, 2, 8),
        "v_cache": torch.zeros(num_blocks, block_size, 2, 8),
        "num_heads": 4,
        "q_dtype": torch.float32,
        "sliding_window": window,
    }


def test_host_step_and_device_path_agree_on_random_steps():
    rng = random.Random(0)
    kinds = set()
    for _ in range(400):
        args = random_step(rng, num_blocks=rng.randint(2, 9), block_size=rng.choice([1, 2, 4]))
        expected = outcome(args)
        kinds.add(expected[0] if expected[0] == "plan" else expected[1].split(" ")[0])
        assert outcome(args | {"host_step": host_of(args)}) == expected, args
    assert "plan" in kinds and len(kinds) >= 5  # both accepted steps and several kinds of refusal were drawn


def test_host_step_reads_nothing_from_the_device(monkeypatch):
    args = plan_args(sliding_window=3)
    host_step = host_of(args)
    expected = outcome(args)

    def refuse(*a, **k):
        raise AssertionError("plan_step read a tensor's values although it had the host lists")

    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    assert outcome(args | {"host_step": host_step}) == expected


def test_host_step_plans_tensors_that_cannot_be_read():
    """On the meta device (shapes, no values) a step with its HostStep is still checked and planned."""
    args = plan_args(slot_mapping=torch.tensor([3, -1, 13]))
    host_step = host_of(args)
    on_meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    plan = plan_attention(**on_meta, host_step=host_step)
    assert (plan.starts_q, plan.lens, plan.all_slots_live, plan.index.decode) == ([0, 2, 3], [5, 6], False, [1])
    bad = host_step._replace(slot_mapping=[3, 3, 13])
    with pytest.raises(ValueError, match=r"writes the same slot twice \(slot 3\)"):
        plan_attention(**on_meta, host_step=bad)


def test_the_step_builder_refuses_a_block_outside_the_cache():
    """ForwardMeta.build hands its lists to plan_attention: an out-of-range block is still refused."""
    layer = LayerKV(torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8))

    def build(tables, query_lens=(1, 1), context_lens=(4, 5), window=None):
        lens = list(query_lens), list(context_lens)
        return ForwardMeta.build(*lens, tables, layer, num_heads=4, q_dtype=torch.float32, sliding_window=window)

    plan = build([[0, 1], [2, 3]]).attention
    assert (plan.starts_q, plan.lens, plan.slot_mapping.tolist()) == ([0, 1, 2], [5, 6], [4, 13])
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = 4 is outside the cache's 4 blocks"):
        build([[0, 1], [2, 4]])
    with pytest.raises(ValueError, match=r"block_tables\[0, 0\] = -1 is outside the cache's 4 blocks"):
        build([[-1, 1], [2, 3]])
    behind = build([[-1, 1], [2, 3]], context_lens=(5, 5), window=2).attention  # block 0 is behind the window
    assert (behind.lens, behind.slot_mapping.tolist()) == ([6, 6], [5, 13])
    with pytest.raises(ValueError, match=r"writes the same slot twice \(slot 13\)"):
        build([[3, 1], [2, 3]], context_lens=(1, 5))
