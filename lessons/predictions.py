"""Predict-then-observe exercises: one numeric question per lesson (1–7), answered from the engine's own numbers.

Each lesson asks the learner to commit to a number before the page shows it: KV bytes per token, blocks per
request, the padding share of a batch... `for_page(page_id)` builds the page's `Prediction` (question, the
answer computed by engine/memory/footprint.py, the catalog, the attention offsets and the real BlockManager,
a tolerance, the worked arithmetic and known wrong turns); `check(page_id, value)` validates the learner's
input and says how far off it was and why. A bad input (empty, not a number, negative, absurdly large) is a
ValueError naming the value and the fix. No Streamlit here: ui/predict.py draws the exercise.

Each `Trap` is a known wrong turn: the value it gives (from the same engine numbers), a short third-person
`slip` for a projector ("K or V, not both") and the second-person `feedback` sentence check() shows. A trap
holds the values within its window (2 % of its value unless it says less); no trap's window overlaps another
trap's or the exercise's close tolerance (tests/lessons/test_predictions.py checks every page), so an answer
is close, one slip, or neither — `is_close` and `trap_index` say which, for check() and lessons/live.py alike.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real

import cachetools

from engine.attention.attn_bias import SeqLenInfo
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence
from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import kv_bytes_per_token, kv_cache_bytes, weight_bytes
from engine.memory.specs import ModelSpec
from engine.memory.units import GiB, KiB
from engine.sampling_params import SamplingParams
from lessons.labs.mla import latent_of

PAGES: tuple[str, ...] = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "pressure", "diagnosis")


@dataclass(frozen=True)
class Trap:
    """A common mistake: the value it gives, a short third-person label for the class's projector ("GB instead
    of GiB") and the sentence that tells the learner what went wrong ("you divided by 10⁹ ...")."""

    value: float
    slip: str
    feedback: str
    rel_tol: float = 0.02  # the window: values within value * rel_tol look like this mistake

    def holds(self, number: float) -> bool:
        """Whether `number` lies in this trap's window."""
        return abs(number - self.value) <= abs(self.value) * self.rel_tol + 1e-9


@dataclass(frozen=True)
class Prediction:
    """One lesson's question, its answer from the engine, the tolerance and the explanation."""

    page_id: str
    prompt: str
    unit: str  # what the number is counted in ("KiB", "blocks", "%", ...)
    answer: float
    rel_tol: float  # a prediction within answer * rel_tol counts as close
    working: str  # the worked arithmetic, with the engine's numbers
    why: str  # what the number teaches
    max_value: float  # anything above is not a prediction but a typo (wrong unit, extra digits)
    traps: tuple[Trap, ...] = ()  # common mistakes, each with the value it gives


@dataclass(frozen=True)
class PredictionResult:
    """The learner's checked prediction."""

    page_id: str
    value: float
    answer: float
    close: bool
    feedback: str

    @property
    def error(self) -> float:
        """Prediction minus answer (negative: too low)."""
        return self.value - self.answer

    def record(self) -> dict[str, float | bool]:
        """What the progress store keeps for this exercise (JSON values only)."""
        return {"value": self.value, "answer": self.answer, "close": self.close}


def saved_value(entry: object) -> float | None:
    """The learner's number in a saved prediction (`PredictionResult.record()`); None when there is none (no
    entry, or an entry from an older or damaged save whose value is not a number)."""
    value = entry.get("value") if isinstance(entry, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def num(x: float, digits: int = 3) -> str:
    """A number for prose: thousands separators, at most `digits` significant decimals, no trailing zeros;
    beyond a trillion, scientific notation (a 300-digit number is not prose)."""
    if abs(x) >= 1e12:
        return f"{x:.3g}"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.{digits}f}".rstrip("0").rstrip(".")


def amount(x: float, unit: str, digits: int = 3) -> str:
    """'128 KiB', '4.79 ms'; a share is '53.1%' and a difference of shares 'percentage points'."""
    return f"{num(x, 1)}%" if unit == "%" else f"{num(x, digits)} {unit}"


def decode_weight_read_bytes(model: ModelSpec) -> float:
    """Weight bytes one batch-1 decode step reads in bf16: every weight but an untied input embedding table.

    Decode gathers one row of the embedding table per token; the lm_head is read whole, so a model whose lm_head
    is the embedding table (tie_word_embeddings) reads the table once, through the lm_head. The same rule as the
    roofline's step time (`StepTimeModel.for_model`, engine/memory/roofline.py).
    """
    table = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size * 2
    return weight_bytes(model, "bf16") - table


def _bandwidth() -> Prediction:
    model, gpu = MODELS["llama-3-8b"], GPUS["h100-sxm"]
    weights = weight_bytes(model, "bf16")
    read = decode_weight_read_bytes(model)
    table = weights - read
    bw = gpu.bandwidth_bytes_per_s
    ms = read / bw * 1e3
    compute_ms = 2 * model.num_params / gpu.bf16_flops * 1e3
    kv_4k = kv_bytes_per_token(model, "bf16") * 4096
    return Prediction(
        "bandwidth",
        f"At batch 1, counting only the weight reads, how many **milliseconds** does one decode step of "
        f"{model.name} (bf16 weights, {model.num_params / 1e9:.2f} B parameters, a {model.vocab_size:,}-token "
        f"vocabulary of width {model.hidden_size:,}, an lm_head of its own) take on an {gpu.name} "
        f"({bw / 1e12:.2f} TB/s)?",
        "ms",
        ms,
        0.04,  # narrower than the gap to the embedding-table trap (every weight: 7 % more)
        f"{model.num_params / 1e9:.2f} B parameters × 2 bytes = {weights / 1e9:.2f} GB of weights, but the input "
        f"embedding table ({model.vocab_size:,} × {model.hidden_size:,} × 2 bytes = {table / 1e9:.2f} GB) is not "
        f"streamed: decode gathers one row of it per token. The lm_head, a separate matrix of the same size in "
        f"{model.name}, is read whole (a model with tied embeddings reads the table once, as its lm_head). "
        f"{read / 1e9:.2f} GB ÷ {bw / 1e12:.2f} TB/s = **{ms:.2f} ms** per token (≈ {1e3 / ms:.0f} tokens/s). "
        f"The arithmetic, 2 × {model.num_params / 1e9:.2f} G FLOPs at {gpu.bf16_flops / 1e12:.0f} TFLOP/s, "
        f"would take only {compute_ms:.3f} ms. A 4,096-token context adds {kv_4k / 1e9:.2f} GB of KV reads, "
        f"another {kv_4k / bw * 1e3:.2f} ms.",
        "decode is bandwidth-bound: the step time is bytes moved ÷ bandwidth, not FLOPs ÷ peak.",
        60_000.0,
        (
            Trap(
                compute_ms,
                "timed the FLOPs, not the bytes",
                "that is the time of the arithmetic; the step waits for the bytes, not the FLOPs",
            ),
            Trap(
                weights / bw * 1e3,
                "read the embedding table every step",
                "you counted the whole input embedding table as read every step; decode gathers one row of it per "
                "token",
            ),
            Trap(
                read / 2 / bw * 1e3,
                "one byte per parameter, not two",
                "you counted one byte per parameter; bf16 weights take two",
            ),
        ),
    )


def _gqa() -> Prediction:
    m = MODELS["deepseek-v3"]
    lat = latent_of(m)  # every DeepSeek-V3 layer caches the same latent
    per_token = kv_bytes_per_token(m, "bf16")
    kib = per_token / KiB
    generic = 2 * m.num_layers * m.num_kv_heads * (m.hidden_size // m.num_heads) * 2 / KiB
    qk = lat.qk_nope_head_dim + lat.qk_rope_head_dim
    decompressed = m.num_layers * m.num_heads * (qk + lat.v_head_dim) * 2 / KiB
    return Prediction(
        "gqa",
        f"{m.name}'s config.json reads: {m.num_layers} layers, {m.num_heads} attention heads, "
        f"`num_key_value_heads` {m.num_kv_heads}, `kv_lora_rank` {lat.kv_lora_rank}, `qk_rope_head_dim` "
        f"{lat.qk_rope_head_dim}, `qk_nope_head_dim` {lat.qk_nope_head_dim}, `v_head_dim` {lat.v_head_dim}. How many "
        f"**KiB** of KV cache does one token take in bf16 as vLLM stores it (all layers)?",
        "KiB",
        kib,
        0.02,
        f"MLA caches one latent per token and layer: {lat.kv_lora_rank} (kv_lora_rank) + {lat.qk_rope_head_dim} "
        f"(qk_rope_head_dim) = {lat.latent_dim} values, no separate V; {m.num_layers} layers × {lat.latent_dim} × "
        f"2 bytes = {per_token:,} bytes = **{num(kib, 1)} KiB** (vllm/v1/kv_cache_interface.py, MLAAttentionSpec).",
        f"the {m.num_kv_heads} heads in the config describe the decompressed attention, which is never stored; "
        f"a calculator that reads `num_key_value_heads` over-states the cache {generic / kib:.0f}×.",
        1e7,
        (
            Trap(
                generic,
                "read num_key_value_heads",
                f"you multiplied `num_key_value_heads` ({m.num_kv_heads}) by a head dim: MLA caches no per-head "
                f"K or V, only the {lat.latent_dim}-value latent",
            ),
            Trap(
                decompressed,
                "cached every head's decompressed K and V",
                "that is every head's decompressed K and V; the cache holds the latent they are rebuilt from",
            ),
            Trap(
                2 * kib,
                "stored the latent twice, as K and V",
                "you counted the latent twice (K and V): MLA's value is the same latent, stored once",
            ),
            Trap(
                m.num_layers * lat.kv_lora_rank * 2 / KiB,
                "left out the RoPE key",
                f"you left out the {lat.qk_rope_head_dim}-value RoPE key cached beside the latent",
                0.01,  # 61 KiB, 11 % below the answer: a 1 % window stays clear of the close band
            ),
            Trap(
                kib / m.num_layers,
                f"one layer, not all {m.num_layers}",
                "that is one layer; every layer caches its own latent",
            ),
        ),
    )


PACK_LENGTHS = (8, 16, 4, 32)


def _packing() -> Prediction:
    info = SeqLenInfo.from_seqlens(list(PACK_LENGTHS))  # the offsets the packed kernels receive
    real = info.seqstart_py[-1]
    padded = len(PACK_LENGTHS) * info.max_seqlen
    share = 100 * (padded - real) / padded
    padded_pairs = len(PACK_LENGTHS) * info.max_seqlen**2
    packed_pairs = sum(n * n for n in info.seqlens)
    lengths = ", ".join(str(n) for n in PACK_LENGTHS)
    return Prediction(
        "packing",
        f"Requests of {lengths} tokens are padded to the longest one in a single batch. What **percentage** of "
        f"the padded batch's token slots is padding?",
        "%",
        share,
        0.05,
        f"padded: {len(PACK_LENGTHS)} requests × {info.max_seqlen} = {padded} slots; real tokens: {lengths} → "
        f"{real}; padding = ({padded} − {real}) ÷ {padded} = **{share:.1f}%**. Attention wastes more: the padded "
        f"score matrices hold {len(PACK_LENGTHS)} × {info.max_seqlen}² = {padded_pairs:,} cells, the packed "
        f"block diagonal {packed_pairs:,} ({100 * (1 - packed_pairs / padded_pairs):.0f}% fewer).",
        "padding costs memory linearly and attention quadratically; packing with cu_seqlens costs neither.",
        100.0,
        (
            Trap(
                100 - share,
                "gave the real tokens' share",
                "that is the share of real tokens; the question asks for the padding",
            ),
        ),
    )


FRAG_MAX_LEN, FRAG_PROMPT, FRAG_OUTPUT = 2048, 200, 300


def _fragmentation() -> Prediction:
    m = MODELS["llama-2-13b"]
    per_token = kv_bytes_per_token(m, "bf16")
    final = FRAG_PROMPT + FRAG_OUTPUT
    internal = FRAG_MAX_LEN - final
    return Prediction(
        "fragmentation",
        f"A server reserves `max_model_len` = {FRAG_MAX_LEN:,} KV slots for every request when it arrives. A request "
        f"has a {FRAG_PROMPT}-token prompt and finishes after {FRAG_OUTPUT} generated tokens. How many of its "
        f"reserved **slots** are internal fragmentation (never used)?",
        "slots",
        internal,
        0.0,
        f"the request ends at {FRAG_PROMPT} + {FRAG_OUTPUT} = {final} tokens, so {FRAG_MAX_LEN:,} − {final} = "
        f"**{internal:,} slots** are never filled. At {m.name}'s {per_token // KiB:,} KiB per token (bf16) that is "
        f"{internal * per_token / GiB:.2f} GiB held for nothing; while it still runs, the slots for its "
        f"not-yet-generated tokens are *reserved* waste, and only {100 * final / FRAG_MAX_LEN:.0f}% of its "
        f"reservation ever holds a token.",
        "reserving the maximum length strands the gap between the real and the maximum length for the "
        "request's whole life.",
        1e6,
        (
            Trap(
                FRAG_MAX_LEN - FRAG_PROMPT,
                "left out the generated tokens",
                "you left out the generated tokens, which also fill the reservation",
            ),
            Trap(
                FRAG_MAX_LEN - FRAG_OUTPUT,
                "left out the prompt",
                "the prompt's tokens sit in the same reservation as the output's",
            ),
            Trap(
                final,
                "counted the used slots",
                "that is the slots the request fills; the question asks for the ones it never uses",
            ),
        ),
    )


PAGED_TOKENS, PAGED_BLOCK = 1000, 16


def _paged() -> Prediction:
    bm = BlockManager(num_blocks=PAGED_TOKENS, block_size=PAGED_BLOCK)  # the engine's allocator
    seq = Sequence(0, [1] * PAGED_TOKENS, block_size=PAGED_BLOCK)
    bm.allocate_sequence(seq)
    blocks = len(seq.block_table)
    slack = blocks * PAGED_BLOCK - PAGED_TOKENS
    return Prediction(
        "paged",
        f"How many KV **blocks** does the allocator give a {PAGED_TOKENS:,}-token sequence at block size "
        f"{PAGED_BLOCK}?",
        "blocks",
        blocks,
        0.0,
        f"{PAGED_TOKENS:,} ÷ {PAGED_BLOCK} = {PAGED_TOKENS / PAGED_BLOCK:g}, rounded **up**: the engine's "
        f"BlockManager hands out **{blocks} blocks** ({blocks * PAGED_BLOCK:,} slots), and the last one holds "
        f"{PAGED_BLOCK - slack} tokens, leaving {slack} slots empty — the only waste paging has.",
        "a sequence takes ceil(tokens ÷ block size) blocks; at most block size − 1 slots are ever idle.",
        1e6,
        (
            Trap(
                PAGED_TOKENS // PAGED_BLOCK,
                "rounded the blocks down",
                "rounded down: the last, partial block still takes a whole block",
                0.0,  # a count of blocks: 2 % of 62 would reach the answer, 63
            ),
        ),
    )


PRESSURE_BLOCKS, PRESSURE_BLOCK, PRESSURE_PROMPT, PRESSURE_OUTPUT = 24, 16, 48, 24  # the pressure page's defaults


def _fill(tokens: int) -> int:
    """Sequences of `tokens` tokens the engine's BlockManager fits at once in the pressure page's default pool:
    allocated one after another until the pool refuses the next."""
    bm, n = BlockManager(num_blocks=PRESSURE_BLOCKS, block_size=PRESSURE_BLOCK), 0
    while bm.can_allocate(seq := Sequence(n, [1] * tokens, block_size=PRESSURE_BLOCK)):
        bm.allocate_sequence(seq)
        n += 1
    return n


def admitted_at_once(num_requests: int = 16) -> int:
    """Requests the engine's scheduler admits in its first step when `num_requests` of the pressure page's
    requests arrive together, with memory the only limit (seats and token budget to spare): vLLM V1's rule, the
    whole prompt's blocks must fit and no watermark by default."""
    final = PRESSURE_PROMPT + PRESSURE_OUTPUT
    config = SchedulerConfig(num_requests, num_requests * PRESSURE_PROMPT, final)
    sched = Scheduler(config, BlockManager(num_blocks=PRESSURE_BLOCKS, block_size=PRESSURE_BLOCK))
    for i in range(num_requests):
        params = SamplingParams(max_tokens=PRESSURE_OUTPUT, ignore_eos=True)
        sched.add(Sequence(i, [1] * PRESSURE_PROMPT, PRESSURE_BLOCK, params))
    return len(sched.schedule().admitted)


def predict_pressure() -> Prediction:
    """Page 6 (serving under KV pressure): how many requests at full length the default pool holds."""
    final = PRESSURE_PROMPT + PRESSURE_OUTPUT
    full, prompts_only = _fill(final), admitted_at_once()
    per_request = -(-final // PRESSURE_BLOCK)
    slots = PRESSURE_BLOCKS * PRESSURE_BLOCK
    return Prediction(
        "pressure",
        f"A KV pool holds {PRESSURE_BLOCKS} blocks of {PRESSURE_BLOCK} tokens. Each request has a "
        f"{PRESSURE_PROMPT}-token prompt and generates {PRESSURE_OUTPUT} tokens. How many **requests** can hold "
        f"all their tokens in the pool at the same time, so that none has to be preempted?",
        "requests",
        full,
        0.0,
        f"a finished request holds {PRESSURE_PROMPT} + {PRESSURE_OUTPUT} = {final} tokens = ceil({final} ÷ "
        f"{PRESSURE_BLOCK}) = {per_request} blocks; {PRESSURE_BLOCKS} ÷ {per_request} rounded down = **{full} "
        f"requests** (the engine's BlockManager, filled one request after another, agrees). Admission checks "
        f"only the whole prompt's {-(-PRESSURE_PROMPT // PRESSURE_BLOCK)} blocks, so the engine's scheduler, like "
        f"vLLM V1's, admits {prompts_only} at once: more than {full}, and as they grow it must preempt. (vLLM "
        f"keeps one of its blocks as a null block that holds no tokens, so with num_gpu_blocks = {PRESSURE_BLOCKS} "
        f"it admits {(PRESSURE_BLOCKS - 1) // -(-PRESSURE_PROMPT // PRESSURE_BLOCK)}.)",
        "a pool that admits a request by its prompt must hold its final length too; the gap between the two "
        "counts is where preemptions come from.",
        1e6,
        (
            Trap(
                slots // final,
                "divided tokens, not whole blocks",
                f"you divided tokens ({slots} ÷ {final}) and forgot that blocks are whole",
            ),
            Trap(
                prompts_only,
                "counted the prompts' blocks only",
                "you counted the prompts' blocks only: what admission checks, not what the requests grow to",
            ),
        ),
    )


DIAG_USERS, DIAG_CONTEXT = 16, 8192


def _diagnosis() -> Prediction:
    m = MODELS["llama-3-8b"]
    per_token = kv_bytes_per_token(m, "bf16")
    kv = kv_cache_bytes(m, DIAG_USERS * DIAG_CONTEXT, "bf16")
    gib = kv / GiB
    weights = weight_bytes(m, "bf16") / GiB
    return Prediction(
        "diagnosis",
        f"A chat service runs {m.name} in bf16 for **{DIAG_USERS} concurrent users** at **{DIAG_CONTEXT:,} tokens** "
        f"of context each. How many **GiB** of KV cache does that take?",
        "GiB",
        gib,
        0.05,
        f"{DIAG_USERS} × {DIAG_CONTEXT:,} = {DIAG_USERS * DIAG_CONTEXT:,} tokens × {per_token // KiB} KiB per token "
        f"= **{num(gib, 2)} GiB** — on top of {weights:.1f} GiB of weights, the activation peak and CUDA graphs: "
        f"the weights fit a 24 GB card, the service does not.",
        "KV memory = users × context × KV bytes per token; it, not the weights, decides how many users fit.",
        1e6,
        (
            Trap(
                m.kv_bytes_per_token_mha(2) * DIAG_USERS * DIAG_CONTEXT / GiB,
                "counted query heads instead of KV heads",
                "you counted query heads, not KV heads",
            ),
            Trap(
                weights,
                "gave the weights, not the KV",
                "that is the weights; the question is the KV cache",
                0.01,  # 14.96 GiB: a 2 % window would reach the close band (16 GiB ± 5 %)
            ),
            Trap(kv / 1e9, "GB instead of GiB", "you divided the bytes by 10⁹ (GB); a GiB is 2³⁰ bytes"),
            Trap(gib / 2, "K or V, not both", "you counted K or V, not both: KV bytes per token start with 2"),
            Trap(
                gib / DIAG_USERS,
                f"one user, not all {DIAG_USERS}",
                f"that is one user's KV cache; the service holds {DIAG_USERS} at once",
            ),
        ),
    )


_BUILDERS = dict(
    zip(PAGES, (_bandwidth, _gqa, _packing, _fragmentation, _paged, predict_pressure, _diagnosis), strict=True)
)


@cachetools.cached(cachetools.LRUCache(maxsize=len(_BUILDERS)), lock=threading.Lock())  # the app's one cache library
def for_page(page_id: str) -> Prediction:
    """The prediction exercise of a lesson page (computed once per process; a Prediction is immutable)."""
    if page_id not in _BUILDERS:
        raise ValueError(f"no prediction exercise for page {page_id!r}; pages with one: {', '.join(PAGES)}")
    return _BUILDERS[page_id]()


def validate(pred: Prediction, value: object) -> float:
    """The learner's input as a float, or a ValueError saying what is wrong with it and what to type."""
    unit = "percent" if pred.unit == "%" else pred.unit
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"no prediction yet: type a number of {unit} in the box, then press Check")
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        # ASCII digits only: float() also reads '1_000', other scripts' digits and 'inf'
        if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)", text):
            raise ValueError(f"prediction {value[:40]!r} is not a number; type digits only, e.g. 42")
        value = float(text)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"prediction {value!r} is not a finite number; type a number of {unit}")
    number = float(value)
    if number < 0:
        raise ValueError(f"prediction {num(number)} is negative; the answer in {unit} is 0 or more, type that")
    if number > pred.max_value:
        raise ValueError(
            f"prediction {amount(number, pred.unit)} is beyond any plausible answer (at most {num(pred.max_value)}); "
            f"check the unit: the question asks for {unit}"
        )
    return number


def _distance(value: float, answer: float, unit: str) -> str:
    """'12 KiB (9%) too low' / 'exactly right' / '4× too high'."""
    diff = value - answer
    if diff == 0:
        return "exactly right"
    direction = "too high" if diff > 0 else "too low"
    size = f"{num(abs(diff), 1)} percentage points" if unit == "%" else amount(abs(diff), unit)
    if answer and value and max(value / answer, answer / value) >= 2:
        return f"{size} {direction} ({max(value / answer, answer / value):.1f}× off)"
    pct = f" ({100 * abs(diff) / answer:.0f}%)" if answer else ""
    return f"{size}{pct} {direction}"


def is_close(pred: Prediction, number: float) -> bool:
    """Whether `number` counts as close to the engine's answer (within answer × rel_tol)."""
    return abs(number - pred.answer) <= abs(pred.answer) * pred.rel_tol + 1e-9


def trap_index(pred: Prediction, number: float) -> int | None:
    """The index in `pred.traps` of the mistake `number` looks like, or None (a close answer is no mistake)."""
    if is_close(pred, number):
        return None
    return next((i for i, trap in enumerate(pred.traps) if trap.holds(number)), None)


def check(page_id: str, value: object) -> PredictionResult:
    """Grade a prediction: how far off it is, the worked arithmetic, and the mistake it looks like (if any)."""
    pred = for_page(page_id)
    number = validate(pred, value)
    close = is_close(pred, number)
    answer, said = amount(pred.answer, pred.unit, 2), amount(number, pred.unit)
    off = _distance(number, pred.answer, pred.unit)
    if close:
        head = f"Close — you predicted {said}; the engine says {answer}"
        head += "." if number == pred.answer else f": {off}, within tolerance."
    else:
        head = f"Off — you predicted {said}, {off}; the engine says {answer}."
    index = None if close else trap_index(pred, number)
    trap = None if index is None else pred.traps[index].feedback
    parts = [head, f"Likely slip: {trap}." if trap else "", f"Working: {pred.working}", f"Why it matters: {pred.why}"]
    return PredictionResult(page_id, number, pred.answer, close, "\n\n".join(p for p in parts if p))
