"""Which ``python`` the pods run: the interpreter that runs mfargo, or ``--python``.

A pod's command says ``python`` (Argo's image would provide one).  Locally the
obvious answer, "whatever is first on PATH", breaks the commonest laptop set-up:
``venv/bin/mfargo run`` without activating the venv would run the pods with the
system Python, which has no Metaflow.  So the chosen interpreter's directory goes
first on the pods' PATH; if that directory has no ``python`` that is this same
interpreter (``/usr/bin`` has only ``python3``), a ``<work_dir>/python-bin`` with
``python``/``python3`` links to it goes before it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from . import python_paths
from .model import WorkflowError

NAMES = ("python", "python3")
PROBE_TIMEOUT = 60  # seconds for another interpreter to start and list its paths


def check_interpreter(python: str | os.PathLike | None) -> str:
    """The interpreter path to use (default: this one); a bad ``--python`` is one line."""
    if python is None:
        return sys.executable
    path = os.path.abspath(os.path.expanduser(str(python)))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise WorkflowError(f"--python {python}: not an executable file")
    return path


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def path_dirs(python: str, work_dir: Path) -> list[str]:
    """Directories to put first on the pods' PATH so that ``python`` is ``python``."""
    bindir = os.path.dirname(python)
    dirs = [bindir]
    if not all(_same_file(os.path.join(bindir, n), python) for n in NAMES):
        shim = Path(work_dir) / "python-bin"
        shim.mkdir(parents=True, exist_ok=True)
        for n in NAMES:
            link = shim / n
            if not link.is_symlink():
                link.symlink_to(python)
        dirs.insert(0, str(shim))
    return dirs


def with_interpreter_path(env: dict[str, str], python: str, work_dir: Path) -> dict[str, str]:
    """``env`` with the interpreter's directories first on PATH (no duplicates)."""
    first = path_dirs(python, work_dir)
    rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p not in first]
    return {**env, "PATH": os.pathsep.join(first + rest)}


@lru_cache(maxsize=1)
def _own_paths() -> tuple[str, ...]:
    return tuple(python_paths.needed())


def needed_paths(python: str, env: dict[str, str]) -> list[str]:
    """The host paths ``python`` reads at run time (:mod:`runner.python_paths`): asked of
    this process when it is the interpreter running mfargo, else of ``python`` itself,
    started with the pods' ``env`` (so a ``--python`` that cannot start is one line)."""
    if python == sys.executable:
        return list(_own_paths())
    try:
        # (its source with -c: run as a file, runner/ would come first on sys.path and shadow
        # the standard library's `resource`)
        proc = subprocess.run([python, "-c", Path(python_paths.__file__).read_text()], env=env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL, cwd="/")
        if proc.returncode == 0:
            return list(json.loads(proc.stdout.strip().splitlines()[-1]))
        why = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
    except subprocess.TimeoutExpired:
        why = f"did not answer within {PROBE_TIMEOUT} s"
    except (OSError, ValueError, IndexError) as e:
        why = str(e)
    raise WorkflowError(f"--python {python}: cannot run it ({why})")
