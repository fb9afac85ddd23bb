"""KV Lab as an installed package: its version, its settings (kvlab/settings.py) and the `kvlab` command
(kvlab/cli.py). The course itself stays in the top-level packages (app.py, pages/, ui/, lessons/, progress/,
engine/, kernels/); this package only starts, configures and maintains it.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _version() -> str:
    """The installed distribution's version; from a checkout (nothing installed), pyproject.toml's."""
    try:
        return metadata.version("kvlab")
    except metadata.PackageNotFoundError:
        pass
    try:
        text = PYPROJECT.read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    return found.group(1) if found else "0+unknown"


__version__ = _version()

__all__ = ["__version__"]
