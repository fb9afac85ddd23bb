"""The memory model's public API: the model and GPU catalog, their specs, and the footprint arithmetic.

`from engine.memory import MODELS, GPUS` gives the catalog (engine/memory/catalog.py), whose entries are the
`ModelSpec` / `GpuSpec` of engine/memory/specs.py; a model is described per layer by KV-cache kind
(engine/memory/layers.py, vLLM V1's specs) and `model_from_config` reads one from a config.json
(engine/memory/hf_config.py). How vLLM V1 groups the layers over one block pool, and what one request holds
(`kv_request_bytes`), is engine/memory/kv_pool.py. The byte counts (`kv_bytes_per_token`, `weight_bytes`,
`activation_bytes`, `kv_blocks_from_budget`, `kv_budget_bytes`, `serving_footprint`) come from
engine/memory/footprint.py, the one place the course and the engine compute them, on top of vLLM V1's
start-up profiling (engine/memory/startup.py) and the units and dtype sizes of engine/memory/units.py. The
roofline (engine/memory/roofline.py) imports by path. Nothing here imports torch; the timings on this
machine are course material and live in lessons/measure.py.
"""

from engine.memory.catalog import (
    GPUS,
    MODELS,
    Catalog,
    UnknownKeyError,
    get_gpu,
    get_model,
    resolve_gpu,
    resolve_model,
)
from engine.memory.footprint import (
    NCCL_EXTRA_BYTES,
    NON_TORCH_BYTES,
    ServingFootprint,
    activation_bytes,
    kv_blocks_from_budget,
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    serving_footprint,
    weight_bytes,
)
from engine.memory.hf_config import model_from_config
from engine.memory.kv_pool import (
    KVGroup,
    attention_block_size,
    blocks_per_request,
    default_in_flight_tokens,
    kv_groups,
    kv_request_bytes,
    max_concurrency,
    pool_bytes_per_block,
)
from engine.memory.layers import (
    DEFAULT_IN_FLIGHT_TOKENS,
    MAX_CONCURRENT_BATCHES,
    ChunkedLocal,
    FullAttention,
    LatentAttention,
    LayerKind,
    LinearState,
    SlidingWindow,
    max_in_flight_tokens,
)
from engine.memory.specs import WEIGHT_FORMATS, GpuSpec, ModelSpec, custom_model, estimate_params
from engine.memory.startup import (
    CUDA_GRAPH_BYTES_PER_LAYER,
    check_startup_args,
    cuda_graph_bytes,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    kv_budget_from_profile,
    startup_error_text,
)
from engine.memory.units import DTYPE_BYTES, GiB, KiB, MiB, dtype_bytes, kv_bytes

__all__ = [
    "CUDA_GRAPH_BYTES_PER_LAYER",
    "Catalog",
    "ChunkedLocal",
    "DEFAULT_IN_FLIGHT_TOKENS",
    "MAX_CONCURRENT_BATCHES",
    "DTYPE_BYTES",
    "FullAttention",
    "GPUS",
    "GiB",
    "GpuSpec",
    "KVGroup",
    "KiB",
    "LatentAttention",
    "LayerKind",
    "LinearState",
    "MODELS",
    "MiB",
    "ModelSpec",
    "NCCL_EXTRA_BYTES",
    "NON_TORCH_BYTES",
    "ServingFootprint",
    "SlidingWindow",
    "UnknownKeyError",
    "WEIGHT_FORMATS",
    "activation_bytes",
    "attention_block_size",
    "blocks_per_request",
    "default_in_flight_tokens",
    "check_startup_args",
    "cuda_graph_bytes",
    "cudagraph_capture_sizes",
    "custom_model",
    "default_max_num_batched_tokens",
    "default_max_num_seqs",
    "dtype_bytes",
    "estimate_params",
    "get_gpu",
    "get_model",
    "kv_blocks_from_budget",
    "kv_budget_bytes",
    "kv_budget_from_profile",
    "kv_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "kv_groups",
    "kv_request_bytes",
    "max_concurrency",
    "max_in_flight_tokens",
    "model_from_config",
    "pool_bytes_per_block",
    "resolve_gpu",
    "resolve_model",
    "serving_footprint",
    "startup_error_text",
    "weight_bytes",
]
