"""A slow, plainly written whole-sequence forward over a CausalLM's weights: the tests' reference.

No cache, no packing, no kernels, no in-place tricks: the textbook Llama block (Touvron et al., 2023) as
Hugging Face writes it - RMSNorm, rotate-half rotary embeddings, grouped-query attention with repeated K/V
heads and an explicit causal mask, SwiGLU. It reads the weights under Hugging Face's names
(`hf_state_dict`: q_proj, k_proj, ..., as a checkpoint stores them), so it does not share the serving path's
fused q/k/v and gate/up layout. The serving path (engine/model/llama.py) and the loader are checked against
it, and it is checked against transformers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.model.llama import CausalLM
from engine.model.loader import hf_state_dict


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / rms(x), the rms computed in fp32 and the result cast back (Llama's formula)."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference_logits(model: CausalLM, input_ids: torch.Tensor) -> torch.Tensor:
    """Whole sequences input_ids [B, T] -> logits [B, T, vocab], causal attention, no cache."""
    cfg = model.config
    B, T = input_ids.shape
    Hq, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    dtype = model.lm_head.weight.dtype
    freqs = torch.arange(T).float()[:, None] * model.inv_freq.float()[None, :]  # [T, D/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [T, D]
    cos, sin = angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]  # [T, 1, D]
    visible = torch.ones(T, T, dtype=torch.bool).tril()  # query i sees keys 0..i
    w = hf_state_dict(model)
    bias = cfg.qkv_bias

    def proj(x: torch.Tensor, name: str, has_bias: bool = False) -> torch.Tensor:
        return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"] if has_bias else None)

    with torch.no_grad():
        h = w["model.embed_tokens.weight"][input_ids]  # [B, T, hidden]
        for i, layer in enumerate(model.model.layers):
            pre = f"model.layers.{i}"
            x = rms_norm(h, layer.input_layernorm.weight, layer.input_layernorm.eps)
            q = proj(x, f"{pre}.self_attn.q_proj", bias).view(B, T, Hq, D)
            k = proj(x, f"{pre}.self_attn.k_proj", bias).view(B, T, Hkv, D)
            v = proj(x, f"{pre}.self_attn.v_proj", bias).view(B, T, Hkv, D)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(Hq // Hkv, dim=2)  # [B, T, Hq, D]: query head h reads KV head h // group
            v = v.repeat_interleave(Hq // Hkv, dim=2)
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * D**-0.5  # [B, Hq, T, T]
            probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            out = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(B, T, Hq * D)
            h = h + proj(out, f"{pre}.self_attn.o_proj", cfg.o_bias)
            x = rms_norm(h, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.eps)
            gate, up = proj(x, f"{pre}.mlp.gate_proj"), proj(x, f"{pre}.mlp.up_proj")
            h = h + proj(F.silu(gate) * up, f"{pre}.mlp.down_proj")
        h = rms_norm(h, model.model.norm.weight, model.model.norm.eps)
        return model.lm_head(h)  # [B, T, vocab]
