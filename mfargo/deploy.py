"""Deploying compiled documents and acting on deployed workflows: what every front end calls.

The Metaflow plugin's commands (`argo-workflows create/trigger/status/...`) only declare
options and call these. Imported only when a command talks to a cluster, so offline
compiles never load the kubernetes client. Failures are `DeployError` / `ClusterError`
(one line each); tokens follow `mfargo.tokens`; names come from `compiler.naming`.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from metaflow_extensions.mfargo.plugins import pod_contract as contract
from mfargo import owners, runs, tokens
from mfargo.cluster import (CRON_WORKFLOWS, JOBSETS, SENSORS, WORKFLOW_TEMPLATES, Cluster,
                            ClusterError, Resource, connect)
from mfargo.compiler import naming
from mfargo.compiler.constants import Api, Label
from mfargo.base.errors import UserError

Echo = Callable[..., None]  # Metaflow's obj.echo(text, bold=..., fg=...)


class DeployError(UserError):
    """A user-facing refusal (printed as one line)."""


@dataclass
class Target:
    """The workflow a flow deploys to: its name, token-store key, namespace and cluster."""

    flow_name: str
    name: str
    token_prefix: str
    namespace: str
    project: str | None = None
    branch: str | None = None
    replace_other: bool = False  # `create --replace-other`: may replace another flow's/branch's objects
    _cluster: Cluster | None = field(default=None, repr=False)

    @property
    def cluster(self) -> Cluster:
        """The Kubernetes API, or Argo Server when ARGO_SERVER is set (``cluster.connect``)."""
        if self._cluster is None:
            self._cluster = connect(self.namespace)
        return self._cluster

    def existing(self) -> dict | None:
        """The deployed WorkflowTemplate; an error if one exists that Metaflow did not make."""
        live = self.cluster.get(WORKFLOW_TEMPLATES, self.name)
        if live is not None and Label.FLOW_NAME not in annotations(live) and not self.replace_other:
            raise owners.not_metaflow(self.name, self.namespace)
        return live


def target(flow_name: str, name_option: str | None) -> Target:
    """The target of the flow being run (Metaflow's `current` holds @project's names)."""
    from metaflow import current
    from metaflow.metaflow_config import KUBERNETES_NAMESPACE

    project, branch = current.get("project_name"), current.get("branch_name")
    if project and name_option:
        raise DeployError("--name cannot be used with @project: the project names the workflow")
    project_flow = current.get("project_flow_name") if project else None
    return Target(
        flow_name=flow_name,
        name=naming.deployed_name(name_option, project_flow, flow_name),
        token_prefix=tokens.token_prefix(name_option or flow_name, project, branch),
        namespace=KUBERNETES_NAMESPACE or "default",
        project=project,
        branch=branch,
    )


def annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def authorized(target: Target, deployed: dict, my_token: str | None) -> bool:
    """May the current user change what carries these annotations?"""
    from metaflow.plugins.aws.step_functions.production_token import load_token
    from metaflow.util import get_username

    token = deployed.get(Label.PRODUCTION_TOKEN)
    if token is None:
        return True
    mine = tokens.strip(my_token) if my_token else load_token(target.token_prefix)
    return tokens.authorized(token, deployed.get(Label.OWNER), get_username(), mine)


def token_refusal(target: Target, owner: str | None, command: str) -> DeployError:
    return DeployError(
        "%s in namespace %s was deployed by %s with a production token you do not have; "
        "ask them for it and run `argo-workflows %s --authorize TOKEN`" % (target.name, target.namespace, owner, command)
    )


# -- create -----------------------------------------------------------------------------


@dataclass
class TokenRequest:
    """`create`'s token options."""

    authorize: str | None = None
    given: str | None = None
    generate: bool = False


def _new_token(target: Target) -> Callable[[str | None], str | None]:
    from metaflow.plugins.aws.step_functions.production_token import new_token

    return lambda previous: new_token(target.token_prefix, previous)


def deploy_token(target: Target, live: dict | None, request: TokenRequest) -> str:
    """Checked against the deployed template before compiling: refuse early, compile once."""
    check_owner(target, "WorkflowTemplate", live)
    ann = annotations(live) if live else {}
    if not authorized(target, ann, request.authorize):
        raise token_refusal(target, ann.get(Label.OWNER), "create")
    # Replacing another flow's/branch's deployment (--replace-other) does not inherit its token.
    previous = ann.get(Label.PRODUCTION_TOKEN) if owners.owner_of(live or {}) == my_owner(target) else None
    return tokens.deploy_token(previous, request.given, request.generate, target.project, _new_token(target))


def offline_token(target: Target, request: TokenRequest) -> str | None:
    return tokens.offline_token(request.given, request.generate, target.project, _new_token(target))


def stamp_token(template: dict, token: str) -> None:
    """The token on the template and on every run it starts."""
    template["metadata"].setdefault("annotations", {})[Label.PRODUCTION_TOKEN] = token
    wf_meta = template["spec"].setdefault("workflowMetadata", {})
    wf_meta.setdefault("annotations", {})[Label.PRODUCTION_TOKEN] = token


def stamp_deployment(target: Target, docs: list[dict], token: str, parameters: dict) -> None:
    """Deploy-only annotations: who deployed with which token (also on every run, for
    terminate/suspend checks), the Parameters (for Deployer.from_deployment), the bundle."""
    from metaflow.util import get_username

    template = docs[0]
    run_ann = {Label.OWNER: get_username() or "unknown", Label.PRODUCTION_TOKEN: token,
               Label.FLOW_NAME: target.flow_name}
    if target.project:
        run_ann[Label.PROJECT_NAME] = target.project
        run_ann[Label.BRANCH_NAME] = target.branch
    ann = template["metadata"].setdefault("annotations", {})
    ann.update(run_ann)
    ann[Label.PARAMETERS] = json.dumps(parameters, sort_keys=True)
    others = [
        {"apiVersion": d["apiVersion"], "kind": d["kind"], "name": d["metadata"]["name"],
         "namespace": d["metadata"].get("namespace") or target.namespace}
        for d in docs[1:]
        if d["kind"] != "Workflow"
    ]
    if others:
        ann[Label.BUNDLE_OBJECTS] = json.dumps(others, sort_keys=True)
    wf_meta = template["spec"].setdefault("workflowMetadata", {})
    wf_meta.setdefault("annotations", {}).update(run_ann)
    owner = {k: v for k, v in run_ann.items() if k in owners.KEYS}
    for doc in docs[1:]:  # whose each object is: `create` reads it before replacing (mfargo.owners)
        if doc["kind"] != "Workflow":
            doc["metadata"].setdefault("annotations", {}).update(owner)


def apply(target: Target, live: dict | None, docs: list[dict], token: str, echo: Echo) -> None:
    """Apply the bundle all or nothing (``mfargo.transaction``), start the --workflow run,
    store the token, then have Argo check a new schedule again (``mfargo.cron_recheck``)."""
    from metaflow.plugins.aws.step_functions.production_token import store_token

    from mfargo import cron_recheck, transaction

    if docs[0]["metadata"]["name"] != target.name:
        raise DeployError("compiled template %s but resolved %s (a bug in mfargo)" % (docs[0]["metadata"]["name"],
                                                                                     target.name))
    docs = _carried(target, docs, echo)
    check_prerequisites(target, docs, echo)
    plan = transaction.plan(target.cluster, docs, _stale_refs(target, live, docs), target.namespace,
                            lambda kind, obj: check_owner(target, kind, obj))
    echo("Deploying *%s* to Argo Workflows in namespace *%s*..." % (target.name, target.namespace), bold=True)
    done = transaction.run(target.cluster, plan, target.name, echo)
    store_token(target.token_prefix, token)  # before the recheck's wait: the deploy is done
    cron_recheck.recheck(target.cluster, done, echo)
    echo("")
    echo("The namespace of this production flow is")
    echo("    production:%s" % token, fg="green")
    echo("To analyze results of this production flow add this line in your notebooks:")
    echo('    namespace("production:%s")' % token, fg="green")
    echo("If you want to authorize other people to deploy new versions of this flow to "
         "Argo Workflows, they need to call")
    echo("    argo-workflows create --authorize %s" % token, fg="green")
    echo("")
    echo("Workflow *%s* for flow *%s* deployed to Argo Workflows successfully." % (target.name, target.flow_name),
         bold=True)


def _carried(target: Target, docs: list[dict], echo: Echo) -> list[dict]:
    """The documents this client can write; those it cannot (through Argo Server: a gang's Role
    and RoleBinding, the concurrency ConfigMap) are named in one line, for an admin to create."""
    left = [d for d in docs if not target.cluster.carries(d["kind"])]
    if left:
        echo("mfargo: warning: Argo Server cannot create %s: an admin creates them in namespace %s through the "
             "Kubernetes API (`argo-workflows create --only-yaml` prints them)"
             % (", ".join("%s %s" % (d["kind"], d["metadata"]["name"]) for d in left), target.namespace),
             fg="yellow")
    return [d for d in docs if target.cluster.carries(d["kind"])]


def check_prerequisites(target: Target, docs: list[dict], echo: Echo) -> None:
    """Before anything is created: every object the documents need exists
    (``mfargo.cluster_needs``), else one error naming each missing one. What the user may
    not read (403) is named in a warning and not held against the deploy."""
    from mfargo import cluster_needs

    missing, unchecked = cluster_needs.unmet(target.cluster, docs, target.namespace)
    if unchecked:
        echo("mfargo: warning: %s: %s" % (target.cluster.UNCHECKED, "; ".join(unchecked)), fg="yellow")
    if missing:
        raise DeployError("nothing deployed: the cluster lacks what the workflow needs: %s" % "; ".join(missing))
    for warning in cluster_needs.node_warnings(target.cluster, docs):
        echo("mfargo: warning: %s" % warning, fg="yellow")


def check_owner(target: Target, kind: str, live: dict | None) -> None:
    """``mfargo.owners.check`` for this target (``--replace-other``: ``target.replace_other``)."""
    owners.check(kind, live, my_owner(target), target.namespace, target.replace_other)


def my_owner(target: Target) -> owners.Owner:
    return owners.owner(target.flow_name, target.project, target.branch)


def _stale_refs(target: Target, live: dict | None, docs: list[dict]) -> list[dict]:
    """Objects of the previous deployment the new bundle no longer has (a schedule or a
    sensor removed from the flow must stop starting runs)."""
    kept = {(d["kind"], d["metadata"].get("name"), d["metadata"].get("namespace") or target.namespace) for d in docs}
    refs = [{"apiVersion": Api.ARGO, "kind": "CronWorkflow", "name": target.name, "namespace": target.namespace}]
    if live is not None:
        ann = annotations(live)
        refs += _recorded_objects(live)
        if ann.get(Label.SENSOR_NAME):
            refs.append({"apiVersion": Api.ARGO, "kind": "Sensor", "name": ann[Label.SENSOR_NAME],
                         "namespace": ann.get(Label.SENSOR_NAMESPACE) or target.namespace})
    out, seen = [], set()
    for ref in (r for r in refs if target.cluster.carries(r["kind"])):
        key = (ref["kind"], ref["name"], ref.get("namespace") or target.namespace)
        if key not in kept and key not in seen:
            seen.add(key)
            out.append(dict(ref, namespace=key[2]))
    return out


def _recorded_objects(template: dict) -> list[dict]:
    try:
        return list(json.loads(annotations(template).get(Label.BUNDLE_OBJECTS) or "[]"))
    except ValueError:
        return []


def delete(target: Target, authorize: str | None, echo: Echo) -> None:
    """The template, its schedule, its sensor and the bundle's other objects."""
    from metaflow.plugins.aws.step_functions.production_token import store_token

    live = target.existing()
    ann = annotations(live) if live else {}
    if not authorized(target, ann, authorize):
        raise token_refusal(target, ann.get(Label.OWNER), "delete")
    cluster = target.cluster
    echo("Deleting workflow *%s*..." % target.name, bold=True)
    if cluster.delete(CRON_WORKFLOWS, target.name):
        echo("Deleted CronWorkflow *%s*" % target.name)
    sensor = ann.get(Label.SENSOR_NAME) or naming.sensor_name(target.name)
    if cluster.delete(SENSORS, sensor, ann.get(Label.SENSOR_NAMESPACE)):
        echo("Deleted Sensor *%s*" % sensor)
    left = []
    for ref in _recorded_objects(live or {}):
        if not cluster.carries(ref["kind"]):
            left.append("%s %s" % (ref["kind"], ref["name"]))
        elif cluster.delete(Resource.of(ref), ref["name"], ref.get("namespace")):
            echo("Deleted %s *%s*" % (ref["kind"], ref["name"]))
    if left:
        echo("mfargo: warning: Argo Server cannot delete %s: an admin deletes them through the Kubernetes API"
             % ", ".join(left), fg="yellow")
    if not cluster.delete(WORKFLOW_TEMPLATES, target.name):
        raise DeployError("workflow %s does not exist in namespace %s" % (target.name, target.namespace))
    if ann.get(Label.PRODUCTION_TOKEN):
        store_token(target.token_prefix, ann[Label.PRODUCTION_TOKEN])
    echo("Deleted WorkflowTemplate *%s*. Runs in flight are not affected; terminate them if needed." % target.name)


def list_templates(flow_name: str, every: bool) -> list[str]:
    from metaflow.metaflow_config import KUBERNETES_NAMESPACE

    cluster = connect(KUBERNETES_NAMESPACE or "default")
    return [t["metadata"]["name"] for t in cluster.list(WORKFLOW_TEMPLATES)
            if every or annotations(t).get(Label.FLOW_NAME) == flow_name]


# -- runs ----------------------------------------------------------------------------------


def workflow_name(run_id: str) -> str:
    """The Argo Workflow behind a Metaflow run id (`argo-<Workflow name>`)."""
    prefix = naming.RUN_ID_PREFIX
    if not run_id.startswith(prefix) or len(run_id) == len(prefix):
        raise DeployError("run ids of flows run on Argo Workflows begin with '%s' (got %r)" % (prefix, run_id))
    return run_id[len(prefix):]


def trigger(target: Target, parameters: dict[str, str], identity: str) -> str:
    """Submit a run of the deployed template; returns its Metaflow run id."""
    _require_deployed(target)
    return _submit(target, parameters, identity)


def _require_deployed(target: Target) -> None:
    if target.existing() is None:
        raise DeployError("workflow %s is not deployed in namespace %s: run `argo-workflows create` first"
                          % (target.name, target.namespace))


def _submit(target: Target, parameters: dict[str, str], identity: str) -> str:
    """A Workflow of the template, annotated with who started it; its Metaflow run id."""
    kind, _, who = identity.partition(":")
    created = target.cluster.submit(
        target.name, parameters,
        annotations={Label.TRIGGERED_BY: json.dumps({"type": kind, "name": who or "unknown"})},
        # What Argo 4.1+ labels it with anyway; `list-runs` finds it by it on older Argo too.
        labels={Label.WORKFLOW_TEMPLATE: target.name},
    )
    return naming.run_id(created["metadata"]["name"])


def resume(target: Target, origin_run_id: str, step: str, identity: str) -> str:
    """Submit a run that resumes ``origin_run_id`` (plugins/resume.py); returns its run id.

    The origin must be an ended run of this deployed template: its tasks are cloned by id,
    and a run still going would be cloned half-way. Its Parameters are the new run's
    (Metaflow's rule: the pods clone its ``_parameters`` task); they are passed again only
    so that Argo shows them."""
    _require_deployed(target)
    wf = _owned_run(target, origin_run_id)
    made_by = ((wf.get("spec") or {}).get("workflowTemplateRef") or {}).get("name")
    if made_by != target.name:
        raise DeployError("run %s is not a run of the workflow %s (it was started from %s)"
                          % (origin_run_id, target.name, made_by or "no WorkflowTemplate"))
    phase = (wf.get("status") or {}).get("phase")
    if phase in (None, "", "Pending", "Running"):
        raise DeployError("run %s has not ended: resume it once it has (`argo-workflows terminate %s` ends it)"
                          % (origin_run_id, origin_run_id))
    given = ((wf.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    resume_parameters = {contract.ORIGIN_RUN_PARAMETER: origin_run_id, contract.RESUME_STEP_PARAMETER: step}
    parameters = {p["name"]: p["value"] for p in given if "value" in p and p["name"] not in resume_parameters}
    return _submit(target, {**parameters, **resume_parameters}, identity)


def _owned_run(target: Target, run_id: str) -> dict:
    """The Workflow of ``run_id``, once it is known to be a run of this flow, project and branch."""
    wf = target.cluster.get_workflow(workflow_name(run_id))
    if wf is None:
        raise DeployError("no run %s in namespace %s" % (run_id, target.namespace))
    ann = annotations(wf)
    flow = ann.get(Label.FLOW_NAME)
    if flow is not None and flow != target.flow_name:
        raise DeployError("run %s belongs to flow %s, not %s" % (run_id, flow, target.flow_name))
    if ann.get(Label.PROJECT_NAME) is not None:
        if target.project != ann[Label.PROJECT_NAME]:
            raise DeployError("run %s belongs to project %s; use @project or --name to target it"
                              % (run_id, ann[Label.PROJECT_NAME]))
        if target.branch != ann.get(Label.BRANCH_NAME):
            raise DeployError("run %s belongs to branch %s; use --branch or --production to target it"
                              % (run_id, ann.get(Label.BRANCH_NAME)))
    return wf


def checked_run(target: Target, run_id: str, authorize: str | None, command: str) -> str:
    """The Workflow name of ``run_id`` once it is known to be this flow's and ours to change."""
    name = workflow_name(run_id)
    ann = annotations(_owned_run(target, run_id))
    if not authorized(target, ann, authorize):
        raise DeployError("run %s was started by a deployment of %s with a production token you do not have; "
                          "ask for it and run `argo-workflows %s --authorize TOKEN %s`"
                          % (run_id, ann.get(Label.OWNER), command, run_id))
    return name


STOP_WAIT_SECONDS = 60  # for a terminated run to stop, before the gangs it made are deleted
STOP_POLL_SECONDS = 1


def terminate(target: Target, name: str, echo: Callable[[str], Any]) -> None:
    """Terminate the run, then delete the JobSets its gang steps made. Argo stops a
    terminated run's pods but not the objects its resource steps created: a gang would keep
    its pods (and their nodes) until the run is deleted. Waits (bounded) for the run to
    stop first, so that no step creates a JobSet after the sweep."""
    wf = target.cluster.terminate(name)
    if not target.cluster.carries("JobSet"):  # through Argo Server: no sweep, so nothing to wait for
        if _has_gangs(wf):
            echo("Run argo-%s is terminated; its gangs' JobSets stay until the run is deleted (Argo Server cannot "
                 "delete them: `argo delete %s` does)." % (name, name))
        return
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while not (wf.get("status") or {}).get("finishedAt") and time.monotonic() < deadline:
        time.sleep(STOP_POLL_SECONDS)
        wf = target.cluster.get_workflow(name) or wf
    stopped = bool((wf.get("status") or {}).get("finishedAt"))
    uid = wf["metadata"]["uid"]
    try:
        gangs = sorted(js["metadata"]["name"] for js in target.cluster.list(JOBSETS)
                       if any(o.get("uid") == uid for o in js["metadata"].get("ownerReferences") or ()))
        for gang in gangs:
            target.cluster.delete(JOBSETS, gang)
    except ClusterError as e:
        if e.status == 404:  # no JobSet API on this cluster: no gang to stop
            return
        echo("Run argo-%s is terminated, but its gangs' JobSets were not deleted (they stay until the run is "
             "deleted): %s" % (name, e))
        return
    if gangs:
        echo("Deleted the run's JobSets %s (their pods with them)." % ", ".join(gangs))
    if not stopped:
        echo("Run argo-%s was still stopping after %d s: a JobSet it creates from now on stays until the run "
             "is deleted." % (name, STOP_WAIT_SECONDS))


def _has_gangs(wf: dict) -> bool:
    """Whether the run has a resource step (a gang's JobSet), as its stored template says."""
    spec = (wf.get("status") or {}).get("storedWorkflowTemplateSpec") or {}
    return any("resource" in t for t in spec.get("templates") or ())


def list_runs(target: Target, phases: tuple[str, ...], limit: int,
              now: datetime.datetime | None = None) -> list[runs.Run]:
    """The deployed workflow's runs (``mfargo.runs.Run``), newest first: at most ``limit``, only
    in ``phases`` if any. The workflow must be deployed: a misspelt --name or --branch is an
    error, not an empty list."""
    phases, limit = runs.checked_phases(phases), runs.checked_limit(limit)
    _require_deployed(target)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return runs.listed(target.cluster.runs_of(target.name), phases, limit, now)


def run_status(phase: str | None, metaflow_knows_run: bool) -> str:
    """Argo's phase as Metaflow reports it: Error -> Failed; running before Metaflow knows the run -> Pending."""
    if not phase:
        return "Pending"
    phase = {"Error": "Failed"}.get(phase, phase)
    if phase == "Running" and not metaflow_knows_run:
        return "Pending"
    return phase


def status(target: Target, run_id: str) -> str:
    wf = target.cluster.get_workflow(workflow_name(run_id))
    if wf is None:
        raise DeployError("no run %s in namespace %s" % (run_id, target.namespace))
    phase = (wf.get("status") or {}).get("phase")
    return run_status(phase, phase == "Running" and _metaflow_knows("%s/%s" % (target.flow_name, run_id)))


def _metaflow_knows(pathspec: str) -> bool:
    try:
        from metaflow import Run

        Run(pathspec, _namespace_check=False)
        return True
    except Exception:  # noqa: BLE001 - no run yet, or the metadata service is unreachable
        return False


def parameter_info(flow: Any) -> dict:
    """What Metaflow's `metaflow/parameters` annotation holds (Deployer.from_deployment reads it)."""
    from mfargo.compiler.parameters import type_name_of

    out = {}
    for var, param in flow._get_parameters():
        if param.IS_CONFIG_PARAMETER:
            continue
        out[param.name] = {
            "python_var_name": var,
            "name": param.name,
            "type": type_name_of(param),
            "description": param.kwargs.get("help"),
            "is_required": bool(param.kwargs.get("required", False)),
        }
    return out


def parameter_string(param: Any, value: Any) -> str:
    """The string `python flow.py run --x VALUE` takes: what the compiled template expects."""
    from metaflow.parameters import DelayedEvaluationParameter

    from mfargo.compiler.parameters import cause_of, cli_string, type_name_of

    if isinstance(value, DelayedEvaluationParameter):
        try:
            value = value(return_str=True)  # e.g. Metaflow uploads an IncludeFile's file
        except Exception as e:  # Metaflow's or the user's code: anything
            raise UserError("parameter *%s*: %s" % (param.name, cause_of(e))) from e
    return cli_string(value, type_name_of(param))
