"""The intermediate representation: what to run, not how Argo spells it.

Plain frozen dataclasses built from Metaflow's FlowGraph and decorators; no hera,
no ``{{...}}``. ``templates/`` turns them into Argo objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from metaflow_extensions.mfargo.plugins import pod_contract as contract

from mfargo.base.versions import DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION


class Transition(enum.Enum):
    """What a step's ``self.next(...)`` does."""

    LINEAR = "linear"  # one successor (also joins and merges)
    SPLIT = "split"  # static split: every successor runs
    FOREACH = "foreach"  # self.next(self.x, foreach="items")
    PARALLEL = "parallel"  # self.next(self.x, num_parallel=N): the splitter of a Gang
    SWITCH = "switch"  # self.next({...}, condition="attr"): one successor runs
    END = "end"


# --- where a task's input paths come from -----------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FromParameters:
    """The start step: its only input is the run's ``_parameters`` task."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FromParents:
    """Every parent ran in this task's own foreach context."""

    parents: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class FromBranches:
    """Some parents were skipped by a switch: use those that arrived here.

    A parent arrived when it succeeded and, if it is a switch, chose this step: none of
    its ``rivals`` (its other successors) succeeded.
    """

    parents: tuple[str, ...]
    rivals: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (switch parent, its other successors)


@dataclass(frozen=True, kw_only=True, slots=True)
class FromCaller:
    """Input paths arrive as a parameter: foreach bodies and recursion iterations."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FromForeach:
    """A foreach join: one input per split, from whichever of ``body_last`` ran in it
    (several when a switch inside the body ends in different steps), counted by ``splitter``."""

    splitter: str
    body_last: tuple[str, ...]




# --- what a step needs from Kubernetes --------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Toleration:
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Compute:
    """The pod: image, resources and placement, merged from @kubernetes and @resources."""

    image: str
    image_pull_policy: str | None = None
    cpu: str
    memory_mb: int
    disk_mb: int | None
    gpu: int = 0
    gpu_vendor: str = "nvidia"
    qos: str = "Burstable"
    service_account: str | None = None
    namespace: str | None = None
    secrets: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    shared_memory_mb: int | None = None
    port: int | None = None
    persistent_volume_claims: tuple[tuple[str, str], ...] = ()  # (claim, mount path)
    tmpfs_size_mb: int | None = None  # set when use_tmpfs
    tmpfs_path: str = "/metaflow_temp"
    tmpfs_tempdir: bool = True  # with a tmpfs: METAFLOW_TEMPDIR is its path
    # Device plugins' resources (vpc.amazonaws.com/efa, a GPU model, hugepages-2Mi): requested and
    # limited alike, as Kubernetes requires of them.
    extended_resources: tuple[tuple[str, str], ...] = ()
    security_context: tuple[tuple[str, object], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # @pod_spec: Kubernetes' pod fields Metaflow does not model. The structured ones as canonical
    # JSON text (sorted keys: one value the IR compares and keys the cache with).
    priority_class_name: str | None = None
    affinity: str | None = None  # JSON object
    topology_spread_constraints: str | None = None  # JSON list
    pod_patch: str | None = None  # JSON object: other fields of the pod's spec


@dataclass(frozen=True, kw_only=True, slots=True)
class Retry:
    """Attempts beyond the first: user-code retries (@retry) plus error retries (@catch), and
    the attempts an infrastructure failure (an evicted or lost pod) may add to them without
    spending @retry (plugins/attempt_guard.py; 0 for a gang, which JobSet restarts)."""

    user_retries: int = 0
    error_retries: int = 0
    minutes_between: int = 2
    infra_retries: int = 0

    @property
    def total(self) -> int:
        return self.user_retries + self.error_retries

    @property
    def argo_limit(self) -> int:
        """Argo's retryStrategy.limit: every attempt after the first, whatever ended it."""
        return self.total + self.infra_retries


@dataclass(frozen=True, kw_only=True, slots=True)
class GangPlacement:
    """@jobset: Kueue queue and priority, exclusive topology and whole-gang restarts of a @parallel step."""

    queue: str | None = None
    priority_class: str | None = None  # Kueue's WorkloadPriorityClass
    exclusive_topology: str | None = None
    max_restarts: int = 0
    retry_on: tuple[str, ...] = contract.RETRY_ON_DEFAULT  # pod failures that restart the gang
    control: Compute | None = None  # the control pod's own size/image/placement; None: the step's
    # How long a worker waits for the control's address (@kubernetes hostname_resolution_timeout).
    control_wait_seconds: int = contract.CONTROL_WAIT_SECONDS
    # @jobset(start_window=...): seconds for every rank to start once the JobSet is active.
    start_window_seconds: int = contract.START_WINDOW_DEFAULT


@dataclass(frozen=True, kw_only=True, slots=True)
class Gang:
    """A @parallel gang, the one description of it every template reads.

    ``splitter`` ends with ``self.next(self.<step>, num_parallel=N)``: it is the size
    source (N is decided at run time and becomes its output) and it mints the entropy E
    that names the gang's tasks. ``step`` runs as one JobSet per attempt (control + N-1
    workers, placed and restarted as ``placement`` says). ``join`` reads the N tasks
    back, their ids rebuilt from E and N; a join's ``inputs`` is its Gang.
    """

    splitter: str
    step: str
    join: str
    placement: GangPlacement = field(default_factory=GangPlacement)


# Where a step's input paths come from (a join after a gang: the Gang itself).
InputSource = FromParameters | FromParents | FromBranches | FromCaller | FromForeach | Gang


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One Metaflow step and everything needed to run its task(s)."""

    name: str
    transition: Transition
    successors: tuple[str, ...]
    inputs: InputSource
    scope: str | None  # the foreach splitter whose body holds this step; None = top level
    foreach_entry: bool = False  # first step of a foreach body: gets --split-index
    gang: Gang | None = None  # set on a @parallel step: the gang it runs as (a JobSet)
    recursive: bool = False  # a switch step that can choose itself
    switch_cases: tuple[str, ...] = ()
    condition: tuple[tuple[str, str], ...] = ()  # switch choices this step needs, in its scope
    switch_parent: str | None = None  # the switch whose choice gates this step (adds `when`)
    cloned_by: str | None = None  # in a resumed run, the top-level step whose pod clones this one
    compute: Compute
    retry: Retry = field(default_factory=Retry)
    timeout_seconds: int
    environment: tuple[tuple[str, str], ...] = ()
    decorator_specs: tuple[str, ...] = ()  # --with specs for decorators added on the command line
    # From Metaflow's environment plugin (--environment=pypi|conda|uv, @pypi, @conda), as core asks it:
    executable: str = "python"  # runs the step, e.g. `$MF_ARCH/<env id>/bin/python -s`
    bootstrap_commands: tuple[str, ...] = ()  # build or fetch the environment in the pod first


@dataclass(frozen=True, kw_only=True, slots=True)
class Parameter:
    """A flow Parameter, as an Argo workflow parameter holding the raw CLI string."""

    name: str
    default: str | None  # None: required (no default)
    description: str | None = None
    nullable: bool = False  # default None: an empty value means "unset"
    type_name: str = "str"


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeSource:
    """How pods get the flow's code: baked into the image, or Metaflow's code package."""

    image_dir: str | None = None  # --code-in-image DIR
    package_url: str | None = None
    package_sha: str | None = None
    package_datastore: str | None = None
    package_metadata: str | None = None
    package_commands: tuple[str, ...] = ()  # download + unpack, from Metaflow's parts


class WorkflowField(enum.Enum):
    """A fact of the running workflow that Argo fills in (templates/expr.py spells it)."""

    NAME = "name"
    NAMESPACE = "namespace"


@dataclass(frozen=True, slots=True)
class ParameterBase64:
    """A workflow parameter's run-time value, base64-encoded by Argo, so the value never
    becomes text that Argo or Kubernetes would read again; the pod decodes it."""

    parameter: str


EnvValue = str | WorkflowField | ParameterBase64  # str: literal text, written as is


@dataclass(frozen=True, kw_only=True, slots=True)
class Workflow:
    """A whole compiled flow."""

    name: str  # WorkflowTemplate name (sanitised, length-checked)
    flow_name: str
    script: str  # the flow file's base name, run in the pod
    steps: dict[str, Step]  # in graph order
    start: str
    parameters: tuple[Parameter, ...]
    code: CodeSource
    namespace: str | None
    top_level_args: tuple[str, ...]  # e.g. --datastore=s3 --metadata=local ...
    datastore: str  # Metaflow datastore type (s3, gs, azure, local): where task logs are saved
    init_executable: str = "python"  # runs `flow.py init` (the environment plugin's for `_parameters`)
    step_args: tuple[str, ...]  # e.g. --tag x --namespace y, passed to init and step
    env: tuple[tuple[str, EnvValue], ...]  # shared by every pod
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    max_workers: int
    timeout_seconds: int | None = None
    priority: int | None = None
    description: str | None = None
    jobset_ttl_seconds: int = 3600
    cleanup: Cleanup = field(default_factory=lambda: Cleanup())  # ttlStrategy / podGC of runs
    emit_events: bool = False  # each task publishes its Argo Event on success (as core's pods do)
    run_heartbeat: bool = False  # a daemon pod sends the run's heartbeat to the metadata service
    tags: tuple[str, ...] = ()  # the run's tags (--tag), as `init` and the heartbeat register them
    deployment: Deployment = field(default_factory=lambda: Deployment())  # CronWorkflow, Sensor, hooks


@dataclass(frozen=True, kw_only=True, slots=True)
class Cleanup:
    """When finished runs and their pods go away (Argo ttlStrategy and podGC).

    Succeeded runs go after a day, failed ones after a week (time to debug them); pods
    of a succeeded run go when it ends (their logs are in Metaflow's datastore), a failed
    run keeps its pods until the run itself goes. JobSets follow their Workflow (owner
    reference) or their own ttlSecondsAfterFinished, whichever comes first.
    """

    seconds_after_success: int | None = 86400
    seconds_after_failure: int | None = 604800
    pod_gc: str | None = "OnWorkflowSuccess"  # None: keep pods (no podGC)


# --- deployment: what is created beside the WorkflowTemplate ------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """@schedule: a CronWorkflow running the template."""

    cron: str  # five fields (Metaflow's sixth, the year, is dropped as core does)
    timezone: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EventTrigger:
    """One event a Sensor waits for (@trigger event, or @trigger_on_finish flow end)."""

    name: str  # the Metaflow event name (payload field `name`)
    kind: str  # "event" (@trigger) or "run" (@trigger_on_finish)
    sanitized_name: str  # Metaflow's: dependency name and extra workflow parameter
    parameters: tuple[tuple[str, str], ...] = ()  # (flow parameter name, payload key)
    filters: tuple[tuple[str, str | bool], ...] = ()  # payload key == value, as JSON types (trigger_on_finish)


@dataclass(frozen=True, kw_only=True, slots=True)
class Triggers:
    """@trigger / @trigger_on_finish: an Argo Events Sensor creating a Workflow."""

    events: tuple[EventTrigger, ...]
    sensor_name: str
    sensor_namespace: str | None = None
    event_bus: str = "default"
    event_source: str = "argo-events-webhook"
    event_name: str = "metaflow-event"
    service_account: str = "operate-workflow-sa"
    reset_cron: str | None = None
    reset_timezone: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ExitHook:
    """@exit_hook: a function of the flow file run after the workflow ends."""

    template: str  # naming.exit_hook_template_name: 0-on-success-<fn> / 0-on-error-<fn>
    function: str
    on_success: bool  # else on error
    image: str  # its pod is otherwise the start step's (templates/pod.INHERITS)
    cpu: str = "1"
    memory_mb: int = 4096


@dataclass(frozen=True, kw_only=True, slots=True)
class SecretRef:
    """A key of a Kubernetes Secret: the value never enters the YAML."""

    name: str
    key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Notify:
    """--notify-on-error / --notify-on-success, with credentials from Secrets."""

    on_error: bool = False
    on_success: bool = False
    slack: SecretRef | None = None
    pager_duty: SecretRef | None = None
    incident_io: SecretRef | None = None  # API key
    incident_io_source: str | None = None  # alert source config id (not a secret)
    incident_io_metadata: tuple[tuple[str, str], ...] = ()
    image: str = "python:3.11"


@dataclass(frozen=True, kw_only=True, slots=True)
class Bundle:
    """Which extra documents to emit and how to spell them (create options)."""

    argo_version: str = DEFAULT_ARGO_VERSION  # X.Y: the target Argo (compiler/versions.py); 3.7 spells the cron `schedule`
    jobset_version: str = DEFAULT_JOBSET_VERSION  # X.Y: the target JobSet; the manifest is checked against its CRD
    workflow: bool = False  # also a `kind: Workflow` referencing the template
    # Runs created by the bundle use it; also the RoleBinding subject ("default" when None).
    service_account: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Concurrency:
    """How many runs of the deployed flow run at once (--max-concurrent-runs: Argo's semaphore;
    runs beyond it wait, Pending), and what a schedule does while its last run still runs
    (--schedule-concurrency-policy: the CronWorkflow's concurrencyPolicy)."""

    max_runs: int | None = None
    schedule_policy: str | None = None  # Allow | Forbid | Replace; None: Argo's default (Allow)


@dataclass(frozen=True, kw_only=True, slots=True)
class Deployment:
    """Everything beyond the WorkflowTemplate, read from flow decorators and create options."""

    schedule: Schedule | None = None
    triggers: Triggers | None = None
    exit_hooks: tuple[ExitHook, ...] = ()
    notify: Notify = field(default_factory=Notify)
    bundle: Bundle = field(default_factory=Bundle)
    concurrency: Concurrency = field(default_factory=Concurrency)
