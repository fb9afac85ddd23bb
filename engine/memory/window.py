"""Former home of `kv_blocks_per_seq`, kept only while engine/llm.py and the runner still import it here.

The sliding-window rule and its block count live in engine/core/sliding_window.py; import it from there.
"""

from __future__ import annotations

from engine.core.sliding_window import kv_blocks_per_seq

__all__ = ["kv_blocks_per_seq"]
