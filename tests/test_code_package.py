"""mfargo/metaflow_cli/code_package.py: Metaflow's packager run with a recorder instead of its tar
writer; the tarball replayed from the record holds the recorded members, and an
offline compile with a package imports no kubernetes client."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from flowtools import clean_env, linear_flow, load_flow, write_flow

FLOW = linear_flow("PackagedFlow", start_decorators="@kubernetes(cpu=1)")


def test_the_replayed_tarball_holds_the_recorded_members(tmp_path, monkeypatch):
    """Each recorded member, once, in order; the same record makes the same tarball. (That
    the members are Metaflow's own, owners and modes fixed: test_stable_package.py.)"""
    import io
    import tarfile

    from metaflow.metaflow_environment import MetaflowEnvironment
    from metaflow.package import MetaflowPackage

    from mfargo.metaflow_cli import code_package

    path = write_flow(tmp_path, FLOW)
    (tmp_path / "helper.py").write_text("A = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.py").write_text("B = 2\n")
    monkeypatch.setattr(sys, "argv", [str(path)])  # Metaflow packs the directory of argv[0]
    flow = load_flow(path)
    environment = MetaflowEnvironment(flow)
    quiet = lambda *args, **kwargs: None  # noqa: E731
    recorded = code_package.record(flow, environment, quiet, None)
    with tarfile.open(fileobj=io.BytesIO(recorded.blob()), mode="r:gz") as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
    assert names == [arcname for _, arcname in recorded.members]
    assert {"flow.py", "helper.py", "sub/data.py"} <= set(names)
    assert recorded.metadata == MetaflowPackage(flow, environment, quiet).package_metadata
    again = code_package.record(flow, environment, quiet, None)
    assert recorded.fingerprint() == again.fingerprint()
    assert hashlib.sha1(recorded.blob()).hexdigest() == hashlib.sha1(again.blob()).hexdigest()


def test_packaging_a_kubernetes_step_imports_no_kubernetes_client(tmp_path):
    """Metaflow's @kubernetes imports the client in package_init only to see it is there."""
    path = write_flow(tmp_path, FLOW)
    cmd = [sys.executable, "-X", "importtime", path.name, "--datastore=s3", "--datastore-root=s3://bkt/mf",
           "argo-workflows", "create", "--only-yaml", "--no-cache"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "METAFLOW_CODE_SHA" in proc.stdout  # it did package
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "kubernetes" not in modules
