"""Model and GPU catalog: the published numbers the memory model and the simulator start from.

Every model entry copies its architecture from the model's published Hugging Face ``config.json`` (the repo
is named in ``source``); ``num_params`` is the parameter count the model card / safetensors index reports.
GPU entries use datasheet bandwidth and dense (no sparsity) bf16 tensor throughput. ``memory_bytes`` is the total
``nvidia-smi`` reports (an "80 GB" A100 has 80 GiB, 81920 MiB, of HBM); ``cuda_memory_bytes`` is the smaller total
CUDA reports (``torch.cuda.mem_get_info``, the figure in PyTorch's out-of-memory message and vLLM's logs), which is
what vLLM sizes from, each with the public log it comes from. No public log of an H200's, a B200's or an H20's CUDA
total naming the card was found, so those entries fall back to nvidia-smi's MiB figure. The MI300X's total is what
ROCm reports through the same PyTorch call.

`MODELS` and `GPUS` are read-only mappings: a lookup of an unknown key raises `UnknownKeyError` (both a
KeyError and a ValueError) whose message lists the keys that exist.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from engine.memory.hf_config import model_from_config
from engine.memory.published import PUBLISHED
from engine.memory.specs import GpuSpec, ModelSpec, custom_model
from engine.memory.units import GiB, MiB

_DEMO_CONFIG = Path(__file__).resolve().parents[2] / "models" / "demo" / "config.json"

V = TypeVar("V")


class UnknownKeyError(KeyError, ValueError):
    """A catalog has no entry under this key; the message names the keys it has."""

    def __str__(self) -> str:
        return str(self.args[0])  # KeyError's own str() would print the message's repr, quotes and all


class Catalog(Mapping[str, V]):
    """A read-only name -> spec table (dict-like: iteration, `in`, `.items()`), whose misses list the names."""

    __slots__ = ("_entries", "_kind", "_hint")

    def __init__(self, kind: str, entries: Mapping[str, V], hint: str = "") -> None:
        self._entries = dict(entries)  # a private copy: nothing outside can add or replace an entry
        self._kind = kind
        self._hint = hint

    def __getitem__(self, key: str) -> V:
        try:
            return self._entries[key]
        except (KeyError, TypeError):  # TypeError: an unhashable key is just as unknown
            known = ", ".join(self._entries)
            raise UnknownKeyError(f"unknown {self._kind} {key!r}; known {self._kind}s: {known}{self._hint}") from None

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._entries
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Catalog({self._kind!r}, [{', '.join(self._entries)}])"


def _m(
    name: str,
    source: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    inter: int,
    vocab: int,
    ctx: int,
    params: float,
    **kw: Any,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hidden // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        max_context=ctx,
        num_params=int(params),
        source=source,
        **kw,
    )


def _load_demo() -> ModelSpec:
    """The in-repo demo model, read from its config.json when it has been trained, else the fallback."""
    # Fallback: the shape the demo is trained with (4 layers, 4 query / 2 KV heads), used until it is trained.
    fallback = custom_model(
        "demo",
        num_layers=4,
        hidden_size=256,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=512,
        vocab_size=4096,
        max_context=256,
        tie_word_embeddings=True,
        source="models/demo/config.json (fallback until the demo model is trained)",
    )
    if not _DEMO_CONFIG.is_file():
        return fallback
    try:
        return model_from_config(_DEMO_CONFIG.read_text(), name="demo", source="models/demo/config.json")
    except (OSError, ValueError, TypeError):
        return fallback  # a half-written config during training must not break every page


def _today(key: str) -> ModelSpec:
    """A catalog entry read from its published config.json (engine/memory/published.py), as a learner's paste is."""
    entry = PUBLISHED[key]
    return model_from_config(entry.config(), name=entry.name, source=entry.repo)


# fmt: off
# name, HF repo of the config.json, layers, hidden, heads, kv_heads, intermediate, vocab, max_position_embeddings,
# published parameter count. Qwen2.5 configs carry sliding_window but use_sliding_window=false, so None here.
MODELS: Catalog[ModelSpec] = Catalog("model", {
    "llama-2-7b": _m("Llama-2-7B", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000, 4096, 6.738e9),
    "llama-2-13b": _m("Llama-2-13B", "meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000, 4096, 13.016e9),
    "llama-2-70b": _m("Llama-2-70B", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000, 4096, 68.977e9),
    "llama-3-8b": _m("Llama-3-8B", "meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, 8192, 8.030e9),
    "llama-3-70b": _m("Llama-3-70B", "meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, 8192,
                      70.554e9),
    "llama-3.1-8b": _m("Llama-3.1-8B", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072,
                       8.030e9),
    "llama-3.1-70b": _m("Llama-3.1-70B", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072,
                        70.554e9),
    "llama-3.1-405b": _m("Llama-3.1-405B", "meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 53248, 128256,
                         131072, 405.853e9),
    "mistral-7b": _m("Mistral-7B", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768, 7.242e9,
                     sliding_window=4096),
    "mixtral-8x7b": _m("Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
                       46.703e9, num_experts=8, experts_per_token=2),
    "qwen2.5-0.5b": _m("Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936, 32768, 0.494e9,
                       tie_word_embeddings=True),
    "qwen2.5-7b": _m("Qwen2.5-7B", "Qwen/Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, 131072, 7.616e9),
    "qwen2.5-72b": _m("Qwen2.5-72B", "Qwen/Qwen2.5-72B", 80, 8192, 64, 8, 29568, 152064, 131072, 72.706e9),
    # Today's models, per-layer KV kinds and MoE shapes read from their published config.json.
    **{key: _today(key) for key in PUBLISHED},
    "demo": _load_demo(),
}, hint=" (or build one with custom_model)")

GPUS: Catalog[GpuSpec] = Catalog("GPU", {
    "a100-40gb": GpuSpec("A100 40GB SXM", 40960 * MiB, 1.555e12, 312e12, "NVIDIA A100 datasheet (2021)",
                         int(39.50 * GiB), "TianheWu/CoSeR#10: A100 40GB, 'total capacity of 39.50 GiB'"),
    "a100-80gb": GpuSpec("A100 80GB SXM", 81920 * MiB, 2.039e12, 312e12, "NVIDIA A100 datasheet (2021)",
                         int(79.25 * GiB), "levihsu/OOTDiffusion#235: A100 80GB, '79.25 GiB total capacity'"),
    "h100-sxm": GpuSpec("H100 SXM 80GB", 81559 * MiB, 3.35e12, 989e12, "NVIDIA H100 datasheet (2023)",
                        int(79.11 * GiB), "vllm#27508: H100 80GB, 'total capacity of 79.11 GiB'"),
    "h200": GpuSpec("H200 141GB SXM", 143771 * MiB, 4.8e12, 989e12, "NVIDIA H200 datasheet (2024)"),
    "l4": GpuSpec("L4 24GB", 23034 * MiB, 300e9, 121e12, "NVIDIA L4 datasheet (2023)",
                  int(22.03 * GiB), "ArcInstitute/evo2#190: L4, 'total capacity of 22.03 GiB'"),
    "rtx-4090": GpuSpec("RTX 4090 24GB", 24564 * MiB, 1.008e12, 165e12, "NVIDIA Ada GPU architecture whitepaper",
                        int(23.64 * GiB), "ali-vilab/VGen#104: RTX 4090, 'total capacity of 23.64 GiB'"),
    "rtx-3090": GpuSpec("RTX 3090 24GB", 24576 * MiB, 936e9, 71e12, "NVIDIA Ampere GA102 whitepaper",
                        int(23.58 * GiB), "vllm#10517: RTX 3090, vLLM's 'total_gpu_memory=23.58GiB'"),
    # GPUs a class meets now. B200: HGX B200 per GPU (180 GB HBM3e, 8 TB/s, 2.25 PFLOPS dense bf16); nvidia-smi shows
    # 183359 MiB. H20: the export Hopper (96 GB HBM3, 4.0 TB/s, 148 TFLOPS dense bf16), nvidia-smi 97871 MiB. No public
    # log naming either card with CUDA's total was found, so both fall back to nvidia-smi's figure.
    "b200": GpuSpec("B200 180GB SXM", 183359 * MiB, 8.0e12, 2250e12, "NVIDIA HGX B200 datasheet (2025)"),
    "h20": GpuSpec("H20 96GB", 97871 * MiB, 4.0e12, 148e12, "NVIDIA H20 product brief (2024)"),
    "mi300x": GpuSpec("MI300X 192GB", 196608 * MiB, 5.3e12, 1307.4e12, "AMD Instinct MI300X datasheet (2023)",
                      int(191.98 * GiB), "vllm#7951: MI300X x8, 'total capacity of 191.98 GiB' (ROCm)"),
    "rtx-5090": GpuSpec("RTX 5090 32GB", 32607 * MiB, 1.792e12, 209.5e12, "NVIDIA RTX Blackwell GPU architecture "
                        "whitepaper (2025)", int(31.36 * GiB),
                        "TrajectoryCrafter/TrajectoryCrafter#20: RTX 5090, 'total capacity of 31.36 GiB'"),
    # Illustrative laptop/desktop CPU: dual-channel DDR5 bandwidth, AVX-512/AMX-less bf16 matmul throughput.
    "cpu": GpuSpec("CPU (typical desktop)", 32 * GiB, 60e9, 1e12, "illustrative: dual-channel DDR5-4800"),
})
# fmt: on


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalog key (case-insensitive), with the list of known keys on a miss."""
    return MODELS[name.strip().lower()]


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by catalog key (case-insensitive), with the list of known keys on a miss."""
    return GPUS[name.strip().lower()]


def resolve_model(model: ModelSpec | str) -> ModelSpec:
    """A ModelSpec as given, or the catalog entry of a model key."""
    return model if isinstance(model, ModelSpec) else get_model(model)


def resolve_gpu(gpu: GpuSpec | str) -> GpuSpec:
    """A GpuSpec as given, or the catalog entry of a GPU key."""
    return gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
