"""Block-diagonal attention biases with xformers' names (`xformers.ops.fmha.attn_bias`).

Packing (lesson 3) puts unrelated requests into one [1, total, ...] tensor with no padding; a block-diagonal
bias says which queries may see which keys: sequence i's queries see only sequence i's keys, optionally
causally. These classes only describe that structure (offsets as `cu_seqlens`-style `seqstart`); the
attention itself runs in kernels.ops.varlen_attention, which never materializes the [total, total] mask.
`materialize` exists for lessons (the heatmap) and tests.

Alignment of the causal variants, as in xformers:
- BlockDiagonalCausalMask: top-left per block, query i sees key j iff j <= i;
- BlockDiagonalCausalFromBottomRightMask: bottom-right per block, j <= i + len_k - len_q (queries appended
  to a cached prefix see the whole prefix).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from kernels.reference import causal_mask
from kernels.validate import is_whole


def _check_lengths(name: str, seqlens: Sequence[int]) -> list[int]:
    if isinstance(seqlens, torch.Tensor):
        seqlens = seqlens.tolist()
    seqlens = list(seqlens)
    if not seqlens:
        raise ValueError(f"{name} is empty; give one length per sequence")
    for i, n in enumerate(seqlens):
        if not is_whole(n):
            raise ValueError(f"{name}[{i}] = {n!r} is not an int; lengths must be non-negative ints")
        if n < 0:
            raise ValueError(f"{name}[{i}] = {n} is negative; lengths must be >= 0")
    if sum(seqlens) >= 2**31:
        raise ValueError(f"{name} adds up to {sum(seqlens):,} tokens; offsets are int32, so keep the total below 2**31")
    return seqlens


@dataclass(frozen=True)
class SeqLenInfo:
    """Offsets of packed sequences: seqstart int32 [B + 1] (like cu_seqlens), its list twin, max/min length."""

    seqstart: torch.Tensor
    seqstart_py: list[int]
    max_seqlen: int
    min_seqlen: int

    @classmethod
    def from_seqlens(cls, seqlens: Sequence[int], device: torch.device | str | None = None) -> SeqLenInfo:
        """Offsets for sequences of the given lengths."""
        seqlens = _check_lengths("seqlens", seqlens)
        starts = [0]
        for n in seqlens:
            starts.append(starts[-1] + n)
        seqstart = torch.tensor(starts, dtype=torch.int32, device=device or "cpu")
        return cls(seqstart=seqstart, seqstart_py=starts, max_seqlen=max(seqlens), min_seqlen=min(seqlens))

    @property
    def seqlens(self) -> list[int]:
        """Length of each sequence."""
        return [b - a for a, b in self.intervals()]

    def intervals(self) -> Iterator[tuple[int, int]]:
        """(start, end) of each sequence in the packed dimension."""
        return zip(self.seqstart_py[:-1], self.seqstart_py[1:], strict=True)

    def split(self, x: torch.Tensor, batch_sizes: Sequence[int] | None = None) -> list[torch.Tensor]:
        """[1, total, ...] -> one [1, len_i, ...] view per sequence (or [B_j, len, ...] per batch group)."""
        total = self.seqstart_py[-1]
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[0] != 1 or x.shape[1] != total:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"can only split a [1, {total}, ...] tensor (B == 1, packed total {total}); got {shape}")
        if batch_sizes is None:
            return [x[:, a:b] for a, b in self.intervals()]
        out, seq = [], 0
        lengths = self.seqlens
        for size in batch_sizes:
            group = lengths[seq : seq + size]
            start = self.seqstart_py[seq]
            # [1, size * len, ...] -> [size, len, ...]
            out.append(x[0, start : start + sum(group)].reshape(size, group[0], *x.shape[2:]))
            seq += size
        return out


_SeqLenInfo = SeqLenInfo  # xformers' private name, for code written against it


@dataclass(frozen=True)
class BlockDiagonalMask:
    """Sequence i's queries attend to all of sequence i's keys and nothing else."""

    q_seqinfo: SeqLenInfo
    k_seqinfo: SeqLenInfo
    _batch_sizes: tuple[int, ...] | None = field(default=None)
    CAUSAL: ClassVar[str | None] = None  # None, "top_left" or "bottom_right" (see module docstring)

    def __post_init__(self) -> None:
        nq, nk = len(self.q_seqinfo.seqstart_py) - 1, len(self.k_seqinfo.seqstart_py) - 1
        if nq != nk:
            raise ValueError(f"{nq} query sequences but {nk} key sequences; give one key length per query length")

    @classmethod
    def from_seqlens(
        cls,
        q_seqlen: Sequence[int],
        kv_seqlen: Sequence[int] | None = None,
        device: torch.device | str | None = None,
    ) -> BlockDiagonalMask:
        """Bias for packed sequences with these query lengths (and key lengths, default: the same)."""
        q_seqlen = _check_lengths("q_seqlen", q_seqlen)
        kv = q_seqlen if kv_seqlen is None else _check_lengths("kv_seqlen", kv_seqlen)
        if len(kv) != len(q_seqlen):
            raise ValueError(
                f"q_seqlen has {len(q_seqlen)} sequences but kv_seqlen has {len(kv)}; give one key length per sequence"
            )
        q_info = SeqLenInfo.from_seqlens(q_seqlen, device)
        k_info = q_info if kv_seqlen is None else SeqLenInfo.from_seqlens(kv, device)
        return cls(q_seqinfo=q_info, k_seqinfo=k_info)

    @classmethod
    def from_tensor_list(cls, tensors: Sequence[torch.Tensor]) -> tuple[BlockDiagonalMask, torch.Tensor]:
        """Pack [B_i, T_i, ...] tensors into one [1, sum B_i * T_i, ...] tensor plus the bias that separates them."""
        if len(tensors) == 0:
            raise ValueError("from_tensor_list got no tensors; pass at least one [B, T, ...] tensor")
        tail = tuple(tensors[0].shape[2:])
        seqlens, batch_sizes = [], []
        for i, t in enumerate(tensors):
            if t.dim() < 2 or tuple(t.shape[2:]) != tail:
                raise ValueError(
                    f"tensor {i} has shape {tuple(t.shape)}; every tensor must be [B, T, *{list(tail)}] like tensor 0"
                )
            seqlens += [t.shape[1]] * t.shape[0]
            batch_sizes.append(t.shape[0])
        bias = cls.from_seqlens(seqlens, device=tensors[0].device)
        packed = torch.cat([t.reshape(1, -1, *tail) for t in tensors], dim=1)  # [1, sum B_i * T_i, ...]
        return cls(bias.q_seqinfo, bias.k_seqinfo, tuple(batch_sizes)), packed

    def split_queries(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Split a packed query-side tensor [1, total_q, ...] back into its sequences (or input tensors)."""
        return self.q_seqinfo.split(x, self._batch_sizes)

    def split_kv(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Split a packed key-side tensor [1, total_k, ...] back into its sequences (or input tensors)."""
        return self.k_seqinfo.split(x, self._batch_sizes)

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Same as split_queries: attention outputs live on the query side."""
        return self.split_queries(x)

    def _block(self, len_q: int, len_k: int, device: torch.device | str) -> torch.Tensor:
        """Boolean [len_q, len_k] visibility inside one block."""
        if self.CAUSAL is None:
            return torch.ones(len_q, len_k, dtype=torch.bool, device=device)
        return causal_mask(len_q, len_k, self.CAUSAL, device=device)

    def materialize(
        self, shape: Sequence[int], dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        """Additive bias of `shape` (last dims [total_q, total_k]): 0 where visible, -inf where masked."""
        shape = tuple(shape)
        total_q, total_k = self.q_seqinfo.seqstart_py[-1], self.k_seqinfo.seqstart_py[-1]
        if len(shape) < 2 or shape[-2:] != (total_q, total_k):
            raise ValueError(f"materialize shape {shape} must end with [total_q, total_k] = [{total_q}, {total_k}]")
        mask = torch.full((total_q, total_k), -math.inf, dtype=dtype, device=device)
        for (q0, q1), (k0, k1) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals(), strict=True):
            mask[q0:q1, k0:k1].masked_fill_(self._block(q1 - q0, k1 - k0, device), 0.0)
        return mask.expand(shape)  # a broadcast view, like xformers

    def make_causal(self) -> BlockDiagonalCausalMask:
        """The same blocks, causal with top-left alignment."""
        return BlockDiagonalCausalMask(self.q_seqinfo, self.k_seqinfo, self._batch_sizes)

    def make_causal_from_bottomright(self) -> BlockDiagonalCausalFromBottomRightMask:
        """The same blocks, causal with bottom-right alignment."""
        return BlockDiagonalCausalFromBottomRightMask(self.q_seqinfo, self.k_seqinfo, self._batch_sizes)


@dataclass(frozen=True)
class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Block-diagonal and causal inside each block, top-left aligned: query i sees key j iff j <= i."""

    CAUSAL: ClassVar[str | None] = "top_left"


@dataclass(frozen=True)
class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Block-diagonal and causal inside each block, bottom-right aligned: j <= i + len_k - len_q."""

    CAUSAL: ClassVar[str | None] = "bottom_right"


BLOCK_DIAGONAL_BIASES = (BlockDiagonalMask, BlockDiagonalCausalMask, BlockDiagonalCausalFromBottomRightMask)
