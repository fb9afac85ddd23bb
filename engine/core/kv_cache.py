"""Paged KV-cache memory: the K/V tensors every layer writes, and the kernel metadata that indexes them.

PagedAttention (Kwon et al., SOSP 2023): every layer owns K and V tensors
`[num_blocks, block_size, num_kv_heads, head_dim]`; token p of a sequence lives at slot
`block_table[p // block_size] * block_size + p % block_size` (`slots_of`), where the block table comes from
`engine.core.block_manager.BlockManager`. Its size in bytes is `engine.memory.footprint.kv_bytes`, the
formula the memory lessons teach, so the cache the engine allocates is the cache the course computes.

fp8 KV cache (vLLM's `kv_cache_dtype="fp8"`): K and V are stored as `torch.float8_e4m3fn`, one byte per
element, with one float32 scale per layer for K and one for V (`.scales [L, 2, 1]`, `.kv_scales`). A scale
is computed at the layer's first write, on the device and without a host sync (`calibrate_scale`), and
then stays fixed: scale = amax(first K or V written) * FP8_HEADROOM / 448, so values up to FP8_HEADROOM
times the first write's largest fit the e4m3 range (larger ones saturate at +-448 * scale). Fixed scales keep
every stored token decodable with the scale it was written with; e4m3's relative step (2^-3) is the same
across its whole normal range, so the headroom costs no precision for typical values. `kernels.ops.store_kv`
quantizes with it and the attention kernel dequantizes.

Public API:
    slots_of(block_table, start, stop, block_size) -> list[int]    cache slots of positions start..stop-1
    KV_CACHE_DTYPES; kv_cache_dtype(name, model_dtype) -> torch.dtype;  calibrate_scale(scale, x)
    available_memory(device) -> (bytes | None, source);  check_kv_memory(num_blocks, bytes_per_block, device)
    PagedKVCache(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype=float32, device="cpu")
        (refuses, before allocating, a cache bigger than the device's available memory: a ValueError naming
        the blocks, their bytes, the memory and the fix; an allocator error during the allocation becomes one)
        .kv  [L, 2, num_blocks, block_size, Hkv, D];  .kv_caches  list of (k_cache, v_cache) per layer
        .kv_scales  list of (k_scale, v_scale) per layer for an fp8 cache, else None
        .k_cache(layer), .v_cache(layer), .copy_blocks([(src, dst), ...]), .bytes_per_slot, .nbytes
    build_slot_mapping(seqs, num_new_tokens, device="cpu", dtype=int64) -> [sum(num_new_tokens)]
    build_block_tables(seqs, device="cpu", max_num_blocks=None, pad_value=0) -> int32 [S, max_blocks]
    build_seq_lens(seqs, num_new_tokens=None, device="cpu") -> int32 [S]
"""

from __future__ import annotations

import os
from collections.abc import Sequence as Seq
from pathlib import Path

import torch

from engine.core.sequence import Sequence, check_block_size
from engine.memory.footprint import kv_bytes

__all__ = [
    "FP8_HEADROOM",
    "KV_CACHE_DTYPES",
    "PagedKVCache",
    "build_block_tables",
    "build_seq_lens",
    "build_slot_mapping",
    "calibrate_scale",
    "kv_cache_dtype",
    "slots_of",
]

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")  # vLLM's names: "auto" = the model's dtype; fp8 = e4m3
FP8_DTYPE = torch.float8_e4m3fn
FP8_HEADROOM = 4.0  # the first write's amax maps to 448 / 4: later values up to 4x larger still fit


def kv_cache_dtype(name: object, model_dtype: torch.dtype) -> torch.dtype:
    """The cache's element type for vLLM's `kv_cache_dtype` name; a ValueError lists the accepted names."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype={name!r} is not supported; use one of {', '.join(map(repr, KV_CACHE_DTYPES))} "
            "('auto' keeps the model's dtype, 'fp8' stores K/V as float8 e4m3 with per-layer scales)"
        )
    return model_dtype if name == "auto" else FP8_DTYPE


def calibrate_scale(scale: torch.Tensor, x: torch.Tensor) -> None:
    """Set an unset (zero) 1-element fp8 scale from x: amax(x) * FP8_HEADROOM / 448 (1.0 if x is all zero).

    A set scale is left alone. Runs on the device with no host sync, so the engine calls it on every write.
    """
    fresh = x.detach().abs().amax().float().reshape(1) * (FP8_HEADROOM / torch.finfo(FP8_DTYPE).max)
    fresh = torch.where(fresh > 0, fresh, torch.ones_like(fresh))
    scale.copy_(torch.where(scale > 0, scale, fresh))


# Linux's own accounting of memory a new allocation can take without swapping, and a cgroup v2 limit (a
# container's): kernel interfaces, the same on every Linux machine.
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) -> None


def _cpu_available() -> tuple[int | None, str]:
    """Bytes of RAM a new allocation can take now: MemAvailable (capped by a cgroup's limit), else all RAM."""
    available, source = None, ""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available, source = int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
                break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            source = "physical RAM"
        except (ValueError, OSError, AttributeError):  # not POSIX (Windows): no check
            return None, "unknown"
    limit, used = _read_int(CGROUP / "memory.max"), _read_int(CGROUP / "memory.current")
    if limit is not None and used is not None and limit - used < available:
        available, source = max(0, limit - used), "the container's cgroup memory.max minus memory.current"
    return available, source


def available_memory(device: torch.device | str) -> tuple[int | None, str]:
    """(bytes a new allocation on `device` can take now, where that number comes from); None if unknown.

    CUDA: the device's free memory (`torch.cuda.mem_get_info`); CPU: Linux's MemAvailable, capped by a
    cgroup v2 limit, else the physical RAM (`os.sysconf`)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {device} (torch.cuda.mem_get_info)"
    if device.type == "cpu":
        return _cpu_available()
    return None, "unknown"


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_kv_memory(
    num_blocks: int, bytes_per_block: int, device: torch.device | str, available: int | None = None, source: str = ""
) -> None:
    """A ValueError, before anything is allocated, when `num_blocks` blocks of `bytes_per_block` bytes exceed
    the memory `device` has available (`available_memory`, unless given); nothing happens when it is unknown."""
    if available is None:
        available, source = available_memory(device)
        if available is None:
            return
    need = num_blocks * bytes_per_block
    if need > available:
        why = f"only {_gib(available)} is available ({source})"
        raise ValueError(kv_memory_message(num_blocks, bytes_per_block, device, why, available))


def kv_memory_message(
    num_blocks: int, bytes_per_block: int, device: torch.device | str, why: str, available: int | None = None
) -> str:
    """The out-of-memory message: the blocks asked for, their bytes, the memory there is, and the fix."""
    need = num_blocks * bytes_per_block
    fits = f"at most {available // bytes_per_block} blocks fit now; " if available is not None else ""
    return (
        f"a KV cache of num_gpu_blocks={num_blocks} blocks x {bytes_per_block} bytes = {need} bytes "
        f"({_gib(need)}) does not fit on {torch.device(device)}: {why}; {fits}pass a smaller num_gpu_blocks (or "
        "kv_cache_memory_bytes), None to size the cache from the memory there is, a smaller block_size, "
        "or kv_cache_dtype='fp8'"
    )


def _check_positive(**values: object) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")


def slots_of(block_table: Seq[int], start: int, stop: int, block_size: int) -> list[int]:
    """Cache slots of a sequence's positions start..stop-1: block_table[p // bs] * bs + p % bs each."""
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, stop)]


class PagedKVCache:
    """K and V for every layer, cut into blocks: `kv[layer, 0 | 1, block, offset, kv_head, dim]`."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        _check_positive(num_layers=num_layers, num_blocks=num_blocks, num_kv_heads=num_kv_heads, head_dim=head_dim)
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = check_block_size(block_size)
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        # One allocation for the whole cache; zeros so an unwritten slot never holds garbage. Checked first:
        # on CPU an overcommitted allocation may "succeed" and get the process killed when it is touched.
        per_block = 2 * num_layers * block_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        check_kv_memory(num_blocks, per_block, device)
        try:
            self.kv = torch.zeros(
                num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=device
            )  # [L, 2, num_blocks, block_size, Hkv, D]
        except RuntimeError as exc:  # torch.OutOfMemoryError (CUDA) is a RuntimeError, so is the CPU allocator's
            if not isinstance(exc, torch.OutOfMemoryError) and "memory" not in str(exc).lower():
                raise
            why = f"the allocator could not provide them ({str(exc).splitlines()[0][:200]})"
            raise ValueError(kv_memory_message(num_blocks, per_block, device, why)) from exc
        # Per-layer views, each contiguous [num_blocks, block_size, Hkv, D], as the kernels take them.
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = [
            (self.kv[layer, 0], self.kv[layer, 1]) for layer in range(num_layers)
        ]
        # fp8: per-layer K and V scales, 0 until the layer's first write sets them (calibrate_scale).
        self.scales = torch.zeros(num_layers, 2, 1, dtype=torch.float32, device=device) if self.is_fp8 else None
        self.kv_scales: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        if self.scales is not None:
            self.kv_scales = [(self.scales[layer, 0], self.scales[layer, 1]) for layer in range(num_layers)]

    def __repr__(self) -> str:
        return (
            f"PagedKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, dtype={self.dtype}, {self.nbytes} bytes)"
        )

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the cache."""
        return self.kv.dtype

    @property
    def is_fp8(self) -> bool:
        """True for an fp8 cache (values stored divided by the layer's scale)."""
        return self.kv.dtype == FP8_DTYPE

    @property
    def num_slots(self) -> int:
        """Token slots in the cache: num_blocks * block_size."""
        return self.num_blocks * self.block_size

    @property
    def bytes_per_slot(self) -> int:
        """Bytes of one token's K and V over all layers (`engine.memory.footprint.kv_bytes`)."""
        return kv_bytes(self.num_layers, self.num_kv_heads, self.head_dim, self.kv.element_size())

    @property
    def nbytes(self) -> int:
        """Total bytes held by the cache tensors: num_slots * bytes_per_slot."""
        return self.num_slots * self.bytes_per_slot

    def k_cache(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s keys [num_blocks, block_size, Hkv, D]."""
        return self.kv_caches[layer][0]

    def v_cache(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s values [num_blocks, block_size, Hkv, D]."""
        return self.kv_caches[layer][1]

    def copy_blocks(self, copies: Seq[tuple[int, int]]) -> None:
        """Copy-on-write: copy block src's K/V rows into block dst, in every layer."""
        if not copies:
            return
        for src, dst in copies:
            for name, block_id in (("src", src), ("dst", dst)):
                if not 0 <= block_id < self.num_blocks:
                    raise ValueError(f"copy {src} -> {dst}: {name} block must be in 0..{self.num_blocks - 1}")
        dsts = [dst for _, dst in copies]
        if len(set(dsts)) != len(dsts):
            raise ValueError(f"copy destinations {dsts} repeat a block; each copy needs its own destination")
        device = self.kv.device
        src_idx = torch.tensor([src for src, _ in copies], dtype=torch.long, device=device)
        dst_idx = torch.tensor(dsts, dtype=torch.long, device=device)
        # Gather first, then scatter: a block that is both a source and a destination reads its old rows.
        kv = self.kv.view(torch.uint8) if self.is_fp8 else self.kv  # CPU torch cannot index fp8: copy the bytes
        kv[:, :, dst_idx] = kv[:, :, src_idx]  # [L, 2, n_copies, block_size, Hkv, D]


def _counts(seqs: Seq[Sequence], num_new_tokens: Seq[int] | None) -> list[int]:
    if num_new_tokens is None:
        return [0] * len(seqs)
    if len(num_new_tokens) != len(seqs):
        raise ValueError(f"num_new_tokens has {len(num_new_tokens)} entries for {len(seqs)} sequences; give one each")
    return list(num_new_tokens)


def build_slot_mapping(
    seqs: Seq[Sequence],
    num_new_tokens: Seq[int],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """Cache slot of each new token, sequence by sequence: positions num_computed_tokens .. + n - 1."""
    slots: list[int] = []
    for seq, n in zip(seqs, _counts(seqs, num_new_tokens), strict=True):
        bs, table, start = seq.block_size, seq.block_table, seq.num_computed_tokens
        if start + n > len(table) * bs:
            raise ValueError(
                f"sequence {seq.seq_id} needs slots up to position {start + n - 1} but its block table holds "
                f"{len(table) * bs}; call BlockManager.append_slots() before building the step"
            )
        slots.extend(slots_of(table, start, start + n, bs))
    return torch.tensor(slots, dtype=dtype, device=device)


def build_block_tables(
    seqs: Seq[Sequence],
    device: torch.device | str = "cpu",
    max_num_blocks: int | None = None,
    pad_value: int = 0,
) -> torch.Tensor:
    """Block tables padded to a rectangle: int32 [S, max_num_blocks] (padding is never read)."""
    width = max((len(s.block_table) for s in seqs), default=0)
    if max_num_blocks is not None:
        if max_num_blocks < width:
            raise ValueError(f"max_num_blocks={max_num_blocks} is smaller than the longest block table ({width})")
        width = max_num_blocks
    rows = [s.block_table + [pad_value] * (width - len(s.block_table)) for s in seqs]
    return torch.tensor(rows, dtype=torch.int32, device=device).reshape(len(seqs), width)


def build_seq_lens(
    seqs: Seq[Sequence], num_new_tokens: Seq[int] | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Tokens in the cache per sequence after this step's store: num_computed_tokens + new, int32 [S]."""
    lens = [s.num_computed_tokens + n for s, n in zip(seqs, _counts(seqs, num_new_tokens), strict=True)]
    return torch.tensor(lens, dtype=torch.int32, device=device)
