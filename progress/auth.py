"""Who may sign in as whom: passphrase hashing and the wait after repeated failures (no database, no Streamlit).

A learner's first sign-in with a name in a class sets a passphrase; later sign-ins must give it. Only a
memory-hard hash is kept: Argon2id (RFC 9106, through argon2-cffi) with a random 16-byte salt per learner and
OWASP's parameters (Password Storage Cheat Sheet, "Argon2id": a minimum of 19 MiB of memory, an iteration count
of 2 and 1 degree of parallelism: ``m=19456`` KiB, ``t=2``, ``p=1``; docs/SECURITY.md quotes the measured cost).
The parameters are stored next to each hash (``params_text``), so raising them later keeps old hashes checkable;
a successful sign-in re-hashes with the current ones. Hashes of the last release (``hashlib.scrypt``, RFC 7914,
``n=2**14, r=8, p=1``) are still verified, and the learner's next successful sign-in replaces theirs with Argon2id.

Failed checks are counted in the database, so every replica sees them (progress/store.py), per subject (one
(class, learner) name, or the teacher key) and per *client*: the browser session, and its network address
when the server knows it (``Client``; ui/signin.py reads it, trusting a proxy's ``X-Forwarded-For`` only from
the addresses in ``KVLAB_TRUSTED_PROXIES``). Each counter has a rule (``RULES``): its first ``free - 1``
failures cost nothing; from the ``free``-th on, the next try must wait ``LOCK_BASE_S * 2**(failures - free)``
seconds, at most ``cap``. A session and an address are refused while their own wait runs, so a guesser slows
only itself (and whoever shares its address, later: an address gets more free tries). Every try also counts on
the subject as a whole (the ceiling against guessing from many addresses); that wait refuses only clients that
have failed on the subject themselves, so a right passphrase from a session and address without failures is
always checked. A correct passphrase clears the client's counts; a teacher's reset clears the name's.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import math
import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import argon2

from kvlab.settings import proxy_networks
from progress.names import is_invisible

# Argon2id at OWASP's first recommended setting (see the module docstring); tests lower the memory and time
# costs (monkeypatch) to keep sign-ins fast, and the stored parameters say so.
ARGON2_MEMORY_KIB = 19 * 1024  # m: 19 MiB
ARGON2_TIME_COST = 2  # t: passes over the memory
ARGON2_PARALLELISM = 1  # p: lanes (one thread per sign-in; the server serves many learners at once)
HASH_BYTES = 32  # bytes of derived key
SALT_BYTES = 16
# The last release's scrypt, kept to verify (then replace) the hashes it stored.
SCRYPT_N = 2**14  # CPU/memory cost
SCRYPT_R = 8  # block size
SCRYPT_P = 1  # parallelism
SCRYPT_DKLEN = 32  # bytes of derived key
PASSPHRASE_MIN, PASSPHRASE_MAX = 8, 128  # visible characters at least, characters at most (after NFKC)
FREE_FAILURES = 5  # a session's 5th failure in a row starts its wait
LOCK_BASE_S = 2.0  # the first wait; each further failure doubles it
LOCK_MAX_S = 900.0  # 15 minutes at most for a session (the teacher can reset a name at once)
TEACHER_LOCK_MAX_S = 60.0  # the teacher key's ceiling over all clients: a minute at most


@dataclass(frozen=True)
class Rule:
    """When one counter's waits start (``free``: the failure that starts them) and their longest (``cap``, s)."""

    free: int
    cap: float


SESSION, ADDRESS, EVERYONE = "session", "address", "everyone"  # the counters each try is counted on
# An address may be a whole school behind one router: it starts waiting later and waits less than a session,
# so a classmate's wrong tries slow others there only after many of them. The subject's ceiling counts every
# client's tries and refuses only clients with failures of their own.
RULES: Mapping[str, Mapping[str, Rule]] = MappingProxyType(
    {
        "learner": MappingProxyType(
            {SESSION: Rule(FREE_FAILURES, LOCK_MAX_S), ADDRESS: Rule(20, 300.0), EVERYONE: Rule(50, LOCK_MAX_S)}
        ),
        "teacher": MappingProxyType(
            {SESSION: Rule(FREE_FAILURES, LOCK_MAX_S), ADDRESS: Rule(20, 60.0), EVERYONE: Rule(50, TEACHER_LOCK_MAX_S)}
        ),
    }
)


@dataclass(frozen=True)
class Client:
    """Who is trying: the browser session (a random id per session) and its network address, if known."""

    session: str = ""
    address: str | None = None

    def keys(self) -> dict[str, str]:
        """The throttle rows of this client: ``{SESSION: ..., ADDRESS: ...}`` (hashed: no address is stored)."""
        keys = {SESSION: "s:" + _digest(self.session)}
        if self.address:
            keys[ADDRESS] = "a:" + _digest(self.address)
        return keys


@functools.cache
def trusted_proxies(setting: str | None) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """The networks whose ``X-Forwarded-For`` is believed: ``KVLAB_TRUSTED_PROXIES``, addresses or networks
    separated by commas (unset: loopback; "none": no proxy). ValueError naming a bad entry. The server checks
    the same parse at start (kvlab.settings.proxy_networks)."""
    return proxy_networks(setting)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(peer: str | None, forwarded_for: str | None, setting: str | None) -> str:
    """The network address a try comes from: the connection's ``peer`` (None: loopback, as Streamlit reports
    it) or, when the peer is a trusted proxy (:func:`trusted_proxies` of ``setting``), the nearest address in
    its ``X-Forwarded-For`` that is not one (what a client writes in the header itself is never believed)."""
    trusted = trusted_proxies(setting)
    hop = _ip(peer or "127.0.0.1")
    if hop is None:
        return peer or "127.0.0.1"
    for entry in reversed((forwarded_for or "").split(",")[-32:]):  # the proxies append: the nearest is last
        if not any(hop in net for net in trusted):
            break
        nearer = _ip(entry)
        if nearer is None:  # a garbled header: believe the last proxy, not the text
            break
        hop = nearer
    return str(hop)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


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


def visible_length(text: str) -> int:
    """Characters of ``text`` that show: not spaces, controls, or code points that render as nothing."""
    return sum(1 for ch in text if not ch.isspace() and not is_invisible(ch))


def check_passphrase(value: object) -> str:
    """A passphrase as typed at any sign-in, NFKC; SignInError unless it has 8+ visible characters, at most
    128 in all and no control character. The same message whether the name exists or not (checked before the
    name is looked up), so it cannot tell a classmate who is in a class."""
    text = normalize_passphrase(value)
    if not text:
        raise SignInError("type your passphrase (the first sign-in with a name in a class sets it)")
    if len(text) > PASSPHRASE_MAX:
        raise SignInError(f"the passphrase is {len(text)} characters; the limit is {PASSPHRASE_MAX}")
    controls = sorted({ch for ch in text if unicodedata.category(ch) == "Cc"})
    if controls:
        shown = ", ".join(f"U+{ord(ch):04X}" for ch in controls[:3])
        raise SignInError(f"the passphrase holds control characters ({shown}: a tab, a NUL...); type it without them")
    visible = visible_length(text)
    if visible < PASSPHRASE_MIN:
        raise SignInError(
            f"a passphrase has at least {PASSPHRASE_MIN} visible characters (spaces and invisible characters "
            f"do not count) and this one has {visible}; type yours, or choose a longer one (a few words are easy "
            "to remember)"
        )
    return text


def check_new_passphrase(value: object) -> str:
    """A passphrase to set: :func:`check_passphrase`'s rules (kept as the name new passphrases are set with)."""
    return check_passphrase(value)


def current_params() -> dict[str, Any]:
    """The Argon2id parameters new hashes use (read at call time, so a test's lower cost applies)."""
    return {
        "alg": "argon2id",
        "v": argon2.low_level.ARGON2_VERSION,
        "m": ARGON2_MEMORY_KIB,
        "t": ARGON2_TIME_COST,
        "p": ARGON2_PARALLELISM,
        "len": HASH_BYTES,
    }


def scrypt_params() -> dict[str, Any]:
    """The parameters of the last release's scrypt hashes (what a stored scrypt row says)."""
    return {"alg": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P, "dklen": SCRYPT_DKLEN}


def params_text(params: Mapping[str, Any]) -> str:
    """Parameters as stored beside a hash (canonical JSON)."""
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def _derive(passphrase: str, salt: bytes, params: Mapping[str, Any]) -> bytes:
    secret = passphrase.encode("utf-8")
    if params.get("alg") == "argon2id":
        return argon2.low_level.hash_secret_raw(
            secret,
            salt,
            time_cost=int(params["t"]),
            memory_cost=int(params["m"]),
            parallelism=int(params["p"]),
            hash_len=int(params["len"]),
            type=argon2.low_level.Type.ID,
            version=int(params["v"]),
        )
    if params.get("alg") == "scrypt":
        n, r, p, dklen = (int(params[k]) for k in ("n", "r", "p", "dklen"))
        maxmem = 128 * r * (n + p + 2) + 1024 * 1024  # what scrypt needs plus slack; OpenSSL's default is 32 MiB
        return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=maxmem)
    raise ValueError(f"unknown passphrase hash {params.get('alg')!r}")


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
    except (ValueError, TypeError, KeyError, AttributeError, argon2.exceptions.HashingError):
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


def lock_seconds(failures: int, cap: float = LOCK_MAX_S, free: int = FREE_FAILURES) -> float:
    """How long the next try must wait after ``failures`` failures in a row (0 before the ``free``-th), at
    most ``cap`` seconds."""
    if failures < free:
        return 0.0
    return min(cap, LOCK_BASE_S * 2.0 ** min(failures - free, 32))


def wait_text(seconds: float) -> str:
    """A wait as the learner reads it: whole seconds, rounded up."""
    whole = max(1, math.ceil(seconds))
    return f"{whole} s" if whole < 120 else f"{whole} s (about {math.ceil(whole / 60)} min)"
