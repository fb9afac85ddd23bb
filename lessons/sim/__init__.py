"""Serving simulator: request traces, KV memory policies (static Max / Pow2 / Oracle, paged), the loop, metrics."""
