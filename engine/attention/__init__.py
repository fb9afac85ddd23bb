"""The xformers-style front door: attn_bias.py (BlockDiagonalMask and its causal variants) and fmha.py
(`memory_efficient_attention` over the 3-, 4- and 5-D layouts), both running on kernels.ops."""
