"""Load a local Hugging Face model folder into a CausalLM: config.json + safetensors, never pickle, no network.

A folder holds `config.json`, weights as one `model.safetensors` or shards listed in
`model.safetensors.index.json` (the layout `save_pretrained` writes), and a tokenizer. `.bin` / `.pt`
checkpoints are refused: unpickling can run arbitrary code (the reason safetensors exists). Every problem a
user can cause names the path or tensor key at fault.

Tokenizers: the demo model's `kvlab_tokenizer.json` (engine/model/tokenizer.py), else a Hugging Face
`tokenizer.json` through the optional `tokenizers` package, else None (prompts must then be token ids).

A server passes `allowed_roots` (and `max_bytes`): then the folder and every file the loader opens (config.json,
the index, each shard it names, the tokenizer) must resolve under one of those roots (engine/model/access.py;
'demo' is always allowed), and the weights must fit in `max_bytes` both on disk and in memory at the dtype
they load as, checked before any tensor is allocated. `allowed_roots=None` (the default) trusts the caller
with any local path, as a library should. A load that fails part-way keeps nothing alive: the half-filled
model is dropped from the traceback's frames before the error leaves.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.model import access
from engine.model.config import ModelConfig
from engine.model.deepseek import DeepseekCausalLM
from engine.model.llama import CausalLM
from engine.model.rope import rope_inv_freq
from engine.model.tokenizer import FILENAME as KVLAB_TOKENIZER
from engine.model.tokenizer import ByteBPETokenizer

DEMO_DIR = Path(__file__).resolve().parents[2] / "models" / "demo"
INDEX_FILE = "model.safetensors.index.json"
# Layers a server (a caller passing max_bytes) builds at most. Building costs about 2 ms of CPU per layer even on
# the meta device, and tiny layers pass any byte limit: a config.json claiming 200,000 layers of width 2 is 25 MB
# of weights and minutes of CPU. The deepest released checkpoints have about 130 layers (Llama 3.1 405B: 126).
MAX_SERVED_LAYERS = 256


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


class ModelTooLargeError(ValueError):
    """Weights larger than the caller's byte limit (`size` and `limit` in bytes, `what` says which size)."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} take {format_bytes(size)}, more than the limit of {format_bytes(limit)}")
        self.what, self.size, self.limit = what, size, limit


def format_bytes(n: int) -> str:
    """A byte count for people: '1.50 GiB', '3.2 MiB', '812 bytes'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,} bytes"


def _roots(model: str | Path, allowed_roots: Iterable[str | os.PathLike[str]] | None) -> tuple[Path, ...] | None:
    """The resolved roots for loading `model` ('demo' adds the demo folder), or None for no restriction."""
    if allowed_roots is None:
        return None
    return access.resolve_roots([*allowed_roots, *([DEMO_DIR] if str(model) == "demo" else [])])


def resolve_model_path(model: str | Path, allowed_roots: Iterable[str | os.PathLike[str]] | None = None) -> Path:
    """'demo' -> the embedded demo folder; anything else must be an existing local folder.

    With `allowed_roots` the folder is resolved and must lie under one of them; a missing, unreadable or
    outside folder is one ModelAccessError (so the answer says nothing about what exists elsewhere), and a
    leading ~ is not expanded."""
    roots = _roots(model, allowed_roots)
    if roots is not None:
        what = "that model folder"
        try:
            real = access.confine(DEMO_DIR if str(model) == "demo" else Path(model), roots, what)
        except FileNotFoundError:
            raise access.ModelAccessError(what) from None
        if not real.is_dir():
            raise access.ModelAccessError(what)
        return real
    path = DEMO_DIR if str(model) == "demo" else Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model folder {path} does not exist; pass a local Hugging Face folder (config.json + *.safetensors) "
            "or 'demo' (this engine never downloads)"
        )
    if not path.is_dir():
        raise ValueError(f"model path {path} is a file; pass the folder that holds config.json and the weights")
    return path


def _read_json(real: Path, what: str, shown: Path) -> Any:
    try:
        return json.loads(access.read_text(real, what))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{shown} is not valid JSON: {exc}") from None


def load_config(path: str | Path, allowed_roots: Iterable[str | os.PathLike[str]] | None = None) -> ModelConfig:
    """Read and validate `config.json` in a model folder (under `allowed_roots` when given)."""
    return _load_config(Path(path), None if allowed_roots is None else access.resolve_roots(allowed_roots))


def _load_config(path: Path, roots: tuple[Path, ...] | None) -> ModelConfig:
    cfg_file = path / "config.json"
    what = "config.json in that folder"
    real = access.existing(cfg_file, roots, what)
    if real is None:
        raise FileNotFoundError(f"{cfg_file} not found; a Hugging Face model folder needs a config.json")
    raw = _read_json(real, what, cfg_file)
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_file} must hold a JSON object, got {type(raw).__name__}")
    try:
        return ModelConfig.from_hf(raw)
    except ValueError as exc:
        raise ValueError(f"{cfg_file}: {exc}") from exc


def weight_files(path: Path, allowed_roots: Iterable[str | os.PathLike[str]] | None = None) -> list[Path]:
    """The safetensors files of a folder: the shards named by the index, or the single file(s).

    Each is returned as its checked real path (under `allowed_roots` when given): a shard name such as
    '../x.safetensors', an absolute path or a link that leads outside the roots is refused."""
    return list(_weight_files(Path(path), None if allowed_roots is None else access.resolve_roots(allowed_roots)))


def _checked(path: Path, roots: tuple[Path, ...] | None, what: str, files: dict[Path, int]) -> None:
    """Add the real path of one weights file and its size to `files` (a regular file under the roots)."""
    real = access.confine(path, roots, what)
    files[real] = access.file_size(real, what)


def _weight_files(path: Path, roots: tuple[Path, ...] | None) -> dict[Path, int]:
    """Real path -> size in bytes of every weights file, in loading order."""
    index = path / INDEX_FILE
    what = f"{INDEX_FILE} in that folder"
    real_index = access.existing(index, roots, what)
    if real_index is not None:
        try:
            names = sorted(set(_read_json(real_index, what, index)["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{index} is not a valid safetensors index (needs a 'weight_map'): {exc}") from None
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"{index} must map tensor names to shard file names")
        files: dict[Path, int] = {}
        for name in names:
            try:
                _checked(path / name, roots, f"shard {name!r} named by {INDEX_FILE}", files)
            except FileNotFoundError:
                raise FileNotFoundError(f"shard {path / name} listed in {index} is missing") from None
        return files
    found = sorted(path.glob("*.safetensors"))
    if not found:
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = f"; found {', '.join(pickled)} (pickle) which this loader refuses to unpickle" if pickled else ""
        raise FileNotFoundError(f"no *.safetensors weights in {path}{hint}; convert the checkpoint to safetensors")
    files = {}
    for f in found:
        _checked(f, roots, f"{f.name} in that folder", files)
    return files


# Hugging Face's tensors that one fused parameter of ours holds, in row order (vLLM's stacked_params_mapping).
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def checkpoint_layout(model: CausalLM) -> dict[str, tuple[str, slice]]:
    """Checkpoint key -> (our parameter, its rows) for every tensor a Hugging Face checkpoint of `model` holds.

    Unfused parameters map one to one (all rows); q/k/v land in consecutive rows of `qkv_proj` (Hq * D, then
    Hkv * D twice) and gate/up in `gate_up_proj` (intermediate_size each)."""
    cfg = model.config
    q_rows, kv_rows = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    rows = {"qkv_proj": (q_rows, kv_rows, kv_rows), "gate_up_proj": (cfg.intermediate_size,) * 2}
    layout: dict[str, tuple[str, slice]] = {}
    for name, param in model.named_parameters():
        module, _, leaf = name.rpartition(".")
        parent, _, fused = module.rpartition(".")
        if fused not in FUSED:
            layout[name] = (name, slice(0, param.shape[0]))
            continue
        start = 0
        for part, size in zip(FUSED[fused], rows[fused], strict=True):
            layout[f"{parent}.{part}.{leaf}"] = (name, slice(start, start + size))
            start += size
    return layout


def hf_state_dict(model: CausalLM) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face's names, fused parameters split back (views, not copies);
    a tied lm_head is left out, as `save_pretrained` does."""
    params = dict(model.named_parameters())
    return {key: params[name][rows] for key, (name, rows) in checkpoint_layout(model).items()}


def load_weights(model: CausalLM, files: list[Path]) -> None:
    """Copy every tensor of `files` into `model`, checking names and shapes; every tensor the model needs must
    be there (errors name the checkpoint's key). Fused parameters are filled row range by row range."""
    params = dict(model.named_parameters())
    layout = checkpoint_layout(model)
    tied = model.config.tie_word_embeddings
    loaded: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if key.endswith("rotary_emb.inv_freq"):
                    continue  # derived from the config, some old checkpoints store it
                if tied and key == "lm_head.weight":
                    continue  # the embedding matrix is the head
                if key not in layout:
                    raise ValueError(f"{file}: tensor {key!r} does not belong to a {model.config.architecture}")
                name, rows = layout[key]
                target = params[name][rows]
                tensor = f.get_tensor(key)
                if tuple(tensor.shape) != tuple(target.shape):
                    raise ValueError(
                        f"{file}: tensor {key!r} has shape {tuple(tensor.shape)} but the config implies "
                        f"{tuple(target.shape)}; config.json and the weights disagree"
                    )
                with torch.no_grad():
                    target.copy_(tensor)
                loaded.add(key)
    missing = sorted(set(layout) - loaded - ({"lm_head.weight"} if tied else set()))
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ValueError(f"weights in {files[0].parent} are missing {', '.join(map(repr, missing[:3]))}{more}")


def load_tokenizer(
    path: Path, config: ModelConfig, allowed_roots: Iterable[str | os.PathLike[str]] | None = None
) -> ByteBPETokenizer | HFTokenizer | None:
    """The folder's tokenizer, or None when it has none the engine can read (then prompts must be token ids)."""
    return _load_tokenizer(Path(path), config, None if allowed_roots is None else access.resolve_roots(allowed_roots))


def _load_tokenizer(path: Path, config: ModelConfig, roots: tuple[Path, ...] | None) -> Any:
    kvlab = access.existing(path / KVLAB_TOKENIZER, roots, f"{KVLAB_TOKENIZER} in that folder")
    if kvlab is not None:
        what = f"{KVLAB_TOKENIZER} in that folder"
        if access.file_size(kvlab, what) > access.MAX_METADATA_BYTES:
            raise ValueError(f"{what} is larger than {format_bytes(access.MAX_METADATA_BYTES)}")
        return ByteBPETokenizer.load(kvlab)  # the checked real path
    hf = access.existing(path / "tokenizer.json", roots, "tokenizer.json in that folder")
    if hf is not None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return None  # documented: without `tokenizers`, pass prompts as token ids
        eos = config.eos_token_ids[0] if config.eos_token_ids else None
        text = access.read_text(hf, "tokenizer.json in that folder")
        return HFTokenizer(Tokenizer.from_str(text), eos, config.bos_token_id)
    return None


def mla_attention_elements(config: ModelConfig) -> int:
    """Elements of one DeepseekCausalLM attention layer (engine/model/deepseek.py), from the config alone."""
    mla, h, heads = config.mla, config.hidden_size, config.num_attention_heads
    q_rows = heads * mla.qk_head_dim
    q = h * q_rows if mla.q_lora_rank is None else h * mla.q_lora_rank + mla.q_lora_rank * (1 + q_rows)
    kv = h * mla.latent_dim + mla.kv_lora_rank * (1 + heads * (mla.qk_nope_head_dim + mla.v_head_dim))
    return q + kv + heads * mla.v_head_dim * h  # + o_proj


def model_elements(config: ModelConfig) -> int:
    """Elements in CausalLM(config)'s parameters and buffers (all cast to the load dtype), from the config alone."""
    h, d = config.hidden_size, config.head_dim
    if config.mla is not None:
        layer = mla_attention_elements(config) + 3 * h * config.intermediate_size + 2 * h
        embeddings = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
        return config.num_hidden_layers * layer + embeddings + h + d // 2
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    attention = h * (q + 2 * kv) + q * h + (q + 2 * kv) * config.qkv_bias + h * config.o_bias
    layer = attention + 3 * h * config.intermediate_size + 2 * h  # + gate, up, down and two RMSNorm weights
    embeddings = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)  # embed_tokens, lm_head
    return config.num_hidden_layers * layer + embeddings + h + d // 2  # + the final norm, the rotary inv_freq


def load_model(
    model: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    allowed_roots: Iterable[str | os.PathLike[str]] | None = None,
    max_bytes: int | None = None,
) -> tuple[CausalLM | DeepseekCausalLM, ModelConfig, ByteBPETokenizer | HFTokenizer | None]:
    """Load a local HF folder (or 'demo') -> (model in eval mode, config, tokenizer or None).

    dtype None keeps float32 on CPU (bf16 matmuls are slow there) and bfloat16 on CUDA. The model holds
    no kernel choice: the engine that runs it names the backend in every step's attention plan.
    allowed_roots: every file opened must resolve under one of these folders ('demo' is always allowed);
    None trusts any local path. max_bytes: ModelTooLargeError, before anything is allocated, when the
    shards on disk or the parameters at `dtype` in memory exceed it (a bf16 checkpoint loaded as float32
    takes twice its file size); with it, a config of more than MAX_SERVED_LAYERS layers is refused too.
    """
    roots = _roots(model, allowed_roots)
    path = resolve_model_path(model, allowed_roots)
    config = _load_config(path, roots)
    files = _weight_files(path, roots)
    on_disk = sum(files.values())
    if max_bytes is not None and on_disk > max_bytes:
        raise ModelTooLargeError("the weights on disk", on_disk, max_bytes)
    if dtype is None:
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    # Sized from the config's numbers before any module is built: building even a meta-device model costs
    # milliseconds of CPU per layer, so a config.json claiming 200,000 layers took minutes to refuse.
    in_memory = model_elements(config) * dtype.itemsize
    if max_bytes is not None and in_memory > max_bytes:
        raise ModelTooLargeError(f"the weights in memory as {str(dtype).removeprefix('torch.')}", in_memory, max_bytes)
    if max_bytes is not None and config.num_hidden_layers > MAX_SERVED_LAYERS:
        raise ValueError(
            f"config.json: num_hidden_layers={config.num_hidden_layers:,} is more than the "
            f"{MAX_SERVED_LAYERS} layers this server builds (the deepest released checkpoints have about 130); "
            "point at a real checkpoint's folder"
        )
    with torch.device("meta"):  # DeepSeek-V2/V3 folders get the latent-attention model (engine/model/deepseek.py)
        net = (CausalLM if config.mla is None else DeepseekCausalLM)(config).to(dtype)  # shapes only
    try:
        net = net.to_empty(device=device)
        if config.tie_word_embeddings:  # materialising may untie the shared parameter; tie it again
            net.lm_head.weight = net.model.embed_tokens.weight
        # to_empty leaves the rotary buffer uninitialised; rebuild it in fp32 so low dtypes keep exact positions.
        if config.mla is not None:  # the rope key's frequencies (YaRN when the config scales them)
            net.inv_freq = net.rope_inv_freq().to(device)
        else:
            net.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling).to(device)
        load_weights(net, list(files))
        tokenizer = _load_tokenizer(path, config, roots)
    except BaseException as exc:
        # The traceback holds every frame below this one (load_weights' `model`, `params`, a tensor): clear
        # them and drop our own reference so a failed load frees its memory even while the error is kept.
        traceback.clear_frames(exc.__traceback__)
        del net
        raise
    return net.eval(), config, tokenizer
