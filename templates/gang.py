"""A @parallel step -> an Argo resource template that creates its JobSet and waits for it.

Success and failure are single-clause conditions on JobSet's ``status.terminalState``
(JobSet >= v0.6; Argo cannot filter condition arrays, argo-workflows#7143/#11217).
"""

from __future__ import annotations

from hera.workflows import models as m

from mfargo.compiler import ir

from . import common, emit, jobset, wiring

SUCCESS = "status.terminalState == Completed"
FAILURE = "status.terminalState == Failed"


def build(step: ir.Step, wf: ir.Workflow, default_image: str) -> m.Template:
    return m.Template(
        name=wiring.task_name(step.name),
        inputs=m.Inputs(parameters=[m.Parameter(name=n) for n in wiring.template_inputs(step, wf)]),
        metadata=common.step_metadata(step, step.retry),
        # Bounds the wait too: a gang that never gets scheduled fails the step.
        active_deadline_seconds=m.IntOrString(step.timeout_seconds),
        retry_strategy=common.retry_strategy(step.retry),
        resource=m.ResourceTemplate(
            action="create",
            set_owner_reference=True,
            success_condition=SUCCESS,
            failure_condition=FAILURE,
            manifest=emit.manifest_text(jobset.manifest(step, wf)),
        ),
    )
