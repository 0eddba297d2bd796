"""`@pod_spec(...)`: the pod fields Metaflow's @kubernetes does not model, for any step (a
gang's pods too, both roles).

    @pod_spec(priority_class_name="high-priority",
              affinity={"nodeAffinity": {...}, "podAntiAffinity": {...}},
              topology_spread_constraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                            "whenUnsatisfiable": "ScheduleAnyway",
                                            "labelSelector": {"matchLabels": {"team": "ml"}}}],
              patch={"runtimeClassName": "gvisor", "dnsConfig": {...}})
    @step
    def train(self): ...

* ``priority_class_name``: a Kubernetes PriorityClass (``spec.priorityClassName``): the order in
  which the scheduler places pods, and which it may preempt.
* ``affinity``: the pod's ``affinity`` (node affinity, pod affinity and anti-affinity).
* ``topology_spread_constraints``: the pod's ``topologySpreadConstraints``.
* ``patch``: any other field of the pod's spec, as Kubernetes spells it; not those mfargo and
  Metaflow's contract own (the containers, volumes, service account, node selector,
  tolerations, pull secrets, restart policy, deadline, host name) nor those above.

Keys are spelled as Kubernetes spells them (camelCase), and written as they are. Checked at
compile time against Kubernetes' schema; read by mfargo only: in pods it does nothing.
"""

from metaflow.decorators import StepDecorator


class PodSpecDecorator(StepDecorator):
    name = "pod_spec"
    defaults = {"priority_class_name": None, "affinity": None, "topology_spread_constraints": None, "patch": None}
