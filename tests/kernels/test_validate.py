"""kernels.validate.check_int: the one whole-number check every layer shares."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.validate import check_int, is_whole


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.int32(1)])
def test_whole_numbers_pass_and_come_back_as_int(value):
    out = check_int("n", value)
    assert out == int(value) and type(out) is int


@pytest.mark.parametrize("value", [True, False, 1.0, "3", None, 0, -2, np.float32(2.0)])
def test_refused_values_are_named(value):
    with pytest.raises(ValueError, match=r"^n=.* must be an integer >= 1"):
        check_int("n", value)


def test_bounds_kind_and_hint_are_in_the_message():
    assert check_int("w", 0, minimum=0) == 0
    assert check_int("w", 5, minimum=None, maximum=5) == 5
    with pytest.raises(ValueError, match=r"^w=6 must be a count >= 0 and <= 5 \(at most five\)$"):
        check_int("w", 6, minimum=0, maximum=5, kind="a count", hint="at most five")
    with pytest.raises(ValueError, match=r"^w=9 must be an integer <= 5$"):
        check_int("w", 9, minimum=None, maximum=5)


def test_is_whole():
    assert is_whole(3) and is_whole(np.int8(2))
    assert not is_whole(True) and not is_whole(2.0) and not is_whole("2")
