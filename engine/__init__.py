"""The engine's public API: `from engine import LLM, SamplingParams, RequestOutput`.

`LLM` (engine/llm.py) serves a Llama-family model with continuous batching over a paged KV cache;
`SamplingParams` (engine/sampling.py) says how each request picks its tokens; `RequestOutput`
(engine/outputs.py) is what `LLM.generate` returns per prompt. config.py validates an engine's limits once;
the subsystems live in packages: core/ (requests, scheduler, blocks: bookkeeping, no torch), worker/ (one
step on the device: runner, step metadata, the KV tensors), model/, attention/, memory/ and sim/.
"""

from engine.llm import LLM
from engine.outputs import RequestOutput
from engine.sampling import SamplingParams

__all__ = ["LLM", "RequestOutput", "SamplingParams"]
