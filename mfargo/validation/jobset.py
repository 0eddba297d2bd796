"""JobSet rules: the CRD schema (strict, list-type uniqueness) plus what JobSet's admission
webhook checks and a schema cannot say (references between replicatedJobs, child Job names)."""

from __future__ import annotations

from mfargo import k8s_syntax

from .pods import check_pod_spec
from .report import Doc, get, has_tag
from .schema import Schemas, schemas

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def check_jobset(doc: Doc, js: dict, prefix: list, shipped: Schemas | None = None) -> None:
    """`shipped`: the schemas of the target JobSet version (default: the newest shipped)."""
    shipped = shipped or schemas()
    if js.get("apiVersion") != JOBSET_API:
        doc.add(prefix + ["apiVersion"], "JobSet is served as %s, not %r" % (JOBSET_API, js.get("apiVersion")))
    doc.schema(shipped.checkers["JobSet"], js, prefix)
    meta, spec = get(js, "metadata"), get(js, "spec")
    doc.labels(meta, prefix + ["metadata"])
    if not (meta.get("name") or meta.get("generateName")):
        doc.add(prefix + ["metadata"], "the JobSet needs metadata.name or generateName")
    name = str(meta.get("name") or "%sxxxxx" % meta.get("generateName"))  # generateName: + 5 chars
    rjobs = [r if isinstance(r, dict) else {} for r in spec.get("replicatedJobs") or []]
    rnames = [r.get("name") for r in rjobs]
    for i, r in enumerate(rjobs):
        rp = prefix + ["spec", "replicatedJobs", i]
        doc.labels(get(r, "template", "metadata"), rp + ["template", "metadata"])
        pod_meta = ["template", "spec", "template", "metadata"]
        doc.labels(get(r, *pod_meta), rp + pod_meta)
        pod, pp = get(r, "template", "spec", "template", "spec"), rp + ["template", "spec", "template", "spec"]
        check_pod_spec(doc, pod, pp, [(pp + ["containers", j], c) for j, c in enumerate(pod.get("containers") or [])
                                      if isinstance(c, dict)],
                       [(pp + ["volumes", j], v) for j, v in enumerate(pod.get("volumes") or [])])
        if r.get("name") in rnames[:i]:
            doc.add(rp + ["name"], "duplicate replicatedJob name %r" % r.get("name"))
        for d in r.get("dependsOn") or []:
            if isinstance(d, dict) and d.get("name") not in rnames[:i]:
                doc.add(rp + ["dependsOn"], "%r is not an earlier replicatedJob" % d.get("name"))
        replicas = r.get("replicas", 1)
        if isinstance(r.get("name"), str) and isinstance(replicas, int) and not has_tag(name + r["name"]):
            problem = k8s_syntax.child_job_problem(name, r["name"], replicas)
            if problem:
                doc.add(rp + ["name"], problem)
    for policy in ("successPolicy", "failurePolicy"):
        pol = get(spec, policy)
        targets = [([policy], pol.get("targetReplicatedJobs"))]
        targets += [([policy, "rules", j], rule.get("targetReplicatedJobs"))
                    for j, rule in enumerate(pol.get("rules") or []) if isinstance(rule, dict)]
        for path, names in targets:
            for n in names or []:
                if n not in rnames:
                    doc.add(prefix + ["spec"] + path + ["targetReplicatedJobs"], "no replicatedJob named %r" % n)
    coordinator = get(spec, "coordinator")
    if coordinator and coordinator.get("replicatedJob") not in rnames:
        doc.add(prefix + ["spec", "coordinator"], "no replicatedJob named %r" % coordinator.get("replicatedJob"))
