"""DeepSeek-V2 / V3 decoder with multi-head latent attention over a paged latent cache (dense MLP layers).

MLA (DeepSeek-V2, arXiv 2405.04434, §2.1; numbers in engine/model/mla_config.py). Each layer writes one row per
token into its paged cache: the latent c = kv_a_layernorm(kv_a_proj_with_mqa(x)[:kv_lora_rank]) followed by
the rotated rope key, `kv_lora_rank + qk_rope_head_dim` wide. Nothing else is kept: the per-head keys and
values are kv_b_proj's expansions of c, recomputed or absorbed.

Two attention paths, as vLLM's MLA backends run them (vllm/model_executor/layers/attention/mla_attention.py):
- absorbed (every step that reads cached tokens: decode, chunks, prefix hits): kv_b_proj's key half W_UK
  [H, nope, rank] is folded into the query, q_nope @ W_UK lands in latent space, and attention is MQA of H query
  heads over ONE cached row per token, score = q_lat . c + q_pe . k_pe, through the project's one paged kernel
  (kernels.ops.paged_varlen_attention with V = the first kv_lora_rank columns of the same rows). The output
  latent is expanded by the value half W_UV [H, v_head_dim, rank] afterwards;
- expanded (a step of fresh prompts only, nothing cached before them): K and V expanded per head from this
  step's latents, then varlen attention over the packed prompts (V zero-padded to the key width, as vLLM pads
  it for flash-attn, and cut back after). Cheaper in FLOPs for long prompts; the same values as absorbed.
`DeepseekCausalLM.expand_prefill = False` runs every step absorbed (the tests compare both with transformers).

The MLP, norms, embedding and head are the Llama modules' (engine/model/llama.py); DeepSeek's dense MLP is the
same SwiGLU. Parameter names match transformers' DeepseekV2/V3ForCausalLM, so engine/model/loader.py loads a
folder unchanged. Mixture-of-experts layers are refused by the config (engine/model/mla_config.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.config import ModelConfig
from engine.model.forward_meta import ForwardMeta, LayerKV
from engine.model.llama import MLP, RMSNorm
from engine.model.mla_rope import deinterleave, mla_attention_factor, mla_inv_freq
from engine.model.rope import apply_rope, rope_tables
from kernels import ops
from kernels.plan import AttentionPlan

Rope = tuple[torch.Tensor, torch.Tensor]  # one step's cos, signed sin [T, 1, qk_rope_head_dim]


def fresh_prompts_only(plan: AttentionPlan) -> bool:
    """Whether every sequence of the step computes all of its tokens now (nothing was cached before them)."""
    starts, lens = plan.starts_q, plan.lens
    return all(starts[i + 1] - starts[i] == n for i, n in enumerate(lens))


class MLAttention(nn.Module):
    """Multi-head latent attention over a paged latent cache: one [kv_lora_rank + rope] row per token."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        mla = config.mla
        assert mla is not None  # built by DeepseekCausalLM, for an MLA config only
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.rank, self.nope, self.rope_dim, self.v_dim = (
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim,
        )
        self.qk_dim = mla.qk_head_dim
        self.interleave = mla.rope_interleave
        self.scale = mla.softmax_scale
        self.q_lora = mla.q_lora_rank is not None
        if not self.q_lora:
            self.q_proj = nn.Linear(hidden, self.num_heads * self.qk_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, mla.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, 1e-6)  # transformers' DeepseekV3RMSNorm default eps
            self.q_b_proj = nn.Linear(mla.q_lora_rank, self.num_heads * self.qk_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, 1e-6)
        self.kv_b_proj = nn.Linear(self.rank, self.num_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, hidden, bias=False)

    def _rotate(self, x: torch.Tensor, rope: Rope) -> torch.Tensor:
        """The rope columns x [T, heads, rope_dim] rotated (interleaved pairs gathered into halves first)."""
        return apply_rope(deinterleave(x) if self.interleave else x, *rope)

    def forward(
        self, x: torch.Tensor, rope: Rope, plan: AttentionPlan, cache: LayerKV, expand_prefill: bool = True
    ) -> torch.Tensor:
        """Packed tokens x [T, hidden] -> [T, hidden]; stores this step's latent rows, then attends."""
        if not self.q_lora:
            q = F.linear(x, self.q_proj.weight)
        else:
            q = F.linear(self.q_a_layernorm.forward(F.linear(x, self.q_a_proj.weight)), self.q_b_proj.weight)
        q_nope, q_pe = q.unflatten(-1, (self.num_heads, self.qk_dim)).split([self.nope, self.rope_dim], dim=-1)
        latent, k_pe = F.linear(x, self.kv_a_proj_with_mqa.weight).split([self.rank, self.rope_dim], dim=-1)
        latent = self.kv_a_layernorm.forward(latent)  # [T, rank]
        q_pe = self._rotate(q_pe, rope)  # [T, H, rope]
        k_pe = self._rotate(k_pe[:, None], rope)  # [T, 1, rope]: one rope key shared by every head
        row = torch.cat((latent[:, None], k_pe), dim=-1)  # [T, 1, rank + rope]: the whole cache row
        ops.store_kv_planned(row, row[..., : self.rank], cache, plan)  # V is a view of the row's latent
        w_kv = self.kv_b_proj.weight.view(self.num_heads, self.nope + self.v_dim, self.rank)  # [H, nope + v, rank]
        w_uk, w_uv = w_kv.split([self.nope, self.v_dim], dim=1)  # [H, nope, rank], [H, v, rank]
        if expand_prefill and fresh_prompts_only(plan):
            out = self._expanded(q_nope, q_pe, latent, k_pe, plan)  # [T, H, v]
        else:
            q_lat = torch.einsum("thn,hnr->thr", q_nope, w_uk)  # [T, H, rank]: W_UK absorbed into the query
            q_row = torch.cat((q_lat, q_pe), dim=-1)  # [T, H, rank + rope], read against the cache rows
            out_lat = ops.paged_varlen_attention_planned(q_row, cache, plan, scale=self.scale)  # [T, H, rank]
            out = torch.einsum("thr,hvr->thv", out_lat, w_uv)  # [T, H, v]: W_UV applied after attention
        return F.linear(out.flatten(-2), self.o_proj.weight)  # [T, H * v] -> [T, hidden]

    def _expanded(
        self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor, plan: AttentionPlan
    ) -> torch.Tensor:
        """Fresh prompts: per-head K and V from this step's latents, varlen attention -> [T, H, v_head_dim]."""
        kv = F.linear(latent, self.kv_b_proj.weight).unflatten(-1, (self.num_heads, self.nope + self.v_dim))
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)  # [T, H, nope], [T, H, v]
        q = torch.cat((q_nope, q_pe), dim=-1)  # [T, H, qk]
        k = torch.cat((k_nope, k_pe.expand(-1, self.num_heads, -1)), dim=-1)  # [T, H, qk]
        width = max(self.qk_dim, self.v_dim)  # varlen attention takes one head dim: zero columns change nothing
        q, k, v = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k, v))
        cu, longest = plan.cu_seqlens_q, plan.max_seqlen_q
        out = ops.varlen_attention(
            q, k, v, cu, cu, longest, longest, causal=True, scale=self.scale, backend=plan.backend, check=False
        )
        return out[..., : self.v_dim]


class DeepseekDecoderLayer(nn.Module):
    """Pre-norm block: h += mla(norm(h)), then h += mlp(norm(h)) (dense SwiGLU)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = MLAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self, h: torch.Tensor, rope: Rope, plan: AttentionPlan, cache: LayerKV, expand_prefill: bool
    ) -> torch.Tensor:
        """The residual stream h [T, hidden], updated in place and returned."""
        h.add_(self.self_attn.forward(self.input_layernorm.forward(h), rope, plan, cache, expand_prefill))
        return h.add_(self.mlp.forward(self.post_attention_layernorm.forward(h)))


class DeepseekStack(nn.Module):
    """Embedding, decoder layers and final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DeepseekDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class DeepseekCausalLM(nn.Module):
    """A DeepSeek-V2/V3 causal LM with dense MLP layers; parameter names match transformers'."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.mla is None:
            raise ValueError(f"{config.architecture} has no latent attention config; load it with llama.CausalLM")
        self.config = config
        self.model = DeepseekStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", self.rope_inv_freq(), persistent=False)  # [rope / 2]
        self.attention_factor = mla_attention_factor(config.rope_scaling)  # YaRN's cos / sin factor (1 without)
        self.expand_prefill = True  # fresh-prompt steps expand K/V; False: every step absorbed

    def rope_inv_freq(self) -> torch.Tensor:
        """fp32 inverse frequencies of the rope key, from the config (the loader rebuilds the buffer with it)."""
        cfg = self.config
        return mla_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)

    def forward(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: Sequence[LayerKV]) -> torch.Tensor:
        """Packed new tokens input_ids [T] -> fp32 logits [S, vocab] of each sequence's last new token."""
        with torch.inference_mode():
            dtype = self.model.embed_tokens.weight.dtype
            cos, sin = rope_tables(meta.positions, self.inv_freq, torch.float32)  # [T, 1, rope] each
            rope = ((cos * self.attention_factor).to(dtype), (sin * self.attention_factor).to(dtype))
            h = F.embedding(input_ids, self.model.embed_tokens.weight)  # [T, hidden]
            plan = meta.attention
            for layer, cache in zip(self.model.layers, kv_caches, strict=True):
                h = layer.forward(h, rope, plan, cache, self.expand_prefill)
            h = self.model.norm.forward(h[meta.logits_indices])  # [S, hidden]
            return F.linear(h, self.lm_head.weight).float()  # [S, vocab]
