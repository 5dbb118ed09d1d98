"""Local paths checked before the work starts: files to write (-o, --junit) and the runs root."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Union

from .errors import DetrunError

PathLike = Union[str, Path]


def _dir_problem(path: str) -> Optional[str]:
    """Why no file can be created in directory path (or in what makedirs would make of it); None if one can."""
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    try:
        fd, probe = tempfile.mkstemp(prefix=".detrun-probe-", dir=existing)
    except OSError as exc:
        return f"cannot create a file in {existing} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_writable_dir(path: PathLike, option: str) -> None:
    """Raise DetrunError naming option unless files can be created in directory path (made if missing)."""
    problem = _dir_problem(os.path.abspath(path))
    if problem:
        raise DetrunError(f"{option} {path}: {problem}")


def check_output_path(path: Optional[PathLike], option: str) -> None:
    """Raise DetrunError naming option unless path can be written (None: nothing to check).

    A directory is an error, and so is a parent that is not a writable directory; missing parents are
    made by write_output, as far as the nearest existing one allows.
    """
    if path is None:
        return
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise DetrunError(f"{option} {path}: is a directory")
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise DetrunError(f"{option} {path}: is not writable")
    problem = _dir_problem(os.path.dirname(full))
    if problem:
        raise DetrunError(f"{option} {path}: {problem}")


def write_output(path: PathLike, text: str, option: str) -> None:
    """Write text to path, parents made; an OSError is a DetrunError naming option."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    except OSError as exc:
        raise DetrunError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None
