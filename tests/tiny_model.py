"""A random tiny Llama checkpoint in the Hugging Face folder layout, shared by the engine and page tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.model.loader import hf_state_dict
from engine.model.tokenizer import ByteBPETokenizer


def make_tiny_model(folder: Path, text: str) -> Path:
    """Write a tiny GQA Llama (hidden 32, 2 layers, 4/2 heads) and a byte-BPE tokenizer trained on `text`."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = ByteBPETokenizer.train(text, vocab_size=300)
    tok.save(folder)
    config = ModelConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_ids=(tok.eos_token_id,),
    )
    torch.manual_seed(0)
    model = CausalLM(config)
    weights = hf_state_dict(model)  # checkpoint names and order: the same draws as unfused q/k/v, gate/up
    for p in weights.values():
        torch.nn.init.normal_(p, std=0.2)
    save_file({k: v.detach().contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config.to_hf()))
    return folder
