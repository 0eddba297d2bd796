"""The pod a JobSet's Job creates: name, hostname, and the labels/annotations the JobSet
and Job controllers add (jobset-name, replicatedjob-name, job-index, restart-attempt, ...)
merged over the pod template's metadata."""
from __future__ import annotations

import hashlib
import uuid

from .model import random_suffix
from .pod import PodSpec


def job_keys(obj: dict, default_namespace: str, rjob: str, replicas: int, j: int, g: int,
             restart: int, total: int) -> dict[str, str]:
    """The labels (and annotations) the JobSet controller puts on Job ``j`` of ``rjob`` and its pods."""
    meta = obj["metadata"]
    name = meta["name"]
    ns = meta.get("namespace") or default_namespace
    return {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(j),
        "jobset.sigs.k8s.io/job-global-index": str(g),
        "jobset.sigs.k8s.io/global-replicas": str(total),
        "jobset.sigs.k8s.io/restart-attempt": str(restart),
        "jobset.sigs.k8s.io/job-key": hashlib.sha256(f"{ns}/{name}-{rjob}-{j}".encode()).hexdigest(),
    }


def build(obj: dict, default_namespace: str, rjob: str, replicas: int, j: int, g: int, idx: int,
          restart: int, total: int) -> PodSpec:
    """Pod ``idx`` of Job ``j`` of replicated job ``rjob`` in gang generation ``restart``."""
    spec, meta = obj["spec"], obj["metadata"]
    name = meta["name"]
    ns = meta.get("namespace") or default_namespace
    job_name = f"{name}-{rjob}-{j}"
    rj = next(r for r in spec["replicatedJobs"] if r["name"] == rjob)
    pod_tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
    pmeta = pod_tmpl.get("metadata") or {}
    pspec = pod_tmpl.get("spec") or {}
    network = spec.get("network") or {}
    dns = network.get("enableDNSHostnames", True) is not False
    subdomain = network.get("subdomain") or name
    js_keys = {**job_keys(obj, default_namespace, rjob, replicas, j, g, restart, total),
               "batch.kubernetes.io/job-completion-index": str(idx)}
    coord = spec.get("coordinator")
    if coord:
        js_keys["jobset.sigs.k8s.io/coordinator"] = (
            f"{name}-{coord.get('replicatedJob')}-{coord.get('jobIndex', 0)}-"
            f"{coord.get('podIndex', 0)}.{subdomain}")
    labels = {**(pmeta.get("labels") or {}), **js_keys,
              "batch.kubernetes.io/job-name": job_name, "job-name": job_name}
    annotations = {**(pmeta.get("annotations") or {}), **js_keys}
    hostname = f"{job_name}-{idx}"
    return PodSpec(
        name=f"{job_name}-{idx}-{random_suffix()}",
        namespace=ns,
        uid=str(uuid.uuid4()),
        container=pspec["containers"][0],
        volumes=list(pspec.get("volumes") or []),
        hostname=pspec.get("hostname") or (hostname if dns else ""),
        subdomain=(pspec.get("subdomain") or subdomain) if dns else "",
        labels={k: str(v) for k, v in labels.items()},
        annotations={k: str(v) for k, v in annotations.items()},
        service_account=pspec.get("serviceAccountName") or "default",
        active_deadline=(float(pspec["activeDeadlineSeconds"])
                         if pspec.get("activeDeadlineSeconds") is not None else None),
        termination_grace=pspec.get("terminationGracePeriodSeconds"),
        extra_env={"JOB_COMPLETION_INDEX": str(idx)},
        display=f"{name}/{rjob}-{j}",
    )
