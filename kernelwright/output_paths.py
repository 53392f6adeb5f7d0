"""The files and folders a command writes, checked before any work is done, so that a bad path costs a
one-line error instead of a run, and nothing a user has is overwritten silently.

The convention, for every command that writes: `-o/--output FILE` for one file, `--output-dir DIR` for a
folder; an existing FILE is refused unless `--force`; a folder that holds an earlier run is refused by the
command that owns its layout unless that command resumes it (`bench --resume`, `generate` reruns).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kernelwright.errors import UsageError


def add_force_flag(parser) -> None:
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")


def check_output_file(path: str | Path, force: bool, flag: str = "-o") -> Path:
    """`path` as a file this command may write: its folder exists and is writable, it is not a folder,
    and it does not exist yet unless `force`."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name (or --output-dir {path})")
    if path.exists() and not force:
        raise UsageError(f"{flag} {path}: the file exists; add --force to overwrite it")
    _check_folder(path.parent if str(path.parent) else Path("."), flag, path)
    return path


def check_output_dir(path: str | Path, flag: str = "--output-dir") -> Path:
    """`path` as a folder this command may create or write into: not a file, and its nearest existing
    ancestor is a writable folder."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: exists and is not a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot create or write into it ({existing} is not writable)")
    if existing != path:
        # a writable-looking ancestor is not proof (root "may write" /proc, and can create nothing there):
        # a file made and removed at once proves it, without making folders that a concurrent run of the
        # same command could be creating too
        try:
            handle, probe = tempfile.mkstemp(dir=existing, prefix=".kernelwright-probe-")
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot create it ({exc.strerror or exc})") from exc
        os.close(handle)
        os.unlink(probe)
    return path


def make_output_dir(path: Path, flag: str = "--output-dir") -> None:
    """Create a folder checked by `check_output_dir` (a writable ancestor is not always enough: /proc)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create it ({exc.strerror or exc})") from exc


def write_output_file(path: Path, text: str, force: bool) -> None:
    """Write a file checked by `check_output_file`. Without `force`, a file that appeared since the check
    (another process) is still not overwritten."""
    try:
        with open(path, "w" if force else "x") as handle:
            handle.write(text)
    except FileExistsError as exc:
        raise UsageError(f"{path}: the file appeared while this command ran; add --force to overwrite it"
                         ) from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the file ({exc.strerror or exc})") from exc


def _check_folder(folder: Path, flag: str, path: Path) -> None:
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: the folder {folder} is not writable")
