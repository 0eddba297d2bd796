"""The CLI's temporary work directories: claimed by a pid file, stale ones cleaned.

``mfargo run`` without ``--work-dir`` works in ``$TMPDIR/mfargo-run-*`` and removes it
after a successful run (a failed run keeps it, with ``status.json``, for its logs).
A runner that was killed (even by SIGKILL) leaves its directory behind without
``status.json``; the next run says so and removes it, unless it was a ``--keep`` run.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

PREFIX = "mfargo-run-"
PID_FILE = "runner.json"


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make(keep: bool) -> Path:
    """A fresh temporary work directory, claimed by this process."""
    work_dir = Path(tempfile.mkdtemp(prefix=PREFIX))
    claim(work_dir, keep)
    return work_dir


def claim(work_dir: Path, keep: bool) -> None:
    (work_dir / PID_FILE).write_text(json.dumps({"pid": os.getpid(), "keep": keep}))


def clean_stale(say: Callable[[str], None], root: Path | None = None) -> list[Path]:
    """Remove work directories whose runner died before finishing; say each one."""
    removed = []
    for d in sorted(Path(root or tempfile.gettempdir()).glob(PREFIX + "*")):
        try:
            info = json.loads((d / PID_FILE).read_text())
            pid, keep = int(info["pid"]), bool(info.get("keep"))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours (or an older runner's): leave it alone
        if (d / "status.json").exists() or process_alive(pid):
            continue
        if keep:
            say(f"stale work directory {d} (its runner, pid {pid}, was killed; kept: --keep)")
            continue
        shutil.rmtree(d, ignore_errors=True)
        say(f"removed stale work directory {d} (its runner, pid {pid}, was killed)")
        removed.append(d)
    return removed
