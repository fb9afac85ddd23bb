"""vLLM's released source, read where it lies: a wheel (a zip, read member by member) or an unpacked tree.

`open_source(path)` returns a `VllmSource` after checking that the thing is vLLM's: it holds
``vllm/__init__.py`` and, for a wheel, a ``vllm-*.dist-info/METADATA`` whose ``Name`` is vllm. The version comes
from that METADATA (an unpacked tree: its dist-info if it kept one, else ``vllm/_version.py``). Anything else
raises `SourceError` with a message that names the path and what is wrong, for the fact checker
(lessons/facts.py) to print.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

INIT = "vllm/__init__.py"
METADATA = re.compile(r"vllm-[^/]*\.dist-info/METADATA")
VERSION_FILE = "vllm/_version.py"
_NAME = re.compile(r"^Name:\s*(\S+)\s*$", re.MULTILINE)
_VERSION = re.compile(r"^Version:\s*(\S+)\s*$", re.MULTILINE)
_VERSION_PY = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.MULTILINE)
UNKNOWN_VERSION = "unknown"


class SourceError(ValueError):
    """The path is not vLLM's source: missing, not a zip, or some other package."""


@dataclass(frozen=True)
class VllmSource:
    """vLLM's source files by their path in the source tree (``vllm/config/cache.py``)."""

    origin: str  # the wheel or folder it was read from, as given
    version: str
    files: dict[str, str]  # only the .py files (and the ones read to validate), decoded as UTF-8

    def read(self, path: str) -> str | None:
        """The text of `path` ("vllm/..."), or None when the release has no such file."""
        return self.files.get(path)


def _check_metadata(origin: str, metadata: str | None) -> str | None:
    """The METADATA's version, None without METADATA; SourceError when it names another package."""
    if metadata is None:
        return None
    name = _NAME.search(metadata)
    if name is None or name.group(1).lower() != "vllm":
        found = name.group(1) if name else "no Name field"
        raise SourceError(f"{origin} is not a vLLM wheel: its METADATA names {found!r}, not vllm")
    version = _VERSION.search(metadata)
    return version.group(1) if version else UNKNOWN_VERSION


def _version_from(files: dict[str, str]) -> str:
    found = _VERSION_PY.search(files.get(VERSION_FILE, ""))
    return found.group(1) if found else UNKNOWN_VERSION


def read_wheel(path: Path) -> VllmSource:
    """A vLLM wheel's Python sources, read from the zip without extracting it."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise SourceError(f"{path} is not a wheel (not a zip file); pass a vllm-*.whl file or --source DIR") from None
    with archive:
        names = archive.namelist()
        metadata = next((n for n in names if METADATA.fullmatch(n)), None)
        if INIT not in names or metadata is None:
            missing = INIT if INIT not in names else "vllm-*.dist-info/METADATA"
            raise SourceError(f"{path} is not a vLLM wheel: it has no {missing}")
        version = _check_metadata(str(path), archive.read(metadata).decode("utf-8", "replace"))
        files = {n: archive.read(n).decode("utf-8", "replace") for n in names if n.endswith(".py")}
    return VllmSource(str(path), version or UNKNOWN_VERSION, files)


def read_tree(root: Path) -> VllmSource:
    """An unpacked vLLM source tree (a git checkout or an extracted wheel): the folder that holds ``vllm/``."""
    if not (root / INIT).is_file():
        raise SourceError(f"{root} is not a vLLM source tree: it has no {INIT}")
    files = {
        PurePosixPath(p.relative_to(root)).as_posix(): p.read_text(encoding="utf-8", errors="replace")
        for p in (root / "vllm").rglob("*.py")
        if p.is_file()
    }
    metadata = next(iter(sorted(root.glob("vllm-*.dist-info/METADATA"))), None)
    version = _check_metadata(str(root), metadata.read_text(encoding="utf-8", errors="replace") if metadata else None)
    return VllmSource(str(root), version or _version_from(files), files)


def open_source(path: str | Path) -> VllmSource:
    """vLLM's source at `path`: a wheel file or an unpacked tree; SourceError when it is neither."""
    where = Path(path)
    if where.is_dir():
        return read_tree(where)
    if not where.is_file():
        raise SourceError(f"{where} does not exist; pass a vllm-*.whl file, or --source DIR for an unpacked tree")
    return read_wheel(where)
