"""Metaflow's code package: what it holds (its fingerprint) before the tarball is made.

Why: a warm `--check` must not pay for compressing Metaflow and the flow's directory only
to learn the package's sha. Metaflow's own `MetaflowPackage` chooses the content (the flow
directory under its suffix filter, Metaflow and its extensions, INFO/CONFIG, files
decorators add); it is run here with a `Recorder` in place of its tar backend, which
records each member instead of compressing it. The fingerprint hashes exactly what the
tar writer keeps of each member: its name, bytes, size and executable bit (mtime, owner and
other mode bits are fixed), so two equal fingerprints make byte-identical tarballs; the
tarball itself is made by replaying the recorded members into Metaflow's tar backend, only
when the package is needed (a cache miss, or an upload).

The same flow makes the same package whoever compiles it and whatever the git state around
it (so the YAML, which holds the package's sha, can be checked in: `--check`, the pre-commit
hook). Three things in Metaflow's own tarball would change it: (1) its INFO file records who
compiled it and where (user name, git commit, uncommitted changes, platform, Python build):
mfargo leaves those keys out (COMPILE_SITE_INFO), and lists each extension's files sorted;
pods read INFO for the Metaflow version, the extensions and the script's name, which stay;
(2) each member's owner and permission bits are the compiling user's: mfargo writes owner 0
and 0644, or 0755 for an executable file; (3) members come in directory-listing order, which
differs between clones: mfargo sorts them.

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


# INFO keys that say who compiled the package and where, not what it holds; no pod reads them
# from INFO (a test lists the keys Metaflow writes, so a new one is looked at).
COMPILE_SITE_INFO = frozenset({
    "username", "production_token", "app", "runtime", "platform", "python_version", "python_version_code",
    "repo_url", "branch_name", "commit_sha", "has_uncommitted_changes",
})


class StableTar(TarPackagingBackend):
    """Metaflow's tar backend, with each file's owner and permissions fixed (see the docstring).
    Its tarball is Metaflow's tgz (pods unpack it as that: `_tar_metadata`)."""

    type = "mfargo-stable-tgz"  # Metaflow registers backends by type; "tgz" is its own

    def add_file(self, filename, arcname=None):
        info = self._archive.gettarinfo(filename, arcname)
        info.mtime = 1575360000  # Metaflow's own fixed mtime
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = _mode(info.mode)
        with open(filename, mode="rb") as f:
            self._archive.addfile(info, f)


def _mode(st_mode: int) -> int:
    return 0o755 if st_mode & 0o111 else 0o644


class Package:
    """A package's members, its fingerprint, and (when asked) its tarball and sha."""

    def __init__(self, metaflow_package, members: list):
        self.members = sorted(members, key=lambda member: member[1])  # stable: a repeated name keeps its order
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
                digest.update(b"file\0%o\0%d\0" % (_mode(st.st_mode), len(content)) + content)
        return digest.hexdigest()

    def blob(self) -> bytes:
        """The tarball Metaflow's tar backend makes from these members, owners and modes fixed."""
        backend = StableTar()
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

    with _kubernetes_found_not_imported(), _info_without_compile_site(environment):
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


def _stable_info(info: dict) -> dict:
    """INFO without COMPILE_SITE_INFO, each extension's file list sorted (Metaflow lists a
    source-tree extension's files in directory order, which differs between clones; pods use
    the list as a set). New lists: Metaflow's own are zipped with their full paths."""
    info = {k: v for k, v in info.items() if k not in COMPILE_SITE_INFO}
    if "ext_info" in info:
        packages, per_point = info["ext_info"]
        packages = {name: {**pkg, "files": sorted(pkg["files"])} if isinstance(pkg.get("files"), list) else pkg
                    for name, pkg in packages.items()}
        info["ext_info"] = [packages, per_point]
    return info


@contextlib.contextmanager
def _info_without_compile_site(environment):
    """While packaging, the environment's INFO lacks COMPILE_SITE_INFO."""
    own = vars(environment).get("get_environment_info")
    original = environment.get_environment_info

    def get_environment_info(*args, **kwargs):
        return _stable_info(original(*args, **kwargs))

    environment.get_environment_info = get_environment_info
    try:
        yield
    finally:
        if own is None:
            del environment.get_environment_info  # the class's method again
        else:
            environment.get_environment_info = own


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

