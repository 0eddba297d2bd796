"""Byte-stable in code-package mode (issue 29, item 5): the same flow gives the same YAML
(and so the same package sha) whoever compiles it, from whichever clone, whatever the git
state outside the flow's package, committed YAML included; the cache agrees with a
compile that bypasses it; the package's INFO keeps what pods read from it."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from flowtools import clean_env, compile_file, linear_flow, load_flow, write_flow

FLOW = linear_flow("StableFlow", "from helper import A\nself.a = A", start_decorators="@kubernetes(cpu=1)")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True, timeout=60)


def _repo(root: Path) -> Path:
    """A git work tree with the flow in flows/ and an unrelated file beside it."""
    root.mkdir()
    _git(root, "init", "-q")
    flows = root / "flows"
    flows.mkdir()
    write_flow(flows, FLOW)
    (flows / "helper.py").write_text("A = 1\n")
    (root / "README.md").write_text("notes\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "flow")
    return flows / "flow.py"


def _yaml(flow: Path, cache: Path, user: str, *args: str) -> str:
    """--only-yaml with Metaflow's code package; a cached compile must equal a fresh one."""
    env = clean_env(USER=user, MFARGO_CACHE_DIR=str(cache))
    cached = compile_file(flow, *args, env=env).stdout
    assert cached == compile_file(flow, "--no-cache", *args, env=env).stdout
    return cached


def _sha(text: str) -> str:
    [value] = set(re.findall(r"METAFLOW_CODE_SHA, value: (\w+)", text))
    return value


def test_same_bytes_whoever_compiles_and_whatever_the_git_state(tmp_path):
    flow = _repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    first = _yaml(flow, cache, "alice")
    assert _sha(first)  # the code-package mode: the YAML holds the package's sha
    assert _yaml(flow, cache, "bob") == first, "another USER changed the bytes"
    assert _yaml(flow, tmp_path / "cold", "bob") == first, "another USER, cold cache"
    (tmp_path / "repo" / "README.md").write_text("edited, not committed\n")
    assert _yaml(flow, cache, "alice") == first, "an unrelated uncommitted edit changed the bytes"
    (flow.parent / "flow.yaml").write_text(first)
    _git(tmp_path / "repo", "add", "-A")
    _git(tmp_path / "repo", "commit", "-qm", "the compiled YAML")
    assert _yaml(flow, cache, "alice") == first, "committing the YAML changed the bytes"
    # The pre-commit hook's check, by another user, after that commit: up to date.
    env = clean_env(USER="carol", MFARGO_CACHE_DIR=str(tmp_path / "cold2"))
    proc = compile_file(flow, "--output-file", "flow.yaml", "--check", env=env, check=False)
    assert proc.returncode == 0 and "is up to date" in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_same_bytes_from_another_clone_with_other_modes(tmp_path):
    """Another clone (another path, its own directory order) whose files have the group-write
    bit a different umask gives: the same package."""
    flow = _repo(tmp_path / "repo")
    first = _yaml(flow, tmp_path / "cache", "alice")
    clone = tmp_path / "elsewhere" / "clone"
    clone.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(tmp_path / "repo"), str(clone)], check=True, capture_output=True,
                   timeout=60)
    for path in (clone / "flows").iterdir():
        path.chmod(0o664)
    assert _yaml(clone / "flows" / "flow.py", tmp_path / "cache2", "bob") == first


def test_the_package_is_metaflows_members_without_the_compile_site(tmp_path, monkeypatch):
    """The tarball holds what Metaflow's own would (same names, same bytes), but INFO lacks
    who compiled it and where; each member's owner is 0 and its mode 0644/0755; members sorted."""
    from metaflow.metaflow_environment import MetaflowEnvironment
    from metaflow.package import MetaflowPackage

    from mfargo.metaflow_cli import code_package

    monkeypatch.setenv("USER", "alice")
    flow_path = _repo(tmp_path / "repo")
    (flow_path.parent / "tool.py").write_text("#!/usr/bin/env python\n")
    (flow_path.parent / "tool.py").chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(flow_path)])  # Metaflow packs the directory of argv[0]
    flow = load_flow(flow_path, "mfargo_stable_package_flow")
    environment = MetaflowEnvironment(flow)
    quiet = lambda *args, **kwargs: None  # noqa: E731
    before = environment.get_environment_info()
    metaflows = _members(bytes(MetaflowPackage(flow, environment, quiet).blob))
    recorded = code_package.record(flow, environment, quiet, None)
    ours = _members(recorded.blob())
    assert [name for name, _ in ours] == sorted(name for name, _ in ours)
    assert {n for n, _ in ours} == {n for n, _ in metaflows} and {"flow.py", "helper.py"} <= {n for n, _ in ours}
    [info_name] = [n for n, _ in ours if n.rsplit("/", 1)[-1] == "INFO"]  # .mf_meta/INFO in Metaflow 2.19
    theirs = dict(metaflows)
    for name, (info, content) in ours:
        assert info.uid == info.gid == 0 and info.uname == info.gname == ""
        if name != info_name:
            assert content == theirs[name][1], name
            assert info.mode == (0o755 if theirs[name][0].mode & 0o111 else 0o644), name
    assert dict(ours)["tool.py"][0].mode == 0o755
    info = json.loads(dict(ours)[info_name][1])
    full = json.loads(theirs[info_name][1])
    # What Metaflow's own INFO records here. Its git keys only when this process's first git
    # look-up was in a git repository (Metaflow caches it per process; another test may have
    # gone first): the byte tests above compile in fresh processes inside a git repository.
    assert full["username"] == "alice" and "username" not in info
    assert not set(info) & {"repo_url", "branch_name", "commit_sha", "has_uncommitted_changes"}
    assert set(info) == set(full) - code_package.COMPILE_SITE_INFO
    assert {k: v for k, v in info.items() if k != "ext_info"} == {
        k: v for k, v in full.items() if k not in code_package.COMPILE_SITE_INFO | {"ext_info"}}
    # The extensions: Metaflow's own record, each package's file list sorted (pods use it as a set).
    [packages, per_point] = info["ext_info"]
    [full_packages, full_per_point] = full["ext_info"]
    assert per_point == full_per_point and set(packages) == set(full_packages) and "mfargo" in packages
    for name, package in packages.items():
        assert package["files"] == sorted(full_packages[name]["files"])
        assert {k: v for k, v in package.items() if k != "files"} == {
            k: v for k, v in full_packages[name].items() if k != "files"}
    # What pods read from INFO stays: the Metaflow version, the extensions, the script.
    assert {"metaflow_version", "ext_info", "script"} <= set(info)
    assert recorded.metadata == MetaflowPackage(flow, environment, quiet).package_metadata
    assert environment.get_environment_info() == before  # the environment itself is left as it was


def test_every_info_key_metaflow_writes_is_reviewed(tmp_path, monkeypatch):
    """A key Metaflow adds to INFO must be looked at: kept (pods may read it) or left out
    (it says who compiled the package or where)."""
    from metaflow.metaflow_environment import MetaflowEnvironment

    from mfargo.metaflow_cli import code_package

    flow_path = _repo(tmp_path / "repo")
    monkeypatch.setattr(sys, "argv", [str(flow_path)])
    environment = MetaflowEnvironment(load_flow(flow_path, "mfargo_stable_info_flow"))
    kept = {"metaflow_version", "ext_info", "script", "environment_type", "use_r", "metaflow_r_version",
            "r_version", "r_version_code"}
    keys = set(environment.get_environment_info(include_ext_info=True)) | {"production_token", "app"}
    assert keys - kept - code_package.COMPILE_SITE_INFO == set()


def _members(blob: bytes) -> list[tuple[str, tuple[tarfile.TarInfo, bytes]]]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as archive:
        return [(m.name, (m, archive.extractfile(m).read())) for m in archive.getmembers() if m.isfile()]
