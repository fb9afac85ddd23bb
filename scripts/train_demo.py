"""Train the embedded demo model: a tiny GQA Llama on the Python standard library's own source code.

Reproducible: fixed seed, fixed step count, a corpus every Python install carries (the top-level `*.py`
files of the running interpreter's standard library, sorted by name). Different Python versions ship
slightly different files, so the corpus size and hash are recorded in train_log.json next to the weights.
The model is written in the Hugging Face folder layout (config.json + model.safetensors + tokenizer), so
`LLM(model="demo")` loads it through the same loader as any real checkpoint.

    python -m scripts.train_demo --out models/demo            # ~12 minutes on 2 CPU cores
    python -m scripts.train_demo --steps 20 --out /tmp/demo   # smoke test
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from engine.model import CausalLM
from engine.model_config import ModelConfig
from engine.tokenizer import ByteBPETokenizer

SEED = 0
VOCAB_SIZE = 1024
CONTEXT = 256  # tokens per training window, also the model's max_position_embeddings
BATCH = 16  # windows per step -> 4096 tokens per step


def load_corpus() -> tuple[list[str], list[str]]:
    """The standard library's top-level modules, sorted by file name: (texts, names)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    if not files:
        raise SystemExit(f"no *.py files found in the standard library folder {stdlib}")
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return texts, [p.name for p in files]


def demo_config(tokenizer: ByteBPETokenizer) -> ModelConfig:
    """About 3.3M parameters: 4 layers, 4 query heads sharing 2 K/V heads (GQA), tied embeddings."""
    return ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_ids=(tokenizer.eos_token_id,),
    )


def init_weights(model: CausalLM) -> None:
    """GPT-2 style init: N(0, 0.02), residual output projections scaled by 1 / sqrt(2 * layers)."""
    num_layers = model.config.num_hidden_layers
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * num_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            torch.nn.init.normal_(p, std=std)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def main() -> None:
    """Train and write the demo model folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/demo")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    texts, files = load_corpus()
    text = "\n".join(texts)
    t0 = time.time()
    tokenizer = ByteBPETokenizer.train(text, VOCAB_SIZE)
    ids = []
    for doc in texts:  # EOS after each file, so the model learns where a module ends
        ids.extend(tokenizer.encode(doc))
        ids.append(tokenizer.eos_token_id)
    data = torch.tensor(ids, dtype=torch.int64)
    split = int(0.98 * len(data))
    train, val = data[:split], data[split:]
    print(f"corpus {len(files)} files, {len(text):,} chars, {len(data):,} tokens "
          f"({len(text) / len(data):.2f} chars/token), tokenizer {time.time() - t0:.1f}s", file=sys.stderr)  # fmt: skip

    config = demo_config(tokenizer)
    model = CausalLM(config, backend="torch")
    init_weights(model)
    num_params = sum(p.numel() for p in model.parameters())
    print(f"model {num_params / 1e6:.2f}M parameters", file=sys.stderr)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(SEED)

    def batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, len(source) - CONTEXT - 1, (BATCH,), generator=gen)
        windows = torch.stack([source[s : s + CONTEXT + 1] for s in starts.tolist()])  # [B, CONTEXT + 1]
        return windows[:, :-1], windows[:, 1:]

    @torch.no_grad()
    def val_loss() -> float:
        model.eval()
        windows = val[: (len(val) - 1) // CONTEXT * CONTEXT + 1]
        x = windows[:-1].view(-1, CONTEXT)[:16]  # [n, CONTEXT]
        y = windows[1:].view(-1, CONTEXT)[:16]
        loss = F.cross_entropy(model.forward_full(x).flatten(0, 1), y.flatten()).item()
        model.train()
        return loss

    log = []
    t0 = time.time()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup=min(50, args.steps // 10 + 1))
        x, y = batch(train)
        loss = F.cross_entropy(model.forward_full(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 25 == 0 or step == args.steps - 1:
            entry = {"step": step, "train_loss": round(loss.item(), 4), "elapsed_s": round(time.time() - t0, 1)}
            if step % 100 == 0 or step == args.steps - 1:
                entry["val_loss"] = round(val_loss(), 4)
            log.append(entry)
            print(json.dumps(entry), file=sys.stderr)

    # Hugging Face layout; tied embeddings mean lm_head.weight is not stored (as save_pretrained does).
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_config = config.to_hf() | {"torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    tokenizer.save(out)
    corpus_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    meta = {
        "seed": SEED, "steps": args.steps, "batch": BATCH, "context": CONTEXT, "peak_lr": args.lr,
        "threads": args.threads, "parameters": num_params, "python": platform.python_version(),
        "torch": torch.__version__, "corpus_files": len(files), "corpus_chars": len(text),
        "corpus_tokens": len(data), "corpus_sha256": corpus_hash, "train_seconds": round(time.time() - t0, 1),
        "log": log,
    }  # fmt: skip
    (out / "train_log.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
