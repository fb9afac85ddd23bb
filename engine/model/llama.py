"""Llama-family decoder (Llama 2/3, Mistral, Qwen2) that serves a packed, paged batch through kernels.ops.

Architecture as in Llama (Touvron et al., 2023, arXiv 2302.13971): pre-norm RMSNorm (Zhang & Sennrich, 2019),
rotary embeddings (engine/rope.py), grouped-query attention (Ainslie et al., 2023, arXiv 2305.13245) and
a SwiGLU MLP (Shazeer, 2020, arXiv 2002.05202). Module and parameter names equal Hugging Face's, so a
checkpoint's safetensors keys load one to one.

Two forward paths share the weights:
- `forward(input_ids [T], meta, kv_caches)`: the serving path. The T new tokens of S sequences are packed in
  one batch (no padding); each layer writes its K/V into the paged cache (`store_kv`), then attends with
  `varlen_attention` (prefill, bottom-right causal, optionally over cached context gathered from the cache)
  or `paged_attention` (decode); a step mixing both runs its decode rows through `paged_attention` and only
  its prompt rows through `varlen_attention`. See engine/forward_meta.py. Returns logits of each sequence's
  last token. Runs under inference mode; per-step values (rotary tables, the decode gather index) are built
  once and shared by the layers, and on the torch backend only the first layer goes through kernels.ops'
  validation: the metadata and the cache layout it checked are the same for every layer.
- `forward_full(input_ids [B, T])`: plain causal attention with no cache, for training and as a reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.forward_meta import ForwardMeta
from engine.model.config import ModelConfig
from engine.model.rope import apply_rope, rope_cos_sin, rope_inv_freq
from kernels import ops
from kernels.backend import resolve_backend
from kernels.kv_store import store_kv_torch
from kernels.ops import varlen_attention_torch
from kernels.paged_attention_torch import paged_attention_torch

KVCaches = Sequence[tuple[torch.Tensor, torch.Tensor]]  # per layer: k_cache, v_cache [blocks, block_size, Hkv, D]


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale, computed in fp32 as Llama does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def serve(self, x: torch.Tensor) -> torch.Tensor:
        """forward() for inference: the same arithmetic in fewer ops (no autograd)."""
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32 and x.device.type == "cpu":
            # On CPU torch's fused RMSNorm gives forward()'s fp32 results bit for bit, in one op call.
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        scaled = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True).add_(self.eps))
        return scaled.to(x.dtype).mul_(self.weight)


class Attention(nn.Module):
    """Grouped-query self-attention: Hq query heads share Hkv K/V heads."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        hidden, q_out, kv_out = config.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, q_out, bias=config.qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_out, bias=config.qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_out, bias=config.qkv_bias)
        self.o_proj = nn.Linear(q_out, hidden, bias=config.o_bias)

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [..., T, hidden] -> q [..., T, Hq, D], k and v [..., T, Hkv, D], rotary applied to q and k."""
        q = self.q_proj(x).unflatten(-1, (self.num_heads, self.head_dim))  # [..., T, Hq, D]
        k = self.k_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))  # [..., T, Hkv, D]
        v = self.v_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))  # [..., T, Hkv, D]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: ForwardMeta,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        backend: str,
        direct: bool = False,
    ) -> torch.Tensor:
        """Packed tokens x [T, hidden] -> [T, hidden]; stores this step's K/V into kv_cache first.

        cos, sin: this step's rotary tables from `rope_tables` ([T, 1, D], sin with the rotate-half sign folded in).

        direct: call the torch kernels without kernels.ops' checks, for a layer whose step metadata and cache
        layout an earlier layer already passed through kernels.ops (they are the same for every layer).
        """
        q, k, v = self.project(x, cos, sin)
        out = self.attend(q, k, v, meta, kv_cache, backend, direct)
        return F.linear(out.flatten(-2), self.o_proj.weight, self.o_proj.bias)  # [T, Hq * D] -> [T, hidden]

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows x [T, hidden] -> q [T, Hq, D], k [T, Hkv, D] (rotary applied, `rope_tables` form), v [T, Hkv, D]."""
        # Functional calls on the weights: this runs 7 projections per layer per step, and nn.Module's call
        # machinery (hooks, which the serving path does not support) costs about as much as a tiny matmul.
        q = F.linear(x, self.q_proj.weight, self.q_proj.bias).unflatten(-1, (self.num_heads, self.head_dim))
        k = F.linear(x, self.k_proj.weight, self.k_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        v = F.linear(x, self.v_proj.weight, self.v_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        meta: ForwardMeta,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        backend: str,
        direct: bool = False,
    ) -> torch.Tensor:
        """Store this step's k/v [T, Hkv, D] into kv_cache, then attend: q [T, Hq, D] -> [T, Hq, D]."""
        k_cache, v_cache = kv_cache  # [num_blocks, block_size, Hkv, D]
        if direct:
            store_kv_torch(k, v, k_cache, v_cache, meta.slot_mapping)
        else:
            ops.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, backend=backend)
        return self._attend(q, k, v, k_cache, v_cache, meta, backend, direct)

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: ForwardMeta,
        backend: str,
        direct: bool,
    ) -> torch.Tensor:
        """Attention of the packed queries q [T, Hq, D] over their sequences' contexts -> [T, Hq, D]."""
        if not meta.is_prefill:
            # Decode: one query per sequence reads its whole context through the block table.
            if direct:
                index = meta.paged_index(k_cache.shape[1])  # built by the first layer, shared by the rest
                return paged_attention_torch(
                    q, k_cache, v_cache, meta.block_tables, meta.seq_lens, self.scale, index=index
                )
            index = meta.paged_index(k_cache.shape[1]) if backend == "torch" else None
            return ops.paged_attention(
                q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale=self.scale, backend=backend, index=index
            )
        if meta.mixed is not None:
            # Prefill + decode in one step: decode rows take the paged path (no gather of their contexts
            # into a varlen batch), prompt rows the varlen one; both read the cache this layer just wrote.
            part = meta.mixed
            out = q.new_empty(q.shape)  # [T, Hq, D]; every row is written below
            dec, rows = part.decode_rows, part.prompt_rows
            out[dec] = self._attend(q[dec], k[dec], v[dec], k_cache, v_cache, part.decode, backend, direct)
            out[rows] = self._attend(q[rows], k[rows], v[rows], k_cache, v_cache, part.prompt, backend, direct)
            return out
        if meta.has_context:
            # Prefill on top of cached tokens: gather each sequence's full context (cached + new) from the cache.
            slots = meta.context_slot_mapping
            k = k_cache.flatten(0, 1).index_select(0, slots)  # [sum(seq_lens), Hkv, D]
            v = v_cache.flatten(0, 1).index_select(0, slots)  # [sum(seq_lens), Hkv, D]
            cu_k, max_k = meta.cu_seqlens_k, meta.max_seqlen_k
        else:
            # Fresh prompts: the new K/V are the whole context, no need to read the cache back.
            cu_k, max_k = meta.cu_seqlens_q, meta.max_seqlen_q
        if direct:
            starts_q, starts_k = meta.offsets()
            return varlen_attention_torch(
                q, k, v, starts_q, starts_k if meta.has_context else starts_q, causal=True, scale=self.scale
            )
        return ops.varlen_attention(
            q, k, v, meta.cu_seqlens_q, cu_k, meta.max_seqlen_q, max_k, causal=True, scale=self.scale, backend=backend
        )

    def forward_full(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Causal attention over whole sequences, no cache: x [B, T, hidden] -> [B, T, hidden]."""
        q, k, v = self._qkv(x, cos, sin)  # [B, T, Hq, D], [B, T, Hkv, D], [B, T, Hkv, D]
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=2)  # [B, T, Hq, D]: query head h reads KV head h // group
        v = v.repeat_interleave(group, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=self.scale
        )  # [B, Hq, T, D]
        return self.o_proj(out.transpose(1, 2).flatten(-2))  # [B, T, Hq * D] -> [B, T, hidden]


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def serve(self, x: torch.Tensor) -> torch.Tensor:
        """forward() for inference: functional calls on the weights, in place on its own temporaries."""
        gate = F.silu(F.linear(x, self.gate_proj.weight), inplace=True)
        return F.linear(gate.mul_(F.linear(x, self.up_proj.weight)), self.down_proj.weight)


class DecoderLayer(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)


class DecoderStack(nn.Module):
    """Embedding, decoder layers and final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step rotary tables cos, sin [T, D] -> [T, 1, D] each, with rotate-half's sign folded into sin.

    rotate_half(x) * sin = [-x2, x1] * [s1, s2] = [x2, x1] * [-s1, s2]: negation is exact, so `_rotate`
    matches engine/rope.py's apply_rope bit for bit while each layer skips a negation and a concatenation.
    """
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)  # [T, D]
    return cos.unsqueeze(-2), signed.unsqueeze(-2)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [T, H, D] with `rope_tables` output: x * cos + swap_halves(x) * signed_sin."""
    swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flip(-2).flatten(-2)  # [x2, x1], a new tensor
    return (x * cos).add_(swapped.mul_(signed_sin))


def _same_layout(kv_caches: KVCaches) -> bool:
    """True when every layer's K and V cache has the first layer's K cache shape, dtype, device and strides."""
    ref = kv_caches[0][0]
    key = (ref.shape, ref.dtype, ref.device, ref.stride())
    return all((c.shape, c.dtype, c.device, c.stride()) == key for pair in kv_caches for c in pair)


class CausalLM(nn.Module):
    """A Llama-family causal language model; parameter names match Hugging Face's *ForCausalLM."""

    def __init__(self, config: ModelConfig, backend: str = "auto") -> None:
        super().__init__()
        self.config = config
        self.backend = backend
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [D/2], derived from the config

    def _check_ids(self, input_ids: torch.Tensor) -> None:
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}); got min {int(input_ids.min())}, "
                f"max {int(input_ids.max())}"
            )

    def _check_window(self, context_len: int) -> None:
        window = self.config.sliding_window
        if window is not None and context_len > window:
            raise ValueError(
                f"context of {context_len} tokens exceeds the sliding window of {window} tokens; this engine does "
                f"not implement sliding-window attention, so keep max_model_len <= {window}"
            )

    def forward(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches) -> torch.Tensor:
        """Packed new tokens input_ids [T] -> fp32 logits [S, vocab] of each sequence's last new token."""
        if input_ids.dim() != 1 or input_ids.shape[0] != meta.num_tokens:
            raise ValueError(
                f"input_ids must be 1-D with one id per new token ({meta.num_tokens}), got shape "
                f"{tuple(input_ids.shape)}"
            )
        if len(kv_caches) != len(self.model.layers):
            raise ValueError(f"got {len(kv_caches)} layer caches for {len(self.model.layers)} layers")
        self._check_ids(input_ids)
        self._check_window(meta.max_seqlen_k)
        with torch.inference_mode():  # the serving path never needs autograd; in-place updates below rely on it
            return self._serve(input_ids, meta, kv_caches)

    def _serve(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches) -> torch.Tensor:
        """forward()'s body under inference mode."""
        h = self.model.embed_tokens(input_ids)  # [T, hidden]
        cos, sin = rope_tables(*rope_cos_sin(meta.positions, self.inv_freq, h.dtype))  # [T, 1, D] each
        backend = resolve_backend(self.backend, h.device)
        # Layer 0 goes through kernels.ops, which validates this step's metadata and its cache; the other
        # layers share both, so on the torch backend they skip re-validating (a few syncs and tiny ops each).
        direct = backend == "torch" and _same_layout(kv_caches)
        for i, (layer, kv_cache) in enumerate(zip(self.model.layers, kv_caches, strict=True)):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm.serve(h), cos, sin)
            out = attn.attend(q, k, v, meta, kv_cache, backend, direct and i > 0).flatten(-2)  # [T, Hq * D]
            # Residual adds in place (h is this step's own tensor); row-chunking the row-wise ops to keep
            # temporaries in cache measured slower here (extra copies and calls outweighed the cache hits).
            h.add_(F.linear(out, attn.o_proj.weight, attn.o_proj.bias))
            h.add_(layer.mlp.serve(layer.post_attention_layernorm.serve(h)))
        last = h[meta.last_token_indices]  # [S, hidden]: only the tokens whose next token gets sampled
        return F.linear(self.model.norm.serve(last), self.lm_head.weight).float()  # [S, vocab]

    def forward_full(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Whole sequences input_ids [B, T] -> logits [B, T, vocab] (no cache; training and reference path)."""
        if input_ids.dim() != 2:
            raise ValueError(f"forward_full expects input_ids [B, T], got shape {tuple(input_ids.shape)}")
        self._check_ids(input_ids)
        self._check_window(input_ids.shape[1])
        h = self.model.embed_tokens(input_ids)  # [B, T, hidden]
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.inv_freq, h.dtype)  # [T, D], broadcast over B
        for layer in self.model.layers:
            h = h + layer.self_attn.forward_full(layer.input_layernorm(h), cos, sin)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.lm_head(self.model.norm(h))  # [B, T, vocab]
