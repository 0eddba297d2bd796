"""What the API server and the JobSet webhook check before the runner plays a JobSet.

The essentials the runner needs to run one at all, plus ``mfargo.validation`` (the
project's CRD checker) when it is importable.
"""
from __future__ import annotations

from typing import Any

from mfargo import k8s_syntax

from . import events as ev

GROUP = "jobset.x-k8s.io"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
# The JobSet fields mfargo writes (templates/jobset.py): the runner plays only these.
SPEC_FIELDS = ("replicatedJobs", "failurePolicy", "successPolicy", "network", "ttlSecondsAfterFinished")
REPLICATED_JOB_FIELDS = ("name", "replicas", "template")


def essential_problems(obj: Any) -> list[str]:
    """The checks the runner needs to run a JobSet at all (subset of the API server's)."""
    problems: list[str] = []
    if not isinstance(obj, dict):
        return ["manifest is not an object"]
    if obj.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION!r}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != "JobSet":
        problems.append(f"kind: expected 'JobSet', got {obj.get('kind')!r}")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if name is None and meta.get("generateName"):
        name = meta["generateName"] + "xxxxx"
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: required")
    elif not k8s_syntax.is_dns1123_label(name):
        problems.append(f"metadata.name: {name!r} must be a DNS-1123 label of at most 63 characters")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return problems + ["spec: required"]
    problems += [f"spec.{k}: not supported by the local runner" for k in spec if k not in SPEC_FIELDS]
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        return problems + ["spec.replicatedJobs: at least one replicatedJob is required"]
    seen = set()
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            problems.append(f"{where}: must be an object")
            continue
        rname = rj.get("name")
        if not isinstance(rname, str) or not rname:
            problems.append(f"{where}.name: required")
        elif rname in seen:
            problems.append(f"{where}.name: duplicate {rname!r}")
        seen.add(rname)
        problems += [f"{where}.{k}: not supported by the local runner" for k in rj if k not in REPLICATED_JOB_FIELDS]
        replicas = rj.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            problems.append(f"{where}.replicas: {replicas!r} is not of type 'integer'")
        elif replicas < 0:
            problems.append(f"{where}.replicas: must be >= 0")
        elif isinstance(name, str) and isinstance(rname, str):
            problem = k8s_syntax.child_job_problem(name, rname, replicas)
            if problem:
                problems.append(f"{where}: {problem}")
        pod_spec = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
        if not isinstance(pod_spec, dict) or not isinstance(pod_spec.get("containers"), list) \
                or not pod_spec["containers"]:
            problems.append(f"{where}.template.spec.template.spec.containers: required")
        elif pod_spec.get("initContainers"):  # mfargo's gang pods have one container each
            problems.append(f"{where}.template.spec.template.spec.initContainers: not supported by the local runner")
        elif len(pod_spec["containers"]) > 1:
            problems.append(f"{where}.template.spec.template.spec.containers: more than one is not supported by "
                            "the local runner (mfargo writes one)")
    if (spec.get("successPolicy") or {}) not in ({}, {"operator": "All"}):  # every Job must complete
        problems.append(f"spec.successPolicy: {spec['successPolicy']!r} is not supported by the local runner "
                        "(mfargo writes {operator: All})")
    return problems


def validate(obj: dict, on_event: ev.EventCallback | None = None) -> list[str]:
    """Essentials, plus ``mfargo.validation`` (the project's CRD checker) when present."""
    problems = essential_problems(obj)
    if problems:
        return problems
    try:
        from mfargo.validation import validate_documents  # type: ignore
    except ImportError:
        return problems
    try:
        return list(validate_documents([obj]))
    except Exception as e:  # a broken validator must not break runs
        if on_event:
            on_event(ev.Event(ev.WARNING, message=f"mfargo.validation failed ({e!r}); used essential checks"))
        return problems
