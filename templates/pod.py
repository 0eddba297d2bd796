"""Every pod mfargo writes, as one value, and its two renderings.

A step's pod, each role of a gang, and the pods mfargo adds (a gang's failure report, the
@exit_hook and notification pods, the run's daemons) are all lowered by ``lower`` from the
@kubernetes/@resources of the step they belong to (``ir.Compute``), taking from it exactly
what ``INHERITS`` says for their kind. The value is rendered as an Argo container template
(``argo_template``) or as the pod template of a JobSet's Job (``jobset_pod``). So a field
every pod carries is written here once, and which pods carry a step's attribute is one
table, which tests/test_pod_model.py holds to what the YAML says.
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


# Where a pod takes a field of ``ir.Compute`` from: the step it belongs to, or the flow's
# start step (for the pods of the run, and the image every image of the flow sits beside).
STEP, START = "step", "start"

_IMAGE = ("image", "image_pull_policy", "image_pull_secrets")
_PULL = _IMAGE[1:]
_ACCOUNT = ("service_account",)
_PLACEMENT = ("node_selector", "tolerations", "security_context")
_SECRETS = ("secrets",)
_SIZE = ("cpu", "memory_mb", "disk_mb", "gpu", "gpu_vendor", "qos")
_STORAGE = ("shared_memory_mb", "persistent_volume_claims", "tmpfs_size_mb", "tmpfs_path")
_OWN = ("port", "labels", "annotations")


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
    resources: dict | None = None
    deadline_seconds: int | None = None
    with_outputs: bool = False
    termination_message_path: str | None = None


def lower(kind: Kind, step: ir.Compute, start: ir.Compute, *, image: str | None = None,
          resources: dict | None = None, **fields) -> Pod:
    """The pod of ``kind`` for a step whose @kubernetes/@resources are ``step``, in a flow
    whose start step's are ``start``: what ``INHERITS`` gives it, ``image`` when it has one
    of its own, and its own ``resources`` or (a step's pods) the step's."""
    sources = {STEP: step, START: start}
    compute = dataclasses.replace(_NOTHING, **{name: getattr(sources[source], name)
                                               for name, source in INHERITS[kind].items()})
    if resources is None and "cpu" in INHERITS[kind]:
        resources = resources_of(compute)
    return Pod(kind=kind, compute=compute, image=image or compute.image, resources=resources, **fields)


def argo_template(pod: Pod, *, default_resources: dict | None = None, annotations: dict | None = None,
                  **template) -> m.Template:
    """``pod`` as an Argo container template with ``template``'s other fields (name, inputs,
    retries, ...) and mfargo's ``annotations`` beside the step's. Resources equal to
    templateDefaults' (``default_resources``) are left to it."""
    compute = pod.compute
    vols, mounts, volume_env = _volumes(compute, pod.with_outputs)
    resources = None if pod.resources == default_resources else pod.resources
    labels, annotations = metadata(compute, {}, annotations or {})
    return m.Template(
        **template,
        metadata=m.Metadata(labels=labels or None, annotations=annotations) if labels or annotations else None,
        active_deadline_seconds=m.IntOrString(pod.deadline_seconds),
        service_account_name=compute.service_account,
        node_selector=dict(compute.node_selector) or None,
        tolerations=_tolerations(compute),
        # Argo's template has no imagePullSecrets field of its own.
        pod_spec_patch=_pull_secrets_patch(compute),
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
            "volumes": vols or None,
            "containers": [_container(pod, volume_env, mounts, pod.resources)]}
    return {"metadata": {"labels": labels, "annotations": annotations},
            "spec": {k: v for k, v in spec.items() if v is not None}}


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
    """Requests from @kubernetes/@resources; limits = requests for Guaranteed QoS."""
    requests = {"cpu": compute.cpu, "memory": "%dM" % compute.memory_mb}
    if compute.disk_mb:
        requests["ephemeral-storage"] = "%dM" % compute.disk_mb
    limits = dict(requests) if compute.qos == "Guaranteed" else {}
    if compute.gpu:
        limits["%s.com/gpu" % compute.gpu_vendor] = str(compute.gpu)
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


def _pull_secrets_patch(compute: ir.Compute) -> str | None:
    secrets = _pull_secrets(compute)
    return json.dumps({"imagePullSecrets": secrets}, sort_keys=True) if secrets else None
