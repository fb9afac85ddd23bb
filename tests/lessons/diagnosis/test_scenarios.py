"""Production-diagnosis incidents (lessons.diagnosis): each incident fails as deployed, its reference fix
resolves it (for several randomised variants), plausible wrong fixes do not, and the grade explains with numbers."""

import pytest

from lessons.diagnosis import (
    FIX_PARAMS,
    all_scenarios,
    apply_fixes,
    get_scenario,
    grade,
    run_outcome,
    scenario_ids,
    symptoms,
    vllm_command,
)

SEEDS = [None, 0, 1, 2]
# a tempting fix that must NOT resolve each incident, and the reason the grade must give
WRONG_FIXES = {
    "chat-oom": ({"max_num_seqs": 7}, "p95 wait"),  # no more OOM, but the queue explodes
    "mha-rag": ({"gpu_memory_utilization": 0.95}, "p95 wait"),
    "default-128k": ({"kv_cache_dtype": "fp8"}, "larger than the maximum number of tokens"),
    "util-neighbour": ({"gpu_memory_utilization": 0.95}, "less than desired GPU memory utilization"),
}
LOG_SIGNATURES = {
    "chat-oom": "CUDA out of memory",
    "mha-rag": "preempted by PreemptionMode.RECOMPUTE",
    "default-128k": "larger than the maximum number of tokens that can be stored in KV cache",
    "util-neighbour": "less than desired GPU memory utilization",
}


def test_there_are_at_least_three_incidents_with_right_and_wrong_diagnoses():
    ids = scenario_ids()
    assert len(ids) >= 3 and ids[0] == "chat-oom"
    for sc in all_scenarios():
        kinds = {d.correct for d in sc.diagnoses}
        assert kinds == {True, False}, sc.id
        assert sc.story and sc.hint


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("sid", ["chat-oom", "mha-rag", "default-128k", "util-neighbour"])
def test_do_nothing_fails_and_reference_fix_resolves(sid, seed):
    sc = get_scenario(sid, seed)
    nothing = grade(sc, [], {})
    assert not nothing.resolved and any(line.startswith("Still wrong") for line in nothing.explanation)
    fixed = grade(sc, [d.id for d in sc.diagnoses if d.correct], sc.reference_fix)
    assert fixed.resolved, fixed.explanation
    assert fixed.diagnosis_correct
    assert "Resolved" in fixed.explanation[-1]


@pytest.mark.parametrize("sid", list(WRONG_FIXES))
def test_plausible_wrong_fixes_do_not_resolve_and_say_why(sid):
    fixes, reason = WRONG_FIXES[sid]
    g = grade(get_scenario(sid), [], fixes)
    assert not g.resolved
    assert any(reason in line for line in g.explanation), g.explanation


def test_chat_oom_numbers():
    sc = get_scenario("chat-oom")
    before = run_outcome(sc)
    fp = before.footprint
    assert fp.weights_bytes < 0.7 * fp.capacity_bytes  # the weights fit...
    assert before.summary.num_oom > 0  # ...the service does not
    reserve = sc.config.context_len * fp.kv_bytes_per_token
    assert before.summary.peak_concurrency == fp.kv_budget_bytes // reserve  # 1 GiB per session
    after = run_outcome(sc, {"policy": "paged"})
    assert after.summary.peak_concurrency > 4 * before.summary.peak_concurrency
    assert after.summary.avg_waste < 0.04


def test_grade_explains_costs_with_numbers():
    g = grade(get_scenario("default-128k"), ["context-too-long"], {"max_model_len": 16384})
    assert g.resolved
    assert any("131072 to 16384" in c for c in g.costs)
    g = grade(get_scenario("mha-rag"), ["mha-kv"], {"model": "llama-3-8b"})
    assert any("512 -> 128 KiB/token" in c for c in g.costs)
    g = grade(get_scenario("util-neighbour"), ["utilization-share"], {"gpu_memory_utilization": 0.75})
    assert any("0.9 -> 0.75" in c and "GiB less" in c for c in g.costs), g.costs


def test_diagnosis_feedback():
    sc = get_scenario("chat-oom")
    g = grade(sc, ["weights-too-big"], sc.reference_fix)
    assert not g.diagnosis_correct and g.resolved  # a right fix with a wrong story
    assert g.diagnosis_feedback[0].startswith("Not this")
    assert any(f.startswith("Missed") for f in g.diagnosis_feedback)
    with pytest.raises(ValueError, match="unknown diagnosis"):
        grade(sc, ["gremlins"], {})


def test_bad_fixes_are_rejected_clearly():
    sc = get_scenario("chat-oom")
    with pytest.raises(ValueError, match="unknown fix"):
        apply_fixes(sc.config, {"batch_size": 4})
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        apply_fixes(sc.config, {"kv_cache_dtype": "int2"})
    with pytest.raises(ValueError, match="max_model_len"):
        apply_fixes(sc.config, {"max_model_len": 0})
    with pytest.raises(ValueError, match="tensor_parallel"):
        run_outcome(sc, {"tensor_parallel_size": 8, "model": "qwen2.5-7b"})  # 28 heads: not divisible by 8
    with pytest.raises(ValueError, match="unknown scenario"):
        get_scenario("disk-full")
    assert set(FIX_PARAMS) >= {"policy", "block_size", "model", "kv_cache_dtype", "max_model_len", "max_num_seqs",
                               "tensor_parallel_size", "gpu_memory_utilization"}  # fmt: skip


def test_vllm_command_renders_fixes():
    sc = get_scenario("default-128k")
    cmd = vllm_command(sc, {"max_model_len": 16384, "kv_cache_dtype": "fp8", "tensor_parallel_size": 2})
    assert cmd.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")
    for flag in ("--max-model-len 16384", "--kv-cache-dtype fp8", "--tensor-parallel-size 2", "--block-size 16"):
        assert flag in cmd
    assert "--max-model-len 131072" in vllm_command(sc, {})  # vLLM's default made explicit
    assert vllm_command(get_scenario("chat-oom")).startswith("# vLLM has no static-reservation mode")
    assert "mistralai/Mistral-7B-v0.1" in vllm_command(get_scenario("mha-rag"), {"model": "mistral-7b"})


@pytest.mark.parametrize("sid", list(LOG_SIGNATURES))
def test_symptoms_show_memory_logs_and_traffic(sid):
    sc = get_scenario(sid)
    sy = symptoms(sc)
    assert any(LOG_SIGNATURES[sid] in line for line in sy.logs), sy.logs
    capacity = run_outcome(sc).footprint.capacity_bytes
    assert sum(r["bytes"] for r in sy.memory) == pytest.approx(capacity, rel=1e-6)
    assert sy.traffic["requests"] == sc.traffic.num_requests


def test_variants_are_seeded():
    a, b = get_scenario("chat-oom", 5), get_scenario("chat-oom", 5)
    assert a == b
    rates = {get_scenario("mha-rag", s).traffic.request_rate for s in range(6)}
    assert len(rates) > 1  # a class does not share one answer


def test_tensor_parallel_fix_when_a_second_gpu_exists():
    sc = next(s for s in (get_scenario("default-128k", k) for k in range(20)) if s.max_gpus == 2)
    g = grade(sc, ["context-too-long"], {"tensor_parallel_size": 2})
    assert g.resolved and any("2 GPUs instead of 1" in c for c in g.costs)
    assert not grade(get_scenario("default-128k"), [], {"tensor_parallel_size": 2}).resolved  # only one GPU here
