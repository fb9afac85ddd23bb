"""Execution: what runs one scheduled step on the device.

runner.py (ModelRunner: a step's inputs, one forward pass, the sampled tokens), forward_meta.py (the
step's positions, logit rows and the attention plan kernels.ops builds for it), kv_cache.py (the paged K/V
tensors every layer writes, with their fp8 scales) and device.py (which device, and how much memory it has).
"""
