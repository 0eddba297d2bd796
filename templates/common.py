"""Pieces every pod shares, whichever template kind runs it: env, resources, volumes,
retries and metadata, built once so a fix lands everywhere.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir
from mfargo.compiler.constants import Env, Label, Path
from mfargo.compiler.usertext import kubernetes_literal

from . import expr

# Pod identity through the downward API, as Metaflow's Kubernetes integration names it.
FIELD_REFS = (
    (Env.POD_NAME, "metadata.name"),
    (Env.POD_NAMESPACE, "metadata.namespace"),
    (Env.POD_ID, "metadata.uid"),
    (Env.SERVICE_ACCOUNT_NAME, "spec.serviceAccountName"),
    (Env.NODE_IP, "status.hostIP"),
)


def env_vars(pairs) -> list[m.EnvVar]:
    """Env from the IR: literal text as written (Kubernetes' `$(VAR)` expansion leaves it
    alone), run-time values as the Argo tag that fills them in."""
    return [m.EnvVar(name=k, value=env_value(v)) for k, v in pairs]


def env_value(value: ir.EnvValue) -> str:
    if isinstance(value, ir.WorkflowField):
        return expr.workflow_field(value)
    if isinstance(value, ir.ParameterBase64):
        return expr.parameter_base64(value.parameter)
    return kubernetes_literal(value)


def field_ref(name: str, path: str) -> m.EnvVar:
    return m.EnvVar(name=name, value_from=m.EnvVarSource(field_ref=m.ObjectFieldSelector(field_path=path)))


def identity_env() -> list[m.EnvVar]:
    return [field_ref(name, path) for name, path in FIELD_REFS]


def resources(compute: ir.Compute) -> m.ResourceRequirements:
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


def volumes(compute: ir.Compute, with_outputs: bool) -> tuple[list[m.Volume], list[m.VolumeMount], list[m.EnvVar]]:
    """Volumes, their mounts, and env they imply (tmpfs temp dir)."""
    vols: list[m.Volume] = []
    mounts: list[m.VolumeMount] = []
    env: list[m.EnvVar] = []
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


def env_from(compute: ir.Compute) -> list[m.EnvFromSource] | None:
    """Kubernetes Secrets by reference; their values never enter the YAML."""
    return [m.EnvFromSource(secret_ref=m.SecretEnvSource(name=s)) for s in compute.secrets] or None


def tolerations(compute: ir.Compute) -> list[m.Toleration] | None:
    return [
        m.Toleration(
            key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds
        )
        for t in compute.tolerations
    ] or None


def security_context(compute: ir.Compute) -> m.SecurityContext | None:
    if not compute.security_context:
        return None
    return m.SecurityContext(dict(compute.security_context))


def ports(compute: ir.Compute) -> list[m.ContainerPort] | None:
    return [m.ContainerPort(container_port=compute.port)] if compute.port else None


def retry_strategy(retry: ir.Retry) -> m.RetryStrategy | None:
    if retry.total == 0:
        return None
    backoff = m.Backoff(duration="%dm" % retry.minutes_between) if retry.minutes_between else None
    return m.RetryStrategy(limit=m.IntOrString(retry.total), retry_policy="Always", backoff=backoff)


def attempt_tag(retry: ir.Retry) -> str | None:
    """The attempt number as an Argo tag: `{{retries}}` exists only when a retryStrategy does."""
    return expr.RETRIES if retry.total else None


def step_metadata(step: ir.Step, retry: ir.Retry) -> m.Metadata | None:
    """Pod labels/annotations from @kubernetes, the step's name (as core's templates carry
    it: tools that read core's pods find the step by it), and the attempt when there can be
    several."""
    annotations = {**dict(step.compute.annotations), Label.STEP_NAME: step.name}
    if attempt_tag(retry):
        annotations[Label.ATTEMPT] = attempt_tag(retry)
    return m.Metadata(labels=dict(step.compute.labels) or None, annotations=annotations)


def pod_spec_patch(compute: ir.Compute) -> str | None:
    if not compute.image_pull_secrets:
        return None
    import json

    return json.dumps({"imagePullSecrets": [{"name": s} for s in compute.image_pull_secrets]}, sort_keys=True)


# Deadlines of the pods mfargo adds for a step: long enough for a slow image pull, short
# enough that a pod that can never start or never ends cannot keep a run Running.
GANG_REPORT_DEADLINE_SECONDS = 600  # reads a few API objects, writes one metadata entry
NOTIFY_DEADLINE_SECONDS = 300  # one HTTPS call (30 s timeout)


def derived_pod(compute: ir.Compute, deadline_seconds: int | None, *, with_secrets: bool) -> tuple[dict, dict]:
    """(Template fields, Container fields) of a pod mfargo adds for a step (the gang failure
    report, @exit_hook and notification pods): what it takes from the step's pod, in one place
    so none misses a field. It runs the step's image or one beside it, so it gets the step's
    image pull secrets and pull policy, service account, node selector and tolerations (it
    can run where the step could), and container security context; the step's Secrets only
    when it runs the flow's code (``with_secrets``); and a deadline, except for the run's
    heartbeat daemon, which Argo stops when the run's DAG ends (None)."""
    template = {
        "active_deadline_seconds": m.IntOrString(deadline_seconds),
        "service_account_name": compute.service_account,
        "node_selector": dict(compute.node_selector) or None,
        "tolerations": tolerations(compute),
        "pod_spec_patch": pod_spec_patch(compute),
    }
    container = {
        "image_pull_policy": compute.image_pull_policy,
        "security_context": security_context(compute),
        "env_from": env_from(compute) if with_secrets else None,
    }
    return template, container


# No CPU: a CPU request, however small, can keep a gang that fills its nodes from ever being
# scheduled (two 1-CPU ranks and a 50m daemon on a 2-CPU node did, e2e/cluster); a daemon
# sleeps between its polls, and one a little late does no harm. "0", not left out: Argo
# would merge in templateDefaults' CPU request.
DAEMON_RESOURCES = m.ResourceRequirements(requests={"cpu": m.Quantity("0"), "memory": m.Quantity("256Mi")})


def daemon_template(name: str, compute: ir.Compute, call) -> m.Template:
    """A daemon of the top DAG (the run's heartbeat, its queue watch): ``compute``'s pod
    (``derived_pod``, Secrets included: the code package may be read with them) running
    ``call`` (command parts) until Argo stops it when the DAG ends, with no deadline."""
    pod, container = derived_pod(compute, None, with_secrets=True)
    return m.Template(
        name=name,
        daemon=True,
        **pod,
        container=m.Container(
            name="main",
            image=compute.image,
            args=sh.step_args([call]),  # after templateDefaults' shared command (the code first)
            resources=DAEMON_RESOURCES,
            **container,
        ),
    )
