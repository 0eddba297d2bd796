"""What the compiler and the in-pod decorators must agree on, written once.

The compiler (``mfargo.compiler``) emits YAML whose templates read files a pod writes
and whose pods run with task ids the join rebuilds; ``pod_hooks`` writes those files
and rebuilds those ids inside the pod. Both import this module, so a name or formula
cannot drift between them. No imports: it runs in pods (shipped with Metaflow's code
package as part of this extension) and in the compiler alike.
"""

# Environment variable naming the directory the pod writes its output files into.
OUTPUT_DIR_ENV = "MFARGO_OUTPUT_DIR"

# Output files a pod writes (each is also the Argo output parameter of the same name).
TASK_ID_FILE = "task-id"
NUM_SPLITS_FILE = "num-splits"  # JSON list [0..K-1] (resumed: the splits left to run), feeds withParam
SPLIT_CARDINALITY_FILE = "split-cardinality"
SWITCH_STEP_FILE = "switch-step"
NUM_PARALLEL_FILE = "num-parallel"  # the gang size N (the splitter's num_parallel)
WORKER_COUNT_FILE = "worker-count"  # N - 1: the worker job's replicas (when the control has its own pod)
ENTROPY_FILE = "task-id-entropy"  # E, minted once per gang (per split) by the splitter
# J, minted each time the splitter's task runs or is cloned: names the gang's JobSets, which
# must differ between runs even where a resumed run keeps the gang's task ids (E).
JOBSET_ID_FILE = "jobset-id"
# "true" when a resumed run's splitter cloned its gang whole (resume_clone.py): the gang's DAG
# task is then skipped and no JobSet is made; "false" otherwise.
GANG_CLONED_FILE = "gang-cloned"
# In a resumed run, the pod of a top-level step clones the plain steps it heads (compiler/graph.py
# picks them; resume_clone.py clones them): their names, space-separated, in this env, and one
# output file each, "true" when it cloned that step (its DAG task is then skipped: no pod),
# "false" otherwise.
CLONE_CHAIN_ENV = "MFARGO_CLONE_CHAIN"


def cloned_step_file(step):
    """The output file saying whether a chain step was cloned by its head's pod."""
    return "cloned-" + step


# The task-id roles (Metaflow's contract): rank 0 is the control, ranks 1..N-1 the workers.
CONTROL_ROLE = "control"
WORKER_ROLE = "worker"
# The gang's replicated jobs (JobSet). Every rank runs the same pod, so one job of N
# replicas (RANKS_JOB) holds them all; only when @jobset(control=...) gives the control a
# pod of its own are there two: CONTROL_ROLE (1 replica) and WORKER_ROLE (N - 1).
RANKS_JOB = "rank"
# A pod's rank is its replicated job's first rank plus its job index.
FIRST_RANK = {RANKS_JOB: 0, CONTROL_ROLE: 0, WORKER_ROLE: 1}
# Labels the JobSet and Job controllers put on a gang's Jobs and pods (jobset_types.go, batch/v1).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
RESTART_ATTEMPT_ANNOTATION = "jobset.sigs.k8s.io/restart-attempt"  # the gang generation of a pod
GANG_CONTAINER = "main"  # every rank's container (`argo logs` prints "main" by default)
# Kueue's queue label on a queued gang's JobSet, and the seconds it may stay suspended in its
# queue before the run's queue watch (queue_watch.py) deletes it (the step's @timeout).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_DEADLINE_ANNOTATION = "mfargo/queue-deadline-seconds"
GANG_QUEUE_ENV = "MFARGO_GANG_QUEUE"  # the queue, for the failure report of a queued gang
# The seconds every rank of a gang has to start once its JobSet is active (@jobset(start_window=...)):
# the run's watch (queue_watch.py) deletes a gang that holds some nodes while a rank cannot start.
START_WINDOW_ANNOTATION = "mfargo/start-window-seconds"
START_WINDOW_DEFAULT = 600
# What the watch says about a gang it deleted, as a Kubernetes Event on the JobSet's name (the
# JobSet is gone when the failure report runs): its reason, and the details as JSON in an annotation.
GANG_NOT_STARTED_REASON = "GangNotStarted"
GANG_NOT_STARTED_ANNOTATION = "mfargo/gang-not-started"
ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
ENTROPY_CHARS = 10  # hex characters: 40 bits, a collision across 1,000 splits is ~5e-7


ROOT_CTX = ""  # the foreach context outside every foreach


def task_id(step, ctx):
    """A step's task id in foreach context ``ctx`` (every task but a gang's and a loop's)."""
    return step + ctx


def child_ctx(ctx, split_index):
    """The foreach context of split ``split_index`` inside context ``ctx``."""
    return "%s-%s" % (ctx, split_index)


def ctx_of(step, task_id_):
    """The foreach context of ``step``'s task ``task_id_`` (the inverse of ``task_id``)."""
    assert task_id_.startswith(step), (step, task_id_)
    return task_id_[len(step):]


def gang_task_id(role, entropy, index):
    """<role>-<E>-<index>: control-E-0, worker-E-0 ... worker-E-(N-2)."""
    return "%s-%s-%s" % (role, entropy, index)


def control_task_id(entropy):
    return gang_task_id(CONTROL_ROLE, entropy, "0")


def worker_task_id(entropy, index):
    return gang_task_id(WORKER_ROLE, entropy, index)


def gang_task_ids(entropy, num_parallel):
    """Every task id of a gang of ``num_parallel`` pods, control first."""
    return [control_task_id(entropy)] + [worker_task_id(entropy, i) for i in range(int(num_parallel) - 1)]


def splitter_gang_task_ids(artifact):
    """Every task id of the gang after a finished splitter, from its artifacts (``artifact(name)``
    reads one): what a resume clones, the same ids the origin's gang ran under."""
    return gang_task_ids(artifact(ENTROPY_ARTIFACT), artifact("_parallel_ubf_iter").num_parallel)


def job_name(jobset, replicated_job, job_index):
    """The name JobSet gives a Job of ``jobset`` (its pods' names start with it and a dash)."""
    return "%s-%s-%d" % (jobset, replicated_job, int(job_index))


def gang_rank(replicated_job, job_index):
    """A pod's rank, Metaflow's split index (the pods' --split-index): control 0, worker i is i + 1."""
    return FIRST_RANK[replicated_job] + int(job_index)


def rank_role(rank):
    return CONTROL_ROLE if rank == 0 else WORKER_ROLE


# Where the gang failure report writes the message Argo shows on its node (the container's
# terminationMessagePath; under /tmp so the local runner finds it in the pod's own /tmp).
# The pod's Argo workflow: env the compiler sets, task metadata the pod registers from it.
ARGO_WORKFLOW_NAME_ENV = "ARGO_WORKFLOW_NAME"
ARGO_WORKFLOW_TEMPLATE_ENV = "ARGO_WORKFLOW_TEMPLATE"
ARGO_WORKFLOW_NAMESPACE_ENV = "ARGO_WORKFLOW_NAMESPACE"

TERMINATION_LOG = "/tmp/mfargo-termination-log"


def entropy_of(control_id):
    """E back from a control task id (the inverse of ``control_task_id``)."""
    prefix, suffix = CONTROL_ROLE + "-", "-0"
    if not (control_id.startswith(prefix) and control_id.endswith(suffix)):
        raise ValueError("%r is not a control task id" % control_id)
    return control_id[len(prefix) : -len(suffix)]


# @jobset(retry_on=[...]): which pod failures restart the whole gang inside its JobSet
# (each restart is the next Metaflow attempt); any other failure fails the JobSet at once
# so Argo's @retry decides.
RETRY_ON_DISRUPTION = "disruption"  # pod condition DisruptionTarget: preemption, eviction, drain
RETRY_ON_KILLED = "killed"  # exit 137 (SIGKILL from outside: node OOM killer, kubelet)
RETRY_ON_TERMINATED = "terminated"  # exit 143 (SIGTERM from outside)
RETRY_ON_ERROR = "error"  # any other non-zero exit: the user's code failed
RETRY_ON_CHOICES = (RETRY_ON_DISRUPTION, RETRY_ON_KILLED, RETRY_ON_TERMINATED, RETRY_ON_ERROR)
RETRY_ON_DEFAULT = (RETRY_ON_DISRUPTION, RETRY_ON_KILLED, RETRY_ON_TERMINATED)

# A worker rank that could not reach the gang's control (gang_control.py) exits with this:
# EX_TEMPFAIL, which the JobSet's pod failure policy counts as infrastructure, not user code.
CONTROL_UNREACHABLE_EXIT = 75
# How long a worker waits for the control (Metaflow's @kubernetes hostname_resolution_timeout default).
CONTROL_WAIT_SECONDS = 600


# Resuming a failed run on the cluster (plugins/resume.py): the workflow parameters that say
# which run to clone from and where to start again, and the env they reach every pod in
# (base64, as every run-time value: compiler/usertext.py). Empty: an ordinary run.
ORIGIN_RUN_PARAMETER = "mfargo-origin-run-id"
RESUME_STEP_PARAMETER = "mfargo-resume-step"
ORIGIN_RUN_ENV = "MFARGO_ORIGIN_RUN_ID_BASE64"
RESUME_STEP_ENV = "MFARGO_RESUME_STEP_BASE64"
# The artifact a gang's splitter keeps its task-id entropy in, so a resumed run that clones
# the splitter names the gang's tasks as the origin run did (and can clone them too).
ENTROPY_ARTIFACT = "_mfargo_gang_entropy"
# A step pod whose infrastructure failures do not spend @retry (attempt_guard.py) carries its
# @catch fallback attempts in ERROR_RETRIES_ENV (0 from templateDefaults); its keeper ends a failure that leaves no
# attempt for the step's code with FINAL_FAILURE_EXIT, the one exit Argo's retryStrategy
# does not retry (templates/common.py). Any other end (an evicted, deleted or lost pod) is retried.
ERROR_RETRIES_ENV = "MFARGO_ERROR_RETRIES"
FINAL_FAILURE_EXIT = 77  # not CONTROL_UNREACHABLE_EXIT nor attempt_guard.RENUMBER_EXIT
INFRA_ATTEMPTS_ENV = "MFARGO_INFRA_ATTEMPTS"  # "0,2": the task's attempts infrastructure ended
