"""The `argo-workflows` commands that act on a deployed workflow and its runs: `trigger`, `resume`,
`status`, `terminate`, `suspend`, `unsuspend`, `delete`, `list-workflow-templates`, `list-runs`.

They behave like Metaflow's own; run ids are `argo-<Workflow name>`. Only options and output
live here; the work is `mfargo.deploy`'s. `argo_cli` adds these to its group (COMMANDS).
Every failure is one line `mfargo: ...`, exit 1.
"""

from __future__ import annotations

import functools
import json
import sys

from metaflow._vendor import click


def _one_line(f):
    """Turn every expected failure of a command into `mfargo: ...` and exit 1."""
    from metaflow.exception import MetaflowException

    from mfargo.base.errors import UserError

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except (UserError, MetaflowException) as e:
            text = getattr(e, "message", None) or str(e)
            click.secho("mfargo: %s" % " ".join(text.split()), fg="red", err=True)
            sys.exit(1)

    return wrapper


def _target(obj):
    from mfargo import deploy

    return deploy.target(obj.flow.name, getattr(obj, "workflow_name_option", None))


def _trigger_command():
    from metaflow import parameters

    @parameters.add_custom_parameters(deploy_mode=False)
    @click.command(help="Start a run of the deployed workflow on Argo Workflows.")
    @click.option("--run-id-file", default=None, help="Write the id of the run to this file.")
    @click.option("--deployer-attribute-file", default=None, hidden=True,
                  help="Write the run's metadata and pathspec to this file (Metaflow's Deployer API).")
    @click.pass_obj
    @_one_line
    def trigger(obj, run_id_file=None, deployer_attribute_file=None, **kwargs):
        from metaflow.includefile import IncludeFile
        from metaflow.parameters import DelayedEvaluationParameter
        from metaflow.util import resolve_identity

        from mfargo import deploy, include_file

        target = _target(obj)
        params = {}
        for _, param in obj.flow._get_parameters():
            if param.IS_CONFIG_PARAMETER:
                continue
            value = kwargs.get(param.name.replace("-", "_").lower())
            if isinstance(param, IncludeFile) and isinstance(value, DelayedEvaluationParameter):
                # a local file, which Metaflow uploads when the value is read below
                include_file.check_reachable(obj, param.name)
            if value is not None:
                params[param.name] = deploy.parameter_string(param, value)
        run_id = deploy.trigger(target, params, resolve_identity())
        _say_run(obj, target, run_id, run_id_file, deployer_attribute_file)
        obj.echo("Workflow *%s* triggered on Argo Workflows (run-id *%s*)." % (target.name, run_id), bold=True)

    return trigger


@click.command(help="Resume a run on Argo Workflows: a new run clones the tasks that succeeded "
                    "(before STEP_TO_RERUN, if given) and runs the rest.")
@click.argument("step-to-rerun", required=False, default=None)
@click.option("--origin-run-id", required=True, help="The run to resume (argo-...); it must have ended.")
@click.option("--run-id-file", default=None, help="Write the id of the new run to this file.")
@click.option("--deployer-attribute-file", default=None, hidden=True,
              help="Write the run's metadata and pathspec to this file (Metaflow's Deployer API).")
@click.pass_obj
@_one_line
def resume(obj, origin_run_id, step_to_rerun=None, run_id_file=None, deployer_attribute_file=None):
    from metaflow.util import resolve_identity

    from mfargo import deploy

    if step_to_rerun is not None and step_to_rerun not in obj.graph:
        raise deploy.DeployError("STEP_TO_RERUN %r is not a step of %s" % (step_to_rerun, obj.flow.name))
    target = _target(obj)
    run_id = deploy.resume(target, origin_run_id, step_to_rerun or "", resolve_identity())
    _say_run(obj, target, run_id, run_id_file, deployer_attribute_file)
    obj.echo("Workflow *%s* resumed from *%s* on Argo Workflows (run-id *%s*)." % (target.name, origin_run_id, run_id),
             bold=True)


def _say_run(obj, target, run_id, run_id_file, deployer_attribute_file):
    """Where a started run's id goes: a file, and the Deployer API's attribute file."""
    if run_id_file:
        with open(run_id_file, "w") as f:
            f.write(run_id)
    if deployer_attribute_file:
        with open(deployer_attribute_file, "w") as f:
            json.dump({"name": target.name, "metadata": obj.metadata.metadata_str(),
                       "pathspec": "%s/%s" % (obj.flow.name, run_id)}, f)


@click.command(help="Print the status of a run on Argo Workflows.")
@click.argument("run-id", required=True, type=str)
@click.pass_obj
@_one_line
def status(obj, run_id):
    from mfargo import deploy

    click.echo(deploy.status(_target(obj), run_id))


def _run_command(verb: str, done: str, help_text: str):
    @click.command(name=verb, help=help_text)
    @click.option("--authorize", default=None, help="Authorize with the production token of the deployment.")
    @click.argument("run-id", required=True, type=str)
    @click.pass_obj
    @_one_line
    def command(obj, run_id, authorize=None):
        from mfargo import deploy

        target = _target(obj)
        name = deploy.checked_run(target, run_id, authorize, verb)
        if verb == "terminate":
            deploy.terminate(target, name, obj.echo)
        else:
            getattr(target.cluster, verb)(name)
        obj.echo("%s run *%s*." % (done, run_id), bold=True)

    return command


@click.command(help="Delete the deployed workflow (and its schedule and sensor) from Argo Workflows.")
@click.option("--authorize", default=None, help="Authorize the deletion with the production token.")
@click.pass_obj
@_one_line
def delete(obj, authorize=None):
    from mfargo import deploy

    deploy.delete(_target(obj), authorize, obj.echo)


@click.command(name="list-workflow-templates", help="List the flow's WorkflowTemplates on Argo Workflows.")
@click.option("--all", "all_", is_flag=True, default=False, help="List every WorkflowTemplate, not only this flow's.")
@click.pass_obj
@_one_line
def list_workflow_templates(obj, all_=False):
    from mfargo import deploy

    for name in deploy.list_templates(obj.flow.name, all_):
        click.echo(name)


@click.command(name="list-runs",
               help="List the runs of the deployed workflow on Argo Workflows, newest first: run id, status "
                    "(Argo's phase), start (UTC), duration (so far, for a run still going) and what started it "
                    "(manual, schedule, event, resume). The workflow is this flow's, named as `trigger` names it: "
                    "with @project, Metaflow's --branch or --production (before `argo-workflows`) picks the "
                    "branch's. Only runs still in the cluster are listed (a TTL, or `argo delete`, removes them).")
@click.option("--status", multiple=True, type=str, metavar="PHASE",
              help="Only runs in this phase: Pending, Running, Succeeded, Failed or Error (repeat for several).")
@click.option("--limit", default=100, type=int, show_default=True, metavar="N",
              help="At most this many runs (the newest).")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print a JSON list of objects (run_id, status, started_at, finished_at, duration, "
                   "duration_seconds, trigger) instead of the table.")
@click.option("--deployer-attribute-file", default=None, hidden=True,
              help="Write the runs, the flow and its metadata to this file (Metaflow's Deployer API).")
@click.pass_obj
@_one_line
def list_runs(obj, status=(), limit=100, as_json=False, deployer_attribute_file=None):
    from mfargo import deploy

    rows = deploy.list_runs(_target(obj), tuple(status), limit)
    if deployer_attribute_file:
        with open(deployer_attribute_file, "w") as f:
            json.dump({"flow": obj.flow.name, "metadata": obj.metadata.metadata_str(),
                       "runs": [r.as_json() for r in rows]}, f)
    if as_json:
        click.echo(json.dumps([r.as_json() for r in rows], indent=2))
    elif rows:
        from mfargo import runs

        click.echo(runs.table(rows))


COMMANDS = (
    _trigger_command(),
    resume,
    status,
    _run_command("terminate", "Terminated", "Terminate a run on Argo Workflows."),
    _run_command("suspend", "Suspended", "Suspend a run on Argo Workflows."),
    _run_command("unsuspend", "Unsuspended", "Resume a suspended run on Argo Workflows."),
    delete,
    list_workflow_templates,
    list_runs,
)
