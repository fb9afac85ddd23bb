"""SamplingParams refuses what the sampler cannot sample, and the sampler samples everything else exactly.

The property: for ANY arguments, `SamplingParams(...)` either raises a ValueError or constructs, and for
every one that constructs, `sample()` on random finite logits (huge magnitudes, exact ties, a row of all-equal
values, the dtype's extremes; float32 / float16 / bfloat16) returns one valid token id per row and never
raises. A tiny temperature is an exact argmax among the top logits' ties (no NaN from x / 1e-45); a huge
one is uniform (no NaN from -inf / inf). The bug each case would catch: dividing the raw logits by the
temperature (1e-30: inf - inf = NaN in softmax), a bool accepted as a number (True is 1 to Python), a
seed torch.Generator cannot take, top_p=NaN slipping through a chained comparison.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.sampling_params import MAX_SEED, SamplingParams
from engine.worker.sampler import inverse_temperature, make_generator, sample, tempered

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-45, 5e-324, 1e-30, 1e-5, 1e-2, 1e30, 1e300, 10**400, -1e-30, 2**63, 2**64]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.sampled_from([np.float32(0.7), np.float64(1e-30), np.int64(3), np.bool_(True), np.float16(2.0)]),
    st.sampled_from(["1", None, [1], torch.tensor(0.5), torch.tensor(3)]),
)
TEMPERATURES = st.one_of(
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False),
    st.sampled_from([0.0, 5e-324, 1e-45, 1e-30, 1e-6, 1.0, 1e30, 1e300]),
)
VALID_KWARGS = st.fixed_dictionaries(
    {},
    optional={
        "temperature": TEMPERATURES,
        "top_k": st.one_of(st.none(), st.integers(0, 80)),
        "top_p": st.one_of(st.floats(min_value=1e-9, max_value=1.0), st.sampled_from([1e-300, 1.0])),
        "seed": st.one_of(st.none(), st.integers(0, MAX_SEED)),
    },
)
HOSTILE_KWARGS = st.fixed_dictionaries(
    {},
    optional={name: ANY_NUMBER for name in ("max_tokens", "temperature", "top_k", "top_p", "seed")}
    | {"stop_token_ids": st.one_of(st.lists(ANY_NUMBER, max_size=3), ANY_NUMBER), "ignore_eos": ANY_NUMBER},
)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@st.composite
def logits(draw) -> torch.Tensor:
    """Finite logits [S, V] of one dtype: random, huge, tied, constant rows, and the dtype's extremes."""
    dtype = draw(st.sampled_from(DTYPES))
    rows, vocab = draw(st.integers(1, 4)), draw(st.integers(1, 40))
    finfo = torch.finfo(dtype)
    kind = draw(st.sampled_from(["normal", "huge", "ties", "constant", "extremes"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if kind == "normal":
        x = torch.randn(rows, vocab, generator=gen) * draw(st.sampled_from([1e-3, 1.0, 30.0]))
    elif kind == "huge":
        x = torch.randn(rows, vocab, generator=gen) * finfo.max / 8
    elif kind == "ties":
        x = torch.randint(-2, 3, (rows, vocab), generator=gen).float() * draw(st.sampled_from([1.0, finfo.max / 4]))
    elif kind == "constant":
        x = torch.full((rows, vocab), draw(st.sampled_from([0.0, finfo.max, -finfo.max, 1e-3])))
    else:
        x = torch.tensor([finfo.max, -finfo.max, finfo.tiny, 0.0])[torch.randint(0, 4, (rows, vocab), generator=gen)]
    return x.to(dtype)


def draw_tokens(x: torch.Tensor, params: SamplingParams) -> list[int]:
    return sample(x, [params] * x.shape[0], [make_generator(params, "cpu") for _ in range(x.shape[0])])


@PROPERTY
@given(VALID_KWARGS, logits())
def test_every_valid_params_samples_valid_tokens(kwargs, x):
    params = SamplingParams(**kwargs)
    tokens = draw_tokens(x, params)
    assert len(tokens) == x.shape[0]
    assert all(type(t) is int and 0 <= t < x.shape[1] for t in tokens)
    # A temperature so small that the next-best logit's weight underflows: exactly an argmax among the ties
    # (at float32's resolution: 1 / T is capped at FLT_MAX, see inverse_temperature).
    rows = x.double()
    top = rows.max(dim=-1).values
    for i, t in enumerate(tokens):
        below = rows[i][rows[i] < top[i]]
        gap = float(top[i] - below.max()) if below.numel() else math.inf
        if params.temperature > 0 and gap * inverse_temperature(params.temperature) > 1e4:
            assert rows[i, t] == top[i], f"temperature {params.temperature} drew a non-top token"


@PROPERTY
@given(HOSTILE_KWARGS, logits())
@example({"stop_token_ids": torch.tensor(0.5)}, torch.tensor([[1.0]]))  # Iterable, yet refuses iteration
def test_any_arguments_either_raise_value_error_or_sample(kwargs, x):
    """Nothing but a ValueError at construction; whatever constructs samples valid tokens without raising."""
    try:
        params = SamplingParams(**kwargs)
    except ValueError:
        return
    assert isinstance(params.max_tokens, int) and not isinstance(params.max_tokens, bool)
    assert type(params.temperature) is float and math.isfinite(params.temperature) and params.temperature >= 0
    assert type(params.top_p) is float and 0 < params.top_p <= 1
    assert params.seed is None or (type(params.seed) is int and 0 <= params.seed <= MAX_SEED)
    assert params.top_k is None or (type(params.top_k) is int and params.top_k >= 1)
    assert all(type(t) is int and t >= 0 for t in params.stop_token_ids)
    tokens = draw_tokens(x, params)
    assert all(0 <= t < x.shape[1] for t in tokens)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": True}, "temperature=True must be a finite number >= 0"),
        ({"top_p": True}, "top_p=True must be a number in"),
        ({"seed": True}, "seed=True must be an integer in 0 .. 2"),
        ({"max_tokens": True}, "max_tokens=True must be an integer >= 1"),
        ({"top_k": True}, "top_k=True must be an integer >= 1"),
        ({"top_k": False}, "top_k=False must be an integer"),
        ({"temperature": np.bool_(True)}, "temperature=np.True_ must be a finite number"),
        ({"seed": -1}, r"seed=-1 must be an integer in 0 .. 2\*\*63 - 1"),
        ({"seed": 2**63}, r"seed=9223372036854775808 must be an integer in 0 .. 2\*\*63 - 1"),
        ({"seed": 2**64}, "seed=18446744073709551616 must be"),
        ({"seed": 1.5}, "seed=1.5 must be an integer"),
        ({"top_p": float("nan")}, "top_p=nan must be a number in"),
        ({"temperature": float("inf")}, "temperature=inf must be a finite number"),
        ({"temperature": 10**400}, r"temperature=1000.*\.\.\. must be a finite number"),
        ({"temperature": torch.tensor(0.5)}, "temperature=tensor.* must be a finite number"),
        ({"max_tokens": 2.0}, "max_tokens=2.0 must be an integer"),
        ({"max_tokens": np.int64(0)}, "max_tokens=0 must be an integer >= 1"),
        ({"stop_token_ids": 7}, "stop_token_ids=7 must be a list"),
        ({"stop_token_ids": "ab"}, "stop_token_ids='ab' must be a list"),
        ({"stop_token_ids": [True]}, r"stop_token_ids=\[True\] must be a list"),
        ({"ignore_eos": "yes"}, "ignore_eos='yes' must be True or False"),
    ],
)
def test_refusals_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_numpy_numbers_are_accepted_as_python_numbers():
    params = SamplingParams(
        max_tokens=np.int64(5),
        temperature=np.float32(0.5),
        top_k=np.int32(3),
        top_p=np.float64(0.9),
        seed=np.uint64(7),
        stop_token_ids=np.array([1, 2]),
        ignore_eos=np.bool_(True),
    )
    assert (params.max_tokens, params.temperature, params.top_k, params.top_p, params.seed) == (5, 0.5, 3, 0.9, 7)
    assert type(params.max_tokens) is int and type(params.temperature) is float and type(params.seed) is int
    assert params.stop_token_ids == [1, 2] and all(type(t) is int for t in params.stop_token_ids)
    assert params.ignore_eos is True
    assert SamplingParams(seed=MAX_SEED).seed == MAX_SEED  # the top of the range works with torch.Generator
    make_generator(SamplingParams(seed=MAX_SEED), "cpu")


@pytest.mark.parametrize("temperature", [1e-30, 1e-45, 5e-324])
def test_tiny_temperature_is_argmax_among_ties(temperature):
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0, 3.0 - 1e-6]])
    params = SamplingParams(temperature=temperature, seed=0)
    gen = make_generator(params, "cpu")
    draws = {sample(x, [params], [gen])[0] for _ in range(200)}
    assert draws == {1, 2}  # both tied top tokens, nothing else (3 - 1e-6 is 1e-6 below: weight exp(-1e24))


@pytest.mark.parametrize("temperature", [1e30, 1e300])
def test_huge_temperature_is_uniform_over_finite_logits(temperature):
    x = torch.tensor([[100.0, -100.0, 0.0, 5.0, float("-inf")]])
    params = SamplingParams(temperature=temperature, seed=1)
    gen = make_generator(params, "cpu")
    draws = torch.tensor([sample(x, [params], [gen])[0] for _ in range(4000)])
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    torch.testing.assert_close(freq, torch.tensor([0.25, 0.25, 0.25, 0.25, 0.0]), atol=0.03, rtol=0)


def test_tempered_handles_non_finite_logits():
    """NaN logits are never drawn, +inf ones tie for the top, an all -inf row is uniform: never NaN."""
    inf = float("inf")
    x = torch.tensor([float("nan"), inf, 1.0, inf, -inf])
    for t in (1e-300, 1.0, 1e300):
        z = tempered(x, inverse_temperature(t))
        assert not z.isnan().any()
        assert z.tolist()[1] == 0.0 and z.tolist()[3] == 0.0 and z.tolist()[0] == -inf
    assert tempered(torch.full((3,), -inf), 2.0).tolist() == [0.0, 0.0, 0.0]
    assert not tempered(torch.tensor([[0.0, -inf, 3e38, -3e38]]), inverse_temperature(1e300)).isnan().any()


@pytest.mark.parametrize("temperature", [5e-324, 1e-45, 1e-30, 0.5, 1e30, 1e300])
def test_the_multiplier_is_a_normal_float32(temperature):
    """Never subnormal, 0 or inf: -inf * 0 and 0 * inf are NaN, and flush-to-zero devices zero subnormals."""
    inverse = inverse_temperature(temperature)
    assert torch.finfo(torch.float32).tiny <= inverse <= torch.finfo(torch.float32).max
