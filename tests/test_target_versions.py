"""`create --jobset-version X.Y` and `--argo-version 3.7|4.1`: what each target gets, what is refused.

The gang example (examples/distributed_training.py) is compiled for each JobSet release and
checked with mfargo's own validation and the independent shared validator of that release.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flowtools import EXAMPLES, compile_file
from mfargo.base import validation, versions
from mfargo.base.errors import UserError
from mfargo.base.validation import schema
from mfargo.base.validation.report import parse_manifest
from shared_schemas import SHARED_AVAILABLE, SHARED_DIR, run_shared_validator

GANG_FLOW = EXAMPLES / "distributed_training.py"


def _copy_gang(tmp_path: Path) -> Path:
    flow = tmp_path / GANG_FLOW.name
    flow.write_text(GANG_FLOW.read_text())
    return flow


def _jobsets(docs: list[dict]) -> list[dict]:
    wt = docs[0]
    manifests = [parse_manifest(t["resource"]["manifest"])[0] for t in wt["spec"]["templates"] if "resource" in t]
    return [obj for objs in manifests for obj in objs if obj.get("kind") == "JobSet"]


def test_jobset_before_0_6_is_refused_in_one_line(tmp_path):
    flow = _copy_gang(tmp_path)
    target = tmp_path / "out.yaml"
    proc = compile_file(flow, "--jobset-version", "0.5", "--output-file", str(target), check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("mfargo:")]  # after Metaflow's banner
    assert len(lines) == 1 and lines[0] == proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "terminalState" in lines[0] and "v0.6" in lines[0] and "Traceback" not in proc.stderr
    assert not target.exists()


@pytest.mark.parametrize("given, expected", [("0.8", "0.8"), ("v0.10", "0.10"), ("0.12.0", "0.12"), ("0.6", "0.6")])
def test_jobset_version_spellings(given, expected):
    assert versions.jobset_version(given) == expected


@pytest.mark.parametrize("given", ["0.5", "0.2.3", "1", "latest", "0.x", ""])
def test_bad_jobset_versions_are_user_errors(given):
    with pytest.raises(UserError):
        versions.jobset_version(given)


@pytest.mark.parametrize("wanted, shipped", [("0.6", "v0.6.0"), ("0.7", "v0.6.0"), ("0.8", "v0.8.2"),
                                             ("0.10", "v0.8.2"), ("0.12", "v0.12.0"), ("0.13", "v0.12.0")])
def test_each_version_is_checked_against_the_nearest_shipped_crd_at_or_below(wanted, shipped):
    assert schema.jobset_release(wanted).name == "jobset-%s.json" % shipped
    assert schema.schemas(jobset_version=wanted).jobset_version == shipped


def test_the_defaults_are_the_newest_shipped():
    shipped = sorted(schema.SCHEMA_DIR.glob("jobset-v*.json"), key=schema._release)
    assert schema._release(shipped[0])[:2] == versions.MIN_JOBSET
    assert schema._release(shipped[-1])[:2] == versions.NEWEST_JOBSET
    assert versions.DEFAULT_JOBSET_VERSION == "0.12" and versions.DEFAULT_ARGO_VERSION == "4.1"
    for argo in versions.ARGO_VERSIONS:
        assert (schema.SCHEMA_DIR / ("argo-workflows-%s.json" % argo)).is_file()


@pytest.mark.parametrize("jobset_version", ["0.8", "0.12"])
def test_gang_output_is_valid_for_its_jobset_version(tmp_path, jobset_version):
    flow = _copy_gang(tmp_path)
    target = tmp_path / "out.yaml"
    target.write_text(compile_file(flow, "--jobset-version", jobset_version).stdout)
    docs = list(yaml.safe_load_all(target.read_text()))
    assert _jobsets(docs), "the example has a gang"
    assert validation.validate_documents(docs, jobset_version=jobset_version) == []
    if SHARED_AVAILABLE:
        proc = run_shared_validator([target], jobset_version=jobset_version)
        assert proc.returncode == 0, proc.stdout


def test_every_field_mfargo_emits_exists_in_every_shipped_jobset_crd(tmp_path):
    """In-process, per shipped CRD: the gang example's manifests pass each (so any X.Y >= 0.6 works)."""
    docs = list(yaml.safe_load_all(compile_file(_copy_gang(tmp_path)).stdout))
    for path in sorted(schema.SCHEMA_DIR.glob("jobset-v*.json")):
        major_minor = ".".join(path.stem.split("-v")[1].split(".")[:2])
        assert validation.validate_documents(docs, jobset_version=major_minor) == [], path.name


def test_a_field_an_old_crd_lacks_is_reported():
    """The check is real: a v0.12-only field (a replicatedJob's groupName) fails against v0.6."""
    newest_only = [f for f in schema.schemas().jobset["properties"]["spec"]["properties"]
                   if f not in schema.schemas(jobset_version="0.6").jobset["properties"]["spec"]["properties"]]
    assert newest_only, "v0.12 adds spec fields over v0.6"
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"},
          "spec": {"replicatedJobs": [], newest_only[0]: {}}}
    problems = validation.validate_documents([js], jobset_version="0.6")
    assert problems and newest_only[0] in problems[0]


@pytest.mark.parametrize("argo_version, field", [("3.7", "schedule"), ("4.1", "schedules")])
def test_argo_version_picks_the_cron_spelling(tmp_path, argo_version, field):
    flow = tmp_path / "scheduled.py"
    flow.write_text((EXAMPLES / "scheduled.py").read_text())
    target = tmp_path / "out.yaml"
    target.write_text(compile_file(flow, "--argo-version", argo_version).stdout)
    docs = list(yaml.safe_load_all(target.read_text()))
    spec = next(d for d in docs if d["kind"] == "CronWorkflow")["spec"]
    other = {"schedule": "schedules", "schedules": "schedule"}[field]
    assert field in spec and other not in spec
    assert isinstance(spec[field], str if field == "schedule" else list)
    assert validation.validate_documents(docs, argo_version=argo_version) == []
    if SHARED_AVAILABLE:
        source = {"3.7": "schema-v3.7.18.json", "4.1": "schema.json"}[argo_version]
        proc = run_shared_validator([target], argo_schema=SHARED_DIR / "schemas" / "argo-workflows" / source)
        assert proc.returncode == 0, proc.stdout


def test_unknown_argo_version_is_refused_by_the_option(tmp_path):
    flow = _copy_gang(tmp_path)
    proc = compile_file(flow, "--argo-version", "3.5", check=False)
    assert proc.returncode != 0 and "3.5" in proc.stderr and "Traceback" not in proc.stderr


def _gang_ir(**bundle):
    """The gang example's IR (in-process), targeting the given versions."""
    from dataclasses import replace

    from mfargo import pipeline
    from mfargo.compiler import CompileOptions

    from flowtools import load_flow

    flow = load_flow(GANG_FLOW, "mfargo_versions_gang")
    options = CompileOptions(datastore="s3", datastore_root="s3://mfargo-examples/metaflow", code_in_image="/app")
    workflow = pipeline.compile_ir(flow, flow._graph, options)
    dep = workflow.deployment
    return replace(workflow, deployment=replace(dep, bundle=replace(dep.bundle, **bundle)))


def test_a_problem_only_an_older_target_has_names_the_versions(monkeypatch):
    """In-process: the pipeline validates against the Bundle's versions, and a problem there is
    reported as what that target lacks, not as an mfargo bug."""
    from mfargo import pipeline
    from mfargo.compiler import CompileError

    seen = []
    real = validation.validate_documents

    def spy(docs, argo_version, jobset_version):
        seen.append((argo_version, jobset_version))
        return real(docs, argo_version, jobset_version)

    monkeypatch.setattr(validation, "validate_documents", spy)
    assert pipeline.documents(_gang_ir(jobset_version="0.8", argo_version="3.7"))
    assert seen == [("3.7", "0.8")]
    monkeypatch.setattr(validation, "validate_documents", lambda docs, a, j: ["JobSet/x: spec.newField: unexpected"])
    with pytest.raises(CompileError, match=r"Argo 3\.7 / JobSet 0\.8 lacks .*spec\.newField"):
        pipeline.documents(_gang_ir(jobset_version="0.8", argo_version="3.7"))
    with pytest.raises(CompileError, match="a bug in mfargo"):
        pipeline.documents(_gang_ir())
