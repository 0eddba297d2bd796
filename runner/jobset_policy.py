"""What the JobSet controller decides when its Jobs finish: the success policy, which
failure-policy rule applies to a failed Job, and the Failed condition it then writes.
Pure functions of the JobSet spec, so `jobset.py` keeps only the running of Jobs."""
from __future__ import annotations

from dataclasses import dataclass

from . import job_policy


@dataclass
class Failure:
    """The first failed Job of a gang generation (what the JobSet controller acts on)."""

    rjob: str
    job: str
    reason: str
    message: str
    pod: job_policy.PodOutcome | None


# The JobSet controller's Failed-condition reasons and messages (pkg/constants).
ACTION_MESSAGES = {
    "FailJobSet": "applying FailJobSet failure policy action",
    "RestartJobSet": "applying RestartJobSet failure policy action",
    "RestartJobSetAndIgnoreMaxRestarts": "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
}


def failed_condition(fp: dict | None, action: str) -> tuple[str, str]:
    """(reason, message) of the Failed condition, before '(first failed job: ...)'."""
    if not fp:
        return "FailedJobs", "jobset failed due to one or more job failures"
    if action == "FailJobSet":
        return "FailJobSetFailurePolicyAction", ACTION_MESSAGES[action]
    return "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"


def failure_action(fp: dict | None, rjob: str, reason: str) -> str:
    """The first rule matching the failed Job's reason and replicated job; else RestartJobSet."""
    if not fp:
        return "FailJobSet"
    for rule in fp.get("rules") or []:
        reasons = rule.get("onJobFailureReasons") or []
        targets = rule.get("targetReplicatedJobs") or []
        if (not reasons or reason in reasons) and (not targets or rjob in targets):
            return rule.get("action") or "RestartJobSet"
    return "RestartJobSet"

