"""What the Job and JobSet controllers decide about a failure, and the faults the runner can play.

``podFailurePolicy`` (batch/v1, Kubernetes >= 1.26): rules are tried in order and the
first whose requirement holds decides: ``FailJob`` fails the Job at once with reason
``PodFailurePolicy``, ``Count`` (also what happens when no rule matches) counts it against
``backoffLimit`` (mfargo's is 0: the Job fails, ``BackoffLimitExceeded``). A rule matches on
``onExitCodes`` (a terminated container, optionally by name, whose non-zero exit code is
``In``/``NotIn`` the values) or ``onPodConditions`` (a pod condition of that type and
status). Messages are the Job controller's.

The JobSet's ``failurePolicy``: the first rule whose ``onJobFailureReasons`` holds the failed
Job's reason decides (``FailJobSet``, or ``RestartJobSet`` while ``maxRestarts`` allows);
without a matching rule the gang restarts, without a policy it fails. These are the actions
mfargo writes (``templates/gang_policy.py``); ``jobset.py`` refuses others at creation.

Faults: a local process is never preempted or OOM-killed, so the runner plays these on
request, writing what the kubelet and scheduler would. A pod template annotation
``mfargo.runner/faults: "rank-1@0=preempt,rank-0@1=oom"`` (``<replicatedJob>-<job
index>@<restart attempt>=<fault>[:<seconds>]``) hits that rank's pod in that gang
generation after it has run ``seconds`` (default 3): ``preempt`` and ``evict`` add the
pod condition ``DisruptionTarget`` (reasons ``PreemptionByScheduler`` /
``EvictionByEvictionAPI``) and kill the container (exit 137); ``oom`` kills it with
termination reason ``OOMKilled`` (exit 137). Kubernetes ignores the annotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

POD_ACTIONS = ("FailJob", "Count")
JOBSET_ACTIONS = ("FailJobSet", "RestartJobSet")
FAULTS_ANNOTATION = "mfargo.runner/faults"
DEFAULT_FAULT_DELAY = 3.0
KILLED_EXIT_CODE = 137
_FAULT = re.compile(r"^\s*([a-z0-9-]+)-(\d+)@(\d+)=(preempt|evict|oom)(?::(\d+(?:\.\d+)?))?\s*$")
# fault -> (pod condition reason or None, container termination reason)
_FAULT_STATUS = {
    "preempt": ("PreemptionByScheduler", "Error"),
    "evict": ("EvictionByEvictionAPI", "Error"),
    "oom": (None, "OOMKilled"),
}


@dataclass
class PodOutcome:
    """The parts of a finished pod's status the Job controller and the JobSet read."""

    pod: str
    namespace: str
    container: str
    phase: str  # Succeeded | Failed
    exit_code: int | None
    reason: str  # the container's termination reason: Completed, Error, OOMKilled, DeadlineExceeded...
    message: str
    conditions: list[dict] = field(default_factory=list)  # e.g. {type: DisruptionTarget, status: "True", reason}


@dataclass(frozen=True)
class Fault:
    kind: str  # preempt | evict | oom
    delay: float

    def outcome(self, pod: str, namespace: str, container: str) -> PodOutcome:
        condition_reason, reason = _FAULT_STATUS[self.kind]
        conditions = []
        if condition_reason:
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": condition_reason,
                               "message": f"{condition_reason}: the runner played a {self.kind}"})
        return PodOutcome(pod, namespace, container, "Failed", KILLED_EXIT_CODE, reason,
                          f"{reason} (exit code {KILLED_EXIT_CODE}, {self.kind} played by the runner)", conditions)


def faults(annotations: dict) -> dict[tuple[str, int, int], Fault]:
    """(replicated job, job index, restart attempt) -> Fault, from the pod template annotation."""
    text = (annotations or {}).get(FAULTS_ANNOTATION)
    if not text:
        return {}
    out = {}
    for item in str(text).split(","):
        m = _FAULT.match(item)
        if not m:
            raise ValueError(f"annotation {FAULTS_ANNOTATION}: {item.strip()!r} is not "
                             "<replicatedJob>-<index>@<restart>=preempt|evict|oom[:seconds]")
        rjob, index, restart, kind, delay = m.groups()
        out[(rjob, int(index), int(restart))] = Fault(kind, float(delay) if delay else DEFAULT_FAULT_DELAY)
    return out


def action(policy: dict | None, outcome: PodOutcome) -> tuple[str, str]:
    """(FailJob | Count, why) for a failed pod under ``policy``."""
    for index, rule in enumerate((policy or {}).get("rules") or []):
        act = rule.get("action") or "Count"
        codes = rule.get("onExitCodes")
        if codes and _exit_codes_match(codes, outcome):
            return act, (f"Container {outcome.container} for pod {outcome.namespace}/{outcome.pod} failed with "
                         f"exit code {outcome.exit_code} matching {act} rule at index {index}")
        for want in rule.get("onPodConditions") or []:
            for cond in outcome.conditions:
                if cond.get("type") == want.get("type") and cond.get("status") == (want.get("status") or "True"):
                    return act, (f"Pod {outcome.namespace}/{outcome.pod} has condition {cond['type']} "
                                 f"matching {act} rule at index {index}")
    return "Count", ""


def _exit_codes_match(codes: dict, outcome: PodOutcome) -> bool:
    if outcome.exit_code in (None, 0):
        return False  # not terminated with a failure: exit code 0 is excluded from the check
    if codes.get("containerName") and codes["containerName"] != outcome.container:
        return False
    values = [int(v) for v in codes.get("values") or []]
    inside = outcome.exit_code in values
    return inside if codes.get("operator") == "In" else not inside


@dataclass
class Failure:
    """The first failed Job of a gang generation (what the JobSet controller acts on)."""

    rjob: str
    job: str
    reason: str
    message: str
    pod: PodOutcome | None


# The JobSet controller's Failed-condition reasons and messages (pkg/constants).
ACTION_MESSAGES = {a: f"applying {a} failure policy action" for a in JOBSET_ACTIONS}


def failure_action(fp: dict | None, reason: str) -> str:
    """The first rule matching the failed Job's reason; else RestartJobSet (FailJobSet without a policy)."""
    if not fp:
        return "FailJobSet"
    for rule in fp.get("rules") or []:
        if not rule.get("onJobFailureReasons") or reason in rule["onJobFailureReasons"]:
            return rule.get("action") or "RestartJobSet"
    return "RestartJobSet"


def failed_condition(fp: dict | None, action: str) -> tuple[str, str]:
    """(reason, message) of the Failed condition, before '(first failed job: ...)'."""
    if not fp:
        return "FailedJobs", "jobset failed due to one or more job failures"
    if action == "FailJobSet":
        return "FailJobSetFailurePolicyAction", ACTION_MESSAGES[action]
    return "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"
