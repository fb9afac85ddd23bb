"""Llama-family decoder (Llama 2/3, Mistral, Qwen2) that serves a packed, paged batch through kernels.ops.

Architecture as in Llama (Touvron et al., 2023, arXiv 2302.13971): pre-norm RMSNorm (Zhang & Sennrich, 2019),
rotary embeddings (engine/model/rope.py), grouped-query attention (Ainslie et al., 2023, arXiv 2305.13245)
and a SwiGLU MLP (Shazeer, 2020, arXiv 2002.05202). Each module has one `forward`, the serving path; it reads
like gpt-fast's and nano-vllm's model files. As there, the projections that read the same input are one
matmul: q/k/v are one `qkv_proj` and gate/up one `gate_up_proj`, fused when the checkpoint loads
(engine/model/loader.py maps Hugging Face's q_proj/k_proj/v_proj and gate_proj/up_proj onto their rows).

`CausalLM.forward(input_ids [T], meta, kv_caches)` runs the T new tokens of S sequences packed in one batch
(no padding). Every layer writes its K/V into its paged cache (`kernels.ops.store_kv`), then attends with one
`kernels.ops.paged_varlen_attention` call over the whole step (engine/model/forward_meta.py). Both calls take
the step's attention plan (a hybrid model's layers each take their KV-cache group's plan, with its block
tables and sliding window), which kernels.ops built and validated once for the step: the model knows no
backend. A layer's cache travels with its fp8 scales (`LayerKV`); store_kv sets them at the layer's first
write. It returns fp32 logits of each sequence's last new token and runs under inference mode, so the
residual stream is updated in place. Training (scripts/train_demo.py) builds its own whole-sequence forward
from these modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.config import ModelConfig
from engine.model.forward_meta import ForwardMeta, LayerKV
from engine.model.rope import apply_rope, rope_inv_freq, rope_tables
from kernels import ops
from kernels.plan import AttentionPlan

Rope = tuple[torch.Tensor, torch.Tensor]  # one step's `rope_tables`: cos, signed sin [T, 1, D]


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale, computed in fp32 as Llama does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., dim] -> weight * (x / rms(x)); in-place ops touch only this call's own temporaries."""
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32 and x.device.type == "cpu":
            # On CPU torch's fused RMSNorm gives the formula below bit for bit in fp32, in one op call.
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        scaled = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True).add_(self.eps))
        return scaled.to(x.dtype).mul_(self.weight)


class Attention(nn.Module):
    """Grouped-query self-attention over the paged cache: Hq query heads share Hkv K/V heads."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        self.sliding_window = config.sliding_window
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        hidden = config.hidden_size
        self.qkv_proj = nn.Linear(hidden, self.q_size + 2 * self.kv_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, hidden, bias=config.o_bias)

    def forward(self, x: torch.Tensor, rope: Rope, plan: AttentionPlan, cache: LayerKV) -> torch.Tensor:
        """Packed tokens x [T, hidden] -> [T, hidden]; stores this step's K/V into the cache, then attends."""
        # Functional calls on the weights: nn.Module's call machinery (hooks, which the serving path does not
        # support) costs about as much as one of these tiny matmuls on CPU.
        qkv = F.linear(x, self.qkv_proj.weight, self.qkv_proj.bias)
        qk, v = qkv.split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        # q and k sit side by side in each row: one rotation over their Hq + Hkv heads (elementwise, so the
        # same values as rotating each alone), half the op calls per layer.
        qk = apply_rope(qk.unflatten(-1, (self.num_heads + self.num_kv_heads, self.head_dim)), *rope)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)  # [T, Hq, D], [T, Hkv, D]
        v = v.unflatten(-1, (self.num_kv_heads, self.head_dim))
        ops.store_kv_planned(k, v, cache, plan)
        out = ops.paged_varlen_attention_planned(q, cache, plan, scale=self.scale)  # [T, Hq, D]
        return F.linear(out.flatten(-2), self.o_proj.weight, self.o_proj.bias)  # [T, Hq * D] -> [T, hidden]


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)), gate and up as one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]; functional calls on the weights, in place on its own temporaries."""
        gate, up = F.linear(x, self.gate_up_proj.weight).chunk(2, dim=-1)
        return F.linear(F.silu(gate).mul_(up), self.down_proj.weight)


class DecoderLayer(nn.Module):
    """Pre-norm transformer block: h += attn(norm(h)), then h += mlp(norm(h))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, h: torch.Tensor, rope: Rope, plan: AttentionPlan, cache: LayerKV) -> torch.Tensor:
        """The residual stream h [T, hidden], updated in place (it is this step's own tensor) and returned.

        Submodules are run by their `forward`: the serving path supports no hooks, and nn.Module's call
        machinery costs a few microseconds per call, 26 calls a step at this model's 4 layers."""
        h.add_(self.self_attn.forward(self.input_layernorm.forward(h), rope, plan, cache))
        return h.add_(self.mlp.forward(self.post_attention_layernorm.forward(h)))


class DecoderStack(nn.Module):
    """Embedding, decoder layers and final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, rope: Rope, meta: ForwardMeta, kv_caches: Sequence[LayerKV]
    ) -> torch.Tensor:
        """Packed ids [T] -> normed hidden states [S, hidden] of each sequence's last new token."""
        h = F.embedding(input_ids, self.embed_tokens.weight)  # [T, hidden]
        plans = meta.plans(len(self.layers))  # one plan for all layers, or a hybrid model's per layer
        for layer, plan, cache in zip(self.layers, plans, kv_caches, strict=True):
            h = layer.forward(h, rope, plan, cache)  # by `forward`, as in DecoderLayer
        return self.norm.forward(h[meta.logits_indices])  # only the tokens whose next token gets sampled


class CausalLM(nn.Module):
    """A Llama-family causal language model; parameter names match Hugging Face's *ForCausalLM."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [D/2], derived from the config

    def forward(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: Sequence[LayerKV]) -> torch.Tensor:
        """Packed new tokens input_ids [T] -> fp32 logits [S, vocab] of each sequence's last new token.

        The caller (engine/worker/runner.py) validated the step once: ids within the vocabulary, one per new
        token, one cache per layer, and the attention plan against the caches' layout."""
        with torch.inference_mode():  # the serving path never needs autograd; the in-place residuals rely on it
            rope = rope_tables(meta.positions, self.inv_freq, self.model.embed_tokens.weight.dtype)  # [T, 1, D] each
            h = self.model.forward(input_ids, rope, meta, kv_caches)  # [S, hidden]
            return F.linear(h, self.lm_head.weight).float()  # [S, vocab]
