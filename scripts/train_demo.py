"""Train the embedded demo model: a tiny GQA Llama on the Python standard library's own source code.

Reproducible: fixed seed, fixed step count, a corpus every Python install carries (the top-level `*.py`
files of the running interpreter's standard library, sorted by name). Different Python versions ship
slightly different files, so the corpus size and hash are recorded in train_log.json next to the weights.
The model is written in the Hugging Face folder layout (config.json + model.safetensors + tokenizer), so
`LLM(model="demo")` loads it through the same loader as any real checkpoint.

    python -m scripts.train_demo --out models/demo             # 2 cores x 11.5 minutes of CPU time
    python -m scripts.train_demo --steps N --decay-start S       # replay a run's schedule (train_log.json)
    python -m scripts.train_demo --steps 20 --out /tmp/demo    # smoke test
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning: on a shared machine spinning burns others' CPU (and ours).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from engine.model.config import ModelConfig  # noqa: E402
from engine.model.llama import CausalLM  # noqa: E402
from engine.model.loader import hf_state_dict  # noqa: E402
from engine.model.rope import apply_rope, rope_tables  # noqa: E402
from engine.model.tokenizer import ByteBPETokenizer  # noqa: E402

SEED = 0
VOCAB_SIZE = 1024
CONTEXT = 256  # tokens per training window, also the model's max_position_embeddings
BATCH = 8  # windows per step -> 2048 tokens per step
WARMUP = 30
DECAY_FRACTION = 0.2  # the last 20% of steps decay the learning rate linearly to 10% of the peak


def load_corpus() -> tuple[list[str], list[str]]:
    """The standard library's top-level modules, sorted by file name: (texts, names)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    if not files:
        raise SystemExit(f"no *.py files found in the standard library folder {stdlib}")
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return texts, [p.name for p in files]


def demo_config(tokenizer: ByteBPETokenizer) -> ModelConfig:
    """About 2.6M parameters: 4 layers, 4 query heads sharing 2 K/V heads (GQA), tied embeddings."""
    return ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=256,
        intermediate_size=512,
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
    # Checkpoint order and shapes (q, k, v, o, gate, up, down), so fusing q/k/v and gate/up changes no draw.
    for name, p in hf_state_dict(model).items():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * num_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            torch.nn.init.normal_(p, std=std)


def train_logits(model: CausalLM, input_ids: torch.Tensor) -> torch.Tensor:
    """Whole windows input_ids [B, T] -> logits [B, T, vocab], causal, with autograd.

    The model's own forward serves packed tokens over a paged cache under inference mode; training runs this
    plain causal pass over the same modules instead (their forwards keep autograd intact).
    """
    T = input_ids.shape[1]
    cos, sin = rope_tables(torch.arange(T, device=input_ids.device), model.inv_freq, model.lm_head.weight.dtype)
    h = model.model.embed_tokens(input_ids)  # [B, T, hidden]
    for layer in model.model.layers:
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        q, k, v = attn.qkv_proj(x).split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)  # one fused matmul
        q = apply_rope(q.unflatten(-1, (attn.num_heads, attn.head_dim)), cos, sin)  # [B, T, Hq, D]
        k = apply_rope(k.unflatten(-1, (attn.num_kv_heads, attn.head_dim)), cos, sin)  # [B, T, Hkv, D]
        v = v.unflatten(-1, (attn.num_kv_heads, attn.head_dim))  # [B, T, Hkv, D]
        group = attn.num_heads // attn.num_kv_heads
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)  # [B, T, Hq, D]
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=attn.scale
        )  # [B, Hq, T, D]
        h = h + attn.o_proj(out.transpose(1, 2).flatten(-2))  # [B, T, hidden]
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(model.model.norm(h))  # [B, T, vocab]


def lr_at(step: int, peak: float, decay_start: int | None, decay_steps: int) -> float:
    """Warm-up, stable, decay (WSD): linear warm-up, constant peak, then linear decay to 10% of the peak."""
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    if decay_start is None or step < decay_start:
        return peak
    return peak * (1.0 - 0.9 * min(1.0, (step - decay_start + 1) / decay_steps))


def main() -> None:
    """Train and write the demo model folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/demo")
    parser.add_argument("--steps", type=int, default=None, help="total steps (replay a run: also give --decay-start)")
    parser.add_argument("--decay-start", type=int, default=None, help="step where the learning-rate decay begins")
    parser.add_argument(
        "--max-cpu-seconds", type=float, default=1380.0, help="CPU-time budget when --steps is not given"
    )
    parser.add_argument("--max-seconds", type=float, default=2700.0, help="wall-time cap when --steps is not given")
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
    print(
        f"corpus {len(files)} files, {len(text):,} chars, {len(data):,} tokens "
        f"({len(text) / len(data):.2f} chars/token), tokenizer {time.time() - t0:.1f}s",
        file=sys.stderr,
    )

    config = demo_config(tokenizer)
    model = CausalLM(config)
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
        loss = F.cross_entropy(train_logits(model, x).flatten(0, 1), y.flatten()).item()
        model.train()
        return loss

    # Fixed --steps: decay over the last DECAY_FRACTION of them (or from --decay-start), fully reproducible.
    # Budget (default): train at the peak until 80% of the CPU budget (2 cores x 11.5 min: the compute of
    # 11.5 idle minutes, however busy the shared machine is) or of the wall cap, then decay. The recorded
    # steps / decay_start replay the same schedule and data order on any machine.
    steps, decay_start = args.steps, args.decay_start
    if steps is not None and decay_start is None:
        decay_start = steps - max(1, int(DECAY_FRACTION * steps))
    log = []
    t0, cpu0 = time.time(), time.process_time()
    step = 0
    while steps is None or step < steps:
        used = max((time.process_time() - cpu0) / args.max_cpu_seconds, (time.time() - t0) / args.max_seconds)
        if steps is None and used > 1 - DECAY_FRACTION:
            decay_start = step
            steps = step + max(1, int(DECAY_FRACTION / (1 - DECAY_FRACTION) * step))
        decay_steps = (steps - decay_start) if steps is not None and decay_start is not None else 1
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.lr, decay_start, decay_steps)
        x, y = batch(train)
        loss = F.cross_entropy(train_logits(model, x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        last = steps is not None and step == steps - 1
        if step % 25 == 0 or last:
            entry = {
                "step": step,
                "train_loss": round(loss.item(), 4),
                "elapsed_s": round(time.time() - t0, 1),
                "cpu_s": round(time.process_time() - cpu0, 1),
            }
            if step % 100 == 0 or last:
                entry["val_loss"] = round(val_loss(), 4)
            log.append(entry)
            print(json.dumps(entry), file=sys.stderr)
        step += 1

    # Hugging Face layout (fused q/k/v and gate/up split back); a tied lm_head is not stored (as save_pretrained).
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in hf_state_dict(model).items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_config = config.to_hf() | {"torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    tokenizer.save(out)
    corpus_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    meta = {
        "seed": SEED,
        "steps": steps,
        "decay_start": decay_start,
        "batch": BATCH,
        "context": CONTEXT,
        "peak_lr": args.lr,
        "threads": args.threads,
        "parameters": num_params,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "corpus_files": len(files),
        "corpus_chars": len(text),
        "corpus_tokens": len(data),
        "corpus_sha256": corpus_hash,
        "train_seconds": round(time.time() - t0, 1),
        "train_cpu_seconds": round(time.process_time() - cpu0, 1),
        "log": log,
    }
    (out / "train_log.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
