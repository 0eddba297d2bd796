"""What a bundle needs to find in the cluster, read from the documents about to be deployed.

A Workflow whose pod names a missing Secret, Secret key or service account does not fail:
its pod waits in ContainerCreating/Pending and the run stays Running for ever (seen with
examples/notifications.yaml and no Secrets). A JobSet or Sensor whose CRD is not installed
fails only when it is created, after the WorkflowTemplate was. So `create` first asks the
cluster for everything listed here (``mfargo.cluster_needs``, from ``mfargo.deploy.check_prerequisites``) and creates
nothing if one is missing.

The documents are the one source: whatever puts a Secret or a service account into the
YAML (``@kubernetes(secrets=...)``, ``--notify-*-secret``, ``--service-account``, a Sensor's
``serviceAccountName``) is found where Kubernetes reads it, gang pods included (inside the
JobSet manifest). A name holding an Argo tag is a run-time value and cannot be checked.
Pure: no cluster, no kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from mfargo.cluster import Resource
from mfargo.compiler.constants import JobSetKey
from mfargo.base.validation.report import parse_manifest

# API groups every cluster serves: nothing to check.
BUILT_IN_GROUPS = ("", "v1", "rbac.authorization.k8s.io", "batch", "apps")
# Argo Events objects a Sensor names, by the field naming them.
EVENT_BUS = "EventBus"
EVENT_SOURCE = "EventSource"
# The Kueue queue a JobSet's label names (@jobset(queue=...)): a JobSet naming a queue that does
# not exist is held suspended by Kueue, its gang never starts.
LOCAL_QUEUE = "LocalQueue"
# The Kueue priority a JobSet's label names (@jobset(priority_class=...)): Kueue refuses to make
# the Workload of a JobSet naming a WorkloadPriorityClass that does not exist, so it never starts.
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
CLUSTER_SCOPED = "(cluster)"  # the namespace of a Need for a cluster-scoped object
# The PriorityClass a pod names (@pod_spec(priority_class_name=...)): the API server refuses to
# create a pod naming one that does not exist, so the step's pod never starts.
PRIORITY_CLASS = "PriorityClass"
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
# The ClusterQueue behind a LocalQueue: read to judge whether Kueue could ever admit the gang (mfargo.kueue_fit).
CLUSTER_QUEUE = "ClusterQueue"
KUEUE_PLURALS = {LOCAL_QUEUE: "localqueues", WORKLOAD_PRIORITY_CLASS: "workloadpriorityclasses",
                 CLUSTER_QUEUE: "clusterqueues"}
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1", "v1beta2", "v1beta1")  # LocalQueue's API versions in Kueue's releases, newest first


@dataclass(frozen=True, order=True)
class Need:
    """An object that must exist: a Secret (with ``key``, when one is read), a ServiceAccount,
    an Argo Events EventBus/EventSource, a Kueue LocalQueue in ``namespace``, a Kueue
    WorkloadPriorityClass or a PriorityClass (``namespace`` CLUSTER_SCOPED); or a served API kind (``namespace``
    empty, ``name`` = group/version, ``key`` = plural)."""

    kind: str
    namespace: str
    name: str
    key: str = ""

    @property
    def is_api(self) -> bool:
        return not self.namespace

    @property
    def where(self) -> str:
        """NAMESPACE/NAME, or NAME for a cluster-scoped object."""
        return self.name if self.namespace == CLUSTER_SCOPED else "%s/%s" % (self.namespace, self.name)

    def describe(self) -> str:
        if self.is_api:
            return "%s API (%s in %s: install its CRD and controller)" % (self.kind, self.key, self.name)
        return "%s %s" % (self.kind, self.where) + (" key %s" % self.key if self.key else "")


def needs(docs: list[dict], namespace: str) -> list[Need]:
    """Everything ``docs`` need, each once, APIs first, in a stable order."""
    found: set[Need] = set()
    deployed = set()
    for doc in docs:
        meta = doc.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        deployed.add((doc.get("kind"), ns, meta.get("name")))
        found.update(_api(doc))
        found.update(_walk(doc, ns))
        if doc.get("kind") == "Sensor":
            found.update(_sensor(doc, ns))
    found = {n for n in found if (n.kind, n.namespace, n.name) not in deployed}  # the bundle brings it
    return sorted(found, key=lambda n: (not n.is_api, n))


def _api(doc: dict) -> list[Need]:
    if "/" not in str(doc.get("apiVersion", "")):  # the core group (v1): always served
        return []
    res = Resource.of(doc)
    if res.group in BUILT_IN_GROUPS:
        return []
    return [Need(doc.get("kind", ""), "", "%s/%s" % (res.group, res.version), res.plural)]


def _walk(node: Any, ns: str) -> Iterator[Need]:
    """Secrets and service accounts referenced anywhere below ``node`` (in namespace ``ns``)."""
    if isinstance(node, list):
        for item in node:
            yield from _walk(item, ns)
        return
    if not isinstance(node, dict):
        return
    if node.get("apiVersion") and node.get("kind") and isinstance(node.get("metadata"), dict):
        ns = node["metadata"].get("namespace") or ns  # an object embedded in another (a Sensor's Workflow)
        labels = node["metadata"].get("labels")
        if isinstance(labels, dict):
            yield from _named(LOCAL_QUEUE, ns, labels.get(JobSetKey.KUEUE_QUEUE))
            yield from _named(WORKLOAD_PRIORITY_CLASS, CLUSTER_SCOPED, labels.get(JobSetKey.KUEUE_PRIORITY_CLASS))
    for key, value in node.items():
        if key == "serviceAccountName" and isinstance(value, str):
            yield from _named("ServiceAccount", ns, value)
        elif key == "priorityClassName" and isinstance(value, str):
            yield from _named(PRIORITY_CLASS, CLUSTER_SCOPED, value)
        elif key == "secretKeyRef" and isinstance(value, dict) and not value.get("optional"):
            yield from _named("Secret", ns, value.get("name"), value.get("key") or "")
        elif key == "secretRef" and isinstance(value, dict) and not value.get("optional"):
            yield from _named("Secret", ns, value.get("name"))
        elif key == "secret" and isinstance(value, dict) and not value.get("optional"):  # a volume
            yield from _named("Secret", ns, value.get("secretName"))
        elif key == "manifest" and isinstance(value, str):  # a resource template's object (a JobSet)
            manifests, _ = parse_manifest(value)
            for manifest in manifests:
                if isinstance(manifest, dict):
                    yield from _api(manifest)
                    yield from _walk(manifest, ns)
        else:
            yield from _walk(value, ns)


def _sensor(doc: dict, ns: str) -> Iterator[Need]:
    spec = doc.get("spec") or {}
    yield from _named(EVENT_BUS, ns, spec.get("eventBusName") or "default")
    for dep in spec.get("dependencies") or []:
        yield from _named(EVENT_SOURCE, ns, dep.get("eventSourceName"))


def _named(kind: str, ns: str, name: Any, key: str = "") -> Iterator[Need]:
    if isinstance(name, str) and name and "{{" not in name and "__argo_tag_" not in name + key:
        yield Need(kind, ns, name, key)
