"""The question bank: (id, prompt, options, index of the right option, explanation) per question.

Ids are "<page_id>.<name>"; a page's end-of-lesson check is every question whose id starts with its page
id. Figures are the checked ones from the course notes (vLLM paper, GQA and MQA papers, model configs).
"""

from __future__ import annotations

QUESTIONS: list[tuple[str, str, list[str], int, str]] = [
    # --- 1. bandwidth -------------------------------------------------------------------------------
    (
        "bandwidth.bound",
        "At batch size 1, what limits how fast a GPU generates the next token?",
        [
            "Peak FLOP/s of the tensor cores",
            "Memory bandwidth: every weight and the KV cache are read once per token",
            "The tokenizer",
            "PCIe transfers from the CPU",
        ],
        1,
        "each bf16 weight (2 bytes) read in a decode step is used for one multiply-add (2 FLOPs): about 1 FLOP "
        "per byte, far below the GPU's ridge point (≈ 295 FLOP/byte on an H100 SXM), so the step takes roughly "
        "(bytes moved) / (HBM bandwidth).",
    ),
    (
        "bandwidth.batch",
        "Why does batching many requests raise decode throughput?",
        [
            "Each weight read from memory is reused for every sequence in the batch",
            "It makes the KV cache smaller",
            "It lowers the GPU clock",
            "It removes the softmax",
        ],
        0,
        "weights are read once per step whatever the batch size, so their FLOPs per byte grow with the batch. "
        "Each sequence's KV is still read for it alone, so throughput levels off as the KV reads grow, and the "
        "batch stops growing where the KV cache of all those sequences no longer fits.",
    ),
    (
        "bandwidth.prefill",
        "A 2,000-token prompt is processed in one prefill step. Where does it sit on the roofline?",
        [
            "Far left: bandwidth-bound like decode",
            "Right of the ridge point: compute-bound, because each weight is reused for 2,000 tokens",
            "Exactly on the ridge point always",
            "Off the chart: prefill does not read weights",
        ],
        1,
        "prefill multiplies every weight by all 2,000 token vectors at once, about 2,000 FLOPs per bf16 weight "
        "byte, well past an H100's ridge point of ≈ 295 FLOP/byte. A prompt shorter than the ridge point "
        "(a few hundred tokens) would still be bandwidth-bound.",
    ),
    # --- 2. gqa ---------------------------------------------------------------------------------------
    (
        "gqa.kv_formula",
        "Which formula gives KV-cache bytes per token?",
        [
            "2 × layers × query heads × head dim × bytes",
            "2 × layers × KV heads × head dim × bytes",
            "layers × hidden size × bytes",
            "2 × vocabulary size × bytes",
        ],
        1,
        "K and V (the 2) are stored per layer for each KV head only; using query heads over-counts by the "
        "group factor — 4× for Llama-3-8B (32 query heads, 8 KV heads), 8× for Llama-3-70B (64 and 8).",
    ),
    (
        "gqa.mqa",
        "Multi-query attention (MQA) keeps how many KV heads per layer?",
        ["One", "As many as query heads", "Half the query heads", "Eight"],
        0,
        "MQA (Shazeer, 2019) shares a single K/V head across all query heads; GQA picks a number of groups "
        "between 1 (MQA) and the number of query heads (MHA).",
    ),
    (
        "gqa.read_once",
        "A GQA group has 4 query heads sharing one KV head. In one decode step, how many times does a good "
        "GQA kernel load that KV head's K/V tiles from memory (per layer)?",
        [
            "4 times: once for each query head of the group",
            "Once: the group's 4 query heads share each loaded tile",
            "Never: K and V are recomputed from the hidden state",
            "Only at the first decode step; later steps reuse that read",
        ],
        1,
        "the saving is in bandwidth too, not only capacity: one program handles all query heads of a group "
        "and loads each K/V tile once, instead of once per query head as repeated-KV MHA would.",
    ),
    # --- 3. packing -----------------------------------------------------------------------------------
    (
        "packing.waste",
        "Requests of lengths 10, 20 and 1,000 are padded into one batch. Roughly what fraction of the "
        "padded token slots hold real tokens?",
        ["About 35%", "About 97%", "About 50%", "100%"],
        0,
        "the padded batch is 3 × 1,000 = 3,000 slots for 1,030 real tokens (≈ 34%); attention work wastes "
        "even more because it grows with the square of the padded length.",
    ),
    (
        "packing.mask",
        "What lets unrelated requests share one packed tensor without seeing each other?",
        [
            "A block-diagonal attention mask over the packed sequence",
            "Sorting requests by length",
            "A larger batch size",
            "Dropout",
        ],
        0,
        "the block-diagonal bias lets each token attend only inside its own request's block (and causally "
        "within it), so one call over the true total length is exact.",
    ),
    # --- 4. fragmentation -----------------------------------------------------------------------------
    (
        "fragmentation.internal",
        "A server reserves 2,048 KV slots per request; a request finishes with 300 tokens in all (prompt and "
        "output). What are the 1,748 slots it never used called (vLLM's terms)?",
        ["Internal fragmentation", "External fragmentation", "Prefix cache", "Swap space"],
        0,
        "they sat inside the request's own reservation but were never filled; slots not filled yet while "
        "the request is still running are 'reserved', and gaps between reservations are 'external'.",
    ),
    (
        "fragmentation.share",
        "In the vLLM paper's Fig. 2, what share of KV memory held actual token states in Orca (Max), the "
        "re-implementation that reserves the maximum length for every request?",
        ["About 20%", "About 96%", "About 60%", "About 4%"],
        0,
        "Kwon et al. (SOSP 2023, Fig. 2): Orca (Max) 20.4%, Orca (Pow2) 26.8%, and 38.2% even for Orca (Oracle), "
        "which knows each final length in advance; vLLM's paged cache 96.3%.",
    ),
    # --- 5. paged -------------------------------------------------------------------------------------
    (
        "paged.waste",
        "With PagedAttention, where can a sequence waste KV memory?",
        [
            "Only in its last, partly filled block",
            "In every block",
            "Between blocks, like external fragmentation",
            "Nowhere — paging has no waste",
        ],
        0,
        "blocks are allocated on demand and can live anywhere in the pool, so at most block_size − 1 slots "
        "per sequence are idle.",
    ),
    (
        "paged.block_size",
        "What do you trade when you make blocks smaller?",
        [
            "Less waste, but longer block tables and less efficient kernels",
            "More waste and shorter tables",
            "Nothing: smaller is always better",
            "Model accuracy",
        ],
        0,
        "small blocks waste less of the last block but need more table entries and use the GPU's parallelism "
        "less well when reading KV; the vLLM paper (§7.2) found block sizes 16–128 best on ShareGPT and 16–32 "
        "on Alpaca, and uses 16 by default.",
    ),
    (
        "paged.sharing",
        "Two requests start with the same system prompt. What does a paged cache let them do?",
        [
            "Point their block tables at the same physical blocks for the prefix (prefix caching)",
            "Nothing: each request needs its own copy",
            "Share the sampled tokens",
            "Skip the decode phase",
        ],
        0,
        "the prefix's full blocks are stored once and reference-counted (vLLM V1 caches prefixes by default). "
        "Copy-on-write is the other use of shared blocks: for sequences forked from one request (parallel "
        "sampling, beam search), a shared, partly filled block is copied when one of them writes into it.",
    ),
    # --- 6. diagnosis ---------------------------------------------------------------------------------
    (
        "diagnosis.weights_fit",
        "The weights fit in GPU memory with room to spare, yet the server fails at start-up or under load. "
        "What is the usual culprit?",
        [
            "KV cache for the configured context × concurrent sequences",
            "The tokenizer's vocabulary",
            "Python's garbage collector",
            "Too few CPU cores",
        ],
        0,
        "the KV cache grows with context length and batch. If even one request of max_model_len does not fit "
        "the KV memory left after profiling, vLLM V1 refuses to start: '... GiB KV cache is needed, which is "
        "larger than the available KV cache memory ... the estimated maximum model length is ...'.",
    ),
    (
        "diagnosis.fix",
        "Which change does NOT reduce the KV memory a deployment needs?",
        [
            "Raising max_model_len",
            "Serving a GQA model",
            "Storing KV in fp8",
            "Lowering the number of concurrent sequences",
        ],
        0,
        "a longer maximum context lets each sequence hold more KV tokens; a GQA model (fewer KV heads), fp8 KV "
        "(1 byte instead of 2) and fewer concurrent sequences each shrink the KV footprint.",
    ),
    # --- 8. playground --------------------------------------------------------------------------------
    (
        "playground.join",
        "In continuous batching, when can a new request join the running batch?",
        [
            "At any step, as soon as the token budget and free KV blocks allow",
            "Only when every running request has finished",
            "Only at server start",
            "Never: batches are fixed",
        ],
        0,
        "the scheduler admits waiting requests every step, bounded by the token budget and by free blocks; "
        "finished requests free their blocks immediately.",
    ),
    # --- 7. golden rules (the review quiz) --------------------------------------------------------------
    (
        "golden_rules.decode",
        "Rule 1: decode is …",
        ["bandwidth-bound", "compute-bound", "network-bound", "bound by the tokenizer"],
        0,
        "each new token streams all weights and the batch's KV cache through the memory system for a few "
        "FLOPs per byte.",
    ),
    (
        "golden_rules.static",
        "Rule 3: should a server reserve max_model_len KV slots for every request up front?",
        [
            "No — allocate KV in blocks as tokens arrive",
            "Yes — it avoids fragmentation",
            "Yes, but only for short prompts",
            "Only on GPUs with more than 80 GB",
        ],
        0,
        "static reservation strands reserved, internal and external waste; in the vLLM paper's Orca baselines "
        "only 20.4% (Max) to 38.2% (Oracle) of KV memory held token states (Fig. 2).",
    ),
    (
        "golden_rules.gqa",
        "Rule 4: all else equal, which model is cheaper to serve at long context?",
        [
            "One with grouped-query attention (fewer KV heads)",
            "One with more KV heads than query heads",
            "One with multi-head attention (KV heads = query heads)",
            "Head layout does not matter",
        ],
        0,
        "KV bytes per token scale with the number of KV heads: Llama-3-8B's 8 KV heads need 128 KiB per "
        "token, Llama-2-7B's 32 need 512 KiB.",
    ),
    (
        "golden_rules.engine",
        "Rule 5: what should serve an LLM in production?",
        [
            "A paged, continuously batching engine such as vLLM",
            "A loop calling model.generate() per request",
            "One process per user",
            "A static batch padded to the longest request",
        ],
        0,
        "paging plus continuous batching let many more sequences share the GPU; the vLLM paper reports "
        "2–4× the throughput of FasterTransformer and Orca at the same latency.",
    ),
    (
        "golden_rules.calculator",
        "A memory calculator multiplies by query heads instead of KV heads for Llama-3-8B. Its KV estimate is …",
        ["4× too high", "4× too low", "correct", "8× too low"],
        0,
        "Llama-3-8B has 32 query heads and 8 KV heads, so counting query heads over-states KV by 32 / 8 = 4×.",
    ),
    (
        "golden_rules.budget",
        "The weights take 15 GiB of a 24 GiB GPU at gpu_memory_utilization=0.9. About how much can vLLM give "
        "the KV cache?",
        ["Under 6.6 GiB: 0.9 × 24 − 15, minus activations and non-torch memory", "24 GiB", "9 GiB", "Nothing"],
        0,
        "vLLM may use 0.9 × total and subtracts the profiled peak (weights and activations) and non-torch "
        "memory. vLLM issue 10517 (Llama-3.1-8B, RTX 3090, total 23.58 GiB): 0.9 × 23.58 − 17.06 GiB peak − "
        "0.35 GiB non-torch = 3.81 GiB of KV.",
    ),
    (
        "golden_rules.padding",
        "Why pack variable-length requests instead of padding them?",
        [
            "Padding wastes memory and attention compute that grows with the square of the longest length",
            "Packing makes the model more accurate",
            "Padding is not supported by GPUs",
            "Packing removes the KV cache",
        ],
        0,
        "a block-diagonal mask over the packed tokens computes exactly the same outputs with zero padding.",
    ),
    (
        "golden_rules.blocks",
        "What bounds a paged sequence's wasted KV slots?",
        ["block_size − 1", "max_model_len", "the batch size", "the vocabulary size"],
        0,
        "only the last block of each sequence can be partly empty.",
    ),
]
