"""The JobSet manifest of a gang: a `control` job (1 pod) and a `worker` job (N-1 pods).

Plain dicts holding only what is emitted. ``replicas`` of the worker job is a plain
``{{inputs.parameters.worker-count}}`` tag, unquoted, so the manifest is valid YAML
before Argo substitutes it (argo-workflows#10924) and an int after.
"""

from __future__ import annotations

from hera.workflows import models as m

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Env, JobSetKey, Label, Param, UbfContext

from . import common, expr, pod_command, wiring

WORKER_REPLICAS = expr.input_param(Param.WORKER_COUNT)


def manifest(step: ir.Step, wf: ir.Workflow, default_image: str) -> dict:
    """The JobSet for one attempt of ``step``'s gang."""
    name = _name(step)
    labels = {
        **dict(step.compute.labels),
        Label.PART_OF: Label.METAFLOW,
        Label.ARGO_WORKFLOW: expr.WORKFLOW_NAME,
        Label.WORKFLOW_NAME: expr.WORKFLOW_NAME,
    }
    annotations = {
        **dict(step.compute.annotations),
        Label.STEP_NAME: step.name,
        Label.ATTEMPT: common.retry_count(step.retry),
        Label.RUN_ID: wiring.RUN_ID,
    }
    # No metadata.namespace: the JobSet lives in the Workflow's namespace, as its owner must.
    metadata = {"name": name, "labels": labels, "annotations": annotations}
    shared = _gang_env(step, name, wf.namespace or expr.WORKFLOW_NAMESPACE)
    return {
        "apiVersion": JobSetKey.API_VERSION,
        "kind": JobSetKey.KIND,
        "metadata": metadata,
        "spec": {
            # Workers resolve the control pod's name while it is still starting.
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "failurePolicy": {"maxRestarts": 0},
            "ttlSecondsAfterFinished": wf.jobset_ttl_seconds,
            "replicatedJobs": [
                _replicated_job(step, wf, JobSetKey.CONTROL_JOB, 1, True, shared, labels, annotations, default_image),
                _replicated_job(step, wf, JobSetKey.WORKER_JOB, WORKER_REPLICAS, False, shared, labels, annotations, default_image),
            ],
        },
    }


def _name(step: ir.Step) -> str:
    """One JobSet name per attempt; `{{retries}}` only exists when a retryStrategy does."""
    return naming.jobset_name(expr.input_param(Param.ENTROPY), expr.RETRIES if step.retry.total else None)


def _gang_env(step: ir.Step, jobset: str, namespace: str) -> list[dict]:
    entropy = expr.input_param(Param.ENTROPY)
    env = [
        {"name": Env.MASTER_ADDR, "value": naming.control_host(jobset, namespace)},
        {"name": Env.MASTER_PORT, "value": str(step.compute.port) if step.compute.port else "None"},
        {"name": Env.WORLD_SIZE, "value": expr.input_param(Param.NUM_PARALLEL)},
        {"name": Env.CONTROL_TASK_ID, "value": naming.control_task_id(entropy)},
        _annotation_ref(Env.WORKER_REPLICA_INDEX, JobSetKey.JOB_INDEX),
        _annotation_ref(Env.TASK_ID_SUFFIX, JobSetKey.JOB_INDEX),
        _annotation_ref(Env.JOBSET_RESTART_ATTEMPT, JobSetKey.RESTART_ATTEMPT),
        _annotation_ref(Env.JOBSET_NAME, JobSetKey.JOBSET_NAME),
    ]
    return env


def _annotation_ref(name: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['%s']" % key}}}


def _replicated_job(step, wf, job, replicas, control, shared_env, labels, annotations, default_image) -> dict:
    role_env = (
        [{"name": Env.UBF_CONTEXT, "value": UbfContext.CONTROL}, {"name": Env.CONTROL_INDEX, "value": "0"},
         {"name": Env.TASK_ID_PREFIX, "value": "control"}]
        if control
        else [{"name": Env.UBF_CONTEXT, "value": UbfContext.TASK}, {"name": Env.TASK_ID_PREFIX, "value": "worker"}]
    )
    compute = step.compute
    vols, mounts, extra_env = common.volumes(compute, with_outputs=False)
    container = m.Container(
        name=wiring.task_name(step.name),
        image=compute.image or default_image,
        image_pull_policy=compute.image_pull_policy,
        command=pod_command.gang_script(step, wf, control),
        env=_models(wf.env, step.environment) + extra_env + common.identity_env(),
        env_from=common.env_from(compute),
        resources=common.resources(compute),
        volume_mounts=mounts or None,
        ports=common.ports(compute),
        security_context=common.security_context(compute),
    )
    container_dict = _dump(container)
    container_dict["env"] = container_dict["env"] + shared_env + role_env
    pod_spec = {
        "restartPolicy": "Never",
        "subdomain": _name(step),
        "activeDeadlineSeconds": step.timeout_seconds,
        "containers": [container_dict],
    }
    if compute.service_account:
        pod_spec["serviceAccountName"] = compute.service_account
    if compute.node_selector:
        pod_spec["nodeSelector"] = dict(compute.node_selector)
    if compute.tolerations:
        pod_spec["tolerations"] = [_dump(t) for t in common.tolerations(compute)]
    if compute.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in compute.image_pull_secrets]
    if vols:
        pod_spec["volumes"] = [_dump(v) for v in vols]
    return {
        "name": job,
        "replicas": replicas,
        "template": {
            "spec": {
                "backoffLimit": 0,
                "completions": 1,
                "parallelism": 1,
                "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
            }
        },
    }


def _models(*pairs_lists) -> list[m.EnvVar]:
    out = []
    for pairs in pairs_lists:
        out += common.env_vars(pairs)
    return out


def _dump(model) -> dict:
    return model.model_dump(exclude_none=True, by_alias=True, mode="json")
