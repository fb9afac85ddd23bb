"""Who may sign in as whom: passphrase hashing and the wait after repeated failures (no database, no Streamlit).

A learner's first sign-in with a name in a class sets a passphrase; later sign-ins must give it. Only a
memory-hard hash is kept: ``hashlib.scrypt`` (RFC 7914) with a random 16-byte salt per learner and the
parameters ``n=2**14, r=8, p=1`` (16 MiB of memory, about 50 ms on one core: cheap for a sign-in, costly for
someone trying a word list). The parameters are stored next to each hash (``params_text``), so raising them
later keeps old hashes checkable; a successful sign-in re-hashes with the current ones.

Failed checks are counted per (class, learner) and for the teacher key, in the database so every replica
sees them (progress/store.py). The first ``FREE_FAILURES - 1`` failures cost nothing; from the
``FREE_FAILURES``-th on, the next try must wait ``LOCK_BASE_S * 2**(failures - FREE_FAILURES)`` seconds,
capped at ``LOCK_MAX_S``. A correct passphrase (or a teacher's reset) clears the count.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import unicodedata
from collections.abc import Mapping
from typing import Any

SCRYPT_N = 2**14  # CPU/memory cost; tests lower it (monkeypatch) to keep sign-ins fast
SCRYPT_R = 8  # block size
SCRYPT_P = 1  # parallelism
SCRYPT_DKLEN = 32  # bytes of derived key
SALT_BYTES = 16
PASSPHRASE_MIN, PASSPHRASE_MAX = 8, 128  # characters after NFKC
FREE_FAILURES = 5  # the 5th failure in a row starts the wait
LOCK_BASE_S = 2.0  # the first wait; each further failure doubles it
LOCK_MAX_S = 900.0  # 15 minutes at most for a learner's name (the teacher can reset it at once)
# The teacher key's count is server-wide, so anyone can start its wait: a short cap keeps a mischievous learner
# from locking the teacher out of a class for long, and still allows only one guess a minute at a key that
# should be random (docs/SECURITY.md).
TEACHER_LOCK_MAX_S = 60.0


class SignInError(ValueError):
    """A sign-in (or teacher key) that is refused; ``retry_after_s`` says how long to wait, if that is why."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def normalize_passphrase(value: object) -> str:
    """The passphrase in NFKC form (a fullwidth or composed spelling is the same passphrase)."""
    if not isinstance(value, str):
        raise SignInError(f"the passphrase must be text, got {type(value).__name__}")
    return unicodedata.normalize("NFKC", value)


def check_new_passphrase(value: object) -> str:
    """A passphrase to set: NFKC, 8–128 characters; SignInError saying how to fix it otherwise."""
    text = normalize_passphrase(value)
    if len(text) < PASSPHRASE_MIN:
        raise SignInError(
            f"the passphrase is {len(text)} characters; choose one of at least {PASSPHRASE_MIN} "
            "(a few words are easy to remember)"
        )
    if len(text) > PASSPHRASE_MAX:
        raise SignInError(f"the passphrase is {len(text)} characters; the limit is {PASSPHRASE_MAX}")
    return text


def current_params() -> dict[str, Any]:
    """The scrypt parameters new hashes use (read at call time, so a test's lower cost applies)."""
    return {"alg": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P, "dklen": SCRYPT_DKLEN}


def params_text(params: Mapping[str, Any]) -> str:
    """Parameters as stored beside a hash (canonical JSON)."""
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def _derive(passphrase: str, salt: bytes, params: Mapping[str, Any]) -> bytes:
    if params.get("alg") != "scrypt":
        raise ValueError(f"unknown passphrase hash {params.get('alg')!r}")
    n, r, p, dklen = (int(params[k]) for k in ("n", "r", "p", "dklen"))
    maxmem = 128 * r * (n + p + 2) + 1024 * 1024  # what scrypt needs plus slack; OpenSSL's default is 32 MiB
    return hashlib.scrypt(passphrase.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=maxmem)


def hash_passphrase(passphrase: str) -> tuple[str, str, str]:
    """``(hash_hex, salt_hex, params_json)`` of a (checked) passphrase, with a fresh random salt."""
    salt = os.urandom(SALT_BYTES)
    params = current_params()
    return _derive(passphrase, salt, params).hex(), salt.hex(), params_text(params)


def verify_passphrase(passphrase: str, hash_hex: str, salt_hex: str, params_json: str) -> bool:
    """Whether ``passphrase`` matches the stored hash (constant-time comparison); False for a damaged row."""
    try:
        params = json.loads(params_json)
        derived = _derive(passphrase, bytes.fromhex(salt_hex), params)
        expected = bytes.fromhex(hash_hex)
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return hmac.compare_digest(derived, expected)


def needs_rehash(params_json: str) -> bool:
    """True when a stored hash used other parameters than new hashes do."""
    try:
        return json.loads(params_json) != current_params()
    except ValueError:
        return True


def same_secret(given: str, expected: str) -> bool:
    """Constant-time equality of two secrets of any lengths (digests first, so the length does not leak)."""
    a = hashlib.sha256(given.encode("utf-8")).digest()
    b = hashlib.sha256(expected.encode("utf-8")).digest()
    return hmac.compare_digest(a, b)


def lock_seconds(failures: int, cap: float = LOCK_MAX_S) -> float:
    """How long the next try must wait after ``failures`` failures in a row (0 before FREE_FAILURES), at most
    ``cap`` seconds."""
    if failures < FREE_FAILURES:
        return 0.0
    return min(cap, LOCK_BASE_S * 2.0 ** min(failures - FREE_FAILURES, 32))


def wait_text(seconds: float) -> str:
    """A wait as the learner reads it: whole seconds, rounded up."""
    whole = max(1, math.ceil(seconds))
    return f"{whole} s" if whole < 120 else f"{whole} s (about {math.ceil(whole / 60)} min)"
