"""The memory model's public API: the model and GPU catalog, and the footprint arithmetic.

`from engine.memory import MODELS, GPUS` gives the catalog (engine/memory/catalog.py); the byte counts
(KV per token, weights, activations, budget -> blocks, a whole server's footprint) come from
engine/memory/footprint.py, the one place the course and the engine compute them. The roofline
(engine/memory/roofline.py) and the timings on this machine (engine/memory/measure.py) import by path.
"""

from engine.memory.footprint import *  # noqa: F403
from engine.memory.footprint import __all__  # noqa: F401
