"""JobSet rules: the CRD schema (strict, list-type uniqueness) plus what the admission webhook
of the targeted JobSet release checks and a schema cannot say.

Why here, once: the webhook (`vjobset.kb.io`, kubernetes-sigs/jobset pkg/webhooks/
jobset_webhook.go) refuses a JobSet the CRD schema, `argo lint` and a dry run without the
webhook all accept, and it only runs when the gang step creates its JobSet: a real cluster
refused mfargo's failure-policy rule names (`fail-on-user-code`) that way. Each rule below is
read from the webhook's `Default` + `ValidateCreate` of every release mfargo targets (v0.6 to
v0.12) and carries the release that introduced it; a message names the targeted release.
Values holding Argo tags are only known at run time and are not judged here (the fast tests
run the webhook's own code on manifests with their tags substituted:
e2e/tools/jobset-validate). Not checked: a VolumeClaimPolicy PVC that already exists in the
cluster (the webhook reads the cluster for it).
"""

from __future__ import annotations

import re

from mfargo.base import k8s_syntax

from .pods import check_pod_spec
from .report import Doc, get, has_tag
from .schema import Schemas, schemas

JOBSET_API = "jobset.x-k8s.io/v1alpha2"

# The webhook's failure-policy rule names (all targeted releases).
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
RULE_NAME_MAX = 128
DEFAULT_RULE_NAME = "failurePolicyRule%d"  # the mutating webhook names an unnamed rule so
# Job failure reasons a rule may match (batch/v1 JobReason*).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
MAX_INT32 = 2**31 - 1
MAX_MANAGED_BY = 63
RESTART_JOB_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")  # v0.12, alpha gate RestartJob
MAX_RESTART_JOB_REPLICAS = 1024
POD_NAME_SUFFIX = "-abcde"  # the webhook's stand-in for the Job controller's 5 random chars
HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def check_jobset(doc: Doc, js: dict, prefix: list, shipped: Schemas | None = None) -> None:
    """`shipped`: the schemas and webhook release of the target JobSet version (default: the newest)."""
    shipped = shipped or schemas()
    if js.get("apiVersion") != JOBSET_API:
        doc.add(prefix + ["apiVersion"], "JobSet is served as %s, not %r" % (JOBSET_API, js.get("apiVersion")))
    doc.schema(shipped.checkers["JobSet"], js, prefix)
    meta, spec = get(js, "metadata"), get(js, "spec")
    doc.labels(meta, prefix + ["metadata"])
    if not (meta.get("name") or meta.get("generateName")):
        doc.add(prefix + ["metadata"], "the JobSet needs metadata.name or generateName")
    rjobs = [r if isinstance(r, dict) else {} for r in spec.get("replicatedJobs") or []]
    # JobSet (v0.11+) adds a volume to every pod for each volumeClaimPolicies template.
    claims = [(prefix + ["spec", "volumeClaimPolicies", i, "templates", t],
               {"name": get(template, "metadata").get("name")})
              for i, policy in enumerate(spec.get("volumeClaimPolicies") or [])
              for t, template in enumerate(get(policy).get("templates") or [])]
    for i, r in enumerate(rjobs):
        rp = prefix + ["spec", "replicatedJobs", i]
        doc.labels(get(r, "template", "metadata"), rp + ["template", "metadata"])
        pod_meta = ["template", "spec", "template", "metadata"]
        doc.labels(get(r, *pod_meta), rp + pod_meta)
        pod, pp = get(r, "template", "spec", "template", "spec"), rp + ["template", "spec", "template", "spec"]
        check_pod_spec(doc, pod, pp, [(pp + ["containers", j], c) for j, c in enumerate(pod.get("containers") or [])
                                      if isinstance(c, dict)],
                       [(pp + ["volumes", j], v) for j, v in enumerate(pod.get("volumes") or [])] + claims)
    Webhook(doc, js, prefix, shipped.jobset_target).check()


def _known(*values) -> bool:
    """Every value is known at compile time (no Argo tag)."""
    return not any(has_tag(v) for v in values)


def _count(value, default: int) -> int | None:
    """An integer field as the webhook reads it (absent: its default); None if not known now."""
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Webhook:
    """The targeted release's `vjobset.kb.io` create checks (after `mjobset.kb.io`'s defaults)."""

    def __init__(self, doc: Doc, js: dict, prefix: list, target: str):
        self.doc, self.prefix = doc, prefix
        self.release = tuple(int(p) for p in target.split("."))
        self.target = target
        self.meta, self.spec = get(js, "metadata"), get(js, "spec")
        self.name = str(self.meta.get("name") or "%sxxxxx" % self.meta.get("generateName"))  # generateName: + 5 chars
        self.rjobs = [r if isinstance(r, dict) else {} for r in self.spec.get("replicatedJobs") or []]
        self.rnames = [r.get("name") for r in self.rjobs]

    def refuse(self, path: list, msg: str) -> None:
        self.doc.add(self.prefix + path, "JobSet v%s's admission webhook refuses this: %s" % (self.target, msg))

    def since(self, major_minor: tuple[int, int]) -> bool:
        return self.release >= major_minor

    def check(self) -> None:
        self.network()
        self.managed_by()
        for i, r in enumerate(self.rjobs):
            self.replicated_job(i, r)
        self.policies()
        self.coordinator()
        self.volume_claims()

    def network(self) -> None:
        sub = get(self.spec, "network").get("subdomain")
        if isinstance(sub, str) and sub and _known(sub) and not (
                k8s_syntax.is_dns1123_subdomain(sub) and k8s_syntax.is_dns1035_label(sub)):
            self.refuse(["spec", "network", "subdomain"],
                        "%r must be a DNS-1035 label of at most 63 chars (it names the JobSet's Service)" % sub)

    def managed_by(self) -> None:
        manager = self.spec.get("managedBy")
        if not isinstance(manager, str) or not _known(manager):
            return
        domain, _, path = manager.partition("/")
        if not (domain and path and k8s_syntax.is_dns1123_subdomain(domain) and HTTP_PATH.match(path)) \
                or len(manager) > MAX_MANAGED_BY:
            self.refuse(["spec", "managedBy"], "%r must be a domain-prefixed path (such as acme.io/foo) "
                        "of at most %d chars" % (manager, MAX_MANAGED_BY))

    def replicated_job(self, i: int, r: dict) -> None:
        rp, rname = ["spec", "replicatedJobs", i], r.get("name")
        job_spec = get(r, "template", "spec")
        replicas, parallelism = _count(r.get("replicas"), 1), _count(job_spec.get("parallelism"), 1)
        if rname in self.rnames[:i]:  # the CRD's list-map key
            self.doc.add(self.prefix + rp + ["name"], "duplicate replicatedJob name %r" % rname)
        if replicas is not None and parallelism is not None and replicas * parallelism > MAX_INT32:
            self.refuse(rp, "replicas x parallelism of %r exceeds %d" % (rname, MAX_INT32))
        if self.since((0, 9)):
            group = r.get("groupName", "default")  # the CRD's default
            if isinstance(group, str) and _known(group) and not k8s_syntax.is_dns1035_label(group):
                self.refuse(rp + ["groupName"], "groupName %r must be a DNS-1035 label of at most 63 chars" % group)
            if i == 0 and r.get("dependsOn") is not None:
                self.refuse(rp + ["dependsOn"], "the first replicatedJob cannot have dependsOn")
        for d in r.get("dependsOn") or []:
            if isinstance(d, dict) and d.get("name") not in self.rnames[:i + 1]:
                self.refuse(rp + ["dependsOn"], "%r is not this or an earlier replicatedJob" % d.get("name"))
        if not (isinstance(rname, str) and replicas is not None and _known(self.name, rname)):
            return
        problem = k8s_syntax.child_job_problem(self.name, rname, replicas)
        if problem:
            self.refuse(rp + ["name"], problem)
        completions = job_spec.get("completions")
        indexed = job_spec.get("completionMode", "Indexed") == "Indexed"  # the mutating webhook's default
        if indexed and isinstance(completions, int) and not isinstance(completions, bool):
            pod = "%s-%s-%d-%d%s" % (self.name, rname, max(replicas - 1, 0), completions - 1, POD_NAME_SUFFIX)
            if not k8s_syntax.is_dns1035_label(pod):
                self.refuse(rp + ["name"], "pod name %r (with the Job controller's 5-char suffix) must be a "
                            "DNS-1035 label of at most 63 chars" % pod)

    def policies(self) -> None:
        for policy in ("successPolicy", "failurePolicy"):
            pol = get(self.spec, policy)
            targets = [([policy], pol.get("targetReplicatedJobs"))]
            targets += [([policy, "rules", j], rule.get("targetReplicatedJobs"))
                        for j, rule in enumerate(pol.get("rules") or []) if isinstance(rule, dict)]
            for path, names in targets:
                for n in names or []:
                    if n not in self.rnames:
                        self.refuse(["spec"] + path + ["targetReplicatedJobs"], "no replicatedJob named %r" % n)
        failure = get(self.spec, "failurePolicy")
        if self.since((0, 11)) and failure.get("restartStrategy") == "InPlaceRestart":
            self.refuse(["spec", "failurePolicy", "restartStrategy"],
                        "InPlaceRestart needs the InPlaceRestart feature gate, off by default")
        rules = [rule if isinstance(rule, dict) else {} for rule in failure.get("rules") or []]
        seen: dict[str, int] = {}
        for j, rule in enumerate(rules):
            self.failure_rule(j, rule, seen)
        if self.since((0, 12)) and any(rule.get("action") in RESTART_JOB_ACTIONS for rule in rules):
            self.refuse(["spec", "failurePolicy", "rules"], "actions %s need the RestartJob feature gate, "
                        "off by default (and replicas <= %d)" % ("/".join(RESTART_JOB_ACTIONS), MAX_RESTART_JOB_REPLICAS))

    def failure_rule(self, j: int, rule: dict, seen: dict[str, int]) -> None:
        path = ["spec", "failurePolicy", "rules", j]
        name = rule.get("name") or DEFAULT_RULE_NAME % j
        if isinstance(name, str) and _known(name):
            if not (len(name) <= RULE_NAME_MAX and RULE_NAME.match(name)):
                self.refuse(path + ["name"], "failure policy rule name %r must be at most %d chars, start with "
                            "a letter, then letters, digits or '_,:', and end with a letter, digit or '_'"
                            % (name, RULE_NAME_MAX))
            if name in seen:
                self.refuse(path + ["name"], "rules %d and %d have the same name %r" % (seen[name], j, name))
            seen.setdefault(name, j)
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS and _known(reason):
                self.refuse(path + ["onJobFailureReasons"], "%r is not a Job failure reason (%s)"
                            % (reason, ", ".join(JOB_FAILURE_REASONS)))

    def coordinator(self) -> None:
        coordinator = get(self.spec, "coordinator")
        if not coordinator:
            return
        path, rname = ["spec", "coordinator"], coordinator.get("replicatedJob")
        if rname not in self.rnames:
            self.refuse(path, "no replicatedJob named %r" % rname)
            return
        r = self.rjobs[self.rnames.index(rname)]
        job_spec = get(r, "template", "spec")
        replicas, completions = _count(r.get("replicas"), 1), job_spec.get("completions")
        job_index, pod_index = coordinator.get("jobIndex", 0), coordinator.get("podIndex", 0)
        if replicas is not None and isinstance(job_index, int) and not 0 <= job_index < replicas:
            self.refuse(path + ["jobIndex"], "job index %d is not one of %r's %d jobs" % (job_index, rname, replicas))
        if job_spec.get("completionMode", "Indexed") != "Indexed":
            self.refuse(path, "the coordinator's job must be Indexed")
        elif self.since((0, 9)) and completions is None:
            self.refuse(path, "the coordinator's job must set completions")
        if isinstance(completions, int) and isinstance(pod_index, int) and not 0 <= pod_index < completions:
            self.refuse(path + ["podIndex"], "pod index %d is not one of the job's %d pods" % (pod_index, completions))
        subdomain = get(self.spec, "network").get("subdomain") or self.name
        endpoint = "%s-%s-%s-%s.%s" % (self.name, rname, job_index, pod_index, subdomain)
        if self.since((0, 11)) and _known(endpoint) and k8s_syntax.label_value_problem(endpoint):
            self.refuse(path, "the coordinator label value %r must be a label value of at most 63 chars" % endpoint)

    def volume_claims(self) -> None:
        if not self.since((0, 11)):
            return
        claimed: set = set()
        for i, policy in enumerate(self.spec.get("volumeClaimPolicies") or []):
            for t, template in enumerate(get(policy).get("templates") or []):
                path = ["spec", "volumeClaimPolicies", i, "templates", t, "metadata", "name"]
                claim = get(template, "metadata").get("name")
                if not isinstance(claim, str) or not _known(claim):
                    continue
                if claim in claimed:
                    self.refuse(path, "duplicate VolumeClaimPolicies template name %r" % claim)
                claimed.add(claim)
                pvc = "%s-%s" % (claim, self.name)
                if not k8s_syntax.is_dns1123_subdomain(claim) or (_known(self.name) and len(pvc) > 63):
                    self.refuse(path, "template name %r must be a DNS-1123 subdomain and its PVC name %r at "
                                "most 63 chars" % (claim, pvc))
                self._claim_mounted(claim, path)

    def _claim_mounted(self, claim: str, path: list) -> None:
        mounted = False
        for r in self.rjobs:
            pod = get(r, "template", "spec", "template", "spec")
            if any(isinstance(v, dict) and v.get("name") == claim for v in pod.get("volumes") or []):
                self.refuse(path, "a pod volume is also named %r" % claim)
            containers = (pod.get("initContainers") or []) + (pod.get("containers") or [])
            mounted = mounted or any(isinstance(m, dict) and m.get("name") == claim
                                     for c in containers if isinstance(c, dict) for m in c.get("volumeMounts") or [])
        if not mounted:
            self.refuse(path, "no container mounts the claim %r" % claim)
