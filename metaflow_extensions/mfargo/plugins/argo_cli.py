"""`python flow.py argo-workflows create ...`: Metaflow's CLI options -> CompileOptions -> YAML.

No compile logic here: this module gathers what the compiler needs from Metaflow's
objects and config, then writes or prints the result. Errors are one line, exit 1.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from metaflow._vendor import click

# Metaflow config copied into every pod's env when set (never secrets: those are Secrets).
POD_CONFIG = (
    "S3_ENDPOINT_URL",
    "S3_SERVER_SIDE_ENCRYPTION",
    "SERVICE_URL",
    "DEFAULT_SECRETS_BACKEND_TYPE",
    "DATATOOLS_S3ROOT",
    "CARD_S3ROOT",
)


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
    Metaflow refuses is refused here with Metaflow's message, in one line."""
    from metaflow.lint import LintWarn

    try:
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
@click.option("--cron-schedule-field", type=click.Choice(["schedules", "schedule"]), default="schedules",
              show_default=True, help="CronWorkflow field: the list (Argo >= 3.6) or the singular one (older).")
@click.option("--workflow", "emit_workflow", is_flag=True, default=False,
              help="Also emit a `kind: Workflow` running the template (generateName: for `argo submit` "
                   "or `kubectl create`, which `kubectl apply` refuses).")
@click.option("--service-account", default=None,
              help="Service account of the runs the bundle creates; subject of the JobSet RoleBinding "
                   "(default: the namespace's `default`).")
@click.option("--check", is_flag=True, default=False,
              help="With --output-file: exit 1 with a diff if the file is not what would be written; never writes.")
@click.option("--graph", is_flag=True, default=False, help="Print the compiled DAG as a Mermaid flowchart.")
@click.option("--notify-on-error", is_flag=True, default=False, help="Notify when a run fails.")
@click.option("--notify-on-success", is_flag=True, default=False, help="Notify when a run succeeds.")
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
@click.pass_obj
def create(obj, only_yaml, only_json, output_file, code_in_image, tags, user_namespace, max_workers,
           workflow_timeout, workflow_priority, cron_schedule_field, emit_workflow, service_account, check, graph,
           notify_on_error, notify_on_success, notify_slack_webhook_url_secret,
           notify_pager_duty_integration_key_secret, notify_incident_io_api_key_secret,
           incident_io_alert_source_config_id, incident_io_metadata, notify_image, notify_slack_webhook_url,
           notify_pager_duty_integration_key):
    from mfargo import output, pipeline
    from mfargo.compiler import CompileError, with_code_package

    try:
        if notify_slack_webhook_url or notify_pager_duty_integration_key:
            raise CompileError(
                "a webhook URL or key would be written into the YAML: put it in a Kubernetes Secret and pass "
                "--notify-slack-webhook-url-secret / --notify-pager-duty-integration-key-secret SECRET[:KEY]"
            )
        if check and not output_file:
            raise CompileError("--check compares with a file: give --output-file FILE")
        deploy = not (only_yaml or only_json or output_file or graph)  # to the cluster (cluster_cli)
        options = cluster_cli.with_token(
            obj, _options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout, workflow_priority),
            deploy,
        )
        workflow = pipeline.compile_ir(obj.flow, obj.graph, options, _flow_decorators(obj.flow))
        if graph:
            sys.stdout.write(pipeline.as_mermaid(workflow))
            return
        workflow = _with_deployment_options(
            workflow, cron_schedule_field, emit_workflow, service_account, notify_on_error, notify_on_success,
            notify_slack_webhook_url_secret, notify_pager_duty_integration_key_secret, notify_image,
            (notify_incident_io_api_key_secret, incident_io_alert_source_config_id, incident_io_metadata),
        )
        if not code_in_image:
            # Only a flow that compiles is packaged (and, unless --only-yaml or --check, uploaded).
            upload = (deploy or bool(output_file)) and not only_yaml and not check
            workflow = with_code_package(workflow, _code_package(obj, upload=upload))
        docs = cluster_cli.finish(obj, pipeline.documents(workflow), deploy, only_json)
        if deploy:
            return
        text = pipeline.as_json(docs) if only_json else pipeline.as_yaml(docs)
    except CompileError as e:
        click.secho("mfargo: %s" % e, fg="red", err=True)
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
        output.write_atomic(output_file, text)
        click.echo("Wrote %s" % output_file, err=True)
    else:
        sys.stdout.write(text)


def _check(path: str, text: str) -> int:
    """0 when the file holds exactly `text`; else print a unified diff and return 1."""
    import os

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


def _secret_ref(value, default_key: str, option: str):
    from mfargo.compiler import CompileError
    from mfargo.compiler.ir import SecretRef

    if value is None:
        return None
    name, _, key = value.partition(":")
    if not name or (_ and not key):
        raise CompileError("%s takes SECRET or SECRET:KEY, got %r" % (option, value))
    return SecretRef(name=name, key=key or default_key)


def _with_deployment_options(workflow, cron_field, emit_workflow, service_account, on_error, on_success,
                             slack_secret, pager_duty_secret, notify_image, incident_io=(None, None, ())):
    """Create options and Metaflow's Argo Events config -> workflow.deployment."""
    from metaflow import metaflow_config

    from mfargo.compiler import CompileError
    from mfargo.compiler.ir import Bundle, Notify

    slack = _secret_ref(slack_secret, "url", "--notify-slack-webhook-url-secret")
    pager_duty = _secret_ref(pager_duty_secret, "integration-key", "--notify-pager-duty-integration-key-secret")
    io_secret, io_source, io_metadata = incident_io
    incident = _secret_ref(io_secret, "api-key", "--notify-incident-io-api-key-secret")
    if incident and not io_source:
        raise CompileError("incident.io alerts need --incident-io-alert-source-config-id")
    metadata = []
    for item in io_metadata or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CompileError("--incident-io-metadata takes KEY=VALUE, got %r" % item)
        metadata.append((key, value))
    if (on_error or on_success) and not (slack or pager_duty or incident):
        raise CompileError("--notify-on-error/--notify-on-success need --notify-slack-webhook-url-secret, "
                           "--notify-pager-duty-integration-key-secret or --notify-incident-io-api-key-secret")
    dep = workflow.deployment
    notify = Notify(on_error=on_error, on_success=on_success, slack=slack, pager_duty=pager_duty,
                    incident_io=incident, incident_io_source=io_source if incident else None,
                    incident_io_metadata=tuple(sorted(metadata)),
                    image=notify_image or workflow.steps[workflow.start].compute.image)
    triggers = dep.triggers
    if triggers is not None:
        config = {
            "sensor_namespace": getattr(metaflow_config, "ARGO_EVENTS_SENSOR_NAMESPACE", None),
            "event_bus": getattr(metaflow_config, "ARGO_EVENTS_EVENT_BUS", None),
            "event_source": getattr(metaflow_config, "ARGO_EVENTS_EVENT_SOURCE", None),
            "event_name": getattr(metaflow_config, "ARGO_EVENTS_EVENT", None),
            "service_account": getattr(metaflow_config, "ARGO_EVENTS_SERVICE_ACCOUNT", None),
        }
        triggers = replace(triggers, **{k: v for k, v in config.items() if v})
    bundle = Bundle(cron_field=cron_field, workflow=emit_workflow, service_account=service_account)
    return replace(workflow, deployment=replace(dep, notify=notify, triggers=triggers, bundle=bundle))


def _flow_decorators(flow):
    return [d for decos in flow._flow_decorators.values() for d in decos]


def _options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout, workflow_priority):
    from metaflow import current, metaflow_config
    from metaflow.util import dict_to_cli_options

    from mfargo.compiler import CompileError, CompileOptions

    if obj.workflow_name_option and current.get("project_name"):
        raise CompileError("--name cannot be used with @project: the project names the workflow")
    top_level: dict = {}
    for deco in _flow_decorators(obj.flow):
        top_level.update(deco.get_top_level_options())
    for key in ("config", "config_value", "local_config_file"):
        top_level.pop(key, None)  # configs reach pods through METAFLOW_FLOW_CONFIG_VALUE
    project = {}
    if current.get("project_name"):
        project = {k: current.get(k) for k in ("project_name", "branch_name", "project_flow_name")}
    config_env = tuple(
        ("METAFLOW_%s" % key, str(getattr(metaflow_config, key)))
        for key in POD_CONFIG
        if getattr(metaflow_config, key, None)
    )
    return CompileOptions(
        name=obj.workflow_name_option,
        namespace=metaflow_config.KUBERNETES_NAMESPACE or None,
        max_workers=max_workers,
        timeout_seconds=workflow_timeout,
        priority=workflow_priority,
        tags=tuple(tags or ()),
        user_namespace=user_namespace,
        code_in_image=code_in_image,
        datastore=obj.flow_datastore.TYPE,
        datastore_root=obj.flow_datastore.datastore_root,
        metadata=obj.metadata.TYPE,
        environment=obj.environment.TYPE,
        top_level_options=tuple(dict_to_cli_options(top_level)),
        config_env=config_env,
        project=tuple(sorted(project.items())),
        default_image=_default_image(),
    )


def _default_image() -> str:
    from mfargo.compiler.decorators import _kubernetes_defaults

    return _kubernetes_defaults()["image"]


def _code_package(obj, upload: bool):
    """Metaflow's content-addressed code package: its URL is known before any upload."""
    from hashlib import sha1

    from metaflow.package import MetaflowPackage

    from mfargo.compiler import CompileError
    from mfargo.compiler.ir import CodeSource

    if obj.flow_datastore.TYPE == "local":
        raise CompileError(
            "pods cannot download a code package from a local datastore: use --code-in-image DIR, "
            "or a remote datastore (--datastore=s3)"
        )
    package = MetaflowPackage(obj.flow, obj.environment, obj.echo, suffixes=obj.package_suffixes)
    blob = package.blob
    blob = blob.getvalue() if hasattr(blob, "getvalue") else blob
    sha = sha1(blob).hexdigest()
    store = obj.flow_datastore.ca_store
    url = store._storage_impl.full_uri(store._storage_impl.path_join(store._prefix, sha[:2], sha))
    if upload:
        [(url, sha)] = obj.flow_datastore.save_data([blob], len_hint=1)
    return CodeSource(
        package_url=url,
        package_sha=sha,
        package_datastore=obj.flow_datastore.TYPE,
        package_metadata=package.package_metadata,
        package_commands=_fetch_commands(obj.environment, url, obj.flow_datastore.TYPE, package.package_metadata),
    )


def _fetch_commands(environment, url: str, datastore: str, metadata: str) -> tuple[str, ...]:
    """Download and unpack the package in the pod, from Metaflow's own command parts.

    Metaflow writes these for a script wrapped in `bash -c "..."` (its `\\"` escapes);
    the shlex pass below is that wrapping undone once, so they run as plain lines.
    """
    import shlex

    from metaflow.package import MetaflowPackage

    commands = ["mkdir -p metaflow", "cd metaflow", environment._get_download_code_package_cmd(url, datastore)]
    commands += MetaflowPackage.get_extract_commands(metadata, "job.tar", dest_dir=".")
    for key, value in MetaflowPackage.get_post_extract_env_vars(metadata, dest_dir="$(pwd)").items():
        if key.endswith(":"):  # Metaflow's convention: replace the variable
            commands.append("export %s=%s" % (key[:-1], value))
        else:  # prepend to it
            commands.append("export %s=%s:$(printenv %s)" % (key, value, key))
    return tuple(shlex.split('bash -c "%s"' % c)[2] for c in commands)


from . import cluster_cli  # noqa: E402 - deploy, trigger, status, ... (needs the group above)
