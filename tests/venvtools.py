"""Helpers for tests: interpreters installed the ways users install mfargo, made offline.

A venv made here has no pip and imports this test venv's packages through a ``.pth``
file: ``addsitedir`` (this venv's ``.pth`` files run too, so mfargo is the editable
checkout) or ``path`` (its site-packages on ``sys.path`` only: mfargo must then be
installed into the new venv, which comes first).  Installs build with this venv's
setuptools (no build isolation, no index)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = sysconfig.get_paths()["purelib"]


def linked_venv(path: Path, link: str = "addsitedir") -> Path:
    """A venv at ``path`` importing this venv's packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python*/site-packages")
    line = f"import site; site.addsitedir({SITE!r})" if link == "addsitedir" else SITE
    (site / "test-venv.pth").write_text(line + "\n")
    return path / "bin" / "python"


def console_script(python: Path, bin_dir: Path) -> Path:
    """``bin_dir/mfargo`` as pip writes it: a script whose shebang is ``python``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "mfargo"
    script.write_text(f"#!{python}\nimport sys\nfrom mfargo.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return script


def source_copy(dest: Path) -> Path:
    """What ``pip install .`` reads of the checkout (and the examples), under ``dest``."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for tree in ("mfargo", "base", "compiler", "templates", "runner", "extension", "examples"):
        shutil.copytree(REPO / tree, dest / tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def pip_install(python: Path, source: Path, editable: bool = False) -> None:
    """``pip install [-e] source`` into ``python``'s venv, offline, without dependencies."""
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
           "--no-build-isolation", "--no-index", "--ignore-installed", *(["-e"] if editable else []), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
