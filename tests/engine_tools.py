"""Argo's and JobSet's own validation of what the tests compile: the real `argo lint
--offline` and the JobSet webhook's own code (e2e/tools/jobset-validate); Argo Events' own
Sensor validation (e2e/tools/sensor-validate) for the tests that call it.

Why: the schemas mfargo checks against are not the engines. A rule only the engine knows
(the JobSet webhook refused rule names that every schema check, `argo lint` and a server dry
run accepted) is only caught by running the engine's code. The binaries come from
`e2e/build.py` (built once into its cache; its lock makes concurrent xdist workers wait
rather than build twice). Every bundle the suite compiles is recorded (`record`); each
worker checks its records once, at the end of its session (conftest.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from mfargo.base.versions import ARGO_VERSIONS, DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "e2e" / "build.py"
BUILD_TIMEOUT = 3600  # seconds: a cold build of argo is ~10 min on a busy 2-core machine
CHECK_TIMEOUT = 600  # seconds for one lint or webhook run over every recorded file
ARGO, JOBSET_VALIDATE, SENSOR_VALIDATE = "argo", "jobset-validate", "sensor-validate"
ARGO_DEFAULTS = "argo-defaults"


def _build_module():
    spec = importlib.util.spec_from_file_location("mfargo_e2e_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# The engine releases the checks run (e2e/build.py names them, newest first).
ARGO_RELEASES: tuple[str, ...] = _build_module().ARGO_RELEASES
JOBSET_RELEASES: tuple[str, ...] = _build_module().JOBSET_RELEASES


def _minor(version: str) -> tuple[int, int]:
    return tuple(int(p) for p in version.lstrip("v").split(".")[:2])


def _major(version: str) -> str:
    return version.lstrip("v").split(".")[0]


def argo_release(target: str) -> str:
    """The Argo release that checks and runs output for target X.Y: the one of its major version."""
    [release] = [r for r in ARGO_RELEASES if _major(r) == _major(target)]
    return release


def argo_target(release: str) -> str:
    """The `--argo-version` whose output an Argo release checks and runs (argo_release's inverse)."""
    [target] = [t for t in ARGO_VERSIONS if _major(t) == _major(release)]
    return target


def jobset_releases(target: str) -> list[str]:
    """The JobSet webhooks a manifest for target X.Y must pass: every release at or above it (a
    target is the oldest JobSet the output runs on), or all of them for a target older than any."""
    return [r for r in JOBSET_RELEASES if _minor(r) >= _minor(target)] or list(JOBSET_RELEASES)


_binaries: dict[str, Path] = {}


def binary(name: str) -> Path:
    """The built binary (built on first use, once per process)."""
    if name not in _binaries:
        proc = subprocess.run([sys.executable, str(BUILD), name], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError("e2e/build.py %s failed: %s" % (name, proc.stderr.strip().splitlines()[-1:]))
        _binaries[name] = Path(proc.stdout.strip().splitlines()[-1])
    return _binaries[name]


def argo_lint(paths: list[Path], release: str = ARGO_RELEASES[0]) -> subprocess.CompletedProcess:
    """`argo lint --offline` (strict, as Argo's default) of one Argo release over `paths`, in one call."""
    return subprocess.run([str(binary(f"{ARGO}@{release}")), "lint", "--offline", "--output", "simple", *map(str, paths)],
                          capture_output=True, text=True, timeout=CHECK_TIMEOUT)


def jobset_admit(paths: list[Path], release: str = JOBSET_RELEASES[0]) -> subprocess.CompletedProcess:
    """One JobSet release's webhook defaulting and create validation, behind the API server's CRD checks."""
    return subprocess.run([str(binary(f"{JOBSET_VALIDATE}@{release}")), *map(str, paths)],
                          capture_output=True, text=True, timeout=CHECK_TIMEOUT)


def sensor_validate(paths: list[Path]) -> subprocess.CompletedProcess:
    """Argo Events' own reading of the Sensors in `paths` (strict decoding, ValidateSensor): its
    Sensor CRD has no schema, so an API server stores any spec."""
    return subprocess.run([str(binary(SENSOR_VALIDATE)), *map(str, paths)],
                          capture_output=True, text=True, timeout=CHECK_TIMEOUT)


def argo_merged(workflow_template: dict) -> tuple[dict, dict]:
    """Each template of ``workflow_template`` with its templateDefaults merged in, by Argo's
    own merge (e2e/tools/argo-defaults, Argo v4.0.5's types), and as mfargo merges it
    (``base.template_defaults``) read into Argo's types: {name: template} twice."""
    from mfargo.base import template_defaults

    spec = workflow_template["spec"]
    templates = spec["templates"]
    request = {"defaults": spec.get("templateDefaults"), "templates": templates,
               "merged": [template_defaults.merged(spec.get("templateDefaults"), t) for t in templates]}
    proc = subprocess.run([str(binary(ARGO_DEFAULTS))], input=json.dumps(request), capture_output=True, text=True,
                          timeout=CHECK_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError("argo-defaults: %s" % proc.stderr.strip())
    answer = json.loads(proc.stdout)
    return ({t["name"]: t for t in answer["argo"]}, {t["name"]: t for t in answer["merged"]})


# What Argo puts in place of each tag of a gang manifest, at its widest: the longest
# names (a template name of 63 chars and Argo's 5-char suffix, a retry in two digits), so a
# name that would be too long on some run is too long here. Other tags (a parameter or an
# expression in an env value) become OTHER_TAG.
OTHER_TAG = "x0"


def tag_values(workflow_template: dict) -> dict[str, str]:
    from metaflow_extensions.mfargo.plugins import pod_contract

    name = workflow_template["metadata"]["name"]
    return {
        "workflow.name": (name + "-x" * 32)[:57] + "-abcde",
        "workflow.namespace": workflow_template["metadata"].get("namespace") or "default",
        "retries": "10",
        "inputs.parameters.task-id-entropy": "f" * pod_contract.ENTROPY_CHARS,
        "inputs.parameters.num-parallel": "64",
        "inputs.parameters.worker-count": "63",
    }


def gang_manifests(bundle_text: str) -> list[tuple[str, str]]:
    """(template name, manifest with Argo's tags substituted) for each resource template."""
    out = []
    for doc in yaml.safe_load_all(bundle_text):
        if not isinstance(doc, dict) or doc.get("kind") != "WorkflowTemplate":
            continue
        values = tag_values(doc)
        for template in doc["spec"].get("templates") or []:
            manifest = (template.get("resource") or {}).get("manifest")
            if manifest and re.search(r"^kind: JobSet$", manifest, re.M):
                # As Argo substitutes: from a `{{` to the next `}}`.
                out.append((template["name"], re.sub(r"{{(.*?)}}", lambda m: values.get(m.group(1).strip(), OTHER_TAG),
                                                      manifest, flags=re.S)))
    return out


class Recorder:
    """The distinct bundles this process compiled, as files, with the test that made each and the
    Argo and JobSet versions it was compiled for."""

    def __init__(self):
        self.dir: Path | None = None  # made on the first record
        self.made_by: dict[Path, str] = {}
        self.targets: dict[Path, tuple[str, str]] = {}

    def record(self, text: str, test: str, argo_version: str = DEFAULT_ARGO_VERSION,
               jobset_version: str = DEFAULT_JOBSET_VERSION) -> None:
        if "kind: WorkflowTemplate" not in text and '"kind": "WorkflowTemplate"' not in text:
            return
        self.dir = self.dir or Path(tempfile.mkdtemp(prefix="mfargo-engine-checks-"))
        suffix = ".json" if text.lstrip().startswith("{") else ".yaml"
        key = "\0".join((text, argo_version, jobset_version))
        path = self.dir / (hashlib.sha256(key.encode()).hexdigest()[:16] + suffix)
        if path not in self.made_by:
            path.write_text(text)
            self.made_by[path] = test
            self.targets[path] = (argo_version, jobset_version)

    def problems(self) -> list[str]:
        """One line per bundle its Argo release's lint refuses and per JobSet a webhook of its
        JobSet releases refuses."""
        if not self.made_by:
            return []
        out = []
        for release in ARGO_RELEASES:
            mine = sorted(p for p in self.made_by if argo_release(self.targets[p][0]) == release)
            for batch in lint_batches(mine):
                lint = argo_lint(batch, release)
                if lint.returncode != 0:
                    failing = [p for p in batch if p.name in lint.stdout + lint.stderr] or batch
                    out += ["argo lint %s refused %s (compiled by %s): %s" % (release, p, self.made_by[p],
                            _lines_about(lint, p)) for p in failing]
        manifests: dict[Path, tuple[str, list[str]]] = {}
        for bundle in sorted(self.made_by):
            if bundle.suffix != ".yaml":
                continue
            for template, text in gang_manifests(bundle.read_text()):
                path = bundle.with_name("%s.%s.jobset.yaml" % (bundle.stem, template))
                path.write_text(text)
                manifests[path] = (self.made_by[bundle], jobset_releases(self.targets[bundle][1]))
        for release in JOBSET_RELEASES:
            mine = sorted(p for p, (_, releases) in manifests.items() if release in releases)
            admit = jobset_admit(mine, release) if mine else None
            if admit is not None and admit.returncode != 0:
                out += ["the JobSet %s webhook refused %s (compiled by %s): %s" % (release, line.split(": ", 1)[0],
                        manifests.get(Path(line.split(": ", 1)[0]), ("?",))[0], line.split(": ", 1)[-1])
                        for line in (admit.stdout + admit.stderr).splitlines() if line.strip()]
        if not out:
            shutil.rmtree(self.dir, ignore_errors=True)  # kept, with the files named, when refused
        return out


_TEMPLATE_KEY = re.compile(r"^kind: WorkflowTemplate\nmetadata:\n  name: (\S+)\n(?:  namespace: (\S+)\n)?", re.M)


def lint_batches(paths: list[Path]) -> list[list[Path]]:
    """Files in as few `argo lint` calls as can be: offline, Argo refuses two WorkflowTemplates
    of one namespace and name in one call ("duplicate WorkflowTemplate found"), and the tests
    compile many flows of the same name."""
    batches: list[tuple[set, list[Path]]] = []
    for path in paths:
        text = path.read_text()
        if path.suffix == ".json":
            meta = json.loads(text).get("metadata", {})
            keys = {(meta.get("namespace"), meta.get("name"))}
        else:
            keys = {(ns or None, name) for name, ns in _TEMPLATE_KEY.findall(text)} or {("", str(path))}
        batch = next((b for b in batches if not keys & b[0]), None)
        if batch is None:
            batch = (set(), [])
            batches.append(batch)
        batch[0].update(keys)
        batch[1].append(path)
    return [files for _, files in batches]


def _lines_about(proc: subprocess.CompletedProcess, path: Path) -> str:
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if path.name in line]
    return "; ".join(lines) or (proc.stdout + proc.stderr).strip()[-2000:]


RECORDER = Recorder()
