"""Load a local Hugging Face model folder into a CausalLM: config.json + safetensors, never pickle, no network.

A folder holds `config.json`, weights as one `model.safetensors` or shards listed in
`model.safetensors.index.json` (the layout `save_pretrained` writes), and a tokenizer. `.bin` / `.pt`
checkpoints are refused: unpickling can run arbitrary code (the reason safetensors exists). Every problem a
user can cause names the path or tensor key at fault.

Tokenizers: the demo model's `kvlab_tokenizer.json` (engine/model/tokenizer.py), else a Hugging Face
`tokenizer.json` through the optional `tokenizers` package, else None (prompts must then be token ids).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.model.rope import rope_inv_freq
from engine.model.tokenizer import FILENAME as KVLAB_TOKENIZER
from engine.model.tokenizer import ByteBPETokenizer

DEMO_DIR = Path(__file__).resolve().parents[2] / "models" / "demo"
INDEX_FILE = "model.safetensors.index.json"


class HFTokenizer:
    """Thin wrapper giving a `tokenizers.Tokenizer` the engine's encode / decode / eos_token_id interface."""

    def __init__(self, tok: Any, eos_token_id: int | None, bos_token_id: int | None) -> None:
        self._tok = tok
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (including added tokens)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Text -> ids; `add_bos` prepends the BOS id unless the tokenizer's post-processor already did."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_token_id, *ids] if add_bos and self.bos_token_id is not None else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)


def resolve_model_path(model: str | Path) -> Path:
    """'demo' -> the embedded demo folder; anything else must be an existing local folder."""
    path = DEMO_DIR if str(model) == "demo" else Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model folder {path} does not exist; pass a local Hugging Face folder (config.json + *.safetensors) "
            "or 'demo' (this engine never downloads)"
        )
    if not path.is_dir():
        raise ValueError(f"model path {path} is a file; pass the folder that holds config.json and the weights")
    return path


def load_config(path: str | Path) -> ModelConfig:
    """Read and validate `config.json` in a model folder."""
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file} not found; a Hugging Face model folder needs a config.json")
    try:
        raw = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{cfg_file} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_file} must hold a JSON object, got {type(raw).__name__}")
    try:
        return ModelConfig.from_hf(raw)
    except ValueError as exc:
        raise ValueError(f"{cfg_file}: {exc}") from exc


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a folder: the shards named by the index, or the single file(s)."""
    index = path / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{index} is not a valid safetensors index (needs a 'weight_map'): {exc}") from exc
        files = [path / name for name in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"shard {f} listed in {index} is missing")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = f"; found {', '.join(pickled)} (pickle) which this loader refuses to unpickle" if pickled else ""
        raise FileNotFoundError(f"no *.safetensors weights in {path}{hint}; convert the checkpoint to safetensors")
    return files


def load_weights(model: CausalLM, files: list[Path]) -> None:
    """Copy every tensor of `files` into `model`, checking names and shapes; all parameters must be covered."""
    params = dict(model.named_parameters())
    tied = model.config.tie_word_embeddings
    loaded: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if key.endswith("rotary_emb.inv_freq"):
                    continue  # derived from the config, some old checkpoints store it
                if tied and key == "lm_head.weight":
                    continue  # the embedding matrix is the head
                if key not in params:
                    raise ValueError(f"{file}: tensor {key!r} does not belong to a {model.config.architecture}")
                tensor = f.get_tensor(key)
                if tuple(tensor.shape) != tuple(params[key].shape):
                    raise ValueError(
                        f"{file}: tensor {key!r} has shape {tuple(tensor.shape)} but the config implies "
                        f"{tuple(params[key].shape)}; config.json and the weights disagree"
                    )
                with torch.no_grad():
                    params[key].copy_(tensor)
                loaded.add(key)
    if tied:
        loaded.add("lm_head.weight")
    missing = sorted(set(params) - loaded)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ValueError(f"weights in {files[0].parent} are missing {', '.join(map(repr, missing[:3]))}{more}")


def load_tokenizer(path: Path, config: ModelConfig) -> ByteBPETokenizer | HFTokenizer | None:
    """The folder's tokenizer, or None when it has none the engine can read (then prompts must be token ids)."""
    if (path / KVLAB_TOKENIZER).is_file():
        return ByteBPETokenizer.load(path / KVLAB_TOKENIZER)
    if (path / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return None  # documented: without `tokenizers`, pass prompts as token ids
        eos = config.eos_token_ids[0] if config.eos_token_ids else None
        return HFTokenizer(Tokenizer.from_file(str(path / "tokenizer.json")), eos, config.bos_token_id)
    return None


def load_model(
    model: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> tuple[CausalLM, ModelConfig, ByteBPETokenizer | HFTokenizer | None]:
    """Load a local HF folder (or 'demo') -> (model in eval mode, config, tokenizer or None).

    dtype None keeps float32 on CPU (bf16 matmuls are slow there) and bfloat16 on CUDA. The model holds
    no kernel choice: the engine that runs it names the backend in every step's ForwardMeta.
    """
    path = resolve_model_path(model)
    config = load_config(path)
    files = weight_files(path)
    if dtype is None:
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    with torch.device("meta"):
        net = CausalLM(config)
    net = net.to_empty(device=device).to(dtype)
    if config.tie_word_embeddings:  # materialising may untie the shared parameter; tie it again
        net.lm_head.weight = net.model.embed_tokens.weight
    # to_empty leaves the rotary buffer uninitialised; rebuild it in fp32 so low dtypes keep exact positions.
    net.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling).to(device)
    load_weights(net, files)
    return net.eval(), config, load_tokenizer(path, config)
