"""`@jobset(...)`: how a @parallel step's gang is placed and restarted on Kubernetes.

    @jobset(queue="team-a", priority_class="high", exclusive_topology="cloud.google.com/gke-nodepool",
            max_restarts=2, control={"cpu": 4, "memory": 16384, "gpu": 0})
    @parallel
    @step
    def train(self): ...

* ``queue``: a Kueue LocalQueue; the JobSet is labelled ``kueue.x-k8s.io/queue-name``
  so Kueue admits the whole gang at once.
* ``priority_class``: a Kueue WorkloadPriorityClass (label ``kueue.x-k8s.io/priority-class``):
  the order of admission in the queue, and which gang Kueue may preempt for another.
* ``exclusive_topology``: a node label key; JobSet places each job on its own domain
  of that topology (annotation ``alpha.jobset.sigs.k8s.io/exclusive-topology``).
* ``max_restarts``: JobSet restarts the whole gang up to this many times when a pod
  fails for a reason ``retry_on`` lists (``failurePolicy.maxRestarts``); each restart is
  a new Metaflow attempt.
* ``retry_on``: which pod failures restart the gang: ``disruption`` (preemption,
  eviction, node drain), ``killed`` (exit 137), ``terminated`` (exit 143), ``error``
  (any other non-zero exit: the user's code). Default: all but ``error``, so a bug fails
  the JobSet at once and Argo's ``@retry`` takes over.
* ``control``: the control pod's own ``cpu``, ``memory``, ``gpu``, ``disk`` (as in
  ``@kubernetes``), ``image``, ``node_selector`` and ``tolerations``; workers keep the
  step's. Rank roles, ``current.parallel`` and the env stay the same.
* ``start_window``: seconds every rank has to start (be scheduled and have its container
  running) once the JobSet is active (default 600); a gang that has not started whole by
  then is deleted by the run's watch, freeing what its started ranks hold, and its step
  fails (its ``@retry`` tries again) with a report naming the rank and the scheduler's reason.

Read at compile time by mfargo; in pods it does nothing.
"""

from metaflow.decorators import StepDecorator
from metaflow.exception import MetaflowException

from . import pod_contract as contract


class JobSetDecorator(StepDecorator):
    name = "jobset"
    defaults = {"queue": None, "priority_class": None, "exclusive_topology": None, "max_restarts": 0, "retry_on": None, "control": None,
                "start_window": None}

    def step_init(self, flow, graph, step_name, decorators, environment, flow_datastore, logger):
        if not any(getattr(d, "IS_PARALLEL", False) for d in decorators):
            raise MetaflowException("@jobset applies to @parallel steps only (step *%s*)" % step_name)
        try:
            restarts = int(self.attributes["max_restarts"] or 0)
        except (TypeError, ValueError):
            restarts = -1
        if restarts < 0:
            raise MetaflowException("@jobset(max_restarts=...) must be a whole number >= 0 (step *%s*)" % step_name)
        retry_on(self.attributes["retry_on"], step_name)
        control(self.attributes["control"], step_name)


def retry_on(value, step_name):
    """The retry_on categories as a tuple (the default when unset); one-line error otherwise."""
    if value is None:
        return contract.RETRY_ON_DEFAULT
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or any(i not in contract.RETRY_ON_CHOICES for i in items):
        raise MetaflowException(
            "@jobset(retry_on=...) takes a list of %s, not %r (step *%s*)"
            % (", ".join(contract.RETRY_ON_CHOICES), value, step_name)
        )
    return tuple(c for c in contract.RETRY_ON_CHOICES if c in items)


CONTROL_KEYS = ("cpu", "memory", "gpu", "disk", "image", "node_selector", "tolerations")


def control(value, step_name):
    """@jobset(control={...}) as a dict of known keys ({} when unset); one-line error otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - set(CONTROL_KEYS):
        raise MetaflowException(
            "@jobset(control=...) takes a dict with keys among %s, not %r (step *%s*)"
            % (", ".join(CONTROL_KEYS), value, step_name)
        )
    return dict(value)
