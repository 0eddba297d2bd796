"""mfargo.cache: a changed input is a miss (never a wrong hit), an unchanged one a hit.

Hits and misses are read off the cache directory: a miss stores one more entry. Every
output, hit or miss, is compared with a compile that bypasses the cache (--no-cache)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from flowtools import REPO, clean_env, compile_file, write_flow

from mfargo import cache

FLOW = '''
from metaflow import FlowSpec, Parameter, resources, step
from settings import CPU


class CachedFlow(FlowSpec):
    """A flow to cache."""

    alpha = Parameter("alpha", default=1)

    @resources(cpu=CPU, memory=1024)
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    CachedFlow()
'''


class Project:
    """A flow directory, compiled with its own cache directory."""

    def __init__(self, tmp_path: Path):
        self.dir, self.cache = tmp_path / "flow", tmp_path / "cache"
        self.dir.mkdir()
        self.write(FLOW, cpu="1")

    def write(self, source: str, cpu: str) -> None:
        write_flow(self.dir, source)
        (self.dir / "settings.py").write_text("CPU = %s\n" % cpu)

    def entries(self) -> int:
        return len(list(self.cache.glob("*.out")))

    def compile(self, *args: str, **env: str) -> str:
        environment = clean_env(MFARGO_CACHE_DIR=str(self.cache), **env)
        cached = compile_file(self.dir / "flow.py", "--code-in-image", "/app", *args, env=environment).stdout
        fresh = compile_file(self.dir / "flow.py", "--code-in-image", "/app", "--no-cache", *args,
                             env=environment).stdout
        assert cached == fresh  # a hit returns exactly what compiling returns
        return cached


def test_each_input_that_reaches_the_yaml_is_in_the_key(tmp_path):
    p = Project(tmp_path)
    base = p.compile()
    assert p.entries() == 1
    assert p.compile() == base and p.entries() == 1  # unchanged: a hit (and --no-cache stored nothing)

    seen = 1
    changes = [
        ("decorator attribute from an imported module", lambda: p.write(FLOW, cpu="2"), ()),
        ("graph", lambda: p.write(FLOW.replace("self.next(self.end)", "self.next(self.mid)").replace(
            "    @step\n    def end", "    @step\n    def mid(self):\n        self.next(self.end)\n\n"
                                       "    @step\n    def end"), cpu="2"), ()),
        ("parameter default", lambda: p.write(FLOW.replace("default=1", "default=2"), cpu="1"), ()),
        ("source only (a comment)", lambda: p.write(FLOW + "# a comment\n", cpu="1"), ()),
        ("create option", lambda: None, ("--max-workers", "7")),
        ("Metaflow config", lambda: None, ("METAFLOW_KUBERNETES_NAMESPACE", "other")),
        # Same YAML for this flow (no gang, no schedule), but validated against another schema.
        ("target JobSet version", lambda: None, ("--jobset-version", "0.8")),
        ("target Argo version", lambda: None, ("--argo-version", "3.7")),
    ]
    same_yaml = ("source only (a comment)", "target JobSet version", "target Argo version")
    outputs = {base}
    for what, change, extra in changes:
        change()
        if what == "Metaflow config":
            out = p.compile(**{extra[0]: extra[1]})
        else:
            out = p.compile(*extra)
        seen += 1
        assert p.entries() == seen, "no miss after changing the %s" % what
        if what not in same_yaml:
            assert out not in outputs, "the %s did not change the YAML" % what
        outputs.add(out)


def test_mfargo_itself_is_in_the_key(monkeypatch):
    import mfargo

    ir = {"a": (1, "x")}
    flow = Path(__file__)
    first = cache.key(ir, "yaml", str(flow))
    assert first == cache.key(ir, "yaml", str(flow))
    assert first != cache.key(ir, "json", str(flow))
    monkeypatch.setattr(mfargo, "__version__", "99.0")
    assert cache.key(ir, "yaml", str(flow)) != first
    monkeypatch.undo()
    monkeypatch.setattr(cache, "_source_digest", lambda: "edited")
    assert cache.key(ir, "yaml", str(flow)) != first


def test_canonical_form_tells_types_apart():
    from mfargo.compiler import ir

    assert cache.canonical((1, "1")) != cache.canonical(("1", 1))
    assert cache.canonical([1]) != cache.canonical((1,))
    assert cache.canonical(ir.Retry(user_retries=1)) != cache.canonical(ir.Retry(error_retries=1))
    assert json.dumps(cache.canonical(True)) != json.dumps(cache.canonical(1))
    assert cache.key({"f": object()}, "yaml", __file__) is None  # unknown value: not cached


def test_no_cache_dir_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MFARGO_CACHE_DIR", str(blocker / "sub"))
    cache.put("k", "text")  # cannot be written: silently no cache
    assert cache.get("k") is None


@pytest.mark.parametrize("package", ["templates", "base/validation"])
def test_text_depends_on_the_ir_alone(package):
    """Why the IR is a sound key: what turns it into text reads no Metaflow config or environment."""
    for path in (REPO / package).glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] == "metaflow" for n in names), (path, names)
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                pytest.fail("%s:%d reads the environment" % (path, node.lineno))  # in-pod script text is fine


PACKAGED_FLOW = FLOW.replace("from settings import CPU\n", "CPU = 1\n")


def _compile_packaged(flow_dir: Path, cache_dir: Path, *args: str) -> str:
    """--only-yaml with Metaflow's code package (no --code-in-image); the hit, if any, is
    compared with a --no-cache compile."""
    env = clean_env(MFARGO_CACHE_DIR=str(cache_dir))
    cached = compile_file(flow_dir / "flow.py", *args, env=env).stdout
    assert cached == compile_file(flow_dir / "flow.py", "--no-cache", *args, env=env).stdout
    return cached


def test_the_code_package_is_keyed_on_what_it_holds(tmp_path):
    """With a code package, the key holds what the package would contain (names, bytes,
    modes of its members), not the tarball: each change to a packaged file is a miss and
    a new package sha; a file the packager leaves out is a hit."""
    flow_dir, cache_dir = tmp_path / "flow", tmp_path / "cache"
    flow_dir.mkdir()
    write_flow(flow_dir, PACKAGED_FLOW)
    helper = flow_dir / "helper.py"  # packaged (Metaflow packs the flow directory's .py files)
    helper.write_text("A = 1\n")

    def entries() -> int:
        return len(list(cache_dir.glob("*.out")))

    def sha(text: str) -> str:
        [value] = set(re.findall(r"METAFLOW_CODE_SHA, value: (\w+)", text))
        return value

    shas = {sha(_compile_packaged(flow_dir, cache_dir))}
    assert entries() == 1
    assert sha(_compile_packaged(flow_dir, cache_dir)) in shas and entries() == 1  # unchanged: a hit
    (flow_dir / "notes.txt").write_text("not packaged\n")  # outside Metaflow's suffix filter
    assert sha(_compile_packaged(flow_dir, cache_dir)) in shas and entries() == 1
    changes = [
        ("a packaged file's bytes, same size", lambda: helper.write_text("A = 2\n")),
        ("a packaged file's mode", lambda: helper.chmod(0o755)),
        ("a new packaged file", lambda: (flow_dir / "other.py").write_text("")),
        ("a packaged file in a subdirectory", lambda: (flow_dir / "pkg").mkdir() or (flow_dir / "pkg" / "m.py").write_text("")),
    ]
    for what, change in changes:
        change()
        out = _compile_packaged(flow_dir, cache_dir)
        assert entries() == len(shas) + 1, "no miss after changing %s" % what
        assert sha(out) not in shas, "%s did not change the package" % what
        shas.add(sha(out))


def test_a_warm_check_with_a_code_package_makes_no_tarball(tmp_path, monkeypatch):
    """`--check` with the cache warm reads the package's members but compresses nothing."""
    flow_dir, cache_dir = tmp_path / "flow", tmp_path / "cache"
    flow_dir.mkdir()
    write_flow(flow_dir, PACKAGED_FLOW)
    (flow_dir / "flow.yaml").write_text(_compile_packaged(flow_dir, cache_dir))
    # A Python started with this directory on its path imports sitecustomize first: it
    # makes Metaflow's tar backend fail, so only a run that makes no tarball succeeds.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "from metaflow.packaging_sys.tar_backend import TarPackagingBackend\n"
        "def _refuse(self):\n    raise SystemExit('a tarball was made')\n"
        "TarPackagingBackend.create = _refuse\n")
    env = clean_env(MFARGO_CACHE_DIR=str(cache_dir), PYTHONPATH=str(hook))
    proc = compile_file(flow_dir / "flow.py", "--output-file", "flow.yaml", "--check", env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "is up to date" in proc.stderr
    stale = compile_file(flow_dir / "flow.py", "--output-file", "flow.yaml", "--check", "--no-cache", env=env,
                         check=False)
    assert stale.returncode == 1 and "a tarball was made" in stale.stderr  # the hook works
