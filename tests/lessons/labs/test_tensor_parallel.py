"""The KV-across-GPUs table against hand arithmetic: KV heads split over TP, then copied; NCCL's extra memory."""

from __future__ import annotations

import pytest

from engine.memory.catalog import MODELS
from engine.memory.footprint import NCCL_EXTRA_BYTES, NON_TORCH_BYTES, non_torch_bytes, serving_footprint
from engine.memory.parallel import check_tensor_parallel, kv_head_replicas, kv_heads_per_gpu
from engine.memory.units import GiB
from lessons import content
from lessons.diagnosis import get_scenario, grade
from lessons.diagnosis.grading import tp_kv_note
from lessons.labs import tensor_parallel as lab


def _kv_per_gpu(layers: int, kv_heads: int, head_dim: int, tp: int, nbytes: int = 2) -> int:
    return 2 * layers * max(1, kv_heads // tp) * head_dim * nbytes  # K and V, every layer, this GPU's heads


def test_llama_3_70b_stops_thinning_its_kv_at_8_gpus():
    table = lab.tp_table("llama-3-70b", "h100-sxm")
    assert [r.tensor_parallel for r in table.points] == [1, 2, 4, 8, 16] and table.refused == ()
    for r in table.points:
        assert r.kv_bytes_per_token_per_gpu == _kv_per_gpu(80, 8, 128, r.tensor_parallel)
    tp8, tp16 = table.at(8), table.at(16)
    assert tp8.kv_heads_per_gpu == tp16.kv_heads_per_gpu == 1 and tp8.kv_head_replicas == 1
    assert tp16.kv_head_replicas == 2 and tp16.kv_bytes_per_token_per_gpu == tp8.kv_bytes_per_token_per_gpu
    assert tp16.kv_bytes_per_token_all_gpus == 2 * tp8.kv_bytes_per_token_all_gpus  # each head stored twice
    assert table.at(4).kv_bytes_per_token_per_gpu == 2 * tp8.kv_bytes_per_token_per_gpu  # 2 heads -> 1
    assert not table.at(1).fits and table.at(1).tokens_in_pool == 0  # 131 GiB of bf16 weights on an 80 GB card
    # the pool still grows past 8 GPUs, only through the weights each GPU no longer holds
    assert tp16.weights_bytes_per_gpu * 2 == pytest.approx(tp8.weights_bytes_per_gpu, abs=2)
    assert tp16.tokens_in_pool > tp8.tokens_in_pool
    extra = tp16.kv_pool_bytes_per_gpu - tp8.kv_pool_bytes_per_gpu
    assert extra == pytest.approx(tp8.weights_bytes_per_gpu - tp16.weights_bytes_per_gpu, rel=0.05)
    assert "from TP 8 on each GPU keeps one (40 KiB per token)" in table.summary()
    assert "TP 16 stores as much KV per token on each GPU as TP 8" in table.summary()


def test_nccl_buffers_are_charged_per_gpu_from_tp_2():
    assert non_torch_bytes(1) == NON_TORCH_BYTES
    assert non_torch_bytes(2) == non_torch_bytes(16) == NON_TORCH_BYTES + int(1.79 * GiB)
    table = lab.tp_table("llama-3-8b", "h100-sxm")
    one, two = table.at(1), table.at(2)
    assert (one.non_torch_bytes_per_gpu, two.non_torch_bytes_per_gpu) == (
        non_torch_bytes(1),
        non_torch_bytes(2),
    )


@pytest.mark.parametrize(
    ("model", "tp", "words"),
    [
        ("qwen2.5-0.5b", 4, "14 query heads, not divisible by TP 4"),  # 14 heads
        ("llama-3-8b", 0, "whole number >= 1"),
        ("llama-3-8b", True, "whole number >= 1"),
    ],
)
def test_tp_sizes_vllm_refuses_are_named(model, tp, words):
    with pytest.raises(ValueError, match=words):
        check_tensor_parallel(MODELS[model], tp)


def test_kv_heads_must_split_or_replicate_evenly():
    spec = MODELS["llama-3-8b"].with_kv_heads(4)  # 32 query heads, 4 KV heads
    check_tensor_parallel(spec, 2)
    check_tensor_parallel(spec, 8)  # each KV head copied twice
    with pytest.raises(ValueError, match="neither divides them nor is a multiple"):
        check_tensor_parallel(MODELS["qwen2.5-7b"], 7)  # 28 query heads split 7 ways, but 4 KV heads cannot be
    with pytest.raises(ValueError, match="neither divides them nor is a multiple"):
        check_tensor_parallel(MODELS["llama-2-13b"].with_kv_heads(8), 20)  # 40 query heads; 20 GPUs, 8 KV heads
    refused = dict(lab.tp_table("qwen2.5-0.5b", "l4").refused)
    assert sorted(refused) == [4, 8, 16] and "pick a divisor of 14" in refused[4]


def test_the_graders_tp_note_says_when_wider_tp_stops_thinning_kv():
    m = MODELS["llama-3-70b"]
    assert "8 KV heads split 2 -> 1 per GPU, so each GPU stores 2x less KV per token" in tp_kv_note(m, 4, 8)
    same = tp_kv_note(m, 8, 16)
    assert "each head copied on 2 GPUs" in same and "stays the same" in same
    with pytest.raises(ValueError, match="query heads"):
        tp_kv_note(MODELS["qwen2.5-0.5b"], 1, 4)
    assert (kv_heads_per_gpu(m, 16), kv_head_replicas(m, 16), kv_head_replicas(m, 4)) == (1, 2, 1)
    # the grader puts it beside the hardware cost of a TP fix
    graded = grade(get_scenario("chat-oom"), [], {"tensor_parallel_size": 2})
    (cost,) = [c for c in graded.costs if "GPUs instead of" in c]
    assert "NCCL buffers on every GPU" in cost and "8 KV heads split 8 -> 4 per GPU" in cost


def test_the_calculator_charges_nccl_from_tp_2_unless_told_otherwise():
    one = serving_footprint("llama-3-8b", "h100-sxm", tensor_parallel=1)
    two = serving_footprint("llama-3-8b", "h100-sxm", tensor_parallel=2)
    assert one.overhead_bytes == NON_TORCH_BYTES and two.overhead_bytes == NON_TORCH_BYTES + NCCL_EXTRA_BYTES
    pinned = serving_footprint("llama-3-8b", "h100-sxm", tensor_parallel=2, overhead_bytes=NON_TORCH_BYTES)
    assert pinned.kv_budget_bytes - two.kv_budget_bytes == NCCL_EXTRA_BYTES


def test_the_section_prose_cites_its_sources():
    prose = content.load_section("tensor_parallel")
    assert "QKVParallelLinear" in prose.sections["Sources"] and "#10511" in prose.sections["Sources"]
    assert "TP 16" in prose.sections[content.INTRO]


def test_the_graders_tp_note_says_an_mla_latent_does_not_shrink_with_tp():
    note = tp_kv_note(MODELS["deepseek-v3"], 1, 8)
    assert "MLA" in note and "every GPU holds all of it" in note and "stays the same" in note
    with pytest.raises(ValueError, match="query heads"):
        tp_kv_note(MODELS["deepseek-v3"], 1, 3)  # 128 query heads: TP 3 is refused as for any model
