"""The engine's public API: `from engine import LLM, SamplingParams, RequestOutput`.

`LLM` (engine/llm.py) serves a Llama-family model with continuous batching over a paged KV cache;
`SamplingParams` (engine/sampling_params.py, plain data) says how each request picks its tokens;
`RequestOutput` (engine/outputs.py) is what `LLM.generate` returns per prompt. config.py validates an
engine's limits once; the subsystems live in packages: core/ (requests, scheduler, blocks: bookkeeping, no
torch), worker/ (one step on the device: runner, the KV tensors, the sampler), model/ (the decoder and its
step inputs), attention/ and memory/.

The three names load on first use (PEP 562), so importing a subsystem such as `engine.core.block_manager`,
which runs this file first, does not load the model, the kernels or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.llm import LLM
    from engine.outputs import RequestOutput
    from engine.sampling_params import SamplingParams

# Each public name -> the module that defines it.
_HOMES = {"LLM": "engine.llm", "RequestOutput": "engine.outputs", "SamplingParams": "engine.sampling_params"}

__all__ = ["LLM", "RequestOutput", "SamplingParams"]


def __getattr__(name: str) -> object:
    """The public name `name`, imported from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
