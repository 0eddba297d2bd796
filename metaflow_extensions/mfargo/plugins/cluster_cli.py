"""The `argo-workflows` commands that talk to a cluster, and `create`'s deploy path.

`create` (without --only-yaml/--only-json/--output-file) deploys: `with_token` resolves the
production token before compiling, `finish` stamps the token/owner annotations on the
compiled documents and applies them. `trigger`, `status`, `terminate`, `suspend`,
`unsuspend`, `delete` and `list-workflow-templates` behave like Metaflow's own; run ids
are `argo-<Workflow name>`. Every failure is one line `mfargo: ...`, exit 1.
"""

from __future__ import annotations

import base64
import functools
import json
import sys
from dataclasses import replace
from hashlib import sha1

from metaflow._vendor import click

from mfargo.cluster import CRON_WORKFLOWS, SENSORS, WORKFLOW_TEMPLATES, Cluster, ClusterError, Resource

from .argo_cli import argo_workflows, create

OWNER = "metaflow/owner"
TOKEN = "metaflow/production_token"
FLOW_NAME = "metaflow/flow_name"
PROJECT_NAME = "metaflow/project_name"
BRANCH_NAME = "metaflow/branch_name"
PARAMETERS = "metaflow/parameters"
TRIGGERED_BY = "metaflow/triggered_by_user"
OBJECTS = "mfargo/objects"  # the bundle's other objects, so `delete` can remove them
RUN_PREFIX = "argo-"


class _Fail(Exception):
    """A user-facing error raised inside this module (printed as one line)."""


def _die(message) -> None:
    text = getattr(message, "message", None) or str(message)
    click.secho("mfargo: %s" % " ".join(text.split()), fg="red", err=True)
    sys.exit(1)


def _one_line(f):
    """Turn every expected failure of a command into `mfargo: ...` and exit 1."""
    from metaflow.exception import MetaflowException

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except (ClusterError, _Fail, MetaflowException) as e:
            _die(e)

    return wrapper


# -- what every command needs -----------------------------------------------------------


class Target:
    """The workflow this flow deploys to: its name, token prefix and namespace."""

    def __init__(self, obj):
        from metaflow import current
        from metaflow.metaflow_config import KUBERNETES_NAMESPACE

        from mfargo.compiler import naming

        option = getattr(obj, "workflow_name_option", None)
        self.flow_name = obj.flow.name
        self.project = current.get("project_name")
        self.branch = current.get("branch_name")
        if self.project:
            if option:
                raise _Fail("--name cannot be used with @project: the project names the workflow")
            name = current.get("project_flow_name")
            digest = base64.b32encode(sha1(("%s.%s" % (self.project, self.branch)).encode()).digest()).decode()
            self.token_prefix = ("mfprj-%s" % digest[:16]).lower()
        else:
            name = option or self.flow_name
            self.token_prefix = name.lower()  # the prefix Metaflow's own token store uses
        self.name = naming.workflow_template_name(name)
        self.namespace = KUBERNETES_NAMESPACE or "default"
        self.cluster = Cluster(self.namespace)

    def existing(self) -> dict | None:
        """The deployed WorkflowTemplate; an error if one exists that Metaflow did not make."""
        live = self.cluster.get(WORKFLOW_TEMPLATES, self.name)
        if live is not None and FLOW_NAME not in _annotations(live):
            raise _Fail(
                "a WorkflowTemplate named %s that was not deployed by Metaflow exists in namespace %s: "
                "delete it or choose another name with `argo-workflows --name`" % (self.name, self.namespace)
            )
        return live


def _annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _strip(token: str | None) -> str | None:
    if token and token.startswith("production:"):
        return token[len("production:"):]
    return token


def _authorized(target: Target, owner: str | None, token: str | None, authorize: str | None) -> bool:
    """Metaflow's rule: the previous deployer, or anyone holding the token."""
    from metaflow.plugins.aws.step_functions.production_token import load_token
    from metaflow.util import get_username

    if token is None:
        return True
    authorize = _strip(authorize) if authorize else load_token(target.token_prefix)
    return owner == get_username() or authorize == token


def _token_refusal(target: Target, owner, command: str) -> _Fail:
    return _Fail(
        "%s in namespace %s was deployed by %s with a production token you do not have; "
        "ask them for it and run `argo-workflows %s --authorize TOKEN`" % (target.name, target.namespace, owner, command)
    )


# -- create: token before compiling, deploy after ----------------------------------------

_CREATE_OPTIONS = (
    click.Option(["--authorize"], default=None,
                 help="Authorize this deployment with the production token of the deployed version "
                      "(cached in METAFLOW_HOME, so needed once)."),
    click.Option(["--generate-new-token"], is_flag=True, default=False,
                 help="Generate a new production token (moves the production flow to a new namespace)."),
    click.Option(["--new-token", "given_token"], default=None,
                 help="Use this production token (moves the production flow to its namespace)."),
    click.Option(["--deployer-attribute-file"], default=None, hidden=True,
                 help="Write the workflow name to this file (Metaflow's Deployer API)."),
)


def _extend_create() -> None:
    """Add the token options to `create` without touching its signature: the values are
    taken out of the call and kept on the context object for `with_token`/`finish`."""
    present = {p.name for p in create.params}
    added = [o for o in _CREATE_OPTIONS if o.name not in present]
    create.params.extend(added)
    names = {o.name for o in added}
    callback = create.callback

    @functools.wraps(callback)
    def with_extra(*args, **kwargs):
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        click.get_current_context().obj.mfargo_create = extra
        return callback(*args, **kwargs)

    create.callback = with_extra


_extend_create()


def with_token(obj, options, deploy: bool):
    """The compile options with the production token: resolved against the cluster when
    deploying; offline only when asked for (--new-token / --generate-new-token)."""
    from metaflow.exception import MetaflowException

    extra = getattr(obj, "mfargo_create", {})
    try:
        target = Target(obj)
        if deploy:
            live = target.existing()
            token = _resolve_token(target, live, extra)
            obj.mfargo_deploy = (target, live, token)
        else:
            token = _offline_token(target, extra)
    except (ClusterError, _Fail, MetaflowException) as e:
        _die(e)
    return replace(options, production_token=token) if token else options


def _resolve_token(target: Target, live: dict | None, extra: dict) -> str:
    from metaflow.plugins.aws.step_functions.production_token import new_token

    ann = _annotations(live) if live else {}
    prev_owner, prev_token = ann.get(OWNER), ann.get(TOKEN)
    if not _authorized(target, prev_owner, prev_token, extra.get("authorize")):
        raise _token_refusal(target, prev_owner, "create")
    given = _strip(extra.get("given_token"))
    if given:
        if target.project:
            raise _Fail("--new-token cannot be used with @project; use --generate-new-token")
        return given
    if prev_token is None or extra.get("generate_new_token"):
        token = new_token(target.token_prefix, prev_token)
        if token is None:
            raise _Fail("--generate-new-token cannot follow a token given with --new-token; use --new-token")
        return token
    return prev_token


def _offline_token(target: Target, extra: dict) -> str | None:
    from metaflow.plugins.aws.step_functions.production_token import new_token

    given = _strip(extra.get("given_token"))
    if given:
        if target.project:
            raise _Fail("--new-token cannot be used with @project; use --generate-new-token")
        return given
    if extra.get("generate_new_token"):
        return new_token(target.token_prefix, None)
    return None


def finish(obj, docs: list[dict], deploy: bool, only_json: bool = False) -> list[dict]:
    """After compiling: stamp the token; when deploying, apply every document; write the
    Deployer's attribute file. Returns the documents (for --only-yaml/--output-file)."""
    from metaflow.exception import MetaflowException

    extra = getattr(obj, "mfargo_create", {})
    try:
        template = docs[0]
        token = None
        if deploy:
            target, live, token = obj.mfargo_deploy
            if template["metadata"]["name"] != target.name:
                raise _Fail("compiled template %s but resolved %s (a bug in mfargo)"
                            % (template["metadata"]["name"], target.name))
            _stamp(obj, target, docs, token)
            _deploy(obj, target, live, docs, token)
        else:
            token = _offline_token(Target(obj), extra)
            if token:
                _stamp_token(template, token)
    except (ClusterError, _Fail, MetaflowException) as e:
        _die(e)
    if extra.get("deployer_attribute_file"):
        payload = {"name": docs[0]["metadata"]["name"], "flow_name": obj.flow.name,
                   "metadata": obj.metadata.metadata_str()}
        if only_json:
            payload["additional_info"] = {"workflow_template": docs[0]}
        with open(extra["deployer_attribute_file"], "w", encoding="utf-8") as f:
            json.dump(payload, f)
    return docs


def _stamp_token(template: dict, token: str) -> None:
    template["metadata"].setdefault("annotations", {})[TOKEN] = token
    wf_meta = template["spec"].setdefault("workflowMetadata", {})
    wf_meta.setdefault("annotations", {})[TOKEN] = token


def _stamp(obj, target: Target, docs: list[dict], token: str) -> None:
    """Deploy-only annotations: who deployed with which token (also on every run, for
    terminate/suspend checks), the Parameters (for Deployer.from_deployment), the bundle."""
    from metaflow.util import get_username

    template = docs[0]
    run_ann = {OWNER: get_username() or "unknown", TOKEN: token, FLOW_NAME: obj.flow.name}
    if target.project:
        run_ann[PROJECT_NAME] = target.project
        run_ann[BRANCH_NAME] = target.branch
    ann = template["metadata"].setdefault("annotations", {})
    ann.update(run_ann)
    ann[PARAMETERS] = json.dumps(_parameter_info(obj.flow), sort_keys=True)
    others = [
        {"apiVersion": d["apiVersion"], "kind": d["kind"], "name": d["metadata"]["name"],
         "namespace": d["metadata"].get("namespace") or target.namespace}
        for d in docs[1:]
        if d["kind"] != "Workflow"
    ]
    if others:
        ann[OBJECTS] = json.dumps(others, sort_keys=True)
    wf_meta = template["spec"].setdefault("workflowMetadata", {})
    wf_meta.setdefault("annotations", {}).update(run_ann)


def _parameter_info(flow) -> dict:
    """What Metaflow's `metaflow/parameters` annotation holds (Deployer.from_deployment reads it)."""
    out = {}
    for var, param in flow._get_parameters():
        if param.IS_CONFIG_PARAMETER:
            continue
        kind = param.kwargs.get("type")
        type_name = getattr(kind, "name", None) or getattr(kind, "__name__", None)
        if type_name is None:
            default = param.kwargs.get("default")
            type_name = type(default).__name__ if default is not None and not callable(default) else "str"
        out[param.name] = {
            "python_var_name": var,
            "name": param.name,
            "type": type_name,
            "description": param.kwargs.get("help"),
            "is_required": bool(param.kwargs.get("required", False)),
        }
    return out


def _deploy(obj, target: Target, live: dict | None, docs: list[dict], token: str) -> None:
    from metaflow.plugins.aws.step_functions.production_token import store_token

    cluster = target.cluster
    obj.echo("Deploying *%s* to Argo Workflows in namespace *%s*..." % (target.name, target.namespace), bold=True)
    for doc in docs:
        if doc["kind"] == "Workflow" and not doc["metadata"].get("name"):
            continue  # --workflow: a run, started below once everything it needs exists
        action = cluster.apply(doc)
        obj.echo("%s %s *%s*" % (action.capitalize(), doc["kind"], doc["metadata"]["name"]))
    for doc in docs:
        if doc["kind"] == "Workflow" and not doc["metadata"].get("name"):
            created = cluster.create(Resource.of(doc), doc, doc["metadata"].get("namespace"))
            obj.echo("Started run *%s%s*" % (RUN_PREFIX, created["metadata"]["name"]))
    _remove_stale(obj, target, live, docs)
    store_token(target.token_prefix, token)
    obj.echo("")
    obj.echo("The namespace of this production flow is")
    obj.echo("    production:%s" % token, fg="green")
    obj.echo("To analyze results of this production flow add this line in your notebooks:")
    obj.echo('    namespace("production:%s")' % token, fg="green")
    obj.echo("If you want to authorize other people to deploy new versions of this flow to "
             "Argo Workflows, they need to call")
    obj.echo("    argo-workflows create --authorize %s" % token, fg="green")
    obj.echo("")
    obj.echo("Workflow *%s* for flow *%s* deployed to Argo Workflows successfully." % (target.name, obj.flow.name),
             bold=True)


def _remove_stale(obj, target: Target, live: dict | None, docs: list[dict]) -> None:
    """Objects of the previous deployment the new bundle no longer has (a schedule or a
    sensor removed from the flow must stop starting runs)."""
    kept = {(d["kind"], d["metadata"].get("name"), d["metadata"].get("namespace") or target.namespace) for d in docs}
    if ("CronWorkflow", target.name, target.namespace) not in kept:
        if target.cluster.delete(CRON_WORKFLOWS, target.name):
            obj.echo("Deleted the previous CronWorkflow *%s*" % target.name)
    if live is None:
        return
    ann = _annotations(live)
    stale = list(_recorded_objects(live))
    if ann.get("metaflow/sensor_name"):
        stale.append({"apiVersion": "argoproj.io/v1alpha1", "kind": "Sensor", "name": ann["metaflow/sensor_name"],
                      "namespace": ann.get("metaflow/sensor_namespace") or target.namespace})
    for ref in stale:
        if (ref["kind"], ref["name"], ref.get("namespace") or target.namespace) not in kept:
            if target.cluster.delete(Resource.of(ref), ref["name"], ref.get("namespace")):
                obj.echo("Deleted the previous %s *%s*" % (ref["kind"], ref["name"]))


def _recorded_objects(template: dict) -> list[dict]:
    try:
        return list(json.loads(_annotations(template).get(OBJECTS) or "[]"))
    except ValueError:
        return []


# -- runs ----------------------------------------------------------------------------------


def _workflow_name(run_id: str) -> str:
    if not run_id.startswith(RUN_PREFIX) or len(run_id) == len(RUN_PREFIX):
        raise _Fail("run ids of flows run on Argo Workflows begin with 'argo-' (got %r)" % run_id)
    return run_id[len(RUN_PREFIX):]


def _checked_run(target: Target, run_id: str, authorize: str | None, command: str) -> str:
    """The Workflow name of ``run_id`` once it is known to be this flow's and ours to change."""
    from metaflow import current

    name = _workflow_name(run_id)
    wf = target.cluster.get_workflow(name)
    if wf is None:
        raise _Fail("no run %s in namespace %s" % (run_id, target.namespace))
    ann = _annotations(wf)
    flow = ann.get(FLOW_NAME)
    if flow is not None and flow != target.flow_name:
        raise _Fail("run %s belongs to flow %s, not %s" % (run_id, flow, target.flow_name))
    if ann.get(PROJECT_NAME) is not None:
        if current.get("project_name") != ann[PROJECT_NAME]:
            raise _Fail("run %s belongs to project %s; use @project or --name to target it"
                        % (run_id, ann[PROJECT_NAME]))
        if current.get("branch_name") != ann.get(BRANCH_NAME):
            raise _Fail("run %s belongs to branch %s; use --branch or --production to target it"
                        % (run_id, ann.get(BRANCH_NAME)))
    if not _authorized(target, ann.get(OWNER), ann.get(TOKEN), authorize):
        raise _Fail("run %s was started by a deployment of %s with a production token you do not have; "
                    "ask for it and run `argo-workflows %s --authorize TOKEN %s`"
                    % (run_id, ann.get(OWNER), command, run_id))
    return name


def _parameter_string(param, value) -> str:
    """The string `python flow.py run --x VALUE` takes: what the compiled template expects."""
    from metaflow.parameters import DelayedEvaluationParameter

    if isinstance(value, DelayedEvaluationParameter):
        value = value(return_str=True)
    if getattr(param.kwargs.get("type"), "name", None) == "JSON" and not isinstance(value, str):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _trigger_command():
    from metaflow import parameters

    @parameters.add_custom_parameters(deploy_mode=False)
    @argo_workflows.command(help="Start a run of the deployed workflow on Argo Workflows.")
    @click.option("--run-id-file", default=None, help="Write the id of the run to this file.")
    @click.option("--deployer-attribute-file", default=None, hidden=True,
                  help="Write the run's metadata and pathspec to this file (Metaflow's Deployer API).")
    @click.pass_obj
    @_one_line
    def trigger(obj, run_id_file=None, deployer_attribute_file=None, **kwargs):
        from metaflow.util import resolve_identity

        target = Target(obj)
        params = {}
        for _, param in obj.flow._get_parameters():
            if param.IS_CONFIG_PARAMETER:
                continue
            value = kwargs.get(param.name.replace("-", "_").lower())
            if value is not None:
                params[param.name] = _parameter_string(param, value)
        live = target.existing()
        if live is None:
            raise _Fail("workflow %s is not deployed in namespace %s: run `argo-workflows create` first"
                        % (target.name, target.namespace))
        kind, _, who = resolve_identity().partition(":")
        created = target.cluster.submit(
            target.name, params, annotations={TRIGGERED_BY: json.dumps({"type": kind, "name": who or "unknown"})}
        )
        run_id = RUN_PREFIX + created["metadata"]["name"]
        if run_id_file:
            with open(run_id_file, "w") as f:
                f.write(run_id)
        if deployer_attribute_file:
            with open(deployer_attribute_file, "w") as f:
                json.dump({"name": target.name, "metadata": obj.metadata.metadata_str(),
                           "pathspec": "%s/%s" % (obj.flow.name, run_id)}, f)
        obj.echo("Workflow *%s* triggered on Argo Workflows (run-id *%s*)." % (target.name, run_id), bold=True)

    return trigger


trigger = _trigger_command()


def remap_status(phase: str | None, has_run: bool) -> str:
    """Argo's phase as Metaflow reports it: Error -> Failed; running before Metaflow knows the run -> Pending."""
    if not phase:
        return "Pending"
    phase = {"Error": "Failed"}.get(phase, phase)
    if phase == "Running" and not has_run:
        return "Pending"
    return phase


def _has_run(pathspec: str) -> bool:
    try:
        from metaflow import Run

        Run(pathspec, _namespace_check=False)
        return True
    except Exception:  # noqa: BLE001 - no run yet, or the metadata service is unreachable
        return False


@argo_workflows.command(help="Print the status of a run on Argo Workflows.")
@click.argument("run-id", required=True, type=str)
@click.pass_obj
@_one_line
def status(obj, run_id):
    target = Target(obj)
    name = _workflow_name(run_id)
    wf = target.cluster.get_workflow(name)
    if wf is None:
        raise _Fail("no run %s in namespace %s" % (run_id, target.namespace))
    phase = (wf.get("status") or {}).get("phase")
    has_run = phase == "Running" and _has_run("%s/%s" % (obj.flow.name, run_id))
    click.echo(remap_status(phase, has_run))


def _run_command(verb: str, done: str, help_text: str):
    @argo_workflows.command(name=verb, help=help_text)
    @click.option("--authorize", default=None, help="Authorize with the production token of the deployment.")
    @click.argument("run-id", required=True, type=str)
    @click.pass_obj
    @_one_line
    def command(obj, run_id, authorize=None):
        target = Target(obj)
        name = _checked_run(target, run_id, authorize, verb)
        getattr(target.cluster, verb)(name)
        obj.echo("%s run *%s*." % (done, run_id), bold=True)

    return command


terminate = _run_command("terminate", "Terminated", "Terminate a run on Argo Workflows.")
suspend = _run_command("suspend", "Suspended", "Suspend a run on Argo Workflows.")
unsuspend = _run_command("unsuspend", "Unsuspended", "Resume a suspended run on Argo Workflows.")


@argo_workflows.command(help="Delete the deployed workflow (and its schedule and sensor) from Argo Workflows.")
@click.option("--authorize", default=None, help="Authorize the deletion with the production token.")
@click.pass_obj
@_one_line
def delete(obj, authorize=None):
    from metaflow.plugins.aws.step_functions.production_token import store_token

    target = Target(obj)
    live = target.existing()
    ann = _annotations(live) if live else {}
    if not _authorized(target, ann.get(OWNER), ann.get(TOKEN), authorize):
        raise _token_refusal(target, ann.get(OWNER), "delete")
    cluster = target.cluster
    obj.echo("Deleting workflow *%s*..." % target.name, bold=True)
    if cluster.delete(CRON_WORKFLOWS, target.name):
        obj.echo("Deleted CronWorkflow *%s*" % target.name)
    sensor = ann.get("metaflow/sensor_name") or target.name.replace(".", "-")
    if cluster.delete(SENSORS, sensor, ann.get("metaflow/sensor_namespace")):
        obj.echo("Deleted Sensor *%s*" % sensor)
    for ref in _recorded_objects(live or {}):
        if cluster.delete(Resource.of(ref), ref["name"], ref.get("namespace")):
            obj.echo("Deleted %s *%s*" % (ref["kind"], ref["name"]))
    if not cluster.delete(WORKFLOW_TEMPLATES, target.name):
        raise _Fail("workflow %s does not exist in namespace %s" % (target.name, target.namespace))
    if ann.get(TOKEN):
        store_token(target.token_prefix, ann[TOKEN])
    obj.echo("Deleted WorkflowTemplate *%s*. Runs in flight are not affected; terminate them if needed."
             % target.name)


@argo_workflows.command(name="list-workflow-templates", help="List the flow's WorkflowTemplates on Argo Workflows.")
@click.option("--all", "all_", is_flag=True, default=False, help="List every WorkflowTemplate, not only this flow's.")
@click.pass_obj
@_one_line
def list_workflow_templates(obj, all_=False):
    from metaflow.metaflow_config import KUBERNETES_NAMESPACE

    cluster = Cluster(KUBERNETES_NAMESPACE or "default")
    for template in cluster.list(WORKFLOW_TEMPLATES):
        if all_ or _annotations(template).get(FLOW_NAME) == obj.flow.name:
            click.echo(template["metadata"]["name"])
