"""DeepSeek-V2/V3 folders (multi-head latent attention) through the engine equal transformers, token for token.

Tiny random DeepseekV3ForCausalLM checkpoints (every layer dense: first_k_dense_replace = num_hidden_layers) are
written with `save_pretrained` (safetensors), with and without `q_lora_rank`, and loaded by both sides; the
reference runs each prompt alone through transformers' `generate`. The engine runs them batched over its paged
latent cache, at block sizes 4 and 16, with prompts and outputs longer than a block, through both attention
paths (fresh prompts expanded, or every step absorbed into MQA over the latent), and on the Triton backend
under the interpreter. What each test catches:
- W_UK / W_UV split or transposed wrongly, the rope key not shared, interleaved rope read as halves, the
  softmax scale taken from the latent width instead of qk_head_dim: the greedy comparisons;
- a YaRN mscale missing from the softmax scale or from cos / sin: the logits comparison of the yarn model;
- a cache that keeps more than the latent and the rope key per token, or a pool sized by K/V-head formula:
  the byte and pool-size checks, computed from the config's numbers here;
- a mixture-of-experts layer run as a dense one: the refusal that names the MoE layers.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from engine.llm import LLM  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402
from tests.conftest import requires_triton  # noqa: E402

VOCAB = 256
MAX_TOKENS = 20  # past a block of 16
LAYERS, RANK, ROPE = 2, 32, 8
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "mscale": 1.0,
    "mscale_all_dim": 0.7,
    "beta_fast": 32,
    "beta_slow": 1,
}


def tiny_config(arch: str = "v3", q_lora_rank: int | None = None, dense: int = LAYERS, **extra):
    """A tiny MLA config: 4 heads, latent 32 + rope 8, no-rope 16, values 16."""
    cls = transformers.DeepseekV3Config if arch == "v3" else transformers.DeepseekV2Config
    return cls(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=RANK,
        qk_nope_head_dim=16,
        qk_rope_head_dim=ROPE,
        v_head_dim=16,
        first_k_dense_replace=dense,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        initializer_range=0.1,  # well separated logits: no argmax near-ties
        **extra,
    )


def save(config, folder):
    """Random weights of `config` written as a Hugging Face folder; returns the model (eval, no eos)."""
    torch.manual_seed(0)
    cls = (
        transformers.DeepseekV3ForCausalLM if config.model_type == "deepseek_v3" else transformers.DeepseekV2ForCausalLM
    )
    model = cls(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    model.generation_config.eos_token_id = None  # run to max_new_tokens, as ignore_eos does
    return model


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in (1, 7, 21, 40)]


def references(model, ps, max_tokens=MAX_TOKENS) -> list[list[int]]:
    with torch.no_grad():
        return [
            model.generate(torch.tensor([p]), max_new_tokens=max_tokens, do_sample=False)[0, len(p) :].tolist()
            for p in ps
        ]


def greedy(n: int = MAX_TOKENS) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module", params=[None, 24], ids=["q_proj", "q_lora"])
def checkpoint(request, tmp_path_factory):
    """(folder, prompts, transformers' greedy continuations) with and without q_lora_rank."""
    folder = tmp_path_factory.mktemp("deepseek")
    model = save(tiny_config(q_lora_rank=request.param), folder)
    ps = prompts()
    return folder, ps, references(model, ps)


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("expand_prefill", [True, False], ids=["expanded", "absorbed"])
def test_greedy_matches_transformers(checkpoint, block_size, expand_prefill):
    folder, ps, refs = checkpoint
    llm = LLM(str(folder), device="cpu", block_size=block_size, num_gpu_blocks=512 // block_size)
    llm.model.expand_prefill = expand_prefill
    outs = llm.generate(ps, greedy())
    assert [o.token_ids for o in outs] == refs
    assert llm.block_manager.num_free_blocks == llm.num_gpu_blocks


def test_chunks_prefix_hits_and_preemption_match_transformers(checkpoint):
    """A pool too small for the batch: prompts are chunked, hit the prefix cache, get preempted and recomputed,
    so steps mix fresh prompts, chunks over cached latents and decodes (the absorbed path)."""
    folder, ps, refs = checkpoint
    llm = LLM(
        str(folder),
        device="cpu",
        block_size=4,
        num_gpu_blocks=24,
        max_num_batched_tokens=16,
        enable_prefix_caching=True,
    )
    traces = []
    outs = llm.generate(ps, greedy(), on_step=traces.append)
    assert [o.token_ids for o in outs] == refs
    assert any(t.preempted for t in traces), "the workload was meant to preempt"


@requires_triton
def test_triton_backend_matches_transformers(tmp_path):
    """The Triton kernels (interpreted on CPU) at a tiny size: latent store, absorbed decode, expanded prefill."""
    model = save(tiny_config(q_lora_rank=24), tmp_path)
    ps = [p[:9] for p in prompts()[1:3]]
    refs = references(model, ps, max_tokens=6)
    for expand in (True, False):
        llm = LLM(str(tmp_path), device="cpu", backend="triton", block_size=4, num_gpu_blocks=16)
        llm.model.expand_prefill = expand
        assert [o.token_ids for o in llm.generate(ps, greedy(6))] == refs


def test_yarn_logits_and_greedy_match_transformers(tmp_path):
    model = save(tiny_config(rope_parameters=dict(YARN)), tmp_path)
    ps = prompts()[2:]
    llm = LLM(str(tmp_path), device="cpu", block_size=4, num_gpu_blocks=128)
    assert [o.token_ids for o in llm.generate(ps, greedy(8))] == references(model, ps, 8)
    # The logits of a prompt's last token, engine against transformers: a missing mscale shifts them all.
    runner, p = llm.runner, ps[1]
    ids, meta = runner.inputs(p, [len(p)], [0], [list(range(-(-len(p) // 4)))])
    with torch.no_grad():
        want = model(torch.tensor([p])).logits[0, -1]
    torch.testing.assert_close(runner.forward(ids, meta)[0], want, atol=1e-4, rtol=1e-4)


def test_deepseek_v2_folder_matches_transformers(tmp_path):
    model = save(tiny_config("v2", q_lora_rank=24), tmp_path)
    ps = prompts()[1:3]
    llm = LLM(str(tmp_path), device="cpu", block_size=4, num_gpu_blocks=32)
    assert [o.token_ids for o in llm.generate(ps, greedy(8))] == references(model, ps, 8)


def test_latent_cache_bytes_and_pool_from_a_byte_budget(checkpoint):
    folder = checkpoint[0]
    cfg = json.loads((folder / "config.json").read_text())
    per_token = cfg["num_hidden_layers"] * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 4  # fp32
    budget = 100_000
    llm = LLM(str(folder), device="cpu", block_size=16, dtype="float32", kv_cache_memory_bytes=budget)
    assert llm.kv_cache.bytes_per_slot == llm.kv_bytes_per_token == per_token == LAYERS * (RANK + ROPE) * 4
    assert llm.num_gpu_blocks == budget // per_token // 16  # whole blocks of the budget's tokens
    assert llm.kv_cache_bytes == llm.num_gpu_blocks * 16 * per_token
    assert llm.kv_cache.rows.numel() * 4 == llm.kv_cache_bytes  # nothing allocated beside the latent rows


def test_fp8_latent_cache_is_refused_by_name(checkpoint):
    with pytest.raises(ValueError, match="kv_cache_dtype='fp8' is not supported for DeepseekV3ForCausalLM"):
        LLM(str(checkpoint[0]), device="cpu", kv_cache_dtype="fp8", num_gpu_blocks=8)


@pytest.mark.parametrize(
    ("arch", "dense", "named"), [("v3", 1, "layers 1 (1 of 2)"), ("v2", 0, "layers 0, 1 (2 of 2)")]
)
def test_moe_layers_are_refused_by_name(tmp_path, arch, dense, named):
    save(tiny_config(arch, dense=dense, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1), tmp_path)
    with pytest.raises(ValueError, match=re.escape(f"{named} are mixture-of-experts layers")):
        LLM(str(tmp_path), device="cpu", num_gpu_blocks=8)


def test_a_latent_wider_than_the_kernels_is_refused_at_load(tmp_path):
    """DeepSeek's real 512 + 64 row passes no kernel head-dim check: refused from config.json, before any weight."""
    cfg = tiny_config().to_dict() | {
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "architectures": ["DeepseekV3ForCausalLM"],
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=re.escape("512 + 64 = 576 is wider than the 256 values per cache row")):
        LLM(str(tmp_path), device="cpu", num_gpu_blocks=8)
