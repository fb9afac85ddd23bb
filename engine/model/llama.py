"""Llama-family decoder (Llama 2/3, Mistral, Qwen2) that serves a packed, paged batch through kernels.ops.

Architecture as in Llama (Touvron et al., 2023, arXiv 2302.13971): pre-norm RMSNorm (Zhang & Sennrich, 2019),
rotary embeddings (engine/model/rope.py), grouped-query attention (Ainslie et al., 2023, arXiv 2305.13245)
and a SwiGLU MLP (Shazeer, 2020, arXiv 2002.05202). Module and parameter names equal Hugging Face's, so a
checkpoint's safetensors keys load one to one. Each module has one `forward`, the serving path; it reads
like gpt-fast's model.py.

`CausalLM.forward(input_ids [T], meta, kv_caches)` runs the T new tokens of S sequences packed in one batch
(no padding). Every layer writes its K/V into the paged cache (`kernels.ops.store_kv`), then attends with
`paged_attention` (decode rows: one new token over the cached context, read through the block table) or
`varlen_attention` (prompt rows, bottom-right causal, over the cached context gathered from the cache when
there is one); `meta` (engine/forward_meta.py) says which, once per step. It returns fp32 logits of each
sequence's last new token. It runs under inference mode, so the residual stream is updated in place; the
first layer validates the step's metadata and cache layout through kernels.ops and the later layers, which
share both, pass `check=False`. Training (scripts/train_demo.py) builds its own whole-sequence forward
from these modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.forward_meta import ForwardMeta
from engine.model.config import ModelConfig
from engine.model.rope import apply_rope, rope_inv_freq, rope_tables
from kernels import ops
from kernels.paged_attention_torch import use_sparse

KVCaches = Sequence[tuple[torch.Tensor, torch.Tensor]]  # per layer: k_cache, v_cache [blocks, block_size, Hkv, D]
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
    ) -> torch.Tensor:
        """Packed tokens x [T, hidden] -> [T, hidden]; stores this step's K/V into kv_cache, then attends.

        check=False: skip kernels.ops' input checks, for a layer whose step metadata and cache layout an
        earlier layer already passed through them.
        """
        # Functional calls on the weights: 7 projections per layer per step, and nn.Module's call machinery
        # (hooks, which the serving path does not support) costs about as much as one of these tiny matmuls.
        q = F.linear(x, self.q_proj.weight, self.q_proj.bias).unflatten(-1, (self.num_heads, self.head_dim))
        k = F.linear(x, self.k_proj.weight, self.k_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        v = F.linear(x, self.v_proj.weight, self.v_proj.bias).unflatten(-1, (self.num_kv_heads, self.head_dim))
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # [T, Hq, D], [T, Hkv, D]
        k_cache, v_cache = kv_cache  # [num_blocks, block_size, Hkv, D]
        ops.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, backend=meta.backend, check=check)
        out = attend(q, k, v, k_cache, v_cache, meta, self.scale, check)  # [T, Hq, D]
        return F.linear(out.flatten(-2), self.o_proj.weight, self.o_proj.bias)  # [T, Hq * D] -> [T, hidden]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: ForwardMeta,
    scale: float,
    check: bool = True,
) -> torch.Tensor:
    """Attention of the packed queries q [T, Hq, D] over their sequences' contexts -> [T, Hq, D].

    k, v [T, Hkv, D] are this step's new keys and values, already stored in k_cache / v_cache.
    """
    backend = meta.backend
    if not meta.is_prefill:
        # Decode: one query per sequence reads its whole context through the block table.
        index = None  # the torch backend's index: built once per step, shared by the layers
        if backend == "torch":
            heads = (q.shape[1], k_cache.shape[2]) if use_sparse(q, k_cache, v_cache) else None
            index = meta.paged_index(k_cache.shape[1], heads)
        return ops.paged_attention(
            q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale=scale, backend=backend, index=index,
            check=check,
        )  # fmt: skip
    if meta.mixed is not None:
        # Prefill + decode in one step: decode rows take the paged path (no gather of their contexts into a
        # varlen batch), prompt rows the varlen one; both read the cache this layer just wrote.
        part = meta.mixed
        out = q.new_empty(q.shape)  # [T, Hq, D]; every row is written below
        dec, rows = part.decode_rows, part.prompt_rows
        out[dec] = attend(q[dec], k[dec], v[dec], k_cache, v_cache, part.decode, scale, check)
        out[rows] = attend(q[rows], k[rows], v[rows], k_cache, v_cache, part.prompt, scale, check)
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
    return ops.varlen_attention(
        q, k, v, meta.cu_seqlens_q, cu_k, meta.max_seqlen_q, max_k, causal=True, scale=scale, backend=backend,
        check=check,
    )  # fmt: skip


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
        self, h: torch.Tensor, rope: Rope, meta: ForwardMeta, kv_cache: tuple[torch.Tensor, torch.Tensor], check: bool
    ) -> torch.Tensor:
        """The residual stream h [T, hidden], updated in place (it is this step's own tensor) and returned."""
        # Row-chunking the row-wise ops to keep temporaries in cache measured slower here (extra copies and
        # calls outweighed the cache hits).
        h.add_(self.self_attn(self.input_layernorm(h), rope, meta, kv_cache, check))
        return h.add_(self.mlp(self.post_attention_layernorm(h)))


class DecoderStack(nn.Module):
    """Embedding, decoder layers and final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, rope: Rope, meta: ForwardMeta, kv_caches: KVCaches) -> torch.Tensor:
        """Packed ids [T] -> normed hidden states [S, hidden] of each sequence's last new token."""
        h = self.embed_tokens(input_ids)  # [T, hidden]
        # Layer 0 goes through kernels.ops' checks; the others share its metadata and, when every layer's
        # cache has the same layout, skip re-validating (a few device reads and tiny ops per layer).
        later_check = not _same_layout(kv_caches)
        for i, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches, strict=True)):
            h = layer(h, rope, meta, kv_cache, i == 0 or later_check)
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

    def forward(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches) -> torch.Tensor:
        """Packed new tokens input_ids [T] -> fp32 logits [S, vocab] of each sequence's last new token."""
        self.check_inputs(input_ids, meta, kv_caches)
        with torch.inference_mode():  # the serving path never needs autograd; the in-place residuals rely on it
            rope = rope_tables(meta.positions, self.inv_freq, self.model.embed_tokens.weight.dtype)  # [T, 1, D] each
            h = self.model(input_ids, rope, meta, kv_caches)  # [S, hidden]
            return F.linear(h, self.lm_head.weight).float()  # [S, vocab]

    def check_inputs(self, input_ids: torch.Tensor, meta: ForwardMeta, kv_caches: KVCaches) -> None:
        """ValueErrors for ids that do not match the step, a wrong cache count, bad ids or a too-long context."""
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
        window = self.config.sliding_window
        if window is not None and meta.max_seqlen_k > window:
            raise ValueError(
                f"context of {meta.max_seqlen_k} tokens exceeds the sliding window of {window} tokens; this engine "
                f"does not implement sliding-window attention, so keep max_model_len <= {window}"
            )
