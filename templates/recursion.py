"""A switch step that can choose itself -> a `steps` template that calls itself.

Each iteration runs the step with task id ``t<ctx>-r<n>``; the next iteration reads
the previous one's output. The loop's outputs are those of its last iteration, so the
rest of the DAG sees the loop as one switch step.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Param

from . import expr, wiring

RUN = "run"
AGAIN = "again"


def build(step: ir.Step, wf: ir.Workflow) -> m.Template:
    loop = naming.recursion_template_name(step.name)
    this_task = wiring.step_path(step.name, wiring.step_ctx(step, wf), expr.input_param(Param.ITERATION))
    passed = [m.Parameter(name=n, value=expr.input_param(n)) for n in wiring.template_inputs(step, wf)]
    # The next iteration reads this one; every other input (a foreach child's split index...)
    # passes through unchanged.
    changed = {
        Param.ITERATION: "{{=asInt(inputs.parameters['%s']) + 1}}" % Param.ITERATION,
        Param.INPUT_PATHS: this_task,
    }
    again_args = [m.Parameter(name=p["name"], value=changed.get(p["name"], p["value"])) for p in passed]
    return m.Template(
        name=loop,
        inputs=wiring.template_inputs_model(step, wf),
        outputs=m.Outputs(parameters=[_last(Param.TASK_ID), _last(Param.SWITCH_STEP)]),
        steps=[
            m.ParallelSteps([m.WorkflowStep(name=RUN, template=wiring.task_name(step.name), arguments=m.Arguments(parameters=passed))]),
            m.ParallelSteps(
                [
                    m.WorkflowStep(
                        name=AGAIN,
                        template=loop,
                        when=expr.equals(expr.step_output(RUN, Param.SWITCH_STEP), step.name),
                        arguments=m.Arguments(parameters=again_args),
                    )
                ]
            ),
        ],
    )


def _last(name: str) -> m.Parameter:
    """The value from the deepest iteration: `again` ran, or this one was the last."""
    return m.Parameter(
        name=name,
        value_from=m.ValueFrom(
            expression="steps['%s'].status == 'Skipped' ? steps['%s'].outputs.parameters['%s'] "
            ": steps['%s'].outputs.parameters['%s']" % (AGAIN, RUN, name, AGAIN, name)
        ),
    )
