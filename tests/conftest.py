"""Test set-up: Triton kernels run through the interpreter when no CUDA device is present.

TRITON_INTERPRET must be set before anything imports triton, so it happens here, at collection time.
Under CI (``CI`` set) Hypothesis draws the same examples on every run, so a submission's result does not depend
on luck; a developer's runs keep exploring new examples, and a failure they find becomes an ``@example``.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from kernels.backend import HAS_TRITON, triton_interpreting  # noqa: E402

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Triton tests run on CUDA, or on CPU through the interpreter.
TRITON_OK = HAS_TRITON and (torch.cuda.is_available() or triton_interpreting())
requires_triton = pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
