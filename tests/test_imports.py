"""Import structure: the folders are layers (each imports only those below it) and there
is no cycle between mfargo's modules; an offline compile imports nothing
for deploying nor hera; a compile the cache answers imports neither the templates nor the schemas."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from flowtools import REPO, clean_env, linear_flow, write_flow

# Source folder -> the package it installs as (pyproject's package-dir).
PACKAGES = {
    "mfargo": "mfargo",
    "base": "mfargo.base",
    "compiler": "mfargo.compiler",
    "templates": "mfargo.templates",
    "runner": "mfargo.runner",
    "extension/metaflow_extensions/mfargo/plugins": "metaflow_extensions.mfargo.plugins",
}


def project_modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if "site" in parts:  # runner/site: copied into pods, not imported here
                continue
            out[".".join([package, *parts])] = path
    return out


# The folders as layers, lowest first: each may import only folders before it. The code that
# runs in pods (the extension) and what every layer builds on (base) import nothing of the
# rest; the compiler makes the IR, templates render it, the runner plays the YAML, and
# mfargo/ (pipeline, deploy, both front ends) sits on top.
LAYERS = ("extension/metaflow_extensions/mfargo/plugins", "base", "compiler", "templates", "runner", "mfargo")
# The one import upward: Metaflow imports every deployer provider when it starts, in pods too,
# so the extension holds a thin one that reaches the front end only when the Deployer is used.
UPWARD = {("metaflow_extensions.mfargo.plugins.deployer", "mfargo.metaflow_cli.deployer_objects")}


def all_imports(path: Path, modules: dict[str, Path], name: str) -> set[str]:
    """Project modules ``path`` imports anywhere in it, deferred imports included."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            anchor = (base.rsplit(".", node.level - 1)[0] if node.level > 1 else base) if node.level else ""
            module = ".".join(p for p in (anchor, node.module or "") if p)
            targets = [module + "." + a.name for a in node.names] + [module]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def test_folders_are_layers():
    modules = project_modules()
    folder_of = {name: next(f for f in PACKAGES if path.is_relative_to(REPO / f)) for name, path in modules.items()}
    wrong = sorted(
        "%s imports %s (%s)" % (name, target, folder_of[target])
        for name, path in modules.items() for target in all_imports(path, modules, name)
        if LAYERS.index(folder_of[target]) > LAYERS.index(folder_of[name]) and (name, target) not in UPWARD
    )
    assert not wrong, "a folder imports one above it:\n" + "\n".join(wrong)
    assert sorted(LAYERS) == sorted(PACKAGES)


def module_level_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `name` imports when it is first imported (function-level imports are
    deferred on purpose and cannot close a cycle at import time)."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                module = anchor + ("." + node.module if node.module else "")
            else:
                module = node.module or ""
            targets = [module + "." + a.name for a in node.names] + [module]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a parent is already loading
                found.add(target)
    return found


def test_no_import_cycle():
    modules = project_modules()
    graph = {name: module_level_imports(name, path, modules) for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert "mfargo.deploy" in graph and "mfargo.metaflow_cli.argo_cli" in graph


FLOW = linear_flow("ImportFlow")


def imported(flow: Path, *args: str, env: dict) -> set[str]:
    cmd = [sys.executable, "-X", "importtime", flow.name, "--datastore=s3", "--datastore-root=s3://bkt/mf",
           "argo-workflows", "create", "--code-in-image", "/app", *args]
    proc = subprocess.run(cmd, cwd=flow.parent, env=env, capture_output=True, text=True, timeout=120, check=True)
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_offline_compile_imports_nothing_for_deploying_and_a_cache_hit_no_hera(tmp_path):
    flow = write_flow(tmp_path, FLOW)
    env = clean_env(MFARGO_CACHE_DIR=str(tmp_path / "cache"))
    full = imported(flow, "--output-file", "flow.yaml", env=env)
    assert {"mfargo.templates", "mfargo.base.validation"} <= full  # it did compile
    assert not {"kubernetes", "mfargo.deploy", "mfargo.cluster"} & full
    assert not {"hera", "pydantic"} & full  # templates build plain dicts (templates/argo_models.py)
    assert "jsonschema" not in full  # valid documents pass the quick test (base/validation/quick.py)
    warm = imported(flow, "--output-file", "flow.yaml", "--check", env=env)
    assert "mfargo.compiler" in warm
    assert not {"hera", "pydantic", "jsonschema", "mfargo.templates", "mfargo.base.validation", "kubernetes"} & warm


# Keys and apiVersions other tools read: typed once, in compiler/constants.py.


def test_mfargo_run_starts_without_the_compiler_or_metaflow():
    """`mfargo run` plays YAML: importing the compiler (and with it Metaflow) cost every run
    0.2 CPU-s, as much as its own start-up, when runner/limits.py took a constant from it."""
    code = ("import sys, mfargo.runner.cli, mfargo.runner.api, mfargo.runner.jobset\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'metaflow'\n"
            "                 or m.startswith(('mfargo.compiler', 'mfargo.templates')))))")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.split() == []
_CONTRACT_LITERAL = re.compile(
    r"^(metaflow|mfargo|app\.kubernetes\.io|workflows\.argoproj\.io|jobset\.sigs\.k8s\.io|alpha\.jobset\.sigs\.k8s\.io"
    r"|kueue\.x-k8s\.io)/[A-Za-z0-9_.-]+$|^(argoproj\.io/v1alpha1|jobset\.x-k8s\.io/v1alpha2)$")


def test_label_and_api_literals_only_in_constants():
    stray = []
    for folder in ("base", "compiler", "templates", "mfargo", "mfargo/metaflow_cli",
                   "extension/metaflow_extensions/mfargo/plugins"):
        for path in sorted((REPO / folder).glob("*.py")):
            if path.name in ("constants.py", "pod_contract.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and _CONTRACT_LITERAL.match(node.value):
                    stray.append("%s:%d %s" % (path.relative_to(REPO), node.lineno, node.value))
    assert stray == []
