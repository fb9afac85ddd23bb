"""Reading a learner's vLLM /metrics scrape: load, KV-cache usage, preemptions, and which limit binds.

Public API (what the KV-pressure lesson's paste box calls):

- ``read_vllm_metrics(text, max_num_seqs=None, earlier=None) -> VllmMetrics``: parse a Prometheus text scrape
  (str or bytes) with ``prometheus_client``'s text parser. ``max_num_seqs`` is the server's --max-num-seqs when
  the learner knows it; ``earlier`` an optional scrape of the same server taken a little before, which turns
  the preemption counter into "preemptions since then" (is it still rising?). Never raises on what a learner
  pastes: every problem comes back as a result whose ``error`` is a user-facing sentence (``ok`` is False);
  ``notes`` holds lesser remarks.
- ``metrics_rows(result) -> list[dict[str, str]]``: the result as display rows, each with the keys
  ``"signal"``, ``"metric"``, ``"value"`` and ``"meaning"`` (all plain strings, to be shown inert); an empty
  list when nothing was read.

What is read (names as vLLM exports them; `_total` is how a counter's sample is named):

- ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (gauges, every release);
- ``vllm:num_requests_waiting_by_reason`` (a gauge, vLLM 0.20 and later; label ``reason``): ``capacity``, the
  requests waiting for room in the batch or the pool, and ``deferred``, those held back by something else (a LoRA
  budget, a KV transfer, a blocked status); the two sum to ``vllm:num_requests_waiting``. When the scrape has it,
  the verdict counts the ``capacity`` requests only;
- the KV-cache usage, 0..1: ``vllm:kv_cache_usage_perc`` or ``vllm:gpu_cache_usage_perc``, whose history
  (vllm/v1/metrics/loggers.py of each release) dates the scrape: 0.9.1 and earlier export only the old name (the
  V0 engine always did); 0.9.2 added the new one beside it and deprecated the old; 0.10 exports both; 0.11 hides
  the old one unless the server runs with ``--show-hidden-metrics-for-version=0.10``; 0.12 removed it.
  ``naming`` says which name the usage was read from, ``release`` the releases the names point to;
- ``vllm:num_preemptions_total`` (counter: preemptions since the server started);
- ``vllm:cache_config_info``'s labels ``num_gpu_blocks`` and ``block_size`` (and ``max_num_seqs`` from any
  ``vllm:*_config_info`` that carries it; vLLM's own cache_config_info does not);
- the ``model_name`` label.

Several engines or models in one scrape (labels ``engine`` and ``model_name``, e.g. data parallelism): each
(model_name, engine) pair is read on its own into ``engines``. The totals SUM running, waiting and preemptions
over engines; ``kv_cache_usage`` is the HIGHEST engine's (each engine has its own pool, so an average would
hide a full one); the binding limit is decided per engine and the result carries the most pressed engine's
verdict (KV pool before max_num_seqs before neither), naming that engine when there are several.

Which limit binds, per engine (``BINDS_KV_POOL``, ``BINDS_MAX_NUM_SEQS``, ``BINDS_NEITHER``, ``BINDS_UNKNOWN``):

1. running, waiting or the KV usage missing: unknown.
2. nothing waiting: neither (the server admits every request it gets; past preemptions get a note); requests
   waiting but none of them for capacity (``vllm:num_requests_waiting_by_reason{reason="capacity"}`` at 0):
   neither too, with ``FIX_DEFERRED``. Past this step "waiting" counts the capacity requests when the scrape
   splits them out.
3. waiting and the KV usage at least ``KV_FULL`` (0.95): the KV pool.
4. waiting and running at max_num_seqs (usage below ``KV_FULL``): max_num_seqs. max_num_seqs comes from a
   config-info label, else the ``max_num_seqs`` argument, else vLLM's defaults (``DEFAULT_MAX_NUM_SEQS``:
   256, or 1024 on a GPU of 70 GiB or more that is not an A100 or a GB10; doubled by --performance-mode throughput;
   128 on a CPU): running equal to one of them counts, with a note that the default was assumed.
5. waiting, room in both, but preemptions: the KV pool (a preemption frees blocks, so the usage reads lower
   just after one; the counter says the pool ran out). With ``earlier`` the counter must have risen since
   that scrape; without it, any preemption since the server started counts.
6. waiting with room in both and no preemptions: neither limit is at its cap; requests are being admitted
   at the token budget's pace (max_num_batched_tokens) or a long prompt needs more free blocks than are left.

Limits on the input: at most ``MAX_SCRAPE_BYTES`` (2 MB) of UTF-8 and ``MAX_SCRAPE_LINES`` (30,000) lines,
counted before anything is parsed; a real scrape is tens of KB and a few thousand lines. Lines that
are not Prometheus text (log lines, Markdown fences) are skipped with a note when the whole text does not
parse. A figure no server reports (a usage outside 0..1, a negative or non-finite count) is left out with a
note. Nothing here imports Streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

from kernels.validate import is_whole

__all__ = [
    "BINDS_KV_POOL",
    "BINDS_MAX_NUM_SEQS",
    "BINDS_NEITHER",
    "BINDS_UNKNOWN",
    "DEFAULT_MAX_NUM_SEQS",
    "KV_FULL",
    "MAX_SCRAPE_BYTES",
    "MAX_SCRAPE_LINES",
    "EngineMetrics",
    "VllmMetrics",
    "metrics_rows",
    "read_vllm_metrics",
]

MAX_SCRAPE_BYTES = 2_000_000  # 2 MB: a vLLM scrape is tens of KB (histograms included); more is not a scrape
# A scrape has one to two thousand lines per engine (histogram buckets included). The parser costs microseconds a
# line, and a paste that does not parse whole is parsed again line by line: 2 MB of one-character lines cost
# seconds of server CPU. Counting the lines first bounds the parsing at twice this many lines per paste.
MAX_SCRAPE_LINES = 30_000
MAX_COUNT = 10**9  # requests one engine could hold running or waiting; beyond it a line is misread or made up
MAX_PREEMPTIONS = 10**15
MAX_BLOCKS = 10**10
MAX_BLOCK_SIZE = 2**20
KV_FULL = 0.95  # usage at or above this counts as a full pool (vLLM's own watermark keeps a few blocks free)

# vLLM's default max_num_seqs for `vllm serve` (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py, v0.34.0):
# 256, or 1024 on a GPU of 70 GiB or more that is not an A100 or a GB10 (and on every GPU of 160 GiB or more); twice
# either with --performance-mode throughput; 128 on a CPU (times the world size) and in SchedulerConfig itself. The
# V0 engine's was 256.
DEFAULT_MAX_NUM_SEQS = (128, 256, 512, 1024, 2048)
_DEFAULTS_WORDS = (
    "256, or 1024 on a GPU of 70 GiB or more that is not an A100 or a GB10, twice that with --performance-mode "
    "throughput, 128 on a CPU"
)

BINDS_KV_POOL = "kv_pool"
BINDS_MAX_NUM_SEQS = "max_num_seqs"
BINDS_NEITHER = "neither"
BINDS_UNKNOWN = "unknown"
_PRESSURE = {BINDS_KV_POOL: 3, BINDS_MAX_NUM_SEQS: 2, BINDS_NEITHER: 1, BINDS_UNKNOWN: 0}

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SWAPPED = "vllm:num_requests_swapped"  # V0 only
KV_NEW = "vllm:kv_cache_usage_perc"  # vLLM 0.9.2 and later
# 0.9.1 and earlier (and V0); beside the new name, deprecated, in 0.9.2-0.10; hidden in 0.11; removed in 0.12
KV_OLD = "vllm:gpu_cache_usage_perc"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"  # vLLM 0.20 and later; reason "capacity" or "deferred"
_REASON_FIELDS = {"capacity": "waiting_capacity", "deferred": "waiting_deferred"}
PREEMPTIONS = "vllm:num_preemptions_total"
_PREEMPTION_SAMPLES = (PREEMPTIONS, "vllm:num_preemptions")  # a paste without TYPE lines keeps what it has
CACHE_CONFIG = "vllm:cache_config_info"

FIX_KV_POOL = (
    "Give the KV pool more room: raise --gpu-memory-utilization, store the cache in fp8 with "
    "--kv-cache-dtype fp8, or spread the model over more GPUs with --tensor-parallel-size; lower "
    "--max-model-len if a few very long requests hold most of the blocks."
)
FIX_MAX_NUM_SEQS = (
    "Raise --max-num-seqs: the batch is full while the KV pool still has room, so more requests can run at once."
)
FIX_NONE = "No flag to change: nothing is waiting, so the server keeps up with its traffic."
FIX_BUDGET = (
    "No limit is at its cap: scrape again under the same load; if requests keep waiting with room in both, "
    "raise --max-num-batched-tokens (the token budget) so prompts are admitted faster."
)
FIX_DEFERRED = (
    "No memory or seat flag to change: the waiting requests are deferred (a LoRA adapter beyond --max-loras, a KV "
    "transfer in progress, a blocked status), none waits for capacity."
)
FIX_UNKNOWN = "Paste the whole /metrics output (curl -s http://HOST:8000/metrics) to get a verdict."


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """One engine's figures (one (model_name, engine) label pair); None where the scrape does not say."""

    engine: str | None
    model: str | None
    running: int | None = None
    waiting: int | None = None
    waiting_capacity: int | None = None  # vllm:num_requests_waiting_by_reason{reason="capacity"} (0.20 and later)
    waiting_deferred: int | None = None  # vllm:num_requests_waiting_by_reason{reason="deferred"}
    swapped: int | None = None  # V0's swapped-out requests
    kv_cache_usage: float | None = None  # 0..1
    preemptions: int | None = None  # since the server started
    preemptions_since_earlier: int | None = None  # the counter's rise since the earlier scrape, when one is given
    binding: str = BINDS_UNKNOWN
    reason: str = ""

    @property
    def label(self) -> str:
        """How a note names this engine: "engine 1 (Qwen/Qwen3-8B)"."""
        name = f"engine {self.engine}" if self.engine is not None else "the engine"
        return f"{name} ({self.model})" if self.model else name


@dataclass(frozen=True, slots=True)
class VllmMetrics:
    """What a pasted vLLM /metrics scrape says, and which limit binds; see the module docstring."""

    running: int | None = None  # summed over engines
    waiting: int | None = None  # summed over engines
    waiting_capacity: int | None = None  # summed over engines, when the scrape has vllm:num_requests_waiting_by_reason
    waiting_deferred: int | None = None  # summed over engines, likewise
    swapped: int | None = None  # summed over engines (V0 only)
    kv_cache_usage: float | None = None  # 0..1, the highest engine's
    preemptions: int | None = None  # summed over engines, since start
    preemptions_since_earlier: int | None = None  # summed over engines, when an earlier scrape is given
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None  # the limit the verdict used (None: not known)
    max_num_seqs_source: str | None = None  # "scrape", "argument" or "vLLM's default"
    model: str | None = None  # when the scrape serves one model
    models: tuple[str, ...] = ()
    naming: str | None = None  # the usage's name: "new" (kv_cache_usage_perc) or "old" (gpu_cache_usage_perc)
    kv_metric: str | None = None  # the metric the usage was read from
    release: str | None = None  # the releases the names point to, in words
    engines: tuple[EngineMetrics, ...] = ()
    binding: str = BINDS_UNKNOWN
    reason: str = ""
    fix: str = FIX_UNKNOWN
    error: str | None = None  # set when the paste cannot be read as a vLLM scrape; a user-facing sentence
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def binding_words(self) -> str:
        return _BINDING_WORDS[self.binding]


_BINDING_WORDS = {
    BINDS_KV_POOL: "the KV pool",
    BINDS_MAX_NUM_SEQS: "max_num_seqs",
    BINDS_NEITHER: "neither",
    BINDS_UNKNOWN: "cannot tell",
}


def _failed(error: str, notes: list[str] | None = None) -> VllmMetrics:
    return VllmMetrics(error=error, notes=tuple(notes or ()))


def _as_text(text: object) -> tuple[str | None, str | None]:
    """(the paste as text, None) or (None, the error sentence)."""
    if text is None:
        return None, "Nothing was pasted. Paste the output of `curl -s http://HOST:8000/metrics`."
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if len(raw) > MAX_SCRAPE_BYTES:
            return None, _too_big(len(raw))
        if b"\x00" in raw:
            return None, _BINARY
        return raw.decode("utf-8", errors="replace"), None
    if not isinstance(text, str):
        return None, f"Expected the scrape as text, got {type(text).__name__}. Paste the /metrics output."
    if len(text) > MAX_SCRAPE_BYTES:  # each character is at least one byte
        return None, _too_big(len(text.encode("utf-8", errors="replace")))
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_SCRAPE_BYTES:
        return None, _too_big(size)
    return text, None


def _too_big(size: int) -> str:
    return (
        f"The paste is {size / 1e6:,.1f} MB, more than the {MAX_SCRAPE_BYTES / 1e6:.0f} MB this reader takes; "
        "a vLLM /metrics scrape is tens of KB. Paste only vLLM's lines, e.g. "
        "`curl -s http://HOST:8000/metrics | grep '^vllm:'`."
    )


def _too_many_lines(lines: int) -> str:
    return (
        f"The paste has {lines:,} lines, more than the {MAX_SCRAPE_LINES:,} this reader takes; a vLLM /metrics "
        "scrape has one to two thousand per engine. Paste only vLLM's lines, e.g. "
        "`curl -s http://HOST:8000/metrics | grep '^vllm:'`."
    )


_BINARY = "The paste looks like binary data, not text. Paste the text that `curl -s http://HOST:8000/metrics` prints."


def _looks_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    odd = sum(1 for c in text if (c < " " and c not in "\t\r\n") or c == "\ufffd")
    return odd > max(8, len(text) // 20)


def _samples(text: str) -> tuple[list[tuple[str, dict[str, str], float]], int, int | None]:
    """Every sample as (name, labels, value); the number of lines skipped and the first skipped line's number.

    The whole text goes through prometheus_client's parser first; when it fails (a log line or a code fence
    pasted in between), each line is parsed on its own and the lines the parser refuses are skipped. Lines end
    at "\n" only, as the parser reads them (a "\r" before it is dropped), so the caller's line count bounds both.
    """
    try:
        return (
            [(s.name, dict(s.labels), float(s.value)) for f in text_string_to_metric_families(text) for s in f.samples],
            0,
            None,
        )
    except Exception:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on what a learner pastes
        pass
    out: list[tuple[str, dict[str, str], float]] = []
    skipped, first = 0, None
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip() or line.startswith("#"):
            continue
        try:
            for family in text_string_to_metric_families(line + "\n"):
                out.extend((s.name, dict(s.labels), float(s.value)) for s in family.samples)
        except Exception:  # noqa: BLE001 - same as above: this line is not Prometheus text
            skipped += 1
            first = number if first is None else first
    return out, skipped, first


MAX_LABEL_CHARS = 200  # a model name or engine index echoed in a note or a row is cut to this many characters


def _short(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _label(labels: dict[str, str], key: str) -> str | None:
    value = labels.get(key)
    return None if value is None else _short(value)


def _count(value: float, high: int) -> int | None:
    if not math.isfinite(value) or value < 0 or value > high:
        return None
    return int(round(value))


def _int_label(labels: dict[str, str], key: str, high: int) -> int | None:
    text = labels.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    number = _count(value, high)
    return number if number and number == value else None


def _verdict(e: EngineMetrics, limit: int | None, assumed: bool) -> tuple[str, str]:
    """(binding, reason) for one engine; the rule is the module docstring's."""
    missing = [
        n
        for n, v in ((RUNNING, e.running), (WAITING, e.waiting), ("the KV-cache usage", e.kv_cache_usage))
        if v is None
    ]
    if missing:
        return BINDS_UNKNOWN, f"The scrape lacks {', '.join(missing)}: the binding limit cannot be told."
    assert e.running is not None and e.waiting is not None and e.kv_cache_usage is not None
    usage = f"{e.kv_cache_usage:.1%}"
    if e.waiting == 0:
        return BINDS_NEITHER, f"No request is waiting ({e.running} running, KV cache {usage} used): no limit binds."
    if e.waiting_capacity == 0:
        return BINDS_NEITHER, (
            f'{e.waiting} requests wait, but none for capacity ({WAITING_BY_REASON} reason="capacity" is 0): '
            f"they are deferred, not short of seats or blocks ({e.running} running, KV cache {usage} used)."
        )
    waiting = _for_capacity(e)
    at_seq_limit = limit is not None and e.running >= limit
    if e.kv_cache_usage >= KV_FULL:
        return BINDS_KV_POOL, (
            f"{waiting} wait while the KV cache is {usage} used: the pool is full, so the scheduler "
            "cannot give a new request its blocks."
        )
    if at_seq_limit:
        which = f"vLLM's default max_num_seqs {limit}" if assumed else f"max_num_seqs ({limit})"
        return BINDS_MAX_NUM_SEQS, (
            f"{waiting} wait while {e.running} run, which is {which}, and the KV cache is only "
            f"{usage} used: the batch is full, not the pool."
        )
    rising = e.preemptions if e.preemptions_since_earlier is None else e.preemptions_since_earlier
    if rising:
        when = "since it started" if e.preemptions_since_earlier is None else "since the earlier scrape"
        return BINDS_KV_POOL, (
            f"{waiting} wait and the engine has preempted {rising:,} times {when}: the pool ran out "
            f"(a preemption frees blocks, so the usage reads {usage} just after one)."
        )
    seqs = f"running {e.running} of max_num_seqs {limit}" if limit is not None else f"{e.running} running"
    return BINDS_NEITHER, (
        f"{waiting} wait, but neither limit is at its cap (KV cache {usage} used, {seqs}, no "
        "preemptions): new requests are admitted at the token budget's pace, or a long prompt needs more free "
        "blocks than are left."
    )


def _for_capacity(e: EngineMetrics) -> str:
    """'12 requests' or, when the scrape splits the queue by reason, '12 requests (of 14 waiting) for capacity'."""
    if e.waiting_capacity is None:
        return f"{e.waiting} requests"
    if e.waiting_capacity == e.waiting:
        return f"{e.waiting} requests, all for capacity,"
    return f"{e.waiting_capacity} requests for capacity (of {e.waiting} waiting)"


def _fix(binding: str, waiting: int | None, capacity: int | None = None) -> str:
    if binding == BINDS_NEITHER and waiting and capacity == 0:
        return FIX_DEFERRED
    if binding == BINDS_KV_POOL:
        return FIX_KV_POOL
    if binding == BINDS_MAX_NUM_SEQS:
        return FIX_MAX_NUM_SEQS
    if binding == BINDS_NEITHER:
        return FIX_NONE if not waiting else FIX_BUDGET
    return FIX_UNKNOWN


# What the KV-usage names (and vllm:num_requests_swapped, vllm:num_requests_waiting_by_reason) say of the release.
RELEASE_BOTH = (
    "vLLM 0.9.2 to 0.10 (the old and the new names side by side, the old ones deprecated), or 0.11 run with "
    "--show-hidden-metrics-for-version=0.10"
)
RELEASE_NEW = "vLLM 0.11 or later (vllm:kv_cache_usage_perc alone)"
RELEASE_BY_REASON = "vLLM 0.20 or later (vllm:kv_cache_usage_perc and vllm:num_requests_waiting_by_reason)"
RELEASE_OLD = (
    "vLLM 0.9.1 or earlier (vllm:gpu_cache_usage_perc alone; 0.9.2 added vllm:kv_cache_usage_perc beside it, 0.11 "
    "hid the old name and 0.12 removed it)"
)
RELEASE_V0 = "the V0 engine (vllm:gpu_cache_usage_perc and vllm:num_requests_swapped; V1 never exported the latter)"


# vLLM renamed the prefix-cache counters with the KV usage (0.9.2) and retired the old names with it (hidden in
# 0.11, removed in 0.12), so either pair dates a scrape cut before its KV-usage line.
_OLD_NAMES = (KV_OLD, "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits")
_NEW_NAMES = (KV_NEW, "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")


def _family(name: str) -> str:
    """A sample's metric name: a counter's samples carry _total and _created."""
    for suffix in ("_total", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _release(names: set[str]) -> tuple[str | None, str | None, str | None]:
    """(naming, the KV metric read, the releases the names point to)."""
    families = {_family(n) for n in names} | names
    old, new = any(n in families for n in _OLD_NAMES), any(n in families for n in _NEW_NAMES)
    kv = KV_NEW if KV_NEW in names else KV_OLD if KV_OLD in names else None
    naming = {KV_NEW: "new", KV_OLD: "old", None: None}[kv]
    if old and new:
        release = RELEASE_BOTH
    elif new:
        release = RELEASE_BY_REASON if WAITING_BY_REASON in names else RELEASE_NEW
    elif old:
        release = RELEASE_V0 if SWAPPED in names else RELEASE_OLD
    else:
        release = None
    return naming, kv, release


def read_vllm_metrics(text: object, max_num_seqs: int | None = None, earlier: object = None) -> VllmMetrics:
    """Read a vLLM /metrics scrape; never raises on what a learner pastes (see the module docstring).

    ``max_num_seqs``: the server's --max-num-seqs when the learner knows it (a scrape does not say it).
    ``earlier``: a scrape of the same server taken before ``text``; its preemption counters are subtracted.
    """
    try:
        before: dict[tuple[str | None, str | None], int] | None = None
        before_note = None
        if earlier is not None and not (isinstance(earlier, str) and not earlier.strip()):
            old = _read(earlier, None, None)
            if not old.engines:
                before_note = f"The earlier scrape is left aside: {old.error or 'it has no vLLM figures.'}"
            else:
                before = {(e.model, e.engine): e.preemptions for e in old.engines if e.preemptions is not None}
        result = _read(text, max_num_seqs, before)
        return replace(result, notes=(*result.notes, before_note)) if before_note else result
    except Exception as exc:  # noqa: BLE001 - last guard: a page must never show a traceback
        return _failed(
            f"The scrape could not be read ({type(exc).__name__}). Paste the /metrics output exactly as curl prints it."
        )


def _read(text: object, max_num_seqs: object, before: dict[tuple[str | None, str | None], int] | None) -> VllmMetrics:
    body, error = _as_text(text)
    if error is not None or body is None:
        return _failed(error or "Nothing was pasted.")
    if not body.strip():
        return _failed("The paste is empty. Paste the output of `curl -s http://HOST:8000/metrics`.")
    lines = body.count("\n") + (not body.endswith("\n"))  # before any parsing: it bounds the parser's work
    if lines > MAX_SCRAPE_LINES:
        return _failed(_too_many_lines(lines))
    if _looks_binary(body):
        return _failed(_BINARY)
    notes: list[str] = []
    limit_arg: int | None = None
    if max_num_seqs is not None:
        if not is_whole(max_num_seqs) or not 1 <= max_num_seqs <= MAX_COUNT:
            notes.append(f"max_num_seqs={_short(repr(max_num_seqs))} is not a positive whole number; it is ignored.")
        else:
            limit_arg = int(max_num_seqs)

    samples, skipped, first_skipped = _samples(body)
    if skipped:
        lines = "1 line is" if skipped == 1 else f"{skipped:,} lines are"
        notes.append(f"{lines} not Prometheus text and skipped (the first: line {first_skipped}).")
    if not samples:
        return _failed(
            "No Prometheus metrics found in the paste. Paste what `curl -s http://HOST:8000/metrics` prints: "
            "lines such as `vllm:num_requests_running{...} 3.0`.",
            notes,
        )
    vllm = [s for s in samples if s[0].startswith("vllm:")]
    if not vllm:
        return _failed(
            f"The scrape holds {len(samples):,} metrics but none named `vllm:…`: it is not from a vLLM server "
            "(a router or another engine answers on that port). Scrape the vLLM server's own /metrics.",
            notes,
        )
    names = {name for name, _, _ in vllm}
    naming, kv_metric, release = _release(names)

    # One record per (model_name, engine); labels other than these two do not split a series.
    per: dict[tuple[str | None, str | None], dict[str, float]] = {}
    blocks = block_size = scraped_limit = None
    for name, labels, value in vllm:
        if name.endswith("_config_info"):
            blocks = _int_label(labels, "num_gpu_blocks", MAX_BLOCKS) or blocks
            block_size = _int_label(labels, "block_size", MAX_BLOCK_SIZE) or block_size
            scraped_limit = _int_label(labels, "max_num_seqs", MAX_COUNT) or scraped_limit
            continue
        field = {RUNNING: "running", WAITING: "waiting", SWAPPED: "swapped", kv_metric: "kv"}.get(name)
        if field is None and name in _PREEMPTION_SAMPLES:
            field = "preemptions"
        if field is None and name == WAITING_BY_REASON:
            field = _REASON_FIELDS.get(labels.get("reason", ""))
        if field is None:
            continue
        key = (_label(labels, "model_name"), _label(labels, "engine"))
        per.setdefault(key, {})[field] = value

    if scraped_limit is not None:
        limit, source = scraped_limit, "scrape"
        if limit_arg is not None and limit_arg != scraped_limit:
            notes.append(f"The scrape says max_num_seqs {scraped_limit}; the {limit_arg} given is ignored.")
    elif limit_arg is not None:
        limit, source = limit_arg, "argument"
    else:
        limit, source = None, None

    engines: list[EngineMetrics] = []
    for (model, engine), fields in sorted(per.items(), key=lambda kv: (kv[0][0] or "", _engine_order(kv[0][1]))):
        who = f"engine {engine}" if engine is not None else "the engine"
        values: dict[str, float | int | None] = {}
        for field, high in (
            ("running", MAX_COUNT),
            ("waiting", MAX_COUNT),
            ("waiting_capacity", MAX_COUNT),
            ("waiting_deferred", MAX_COUNT),
            ("swapped", MAX_COUNT),
            ("preemptions", MAX_PREEMPTIONS),
        ):
            raw = fields.get(field)
            values[field] = None if raw is None else _count(raw, high)
            if raw is not None and values[field] is None:
                notes.append(f"{_FIELD_METRIC[field]} of {who} reads {raw!r}, which no server reports; it is left out.")
        kv = fields.get("kv")
        if kv is not None and not (math.isfinite(kv) and 0.0 <= kv <= 1.0):
            notes.append(
                f"{kv_metric} of {who} reads {kv!r}; vLLM reports it as a fraction from 0 to 1, so it is left out."
            )
            kv = None
        record = EngineMetrics(
            engine=engine,
            model=model,
            running=values["running"],  # type: ignore[arg-type]
            waiting=values["waiting"],  # type: ignore[arg-type]
            waiting_capacity=values["waiting_capacity"],  # type: ignore[arg-type]
            waiting_deferred=values["waiting_deferred"],  # type: ignore[arg-type]
            swapped=values["swapped"],  # type: ignore[arg-type]
            kv_cache_usage=kv,
            preemptions=values["preemptions"],  # type: ignore[arg-type]
        )
        if before is not None and record.preemptions is not None:
            then = before.get((model, engine))
            if then is None:
                notes.append(f"The earlier scrape has no preemption counter for {record.label}.")
            elif then > record.preemptions:
                notes.append(
                    f"{record.label.capitalize()}'s preemption counter fell from {then:,} to "
                    f"{record.preemptions:,}: the server restarted between the scrapes, so they are not compared."
                )
            else:
                record = replace(record, preemptions_since_earlier=record.preemptions - then)
        engine_limit = limit
        if engine_limit is None and record.running in DEFAULT_MAX_NUM_SEQS:
            engine_limit = record.running
        binding, reason = _verdict(record, engine_limit, assumed=limit is None)
        if binding == BINDS_MAX_NUM_SEQS and limit is None:
            notes.append(
                f"max_num_seqs was not given, so vLLM's default {engine_limit} was assumed ({_DEFAULTS_WORDS}); "
                "pass the server's --max-num-seqs for a sure verdict."
            )
        if binding == BINDS_NEITHER and not record.waiting and record.preemptions:
            since = record.preemptions_since_earlier
            if since is None:
                notes.append(
                    f"{record.label.capitalize()} has preempted {record.preemptions:,} times since it started: the "
                    "KV pool ran out at some point. Scrape again under load and compare the counter."
                )
            elif since:
                notes.append(
                    f"{record.label.capitalize()} preempted {since:,} times since the earlier scrape, though nothing "
                    "waits now: the KV pool is at its edge."
                )
        engines.append(replace(record, binding=binding, reason=reason))

    models = tuple(dict.fromkeys(m for _, labels, _ in vllm if (m := _label(labels, "model_name"))))
    worst = max(engines, key=lambda e: _PRESSURE[e.binding]) if engines else None
    binding = worst.binding if worst else BINDS_UNKNOWN
    reason = worst.reason if worst else "The scrape has no running, waiting or KV-cache figures."
    if worst is not None and len(engines) > 1:
        reason = f"{worst.label.capitalize()}: {reason}"
    used_limit = limit
    if binding == BINDS_MAX_NUM_SEQS and limit is None and worst is not None:
        used_limit, source = worst.running, "vLLM's default"

    error = None
    if kv_metric is None:
        error = (
            "The scrape has vLLM metrics but no KV-cache usage (vllm:kv_cache_usage_perc, or "
            "vllm:gpu_cache_usage_perc up to vLLM 0.10): it was cut, or filtered. Paste the whole /metrics output."
        )
    usages = [e.kv_cache_usage for e in engines if e.kv_cache_usage is not None]
    return VllmMetrics(
        running=_sum(e.running for e in engines),
        waiting=_sum(e.waiting for e in engines),
        waiting_capacity=_sum(e.waiting_capacity for e in engines),
        waiting_deferred=_sum(e.waiting_deferred for e in engines),
        swapped=_sum(e.swapped for e in engines),
        kv_cache_usage=max(usages) if usages else None,
        preemptions=_sum(e.preemptions for e in engines),
        preemptions_since_earlier=_sum(e.preemptions_since_earlier for e in engines),
        num_gpu_blocks=blocks,
        block_size=block_size,
        max_num_seqs=used_limit,
        max_num_seqs_source=source,
        model=models[0] if len(models) == 1 else None,
        models=models,
        naming=naming,
        kv_metric=kv_metric,
        release=release,
        engines=tuple(engines),
        binding=binding,
        reason=reason,
        fix=_fix(binding, worst.waiting if worst else None, worst.waiting_capacity if worst else None),
        error=error,
        notes=tuple(dict.fromkeys(notes)),
    )


_FIELD_METRIC = {
    "running": RUNNING,
    "waiting": WAITING,
    "waiting_capacity": f'{WAITING_BY_REASON}{{reason="capacity"}}',
    "waiting_deferred": f'{WAITING_BY_REASON}{{reason="deferred"}}',
    "swapped": SWAPPED,
    "preemptions": PREEMPTIONS,
}


def _engine_order(engine: str | None) -> tuple[int, str]:
    if engine is None:
        return (-1, "")
    return (int(engine), "") if engine.isdigit() and len(engine) < 10 else (10**10, engine)


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _shown(value: int | float | None, kind: str = "count") -> str:
    if value is None:
        return "not in the scrape"
    if kind == "fraction":
        return "under 0.1%" if 0 < value < 0.0005 else f"{value:.1%}"
    return f"{value:,}"


def _per_engine(result: VllmMetrics, field: str, kind: str = "count") -> str:
    total = getattr(result, field)
    text = _shown(total, kind)
    if len(result.engines) > 1 and total is not None:
        parts = ", ".join(
            f"{e.engine if e.engine is not None else '?'}: {_shown(getattr(e, field), kind)}" for e in result.engines
        )
        text += f" (engines {parts})"
    return text


def metrics_rows(result: VllmMetrics) -> list[dict[str, str]]:
    """Display rows for a read scrape: [{"signal", "metric", "value", "meaning"}, ...]; [] when nothing was read.

    Values are plain strings ("87.5%", "1,024", "not in the scrape"); several engines add a per-engine
    breakdown in parentheses. The page shows them inert (they may echo a model name from the paste).
    """
    if not result.engines and result.num_gpu_blocks is None:
        return []
    kv_name = result.kv_metric or f"{KV_NEW} (or {KV_OLD} before 0.9.2)"
    several = len(result.engines) > 1
    rows = [
        {
            "signal": "Running requests",
            "metric": RUNNING,
            "value": _per_engine(result, "running"),
            "meaning": "Requests in the batch now" + (", summed over engines." if several else "."),
        },
        {
            "signal": "Waiting requests",
            "metric": WAITING,
            "value": _per_engine(result, "waiting"),
            "meaning": "Requests queued for a place in the batch; above 0, some limit binds.",
        },
        *(
            [
                {
                    "signal": "Waiting for capacity",
                    "metric": f'{WAITING_BY_REASON}{{reason="capacity"}}',
                    "value": _per_engine(result, "waiting_capacity")
                    + (f"; {result.waiting_deferred:,} deferred" if result.waiting_deferred is not None else ""),
                    "meaning": "The waiting requests short of seats or blocks; deferred ones (LoRA budget, KV "
                    "transfer, blocked status) wait for something else.",
                }
            ]
            if result.waiting_capacity is not None
            else []
        ),
        {
            "signal": "KV-cache usage",
            "metric": kv_name,
            "value": _per_engine(result, "kv_cache_usage", "fraction"),
            "meaning": "Share of the KV pool's blocks in use"
            + ("; the highest engine's, each engine has its own pool." if several else "; near 100% the pool is full."),
        },
        {
            "signal": "Preemptions",
            "metric": PREEMPTIONS,
            "value": _per_engine(result, "preemptions")
            + (
                f"; {result.preemptions_since_earlier:,} since the earlier scrape"
                if result.preemptions_since_earlier is not None
                else ""
            ),
            "meaning": "Requests evicted to free blocks since the server started; they are recomputed later.",
        },
    ]
    if result.swapped is not None:
        rows.append(
            {
                "signal": "Swapped requests",
                "metric": SWAPPED,
                "value": _per_engine(result, "swapped"),
                "meaning": "V0 only: requests whose KV blocks were moved to CPU memory.",
            }
        )
    if result.num_gpu_blocks is not None:
        rows.append(
            {
                "signal": "KV blocks",
                "metric": f"{CACHE_CONFIG} num_gpu_blocks",
                "value": f"{result.num_gpu_blocks:,}",
                "meaning": "Blocks in the KV pool"
                + (
                    f": {result.num_gpu_blocks * result.block_size:,} tokens at {result.block_size} per block."
                    if result.block_size
                    else "."
                ),
            }
        )
    elif result.block_size is not None:
        rows.append(
            {
                "signal": "Block size",
                "metric": f"{CACHE_CONFIG} block_size",
                "value": f"{result.block_size:,}",
                "meaning": "Tokens per KV block.",
            }
        )
    rows.append(
        {
            "signal": "Limit that binds",
            "metric": f"{WAITING}, {kv_name}, {RUNNING}, {PREEMPTIONS}",
            "value": result.binding_words,
            "meaning": result.reason,
        }
    )
    rows.append({"signal": "Flag to change", "metric": "", "value": "", "meaning": result.fix})
    return rows
