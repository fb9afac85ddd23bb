"""engine/model/llama.py against Hugging Face transformers on tiny random checkpoints (transformers is test-only).

Checks the serving path (one paged varlen attention call per layer for packed prefill, chunked prefill on top
of cached context, mixed prefill + decode and decode; Mistral far past its sliding window with the blocks
behind the window freed) through shuffled block tables, the tests' plain reference forward
(reference_llama.py) and the demo's training forward (scripts/train_demo.py), for Llama (GQA, untied, Llama-3
rope scaling), Qwen2 (q/k/v biases, tied) and Mistral (sliding window).
"""

from __future__ import annotations

import pytest
import torch

from engine.model.config import ModelConfig
from engine.model.forward_meta import ForwardMeta, LayerKV
from engine.model.llama import CausalLM, RMSNorm
from engine.model.loader import checkpoint_layout, hf_state_dict, load_model
from engine.model.rope import apply_rope, rope_inv_freq, rope_tables
from engine.outputs import is_decode
from scripts.train_demo import train_logits
from tests.conftest import requires_triton
from tests.engine.model.reference_llama import reference_logits, rms_norm, rotate_half

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=112,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    initializer_range=0.2,
    rms_norm_eps=1e-5,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": False}),
    "llama3": ("LlamaConfig", "LlamaForCausalLM", {"rope_scaling": LLAMA3_ROPE, "rope_theta": 500.0}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True, "num_key_value_heads": 1}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 48, "head_dim": 8}),
}


def save_tiny(path, arch: str):
    """Save a random tiny HF checkpoint (safetensors) to `path`; returns the HF model in eval mode."""
    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(1)
    hf = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**(TINY | extra))).eval()
    if arch == "qwen2":  # transformers zero-initialises biases; make them matter
        with torch.no_grad():
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(std=0.5)
    hf.save_pretrained(path)
    return hf


@pytest.fixture(scope="module", params=list(ARCHS))
def pair(request, tmp_path_factory):
    """(arch, HF model, our model loaded from the saved folder) per architecture."""
    path = tmp_path_factory.mktemp(request.param)
    hf = save_tiny(path, request.param)
    ours, _, _ = load_model(path)
    return request.param, hf, ours


def hf_last_logits(hf, seq: list[int]) -> torch.Tensor:
    """HF's logits for the token after `seq` (full recomputation, no cache)."""
    with torch.no_grad():
        return hf(torch.tensor([seq])).logits[0, -1].float()


def make_caches(model: CausalLM, num_blocks: int, block_size: int) -> list[LayerKV]:
    """Per-layer caches [num_blocks, block_size, Hkv, D], filled with NaN to catch stray reads."""
    c = model.config
    shape = (num_blocks, block_size, c.num_key_value_heads, c.head_dim)
    return [
        LayerKV(torch.full(shape, float("nan")), torch.full(shape, float("nan"))) for _ in range(c.num_hidden_layers)
    ]


def build_meta(model: CausalLM, q_lens, ctx_lens, tables, cache: LayerKV, backend: str = "torch") -> ForwardMeta:
    """A step's ForwardMeta for `model` over caches shaped like `cache`."""
    cfg = model.config
    return ForwardMeta.build(
        q_lens,
        ctx_lens,
        tables,
        cache,
        num_heads=cfg.num_attention_heads,
        q_dtype=model.lm_head.weight.dtype,
        sliding_window=cfg.sliding_window,
        backend=backend,
    )


class PagedRunner:
    """Drives the serving path by hand: shuffled block tables, one ForwardMeta per step."""

    def __init__(
        self, model: CausalLM, block_size: int, num_blocks: int = 64, seed: int = 0, backend: str = "torch"
    ) -> None:
        self.model, self.block_size, self.backend = model, block_size, backend
        self.caches = make_caches(model, num_blocks, block_size)
        self.free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.tables: dict[int, list[int]] = {}
        self.cached: dict[int, int] = {}

    def step(self, chunks: dict[int, list[int]]) -> torch.Tensor:
        """Run one step where sequence `sid` adds tokens `chunks[sid]`; returns logits [S, vocab]."""
        q_lens, ctx_lens, tables, ids = [], [], [], []
        for sid, toks in chunks.items():
            table, ctx = self.tables.setdefault(sid, []), self.cached.get(sid, 0)
            while len(table) * self.block_size < ctx + len(toks):
                table.append(self.free.pop())
            q_lens.append(len(toks))
            ctx_lens.append(ctx)
            tables.append(table)
            ids.extend(toks)
            self.cached[sid] = ctx + len(toks)
        meta = build_meta(self.model, q_lens, ctx_lens, tables, self.caches[0], self.backend)
        with torch.no_grad():
            return self.model(torch.tensor(ids), meta, self.caches)


def test_reference_and_training_forwards_match_transformers(pair):
    arch, hf, ours = pair
    ids = torch.randint(0, TINY["vocab_size"], (2, 40))
    with torch.no_grad():
        expected = hf(ids).logits
        torch.testing.assert_close(reference_logits(ours, ids), expected, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(train_logits(ours, ids), expected, atol=2e-5, rtol=1e-4)


def test_training_forward_has_gradients(pair):
    _, _, ours = pair
    ids = torch.randint(0, TINY["vocab_size"], (2, 12))
    train_logits(ours, ids).square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in ours.parameters())
    ours.zero_grad(set_to_none=True)


def test_serving_path_matches_the_reference_on_one_packed_prefill(pair):
    _, _, ours = pair
    prompts = {0: list(range(3, 30)), 1: [5, 9], 2: list(range(40, 51))}
    logits = PagedRunner(ours, block_size=4).step(prompts)
    for row, p in enumerate(prompts.values()):
        torch.testing.assert_close(logits[row], reference_logits(ours, torch.tensor([p]))[0, -1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("block_size", [4, 16])
def test_prefill_then_decode_matches_transformers(pair, block_size):
    arch, hf, ours = pair
    prompts = {0: list(range(3, 20)), 1: [5], 2: [7, 1, 9, 4, 4, 2, 8, 30, 31, 2, 2]}  # lengths 17, 1, 11
    runner = PagedRunner(ours, block_size)
    logits = runner.step(prompts)  # one packed prefill, no padding
    seqs = {sid: list(p) for sid, p in prompts.items()}
    for _ in range(4):  # greedy decode steps, one token per sequence
        for row, seq in enumerate(seqs.values()):
            torch.testing.assert_close(logits[row], hf_last_logits(hf, seq), atol=5e-5, rtol=1e-4)
            seq.append(int(logits[row].argmax()))
        logits = runner.step({sid: seq[-1:] for sid, seq in seqs.items()})
        assert logits.shape == (3, TINY["vocab_size"])


def test_chunked_prefill_and_mixed_batch_read_cached_context(pair):
    arch, hf, ours = pair
    a, b = list(range(10, 33)), [4, 8, 15, 16, 23, 42]
    runner = PagedRunner(ours, block_size=4, seed=3)
    runner.step({0: a[:9], 1: b})  # fresh prefill of both
    # Sequence 0's second chunk attends to its 9 cached tokens; sequence 1 decodes in the same step.
    logits = runner.step({0: a[9:20], 1: [5]})
    torch.testing.assert_close(logits[0], hf_last_logits(hf, a[:20]), atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(logits[1], hf_last_logits(hf, b + [5]), atol=5e-5, rtol=1e-4)
    logits = runner.step({0: a[20:], 2: [1, 2, 3]})  # a new request joins mid-stream
    torch.testing.assert_close(logits[0], hf_last_logits(hf, a), atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(logits[1], hf_last_logits(hf, [1, 2, 3]), atol=5e-5, rtol=1e-4)


def test_llama3_rope_scaling_changes_frequencies():
    # Llama 3.1 8B's published rope settings: head_dim 128, theta 500000, factor 8 over an 8192 context.
    rope = LLAMA3_ROPE | {"original_max_position_embeddings": 8192}
    cfg = ModelConfig.from_hf({"architectures": ["LlamaForCausalLM"], **TINY, "head_dim": 128, "rope_scaling": rope})
    scaled = rope_inv_freq(cfg.head_dim, 500000.0, cfg.rope_scaling)
    plain = rope_inv_freq(cfg.head_dim, 500000.0)
    assert torch.equal(scaled[:8], plain[:8])  # high frequencies (short wavelengths) kept as trained
    torch.testing.assert_close(scaled[-1], plain[-1] / 8.0)  # lowest frequency interpolated by `factor`
    wavelen = 2 * torch.pi / plain
    medium = (wavelen > 8192 / 4) & (wavelen < 8192 / 1)
    assert medium.any() and bool(((scaled[medium] < plain[medium]) & (scaled[medium] > plain[medium] / 8)).all())


def test_sliding_window_past_the_window_matches_transformers(tmp_path):
    """Mistral (window 48) far past its window: chunks, a mixed step and decodes; freed table entries are -1."""
    hf = save_tiny(tmp_path, "mistral")
    ours, _, _ = load_model(tmp_path)
    assert ours.config.sliding_window == 48 and ours.config.max_model_len == 128  # the window no longer caps it
    seq = torch.randint(0, TINY["vocab_size"], (100,), generator=torch.Generator().manual_seed(4)).tolist()
    runner = PagedRunner(ours, block_size=4)
    runner.step({0: seq[:30], 1: seq[:3]})
    logits = runner.step({0: seq[30:70], 1: seq[3:4]})  # a chunk past the window beside a decode
    torch.testing.assert_close(logits[0], hf_last_logits(hf, seq[:70]), atol=5e-5, rtol=1e-4)
    for n in range(70, 75):
        # Blocks wholly before every coming query's window: freed, as the block manager does (-1, NaN slots).
        table = runner.tables[0]
        for i in range(max(0, n - 48 + 1) // 4):
            if table[i] >= 0:
                for cache in runner.caches:
                    cache.k[table[i]].fill_(float("nan"))
                    cache.v[table[i]].fill_(float("nan"))
            table[i] = -1
        logits = runner.step({0: seq[n : n + 1], 1: seq[4 + n - 70 : 5 + n - 70]})
        torch.testing.assert_close(logits[0], hf_last_logits(hf, seq[: n + 1]), atol=5e-5, rtol=1e-4)
    assert runner.tables[0][:5] == [-1] * 5


def test_a_step_planned_for_another_cache_layout_is_refused(pair):
    """The plan is validated once, against layer 0's cache; a layer whose cache differs is a clear error."""
    _, _, ours = pair
    caches = make_caches(ours, 4, 4)
    meta = build_meta(ours, [2], [0], [[0]], caches[0])
    other = make_caches(ours, 8, 4)  # another pool size: the plan's block ids were checked for 4 blocks
    with pytest.raises(ValueError, match="plan"):
        ours(torch.tensor([1, 2]), meta, [caches[0], other[1]])
    with pytest.raises(ValueError, match="zip|length|argument"):  # one cache per layer
        ours(torch.tensor([1, 2]), meta, caches[:1])


def test_fused_projections_hold_the_checkpoint_rows_in_order(pair):
    """qkv_proj = [q; k; v] and gate_up_proj = [gate; up] row blocks of the checkpoint's own tensors."""
    arch, hf, ours = pair
    theirs = hf.state_dict()
    ours_hf = hf_state_dict(ours)
    assert set(ours_hf) == set(theirs) - ({"lm_head.weight"} if ours.config.tie_word_embeddings else set())
    for key, tensor in ours_hf.items():
        assert torch.equal(tensor, theirs[key]), key
    attn, mlp = ours.model.layers[0].self_attn, ours.model.layers[0].mlp
    q, k, v = (theirs[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    assert torch.equal(attn.qkv_proj.weight, torch.cat([q, k, v]))
    gate, up = (theirs[f"model.layers.0.mlp.{p}_proj.weight"] for p in ("gate", "up"))
    assert torch.equal(mlp.gate_up_proj.weight, torch.cat([gate, up]))
    name, rows = checkpoint_layout(ours)["model.layers.0.self_attn.v_proj.weight"]
    assert name == "model.layers.0.self_attn.qkv_proj.weight" and rows.stop == attn.q_size + 2 * attn.kv_size


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"num_key_value_heads": 3}, "multiple of"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"architectures": ["GPT2LMHeadModel"]}, "GPT2LMHeadModel"),
    ],
)
def test_unsupported_configs_are_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_hf({"architectures": ["LlamaForCausalLM"], **TINY} | bad)


@requires_triton
def test_triton_interpreter_path_matches_torch(tmp_path):
    save_tiny(tmp_path, "llama")
    model, _, _ = load_model(tmp_path)  # one set of weights: the backend is a per-step choice
    runs = [PagedRunner(model, block_size=4, num_blocks=8, backend=b) for b in ("torch", "triton")]
    for chunks in ({0: [1, 2, 3, 4, 5], 1: [9, 8]}, {0: [6], 1: [7]}, {0: [3, 3], 1: [2]}):
        expected, actual = (r.step(chunks) for r in runs)
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@requires_triton
def test_triton_interpreter_path_matches_torch_past_the_window(tmp_path):
    save_tiny(tmp_path, "mistral")  # window 48
    model, _, _ = load_model(tmp_path)
    runs = [PagedRunner(model, block_size=16, num_blocks=8, backend=b) for b in ("torch", "triton")]
    seq = list(range(1, 61))
    for chunks in ({0: seq[:40], 1: [9, 8]}, {0: seq[40:], 1: [7]}, {0: [6], 1: [5]}):
        expected, actual = (r.step(chunks) for r in runs)
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_forward_meta_build_fields(pair):
    _, _, ours = pair
    cache = make_caches(ours, 8, 4)[0]
    meta = build_meta(ours, [3, 1], [0, 5], [[2], [0, 7]], cache, backend="auto")
    plan = meta.attention
    # Slots from the block tables expanded to one slot per position (independent of build's loop).
    expanded = [torch.tensor(t).repeat_interleave(4) * 4 + torch.arange(4).repeat(len(t)) for t in ([2], [0, 7])]
    assert plan.slot_mapping.tolist() == expanded[0][:3].tolist() + expanded[1][5:6].tolist()
    assert meta.positions.tolist() == [0, 1, 2, 5]
    assert plan.cu_seqlens_q.tolist() == [0, 3, 4]
    assert plan.seq_lens.tolist() == [3, 6] and plan.max_seqlen_q == 3
    assert plan.block_tables.tolist() == [[2, 0], [0, 7]] and plan.block_tables.dtype == torch.int32
    assert meta.logits_indices.tolist() == [2, 3] and plan.backend == "torch"  # "auto" resolved on CPU
    # A mixed step is one batch: no split, no gathered context; freed (-1) table entries pass through.
    windowed = ForwardMeta.build(
        [1, 1], [3, 6], [[2], [-1, 7]], cache, num_heads=4, q_dtype=torch.float32, sliding_window=2
    )  # position 6 with a 2-token window reads keys 5..6: block 1 only, so entry 0 may be freed
    assert windowed.attention.block_tables.tolist() == [[2, 0], [-1, 7]]
    assert windowed.attention.slot_mapping.tolist() == [11, 30]
    assert windowed.num_seqs == 2 and windowed.num_tokens == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_tables_rotate_like_the_textbook_formula(dtype):
    """apply_rope with rope_tables' signed sin gives x * cos + rotate_half(x) * sin bit for bit."""
    inv_freq = rope_inv_freq(16, 10000.0)
    positions = torch.tensor([0, 3, 7, 100, 4095])
    x = torch.randn(5, 3, 16).to(dtype)  # [T, H, D]
    cos, signed_sin = rope_tables(positions, inv_freq, dtype)
    angles = positions.float()[:, None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    c, s = emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]
    assert torch.equal(apply_rope(x, cos, signed_sin), x * c + rotate_half(x) * s)


def test_one_prefill_or_decode_rule():
    # One new token on top of cached context decodes; a fresh 1-token prompt and any chunk are prefill.
    assert is_decode(1, 5) and not is_decode(1, 0) and not is_decode(2, 5)


@pytest.mark.parametrize(
    "args, match",
    [
        (([], [], []), "no sequences"),
        (([2], [0, 1], [[0]]), "one entry per sequence"),
        (([5], [0], [[0]]), "needs 5 tokens"),
        (([0], [0], [[0]]), "query_len=0"),
        (([1], [0], [[9]]), "block"),  # a block id the 4-block cache does not have: the plan refuses it
    ],
)
def test_forward_meta_build_errors(pair, args, match):
    _, _, ours = pair
    with pytest.raises(ValueError, match=match):
        build_meta(ours, *args, make_caches(ours, 4, 4)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [8, 64, 1000, 4096])
def test_rms_norm_is_bit_identical_to_the_formula(dtype, hidden):
    """RMSNorm (torch's fused op for fp32 on CPU, in-place temporaries otherwise) gives Llama's formula bit for bit."""
    torch.manual_seed(hidden)
    norm = RMSNorm(hidden, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(hidden))
    x = (torch.randn(33, hidden) * 3).to(dtype)
    with torch.inference_mode():
        assert torch.equal(norm(x), rms_norm(x, norm.weight, norm.eps))
