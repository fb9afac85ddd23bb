"""Cost of one passphrase hash: Argon2id at the parameters new hashes use (progress/auth.py: OWASP's m=19 MiB,
t=2, p=1) beside the last release's scrypt (n=2**14, r=8, p=1), timed interleaved on one thread.

A sign-in verifies one hash (and a learner with an old scrypt hash computes both once: verify, then re-hash).
docs/SECURITY.md quotes the median.

Run: python -m bench.passphrase_hash --json --repeats 31
"""

from __future__ import annotations

import os

from bench.harness import emit, env_info, log, parser, save, time_interleaved
from progress import auth


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    salt, passphrase = os.urandom(auth.SALT_BYTES), "correct horse battery staple"
    argon2id, scrypt = auth.current_params(), auth.scrypt_params()
    fns = {
        "argon2id": lambda: auth.verify_passphrase(passphrase, "00", salt.hex(), auth.params_text(argon2id)),
        "scrypt": lambda: auth.verify_passphrase(passphrase, "00", salt.hex(), auth.params_text(scrypt)),
    }
    medians = time_interleaved(fns, repeats=args.repeats, warmup=args.warmup)
    result = {
        "benchmark": "passphrase_hash",
        "median_ms": {name: round(seconds * 1000, 1) for name, seconds in medians.items()},
        "params": {"argon2id": argon2id, "scrypt": scrypt},
        "repeats": args.repeats,
        "env": env_info(),
    }
    log(f"one hash, median of {args.repeats}: " + ", ".join(f"{k} {v} ms" for k, v in result["median_ms"].items()))
    if args.save:
        save("passphrase_hash", result)
    emit(result)


if __name__ == "__main__":
    main()
