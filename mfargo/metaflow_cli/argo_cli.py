"""`python flow.py argo-workflows ...`: the command group and `create`.

Each command declares its options where it is declared and calls the modules that do the
work: `metaflow_inputs` (Metaflow's objects -> CompileOptions), `mfargo.pipeline`
(compile, build, validate, text) and, only when a cluster is involved, `mfargo.deploy`.
The run commands (trigger, status, ...) are in `cluster_cli`. Errors are one line, exit 1.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from dataclasses import replace

from metaflow._vendor import click

from mfargo.base import versions

from metaflow_extensions.mfargo.plugins import resume_clone, run_heartbeat

from . import cluster_cli, decorator_lifecycle
from . import metaflow_inputs as inputs


@click.group()
def cli():
    pass


@cli.group(name="argo-workflows", help="Compile this flow to Argo Workflows (mfargo).")
@click.option("--name", default=None, help="WorkflowTemplate name (default: the flow's name).")
@click.pass_obj
def argo_workflows(obj, name=None):
    _check_graph(obj)
    obj.workflow_name_option = name


def _check_graph(obj):
    """Metaflow's own graph checks (its linter, as core's group runs them): a flow
    Metaflow refuses is refused here with Metaflow's message, in one line. Its loop check
    runs in linear time (graph_lint)."""
    from metaflow.lint import LintWarn

    from .graph_lint import linear_loop_check

    try:
        with linear_loop_check():
            obj.check(obj.graph, obj.flow, obj.environment, pylint=obj.pylint)
    except LintWarn as e:
        where = " (line %d)" % e.line_no if e.line_no else ""
        click.secho("mfargo: %s%s: %s" % (e.headline, where, " ".join(e.message.split())), fg="red", err=True)
        sys.exit(1)


@argo_workflows.command(help="Compile the flow to a WorkflowTemplate and write or print it.")
@click.option("--only-yaml", is_flag=True, default=False, help="Print the YAML; touch no cluster and no datastore.")
@click.option("--only-json", is_flag=True, default=False, hidden=True, help="Print the WorkflowTemplate as JSON.")
@click.option("--output-file", default=None, help="Write the YAML to this file (atomically).")
@click.option("--code-in-image", default=None, help="The flow's code is baked into the image at this directory.")
@click.option("--tag", "tags", multiple=True, default=None, help="Tag every run with this (repeatable).")
@click.option("--namespace", "user_namespace", default=None, help="Metaflow namespace of the runs' tasks.")
@click.option("--max-workers", default=100, show_default=True, type=int, help="Pods running at once (spec.parallelism).")
@click.option("--workflow-timeout", default=None, type=int, help="Seconds before the whole run fails.")
@click.option("--workflow-priority", default=None, type=int, help="Argo workflow priority.")
@click.option("--ttl-after-success", default=86400, show_default=True, type=int,
              help="Seconds a succeeded run (and its JobSets) is kept (ttlStrategy); -1: forever.")
@click.option("--ttl-after-failure", default=604800, show_default=True, type=int,
              help="Seconds a failed run (and its JobSets) is kept (ttlStrategy); -1: forever.")
@click.option("--pod-gc", default="OnWorkflowSuccess", show_default=True,
              type=click.Choice(["OnWorkflowSuccess", "OnWorkflowCompletion", "OnPodSuccess", "OnPodCompletion",
                                 "Never"]),
              help="When finished pods are deleted (podGC); Never keeps them until the run is deleted.")
@click.option("--argo-version", type=click.Choice(versions.ARGO_VERSIONS), default=versions.DEFAULT_ARGO_VERSION,
              show_default=True, help="Argo release to write for (spellings that differ, e.g. the CronWorkflow "
                                      "schedule) and validate against.")
@click.option("--jobset-version", default=versions.DEFAULT_JOBSET_VERSION, show_default=True, metavar="X.Y",
              help="JobSet release of the cluster: the gang's manifest is validated against its CRD "
                   "(v%d.%d or newer)." % versions.MIN_JOBSET)
@click.option("--gang-priority-class", default=None, metavar="NAME",
              help="Kueue WorkloadPriorityClass of every gang step without @jobset(priority_class=...).")
@click.option("--max-concurrent-runs", default=None, type=int, metavar="N",
              help="At most N runs of the flow run at once; more wait (Pending) for one to end (Argo's semaphore, "
                   "its limit in a ConfigMap the bundle brings).")
@click.option("--schedule-concurrency-policy", default=None, type=click.Choice(["Allow", "Forbid", "Replace"]),
              help="With @schedule: while the last scheduled run still runs, start another (Allow, Argo's default), "
                   "skip this one (Forbid) or replace it (Replace).")
@click.option("--workflow", "emit_workflow", is_flag=True, default=False,
              help="Also emit a `kind: Workflow` running the template (generateName: for `argo submit` "
                   "or `kubectl create`, which `kubectl apply` refuses).")
@click.option("--service-account", default=None,
              help="Service account of the runs the bundle creates; subject of the JobSet RoleBinding "
                   "(default: the namespace's `default`).")
@click.option("--check", is_flag=True, default=False,
              help="With --output-file: exit 1 with a diff if the file is not what would be written; never writes.")
@click.option("--graph", is_flag=True, default=False, help="Print the compiled DAG as a Mermaid flowchart.")
@click.option("--no-cache", is_flag=True, default=False,
              help="Compile from scratch: neither read nor write mfargo's cache of compiled text.")
@click.option("--notify-on-error/--no-notify-on-error", default=False, help="Notify when a run fails.")
@click.option("--notify-on-success/--no-notify-on-success", default=False, help="Notify when a run succeeds.")
@click.option("--notify-slack-webhook-url-secret", default=None, metavar="SECRET[:KEY]",
              help="Kubernetes Secret (key, default `url`) holding the Slack webhook URL.")
@click.option("--notify-pager-duty-integration-key-secret", default=None, metavar="SECRET[:KEY]",
              help="Kubernetes Secret (key, default `integration-key`) holding the PagerDuty routing key.")
@click.option("--notify-incident-io-api-key-secret", default=None, metavar="SECRET[:KEY]",
              help="Kubernetes Secret (key, default 'api-key') holding the incident.io API key.")
@click.option("--incident-io-alert-source-config-id", default=None, help="incident.io alert source config id.")
@click.option("--incident-io-metadata", multiple=True, metavar="KEY=VALUE", help="Metadata on incident.io alerts.")
@click.option("--notify-image", default=None, help="Image of the notification pods (needs python3; default: start step's).")
@click.option("--notify-slack-webhook-url", default=None, hidden=True)
@click.option("--notify-pager-duty-integration-key", default=None, hidden=True)
@click.option("--notify-incident-io-api-key", default=None, hidden=True)
@click.option("--workflow-title", default=None, help="Title shown by the Argo Workflows UI (annotation).")
@click.option("--workflow-description", default=None, help="Description shown by the Argo Workflows UI (annotation).")
@click.option("--auto-emit-argo-events/--no-auto-emit-argo-events", default=None,
              help="Each task publishes the Argo Event metaflow.<flow>.<step> on success (what "
                   "@trigger_on_finish waits for). Default: on when METAFLOW_ARGO_EVENTS_WEBHOOK_URL is set.")
@click.option("--enable-heartbeat-daemon/--no-enable-heartbeat-daemon", default=None,
              help="A daemon pod sends the run's heartbeat to Metaflow's metadata service, so its UI shows a "
                   "waiting run as running (default: on with --metadata=service).")
@click.option("--enable-error-msg-capture/--no-enable-error-msg-capture", default=None, hidden=True)
@click.option("--authorize", default=None,
              help="Authorize this deployment with the production token of the deployed version "
                   "(cached in METAFLOW_HOME, so needed once).")
@click.option("--generate-new-token", is_flag=True, default=False,
              help="Generate a new production token (moves the production flow to a new namespace).")
@click.option("--new-token", "given_token", default=None,
              help="Use this production token (moves the production flow to its namespace).")
@click.option("--replace-other", is_flag=True, default=False,
              help="Replace the deployed objects of the same names even if another flow, @project or branch "
                   "deployed them (or they are not Metaflow's); refused by default.")
@click.option("--deployer-attribute-file", default=None, hidden=True,
              help="Write the workflow name to this file (Metaflow's Deployer API).")
@click.pass_obj
def create(obj, only_yaml, only_json, output_file, code_in_image, tags, user_namespace, max_workers,
           workflow_timeout, workflow_priority, ttl_after_success, ttl_after_failure, pod_gc, argo_version, jobset_version, gang_priority_class, max_concurrent_runs, schedule_concurrency_policy, emit_workflow, service_account, check, graph, no_cache,
           notify_on_error, notify_on_success, notify_slack_webhook_url_secret,
           notify_pager_duty_integration_key_secret, notify_incident_io_api_key_secret,
           incident_io_alert_source_config_id, incident_io_metadata, notify_image, notify_slack_webhook_url,
           notify_pager_duty_integration_key, notify_incident_io_api_key, workflow_title, workflow_description,
           auto_emit_argo_events, enable_heartbeat_daemon, enable_error_msg_capture, authorize, generate_new_token,
           given_token, replace_other, deployer_attribute_file):
    from metaflow.exception import MetaflowException

    from mfargo import cache, include_file, output, pipeline
    from mfargo.compiler import CompileError, naming, with_code_package, with_environment
    from mfargo.base.errors import UserError

    try:
        if notify_slack_webhook_url or notify_pager_duty_integration_key or notify_incident_io_api_key:
            raise CompileError(
                "a webhook URL or key would be written into the YAML: put it in a Kubernetes Secret and pass "
                "--notify-slack-webhook-url-secret / --notify-pager-duty-integration-key-secret / "
                "--notify-incident-io-api-key-secret SECRET[:KEY]"
            )
        inputs.refuse_unsupported(enable_error_msg_capture=enable_error_msg_capture)
        if check and not output_file:
            raise CompileError("--check compares with a file: give --output-file FILE")
        if output_file and not check:
            output.check_target(output_file)  # before compiling and uploading anything
        deploying = not (only_yaml or only_json or output_file or graph)
        decorator_lifecycle.attach_as_core_create(obj)
        options = inputs.compile_options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout,
                                         workflow_priority, auto_emit_argo_events, enable_heartbeat_daemon)
        options = replace(options, title=workflow_title, description=workflow_description,
                          cleanup=_cleanup(ttl_after_success, ttl_after_failure, pod_gc),
                          gang_priority_class=gang_priority_class)
        token_request = (authorize, given_token, generate_new_token)
        deployment = _deployment(obj, deploying, token_request, replace_other) \
            if deploying or given_token or generate_new_token else None
        if deployment:
            options = replace(options, production_token=deployment[2])
        included = include_file.defaults(obj)  # offline: descriptors only
        options = replace(options, include_files=tuple((f.parameter, f.descriptor) for f in included),
                          include_file_paths=tuple((f.parameter, f.in_flow_dir) for f in included if f.in_flow_dir))
        workflow = pipeline.compile_ir(obj.flow, obj.graph, options, inputs.flow_decorators(obj.flow))
        note = naming.changed_name_note(
            options.name or dict(options.project).get("project_flow_name") or obj.graph.name, workflow.name)
        if note:
            click.secho("mfargo: %s" % note, fg="yellow", err=True)
        workflow = with_environment(workflow, *inputs.step_environments(obj))
        if graph:
            sys.stdout.write(pipeline.as_mermaid(workflow))
            return
        workflow = inputs.with_deployment_options(
            workflow, (argo_version, jobset_version), emit_workflow, service_account, notify_on_error, notify_on_success,
            notify_slack_webhook_url_secret, notify_pager_duty_integration_key_secret, notify_image,
            (notify_incident_io_api_key_secret, incident_io_alert_source_config_id, incident_io_metadata),
            (max_concurrent_runs, schedule_concurrency_policy),
        )
        # Text only (no deploying, no token stamped, no Deployer file): the cache may answer.
        cacheable = not (no_cache or deploying or deployment or deployer_attribute_file)
        form, flow_file = "json" if only_json else "yaml", inspect.getfile(type(obj.flow))
        key = text = None
        if not code_in_image:
            # Only a flow that compiles is packaged (and, unless --only-yaml or --check, uploaded).
            upload = (deploying or bool(output_file)) and not only_yaml and not check
            package = inputs.code_package(obj)
            if cacheable and not upload:  # keyed on what the package holds: a hit makes no tarball
                key = cache.key(with_code_package(workflow, inputs.code_source(obj, package, fingerprint=True)),
                                form, flow_file)
                text = cache.get(key) if key else None
            if text is None:
                workflow = with_code_package(workflow, inputs.code_source(obj, package, upload=upload))
        if included and (deploying or output_file) and not only_yaml and not check:
            include_file.upload(obj, included)
        if cacheable and key is None:
            key = cache.key(workflow, form, flow_file)
            text = cache.get(key) if key else None
        if text is None:
            docs = pipeline.documents(workflow)
            for warning in pipeline.size_warnings(docs):
                click.secho("mfargo: warning: %s" % warning, fg="yellow", err=True)
            if deployment:
                _finish(obj, deployment, docs, deploying)
            if deployer_attribute_file:
                _write_deployer_attributes(obj, deployer_attribute_file, docs, only_json)
            if deploying:
                return
            text = pipeline.as_json(docs) if only_json else pipeline.as_yaml(docs)
            if key:
                cache.put(key, text)
    except (CompileError, UserError, MetaflowException) as e:
        message = getattr(e, "message", None) if isinstance(e, MetaflowException) else str(e)
        click.secho("mfargo: %s" % " ".join(str(message or e).split()), fg="red", err=True)
        sys.exit(1)
    except Exception as e:  # a bug in mfargo: still one line, and nothing written
        if os.environ.get("MFARGO_DEBUG"):
            raise
        click.secho("mfargo: internal error (please report; MFARGO_DEBUG=1 shows the traceback): %s: %s"
                    % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""), fg="red", err=True)
        sys.exit(1)
    if check:
        sys.exit(_check(output_file, text))
    if output_file:
        try:
            output.write_atomic(output_file, text)
        except UserError as e:
            click.secho("mfargo: %s" % e, fg="red", err=True)
            sys.exit(1)
        click.echo("Wrote %s" % output_file, err=True)
    else:
        sys.stdout.write(text)


def _deployment(obj, deploying: bool, token_request: tuple, replace_other: bool):
    """(target, live template, token), resolved once, before compiling: against the cluster
    when deploying (refusing another flow's/branch's template unless --replace-other),
    offline when only --new-token / --generate-new-token ask for a token."""
    from mfargo import deploy

    request = deploy.TokenRequest(*token_request)
    target = replace(deploy.target(obj.flow.name, obj.workflow_name_option), replace_other=replace_other)
    if not deploying:
        token = deploy.offline_token(target, request)
        return (target, None, token) if token else None
    live = target.existing()
    return target, live, deploy.deploy_token(target, live, request)


def _finish(obj, deployment: tuple, docs: list[dict], deploying: bool) -> None:
    """Stamp the token on the documents; when deploying, the deployment's annotations, then apply."""
    from mfargo import deploy

    target, live, token = deployment
    if not deploying:
        deploy.stamp_token(docs[0], token)
        return
    deploy.stamp_deployment(target, docs, token, deploy.parameter_info(obj.flow))
    deploy.apply(target, live, docs, token, obj.echo)


def _write_deployer_attributes(obj, path: str, docs: list[dict], only_json: bool) -> None:
    """What Metaflow's Deployer API reads back after `create`."""
    payload = {"name": docs[0]["metadata"]["name"], "flow_name": obj.flow.name,
               "metadata": obj.metadata.metadata_str()}
    if only_json:
        payload["additional_info"] = {"workflow_template": docs[0]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f)


def _check(path: str, text: str) -> int:
    """0 when the file holds exactly `text`; else print a unified diff and return 1."""
    from mfargo import pipeline

    current = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            current = f.read()
    delta = pipeline.diff(path, current, text)
    if not delta:
        click.echo("%s is up to date" % path, err=True)
        return 0
    sys.stdout.write(delta)
    click.secho("mfargo: %s is stale: rerun without --check to update it" % path, fg="red", err=True)
    return 1


for _command in cluster_cli.COMMANDS + (run_heartbeat.heartbeat, resume_clone.clone_task):
    argo_workflows.add_command(_command)


def _cleanup(ttl_after_success: int, ttl_after_failure: int, pod_gc: str):
    """--ttl-after-success/--ttl-after-failure/--pod-gc as the IR's Cleanup (-1 / Never: none)."""
    from mfargo.compiler import CompileError, ir

    # Checked here, not with click.IntRange: Metaflow's Deployer API maps option types to
    # Python types and fails on IntRange (KeyError in metaflow/runner/click_api.py).
    from mfargo.compiler import rules

    for option, value in (("--ttl-after-success", ttl_after_success), ("--ttl-after-failure", ttl_after_failure)):
        if value < -1:
            raise CompileError("%s takes seconds >= 0, or -1 (keep forever), not %d" % (option, value))
        rules.count(None, None, option, value, minimum=-1, maximum=rules.INT32_MAX)  # Argo's TTLStrategy: int32
    return ir.Cleanup(
        seconds_after_success=None if ttl_after_success < 0 else ttl_after_success,
        seconds_after_failure=None if ttl_after_failure < 0 else ttl_after_failure,
        pod_gc=None if pod_gc == "Never" else pod_gc,
    )

