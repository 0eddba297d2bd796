"""Metaflow's code package: what it holds (its fingerprint) before the tarball is made.

Why: a warm `--check` must not pay for compressing Metaflow and the flow's directory only
to learn the package's sha. Metaflow's own `MetaflowPackage` chooses the content (the flow
directory under its suffix filter, Metaflow and its extensions, INFO/CONFIG, files
decorators add); it is run here with a `Recorder` in place of its tar backend, which
records each member in order instead of compressing it. The fingerprint hashes exactly
what the tar writer reads of each member: its name, bytes, mode, owner and size (the tar
writer fixes every mtime), so two equal fingerprints make byte-identical tarballs; the
tarball itself is made by replaying the recorded members into Metaflow's tar backend, only
when the package is needed (a cache miss, or an upload).

Metaflow's `@kubernetes` checks in `package_init` that the kubernetes client is importable
by importing it (0.3-0.5 CPU-s); while packaging, the same check is made by finding the
module without importing it (a missing client still fails with Metaflow's message).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from io import BytesIO

from metaflow.packaging_sys.tar_backend import TarPackagingBackend


class Recorder(TarPackagingBackend):
    """The tar backend's interface, recording (path or bytes, arcname) instead of writing."""

    type = "mfargo-recorded-tgz"
    members: list = []  # the last package's, in the order the tar writer would add them

    def create(self):
        Recorder.members = []
        return self

    def add_file(self, filename, arcname=None):
        Recorder.members.append((filename, arcname))

    def add_data(self, data, arcname):
        Recorder.members.append((bytes(data.getvalue()), arcname))

    def close(self):
        pass

    def get_blob(self):
        return b"recorded"


class Package:
    """A package's members, its fingerprint, and (when asked) its tarball and sha."""

    def __init__(self, metaflow_package, members: list):
        self.members = members
        self.metadata = _tar_metadata(metaflow_package)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for source, arcname in self.members:
            digest.update(arcname.encode() + b"\0")
            if isinstance(source, bytes):
                digest.update(b"data\0%d\0" % len(source) + source)
            else:
                st = os.stat(source)
                with open(source, "rb") as f:
                    content = f.read()
                digest.update(b"file\0%o\0%d\0%d\0%d\0" % (st.st_mode, st.st_uid, st.st_gid, len(content)) + content)
        return digest.hexdigest()

    def blob(self) -> bytes:
        """The tarball Metaflow's own backend makes from these members, in this order."""
        backend = TarPackagingBackend()
        with backend.create() as archive:
            for source, arcname in self.members:
                if isinstance(source, bytes):
                    archive.add_data(BytesIO(source), arcname=arcname)
                else:
                    archive.add_file(source, arcname=arcname)
        return bytes(backend.get_blob())


def record(flow, environment, echo, suffixes) -> Package:
    """Run Metaflow's packager over the flow with the Recorder as its archive."""
    from metaflow.package import MetaflowPackage

    with _kubernetes_found_not_imported():
        package = MetaflowPackage(flow, environment, echo, suffixes=suffixes, backend=Recorder)
        package.blob  # waits for Metaflow's packaging thread; raises what it raised
    return Package(package, list(Recorder.members))


def _tar_metadata(package) -> str:
    """Metaflow's METAFLOW_CODE_METADATA, as its tar backend would state it."""
    recorded = package._backend
    try:
        package._backend = TarPackagingBackend
        return package.package_metadata
    finally:
        package._backend = recorded


@contextlib.contextmanager
def _kubernetes_found_not_imported():
    try:
        from metaflow.plugins.kubernetes.kubernetes_decorator import KubernetesDecorator
    except ImportError:
        yield
        return
    original = KubernetesDecorator.package_init

    def package_init(self, flow, step_name, environment):
        if importlib.util.find_spec("kubernetes") is None:
            original(self, flow, step_name, environment)  # Metaflow's own error

    KubernetesDecorator.package_init = package_init
    try:
        yield
    finally:
        KubernetesDecorator.package_init = original

