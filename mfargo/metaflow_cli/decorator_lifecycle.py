"""Metaflow's decorator lifecycle as core's `argo-workflows create` finishes it.

Why: by the time `create` runs, Metaflow's CLI has attached the `--with` decorators and run
the flow and step mutators (config-driven decorators included). Core's `create` then
attaches @kubernetes and @environment to every step that lacks them and runs Metaflow's
late-attach pass, which re-runs the StepMutators of those steps so that a mutator that
changes, say, @kubernetes(cpu=...) finds one to change. mfargo does the same here, with
Metaflow's own functions, so what reaches the YAML is what reaches core's.

One difference, on purpose: the @kubernetes this attaches is not checked by its
`step_init` (which refuses timeouts under 60 s, a local datastore, and reports bad values
without the step's name); mfargo's rules (compiler/decorators.py, rules.py) check the same
attributes and name the step and decorator. A @kubernetes written in the flow, or added by
a mutator, still goes through Metaflow's own checks, as in core.
"""

from __future__ import annotations

# What core's `create` attaches to every step (make_flow in argo_workflows_cli.py).
ATTACHED = ("kubernetes", "environment")


def attach_as_core_create(obj) -> None:
    """Attach ATTACHED to every step lacking them, run Metaflow's late-attach pass, and
    point `obj.graph` at the flow's rebuilt graph (mutators may have changed decorators)."""
    from metaflow import decorators

    before = {step.__name__: {id(d) for d in step.decorators} for step in obj.flow}
    decorators._attach_decorators(obj.flow, list(ATTACHED))
    for step in obj.flow:
        for deco in step.decorators:
            if deco.name == "kubernetes" and id(deco) not in before[step.__name__]:
                deco.step_init = _checked_by_mfargo
    decorators._process_late_attached_decorator(list(ATTACHED), obj.flow, obj.graph, obj.environment,
                                                obj.flow_datastore, obj.logger)
    obj.graph = obj.flow._graph
    for step in obj.flow:
        if not any(d.name == "kubernetes" for d in step.decorators):
            from mfargo.compiler import CompileError

            raise CompileError(
                "has no @kubernetes after Metaflow re-ran its StepMutators for the decorators `create` attaches "
                "(a mutator removed it and did not add it back); Metaflow's own `create` fails on this flow too",
                step=step.__name__, decorator="kubernetes")


def _checked_by_mfargo(*args, **kwargs) -> None:
    """An attached @kubernetes' step_init: its checks are mfargo's rules (see the docstring)."""
