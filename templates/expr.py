"""Argo tags built by named functions, never by hand (``{{inputs.parameters.x}}`` ...)."""

from __future__ import annotations

from mfargo.compiler import ir, naming

from metaflow_extensions.mfargo.plugins import pod_contract as contract

WORKFLOW_NAME = "{{workflow.name}}"
WORKFLOW_NAMESPACE = "{{workflow.namespace}}"
RETRIES = "{{retries}}"
ITEM = "{{item}}"
RUN_ID = naming.run_id(WORKFLOW_NAME)  # argo-{{workflow.name}}: Metaflow's run id


def not_final_failure() -> str:
    """A retryStrategy expression: retry unless the attempt ended with the keeper's final
    failure (``lastRetry.exitCode`` is Argo's text of the main container's exit, "-1" when
    the pod ended without one)."""
    return 'lastRetry.exitCode != "%d"' % contract.FINAL_FAILURE_EXIT


def workflow_field(field: ir.WorkflowField) -> str:
    return {ir.WorkflowField.NAME: WORKFLOW_NAME, ir.WorkflowField.NAMESPACE: WORKFLOW_NAMESPACE}[field]


def parameter_base64(parameter: str) -> str:
    """A workflow parameter's value, base64-encoded by Argo: ``toBase64`` is expr-lang's
    builtin (Argo >= 3.6 evaluates ``{{=...}}`` with it); the pod decodes it
    (compiler.command's ``base64 -d``, or pod_hooks in Python). Double quotes: in a JobSet
    manifest, a string of YAML text that Argo substitutes in before parsing it, the value is
    single-quoted YAML, where a ``'`` would be doubled and the expression broken."""
    return '{{=toBase64(workflow.parameters["%s"])}}' % parameter


def input_param(name: str) -> str:
    return "{{inputs.parameters.%s}}" % name


def task_output(task: str, name: str) -> str:
    return "{{tasks.%s.outputs.parameters.%s}}" % (task, name)


def output_if_succeeded(task: str, name: str) -> str:
    """A task's output, or '' when it did not run (a plain tag would not resolve)."""
    return "{{=tasks['%s'].status == 'Succeeded' ? tasks['%s'].outputs.parameters['%s'] : ''}}" % (task, task, name)


def task_status(task: str) -> str:
    return "{{tasks.%s.status}}" % task


def did_not_succeed(task: str) -> str:
    """Enhanced depends: the task ended Failed or Error (a retried task: its last attempt)."""
    return "%s.Failed || %s.Errored" % (task, task)


def step_output(step: str, name: str) -> str:
    return "{{steps.%s.outputs.parameters.%s}}" % (step, name)


def workflow_param(name: str) -> str:
    return "{{workflow.parameters.%s}}" % name


def equals(left: str, right: str) -> str:
    """A `when` comparison (govaluate): the tag is substituted before evaluation."""
    return "%s == %s" % (left, right)


def not_equals(left: str, right: str) -> str:
    """A `when` comparison (govaluate), as ``equals``."""
    return "%s != %s" % (left, right)


def succeeded(task: str) -> str:
    return "%s.Succeeded" % task


def succeeded_or_skipped(task: str) -> str:
    return "(%s.Succeeded || %s.Skipped)" % (task, task)


def done(task: str) -> str:
    """Finished without failing: ran, or was skipped by a switch (enhanced depends)."""
    return "(%s.Succeeded || %s.Skipped || %s.Omitted)" % (task, task, task)


def any_branch(tasks: list[str]) -> str:
    """All parents done and at least one ran: the merge after a switch."""
    if len(tasks) == 1:
        return succeeded(tasks[0])
    done_all = " && ".join(done(t) for t in tasks)
    return "%s && (%s)" % (done_all, " || ".join(succeeded(t) for t in tasks))
