"""How vLLM V1 lays a model's layers over one shared block pool: KV-cache groups, bytes per block, bytes per request.

vLLM V1 buckets the layers by KV-cache spec, then cuts the buckets into groups of equal size
(``_get_kv_cache_groups_uniform_page_size`` in vllm/v1/core/kv_cache_planning.py, vLLM v0.34.0; kv_cache_utils.py
before): the group size is the smallest
bucket (the "1" of an n:1 pattern: Gemma 3's 10 global layers, gpt-oss's 18 of each kind), or the largest when
that is under 1.5x the smallest; a bucket that does not divide evenly is padded with empty layer slots. Every group
draws block ids from one pool, and one block id spans the same bytes in every group, so a block costs
``group_size * page_size_bytes`` (``_get_kv_cache_bytes_per_block``) and a request costs the sum over groups of
the blocks it holds in each (``get_max_concurrency_for_kv_cache_config`` in kv_cache_utils.py,
``_max_memory_usage_bytes_from_groups`` in kv_cache_planning.py).
A uniform model is one group of all its layers: a block is ``block_size * kv_bytes_per_token`` and nothing here
changes its numbers.

A model with linear-attention state layers (Qwen3-Next) has pages of two sizes; vLLM raises the attention block size
until one attention page holds a state and pads the state page to it (``_align_hybrid_block_size``,
vllm/platforms/interface.py): ``block = align * cdiv(state_page, align * attention_page_per_token)`` with ``align``
the requested block size. `attention_block_size` does the same. The state stays in the model's dtype (bf16) when the
KV cache is fp8 (``mamba_cache_dtype = "auto"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.memory.catalog import resolve_model
from engine.memory.layers import DEFAULT_IN_FLIGHT_TOKENS, LayerKind, LinearState, max_in_flight_tokens
from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.startup import default_max_num_batched_tokens
from engine.memory.units import dtype_bytes
from kernels.validate import is_whole

# Linear-attention state is kept in the model's dtype whatever the KV dtype (vLLM's mamba_cache_dtype "auto");
# every model in the catalog runs in bf16.
STATE_DTYPE_BYTES = 2


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class KVGroup:
    """One KV-cache group: a layer kind and the layers (and padding slots) that share its block table."""

    kind: LayerKind
    num_layers: int  # real layers in this group
    slots: int  # the group size: real layers plus padding


def check_num_tokens(num_tokens: object) -> int:
    """A request length: a whole number of tokens >= 0 (not a bool, a float, a str or None); ValueError naming it."""
    if not is_whole(num_tokens) or num_tokens < 0:
        raise ValueError(f"num_tokens={num_tokens!r} must be a whole number of tokens >= 0")
    return int(num_tokens)


def default_in_flight_tokens(gpu: GpuSpec) -> int:
    """The tokens in flight under a default `vllm serve` on this GPU: two batches (async scheduling, on by default)
    of the device's default token budget (`engine.memory.startup.default_max_num_batched_tokens`)."""
    return max_in_flight_tokens(default_max_num_batched_tokens(gpu))


def _check_sizes(block_size: object, in_flight_tokens: object) -> None:
    if not is_whole(block_size) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive whole number of tokens")
    if not is_whole(in_flight_tokens) or in_flight_tokens < 1:
        raise ValueError(f"in_flight_tokens={in_flight_tokens!r} must be a positive whole number of tokens")


def kv_groups(model: ModelSpec | str) -> tuple[KVGroup, ...]:
    """The model's KV-cache groups, as vLLM V1 forms them (one group for a uniform model)."""
    kinds = resolve_model(model).layer_kinds
    buckets: dict[LayerKind, int] = {}
    for kind in kinds:
        buckets[kind] = buckets.get(kind, 0) + 1
    if len(buckets) == 1:
        (kind, n), *_ = buckets.items()
        return (KVGroup(kind, n, n),)
    smallest, largest = min(buckets.values()), max(buckets.values())
    size = largest if largest < smallest * 1.5 else smallest
    groups: list[KVGroup] = []
    for kind, n in buckets.items():
        for i in range(_cdiv(n, size)):
            groups.append(KVGroup(kind, min(size, n - i * size), size))
    return tuple(groups)


def _attention_bytes_per_token(model: ModelSpec, size: float, tensor_parallel: int) -> int:
    """Page bytes per token of the model's attention layers (all equal in the families we read)."""
    per = {k.bytes_per_token(size, tensor_parallel) for k in model.layer_kinds if not isinstance(k, LinearState)}
    return max(per) if per else 0


def attention_block_size(
    model: ModelSpec | str, block_size: int = 16, kv_dtype: str | float = "bf16", tensor_parallel: int = 1
) -> int:
    """The attention block size vLLM uses: block_size, raised for state hybrids so a page holds one state."""
    m = resolve_model(model)
    size = dtype_bytes(kv_dtype)
    states = [k.state_bytes(STATE_DTYPE_BYTES, tensor_parallel) for k in m.layer_kinds if isinstance(k, LinearState)]
    per_token = _attention_bytes_per_token(m, size, tensor_parallel)
    if not states or not per_token:
        return block_size
    return block_size * _cdiv(max(states), block_size * per_token)


def page_bytes(
    model: ModelSpec | str, kind: LayerKind, block_size: int, kv_dtype: str | float = "bf16", tensor_parallel: int = 1
) -> int:
    """Bytes of one page of one layer of this kind (a state page padded to the attention page, as vLLM pads it)."""
    m = resolve_model(model)
    size = dtype_bytes(kv_dtype)
    block = attention_block_size(m, block_size, kv_dtype, tensor_parallel)
    if isinstance(kind, LinearState):
        attention_page = block * _attention_bytes_per_token(m, size, tensor_parallel)
        return max(kind.state_bytes(STATE_DTYPE_BYTES, tensor_parallel), attention_page)
    return block * kind.bytes_per_token(size, tensor_parallel)


def pool_bytes_per_block(
    model: ModelSpec | str, kv_dtype: str | float = "bf16", block_size: int = 16, tensor_parallel: int = 1
) -> int:
    """Bytes one block id costs the pool: the largest group's slots times its page (vLLM's bytes_per_block)."""
    m = resolve_model(model)
    return max(g.slots * page_bytes(m, g.kind, block_size, kv_dtype, tensor_parallel) for g in kv_groups(m))


def blocks_per_request(
    model: ModelSpec | str,
    num_tokens: int,
    block_size: int = 16,
    in_flight_tokens: int = DEFAULT_IN_FLIGHT_TOKENS,
    kv_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
) -> int:
    """Block ids one request of num_tokens tokens holds at most, summed over the model's groups."""
    m = resolve_model(model)
    n = check_num_tokens(num_tokens)
    _check_sizes(block_size, in_flight_tokens)
    block = attention_block_size(m, block_size, kv_dtype, tensor_parallel)
    return sum(g.kind.blocks_held(n, block, in_flight_tokens) for g in kv_groups(m)) if n else 0


def kv_request_bytes(
    model: ModelSpec | str,
    num_tokens: int,
    kv_dtype: str | float = "bf16",
    block_size: int = 16,
    tensor_parallel: int = 1,
    in_flight_tokens: int = DEFAULT_IN_FLIGHT_TOKENS,
) -> int:
    """Bytes one request of num_tokens tokens holds on one GPU, in whole blocks per layer kind, as vLLM V1 allocates.

    Full and MLA layers hold every token's blocks; sliding layers ``cdiv(min(window - 1 + in flight, tokens),
    block) + 1``; chunked layers ``cdiv(min(chunk + in flight, tokens), block)``; linear layers one state page
    (vllm/v1/kv_cache_interface.py). Each block id costs `pool_bytes_per_block`, padding slots included.
    in_flight_tokens: tokens scheduled but not settled (vLLM's ``max_in_flight_tokens`` =
    ``max_concurrent_batches * max_num_batched_tokens``); the default, `DEFAULT_IN_FLIGHT_TOKENS`, is a default
    `vllm serve` on a GPU under 70 GiB: two batches of 2,048 tokens (`default_in_flight_tokens` for another GPU).
    """
    m = resolve_model(model)
    check_num_tokens(num_tokens)
    _check_sizes(block_size, in_flight_tokens)
    if not is_whole(tensor_parallel) or tensor_parallel < 1 or m.num_heads % tensor_parallel:
        raise ValueError(
            f"tensor_parallel={tensor_parallel!r} must be a positive divisor of {m.name}'s {m.num_heads} heads"
        )
    if m.layers or m.sliding_window is not None:
        blocks = blocks_per_request(m, num_tokens, block_size, in_flight_tokens, kv_dtype, tensor_parallel)
        return blocks * pool_bytes_per_block(m, kv_dtype, block_size, tensor_parallel)
    per_token = m.kv_bytes_per_token(dtype_bytes(kv_dtype), tensor_parallel)
    return _cdiv(num_tokens, block_size) * block_size * per_token  # dense: the old formula, in whole blocks


def admission_blocks(
    model: ModelSpec | str,
    max_model_len: int,
    block_size: int = 16,
    in_flight_tokens: int = DEFAULT_IN_FLIGHT_TOKENS,
    kv_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
) -> int:
    """Block ids vLLM plans one max_model_len request to hold: the sum of each group's admission cap."""
    m = resolve_model(model)
    block = attention_block_size(m, block_size, kv_dtype, tensor_parallel)
    return sum(g.kind.admission_blocks(max_model_len, block, in_flight_tokens) for g in kv_groups(m))


def max_concurrency(
    model: ModelSpec | str,
    num_blocks: int,
    max_model_len: int,
    block_size: int = 16,
    in_flight_tokens: int = DEFAULT_IN_FLIGHT_TOKENS,
    kv_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
) -> float:
    """vLLM's "Maximum concurrency for N tokens per request": the pool's blocks over one request's admission cap.

    ``num_blocks / sum over groups of cdiv(max_memory_usage_bytes, page_size_bytes)``
    (``get_max_concurrency_for_kv_cache_config``): a sliding group's cap is ``cdiv(min(window - 1 + in flight,
    max_model_len), block) + 1`` even for a short max_model_len, as vLLM counts it.
    """
    return num_blocks / admission_blocks(model, max_model_len, block_size, in_flight_tokens, kv_dtype, tensor_parallel)
