"""`python -m kvlab ...` is the `kvlab` command (kvlab/cli.py)."""

from kvlab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
