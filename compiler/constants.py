"""Every fixed name the generated YAML uses, in one place.

Grouped like JobSet's API package: the *contract* Metaflow's in-pod code and users
read (must match metaflow 2.19's Argo compiler, see shared/reference/metaflow-argo.md),
the *upstream* keys owned by Kubernetes, Argo and JobSet, and *internal* names that
only mfargo's own templates agree on.
"""

from __future__ import annotations

import functools
from typing import Final

# Names the in-pod decorator shares with the compiler (output files, gang roles).
from metaflow_extensions.mfargo.plugins import pod_contract as contract


class Env:
    """Environment variables read by Metaflow inside a pod."""

    # @parallel contract (metaflow/plugins/kubernetes/kubernetes_decorator.py, parallel_decorator.py)
    MASTER_ADDR: Final = "MF_MASTER_ADDR"
    MASTER_PORT: Final = "MF_MASTER_PORT"
    WORLD_SIZE: Final = "MF_WORLD_SIZE"
    CONTROL_TASK_ID: Final = "MF_PARALLEL_CONTROL_TASK_ID"
    WORKER_REPLICA_INDEX: Final = "MF_WORKER_REPLICA_INDEX"
    CONTROL_INDEX: Final = "MF_CONTROL_INDEX"
    # mfargo's: a gang pod's rank is FIRST_RANK (its replicated job's) + JOB_INDEX.
    FIRST_RANK: Final = "MFARGO_FIRST_RANK"
    JOB_INDEX: Final = "MFARGO_JOB_INDEX"
    JOBSET_RESTART_ATTEMPT: Final = "JOBSET_RESTART_ATTEMPT"
    JOBSET_NAME: Final = "METAFLOW_KUBERNETES_JOBSET_NAME"
    # Set by mfargo's in-pod decorator from the ones above (metaflow_current.Parallel reads them).
    PARALLEL_MAIN_IP: Final = "MF_PARALLEL_MAIN_IP"
    PARALLEL_NUM_NODES: Final = "MF_PARALLEL_NUM_NODES"
    PARALLEL_NODE_INDEX: Final = "MF_PARALLEL_NODE_INDEX"
    # Pod identity (downward API), as Metaflow's Kubernetes integration names them.
    POD_NAME: Final = "METAFLOW_KUBERNETES_POD_NAME"
    POD_NAMESPACE: Final = "METAFLOW_KUBERNETES_POD_NAMESPACE"
    POD_ID: Final = "METAFLOW_KUBERNETES_POD_ID"
    SERVICE_ACCOUNT_NAME: Final = "METAFLOW_KUBERNETES_SERVICE_ACCOUNT_NAME"
    NODE_IP: Final = "METAFLOW_KUBERNETES_NODE_IP"
    # Run identity.
    RUNTIME_ENVIRONMENT: Final = "METAFLOW_RUNTIME_ENVIRONMENT"
    USER: Final = "METAFLOW_USER"
    PRODUCTION_TOKEN: Final = "METAFLOW_PRODUCTION_TOKEN"
    FLOW_CONFIG_VALUE: Final = "METAFLOW_FLOW_CONFIG_VALUE"
    ARGO_WORKFLOW_NAME: Final = contract.ARGO_WORKFLOW_NAME_ENV
    ARGO_WORKFLOW_TEMPLATE: Final = contract.ARGO_WORKFLOW_TEMPLATE_ENV
    ARGO_WORKFLOW_NAMESPACE: Final = contract.ARGO_WORKFLOW_NAMESPACE_ENV
    # Parameter values reach `flow.py init` through these (click's auto_envvar_prefix).
    INIT_PREFIX: Final = "METAFLOW_INIT_"
    PARAM_BASE64_PREFIX: Final = "MFARGO_PARAM_BASE64_"  # + the INIT name: the value, base64
    # mfargo's in-pod decorator writes its Argo output files into this directory.
    OUTPUT_DIR: Final = contract.OUTPUT_DIR_ENV
    CLONE_CHAIN: Final = contract.CLONE_CHAIN_ENV  # the steps a resumed run's pod clones after its own
    TEMPDIR: Final = "METAFLOW_TEMPDIR"


class LogEnv:
    """Which task a pod's log lines belong to and where they wait to be saved
    (metaflow/mflog/__init__.py export_mflog_env_vars; read by mflog.save_logs and task_logs)."""

    PATHSPEC: Final = "MF_PATHSPEC"  # flow/run/step/task
    ATTEMPT: Final = "MF_ATTEMPT"
    DATASTORE: Final = "MF_DATASTORE"
    STDOUT: Final = "MFLOG_STDOUT"
    STDERR: Final = "MFLOG_STDERR"
    UNBUFFERED: Final = "PYTHONUNBUFFERED"  # lines reach the log as they are printed


class UbfContext:
    """Unbounded-foreach roles (metaflow/unbounded_foreach.py)."""

    CONTROL: Final = "ubf_control"
    TASK: Final = "ubf_task"


class JobSetKey:
    """Labels/annotations the JobSet controller sets on pods (jobset_types.go, constants.go)."""

    JOB_INDEX: Final = contract.JOB_INDEX_LABEL
    RESTART_ATTEMPT: Final = contract.RESTART_ATTEMPT_ANNOTATION
    JOBSET_NAME: Final = contract.JOBSET_NAME_LABEL
    EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
    KUEUE_QUEUE: Final = contract.KUEUE_QUEUE_LABEL  # Kueue's label, read on the JobSet
    QUEUE_DEADLINE: Final = contract.QUEUE_DEADLINE_ANNOTATION  # a queued gang's bound in its queue
    START_WINDOW: Final = contract.START_WINDOW_ANNOTATION  # every rank started within it, or the gang is let go
    KUEUE_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"  # names a WorkloadPriorityClass
    API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
    KIND: Final = "JobSet"
    # Every rank's container: `argo logs WORKFLOW` lists pods by the workflow label and
    # prints the container named "main" unless told otherwise, so all ranks show.
    CONTAINER: Final = contract.GANG_CONTAINER
    RANKS_JOB: Final = contract.RANKS_JOB
    CONTROL_JOB: Final = contract.CONTROL_ROLE
    WORKER_JOB: Final = contract.WORKER_ROLE


class Api:
    """apiVersions of the objects mfargo emits (JobSet's: JobSetKey.API_VERSION)."""

    ARGO: Final = "argoproj.io/v1alpha1"  # Workflow, WorkflowTemplate, CronWorkflow, Sensor


class Label:
    """Labels and annotations on Argo objects and JobSets."""

    PART_OF: Final = "app.kubernetes.io/part-of"
    NAME: Final = "app.kubernetes.io/name"
    ARGO_WORKFLOW: Final = contract.ARGO_WORKFLOW_LABEL
    WORKFLOW_NAME: Final = "metaflow/argo-workflows-name"
    FLOW_NAME: Final = "metaflow/flow_name"
    RUN_ID: Final = "metaflow/run_id"
    STEP_NAME: Final = "metaflow/step_name"
    USER: Final = "metaflow/user"  # Metaflow's `kubernetes list/kill --user` match pods by it
    ATTEMPT: Final = "metaflow/attempt"
    PRODUCTION_TOKEN: Final = "metaflow/production_token"
    PROJECT_NAME: Final = "metaflow/project_name"
    BRANCH_NAME: Final = "metaflow/branch_name"
    PROJECT_FLOW_NAME: Final = "metaflow/project_flow_name"
    PARAMETERS: Final = "metaflow/parameters"
    TAGS: Final = "metaflow/tags"
    TITLE: Final = "workflows.argoproj.io/title"
    DESCRIPTION: Final = "workflows.argoproj.io/description"
    CODE_DIR: Final = "mfargo/code-dir"
    # {IncludeFile name: its default's path in the flow's directory}: `mfargo run` uploads a
    # default the datastore lacks (--only-yaml uploads nothing) from the code directory.
    INCLUDE_FILES: Final = "mfargo/include-files"
    # Set when deploying (mfargo.deploy), read back by later commands and Metaflow's Deployer.
    OWNER: Final = "metaflow/owner"
    TRIGGERED_BY: Final = "metaflow/triggered_by_user"
    SENSOR_NAME: Final = "metaflow/sensor_name"
    SENSOR_NAMESPACE: Final = "metaflow/sensor_namespace"
    BUNDLE_OBJECTS: Final = "mfargo/objects"  # the bundle's other objects, so `delete` can remove them
    # On a CronWorkflow: the template version `create` had Argo's cron controller check it against.
    TEMPLATE_CHECKED: Final = "mfargo/template-version"
    # What core's deployments carry too (@schedule, @trigger, notifications).
    CRON: Final = "metaflow/cron"
    TRIGGERS: Final = "metaflow/triggers"
    TRIGGERED_BY_EVENTS: Final = "metaflow/triggered_by"  # on a run the Sensor starts
    # What names the WorkflowTemplate a run was made from (mfargo.cluster.runs_of).
    WORKFLOW_TEMPLATE: Final = "workflows.argoproj.io/workflow-template"  # Argo >= 4.1; `trigger` sets it too
    CRON_WORKFLOW: Final = "workflows.argoproj.io/cron-workflow"  # on a CronWorkflow's runs
    SENSOR: Final = "events.argoproj.io/sensor"  # on what an Argo Events trigger creates
    SENSOR_TRIGGER: Final = "events.argoproj.io/trigger"
    NOTIFY_ON_ERROR: Final = "metaflow/notify_on_error"
    NOTIFY_ON_SUCCESS: Final = "metaflow/notify_on_success"
    METAFLOW: Final = "metaflow"


class Param:
    """Argo input/output parameter names shared by mfargo's templates (internal)."""

    CTX: Final = "ctx"  # foreach context path: "" at top level, "-3" in split 3, "-3-1" nested
    SPLIT_INDEX: Final = "split-index"
    # Outputs a pod writes as files of the same name (the in-pod decorator's contract).
    SPLIT_CARDINALITY: Final = contract.SPLIT_CARDINALITY_FILE
    NUM_SPLITS: Final = contract.NUM_SPLITS_FILE
    SWITCH_STEP: Final = contract.SWITCH_STEP_FILE
    NUM_PARALLEL: Final = contract.NUM_PARALLEL_FILE
    WORKER_COUNT: Final = contract.WORKER_COUNT_FILE
    ENTROPY: Final = contract.ENTROPY_FILE
    JOBSET_ID: Final = contract.JOBSET_ID_FILE
    GANG_CLONED: Final = contract.GANG_CLONED_FILE
    TASK_ID: Final = contract.TASK_ID_FILE
    ITERATION: Final = "iteration"
    INPUT_PATHS: Final = "input-paths"
    STATUS_PREFIX: Final = "status-"
    LOOP_TASK_PREFIX: Final = "task-id-"  # + a recursive parent: its last iteration's task id
    LAST_STEP: Final = "last-step"  # a foreach body's last step that ran (several possible)


class Path:
    """Fixed paths inside pods."""

    OUTPUTS: Final = "/mnt/out"
    OUTPUTS_VOLUME: Final = "mfargo-out"
    SHM_VOLUME: Final = "dhsm"
    TMPFS_VOLUME: Final = "tmpfs-ephemeral-volume"


# Decorators that name a compute platform other than Kubernetes: no Argo meaning.
FOREIGN_COMPUTE_DECORATORS: Final = ("batch", "snowpark", "slurm", "nvidia", "nvct", "skypilot_step")
# mfargo's in-pod decorator (extension/metaflow_extensions/mfargo/plugins/pod_hooks.py).
INTERNAL_DECORATOR: Final = "mfargo_internal"
# The Metaflow user the pods run as (METAFLOW_USER; the pods' metaflow/user annotation), as in core.
RUN_USER: Final = "argo-workflows"
# Runs a pod's Metaflow command with its output saved as the task's logs (in-pod, like the above).
TASK_LOGS_MODULE: Final = "metaflow_extensions.mfargo.plugins.task_logs"
# Runs the start pod's `flow.py init` and `flow.py step start` in one interpreter (in-pod too).
INIT_AND_START_MODULE: Final = "metaflow_extensions.mfargo.plugins.init_and_start"


# Label/annotation keys under these prefixes are Argo's and the JobSet controller's own: a
# user's key there would replace theirs, or be replaced (compiler/rules.py refuses them).
RESERVED_PREFIXES: Final = ("workflows.argoproj.io/", "jobset.sigs.k8s.io/", "alpha.jobset.sigs.k8s.io/")


@functools.lru_cache(maxsize=None)
def reserved_keys() -> frozenset[str]:
    """Every label/annotation key mfargo writes itself (Label's and JobSetKey's)."""
    keys = [v for cls in (Label, JobSetKey) for k, v in vars(cls).items()
            if k.isupper() and isinstance(v, str) and ("/" in v)]
    return frozenset(keys)
