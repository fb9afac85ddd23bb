"""Which files a model loader may open: every path is resolved (symlinks, `..`) and must stay under an allowed root.

A server that loads model folders named by its users must not become a way to read, or to probe, the rest of
its disk. The rule, applied to the folder and to every file opened in it (config.json, the safetensors index,
each shard the index names, the tokenizer):

- `confine(path, roots)` resolves the path and refuses it unless it lies under one of the resolved roots. The
  comparison is `Path.is_relative_to` on resolved paths, so a root `/models` does not admit `/models-evil`, and
  a symlink or a `..` that leads out is refused *before* anyone looks at whether its target exists: every
  refusal of a path outside the roots is the same `ModelAccessError`, whatever is (or is not) there.
- `read_bytes` / `file_size` then open exactly the resolved path that was checked, with O_NOFOLLOW (a last
  component swapped for a link since the check is refused) and O_NONBLOCK (a FIFO cannot hang the open), and
  accept only a regular file (`fstat` on the opened descriptor, not a second lookup by name).

`roots=None` skips the containment test (a library user loading their own folders) but keeps the resolution
and the regular-file checks. Residual race, accepted: a *directory* under a root replaced by a link between
the check and the moment safetensors opens a shard by name; only someone who can already write under the
roots can do that, and they choose what the server loads anyway.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

REFUSED = "is not a readable file or folder inside the folders this server allows"
MAX_METADATA_BYTES = 64 * 2**20  # config.json, the index, a tokenizer file: real ones are far smaller
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


class ModelAccessError(ValueError):
    """A path outside the allowed roots, or one that cannot be opened as the kind of file wanted.

    The message names only `what` (a name the caller chose: "that model folder", "shard 'x' named by the
    index"), never where a link points or whether something exists outside the roots."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} {REFUSED}")
        self.what = what


def resolve_roots(roots: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    """The allowed roots, resolved (a root that is itself a link counts as its target), duplicates dropped."""
    return tuple(dict.fromkeys(Path(r).resolve() for r in roots))


def is_inside(path: Path, roots: tuple[Path, ...]) -> bool:
    """True when the (already resolved) `path` is one of `roots` or lies below one (whole components only)."""
    return any(path.is_relative_to(root) for root in roots)


def confine(path: str | os.PathLike[str], roots: tuple[Path, ...] | None, what: str = "that path") -> Path:
    """`path` resolved and checked: the real path, under a root (when `roots` is given) and existing.

    Raises ModelAccessError when it leads outside the roots (tested before existence, so the answer is the
    same for a missing and an existing target) or cannot be resolved (a link loop, a folder that cannot be
    entered, a NUL byte), FileNotFoundError when it is inside the roots but missing."""
    try:
        loose = Path(path).resolve()  # non-strict: links followed as far as they go, `..` applied
    except (OSError, RuntimeError, ValueError):
        raise ModelAccessError(what) from None
    if roots is not None and not is_inside(loose, roots):
        raise ModelAccessError(what)
    try:
        real = Path(path).resolve(strict=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} does not exist") from None
    except (OSError, RuntimeError, ValueError):
        raise ModelAccessError(what) from None
    if roots is not None and not is_inside(real, roots):  # something changed between the two resolutions
        raise ModelAccessError(what)
    return real


def existing(path: str | os.PathLike[str], roots: tuple[Path, ...] | None, what: str) -> Path | None:
    """The checked real path of an optional file, None when it is absent (inside the roots), else refused."""
    try:
        return confine(path, roots, what)
    except FileNotFoundError:
        return None


def _open_regular(real: Path, what: str) -> int:
    """A descriptor on the checked path, which must still be a regular file (the caller closes it)."""
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError:
        raise ModelAccessError(what) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelAccessError(what)
    return fd


def file_size(real: Path, what: str) -> int:
    """Bytes of the checked regular file at `real` (fstat on the opened file)."""
    fd = _open_regular(real, what)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_bytes(real: Path, what: str, limit: int = MAX_METADATA_BYTES) -> bytes:
    """The content of the checked regular file at `real`, refused above `limit` bytes."""
    fd = _open_regular(real, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise ValueError(f"{what} holds {size:,} bytes, more than the {limit:,} bytes allowed for it")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise ValueError(f"{what} holds more than the {limit:,} bytes allowed for it")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(real: Path, what: str, limit: int = MAX_METADATA_BYTES) -> str:
    """`read_bytes` decoded as UTF-8; a file that is not text is a ValueError naming `what`."""
    try:
        return read_bytes(real, what, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not UTF-8 text: {exc}") from None


__all__ = [
    "MAX_METADATA_BYTES",
    "REFUSED",
    "ModelAccessError",
    "confine",
    "existing",
    "file_size",
    "is_inside",
    "read_bytes",
    "read_text",
    "resolve_roots",
]
