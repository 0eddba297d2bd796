"""Every pod mfargo writes, as one value, and its two renderings.

A step's pod, each role of a gang, and the pods mfargo adds (a gang's failure report and the
pod that creates its JobSet, the @exit_hook and notification pods, the run's daemons, the
Sensor's) are all lowered by ``lower`` from the @kubernetes/@resources of the step they belong
to (``ir.Compute``), taking from it exactly what ``INHERITS`` says for their kind; a kind that
does not take the step's size has its own (``OWN_SIZE``). The value is rendered as an Argo
container template (``argo_template``), as the pod template of a JobSet's Job (``jobset_pod``),
or as the parts Argo and Argo Events build their own pods from (``launcher_metadata``,
``sensor_container``). So a field every pod carries is written here once, which pods carry a
step's attribute is one table, and tests/test_pod_model.py holds both to what the YAML says.

Every container template states its whole size: none sits in templateDefaults, where Argo's
strategic merge would add its keys to every template that states fewer (a GPU limit to a CPU
step, a Guaranteed step's limits under another step's larger requests).
"""

from __future__ import annotations

import dataclasses
import enum
import json

from . import argo_models as m

from mfargo.compiler import ir
from mfargo.compiler.constants import Env, JobSetKey, Path


class Kind(enum.Enum):
    STEP = "step"
    GANG = "gang"  # each role of a @parallel step's JobSet
    REPORT = "gang failure report"
    EXIT_HOOK = "exit hook"
    NOTIFY = "notification"
    HEARTBEAT = "heartbeat"
    QUEUE_WATCH = "queue watch"
    LAUNCHER = "gang launcher"  # Argo's pod running a gang's resource template (argoexec)
    SENSOR = "sensor"  # Argo Events' pod of a @trigger Sensor


# Where a pod takes a field of ``ir.Compute`` from: the step it belongs to, or the flow's
# start step (for the pods of the run, and the image every image of the flow sits beside).
STEP, START = "step", "start"

_IMAGE = ("image", "image_pull_policy", "image_pull_secrets")
_PULL = _IMAGE[1:]
_ACCOUNT = ("service_account",)
_PLACEMENT = ("node_selector", "tolerations", "security_context", "priority_class_name", "affinity")
_SECRETS = ("secrets",)
_SIZE = ("cpu", "memory_mb", "disk_mb", "gpu", "gpu_vendor", "qos", "extended_resources")
_STORAGE = ("shared_memory_mb", "persistent_volume_claims", "tmpfs_size_mb", "tmpfs_path", "tmpfs_tempdir")
_METADATA = ("labels", "annotations")
_OWN = ("port", *_METADATA, "topology_spread_constraints", "pod_patch")


def _from(source: str, *groups: tuple[str, ...]) -> dict[str, str]:
    return {name: source for group in groups for name in group}


_EVERYTHING = (_IMAGE, _ACCOUNT, _PLACEMENT, _SECRETS, _SIZE, _STORAGE, _OWN)

# What each kind of pod takes, and from where. A pod mfargo adds can run wherever its step
# can (account, node selector, tolerations, security context) and pull the image it runs
# (pull policy and secrets go with the image); it has its own small size and no volumes,
# ports, labels or annotations; the step's Secrets only when it runs the flow's code.
INHERITS: dict[Kind, dict[str, str]] = {
    Kind.STEP: _from(STEP, *_EVERYTHING),
    Kind.GANG: _from(STEP, *_EVERYTHING),
    # The start image: a gang whose own image cannot be pulled is still reported.
    Kind.REPORT: {**_from(START, _IMAGE), **_from(STEP, _ACCOUNT, _PLACEMENT, _SECRETS)},
    Kind.EXIT_HOOK: _from(START, _PULL, _ACCOUNT, _PLACEMENT, _SECRETS),  # its image is @exit_hook's
    Kind.NOTIFY: _from(START, _PULL, _ACCOUNT, _PLACEMENT),  # its image is --notify-image's; one credential
    Kind.HEARTBEAT: _from(START, _IMAGE, _ACCOUNT, _PLACEMENT, _SECRETS),
    # The workflow's account, not the start step's: the Role that lists the run's JobSets is its.
    Kind.QUEUE_WATCH: _from(START, _IMAGE, _PLACEMENT, _SECRETS),
    # Argo's own pod (its executor image, the workflow's account, Argo's size): the step's metadata,
    # so what selects the step's pods by label selects the pod that starts its gang too.
    Kind.LAUNCHER: _from(STEP, _METADATA),
    Kind.SENSOR: {},  # Argo Events' image and the Sensor's account
}


def _requests(cpu: str, memory: str) -> m.ResourceRequirements:
    return m.ResourceRequirements(requests={"cpu": m.Quantity(cpu), "memory": m.Quantity(memory)})


# The size of each kind that does not take its step's (_SIZE). They wait, poll, report or send
# one request, and run no user code. The daemons ask for no CPU: a CPU request, however small,
# can keep a gang that fills its nodes from ever being scheduled (two 1-CPU ranks and a 50m
# daemon on a 2-CPU node did, e2e/cluster); a daemon sleeps between its polls, and one a little
# late does no harm. The Sensor's is core's: Guaranteed, small. An exit hook's is @exit_hook's
# (``lower``'s ``hook_size``).
_DAEMON = _requests("0", "256Mi")
_SENSOR = {"cpu": m.Quantity("100m"), "memory": m.Quantity("250Mi")}
OWN_SIZE: dict[Kind, m.ResourceRequirements | None] = {
    Kind.REPORT: _requests("100m", "256Mi"),
    Kind.NOTIFY: _requests("100m", "128M"),
    Kind.HEARTBEAT: _DAEMON,
    Kind.QUEUE_WATCH: _DAEMON,
    Kind.SENSOR: m.ResourceRequirements(requests=_SENSOR, limits=dict(_SENSOR)),
    Kind.LAUNCHER: None,  # Argo's executor settings size it
}
# Never a pod's: every step runs in the workflow's namespace (compiler/decorators.py).
NOT_A_POD_FIELD = ("namespace",)

# The container's name: a step's is Argo's default, a JobSet's pod names its own, and a
# pod mfargo adds has "main" (the others' default: Argo leaves it out).
_CONTAINER_NAME = {Kind.STEP: None, Kind.GANG: JobSetKey.CONTAINER}

# What a field a pod does not inherit is: nothing at all.
_NOTHING = ir.Compute(image="", cpu="0", memory_mb=0, disk_mb=None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pod:
    """One pod as mfargo writes it. ``compute`` holds what it inherited (``INHERITS``),
    every other field at nothing. Its container's env is ``env_head``, the tmpfs variable
    its volumes imply, then ``env``."""

    kind: Kind
    compute: ir.Compute
    image: str
    args: list | None = None  # after templateDefaults' shared command (Argo pods)
    command: list | None = None
    env_head: tuple = ()
    env: tuple = ()
    resources: dict | None = None  # lower() sets it: the step's size, or the kind's own
    deadline_seconds: int | None = None
    with_outputs: bool = False
    termination_message_path: str | None = None


def lower(kind: Kind, step: ir.Compute, start: ir.Compute, *, image: str | None = None,
          hook_size: tuple[str, int] | None = None, **fields) -> Pod:
    """The pod of ``kind`` for a step whose @kubernetes/@resources are ``step``, in a flow
    whose start step's are ``start``: what ``INHERITS`` gives it, ``image`` when it has one
    of its own, and the step's size or its kind's own (``OWN_SIZE``; an exit hook's is
    ``hook_size``, @exit_hook's CPUs and MB)."""
    sources = {STEP: step, START: start}
    compute = dataclasses.replace(_NOTHING, **{name: getattr(sources[source], name)
                                               for name, source in INHERITS[kind].items()})
    if "cpu" in INHERITS[kind]:
        resources = resources_of(compute)
    elif kind is Kind.EXIT_HOOK:
        cpu, memory_mb = hook_size
        resources = _requests(cpu, "%dM" % memory_mb)
    else:
        resources = OWN_SIZE[kind]
    return Pod(kind=kind, compute=compute, image=image or compute.image, resources=resources, **fields)


def argo_template(pod: Pod, *, annotations: dict | None = None, **template) -> m.Template:
    """``pod`` as an Argo container template with ``template``'s other fields (name, inputs,
    retries, ...) and mfargo's ``annotations`` beside the step's."""
    compute = pod.compute
    vols, mounts, volume_env = _volumes(compute, pod.with_outputs)
    resources = pod.resources
    labels, annotations = metadata(compute, {}, annotations or {})
    return m.Template(
        **template,
        metadata=m.Metadata(labels=labels or None, annotations=annotations) if labels or annotations else None,
        active_deadline_seconds=m.IntOrString(pod.deadline_seconds),
        service_account_name=compute.service_account,
        node_selector=dict(compute.node_selector) or None,
        tolerations=_tolerations(compute),
        priority_class_name=compute.priority_class_name,
        affinity=_json(compute.affinity),
        # Argo's template has no field of its own for these.
        pod_spec_patch=_pod_spec_patch(compute),
        volumes=vols or None,
        container=_container(pod, volume_env, mounts, resources),
    )


def jobset_pod(pod: Pod, subdomain: str, labels: dict, annotations: dict) -> dict:
    """``pod`` as the pod template of a JobSet's Job (its deadline is the Job's), with mfargo's
    ``labels`` and ``annotations`` beside the step's."""
    compute = pod.compute
    labels, annotations = metadata(compute, labels, annotations)
    vols, mounts, volume_env = _volumes(compute, pod.with_outputs)
    spec = {"restartPolicy": "Never", "subdomain": subdomain,
            "serviceAccountName": compute.service_account,
            "nodeSelector": dict(compute.node_selector) or None,
            "tolerations": _tolerations(compute),
            "imagePullSecrets": _pull_secrets(compute),
            "priorityClassName": compute.priority_class_name,
            "affinity": _json(compute.affinity),
            "topologySpreadConstraints": _json(compute.topology_spread_constraints),
            "volumes": vols or None,
            "containers": [_container(pod, volume_env, mounts, pod.resources)]}
    spec.update(_json(compute.pod_patch) or {})
    return {"metadata": {"labels": labels, "annotations": annotations},
            "spec": {k: v for k, v in spec.items() if v is not None}}


def launcher_metadata(pod: Pod, annotations: dict) -> m.Metadata:
    """The metadata of the pod Argo starts for a gang's resource template: the step's labels
    and annotations, then mfargo's ``annotations``."""
    labels, annotations = metadata(pod.compute, {}, annotations)
    return m.Metadata(labels=labels or None, annotations=annotations)


def sensor_container(pod: Pod) -> dict:
    """The container fields of a Sensor's pod (Argo Events' own image and command)."""
    return {"resources": dict(pod.resources)}


def metadata(compute: ir.Compute, labels: dict, annotations: dict) -> tuple[dict, dict]:
    """A pod's labels and annotations: the step's (@kubernetes), then mfargo's."""
    return {**dict(compute.labels), **labels}, {**dict(compute.annotations), **annotations}


def _container(pod: Pod, volume_env: list, mounts: list, resources: dict | None) -> m.Container:
    compute = pod.compute
    env = list(pod.env_head) + volume_env + list(pod.env)
    return m.Container(
        name=_CONTAINER_NAME.get(pod.kind, "main"),
        image=pod.image,
        image_pull_policy=compute.image_pull_policy,
        command=pod.command,
        args=pod.args,
        env=env or None,
        env_from=[m.EnvFromSource(secret_ref=m.SecretEnvSource(name=s)) for s in compute.secrets] or None,
        resources=resources,
        volume_mounts=mounts or None,
        ports=[m.ContainerPort(container_port=compute.port)] if compute.port else None,
        security_context=m.SecurityContext(dict(compute.security_context)) if compute.security_context else None,
        termination_message_path=pod.termination_message_path,
    )


def resources_of(compute: ir.Compute) -> m.ResourceRequirements:
    """Requests from @kubernetes/@resources; limits = requests for Guaranteed QoS; GPUs as a
    limit (Kubernetes makes it the request too); extended resources requested and limited
    alike, as core writes them."""
    requests = {"cpu": compute.cpu, "memory": "%dM" % compute.memory_mb}
    if compute.disk_mb:
        requests["ephemeral-storage"] = "%dM" % compute.disk_mb
    limits = dict(requests) if compute.qos == "Guaranteed" else {}
    if compute.gpu:
        limits["%s.com/gpu" % compute.gpu_vendor] = str(compute.gpu)
    requests.update(compute.extended_resources)
    limits.update(compute.extended_resources)
    return m.ResourceRequirements(
        requests={k: m.Quantity(v) for k, v in requests.items()},
        limits={k: m.Quantity(v) for k, v in limits.items()} or None,
    )


def _volumes(compute: ir.Compute, with_outputs: bool) -> tuple[list, list, list]:
    """Volumes, their mounts, and the env they imply (the tmpfs temp dir)."""
    vols: list = []
    mounts: list = []
    env: list = []
    if with_outputs:
        vols.append(m.Volume(name=Path.OUTPUTS_VOLUME, empty_dir=m.EmptyDirVolumeSource()))
        mounts.append(m.VolumeMount(name=Path.OUTPUTS_VOLUME, mount_path=Path.OUTPUTS))
    if compute.tmpfs_size_mb:
        vols.append(m.Volume(name=Path.TMPFS_VOLUME, empty_dir=_memory_dir(compute.tmpfs_size_mb)))
        mounts.append(m.VolumeMount(name=Path.TMPFS_VOLUME, mount_path=compute.tmpfs_path))
        if compute.tmpfs_tempdir:
            env.append(m.EnvVar(name=Env.TEMPDIR, value=compute.tmpfs_path))
    if compute.shared_memory_mb:
        vols.append(m.Volume(name=Path.SHM_VOLUME, empty_dir=_memory_dir(compute.shared_memory_mb)))
        mounts.append(m.VolumeMount(name=Path.SHM_VOLUME, mount_path="/dev/shm"))
    for claim, path in compute.persistent_volume_claims:
        vols.append(m.Volume(name=claim, persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name=claim)))
        mounts.append(m.VolumeMount(name=claim, mount_path=path))
    return vols, mounts, env


def _memory_dir(size_mb: int) -> m.EmptyDirVolumeSource:
    return m.EmptyDirVolumeSource(medium="Memory", size_limit=m.Quantity("%dMi" % size_mb))


def _tolerations(compute: ir.Compute) -> list | None:
    return [
        m.Toleration(
            key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds
        )
        for t in compute.tolerations
    ] or None


def _pull_secrets(compute: ir.Compute) -> list | None:
    return [{"name": s} for s in compute.image_pull_secrets] or None


def _json(text: str | None):
    """An @pod_spec field of the IR (canonical JSON text) as the value it holds, or None."""
    return json.loads(text) if text else None


def _pod_spec_patch(compute: ir.Compute) -> str | None:
    """The pod fields an Argo template has none of (pull secrets, spread constraints, @pod_spec's
    patch) as Argo's podSpecPatch: JSON, merged into the pod Argo builds."""
    patch = {"imagePullSecrets": _pull_secrets(compute),
             "topologySpreadConstraints": _json(compute.topology_spread_constraints)}
    patch = {k: v for k, v in patch.items() if v}
    patch.update(_json(compute.pod_patch) or {})
    return json.dumps(patch, sort_keys=True) if patch else None
