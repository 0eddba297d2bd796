"""e2e/build.py: what it builds and where it keeps it (the builds themselves run in
tests/engine_tools.py's fixture and in e2e/cluster)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parent.parent / "e2e" / "build.py"


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("e2e_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_list_names_every_part_once_with_its_version():
    out = subprocess.run([sys.executable, str(BUILD), "--list"], capture_output=True, text=True, check=True).stdout
    rows = dict(line.split("\t") for line in out.splitlines())
    assert rows["kube-apiserver"] == rows["kubelet"] == "v1.34.4"
    assert rows["argo"] == rows["argoexec"] == "v4.0.5"
    assert rows["jobset"] == rows["jobset-validate"] == "v0.12.0"  # the default target's release
    assert rows["sensor-validate"] == "(local)"  # e2e/tools/sensor-validate
    assert len(out.splitlines()) == len(rows)


def test_an_unknown_part_is_one_line_and_nothing_is_built(tmp_path):
    proc = subprocess.run([sys.executable, str(BUILD), "etcd", "no-such-part"], capture_output=True, text=True,
                          env={"MFARGO_E2E_CACHE": str(tmp_path), "PATH": "/usr/local/go/bin:/usr/bin:/bin"})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "unknown part 'no-such-part'" in proc.stderr
    assert not (tmp_path / "bin").exists()


def test_the_cache_key_follows_version_recipe_and_go(build, monkeypatch, tmp_path):
    monkeypatch.setenv("MFARGO_E2E_CACHE", str(tmp_path))
    r = build.recipe("kubelet")
    path = build.binary_path(r, "go1.26.8")
    assert path.parent.parent == tmp_path / "bin" and path.name == "kubelet"
    assert build.binary_path(r, "go1.26.8") == path
    assert build.binary_path(replace(r, version="v1.35.4"), "go1.26.8") != path
    assert build.binary_path(replace(r, ldflags=()), "go1.26.8") != path
    assert build.binary_path(r, "go1.27.0") != path


def test_kubernetes_staging_modules_point_at_their_published_tags(build):
    go_mod = "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n" \
             "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n"
    assert build._staging_replacements(go_mod, "v1.34.4") == [
        "\tk8s.io/api => k8s.io/api v0.34.4", "\tk8s.io/client-go => k8s.io/client-go v0.34.4"]


def test_a_local_program_is_keyed_by_its_files_not_by_the_checkout_path(build, monkeypatch, tmp_path):
    """A fresh clone (CI's) finds the binary an earlier checkout built from the same files."""
    monkeypatch.setenv("MFARGO_E2E_CACHE", str(tmp_path / "cache"))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "go.mod").write_text("module x\n")
        (tmp_path / name / "main.go").write_text("package main\n\nfunc main() {}\n")
    a, b = (build.Recipe("tool", "local", package=str(tmp_path / n)) for n in ("a", "b"))
    assert build.binary_path(a, "go1.26.8") == build.binary_path(b, "go1.26.8")
    (tmp_path / "b" / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    assert build.binary_path(a, "go1.26.8") != build.binary_path(b, "go1.26.8")


def test_a_part_at_another_version_is_its_own_recipe(build):
    argo3 = build.recipe("argo@v3.7.18")
    assert (argo3.module, argo3.version, argo3.package) == ("github.com/argoproj/argo-workflows/v3", "v3.7.18", "./cmd/argo")
    assert argo3.ldflags == ("-X", "github.com/argoproj/argo-workflows/v3.version=v3.7.18")
    assert build.recipe("argo").module == "github.com/argoproj/argo-workflows/v4"
    old, new = build.recipe("jobset-validate@v0.10.1"), build.recipe("jobset-validate")
    assert old.requires == (("sigs.k8s.io/jobset", "v0.10.1"),) and old.tags == ()
    assert new.requires == (("sigs.k8s.io/jobset", "v0.12.0"),) and new.tags == ("jobset_setup",)
    assert build.binary_path(old, "go1.26.8") != build.binary_path(new, "go1.26.8")


@pytest.mark.parametrize("name", ["kubelet@v1.35.0", "argo@3.7.18", "argo@v3.7"])
def test_a_version_on_a_part_that_takes_none_or_a_malformed_one_is_refused(name, tmp_path):
    proc = subprocess.run([sys.executable, str(BUILD), name], capture_output=True, text=True,
                          env={"MFARGO_E2E_CACHE": str(tmp_path), "PATH": "/usr/local/go/bin:/usr/bin:/bin"})
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "take @vX.Y.Z" in proc.stderr


def test_a_program_built_against_an_older_release_takes_that_releases_requirements(build):
    ours = "module x\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.35.1\n\tk8s.io/apiextensions-apiserver v0.35.1\n" \
           "\tsigs.k8s.io/controller-runtime v0.24.0\n\tsigs.k8s.io/yaml v1.6.0\n\tgithub.com/only/ours v1.0.0\n)\n"
    upstream = "module sigs.k8s.io/jobset\n\nrequire (\n\tk8s.io/api v0.34.1\n\tsigs.k8s.io/controller-runtime v0.22.1\n" \
               "\tsigs.k8s.io/yaml v1.4.0\n)\n\nrequire k8s.io/apiextensions-apiserver v0.33.0 // indirect\n"
    assert build._aligned(ours, upstream) == {
        "k8s.io/api": "v0.34.1", "k8s.io/apiextensions-apiserver": "v0.34.1",  # staging modules move together
        "sigs.k8s.io/controller-runtime": "v0.22.1", "sigs.k8s.io/yaml": "v1.4.0"}


def test_a_local_program_already_pinned_to_its_release_is_built_as_it_is(build, monkeypatch, tmp_path):
    """jobset-validate's own go.mod names the default release: no `go mod edit`/`tidy` for it."""
    calls = []
    monkeypatch.setattr(build, "_run", lambda cmd, cwd, logfile, part: calls.append(cmd[:3]))
    monkeypatch.setattr(build, "_download", lambda *a: pytest.fail("nothing to download"))
    build._build_local(build.recipe("jobset-validate"), tmp_path / "work", tmp_path / "out", tmp_path / "log")
    assert calls == [["go", "build", "-trimpath"]]
