"""The memory model's public API: the model and GPU catalog, their specs, and the footprint arithmetic.

`from engine.memory import MODELS, GPUS` gives the catalog (engine/memory/catalog.py: `MODELS`, `GPUS`,
`get_model`, `get_gpu`, `resolve_model`, `resolve_gpu`, `KiB` / `MiB` / `GiB`), whose entries are the
`ModelSpec` / `GpuSpec` of engine/memory/specs.py (also `custom_model`, `model_from_config`). The byte
counts (`kv_bytes`, `kv_bytes_per_token`, `weight_bytes`, `activation_bytes`, `kv_blocks_from_budget`,
`kv_budget_bytes`, `serving_footprint`) come from engine/memory/footprint.py, the one place the course and
the engine compute them, on top of vLLM V1's start-up profiling (engine/memory/startup.py: default token
budget, CUDA graph sizes and memory, `kv_budget_from_profile`, the start-up errors). The roofline
(engine/memory/roofline.py) and the timings on this machine (engine/memory/measure.py) import by path.
"""

from engine.memory import catalog, footprint, specs, startup
from engine.memory.catalog import *  # noqa: F403
from engine.memory.footprint import *  # noqa: F403
from engine.memory.specs import *  # noqa: F403
from engine.memory.startup import *  # noqa: F403

__all__ = [*catalog.__all__, *specs.__all__, *footprint.__all__, *startup.__all__]
