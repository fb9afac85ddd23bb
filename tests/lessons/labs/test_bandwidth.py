"""lessons/labs/bandwidth.py: which batches fit, the plateau's cause, MBU and the page's claims (no timing asserts)."""

import pytest
import torch

from engine.memory import measure
from engine.memory.catalog import MODELS, GiB
from engine.memory.footprint import serving_footprint
from lessons.labs import bandwidth as lab


def test_fit_boundary_is_vllms_kv_budget_at_the_context():
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    fp = serving_footprint("llama-3-8b", "h100-sxm", max_model_len=4096, gpu_memory_utilization=0.9)
    per_seq = 4096 * 128 * 1024  # Llama-3-8B: 128 KiB of KV per token (8 KV heads x 128 x 32 layers x 2 x 2 B)
    assert fit.kv_bytes_per_token == 128 * 1024 and fit.kv_bytes(1) == per_seq
    assert fit.max_batch == fp.num_blocks // (4096 // 16)  # whole 16-token blocks per sequence
    assert fit.kv_bytes(fit.max_batch) <= fit.kv_budget_bytes < fit.kv_bytes(fit.max_batch + 1)
    assert fit.fits(fit.max_batch) and not fit.fits(fit.max_batch + 1)
    assert fit.kv_bytes(256) == 128 * GiB and not fit.fits(256)  # the 256 x 4096 x 128 KiB = 128 GiB
    assert f"at most **{fit.max_batch:,}**" in fit.why(256) and "does not fit" in fit.why(256)
    assert "and fits" in fit.why(1)


def test_weights_that_leave_no_room_fit_no_batch():
    fit = lab.batch_fit("llama-2-70b", "a100-40gb", 4096)  # 140 GB of bf16 weights on a 40 GB card
    assert fit.max_batch == 0 and not fit.fits(1) and "Not even one" in fit.why(1)
    assert lab.batch_fit("llama-2-70b", "a100-40gb", 4096, "int4").weights_bytes == fit.weights_bytes // 4


def test_sweep_marks_each_batch_and_adds_the_largest_that_fits():
    rows = lab.batch_sweep("llama-3-8b", "h100-sxm", 4096)
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    assert [r["batch"] for r in rows] == sorted({*lab.SWEEP_BATCHES, fit.max_batch})
    for r in rows:
        assert (r["fits in memory"] == "yes") == (r["KV GiB"] * GiB <= fit.kv_budget_bytes)
        assert r["KV GiB"] == pytest.approx(r["batch"] * 4096 * 128 * 1024 / GiB)
        # attention's intensity is the group size (32 query / 8 KV heads) at every batch; the total's grows
        assert r["attention FLOP per byte"] == pytest.approx(4.0, rel=0.01)
    shares = [r["KV share of bytes %"] for r in rows]
    assert shares == sorted(shares) and shares[-1] > 80  # KV reads take over the step: the plateau
    assert [r["FLOP per byte"] for r in rows] == sorted(r["FLOP per byte"] for r in rows)


def test_mbu_is_achieved_bytes_over_the_machines_best():
    machine = [{"GB_per_s": 20.0}, {"GB_per_s": 2.0}]
    assert lab.model_bandwidth_utilization({"GB_per_s": 5.0}, machine) == 0.25
    with pytest.raises(ValueError, match="no machine bandwidth"):
        lab.model_bandwidth_utilization({"GB_per_s": 5.0}, [])


def test_decode_step_bytes_are_weights_plus_the_kv_it_reads():
    # token k (2..n) attends over prompt + k - 1 tokens: for prompt 16 and n = 8, a mean of 20 tokens
    assert measure.decode_kv_read_bytes(4096, 16, 8) == 4096 * 20
    with pytest.raises(ValueError, match="new_tokens"):
        measure.decode_kv_read_bytes(4096, 16, 1)

    class FakeLLM:
        kv_bytes_per_token = 1000

        def __init__(self) -> None:
            self.model = torch.nn.Linear(8, 4)  # 36 fp32 parameters

        def generate(self, prompts, params):
            return []

    m = measure.measure_llm_decode(FakeLLM(), prompt_len=4, new_tokens=6, repeats=1)
    assert m.bytes_moved == 36 * 4 + 1000 * (4 + 3)


def test_claims_check_the_fit_marks_and_report_mbu(monkeypatch):
    machine = measure.Measurement("gemv", "s", "float32", "cpu", 1, bytes_moved=40e9, flops=1.0, seconds=2.0, repeats=1)
    demo = measure.Measurement("demo", "s", "float32", "cpu", 1, bytes_moved=1e9, flops=1.0, seconds=0.5, repeats=1)
    monkeypatch.setattr(lab, "measure_machine", lambda: [machine])
    monkeypatch.setattr(lab, "measure_demo_decode", lambda: demo)
    entry = lab.claims()["bandwidth"]
    fit = lab.batch_fit("llama-3-8b", "h100-sxm", 4096)
    assert entry["holds"] is True and entry["mbu"] == 0.1 and entry["max_batch"] == fit.max_batch
    assert entry["sweep"][256] == "no" and entry["sweep"][1] == "yes" and entry["shown_fitting_beyond_capacity"] == []
    assert entry["attention_FLOP_per_byte"] == [4.0]

    def missing():
        raise FileNotFoundError("models/demo")

    monkeypatch.setattr(lab, "measure_demo_decode", missing)
    assert lab.claims()["bandwidth"]["holds"] is False


def test_defaults_are_a_real_catalog_setting():
    d = lab.DEFAULTS
    assert d["model"] in MODELS and d["context"] <= MODELS[d["model"]].max_context and d["batch"] <= lab.MAX_BATCH
