"""`@jobset(...)`: how a @parallel step's gang is placed and restarted on Kubernetes.

    @jobset(queue="team-a", exclusive_topology="cloud.google.com/gke-nodepool", max_restarts=2)
    @parallel
    @step
    def train(self): ...

* ``queue``: a Kueue LocalQueue; the JobSet is labelled ``kueue.x-k8s.io/queue-name``
  so Kueue admits the whole gang at once.
* ``exclusive_topology``: a node label key; JobSet places each job on its own domain
  of that topology (annotation ``alpha.jobset.sigs.k8s.io/exclusive-topology``).
* ``max_restarts``: JobSet restarts the whole gang up to this many times when a pod
  fails (``failurePolicy.maxRestarts``); each restart is a new Metaflow attempt.

Read at compile time by mfargo; in pods it does nothing.
"""

from metaflow.decorators import StepDecorator
from metaflow.exception import MetaflowException


class JobSetDecorator(StepDecorator):
    name = "jobset"
    defaults = {"queue": None, "exclusive_topology": None, "max_restarts": 0}

    def step_init(self, flow, graph, step_name, decorators, environment, flow_datastore, logger):
        if not any(getattr(d, "IS_PARALLEL", False) for d in decorators):
            raise MetaflowException("@jobset applies to @parallel steps only (step *%s*)" % step_name)
        try:
            restarts = int(self.attributes["max_restarts"] or 0)
        except (TypeError, ValueError):
            restarts = -1
        if restarts < 0:
            raise MetaflowException("@jobset(max_restarts=...) must be a whole number >= 0 (step *%s*)" % step_name)
