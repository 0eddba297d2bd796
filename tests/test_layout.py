"""Python started in the checkout's root must not see a second `metaflow_extensions`.

With the extension at the root, `python` run there (sys.path[0] = the root) found the
checkout's copy next to the installed one, and Metaflow refused to start ("Conflicts in
'metaflow_extensions' files") whenever mfargo was installed non-editable. It lives in
extension/ now (pyproject's package-dir maps it)."""

import subprocess
import sys
from importlib.machinery import PathFinder

from flowtools import REPO, clean_env


def test_the_root_holds_no_metaflow_extensions_package():
    assert PathFinder.find_spec("metaflow_extensions", [str(REPO)]) is None


def test_metaflow_starts_from_the_root_with_one_extension_location():
    code = ("import os, metaflow, metaflow_extensions, mfargo.metaflow_cli.argo_cli as cli; "
            "print(len([p for p in metaflow_extensions.__path__ if os.path.isdir(p)]), cli.__file__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, where = proc.stdout.split()  # directories only: an editable install adds a path hook entry
    assert count == "1" and where == str(REPO / "mfargo/metaflow_cli/argo_cli.py")
