"""Which pod failures restart a gang inside its JobSet, and which fail it at once.

Two controllers cooperate, and the rule for each ``@jobset(retry_on=...)`` category is
written here once:

* the Job controller's ``podFailurePolicy`` (Kubernetes >= 1.26, GA in 1.31; needs
  ``restartPolicy: Never``) sorts a failed pod: ``FailJob`` marks the Job Failed with
  reason ``PodFailurePolicy``; ``Count`` counts it against ``backoffLimit: 0``, so the
  Job fails with reason ``BackoffLimitExceeded``. Rules are tried in order, first match
  wins, and a pod no rule matches is counted.
* the JobSet controller's ``failurePolicy.rules`` (JobSet >= v0.6) then acts on the
  Job's reason: ``PodFailurePolicy`` -> ``FailJobSet`` (the step fails now and Argo's
  ``@retry`` decides); anything else -> ``RestartJobSet`` while
  ``restartsCountTowardsMax < maxRestarts``: the whole gang restarts and every rank runs
  as Metaflow's next attempt.

A worker rank that could not reach the gang's control exits ``CONTROL_UNREACHABLE_EXIT``
(``plugins/gang_control.py``): counted, as infrastructure, whatever ``retry_on`` says.

A disruption (pod condition ``DisruptionTarget``: preemption, eviction, node drain or
shutdown) is matched first, because a disrupted pod's exit code says nothing about the
user's code. An image that cannot be pulled never makes a pod fail (it stays Pending
with ``ImagePullBackOff``), so no rule can see it: the step's deadline bounds it.
"""

from __future__ import annotations

from mfargo.compiler import ir
from mfargo.compiler.constants import contract

DISRUPTION_CONDITION = "DisruptionTarget"
# Exit codes of a container killed from outside: 128 + SIGKILL, 128 + SIGTERM.
SIGNAL_EXIT_CODES = {contract.RETRY_ON_KILLED: 137, contract.RETRY_ON_TERMINATED: 143}
# Job failure reasons (batch/v1 JobConditionType Failed).
USER_FAILURE = "PodFailurePolicy"
COUNTED_FAILURE = "BackoffLimitExceeded"
# JobSet failurePolicy rule names: the webhook admits letters, digits and '_,:' only
# (mfargo.base.validation.jobset.RULE_NAME); a hyphen refused every gang on a real cluster.
FAIL_RULE = "fail_on_user_code"
RESTART_RULE = "restart_on_infrastructure"


def pod_failure_policy(placement: ir.GangPlacement, container: str) -> dict:
    """The Job's podFailurePolicy: FailJob for what must not restart the gang, Count otherwise."""
    retry_on = set(placement.retry_on)
    rules = [{
        "action": "Count" if contract.RETRY_ON_DISRUPTION in retry_on else "FailJob",
        "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
    }]
    restart_codes = sorted(code for name, code in SIGNAL_EXIT_CODES.items() if name in retry_on)
    fail_codes = sorted(code for name, code in SIGNAL_EXIT_CODES.items() if name not in retry_on)
    if contract.RETRY_ON_ERROR in retry_on:
        exit_rule = {"operator": "In", "values": fail_codes} if fail_codes else None
    else:
        # A worker that could not reach the control (gang_control.py): the cluster's doing,
        # whatever retry_on says, so counted (a restart) before the rule below can FailJob it.
        rules.append({"action": "Count", "onExitCodes": {
            "containerName": container, "operator": "In", "values": [contract.CONTROL_UNREACHABLE_EXIT]}})
        # NotIn: every other non-zero exit code (a container exiting 0 never matches).
        exit_rule = {"operator": "NotIn", "values": restart_codes or [0]}
    if exit_rule is not None:
        rules.append({"action": "FailJob", "onExitCodes": {"containerName": container, **exit_rule}})
    return {"rules": rules}


def failure_policy(placement: ir.GangPlacement) -> dict:
    """The JobSet's failurePolicy: user-code failures fail it, counted failures restart it."""
    return {
        "maxRestarts": placement.max_restarts,
        "rules": [
            {"name": FAIL_RULE, "action": "FailJobSet", "onJobFailureReasons": [USER_FAILURE]},
            {"name": RESTART_RULE, "action": "RestartJobSet", "onJobFailureReasons": [COUNTED_FAILURE]},
        ],
    }
