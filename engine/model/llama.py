"""Llama-family decoder (Llama 2/3, Mistral, Qwen2) that serves a packed, paged batch through kernels.ops.

Architecture as in Llama (Touvron et al., 2023, arXiv 2302.13971): pre-norm RMSNorm (Zhang & Sennrich, 2019),
rotary embeddings (engine/model/rope.py), grouped-query attention (Ainslie et al., 2023, arXiv 2305.13245)
and a SwiGLU MLP (Shazeer, 2020, arXiv 2002.05202). Module and parameter names equal Hugging Face's, so a
checkpoint's safetensors keys load one to one. Each module has one `forward`, the serving path; it reads
like gpt-fast's model.py.

`CausalLM.forward(input_ids [T], meta, kv_caches)` runs the T new tokens of S sequences packed in one batch
(no padding). Every layer writes its K/V into the paged cache (`kernels.ops.store_kv`), then attends with one
`kernels.ops.paged_varlen_attention` call over the whole step: each sequence's new tokens are the last queries
of its context, read through its block table (bottom-right causal, within the model's sliding window if it has
one), whether they are a prompt, a chunk on top of cached tokens or one decode token (engine/forward_meta.py).
An fp8 cache comes with per-layer scales (`kv_scales`): each layer sets its scales at its first write
(engine/core/kv_cache.py: calibrate_scale), store_kv quantizes and the attention kernel dequantizes. It
returns fp32 logits of each sequence's last new token. It runs under inference mode, so the residual stream is
updated in place; the first layer validates the step's metadata and cache layout through kernels.ops and the
later layers, which share both, pass `check=False`. Training (scripts/train_demo.py) builds its own whole-
sequence forward from these modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.kv_cache import calibrate_scale
from engine.forward_meta import ForwardMeta
from engine.model.config import ModelConfig
from engine.model.rope import apply_rope, rope_inv_freq, rope_tables
from kernels import ops
from kernels.paged_attention_torch import use_sparse

KVCaches = Sequence[tuple[torch.Tensor, torch.Tensor]]  # per layer: k_cache, v_cache [blocks, block_size, Hkv, D]
KVScales = Sequence[tuple[torch.Tensor, torch.Tensor]]  # per layer, fp8 caches only: k_scale, v_scale float32 [1]
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
        hidden, q_out, kv_out = config.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, q_out, bias=config.qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_out, bias=config.qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_out, bias=config.qkv_bias)
        self.o_proj = nn.Linear(q_out, hidden, bias=config.o_bias)

    def forward(
        self,
        x: torch.Tensor,
        rope: Rope,
        meta: ForwardMeta,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        check: bool = True,
        kv_scale: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Packed tokens x [T, hidden] -> [T, hidden]; stores this step's K/V into kv_cache, then attends.

        check=False: skip kernels.ops' input checks, for a layer whose step metadata and cache layout an
        earlier layer already passed through them. kv_scale: the layer's (k_scale, v_scale) of an fp8 cache.
        """
        # Functional calls on the weights: 7 projections per layer per step, and nn.Module's call machinery
        # (hooks, which the serving path does not support) costs about as much as one of these tiny matmuls.
        q = F.linear(x, self.q_proj.weight, self.q_proj.bias).unflatten(-1, (self.num_heads, self.head_dim))
        k = F.linear(x, self.k_proj.weight, self.k_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        v = F.linear(x, self.v_proj.weight, self.v_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # [T, Hq, D], [T, Hkv, D]
        k_cache, v_cache = kv_cache  # [num_blocks, block_size, Hkv, D]
        k_scale, v_scale = (None, None) if kv_scale is None else kv_scale
        if kv_scale is not None:  # fp8: fixed at the layer's first write, a no-op (on the device) afterwards
            calibrate_scale(k_scale, k)
            calibrate_scale(v_scale, v)
        ops.store_kv(
            k,
            v,
            k_cache,
            v_cache,
            meta.slot_mapping,
            backend=meta.backend,
            k_scale=k_scale,
            v_scale=v_scale,
            check=check,
        )
        index = None  # the torch backend's plan of the step: built once per step, shared by the layers
        if meta.backend == "torch":
            heads = (self.num_heads, self.num_kv_heads) if use_sparse(q, k_cache, v_cache) else None
            index = meta.varlen_index(k_cache.shape[1], heads, self.sliding_window, kv_scale is not None)
        out = ops.paged_varlen_attention(
            q,
            k_cache,
            v_cache,
            meta.cu_seqlens_q,
            meta.seq_lens,
            meta.block_tables,
            meta.max_seqlen_q,
            causal=True,
            scale=self.scale,
            sliding_window=self.sliding_window,
            backend=meta.backend,
            k_scale=k_scale,
            v_scale=v_scale,
            index=index,
            check=check,
        )  # [T, Hq, D]
        return F.linear(out.flatten(-2), self.o_proj.weight, self.o_proj.bias)  # [T, Hq * D] -> [T, hidden]


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]; functional calls on the weights, in place on its own temporaries."""
        gate = F.silu(F.linear(x, self.gate_proj.weight), inplace=True)
        return F.linear(gate.mul_(F.linear(x, self.up_proj.weight)), self.down_proj.weight)


class DecoderLayer(nn.Module):
    """Pre-norm transformer block: h += attn(norm(h)), then h += mlp(norm(h))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self,
        h: torch.Tensor,
        rope: Rope,
        meta: ForwardMeta,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        check: bool,
        kv_scale: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The residual stream h [T, hidden], updated in place (it is this step's own tensor) and returned."""
        # Row-chunking the row-wise ops to keep temporaries in cache measured slower here (extra copies and
        # calls outweighed the cache hits).
        h.add_(self.self_attn(self.input_layernorm(h), rope, meta, kv_cache, check, kv_scale))
        return h.add_(self.mlp(self.post_attention_layernorm(h)))


class DecoderStack(nn.Module):
    """Embedding, decoder layers and final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, rope: Rope, meta: ForwardMeta, kv_caches: KVCaches, kv_scales: KVScales | None
    ) -> torch.Tensor:
        """Packed ids [T] -> normed hidden states [S, hidden] of each sequence's last new token."""
        h = self.embed_tokens(input_ids)  # [T, hidden]
        # Layer 0 goes through kernels.ops' checks; the others share its metadata and, when every layer's
        # cache has the same layout, skip re-validating (a few device reads and tiny ops per layer).
        later_check = not _same_layout(kv_caches)
        scales = [None] * len(self.layers) if kv_scales is None else kv_scales
        for i, (layer, kv_cache, kv_scale) in enumerate(zip(self.layers, kv_caches, scales, strict=True)):
            h = layer(h, rope, meta, kv_cache, i == 0 or later_check, kv_scale)
        return self.norm(h[meta.last_token_indices])  # only the tokens whose next token gets sampled


def _same_layout(kv_caches: KVCaches) -> bool:
    """True when every layer's K and V cache has the first layer's K cache shape, dtype, device and strides."""
    ref = kv_caches[0][0]
    key = (ref.shape, ref.dtype, ref.device, ref.stride())
    return all((c.shape, c.dtype, c.device, c.stride()) == key for pair in kv_caches for c in pair)


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

    def forward(
        self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches, kv_scales: KVScales | None = None
    ) -> torch.Tensor:
        """Packed new tokens input_ids [T] -> fp32 logits [S, vocab] of each sequence's last new token.

        kv_scales: per-layer (k_scale, v_scale) when the caches are fp8 (engine/core/kv_cache.py), else None.
        """
        self.check_inputs(input_ids, meta, kv_caches)
        if kv_scales is not None and len(kv_scales) != len(kv_caches):
            raise ValueError(f"got {len(kv_scales)} layer scale pairs for {len(kv_caches)} layer caches")
        with torch.inference_mode():  # the serving path never needs autograd; the in-place residuals rely on it
            rope = rope_tables(meta.positions, self.inv_freq, self.model.embed_tokens.weight.dtype)  # [T, 1, D] each
            h = self.model(input_ids, rope, meta, kv_caches, kv_scales)  # [S, hidden]
            return F.linear(h, self.lm_head.weight).float()  # [S, vocab]

    def check_inputs(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches) -> None:
        """ValueErrors for ids that do not match the step, a wrong cache count or bad ids."""
        if input_ids.dim() != 1 or input_ids.shape[0] != meta.num_tokens:
            raise ValueError(
                f"input_ids must be 1-D with one id per new token ({meta.num_tokens}), got shape "
                f"{tuple(input_ids.shape)}"
            )
        if len(kv_caches) != len(self.model.layers):
            raise ValueError(f"got {len(kv_caches)} layer caches for {len(self.model.layers)} layers")
        vocab = self.config.vocab_size
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            raise ValueError(
                f"token ids must be in [0, {vocab}); got min {int(input_ids.min())}, max {int(input_ids.max())}"
            )
