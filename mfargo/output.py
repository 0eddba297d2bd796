"""Writing what the compiler produced: validated first, then atomically, or not at all.

The file gets the mode a new file gets under the umask, or the existing file's mode (a
temp file alone would be 0600); a target that is a directory or read-only is refused
before anything is compiled or uploaded.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from mfargo.base.errors import UserError


class OutputError(UserError, OSError):
    """The output file cannot be written where asked."""


def check_target(path: str | os.PathLike) -> None:
    """Refuse, in one line, a target that cannot be replaced by a normal file."""
    target = Path(path)
    if target.is_dir():
        raise OutputError("--output-file %s is a directory; give a file name" % target)
    if target.exists() and (not os.access(target, os.W_OK) or not target.stat().st_mode & 0o222):
        raise OutputError("--output-file %s is read-only; make it writable or write elsewhere" % target)
    parent = _existing_parent(target.parent)
    if not parent.is_dir():
        raise OutputError("--output-file %s: %s is not a directory" % (target, parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError("--output-file %s: directory %s is not writable" % (target, parent))


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same directory + rename: readers never see half a file."""
    target = Path(path)
    check_target(target)
    mode = _mode_for(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".%s." % target.name, dir=target.parent)
    except OSError as e:
        raise OutputError("--output-file %s: %s" % (target, e.strerror or e)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError("--output-file %s: %s" % (target, e.strerror or e)) from None
        raise


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
