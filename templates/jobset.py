"""A gang's Argo resource template and its JobSet: one `rank` job of N pods, or, when
``@jobset(control=...)`` gives the control a pod of its own, a `control` job (1 pod) and a
`worker` job (N-1 pods).

The resource template creates the JobSet and waits on single-clause conditions on its
``status.terminalState`` (JobSet >= v0.6; Argo cannot filter condition arrays,
argo-workflows#7143/#11217).

Plain dicts holding only what is emitted. A run-time ``replicas`` is a plain
``{{inputs.parameters.num-parallel}}`` (or ``worker-count``) tag, unquoted (``emit.BareTag``),
so Argo's substitution leaves an int (argo-workflows#10924).

Every pod works out its rank in its own bash (``naming.gang_rank_lines``) from its job's
first rank and its job index, so the ranks need no pod template each: one is written, in
full (no YAML anchors, so a reviewer sees what each pod gets), and a second only for a
control with its own size and placement.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import RUN_USER, Env, JobSetKey, Label

from metaflow_extensions.mfargo.plugins import pod_contract

from . import common, emit, expr, gang, gang_policy, pod, pod_command, wiring

SUCCESS = "status.terminalState == Completed"
FAILURE = "status.terminalState == Failed"


def template(step: ir.Step, wf: ir.Workflow) -> m.Template:
    """The resource template of a @parallel step: create this attempt's JobSet, wait for it."""
    return m.Template(
        name=wiring.task_name(step.name),
        inputs=wiring.template_inputs_model(step, wf),
        metadata=common.launcher_metadata(step, wf.steps[wf.start].compute),
        # No activeDeadlineSeconds here: a resource pod killed by its deadline leaves the workflow
        # Running forever (argo-workflows#13937, open; seen on v4.0.5). Each Job's deadline bounds
        # the gang instead (_job), and the JobSet's failure ends this step.
        retry_strategy=common.retry_strategy(step.retry),
        resource=m.ResourceTemplate(
            action="create",
            set_owner_reference=True,
            success_condition=SUCCESS,
            failure_condition=FAILURE,
            manifest=emit.manifest_text(manifest(step, wf)),
        ),
    )


def manifest(step: ir.Step, wf: ir.Workflow) -> dict:
    """The JobSet for one attempt of ``step``'s gang."""
    name = gang.jobset_name(step)
    own_labels = {
        Label.PART_OF: Label.METAFLOW,
        Label.ARGO_WORKFLOW: expr.WORKFLOW_NAME,
        Label.WORKFLOW_NAME: expr.WORKFLOW_NAME,
    }
    # What Argo's podMetadata gives its own pods (JobSet pods are not Argo's), as core's gangs carry it.
    own_annotations = {
        **common.step_annotations(step),
        Label.RUN_ID: wiring.RUN_ID,
        Label.FLOW_NAME: wf.flow_name,
        Label.USER: RUN_USER,
    }
    labels, annotations = pod.metadata(step.compute, own_labels, own_annotations)
    placement = step.gang.placement
    kueue = {JobSetKey.KUEUE_QUEUE: placement.queue, JobSetKey.KUEUE_PRIORITY_CLASS: placement.priority_class}
    jobset_labels = {**labels, **{k: v for k, v in kueue.items() if v}}
    jobset_annotations = annotations
    if placement.exclusive_topology:
        jobset_annotations = {**jobset_annotations, JobSetKey.EXCLUSIVE_TOPOLOGY: placement.exclusive_topology}
    if placement.queue:  # how long Kueue may keep it suspended: the run's queue watch reads it
        jobset_annotations = {**jobset_annotations, JobSetKey.QUEUE_DEADLINE: str(step.timeout_seconds)}
    # How long its ranks have to start once it is active: the run's watch reads it.
    jobset_annotations = {**jobset_annotations, JobSetKey.START_WINDOW: str(placement.start_window_seconds)}
    command = pod_command.gang_script(step, wf)
    pod_failure = gang_policy.pod_failure_policy(placement, JobSetKey.CONTAINER)
    first_job = gang.first_job(step)
    if first_job == JobSetKey.RANKS_JOB:
        jobs = [(JobSetKey.RANKS_JOB, emit.BareTag(gang.NUM_PARALLEL), step.compute)]
    else:  # the control's own size, image and placement (@jobset(control=...))
        jobs = [(JobSetKey.CONTROL_JOB, 1, placement.control),
                (JobSetKey.WORKER_JOB, emit.BareTag(gang.WORKER_REPLICAS), step.compute)]
    shared_env = _shared_env(step, wf, name, first_job)
    start = wf.steps[wf.start].compute
    # No metadata.namespace: the JobSet lives in the Workflow's namespace, as its owner must.
    return {
        "apiVersion": JobSetKey.API_VERSION,
        "kind": JobSetKey.KIND,
        "metadata": {"name": name, "labels": jobset_labels, "annotations": jobset_annotations},
        "spec": {
            # Workers resolve the control pod's name while it is still starting.
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            # A restart re-runs the whole gang; pods see it as Metaflow's next attempt.
            "failurePolicy": gang_policy.failure_policy(placement),
            "ttlSecondsAfterFinished": wf.jobset_ttl_seconds,
            "replicatedJobs": [
                _job(step, job, replicas, pod_failure, name, own_labels, own_annotations, pod.lower(
                    pod.Kind.GANG, compute, start, command=command, deadline_seconds=step.timeout_seconds,
                    # A worker that cannot reach the control says why here (gang_control.py); the
                    # failure report reads it from the pod's status.
                    termination_message_path=pod_contract.TERMINATION_LOG,
                    env=tuple(shared_env) + ({"name": Env.FIRST_RANK, "value": str(pod_contract.FIRST_RANK[job])},)))
                for job, replicas, compute in jobs
            ],
        },
    }


def _shared_env(step: ir.Step, wf: ir.Workflow, jobset: str, first_job: str) -> list[dict]:
    """Env of every gang pod: the workflow's, the step's, pod identity, and the gang contract.
    The step's @environment replaces a workflow variable of the same name, as Argo's merge of
    templateDefaults does for every other step (a JobSet's env is a list-map: one entry per name)."""
    namespace = wf.namespace or expr.WORKFLOW_NAMESPACE
    own = {name for name, _ in step.environment}
    models = common.env_vars([(k, v) for k, v in wf.env if k not in own]) + common.env_vars(step.environment)
    return models + common.identity_env() + [
        {"name": Env.MASTER_ADDR, "value": naming.control_host(jobset, first_job, namespace)},
        {"name": Env.MASTER_PORT, "value": str(step.compute.port) if step.compute.port else "None"},
        {"name": Env.WORLD_SIZE, "value": gang.NUM_PARALLEL},
        {"name": Env.CONTROL_TASK_ID, "value": naming.control_task_id(gang.ENTROPY)},
        _annotation_ref(Env.JOB_INDEX, JobSetKey.JOB_INDEX),
        _annotation_ref(Env.JOBSET_RESTART_ATTEMPT, JobSetKey.RESTART_ATTEMPT),
        _annotation_ref(Env.JOBSET_NAME, JobSetKey.JOBSET_NAME),
    ]


def _refuse_contract_names(step: ir.Step, env: list[dict]) -> None:
    """An @environment variable a gang pod gets from mfargo too (pod identity, the gang contract
    Metaflow reads, the tmpfs dir): two entries of one name are refused by the JobSet API, and
    dropping either would break the gang or ignore the user."""
    from mfargo.compiler import CompileError

    own = {name for name, _ in step.environment}
    names = [e["name"] for e in env]
    for name in names:
        if name in own and names.count(name) > 1:
            raise CompileError("%s is set by mfargo in every gang pod (%s); use another name"
                               % (name, "Metaflow's @parallel contract or the pod's identity"), step.name, "environment")


def _annotation_ref(name: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['%s']" % key}}}


def _job(step: ir.Step, name: str, replicas, pod_failure: dict, jobset: str, labels: dict, annotations: dict,
         gang_pod: pod.Pod) -> dict:
    template = pod.jobset_pod(gang_pod, jobset, labels, annotations)
    _refuse_contract_names(step, template["spec"]["containers"][0]["env"])
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                # One counted pod failure fails the Job; podFailurePolicy says which count.
                "backoffLimit": 0,
                "podFailurePolicy": pod_failure,
                # @timeout, counted from the Job's start: a pod that is never scheduled or never
                # pulls its image fails the Job too (DeadlineExceeded), then the JobSet.
                "activeDeadlineSeconds": gang_pod.deadline_seconds,
                "completions": 1,
                "parallelism": 1,
                "template": template,
            }
        },
    }
