"""Page 2's arithmetic and live runs: MHA / MQA / GQA over a real model's shape (no Streamlit).

KV bytes per token = 2 (K and V) × layers × KV heads × head dim × bytes per element (GQA: Ainslie et al.,
EMNLP 2023; MQA: Shazeer 2019, arXiv 1911.02150). A group-count slider picks the number of KV heads G among
the divisors of the query-head count: G = Hq is MHA, G = 1 is MQA. The live runs use xformers' 5-D layout
[B, M, G, H, K] (H = query heads per group) with K/V expanded over H by a stride-0 view, through
`engine.attention.fmha.memory_efficient_attention`, against an MHA model whose cache holds every head:
decode (DECODE_BATCH sequences x 1 query over a long cache: time follows bytes) and prefill (M = N tokens).
Everything the page shows comes back as a dataclass in the page's units (`ModelShape`, `KvFootprint`,
`KvByGroups`, `LayoutShapes`, `GqaRun`), each with the rows of its table. `claims()` runs both live runs at the
page's defaults for bench.evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.attention.fmha import memory_efficient_attention
from engine.memory.catalog import MODELS
from engine.memory.specs import ModelSpec
from engine.memory.units import GiB, KiB, MiB, dtype_bytes
from kernels.validate import is_whole
from lessons.measure import default_device, time_interleaved

KV_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp32")
DEFAULT_MODEL = "llama-3-8b"  # the page's defaults (lessons/links.py reads them from here)
DEFAULT_SEQ_LEN = 64  # tokens of the prefill-shaped run
SEQ_LENS = (16, 256, 16)  # the prefill slider: low, high, step
DECODE_BATCH = 8  # sequences in the decode run, one new query each
DECODE_MAX_CONTEXT = 4096  # cached tokens per sequence, when the MHA side fits DECODE_MHA_BUDGET
DECODE_MHA_BUDGET = 256 * MiB  # fp32 K+V of the MHA side's cache: bigger than a CPU's last-level cache
PREFILL_NOISE = 0.10  # prefill does the same FLOPs either way: "not slower" allows this much timing noise
# The tensors of the 5-D layout, in the lesson's words (the layout table's "tensor" column).
LAYOUT_TENSORS: tuple[str, ...] = (
    "query",
    "key / value (stored)",
    "key / value (as the kernel sees them)",
    "output",
)


def group_options(num_heads: int) -> list[int]:
    """Valid KV-group counts for `num_heads` query heads: its divisors, ascending (1 = MQA, num_heads = MHA)."""
    if not is_whole(num_heads) or num_heads < 1:
        raise ValueError(f"num_heads={num_heads!r} must be a positive integer")
    return [g for g in range(1, num_heads + 1) if num_heads % g == 0]


def attention_kind(num_heads: int, groups: int) -> str:
    """ "MHA", "MQA" or "GQA-<G>" for G KV groups."""
    if groups == num_heads:
        return "MHA"
    return "MQA" if groups == 1 else f"GQA-{groups}"


def _check_run(num_heads: int, groups: int, head_dim: int) -> None:
    """ValueError unless `groups` divides `num_heads` and the head dim is one a live run takes."""
    if groups not in group_options(num_heads):
        raise ValueError(
            f"{groups} KV groups do not divide {num_heads} query heads; use one of {group_options(num_heads)}"
        )
    if not 1 <= head_dim <= 256:
        raise ValueError(f"head_dim={head_dim} must be in 1..256 for a live run")


def _spec(model: str, groups: int) -> ModelSpec:
    spec = MODELS[model]  # an unknown key is a ValueError listing the known ones
    _check_run(spec.num_heads, groups, spec.head_dim)
    return spec.with_kv_heads(groups)


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of one catalog model (its config.json), as page 2 names and slides over it."""

    key: str  # the catalog key ("llama-3-8b")
    name: str  # the display name ("Llama-3-8B")
    source: str  # where the shape comes from
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int  # KV heads the model ships with
    head_dim: int
    max_context: int  # the longest context it was trained for
    sliding_window: int | None  # tokens a query sees back (Mistral v0.1), None for full attention
    mla: bool = False  # caches an MLA latent (DeepSeek-V3): no KV heads to group (lessons/labs/mla.py)
    full_layers: int = 0  # layers whose KV grows with every token (a hybrid's full layers); 0: all of them

    @property
    def group_options(self) -> list[int]:
        """The valid KV-group counts: the divisors of the query heads (1 = MQA, num_heads = MHA)."""
        return group_options(self.num_heads)

    @property
    def growing_layers(self) -> int:
        """Layers whose KV grows with every token: all of them, or a hybrid's full-attention layers."""
        return self.full_layers or self.num_layers

    @property
    def hybrid(self) -> bool:
        """Whether only some layers keep every token (gpt-oss, Gemma 3: the rest slide over a window)."""
        return self.growing_layers < self.num_layers

    @property
    def decode_context(self) -> int:
        """Cached tokens per sequence of the live decode run for this shape (`decode_context`)."""
        return decode_context(self.num_heads, self.head_dim)

    def heads_per_group(self, groups: int) -> int:
        """Query heads that share one KV head at `groups` KV heads."""
        return self.num_heads // groups


def model_shape(model: str) -> ModelShape:
    """The catalog model's attention shape; an unknown key is a ValueError listing the known ones."""
    s = MODELS[model]
    return ModelShape(
        model,
        s.name,
        s.source,
        s.num_layers,
        s.num_heads,
        s.num_kv_heads,
        s.head_dim,
        s.max_context,
        s.sliding_window,
        s.is_mla,
        sum(1 for k in s.layer_kinds if k.keeps_every_token) if s.is_hybrid else 0,
    )


@dataclass(frozen=True)
class KvFootprint:
    """KV cache size of one model configuration, right and wrong (the calculator bug)."""

    shape: ModelShape
    groups: int  # KV heads
    element_bytes: int  # bytes per K or V element at the KV precision (fp32 4, bf16 2, fp8 1)
    bytes_per_token: int
    naive_bytes_per_token: int  # uses query heads instead of KV heads: the common calculator bug
    context_len: int
    users: int
    held_tokens: int  # tokens of KV one user holds: the context, or a sliding-window model's window (Mistral)

    @property
    def model(self) -> str:
        """The catalog key of the model."""
        return self.shape.key

    @property
    def num_heads(self) -> int:
        """Query heads of the model."""
        return self.shape.num_heads

    @property
    def kind(self) -> str:
        """ "MHA", "MQA" or "GQA-<G>" (`attention_kind`)."""
        return attention_kind(self.shape.num_heads, self.groups)

    @property
    def windowed(self) -> bool:
        """True when a sliding window caps what each user holds below the context."""
        return self.held_tokens < self.context_len

    @property
    def beyond_training(self) -> bool:
        """True when the context is longer than the model was trained for (the footprint is still computed)."""
        return self.context_len > self.shape.max_context

    @property
    def kib_per_token(self) -> float:
        """KV per token in KiB."""
        return self.bytes_per_token / KiB

    @property
    def total_gib(self) -> float:
        """KV of all users at the context, in GiB."""
        return self.total_bytes / GiB

    @property
    def naive_total_gib(self) -> float:
        """What the buggy calculator claims for the same load, in GiB."""
        return self.naive_total_bytes / GiB

    @property
    def total_bytes(self) -> int:
        """KV bytes for `users` sequences of `context_len` tokens (a windowed model keeps only its window)."""
        return self.bytes_per_token * self.held_tokens * self.users

    @property
    def naive_total_bytes(self) -> int:
        """What a calculator that ignores KV heads would claim for the same load."""
        return self.naive_bytes_per_token * self.held_tokens * self.users

    @property
    def overcount(self) -> float:
        """How many times the buggy calculator over-states the KV cache (= query heads per KV head)."""
        return self.naive_bytes_per_token / self.bytes_per_token


def footprint(model: str, groups: int, kv_dtype: str = "bf16", context_len: int = 8192, users: int = 1) -> KvFootprint:
    """KV bytes per token and at context × users for `model` with `groups` KV heads."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"KV dtype {kv_dtype!r} is not offered; use one of {', '.join(KV_DTYPES)}")
    for name, value in (("context length", context_len), ("users", users)):
        if not is_whole(value) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    spec = _spec(model, groups)
    b = dtype_bytes(kv_dtype)
    held = context_len if spec.sliding_window is None else min(context_len, spec.sliding_window)
    per_token = spec.kv_bytes_per_token(b)  # a hybrid: its full layers, what each further token adds
    naive = per_token * spec.num_heads // groups  # the same layers, counted with query heads
    shape = model_shape(model)
    return KvFootprint(shape, groups, int(b), per_token, naive, context_len, users, held)


@dataclass(frozen=True)
class KvByGroups:
    """The KV footprint of one model at every valid group count, ascending (MQA first, MHA last)."""

    footprints: tuple[KvFootprint, ...]

    @property
    def groups(self) -> tuple[int, ...]:
        """The group counts, ascending."""
        return tuple(fp.groups for fp in self.footprints)

    @property
    def total_gib(self) -> tuple[float, ...]:
        """KV at context x users per group count, in GiB."""
        return tuple(fp.total_gib for fp in self.footprints)

    def rows(self) -> list[dict[str, Any]]:
        """One row per group count: KV heads, kind, sharing, KiB per token, GiB at context × users, saving vs MHA."""
        return [
            {
                "groups (KV heads)": fp.groups,
                "kind": fp.kind,
                "query heads per KV head": fp.num_heads // fp.groups,
                "KiB per token": fp.kib_per_token,
                "GiB at context x users": fp.total_gib,
                "x smaller than MHA": fp.overcount,
            }
            for fp in self.footprints
        ]

    def summary(self, chosen: int) -> str:
        """The group-count chart in one sentence (its text alternative): the chosen G against MHA and MQA."""
        by = {fp.groups: fp for fp in self.footprints}
        if chosen not in by:
            raise ValueError(f"chosen group count {chosen} is not one of {list(by)}")
        fp, mqa, mha = by[chosen], self.footprints[0], self.footprints[-1]
        than_mha = (
            "the most of any group count"
            if fp is mha
            else f"{fp.overcount:,.0f}× less than MHA's {mha.total_gib:,.2f} GiB (G = {mha.groups})"
        )
        mqa_part = "" if fp is mqa else f"; MQA (G = {mqa.groups}) would take {mqa.total_gib:,.2f} GiB"
        return f"At G = {chosen} ({fp.kind}) the KV cache takes {fp.total_gib:,.2f} GiB, {than_mha}{mqa_part}."


def kv_by_groups(model: str, kv_dtype: str = "bf16", context_len: int = 8192, users: int = 1) -> KvByGroups:
    """`footprint` at every valid group count of `model` (the divisors of its query heads)."""
    spec = MODELS[model]
    return KvByGroups(tuple(footprint(model, g, kv_dtype, context_len, users) for g in group_options(spec.num_heads)))


def head_sharing_rows(num_heads: int, groups: int) -> list[dict[str, int]]:
    """Which cached KV head each query head reads: query head h reads KV head h // (num_heads / groups)."""
    if groups not in group_options(num_heads):
        raise ValueError(
            f"{groups} KV groups do not divide {num_heads} query heads; use one of {group_options(num_heads)}"
        )
    per_group = num_heads // groups
    return [{"query head": h, "KV head": h // per_group} for h in range(num_heads)]


def head_sharing_summary(num_heads: int, groups: int) -> str:
    """The head-sharing diagram in one sentence: how many query heads read each cached KV head."""
    rows = head_sharing_rows(num_heads, groups)  # checks the divisor
    per_group = num_heads // groups
    return (
        f"{attention_kind(num_heads, groups)}: {num_heads} query heads read {groups} cached KV "
        f"head{'s' if groups > 1 else ''}, {per_group} per KV head (query head {rows[-1]['query head']} reads "
        f"KV head {rows[-1]['KV head']})."
    )


@dataclass(frozen=True)
class GqaRun:
    """One attention shape run twice: GQA in the 5-D layout and an MHA model whose cache holds every query head.

    `name` is "decode" (one query per sequence over a long cache) or "prefill" (M = N tokens, one sequence).
    """

    name: str
    query_shape: tuple[int, ...]
    key_shape: tuple[int, ...]
    key_stride: tuple[int, ...]
    output_shape: tuple[int, ...]
    mha_key_shape: tuple[int, ...]
    max_abs_err: float
    gqa_seconds: float
    mha_seconds: float
    gqa_kv_bytes: int  # K and V bytes the GQA call reads (the storage behind the stride-0 view)
    mha_kv_bytes: int  # K and V bytes MHA with repeated heads reads

    @property
    def speedup(self) -> float:
        """MHA time / GQA time (> 1: GQA is faster)."""
        return self.mha_seconds / self.gqa_seconds

    @property
    def gqa_ms(self) -> float:
        """The GQA call's time in milliseconds."""
        return self.gqa_seconds * 1e3

    @property
    def mha_ms(self) -> float:
        """The MHA call's time in milliseconds."""
        return self.mha_seconds * 1e3

    @property
    def gqa_kv_mib(self) -> float:
        """K and V the GQA call reads, in MiB."""
        return self.gqa_kv_bytes / MiB

    @property
    def mha_kv_mib(self) -> float:
        """K and V the MHA model's cache holds, in MiB."""
        return self.mha_kv_bytes / MiB

    @property
    def kv_ratio(self) -> int:
        """How many times MHA's K and V outweigh GQA's (= query heads per KV head)."""
        return self.mha_kv_bytes // self.gqa_kv_bytes

    @property
    def heads_per_group(self) -> int:
        """Query heads that read the same K/V memory (the H of [B, M, G, H, K])."""
        return self.query_shape[3]

    def gb_per_s(self, side: str) -> float:
        """Achieved K+V read bandwidth of one side ("gqa" or "mha"), in GB/s."""
        if side not in ("gqa", "mha"):
            raise ValueError(f"side {side!r} is not one of 'gqa', 'mha'")
        return getattr(self, f"{side}_kv_bytes") / getattr(self, f"{side}_seconds") / 1e9

    def rows(self) -> list[dict]:
        """Side-by-side table of the two runs."""
        return [
            {
                "shape": self.name,
                "run": "GQA, 5-D layout (stride-0 K/V)",
                "query shape": str(self.query_shape),
                "key shape": str(self.key_shape),
                "K+V MiB read": self.gqa_kv_mib,
                "ms": self.gqa_ms,
                "GB/s": self.gb_per_s("gqa"),
            },
            {
                "shape": self.name,
                "run": "MHA, K/V heads repeated",
                "query shape": str(self.query_shape),
                "key shape": str(self.mha_key_shape),
                "K+V MiB read": self.mha_kv_mib,
                "ms": self.mha_ms,
                "GB/s": self.gb_per_s("mha"),
            },
        ]


def times_summary(decode: GqaRun, prefill: GqaRun) -> str:
    """The timing chart in one sentence: GQA's speed-up over MHA with repeated heads, in decode and prefill."""
    return (
        f"Measured here, GQA takes {decode.gqa_ms:,.2f} ms against MHA's {decode.mha_ms:,.2f} ms in decode "
        f"({decode.speedup:,.2f}× as fast) and {prefill.gqa_ms:,.2f} against {prefill.mha_ms:,.2f} ms in prefill "
        f"({prefill.speedup:,.2f}× as fast)."
    )


@dataclass(frozen=True)
class LayoutShapes:
    """The shape of each tensor in the [B, M, G, H, K] layout, written out with its dimension names."""

    query: str
    kv_stored: str  # one K/V head per group
    kv_seen: str  # the same memory, expanded over H with stride 0
    output: str

    def rows(self) -> list[dict[str, str]]:
        """The layout table: one row per tensor (LAYOUT_TENSORS), with its shape."""
        shapes = (self.query, self.kv_stored, self.kv_seen, self.output)
        return [{"tensor": t, "shape": s} for t, s in zip(LAYOUT_TENSORS, shapes, strict=True)]


def layout_shapes(
    num_heads: int, groups: int, head_dim: int, seq_len: int, batch: int = 1, keys: int | None = None
) -> LayoutShapes:
    """The shapes of each tensor in the [B, M, G, H, K] layout, as the page prints them (N = keys or seq_len)."""
    _check_run(num_heads, groups, head_dim)
    h, n = num_heads // groups, seq_len if keys is None else keys
    return LayoutShapes(
        query=f"[B={batch}, M={seq_len}, G={groups}, H={h}, K={head_dim}]",
        kv_stored=f"[B={batch}, N={n}, G={groups}, 1, K={head_dim}]",
        kv_seen=f"[B={batch}, N={n}, G={groups}, H={h} (stride 0), K={head_dim}]",
        output=f"[B={batch}, M={seq_len}, G={groups}, H={h}, K={head_dim}]",
    )


def _compare(name: str, q: torch.Tensor, k_store: torch.Tensor, v_store: torch.Tensor, repeats: int) -> GqaRun:
    """Time GQA (q [B, M, G, H, K] over K/V stored [B, N, G, 1, K]) against MHA whose cache holds G x H heads.

    The MHA side's repeated cache is built before timing: a real MHA model stores every head, so the repeat
    is not part of its attention call. Both sides run interleaved through memory_efficient_attention, half the
    repeats in each order; each side's time is the mean of its two medians.
    """
    k = k_store.expand(*k_store.shape[:3], q.shape[3], k_store.shape[4])  # [B, N, G, H, K], stride 0 over H
    v = v_store.expand(k.shape)
    q_mha = q.flatten(2, 3)  # [B, M, Hq, K]; query head g * h + j belongs to group g
    k_mha = k.flatten(2, 3).contiguous()  # [B, N, Hq, K]: every KV head physically repeated h times
    v_mha = v.flatten(2, 3).contiguous()
    gqa = lambda: memory_efficient_attention(q, k, v)
    mha = lambda: memory_efficient_attention(q_mha, k_mha, v_mha)
    # Both orders (GQA first, then MHA first): the first call of each interleaved round may run colder.
    half = (repeats + 1) // 2
    first = time_interleaved({"gqa": gqa, "mha": mha}, repeats=half, warmup=1, device=q.device)
    second = time_interleaved({"mha": mha, "gqa": gqa}, repeats=half, warmup=0, device=q.device)
    times = {side: (first[side] + second[side]) / 2 for side in first}
    out = gqa()  # [B, M, G, H, K]
    # Independent check: plain SDPA over the repeated heads, in [B, Hq, M, K].
    ref = F.scaled_dot_product_attention(q_mha.transpose(1, 2), k_mha.transpose(1, 2), v_mha.transpose(1, 2))
    elem = q.element_size()
    return GqaRun(
        name=name,
        query_shape=tuple(q.shape),
        key_shape=tuple(k.shape),
        key_stride=tuple(k.stride()),
        output_shape=tuple(out.shape),
        mha_key_shape=tuple(k_mha.shape),
        max_abs_err=(out.flatten(2, 3) - ref.transpose(1, 2)).abs().max().item(),
        gqa_seconds=times["gqa"],
        mha_seconds=times["mha"],
        gqa_kv_bytes=2 * k_store.numel() * elem,
        mha_kv_bytes=2 * k_mha.numel() * elem,
    )


def _tensors(batch: int, len_q: int, len_k: int, groups: int, h: int, head_dim: int, seed: int, device: str):
    """Random q [B, M, G, H, K] and K/V stored once per group, [B, N, G, 1, K]."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, len_q, groups, h, head_dim, generator=gen).to(device)  # [B, M, G, H, K]
    k = torch.randn(batch, len_k, groups, 1, head_dim, generator=gen).to(device)  # [B, N, G, 1, K]: 1 per group
    v = torch.randn(batch, len_k, groups, 1, head_dim, generator=gen).to(device)
    return q, k, v


def run_gqa(
    num_heads: int,
    groups: int,
    head_dim: int,
    seq_len: int = 128,
    repeats: int = 5,
    seed: int = 0,
    device: str | None = None,
) -> GqaRun:
    """Prefill-shaped: one sequence of M = N = seq_len tokens, GQA in [B, M, G, H, K] vs MHA over repeated heads.
    Runs on CUDA (the Triton kernels) when a GPU is present, else on CPU (the torch backend)."""
    _check_run(num_heads, groups, head_dim)
    if not 1 <= seq_len <= 2048:
        raise ValueError(f"seq_len={seq_len} must be in 1..2048 for a live run")
    q, k, v = _tensors(1, seq_len, seq_len, groups, num_heads // groups, head_dim, seed, device or default_device())
    return _compare("prefill", q, k, v, repeats)


def decode_context(num_heads: int, head_dim: int, batch: int = DECODE_BATCH) -> int:
    """Cached tokens per sequence of the decode run: DECODE_MAX_CONTEXT, or fewer (a power of two) so that the
    MHA side's fp32 K+V cache stays within DECODE_MHA_BUDGET (a live run must stay well under a second)."""
    per_token = batch * 2 * num_heads * head_dim * 4  # MHA K+V bytes per cached token, all sequences, fp32
    tokens = DECODE_MAX_CONTEXT
    while tokens > 16 and tokens * per_token > DECODE_MHA_BUDGET:
        tokens //= 2
    return tokens


def run_gqa_decode(
    num_heads: int,
    groups: int,
    head_dim: int,
    batch: int = DECODE_BATCH,
    context: int | None = None,
    repeats: int = 5,
    seed: int = 0,
    device: str | None = None,
) -> GqaRun:
    """Decode-shaped: `batch` sequences x 1 new query each over `context` cached tokens (default: decode_context).
    This is where GQA pays: every step reads the whole cache for one query per sequence, so time follows bytes."""
    _check_run(num_heads, groups, head_dim)
    context = decode_context(num_heads, head_dim, batch) if context is None else context
    if not 1 <= batch <= 64 or not 1 <= context <= DECODE_MAX_CONTEXT:
        raise ValueError(f"batch={batch} must be in 1..64 and context={context} in 1..{DECODE_MAX_CONTEXT}")
    q, k, v = _tensors(batch, 1, context, groups, num_heads // groups, head_dim, seed, device or default_device())
    return _compare("decode", q, k, v, repeats)


def claims(repeats: int = 9) -> dict[str, dict]:
    """Page 2 at its defaults (DEFAULT_MODEL at its real KV heads): is GQA faster in decode, not slower in prefill?

    The prefill run is short, so it gets 4x the repeats: its claim is a tie, which noise can tip either way."""
    spec = MODELS[DEFAULT_MODEL]
    heads, groups, dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
    dec = run_gqa_decode(heads, groups, dim, repeats=repeats)
    pre = run_gqa(heads, groups, dim, DEFAULT_SEQ_LEN, repeats=4 * repeats)

    def numbers(run: GqaRun) -> dict:
        return {
            "gqa_ms": round(run.gqa_seconds * 1e3, 3),
            "mha_ms": round(run.mha_seconds * 1e3, 3),
            "speedup": round(run.speedup, 3),
            "gqa_kv_bytes": run.gqa_kv_bytes,
            "mha_kv_bytes": run.mha_kv_bytes,
            "gqa_GB_per_s": round(run.gb_per_s("gqa"), 2),
            "mha_GB_per_s": round(run.gb_per_s("mha"), 2),
            "query_shape": list(run.query_shape),
            "max_abs_err": run.max_abs_err,
            "threads": torch.get_num_threads(),
        }

    return {
        "gqa_decode": {
            "claim": f"in decode ({dec.query_shape[0]} sequences x 1 query over {dec.key_shape[1]} cached tokens, "
            f"{heads} query / {groups} KV heads) GQA is faster than MHA with repeated KV heads",
            "holds": dec.gqa_seconds < dec.mha_seconds,
            **numbers(dec),
        },
        "gqa_prefill": {
            "claim": f"in prefill ({DEFAULT_SEQ_LEN} tokens) GQA is not slower than MHA with repeated KV heads "
            f"(GQA time <= MHA time x {1 + PREFILL_NOISE:.2f}, the timing noise allowed on a shared CPU)",
            "holds": pre.gqa_seconds <= pre.mha_seconds * (1 + PREFILL_NOISE),
            **numbers(pre),
        },
    }
